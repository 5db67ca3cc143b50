//! SVG charts next to results.json: one per section and unit (latencies in ms, rates in
//! Gbit/s, ...), each figure a category on the x axis, the median of each side a point with
//! a min–max whisker, figures that differ only in their number of attachments joined by a
//! line (ADD latency over 1, 2, 4 attachments). A chart whose values span more than two decades uses a
//! log10 axis.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use plotters::prelude::*;

use super::report::{fmt, Figure};
use super::Side;

const COLORS: [RGBColor; 3] =
    [RGBColor(0xd6, 0x27, 0x28), RGBColor(0x1f, 0x77, 0xb4), RGBColor(0x7f, 0x7f, 0x7f)];

/// Writes every chart; returns the files.
pub fn write_all(figures: &[Figure], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut groups: Vec<((&str, &str), Vec<&Figure>)> = Vec::new();
    for f in figures {
        let key = (f.section, f.unit);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(f),
            None => groups.push((key, vec![f])),
        }
    }
    let mut files = Vec::new();
    for ((section, unit), figs) in groups {
        if !figs.iter().any(|f| Side::ALL.iter().any(|s| f.median(*s).is_some())) {
            continue;
        }
        let path = dir.join(format!("{section}_{}.svg", slug(unit)));
        // Figures of one metric side by side (ADD over 1, 2, 4 attachments), in the order
        // the metrics first appear.
        let mut metrics: Vec<&str> = Vec::new();
        for f in &figs {
            if !metrics.contains(&f.metric) {
                metrics.push(f.metric);
            }
        }
        let mut figs = figs;
        figs.sort_by_key(|f| metrics.iter().position(|m| *m == f.metric));
        chart(&path, section, unit, &figs).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        files.push(path);
    }
    Ok(files)
}

fn slug(unit: &str) -> String {
    let s: String =
        unit.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' }).collect();
    s.trim_matches('_').to_owned()
}

/// A short x label: the metric and the parameters that tell the figures apart.
fn label(f: &Figure) -> String {
    let mut parts = vec![f.metric.to_owned()];
    for (k, v) in &f.params {
        let v = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
        match k.as_str() {
            "attachments" if f.section == "cni" => parts.push(format!("{v} att")),
            "rate" | "burst" => parts.push(v),
            _ => {}
        }
    }
    parts.join(" ")
}

/// Two figures are points of one series when only their number of attachments differs.
fn series(a: &Figure, b: &Figure) -> bool {
    let rest = |f: &Figure| {
        f.params
            .iter()
            .filter(|(k, _)| *k != "attachments")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    a.metric == b.metric && a.params.contains_key("attachments") && rest(a) == rest(b)
}

fn chart(path: &Path, section: &str, unit: &str, figs: &[&Figure]) -> Result<(), Box<dyn std::error::Error>> {
    let spreads: Vec<[Option<(f64, f64, f64)>; 3]> = figs
        .iter()
        .map(|f| [f.spread(Side::Plexus), f.spread(Side::Reference), f.spread(Side::Baseline)])
        .collect();
    let values: Vec<f64> =
        spreads.iter().flatten().flatten().flat_map(|s| [s.0, s.2]).filter(|v| v.is_finite()).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log = lo > 0.0 && hi / lo > 100.0;
    let y = |v: f64| if log { v.max(1e-12).log10() } else { v };
    // Headroom above the highest whisker keeps the legend (upper right) off the data.
    let (ymin, ymax) = if log {
        ((y(lo) - 0.1).floor(), (y(hi) + 0.6).ceil())
    } else {
        (0.0, if hi > 0.0 { hi * 1.45 } else { 1.0 })
    };
    let n = figs.len();
    let labels: Vec<String> = figs.iter().map(|f| label(f)).collect();

    let width = (190 * n as u32).clamp(640, 1900);
    let root = SVGBackend::new(path, (width, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{section} ({unit}{})", if log { ", log scale" } else { "" }), ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), ymin..ymax)?;
    let x_fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let y_fmt = |v: &f64| if log { fmt(10f64.powf(*v)) } else { fmt(*v) };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&x_fmt)
        .x_label_style(("sans-serif", 11))
        .y_labels(if log { (ymax - ymin) as usize + 1 } else { 10 })
        .y_desc(unit)
        .y_label_formatter(&y_fmt)
        .draw()?;

    for side in Side::ALL {
        let color = COLORS[side.index()];
        let offset = (side.index() as f64 - 1.0) * 0.12;
        let points: Vec<(usize, (f64, f64, f64))> =
            spreads.iter().enumerate().filter_map(|(i, s)| s[side.index()].map(|s| (i, s))).collect();
        if points.is_empty() {
            continue;
        }
        for (i, (min, _, max)) in &points {
            let x = *i as f64 + offset;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, y(*min)), (x, y(*max))],
                color.stroke_width(2),
            )))?;
        }
        // Lines join consecutive figures of the same metric.
        for pair in points.windows(2) {
            let ((a, sa), (b, sb)) = (pair[0], pair[1]);
            if b == a + 1 && series(figs[a], figs[b]) {
                let line = vec![(a as f64 + offset, y(sa.1)), (b as f64 + offset, y(sb.1))];
                chart.draw_series(LineSeries::new(line, color.stroke_width(1)))?;
            }
        }
        chart
            .draw_series(
                points.iter().map(|(i, s)| Circle::new((*i as f64 + offset, y(s.1)), 4, color.filled())),
            )?
            .label(side.name())
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()?;
    root.present()?;
    Ok(())
}
