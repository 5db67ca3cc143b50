//! Reading the agent's `/metrics` (Prometheus/OpenMetrics text): just enough to take a
//! histogram's `_sum` and `_count` for some labels, which is how the bench times one step
//! of the agent (the difference of both around one pod's ADD: exact, unlike the buckets).

use std::collections::BTreeMap;

/// One sample line: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a text exposition; comments (`# HELP`, `# TYPE`, `# EOF`), blank lines
/// and lines that do not parse are skipped.
pub fn samples(body: &str) -> Vec<Sample> {
    body.lines().filter_map(|l| parse_line(l.trim())).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(inner)?;
        labels = parsed;
        rest = after;
    }
    // The value; a timestamp or an exemplar (` # {...} v`) may follow.
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" | "Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample { name: name.to_owned(), labels, value })
}

/// `k="v",k2="v2"}` (escapes `\\`, `\"`, `\n` in values) into labels and what follows `}`.
fn parse_labels(s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_owned();
        rest = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key, value);
        rest = rest[end + 1..].trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
}

/// A histogram's `(sum, count)` over its series carrying all of `labels` (other labels are
/// summed over); `None` when no series matches, e.g. before its first observation.
pub fn histogram_sum_count(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<(f64, f64)> {
    let (sum_name, count_name) = (format!("{name}_sum"), format!("{name}_count"));
    let matches = |s: &Sample| labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v));
    let mut found = false;
    let (mut sum, mut count) = (0.0, 0.0);
    for s in samples(body).iter().filter(|s| matches(s)) {
        if s.name == sum_name {
            sum += s.value;
            found = true;
        } else if s.name == count_name {
            count += s.value;
            found = true;
        }
    }
    found.then_some((sum, count))
}

/// The sum of the samples named exactly `name` carrying all of `labels` (a gauge or a counter,
/// e.g. `plexus_portmap_flows`); `None` when no sample matches.
pub fn value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matches =
        |s: &Sample| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v));
    let found: Vec<f64> = samples(body).into_iter().filter(matches).map(|s| s.value).collect();
    (!found.is_empty()).then(|| found.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = r#"# HELP plexus_plugin_duration_seconds Time of one plugin of a configlist.
# TYPE plexus_plugin_duration_seconds histogram
plexus_plugin_duration_seconds_sum{type="bridge",command="ADD"} 0.125
plexus_plugin_duration_seconds_count{type="bridge",command="ADD"} 3
plexus_plugin_duration_seconds_bucket{le="5e-5",type="bridge",command="ADD"} 0
plexus_plugin_duration_seconds_bucket{le="+Inf",type="bridge",command="ADD"} 3
plexus_plugin_duration_seconds_sum{type="plexus-portmap",command="ADD"} 0.0042
plexus_plugin_duration_seconds_count{type="plexus-portmap",command="ADD"} 2
plexus_plugin_duration_seconds_bucket{le="0.0001",type="plexus-portmap",command="ADD"} 1
plexus_plugin_duration_seconds_sum{type="plexus-portmap",command="DEL"} 0.001
plexus_plugin_duration_seconds_count{type="plexus-portmap",command="DEL"} 1
plexus_plugin_duration_seconds_sum{type="odd \"q\", x}",command="ADD"} 7.5
plexus_plugin_duration_seconds_count{type="odd \"q\", x}",command="ADD"} 1
plexus_adds_in_flight 0
# TYPE plexus_portmap_flows gauge
plexus_portmap_flows 100012
# TYPE plexus_portmap_translations counter
plexus_portmap_translations_total{direction="forward"} 7
plexus_portmap_translations_total{direction="reverse"} 5
# EOF
"#;

    #[test]
    fn sum_and_count_of_one_series() {
        let pm = histogram_sum_count(
            BODY,
            "plexus_plugin_duration_seconds",
            &[("type", "plexus-portmap"), ("command", "ADD")],
        );
        assert_eq!(pm, Some((0.0042, 2.0)));
        let del = histogram_sum_count(
            BODY,
            "plexus_plugin_duration_seconds",
            &[("command", "DEL"), ("type", "plexus-portmap")],
        );
        assert_eq!(del, Some((0.001, 1.0)), "label order does not matter");
    }

    #[test]
    fn fewer_labels_sum_over_the_rest() {
        let all = histogram_sum_count(BODY, "plexus_plugin_duration_seconds", &[("type", "plexus-portmap")]);
        assert_eq!(all.map(|(s, c)| ((s * 1e4).round(), c)), Some((52.0, 3.0)));
    }

    #[test]
    fn escaped_values_and_missing_series() {
        let odd = histogram_sum_count(
            BODY,
            "plexus_plugin_duration_seconds",
            &[("type", "odd \"q\", x}"), ("command", "ADD")],
        );
        assert_eq!(odd, Some((7.5, 1.0)));
        assert_eq!(
            histogram_sum_count(BODY, "plexus_plugin_duration_seconds", &[("type", "plexus-bandwidth")]),
            None
        );
        assert_eq!(histogram_sum_count(BODY, "plexus_nothing", &[]), None);
        assert_eq!(histogram_sum_count("", "plexus_plugin_duration_seconds", &[]), None);
    }

    #[test]
    fn gauges_and_counters() {
        assert_eq!(value(BODY, "plexus_portmap_flows", &[]), Some(100_012.0));
        assert_eq!(value(BODY, "plexus_portmap_translations_total", &[]), Some(12.0), "summed over labels");
        assert_eq!(value(BODY, "plexus_portmap_translations_total", &[("direction", "reverse")]), Some(5.0));
        assert_eq!(value(BODY, "plexus_portmap_translations", &[]), None, "exact names only");
        assert_eq!(value(BODY, "plexus_portmap_flow_evictions_total", &[]), None);
    }

    #[test]
    fn sample_lines() {
        let s = samples(BODY);
        assert!(s.iter().all(|s| !s.name.starts_with('#')));
        let inf = s.iter().find(|s| s.labels.get("le").is_some_and(|l| l == "+Inf")).expect("+Inf bucket");
        assert_eq!(inf.value, 3.0);
        let plain = s.iter().find(|s| s.name == "plexus_adds_in_flight").expect("unlabelled sample");
        assert!(plain.labels.is_empty() && plain.value == 0.0);
        assert_eq!(s.iter().filter(|s| s.name.ends_with("_sum")).count(), 4);
        assert!(parse_line("broken{type=\"x\" 1").is_none());
        assert!(parse_line("name{} not-a-number").is_none());
        assert_eq!(parse_line("x_total 4 1700000000").map(|s| s.value), Some(4.0));
    }
}
