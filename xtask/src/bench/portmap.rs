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

use std::time::Instant;

use anyhow::Context;
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

struct Measured {
    add_ms: f64,
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
    side: Side,
    driver: &dyn Driver,
    name: &str,
) -> anyhow::Result<Measured> {
    lab.bridge_netfilter(side == Side::Reference)?;
    let pod = Pod::new(name, vec![selection(side)])?;
    driver.prepare(&pod)?;
    let t = Instant::now();
    let added = driver.add(rt, &pod);
    let add_ms = t.elapsed().as_secs_f64() * 1e3;
    driver.finish(&pod);
    let outcome = added.and_then(|()| traffic(b, lab, cg, side, &pod));
    let deleted = driver.del(rt, &pod);
    let (iperf, rr, crr) = outcome?;
    deleted?;
    let gbits = iperf.bytes * 8.0 / 1e9;
    Ok(Measured {
        add_ms,
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
    let agent = Agent::start(lab, &b.bins, "portmap-plexus", Side::Plexus, &[])?;
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
    ];
    // add_latency of the baseline is the bridge ADD without any port mapping plugin.
    figs[5].sides[Side::Baseline.index()].what = "bridge + host-local without a port mapping plugin".into();

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
    let drivers: Vec<(Side, &dyn Driver)> = [
        (Side::Plexus, &plexus as &dyn Driver),
        (Side::Reference, &reference as &dyn Driver),
        (Side::Baseline, &baseline as &dyn Driver),
    ]
    .into_iter()
    .filter(|(s, _)| *s != Side::Plexus || supported.is_ok())
    .collect();

    let before = load();
    for r in 1..=b.set.repeat {
        for (side, driver) in &drivers {
            check_interrupt()?;
            let name = format!("pm{r}-{}", side.name());
            match measure(b, lab, &rt, cg.as_ref(), *side, *driver, &name) {
                Ok(m) => {
                    b.progress(
                        "portmap",
                        &format!(
                            "repeat {r}/{}: {}: add {:.1} ms, {:.2} Gbit/s, {:.1} ms CPU/Gbit, \
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
