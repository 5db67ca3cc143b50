//! bandwidth: ingress shaping (traffic to the pod, kubelet's `ingress-bandwidth`) of a pod on
//! the client's bridge.
//!
//! - rate_accuracy: iperf3 from the client to the pod, measured rate / configured rate, at
//!   10M, 100M and 1G, each with a normal burst (10 ms of traffic, at least two frames: what
//!   the delegating side passes when none is given) and with the burst containerd passes for
//!   kubelet's bandwidth annotations (2^32-1 bits: "no limit"). Measured from the first byte:
//!   a burst is part of what a limit lets through (at line rate, kubelet's bucket empties in
//!   well under a second, so omitting the start would hide it).
//! - ping_p50/p99_saturated: pings from the client to the pod every 10 ms while iperf3 fills
//!   the shaped link at 100M: the queueing delay the shaper adds. The baseline is the same
//!   with no shaping. ping_loss_saturated: the share of those pings never answered (a policer
//!   drops where a queue delays).
//!
//! plexus: `plexus-bandwidth` chained after bridge, when the agent has it; reference:
//! `bandwidth` (tbf on the host veth) chained after bridge.

use std::process::Stdio;
use std::time::Duration;

use plexus_testkit::Proc;
use serde_json::{json, Value};

use super::report::Figure;
use super::runner::{probe, Driver, PlexusDriver, Pod, ReferenceDriver, Runtime, Selection};
use super::stats::{load, percentile};
use super::topology::{bridge_network, Agent, Lab};
use super::traffic::{iperf, iperf_server, ping};
use super::{check_interrupt, Bench, Side};

const IPERF_PORT: u16 = 5201;
const RATES: [(&str, u64); 3] = [("10M", 10_000_000), ("100M", 100_000_000), ("1G", 1_000_000_000)];
const PING_RATE: (&str, u64) = ("100M", 100_000_000);
/// containerd's burst for kubelet's bandwidth annotations (math.MaxUint32 bits).
const KUBELET_BURST: u64 = u32::MAX as u64;

fn burst_bits(kind: &str, rate: u64) -> u64 {
    match kind {
        "kubelet" => KUBELET_BURST,
        _ => (rate / 100).max(2 * 1514 * 8),
    }
}

fn selection(shaped: Option<(u64, u64)>) -> Selection {
    match shaped {
        Some((rate, burst)) => {
            Selection::with("bench-bw", "bandwidth", json!({"ingressRate": rate, "ingressBurst": burst}))
        }
        None => Selection::plain("bench-bw"),
    }
}

/// Attaches a pod, runs `f` on it, deletes it (also when `f` failed).
fn with_pod<T>(
    rt: &Runtime,
    driver: &dyn Driver,
    name: &str,
    sel: Selection,
    f: impl FnOnce(&Pod) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let pod = Pod::new(name, vec![sel])?;
    driver.prepare(&pod)?;
    let added = driver.add(rt, &pod);
    driver.finish(&pod);
    let outcome = added.and_then(|()| f(&pod));
    let deleted = driver.del(rt, &pod);
    let v = outcome?;
    deleted?;
    Ok(v)
}

/// Measured Mbit/s to the pod.
fn shaped_rate(b: &Bench, lab: &Lab, pod: &Pod) -> anyhow::Result<f64> {
    let ip = pod.secondary_ip(1)?;
    let _server = iperf_server(&pod.netns, IPERF_PORT, None)?;
    Ok(iperf(&lab.client, &ip, IPERF_PORT, b.set.shaping_secs, None)?.bits_per_sec)
}

