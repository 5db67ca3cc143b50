//! portmap: a pod on the client's bridge publishes two ports; the client reaches them at the
//! bridge's address (hostIP) and hostPort.
//!
//! - plexus: `plexus-portmap` chained after bridge (TC programs rewrite and redirect);
//! - reference: `portmap` chained after bridge (iptables DNAT), with br_netfilter on in the
//!   node, which it needs to un-NAT replies bridged straight to a client on the same bridge;
//! - baseline: no NAT at all: the client talks to the pod's own address over the bridge.
//!
//! Per repeat and side, one pod is attached (add_latency), then iperf3 (tcp_throughput and,
//! from the cgroup's CPU time, cpu_per_gbit), request/response on one connection
//! (rr_latency_p50/p99) and connect-request-response-close (crr_rate) run against it, and it
//! is deleted.
//!
//! portmap_step_latency is the port mapping step of that ADD alone (issue #4 asks for it at
//! most 0.1x the reference's): for plexus, the plexus-portmap ADD as the agent timed it
//! (`plexus_plugin_duration_seconds`, the difference of its _sum and _count around the pod's
//! ADD); for the reference, the exec of `portmap` (spawn to exit). add_latency keeps the
//! whole ADD (default network, bridge, port mapping).

use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::report::Figure;
use super::runner::{probe, Driver, PlexusDriver, Pod, ReferenceDriver, Runtime, Selection};
use super::stats::load;
use super::topology::{bridge_network, Agent, Cgroup, Lab, PM_GATEWAY};
use super::traffic::{echo_server, iperf, iperf_server, tcp_client};
use super::{check_interrupt, Bench, Side};

const IPERF_PORT: u16 = 5201;
const ECHO_PORT: u16 = 7000;

/// hostPorts per side: distinct, so a side's leftover mapping could never serve another.
fn host_ports(side: Side) -> (u16, u16) {
    match side {
        Side::Plexus => (15201, 17000),
        _ => (25201, 27000),
    }
}

fn selection(side: Side) -> Selection {
    if side == Side::Baseline {
        return Selection::plain("bench-pm");
    }
    let (hi, he) = host_ports(side);
    Selection::with(
        "bench-pm",
        "portMappings",
        json!([
            {"hostPort": hi, "containerPort": IPERF_PORT, "protocol": "tcp"},
            {"hostPort": he, "containerPort": ECHO_PORT, "protocol": "tcp"},
        ]),
    )
}

/// How a side's port mapping step is timed.
#[derive(Clone, Copy)]
enum Step<'a> {
    /// From the agent's metrics.
    Agent(&'a Agent),
    /// The reference driver's timing of the `portmap` exec.
    Exec(&'a ReferenceDriver),
    /// No port mapping plugin.
    None,
}

const PLEXUS_STEP: &str = "plexus-portmap";
const REFERENCE_STEP: &str = "portmap";

impl Step<'_> {
    /// What the step's measure needs from before the ADD: the agent's (sum, count).
    fn before(self) -> anyhow::Result<Option<(f64, f64)>> {
        match self {
            Step::Agent(a) => a.plugin_seconds(PLEXUS_STEP, "ADD").map(Some),
            _ => Ok(None),
        }
    }

    /// The step of the pod's ADD in ms, with what it was computed from.
    fn after(self, pod: &Pod, before: Option<(f64, f64)>) -> anyhow::Result<Option<(f64, Value)>> {
        match self {
            Step::Agent(a) => {
                let before = before.context("no metrics read before the ADD")?;
                let after = a.plugin_seconds(PLEXUS_STEP, "ADD")?;
                let ms = step_from_metrics(before, after)?;
                Ok(Some((
                    ms,
                    json!({"source": "plexus_plugin_duration_seconds", "type": PLEXUS_STEP,
                           "sum_before": before.0, "count_before": before.1,
                           "sum_after": after.0, "count_after": after.1}),
                )))
            }
            Step::Exec(r) => {
                let timings = r.take_add_timings(pod);
                let steps: Vec<_> = timings.iter().filter(|t| t.plugin == REFERENCE_STEP).collect();
                if steps.len() != 1 || !steps[0].ms.is_finite() {
                    bail!("expected one timed {REFERENCE_STEP} exec in the ADD, got {timings:?}");
                }
                let plugins: Vec<Value> = timings
                    .iter()
                    .map(|t| json!({"ifname": t.ifname, "plugin": t.plugin, "ms": t.ms}))
                    .collect();
                Ok(Some((steps[0].ms, json!({"source": "exec spawn to exit", "plugins": plugins}))))
            }
            Step::None => Ok(None),
        }
    }
}

