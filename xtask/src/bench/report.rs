//! Figures, their JSON (raw runs and summary) and the terminal table.

use serde_json::{json, Map, Value};

use super::stats::{self, Load};
use super::Side;

/// One measured run of one side.
#[derive(Debug, Clone)]
pub struct Run {
    pub value: f64,
    /// What the value was computed from (raw samples, byte counts, CPU time, ...).
    pub detail: Value,
}

/// Why a side has no value: shown in the table as `label`, in JSON as `null` plus the note.
#[derive(Debug, Clone)]
pub struct Missing {
    pub label: &'static str,
    pub note: String,
}

#[derive(Debug, Clone, Default)]
pub struct SideData {
    /// What this side is, for this figure.
    pub what: String,
    pub runs: Vec<Run>,
    pub missing: Option<Missing>,
    /// Runs that failed, with the reason (the figure keeps the others).
    pub failures: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Figure {
    pub section: &'static str,
    pub metric: &'static str,
    pub unit: &'static str,
    pub params: Map<String, Value>,
    pub sides: [SideData; 3],
    pub load: Option<Value>,
    /// What an issue asks of plexus's ratio for this figure, if anything.
    pub target: Option<Target>,
}

/// Which way a target bounds a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    AtLeast,
    AtMost,
}

/// What a target bounds: plexus's median over another side's, or its excess over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// plexus / other, e.g. "crr_rate: plexus/baseline >= 0.95".
    Ratio,
    /// plexus - other, in the figure's unit, e.g. "shim_roundtrip: plexus-baseline <= 0.3 ms".
    Excess,
    /// plexus's own value, in the figure's unit, e.g. "agent_rss_loaded: plexus <= 32 MiB".
    Value,
}

/// A bound on plexus's median against another side's median of the same figure and run, e.g.
/// "crr_rate: plexus/baseline >= 0.95 (issue #12)".
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The other side: the baseline or the reference.
    pub against: Side,
    pub measure: Measure,
    pub bound: Bound,
    /// The bound's value: a ratio, or an excess in the figure's unit.
    pub ratio: f64,
    /// Who asks for it, e.g. `issue #12`.
    pub source: &'static str,
}

impl Target {
    pub fn at_least(against: Side, ratio: f64, source: &'static str) -> Target {
        Target { against, measure: Measure::Ratio, bound: Bound::AtLeast, ratio, source }
    }

    pub fn at_most(against: Side, ratio: f64, source: &'static str) -> Target {
        Target { against, measure: Measure::Ratio, bound: Bound::AtMost, ratio, source }
    }

    /// plexus's median at most `excess` (in the figure's unit) above the other side's.
    pub fn at_most_above(against: Side, excess: f64, source: &'static str) -> Target {
        Target { against, measure: Measure::Excess, bound: Bound::AtMost, ratio: excess, source }
    }

    /// plexus's median at most `value`, in the figure's unit.
    pub fn at_most_value(value: f64, source: &'static str) -> Target {
        Target { against: Side::Plexus, measure: Measure::Value, bound: Bound::AtMost, ratio: value, source }
    }

