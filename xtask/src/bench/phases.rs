//! Where an agent's ADD and DEL time goes, from its `plexus_cni_phase_duration_seconds`
//! (issue #17): the histograms' sums and counts are read before and after a run of pods, and
//! their differences divided by the pods give each phase's time per pod. Per (verb,
//! workload, side) the runs' values are kept and their median printed after the table.
//!
//! `netns` and `ipam` are timed within `plugins` (the agent says so in the metric's help):
//! they are shown in the table after it, and left out of `sum`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::prom::samples;
use super::stats;
use super::Side;

pub const METRIC: &str = "plexus_cni_phase_duration_seconds";

/// The engine's phases, in the order a request goes through them, then the ones timed within
/// `plugins`.
pub const PHASES: &[&str] = &[
    "lock",
    "state_read",
    "catalog",
    "plan",
    "state_write",
    "plugins",
    "default_route",
    "status",
    "netns",
    "ipam",
];
const NESTED: &[&str] = &["netns", "ipam"];

/// Each phase's (sum of seconds, count) of one verb, as one scrape of /metrics says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals(BTreeMap<String, (f64, f64)>);

impl Totals {
    /// From a /metrics body.
    pub fn read(body: &str, verb: &str) -> Totals {
        let mut totals: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for s in samples(body) {
            if s.labels.get("verb").map(String::as_str) != Some(verb) {
                continue;
            }
            let Some(phase) = s.labels.get("phase") else { continue };
            let entry = totals.entry(phase.clone()).or_default();
            if s.name == format!("{METRIC}_sum") {
                entry.0 += s.value;
            } else if s.name == format!("{METRIC}_count") {
                entry.1 += s.value;
            }
        }
        Totals(totals)
    }

    /// Milliseconds per pod of each phase between `self` (before) and `after`, for `pods`
    /// pods; phases that did not run are left out.
    pub fn per_pod_ms(&self, after: &Totals, pods: usize) -> BTreeMap<String, f64> {
        if pods == 0 {
            return BTreeMap::new();
        }
        after
            .0
            .iter()
            .filter_map(|(phase, (sum, count))| {
                let (sum0, count0) = self.0.get(phase).copied().unwrap_or_default();
                (count - count0 > 0.0).then(|| (phase.clone(), (sum - sum0) * 1e3 / pods as f64))
            })
            .collect()
    }
}

/// The runs' per-pod phase times, by (verb, workload, side); the workload names the pod's
/// secondary attachments, e.g. "2 macvlan".
#[derive(Debug, Default)]
pub struct Breakdown {
    runs: BTreeMap<(String, String, usize), Vec<BTreeMap<String, f64>>>,
}

impl Breakdown {
    pub fn push(&mut self, verb: &str, workload: &str, side: Side, run: BTreeMap<String, f64>) {
        if !run.is_empty() {
            self.runs.entry((verb.to_owned(), workload.to_owned(), side.index())).or_default().push(run);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The median of each phase over the runs (a run without the phase counts as 0).
    fn medians(runs: &[BTreeMap<String, f64>]) -> BTreeMap<&'static str, f64> {
        PHASES
            .iter()
            .filter(|p| runs.iter().any(|r| r.contains_key(**p)))
            .filter_map(|p| {
                let values: Vec<f64> = runs.iter().map(|r| r.get(*p).copied().unwrap_or(0.0)).collect();
                stats::spread(&values).map(|(_, median, _)| (*p, median))
            })
            .collect()
    }

    /// One object per (verb, workload, side): the medians per phase in ms, their sum over
    /// the engine's phases, and every run.
    pub fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .runs
            .iter()
            .map(|((verb, workload, side), runs)| {
                let medians = Self::medians(runs);
                json!({
                    "verb": verb, "workload": workload, "side": Side::ALL[*side].name(),
                    "median_ms": medians, "sum_ms": engine_sum(&medians), "runs": runs,
                })
            })
            .collect();
        Value::Array(rows)
    }