/// Ping RTTs (ms) while iperf3 saturates the path to the pod.
fn saturated_pings(b: &Bench, lab: &Lab, pod: &Pod) -> anyhow::Result<(Vec<f64>, u64)> {
    let ip = pod.secondary_ip(1)?;
    let _server = iperf_server(&pod.netns, IPERF_PORT, None)?;
    // A short run first: it waits for the server, and the bucket of a huge burst drains.
    iperf(&lab.client, &ip, IPERF_PORT, 1, None)?;
    let secs = b.set.ping_secs;
    let load_child = lab
        .client
        .command("iperf3")
        .args(["-c", &ip, "-p", &IPERF_PORT.to_string(), "-t", &(secs + 2).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let _load = Proc(load_child);
    std::thread::sleep(Duration::from_millis(500));
    ping(&lab.client, &ip, secs)
}

pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let agent = Agent::start(lab, &b.bins, "bandwidth-plexus", Side::Plexus, &[])?;
    let rt = Runtime::spawn(&lab.node)?;
    let plexus = PlexusDriver { agent: &agent, shim: b.bins.shim.clone() };
    let bw = json!({"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}});
    plexus.add_network(&bridge_network("bench-bw", 1, Side::Plexus, &agent.ipam_dir(), Some(bw)))?;
    let ref_ipam = lab.path("bandwidth-reference/ipam");
    let mut reference = ReferenceDriver::new(Side::Reference, ref_ipam.clone())?;
    let bw = json!({"type": "bandwidth", "capabilities": {"bandwidth": true}});
    reference.add_network(&bridge_network("bench-bw", 1, Side::Reference, &ref_ipam, Some(bw)))?;
    let base_ipam = lab.path("bandwidth-baseline/ipam");
    let mut baseline = ReferenceDriver::new(Side::Baseline, base_ipam.clone())?;
    baseline.add_network(&bridge_network("bench-bw", 1, Side::Baseline, &base_ipam, None))?;
    // Bridged traffic needs no iptables here.
    lab.bridge_netfilter(false)?;

    let plexus_what = "plexus-bandwidth chained after bridge, via plexus shim + agent; traffic to the pod";
    let reference_what =
        "reference bandwidth (tbf on the host veth) chained after bridge; traffic to the pod";
    let mut rate_figs: Vec<(u64, &str, Figure)> = Vec::new();
    for (label, rate) in RATES {
        for kind in ["normal", "kubelet"] {
            let params = json!({"rate": label, "burst": kind, "burst_bits": burst_bits(kind, rate),
                                "secs": b.set.shaping_secs});
            let f = Figure::new("bandwidth", "rate_accuracy", "measured/configured", params).sides([
                Ok(plexus_what),
                Ok(reference_what),
                Err("no shaping: no configured rate to compare with"),
            ]);
            rate_figs.push((rate, kind, f));
        }
    }
    let mut ping_figs: Vec<(&str, Figure, Figure, Figure)> = Vec::new();
    for kind in ["normal", "kubelet"] {
        let params = json!({"rate": PING_RATE.0, "burst": kind, "burst_bits": burst_bits(kind, PING_RATE.1),
                            "interval_ms": 10, "secs": b.set.ping_secs});
        let what = [Ok(plexus_what), Ok(reference_what), Ok("no shaping, the same saturating iperf3")];
        ping_figs.push((
            kind,
            Figure::new("bandwidth", "ping_p50_saturated", "ms", params.clone()).sides(what),
            Figure::new("bandwidth", "ping_p99_saturated", "ms", params.clone()).sides(what),
            Figure::new("bandwidth", "ping_loss_saturated", "%", params).sides(what),
        ));
    }

    b.progress("bandwidth", "probing plexus-bandwidth");
    let probe_pod =
        Pod::new("bw-probe", vec![selection(Some((PING_RATE.1, burst_bits("normal", PING_RATE.1))))])?;
    let supported = probe(&plexus, &rt, "plexus-bandwidth", &probe_pod);
    drop(probe_pod);
    if let Err((label, note)) = &supported {
        b.progress("bandwidth", &format!("plexus column: {label} ({note})"));
        let all = rate_figs
            .iter_mut()
            .map(|f| &mut f.2)
            .chain(ping_figs.iter_mut().flat_map(|f| [&mut f.1, &mut f.2, &mut f.3]));
        for f in all {
            f.set_missing(Side::Plexus, label, note.clone());
        }
    }
    let shapers: Vec<(Side, &dyn Driver)> =
        [(Side::Plexus, &plexus as &dyn Driver), (Side::Reference, &reference)]
            .into_iter()
            .filter(|(s, _)| *s != Side::Plexus || supported.is_ok())
            .collect();

    let before = load();
    for r in 1..=b.set.repeat {
        for (rate, kind, fig) in &mut rate_figs {
            let mut line = Vec::new();
            for (side, d) in &shapers {
                check_interrupt()?;
                let name = format!("bw{r}-{}-{rate}-{kind}", side.name());
                match with_pod(&rt, *d, &name, selection(Some((*rate, burst_bits(kind, *rate)))), |p| {
                    shaped_rate(b, lab, p)
                }) {
                    Ok(bps) => {
                        fig.push(
                            *side,
                            bps / *rate as f64,
                            json!({"bits_per_second": bps, "configured": rate}),
                        );
                        line.push(format!("{} {:.1} Mbit/s", side.name(), bps / 1e6));
                    }
                    Err(e) => {
                        fig.fail(*side, format!("{e:#}"));
                        line.push(format!("{} failed: {e:#}", side.name()));
                    }
                }
            }
            b.progress(
                "bandwidth",
                &format!("repeat {r}/{}: {}: {}", b.set.repeat, fig.params_text(), line.join(", ")),
            );
        }
        // Saturated pings: each shaper with each burst, then the unshaped path once for both.
        for (kind, p50, p99, loss) in &mut ping_figs {
            for (side, d) in &shapers {
                check_interrupt()?;
                let name = format!("bwp{r}-{}-{kind}", side.name());
                let sel = selection(Some((PING_RATE.1, burst_bits(kind, PING_RATE.1))));
                record_pings(
                    b,
                    (p50, p99, loss),
                    *side,
                    with_pod(&rt, *d, &name, sel, |p| saturated_pings(b, lab, p)),
                );
            }
        }
        check_interrupt()?;
        let unshaped = with_pod(&rt, &baseline, &format!("bwp{r}-baseline"), selection(None), |p| {
            saturated_pings(b, lab, p)
        });
        for (_, p50, p99, loss) in &mut ping_figs {
            record_pings(b, (p50, p99, loss), Side::Baseline, clone_outcome(&unshaped));
        }
    }
    let after = load();
    for (_, _, mut f) in rate_figs {
        f.set_load(&before, &after);
        b.figures.push(f);
    }
    for (_, mut p50, mut p99, mut loss) in ping_figs {
        for f in [&mut p50, &mut p99, &mut loss] {
            f.set_load(&before, &after);
        }
        b.figures.extend([p50, p99, loss]);
    }
    lab.bridge_netfilter(true)?;
    super::xdp_drops::run(b, lab)
}

fn clone_outcome(o: &anyhow::Result<(Vec<f64>, u64)>) -> anyhow::Result<(Vec<f64>, u64)> {
    match o {
        Ok(v) => Ok(v.clone()),
        Err(e) => Err(anyhow::anyhow!("{e:#}")),
    }
}

fn record_pings(
    b: &Bench,
    (p50, p99, loss): (&mut Figure, &mut Figure, &mut Figure),
    side: Side,
    o: anyhow::Result<(Vec<f64>, u64)>,
) {
    match o {
        Ok((rtts, lost)) => {
            let detail: Value = json!({"pings": rtts.len(), "lost": lost});
            let (a, z) = (percentile(&rtts, 50.0).unwrap_or(0.0), percentile(&rtts, 99.0).unwrap_or(0.0));
            b.progress(
                "bandwidth",
                &format!(
                    "saturated ping {}: {}: p50 {a:.2} ms, p99 {z:.2} ms, {lost} lost",
                    p50.params_text(),
                    side.name()
                ),
            );
            let sent = rtts.len() as u64 + lost;
            let lost_pct = if sent > 0 { lost as f64 * 100.0 / sent as f64 } else { 0.0 };
            p50.push(side, a, detail.clone());
            p99.push(side, z, detail.clone());
            loss.push(side, lost_pct, detail);
        }
        Err(e) => {
            b.progress(
                "bandwidth",
                &format!("saturated ping {}: {} failed: {e:#}", p50.params_text(), side.name()),
            );
            p50.fail(side, format!("{e:#}"));
            p99.fail(side, format!("{e:#}"));
            loss.fail(side, format!("{e:#}"));
        }
    }
}