    fn op(&self) -> &'static str {
        match self.bound {
            Bound::AtLeast => ">=",
            Bound::AtMost => "<=",
        }
    }

    /// The summary key of the quantity it bounds.
    fn ratio_key(&self) -> &'static str {
        match (self.measure, self.against) {
            (Measure::Ratio, Side::Reference) => "plexus_over_reference",
            (Measure::Ratio, _) => "plexus_over_baseline",
            (Measure::Excess, Side::Reference) => "plexus_minus_reference",
            (Measure::Excess, _) => "plexus_minus_baseline",
            (Measure::Value, _) => "plexus",
        }
    }

    fn ratio_label(&self) -> &'static str {
        match (self.measure, self.against) {
            (Measure::Ratio, Side::Reference) => "plexus/ref",
            (Measure::Ratio, _) => "plexus/baseline",
            (Measure::Excess, Side::Reference) => "plexus-ref",
            (Measure::Excess, _) => "plexus-baseline",
            (Measure::Value, _) => "plexus",
        }
    }

    /// A measured value or the bound, as the table shows it: `0.981x`, or `0.214 ms`.
    fn show(&self, v: f64, decimals: usize, unit: &str) -> String {
        match self.measure {
            Measure::Ratio => format!("{v:.decimals$}x"),
            Measure::Excess | Measure::Value => format!("{v:.decimals$} {unit}"),
        }
    }

    /// The measured quantity, and whether it meets the bound (`None`: a side has no value).
    pub fn check(&self, f: &Figure) -> (Option<f64>, Option<bool>) {
        let (p, other) = (f.median(Side::Plexus), f.median(self.against));
        let r = match self.measure {
            Measure::Ratio => stats::ratio(p, other),
            Measure::Excess => p.zip(other).map(|(p, o)| p - o),
            Measure::Value => p,
        };
        let met = r.map(|r| match self.bound {
            Bound::AtLeast => r >= self.ratio,
            Bound::AtMost => r <= self.ratio,
        });
        (r, met)
    }

    fn to_json(&self, f: &Figure) -> Value {
        let (measured, met) = self.check(f);
        let key = match self.measure {
            Measure::Ratio => "ratio",
            Measure::Excess => "excess",
            Measure::Value => "value_of",
        };
        json!({
            key: self.ratio_key(), "bound": self.op(), "value": self.ratio,
            "measured": measured, "met": met, "source": self.source,
        })
    }
}

/// Parameters left out of the table, which would make it too wide to read.
const TABLE_HIDES: &[&str] = &["burst_bits", "source", "streams", "interval_ms", "calls_per_run", "runs"];

/// Cell label of a side the figure does not apply to.
pub const NOT_APPLICABLE: &str = "n/a";
/// Cell label of a plexus feature that other engineers have not landed yet.
pub const NOT_BUILT: &str = "not built yet";

impl Figure {
    pub fn new(section: &'static str, metric: &'static str, unit: &'static str, params: Value) -> Figure {
        let params = match params {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        Figure { section, metric, unit, params, sides: Default::default(), load: None, target: None }
    }

    /// Sets what the figure's ratio must meet.
    pub fn with_target(mut self, t: Target) -> Figure {
        self.target = Some(t);
        self
    }

    /// Says what each side is (`None`: the side does not apply, with the reason).
    pub fn sides(mut self, what: [Result<&str, &str>; 3]) -> Figure {
        for (data, w) in self.sides.iter_mut().zip(what) {
            match w {
                Ok(w) => data.what = w.to_owned(),
                Err(why) => data.missing = Some(Missing { label: NOT_APPLICABLE, note: why.to_owned() }),
            }
        }
        self
    }

    pub fn push(&mut self, side: Side, value: f64, detail: Value) {
        self.sides[side.index()].runs.push(Run { value, detail });
    }

    pub fn fail(&mut self, side: Side, why: String) {
        self.sides[side.index()].failures.push(why);
    }

    pub fn set_missing(&mut self, side: Side, label: &'static str, note: impl Into<String>) {
        self.sides[side.index()].missing = Some(Missing { label, note: note.into() });
    }

    pub fn set_load(&mut self, before: &Load, after: &Load) {
        self.load = Some(stats::load_between(before, after));
    }

    /// (min, median, max) of a side's runs.
    pub fn spread(&self, side: Side) -> Option<(f64, f64, f64)> {
        let d = &self.sides[side.index()];
        if d.missing.is_some() {
            return None;
        }
        stats::spread(&d.runs.iter().map(|r| r.value).collect::<Vec<_>>())
    }

    pub fn median(&self, side: Side) -> Option<f64> {
        self.spread(side).map(|s| s.1)
    }

    /// Why a side has no value, for the table.
    fn empty_label(&self, side: Side) -> &'static str {
        let d = &self.sides[side.index()];
        match &d.missing {
            Some(m) => m.label,
            None if !d.failures.is_empty() => "failed",
            None => "no data",
        }
    }

    fn note(&self, side: Side) -> Option<String> {
        let d = &self.sides[side.index()];
        match &d.missing {
            Some(m) => Some(format!("{}: {}", m.label, m.note)),
            None if d.runs.is_empty() && !d.failures.is_empty() => Some(format!("failed: {}", d.failures[0])),
            None => None,
        }
    }