    /// The table printed after the figures: one row per (verb, workload, side), one column
    /// per phase (medians, ms per pod).
    pub fn table(&self) -> String {
        if self.runs.is_empty() {
            return String::new();
        }
        let mut header = vec!["verb".to_owned(), "workload".to_owned(), "side".to_owned()];
        header.extend(
            PHASES.iter().map(|p| if NESTED.contains(p) { format!("({p})") } else { (*p).to_owned() }),
        );
        header.push("sum".to_owned());
        let mut rows = vec![header];
        for ((verb, workload, side), runs) in &self.runs {
            let medians = Self::medians(runs);
            let mut row = vec![verb.clone(), workload.clone(), Side::ALL[*side].name().to_owned()];
            row.extend(
                PHASES
                    .iter()
                    .map(|p| medians.get(p).map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())),
            );
            row.push(format!("{:.2}", engine_sum(&medians)));
            rows.push(row);
        }
        let widths: Vec<usize> =
            (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
        let mut out = String::from(
            "where plexus's time goes (ms per pod, medians; netns and ipam are within plugins):\n",
        );
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| if i < 3 { format!("{c:<w$}") } else { format!("{c:>w$}") })
                .collect();
            out.push_str("  ");
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

/// The sum of the engine's own phases (the nested ones are part of `plugins`).
fn engine_sum(medians: &BTreeMap<&'static str, f64>) -> f64 {
    medians.iter().filter(|(p, _)| !NESTED.contains(p)).map(|(_, v)| v).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(add_plan: (f64, f64), add_plugins: (f64, f64), del_plugins: (f64, f64)) -> String {
        let line = |verb: &str, phase: &str, (sum, count): (f64, f64)| {
            format!(
                "{METRIC}_sum{{verb=\"{verb}\",phase=\"{phase}\"}} {sum}\n{METRIC}_count{{verb=\"{verb}\",phase=\"{phase}\"}} {count}\n\
                 {METRIC}_bucket{{le=\"0.001\",verb=\"{verb}\",phase=\"{phase}\"}} 0\n"
            )
        };
        format!(
            "# TYPE {METRIC} histogram\n{}{}{}# EOF\n",
            line("ADD", "plan", add_plan),
            line("ADD", "plugins", add_plugins),
            line("DEL", "plugins", del_plugins)
        )
    }

    #[test]
    fn a_phase_per_pod_is_the_difference_of_the_sums_over_the_pods() {
        let before = Totals::read(&body((0.010, 4.0), (0.100, 8.0), (0.5, 1.0)), "ADD");
        let after = Totals::read(&body((0.014, 8.0), (0.180, 16.0), (0.9, 2.0)), "ADD");
        let per_pod = before.per_pod_ms(&after, 4);
        assert_eq!(per_pod.len(), 2, "{per_pod:?}");
        assert!((per_pod["plan"] - 1.0).abs() < 1e-9, "{per_pod:?}");
        assert!((per_pod["plugins"] - 20.0).abs() < 1e-9, "{per_pod:?}");
        // A phase that did not run between the scrapes is not there; nothing for no pods.
        let idle = Totals::read(&body((0.014, 8.0), (0.180, 16.0), (0.9, 2.0)), "ADD");
        assert!(after.per_pod_ms(&idle, 4).is_empty());
        assert!(before.per_pod_ms(&after, 0).is_empty());
        // A phase seen for the first time counts from zero.
        assert_eq!(Totals::default().per_pod_ms(&after, 2).get("plan").copied(), Some(7.0));
    }

    #[test]
    fn the_breakdown_has_medians_a_sum_without_the_nested_phases_and_a_table() {
        let mut b = Breakdown::default();
        assert!(b.is_empty() && b.table().is_empty());
        let run = |plan: f64, plugins: f64, ipam: f64| {
            BTreeMap::from([
                ("plan".to_owned(), plan),
                ("plugins".to_owned(), plugins),
                ("ipam".to_owned(), ipam),
            ])
        };
        b.push("ADD", "2 macvlan", Side::Plexus, run(1.0, 10.0, 2.0));
        b.push("ADD", "2 macvlan", Side::Plexus, run(3.0, 30.0, 4.0));
        b.push("ADD", "2 macvlan", Side::Plexus, run(2.0, 20.0, 3.0));
        b.push("DEL", "2 macvlan", Side::Plexus, BTreeMap::new());
        let json = b.to_json();
        assert_eq!(json.as_array().map(Vec::len), Some(1), "an empty run adds no row: {json}");
        assert_eq!(json[0]["median_ms"]["plan"], 2.0);
        assert_eq!(json[0]["median_ms"]["ipam"], 3.0);
        assert_eq!(json[0]["sum_ms"], 22.0, "ipam is within plugins");
        assert_eq!(json[0]["runs"].as_array().map(Vec::len), Some(3));
        let table = b.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[1].contains("plugins") && lines[1].contains("(ipam)"), "{table}");
        assert!(
            lines[2].contains("ADD") && lines[2].contains("plexus") && lines[2].contains("22.00"),
            "{table}"
        );
    }
}