/// One ADD's step in ms from the histogram's (sum, count) before and after it.
fn step_from_metrics(before: (f64, f64), after: (f64, f64)) -> anyhow::Result<f64> {
    let runs = after.1 - before.1;
    if runs != 1.0 {
        bail!("{PLEXUS_STEP} ran {runs} times during the ADD instead of once");
    }
    Ok((after.0 - before.0) * 1e3)
}

/// One side of the section: how it attaches pods and times its port mapping step.
struct Contender<'a> {
    side: Side,
    driver: &'a dyn Driver,
    step: Step<'a>,
}

struct Measured {
    add_ms: f64,
    /// The port mapping step of the ADD (None: the side has none), or why it could not be
    /// read.
    step: Result<Option<(f64, Value)>, String>,
    gbps: f64,
    cpu_ms_per_gbit: f64,
    iperf: Value,
    rr: Value,
    crr: Value,
}

/// One side's repeat: attach, measure, delete (also when a measurement failed).
fn measure(
    b: &Bench,
    lab: &Lab,
    rt: &Runtime,
    cg: Option<&Cgroup>,
    c: &Contender,
    name: &str,
) -> anyhow::Result<Measured> {
    let (side, driver, step) = (c.side, c.driver, c.step);
    lab.bridge_netfilter(side == Side::Reference)?;
    let pod = Pod::new(name, vec![selection(side)])?;
    driver.prepare(&pod)?;
    let step_before = step.before();
    let t = Instant::now();
    let added = driver.add(rt, &pod);
    let add_ms = t.elapsed().as_secs_f64() * 1e3;
    driver.finish(&pod);
    let step = match (&added, step_before) {
        (Err(_), _) => Err("the ADD failed".to_owned()),
        (Ok(()), Err(e)) => Err(format!("{e:#}")),
        (Ok(()), Ok(before)) => step.after(&pod, before).map_err(|e| format!("{e:#}")),
    };
    let outcome = added.and_then(|()| traffic(b, lab, cg, side, &pod));
    let deleted = driver.del(rt, &pod);
    let (iperf, rr, crr) = outcome?;
    deleted?;
    let gbits = iperf.bytes * 8.0 / 1e9;
    Ok(Measured {
        add_ms,
        step,
        gbps: iperf.bits_per_sec / 1e9,
        cpu_ms_per_gbit: if gbits > 0.0 { iperf.cpu_usec / 1e3 / gbits } else { 0.0 },
        iperf: json!({"bits_per_second": iperf.bits_per_sec, "bytes": iperf.bytes, "cpu_usec": iperf.cpu_usec,
                      "cpu_source": iperf.cpu_source}),
        rr,
        crr,
    })
}

