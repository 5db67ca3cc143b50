//! Small statistics, background load samples and facts about the machine.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// min, median, max of a non-empty set.
pub fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some((v[0], median, v[n - 1]))
}

/// The `p`-th percentile (0..=100) by nearest rank of an unsorted set.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// `a / b`, `None` when either is missing or `b` is zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// The machine's load at one moment: the other engineers and CI share these cores, so each
/// figure carries the load it was measured under.
#[derive(Debug, Clone)]
pub struct Load {
    at: Instant,
    loadavg: [f64; 3],
    /// (busy, total) jiffies of all CPUs from /proc/stat.
    cpu: (u64, u64),
}

pub fn load() -> Load {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut avg = [0.0; 3];
    for (slot, word) in avg.iter_mut().zip(loadavg.split_whitespace()) {
        *slot = word.parse().unwrap_or(0.0);
    }
    Load { at: Instant::now(), loadavg: avg, cpu: cpu_jiffies() }
}

/// (busy, total) of the `cpu` line: busy is everything but idle and iowait.
fn cpu_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else { return (0, 0) };
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|w| w.parse().ok()).collect();
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// What the machine did between two samples: load averages at both ends, and the share of all
/// CPUs busy in between (ours included: the bench's own processes are part of it).
pub fn load_between(before: &Load, after: &Load) -> Value {
    let busy = after.cpu.0.saturating_sub(before.cpu.0) as f64;
    let total = after.cpu.1.saturating_sub(before.cpu.1) as f64;
    json!({
        "loadavg_before": before.loadavg,
        "loadavg_after": after.loadavg,
        "cpu_busy_pct": if total > 0.0 { Some((busy / total * 1000.0).round() / 10.0) } else { None },
        "seconds": (after.at - before.at).as_secs_f64(),
    })
}

/// Kernel, CPU, cores and memory, for results.json.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    let l = load();
    json!({
        "kernel": kernel,
        "cpu_model": model,
        "cores": cores,
        "memory_mib": mem_kib / 1024,
        "loadavg": l.loadavg,
        "reference_plugins": package_version("containernetworking-plugins"),
        "iperf3": package_version("iperf3"),
    })
}

fn package_version(name: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg-query").args(["-W", "-f=${Version}", name]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `20260504T131500Z`: UTC, sortable, usable as a directory name.
pub fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_and_percentiles() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((1.0, 2.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), Some((1.0, 2.5, 4.0)));
        assert_eq!(spread(&[]), None);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[5.0], 99.0), Some(5.0));
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(Some(1.0), Some(4.0)), Some(0.25));
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_709_251_199); // 2024-02-29 23:59:59
        assert_eq!(utc_stamp(t), "20240229T235959Z");
    }
}