    /// Compact parameters for the table: `attachments=2 pods=4` (the rest is in the JSON).
    pub fn params_text(&self) -> String {
        self.params
            .iter()
            .filter(|(k, _)| !TABLE_HIDES.contains(&k.as_str()))
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                v => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Every raw run.
    pub fn to_json(&self) -> Value {
        let mut sides = Map::new();
        for s in Side::ALL {
            let d = &self.sides[s.index()];
            sides.insert(
                s.name().into(),
                json!({
                    "what": d.what,
                    "note": self.note(s),
                    "failures": d.failures,
                    "runs": d.runs.iter().map(run_json).collect::<Vec<_>>(),
                }),
            );
        }
        json!({
            "section": self.section, "metric": self.metric, "unit": self.unit, "params": self.params,
            "load": self.load, "sides": sides,
        })
    }

    /// One object of results.json's `summary`: medians, ratios, min and max per side.
    pub fn summary(&self) -> Value {
        let (p, r, b) =
            (self.median(Side::Plexus), self.median(Side::Reference), self.median(Side::Baseline));
        let mut min = Map::new();
        let mut max = Map::new();
        let mut runs = Map::new();
        let mut notes = Map::new();
        for s in Side::ALL {
            let spread = self.spread(s);
            min.insert(s.name().into(), json!(spread.map(|x| x.0)));
            max.insert(s.name().into(), json!(spread.map(|x| x.2)));
            runs.insert(s.name().into(), json!(self.sides[s.index()].runs.len()));
            if let Some(n) = self.note(s) {
                notes.insert(s.name().into(), json!(n));
            }
        }
        json!({
            "section": self.section,
            "metric": self.metric,
            "unit": self.unit,
            "params": self.params,
            "plexus": p,
            "reference": r,
            "baseline": b,
            "plexus_over_reference": stats::ratio(p, r),
            "plexus_over_baseline": stats::ratio(p, b),
            "min": min,
            "max": max,
            "runs": runs,
            "notes": notes,
            "load": self.load,
            "target": self.target.as_ref().map(|t| t.to_json(self)),
        })
    }
}

fn run_json(r: &Run) -> Value {
    json!({"value": r.value, "detail": r.detail})
}

/// A value with about three significant digits.
pub fn fmt(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else if a >= 0.01 || a == 0.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

fn cell(f: &Figure, side: Side) -> String {
    match f.median(side) {
        Some(v) => fmt(v),
        None => f.empty_label(side).to_owned(),
    }
}

fn ratio_cell(a: Option<f64>, b: Option<f64>) -> String {
    stats::ratio(a, b).map(|r| format!("{r:.2}x")).unwrap_or_else(|| NOT_APPLICABLE.to_owned())
}

fn load_cell(f: &Figure) -> String {
    let Some(l) = &f.load else { return "-".into() };
    let avg = |k: &str| l[k][0].as_f64().map(|v| format!("{v:.1}")).unwrap_or_else(|| "?".into());
    let busy = l["cpu_busy_pct"].as_f64().map(|v| format!(" {v:.0}%")).unwrap_or_default();
    format!("{}->{}{busy}", avg("loadavg_before"), avg("loadavg_after"))
}

/// The terminal table: medians per side and the ratios, with the load each figure ran under;
/// then the targets the figures carry, each with its measured ratio and whether it is met.
pub fn table(figures: &[Figure]) -> String {
    let mut out = medians(figures);
    let targets = targets(figures);
    if !targets.is_empty() {
        out.push('\n');
        out.push_str(&targets);
    }
    out
}

/// One line per figure with a target: `portmap  crr_rate  plexus/baseline  0.981x  >= 0.95x
/// met  (issue #12)`; empty when no figure has one.
pub fn targets(figures: &[Figure]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for f in figures {
        let Some(t) = &f.target else { continue };
        let (measured, met) = t.check(f);
        rows.push(vec![
            f.section.to_owned(),
            f.metric.to_owned(),
            t.ratio_label().to_owned(),
            // Three decimals: 0.9449 is no longer "0.94x" next to ">= 0.95x", nor "0.94x MISSED"
            // mistaken for a rounding of 0.95.
            measured.map(|r| t.show(r, 3, f.unit)).unwrap_or_else(|| NOT_APPLICABLE.to_owned()),
            format!("{} {}", t.op(), t.show(t.ratio, 2, f.unit)),
            match met {
                Some(true) => "met".to_owned(),
                Some(false) => "MISSED".to_owned(),
                None => "unknown (a side has no value)".to_owned(),
            },
            format!("({})", t.source),
        ]);
    }
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("targets (of this run's medians):\n");
    out.push_str(&aligned(&rows, &[3]));
    out
}

/// Rows as aligned columns, indented by two spaces: the columns in `right` right-aligned
/// (numbers), the others left-aligned.
fn aligned(rows: &[Vec<String>], right: &[usize]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|t| t.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, text)| {
                if right.contains(&c) {
                    format!("{text:>w$}", w = widths[c])
                } else {
                    format!("{text:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str("  ");
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The table of medians and ratios.
fn medians(figures: &[Figure]) -> String {
    let header = [
        "section",
        "metric",
        "params",
        "plexus",
        "reference",
        "baseline",
        "plexus/ref",
        "plexus/baseline",
        "load (1m avg, cpu)",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for f in figures {
        let (p, r, b) = (f.median(Side::Plexus), f.median(Side::Reference), f.median(Side::Baseline));
        rows.push(vec![
            f.section.to_owned(),
            format!("{} ({})", f.metric, f.unit),
            f.params_text(),
            cell(f, Side::Plexus),
            cell(f, Side::Reference),
            cell(f, Side::Baseline),
            ratio_cell(p, r),
            ratio_cell(p, b),
            load_cell(f),
        ]);
    }
    let widths: Vec<usize> =
        (0..header.len()).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, text)| {
                // Text columns left, numbers right.
                if c < 3 {
                    format!("{text:<w$}", w = widths[c])
                } else {
                    format!("{text:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_table() {
        let mut f = Figure::new("cni", "add_latency", "ms", json!({"attachments": 2})).sides([
            Ok("p"),
            Ok("r"),
            Err("no daemon"),
        ]);
        for v in [4.0, 2.0, 3.0] {
            f.push(Side::Plexus, v, Value::Null);
            f.push(Side::Reference, v * 2.0, Value::Null);
        }
        let s = f.summary();
        assert_eq!(s["plexus"], 3.0);
        assert_eq!(s["reference"], 6.0);
        assert_eq!(s["baseline"], Value::Null);
        assert_eq!(s["plexus_over_reference"], 0.5);
        assert_eq!(s["plexus_over_baseline"], Value::Null);
        assert_eq!(s["min"]["plexus"], 2.0);
        assert_eq!(s["max"]["reference"], 8.0);
        assert!(s["notes"]["baseline"].as_str().is_some_and(|n| n.contains("no daemon")));
        let t = table(&[f]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[2].contains("add_latency (ms)") && lines[2].contains("0.50x") && lines[2].contains("n/a")
        );
    }

    #[test]
    fn targets_bound_the_ratio_of_the_same_run() {
        let fig = |metric: &'static str, p: f64, r: f64, b: f64| {
            let mut f = Figure::new("portmap", metric, "x", json!({}));
            f.push(Side::Plexus, p, Value::Null);
            f.push(Side::Reference, r, Value::Null);
            f.push(Side::Baseline, b, Value::Null);
            f
        };
        let rate = fig("crr_rate", 96.0, 80.0, 100.0).with_target(Target::at_least(
            Side::Baseline,
            0.95,
            "issue #12",
        ));
        let p99 = fig("rr_latency_p99", 110.0, 150.0, 100.0).with_target(Target::at_most(
            Side::Baseline,
            1.05,
            "issue #12",
        ));
        let step = fig("portmap_step_latency", 2.0, 40.0, 1.0).with_target(Target::at_most(
            Side::Reference,
            0.1,
            "issue #12",
        ));
        let mut gone = fig("crr_rate_100k_flows", 1.0, 1.0, 1.0).with_target(Target::at_least(
            Side::Baseline,
            0.95,
            "issue #12",
        ));
        gone.sides[Side::Baseline.index()].runs.clear();
        let plain = fig("add_latency", 1.0, 2.0, 1.0);
        let mut shim = fig("shim_roundtrip", 0.9, 3.2, 0.7).with_target(Target::at_most_above(
            Side::Baseline,
            0.3,
            "issue #17",
        ));
        shim.unit = "ms";

        assert_eq!(rate.target.as_ref().map(|t| t.check(&rate)), Some((Some(0.96), Some(true))));
        assert_eq!(p99.target.as_ref().map(|t| t.check(&p99).1), Some(Some(false)));
        assert_eq!(step.target.as_ref().map(|t| t.check(&step)), Some((Some(0.05), Some(true))));
        assert_eq!(gone.target.as_ref().map(|t| t.check(&gone)), Some((None, None)));

        let s = step.summary();
        assert_eq!(s["target"]["ratio"], "plexus_over_reference");
        assert_eq!(s["target"]["bound"], "<=");
        assert_eq!(s["target"]["value"], 0.1);
        assert_eq!(s["target"]["measured"], 0.05);
        assert_eq!(s["target"]["met"], true);
        assert_eq!(s["target"]["source"], "issue #12");
        assert_eq!(p99.summary()["target"]["met"], false);
        assert_eq!(gone.summary()["target"]["met"], Value::Null);
        assert_eq!(plain.summary()["target"], Value::Null);
        let (excess, met) = shim.target.as_ref().map(|t| t.check(&shim)).expect("a target");
        assert!(excess.is_some_and(|e| (e - 0.2).abs() < 1e-9) && met == Some(true), "{excess:?}");
        let s = shim.summary();
        assert_eq!(s["target"]["excess"], "plexus_minus_baseline");
        assert_eq!(s["target"]["ratio"], Value::Null);
        assert_eq!(s["target"]["value"], 0.3);
        let shim_line = targets(std::slice::from_ref(&shim));
        assert!(
            shim_line.contains("plexus-baseline")
                && shim_line.contains("0.200 ms")
                && shim_line.contains("<= 0.30 ms"),
            "{shim_line}"
        );

        let mut rss =
            fig("agent_rss_loaded", 29.5, 0.0, 40.0).with_target(Target::at_most_value(32.0, "issue #38"));
        rss.unit = "MiB";
        assert_eq!(rss.target.as_ref().map(|t| t.check(&rss)), Some((Some(29.5), Some(true))));
        let s = rss.summary();
        assert_eq!((&s["target"]["value_of"], &s["target"]["value"]), (&json!("plexus"), &json!(32.0)));
        let line = targets(std::slice::from_ref(&rss));
        assert!(
            line.contains("29.500 MiB") && line.contains("<= 32.00 MiB") && line.contains("met"),
            "{line}"
        );
        rss.sides[Side::Plexus.index()].runs[0].value = 33.0;
        assert_eq!(rss.target.as_ref().map(|t| t.check(&rss).1), Some(Some(false)));

        let figures = [rate, p99, step, gone, plain];
        let t = table(&figures);
        let (medians, block) = t.split_once("targets (").expect("a targets block after the table");
        assert_eq!(medians.lines().filter(|l| l.starts_with("portmap")).count(), 5);
        let lines: Vec<&str> = block.lines().skip(1).collect();
        assert_eq!(lines.len(), 4, "one line per figure with a target: {block}");
        assert!(
            lines[0].contains("crr_rate ") && lines[0].contains("0.960x") && lines[0].contains(">= 0.95x")
        );
        assert!(
            lines[0].contains("plexus/baseline")
                && lines[0].contains(" met")
                && lines[0].contains("issue #12")
        );
        assert!(lines[1].contains("1.100x") && lines[1].contains("<= 1.05x") && lines[1].contains("MISSED"));
        assert!(
            lines[2].contains("plexus/ref") && lines[2].contains("0.050x") && lines[2].contains("<= 0.10x")
        );
        assert!(lines[3].contains("n/a") && lines[3].contains("unknown"));
        assert_eq!(targets(&figures[4..]), "", "no target, no block");
        assert!(!table(&figures[4..]).contains("targets"));
    }

    #[test]
    fn formats() {
        assert_eq!(fmt(1234.4), "1234");
        assert_eq!(fmt(12.345), "12.35");
        assert_eq!(fmt(0.5), "0.500");
        assert_eq!(fmt(0.0), "0.000");
    }
}