fn traffic(
    b: &Bench,
    lab: &Lab,
    cg: Option<&Cgroup>,
    side: Side,
    pod: &Pod,
) -> anyhow::Result<(super::traffic::Iperf, Value, Value)> {
    let pod_ip = pod.secondary_ip(1)?;
    let (host, (iperf_port, echo_port)) = match side {
        Side::Baseline => (pod_ip.as_str(), (IPERF_PORT, ECHO_PORT)),
        _ => (PM_GATEWAY, host_ports(side)),
    };
    let _iperf_server = iperf_server(&pod.netns, IPERF_PORT, cg)?;
    let _echo_server = echo_server(&pod.netns, ECHO_PORT)?;
    let secs = b.set.traffic_secs;
    let run = iperf(&lab.client, host, iperf_port, secs, cg)?;
    let rr = tcp_client(&lab.client, "rr", &format!("{host}:{echo_port}"), secs)?;
    let crr = tcp_client(&lab.client, "crr", &format!("{host}:{echo_port}"), secs)?;
    Ok((run, rr, crr))
}

pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    // With a metrics endpoint: the plexus-portmap step is read from it.
    let agent = Agent::start_with_metrics(lab, &b.bins, "portmap-plexus", Side::Plexus, &[])?;
    let rt = Runtime::spawn(&lab.node)?;
    let plexus = PlexusDriver { agent: &agent, shim: b.bins.shim.clone() };
    let pm = json!({"type": "plexus-portmap", "capabilities": {"portMappings": true}});
    plexus.add_network(&bridge_network("bench-pm", 0, Side::Plexus, &agent.ipam_dir(), Some(pm)))?;
    let ref_ipam = lab.path("portmap-reference/ipam");
    let mut reference = ReferenceDriver::new(Side::Reference, ref_ipam.clone())?;
    let pm = json!({"type": "portmap", "capabilities": {"portMappings": true}});
    reference.add_network(&bridge_network("bench-pm", 0, Side::Reference, &ref_ipam, Some(pm)))?;
    let base_ipam = lab.path("portmap-baseline/ipam");
    let mut baseline = ReferenceDriver::new(Side::Baseline, base_ipam.clone())?;
    baseline.add_network(&bridge_network("bench-pm", 0, Side::Baseline, &base_ipam, None))?;
    let cg = Cgroup::create("portmap").context("creating the cgroup for CPU accounting")?;
    let cpu_source = if cg.is_some() { "cgroup v2 cpu.stat" } else { "/proc/stat (whole machine)" };

    let secs = b.set.traffic_secs;
    let what = [
        Ok("plexus-portmap (eBPF, TC) chained after bridge, via plexus shim + agent"),
        Ok("reference portmap (iptables DNAT, br_netfilter on) chained after bridge"),
        Ok("no NAT: the client talks to the pod's address over the bridge"),
    ];
    let mk = |metric, unit, params: Value| Figure::new("portmap", metric, unit, params).sides(what);
    let mut figs = vec![
        mk("tcp_throughput", "Gbit/s", json!({"secs": secs, "streams": 1})),
        mk("cpu_per_gbit", "ms CPU/Gbit", json!({"secs": secs, "source": cpu_source})),
        mk("rr_latency_p50", "us", json!({"secs": secs, "bytes": 64})),
        mk("rr_latency_p99", "us", json!({"secs": secs, "bytes": 64})),
        mk("crr_rate", "conn/s", json!({"secs": secs, "bytes": 64})),
        mk("add_latency", "ms", json!({"mappings": 2})),
        mk("portmap_step_latency", "ms", json!({"mappings": 2})),
    ];
    // add_latency of the baseline is the bridge ADD without any port mapping plugin.
    figs[5].sides[Side::Baseline.index()].what = "bridge + host-local without a port mapping plugin".into();
    figs[6].sides[Side::Plexus.index()].what = "the plexus-portmap ADD step alone, as the agent timed it \
        (plexus_plugin_duration_seconds _sum/_count around the pod's ADD)"
        .into();
    figs[6].sides[Side::Reference.index()].what =
        "the exec of the reference portmap ADD alone (spawn to exit, iptables work included)".into();
    figs[6].set_missing(
        Side::Baseline,
        super::report::NOT_APPLICABLE,
        "no port mapping plugin on the baseline: there is no step to time (add_latency has its whole ADD)",
    );

    b.progress("portmap", "probing plexus-portmap");
    let probe_pod = Pod::new("pm-probe", vec![selection(Side::Plexus)])?;
    let supported = probe(&plexus, &rt, "plexus-portmap", &probe_pod);
    drop(probe_pod);
    if let Err((label, note)) = &supported {
        b.progress("portmap", &format!("plexus column: {label} ({note})"));
        for f in &mut figs {
            f.set_missing(Side::Plexus, label, note.clone());
        }
    }
    let contenders: Vec<Contender> = [
        Contender { side: Side::Plexus, driver: &plexus, step: Step::Agent(&agent) },
        Contender { side: Side::Reference, driver: &reference, step: Step::Exec(&reference) },
        Contender { side: Side::Baseline, driver: &baseline, step: Step::None },
    ]
    .into_iter()
    .filter(|c| c.side != Side::Plexus || supported.is_ok())
    .collect();

    let before = load();
    for r in 1..=b.set.repeat {
        for c in &contenders {
            let side = &c.side;
            check_interrupt()?;
            let name = format!("pm{r}-{}", side.name());
            match measure(b, lab, &rt, cg.as_ref(), c, &name) {
                Ok(m) => {
                    let step_text = match &m.step {
                        Ok(Some((ms, _))) => format!(" (portmap step {ms:.2} ms)"),
                        Ok(None) => String::new(),
                        Err(e) => format!(" (portmap step unknown: {e})"),
                    };
                    b.progress(
                        "portmap",
                        &format!(
                            "repeat {r}/{}: {}: add {:.1} ms{step_text}, {:.2} Gbit/s, {:.1} ms CPU/Gbit, \
                             rr p50 {} us, crr {} conn/s",
                            b.set.repeat,
                            side.name(),
                            m.add_ms,
                            m.gbps,
                            m.cpu_ms_per_gbit,
                            m.rr["p50_us"].as_f64().map(|v| format!("{v:.1}")).unwrap_or_default(),
                            m.crr["rate"].as_f64().map(|v| format!("{v:.0}")).unwrap_or_default(),
                        ),
                    );
                    let num = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
                    figs[0].push(*side, m.gbps, m.iperf.clone());
                    figs[1].push(*side, m.cpu_ms_per_gbit, m.iperf);
                    figs[2].push(*side, num(&m.rr, "p50_us"), m.rr.clone());
                    figs[3].push(*side, num(&m.rr, "p99_us"), m.rr);
                    figs[4].push(*side, num(&m.crr, "rate"), m.crr);
                    figs[5].push(*side, m.add_ms, Value::Null);
                    match m.step {
                        Ok(Some((ms, detail))) => figs[6].push(*side, ms, detail),
                        Ok(None) => {}
                        Err(e) => figs[6].fail(*side, e),
                    }
                }
                Err(e) => {
                    b.progress("portmap", &format!("repeat {r}: {} failed: {e:#}", side.name()));
                    for f in &mut figs {
                        f.fail(*side, format!("{e:#}"));
                    }
                }
            }
        }
    }
    // Back to the namespace's default for whatever runs next.
    lab.bridge_netfilter(true)?;
    let after = load();
    for mut f in figs {
        f.set_load(&before, &after);
        b.figures.push(f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_is_the_difference_of_one_observation() {
        let ms = step_from_metrics((0.0125, 3.0), (0.0155, 4.0)).expect("one run");
        assert!((ms - 3.0).abs() < 1e-9, "{ms}");
        assert_eq!(step_from_metrics((0.0, 0.0), (0.002, 1.0)).ok(), Some(2.0));
        assert!(step_from_metrics((0.01, 2.0), (0.01, 2.0)).is_err(), "not run");
        assert!(step_from_metrics((0.01, 2.0), (0.03, 4.0)).is_err(), "another ADD ran meanwhile");
    }
}
