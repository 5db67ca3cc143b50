//! portmap: a pod on the client's bridge publishes two TCP ports; the client reaches them at
//! the bridge's address (hostIP) and hostPort.
//!
//! - plexus: `plexus-portmap` chained after bridge (TC programs rewrite and redirect);
//! - reference: `portmap` chained after bridge (iptables DNAT), with br_netfilter on in the
//!   node, which it needs to un-NAT replies bridged straight to a client on the same bridge;
//! - baseline: no NAT at all: the client talks to the pod's own address over the bridge.
//!
//! Per repeat (each starting with the next side: see [`rotated`]), each side's pod is attached
//! in turn (add_latency); then iperf3 (tcp_throughput and, from the cgroup's CPU time,
//! cpu_per_gbit) runs against each side in turn, then request/response on one connection
//! (rr_latency_p50/p99), then connect-request-response-close (crr_rate), so that the runs a
//! ratio compares are seconds apart rather than a side's whole repeat (the machine drifts over
//! a repeat; side by side, the drift falls on every side alike); the pods are deleted. Then,
//! side after side, a second pod, mapping the echo server and a UDP port, is attached for
//! crr_rate_100k_flows and deleted. (A second pod keeps the first pod's ADD what it was: with a
//! UDP mapping, the reference `portmap` sweeps the node's whole conntrack table for stale UDP
//! entries on ADD, a cost that would grow with what earlier runs left in the table.) The pods
//! of the three sides share the bridge, as they always did one after the other; br_netfilter,
//! which the reference needs, is on only while the reference's pod is added or its traffic
//! runs. Over the repeats, idle CPUs poll instead of sleeping (see [`super::wakeup`]; the
//! figures' `idle` parameter says whether they could).
//!
//! crr_rate_100k_flows: the client sends one datagram to the second pod's UDP mapping
//! (hostIP:hostPort; the baseline: the pod's own address, where no table exists) from each of
//! 100,000 distinct (source address, source port) pairs, two addresses outside the pods'
//! subnet x 50,000 ports (see [`FILL_SOURCES`]), each a new flow in the side's table (plexus's
//! flow table, conntrack for the reference), then runs the CRR at once: unanswered UDP flows
//! live 30 s on both sides, and the run fails the figure if the CRR ends later than that after
//! the fill began. The figure's detail has how full the table was before the fill, before and
//! after the CRR (see [`flows`]), and the figure fails for a side whose table held fewer than
//! the fill's flows. plexus's table is sized like the reference's (`--portmap-max-flows` = the
//! node's `nf_conntrack_max`), so the run measures lookups in a table of 100,000 flows, not
//! evictions.
//!
//! udp_pps_64b and udp_pps_64b_bridge, the XDP path against the TC path on a macvlan master
//! and on a bridge's uplink, are [`super::xdp`]'s.
//!
//! The targets are issue #12's, as ratios to the baseline of the same run (and the step's to
//! the reference's).
//!
//! portmap_step_latency is the port mapping step of that ADD alone (issue #4 asks for it at
//! most 0.1x the reference's): for plexus, the plexus-portmap ADD as the agent timed it
//! (`plexus_plugin_duration_seconds`, the difference of its _sum and _count around the pod's
//! ADD); for the reference, the exec of `portmap` (spawn to exit). add_latency keeps the
//! whole ADD (default network, bridge, port mapping).

mod flows;

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use plexus_testkit::Proc;
use serde_json::{json, Value};

use super::report::{Figure, Target};
use super::runner::{probe, Driver, PlexusDriver, Pod, ReferenceDriver, Runtime, Selection};
use super::stats::load;
use super::topology::{bridge_network, read_sysctl, Agent, Cgroup, Lab, FILL_SOURCES, PM_GATEWAY};
use super::traffic::{echo_server, iperf, iperf_server, tcp_client, udp_fill_from, udp_sink, Iperf};
use super::wakeup::{poll_while_idle, POLL};
use super::{check_interrupt, Bench, Side};
use flows::{FlowTable, Occupancy};

const IPERF_PORT: u16 = 5201;
const ECHO_PORT: u16 = 7000;
/// The UDP port the fill's flows go to.
const UDP_PORT: u16 = 7001;
/// Flows in the table when crr_rate_100k_flows runs.
const FILL_FLOWS: u32 = 100_000;
/// The fill's source ports on each client address: 10000 to 59999.
const FILL_FIRST_PORT: u16 = 10_000;
/// How long an unanswered UDP flow lives: conntrack's `nf_conntrack_udp_timeout` and
/// plexus's `--portmap-udp-timeout`, both 30 s by default.
const UDP_FLOW_SECS: f64 = 30.0;
/// plexus's flow table when the node's `nf_conntrack_max` cannot be read (it is this on most
/// machines).
const FALLBACK_MAX_FLOWS: u64 = 262_144;
/// Who asks for the targets.
const ISSUE: &str = "issue #12";

/// hostPorts per side: distinct, so a side's leftover mapping could never serve another.
/// `full_echo` and `udp` are the second pod's (crr_rate_100k_flows).
#[derive(Clone, Copy)]
struct Ports {
    iperf: u16,
    echo: u16,
    full_echo: u16,
    udp: u16,
}

fn host_ports(side: Side) -> Ports {
    match side {
        Side::Plexus => Ports { iperf: 15201, echo: 17000, full_echo: 17002, udp: 17001 },
        _ => Ports { iperf: 25201, echo: 27000, full_echo: 27002, udp: 27001 },
    }
}

/// The ports the client reaches on each side: the host ports, or the pod's own.
fn target_ports(side: Side) -> Ports {
    match side {
        Side::Baseline => Ports { iperf: IPERF_PORT, echo: ECHO_PORT, full_echo: ECHO_PORT, udp: UDP_PORT },
        _ => host_ports(side),
    }
}

/// Port mappings of the measured pod: iperf3 and the echo server.
const MAPPINGS: u32 = 2;

fn mappings(side: Side, list: Value) -> Selection {
    if side == Side::Baseline {
        return Selection::plain("bench-pm");
    }
    Selection::with("bench-pm", "portMappings", list)
}

/// The measured pod's selection: iperf3 and the echo server.
fn selection(side: Side) -> Selection {
    let p = host_ports(side);
    mappings(
        side,
        json!([
            {"hostPort": p.iperf, "containerPort": IPERF_PORT, "protocol": "tcp"},
            {"hostPort": p.echo, "containerPort": ECHO_PORT, "protocol": "tcp"},
        ]),
    )
}

/// The second pod's selection (crr_rate_100k_flows): the echo server and the fill's UDP port.
fn full_selection(side: Side) -> Selection {
    let p = host_ports(side);
    mappings(
        side,
        json!([
            {"hostPort": p.full_echo, "containerPort": ECHO_PORT, "protocol": "tcp"},
            {"hostPort": p.udp, "containerPort": UDP_PORT, "protocol": "udp"},
        ]),
    )
}

/// The section's figures, in the order of the table.
const F_TPUT: usize = 0;
const F_CPU: usize = 1;
const F_P50: usize = 2;
const F_P99: usize = 3;
const F_CRR: usize = 4;
const F_CRR_FULL: usize = 5;
const F_ADD: usize = 6;
const F_STEP: usize = 7;

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

/// One side of the section: how it attaches pods, times its port mapping step and counts its
/// flows.
struct Contender<'a> {
    side: Side,
    driver: &'a dyn Driver,
    step: Step<'a>,
    table: FlowTable<'a>,
}

/// What one side's repeat measured, each figure's outcome on its own.
struct Measured {
    add_ms: f64,
    /// The port mapping step of the ADD (None: the side has none), or why it could not be
    /// read.
    step: Result<Option<(f64, Value)>, String>,
    iperf: Result<Iperf, String>,
    rr: Result<Value, String>,
    crr: Result<Value, String>,
    /// crr_rate_100k_flows: the rate and its detail, or why the figure failed.
    crr_full: Result<(f64, Value), String>,
}

impl Measured {
    /// A pod just attached: its ADD measured, no traffic run yet.
    fn attached(add_ms: f64, step: Result<Option<(f64, Value)>, String>) -> Measured {
        fn not_run<T>() -> Result<T, String> {
            Err("not run".to_owned())
        }
        Measured { add_ms, step, iperf: not_run(), rr: not_run(), crr: not_run(), crr_full: not_run() }
    }

    /// The progress line of one side's repeat.
    fn line(&self) -> String {
        let step = match &self.step {
            Ok(Some((ms, _))) => format!(" (portmap step {ms:.2} ms)"),
            Ok(None) => String::new(),
            Err(e) => format!(" (portmap step unknown: {e})"),
        };
        let iperf = match &self.iperf {
            Ok(i) => format!("{:.2} Gbit/s, {:.1} ms CPU/Gbit", i.bits_per_sec / 1e9, cpu_ms_per_gbit(i)),
            Err(e) => format!("iperf3 failed: {e}"),
        };
        let field = |r: &Result<Value, String>, k: &str, digits: usize| match r {
            Ok(v) => v[k].as_f64().map(|v| format!("{v:.digits$}")).unwrap_or_default(),
            Err(e) => format!("failed: {e}"),
        };
        let full = match &self.crr_full {
            Ok((rate, d)) if d["table_before_fill"].is_null() => {
                format!("{rate:.0} conn/s after the same {FILL_FLOWS} datagrams (no table)")
            }
            Ok((rate, d)) => {
                let n = |k: &str, f: &str| {
                    d[k][f].as_f64().map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
                };
                let at = |k: &str| format!("{} ({} of the mapping)", n(k, "table"), n(k, "mapping"));
                format!(
                    "{rate:.0} conn/s with {FILL_FLOWS} flows (table before the fill {}, before the CRR {}, after {})",
                    at("table_before_fill"),
                    at("table_before_crr"),
                    at("table_after_crr")
                )
            }
            Err(e) => format!("with {FILL_FLOWS} flows failed: {e}"),
        };
        format!(
            "add {:.1} ms{step}, {iperf}, rr p50 {} us, crr {} conn/s, crr {full}",
            self.add_ms,
            field(&self.rr, "p50_us", 1),
            field(&self.crr, "rate", 0),
        )
    }

    /// Its values, into the section's figures.
    fn record(self, side: Side, figs: &mut [Figure]) {
        match self.iperf {
            Ok(i) => {
                let detail = json!({"bits_per_second": i.bits_per_sec, "bytes": i.bytes,
                                    "cpu_usec": i.cpu_usec, "cpu_source": i.cpu_source});
                figs[F_TPUT].push(side, i.bits_per_sec / 1e9, detail.clone());
                figs[F_CPU].push(side, cpu_ms_per_gbit(&i), detail);
            }
            Err(e) => {
                figs[F_TPUT].fail(side, e.clone());
                figs[F_CPU].fail(side, e);
            }
        }
        let num = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        match self.rr {
            Ok(rr) => {
                figs[F_P50].push(side, num(&rr, "p50_us"), rr.clone());
                figs[F_P99].push(side, num(&rr, "p99_us"), rr);
            }
            Err(e) => {
                figs[F_P50].fail(side, e.clone());
                figs[F_P99].fail(side, e);
            }
        }
        match self.crr {
            Ok(crr) => figs[F_CRR].push(side, num(&crr, "rate"), crr),
            Err(e) => figs[F_CRR].fail(side, e),
        }
        match self.crr_full {
            Ok((rate, detail)) => figs[F_CRR_FULL].push(side, rate, detail),
            Err(e) => figs[F_CRR_FULL].fail(side, e),
        }
        figs[F_ADD].push(side, self.add_ms, Value::Null);
        match self.step {
            Ok(Some((ms, detail))) => figs[F_STEP].push(side, ms, detail),
            Ok(None) => {}
            Err(e) => figs[F_STEP].fail(side, e),
        }
    }
}

fn cpu_ms_per_gbit(i: &Iperf) -> f64 {
    let gbits = i.bytes * 8.0 / 1e9;
    if gbits > 0.0 {
        i.cpu_usec / 1e3 / gbits
    } else {
        0.0
    }
}

/// A side's measured pod of one repeat, attached, with its servers running.
struct Attached {
    pod: Pod,
    /// iperf3 and the echo server; stopped before the DEL.
    servers: Vec<Proc>,
}

/// Attaches a side's measured pod and starts its servers: the pod, and the side's outcome
/// with add_latency and the step filled in. A pod whose servers did not start is deleted
/// again.
fn attach(
    lab: &Lab,
    rt: &Runtime,
    cg: Option<&Cgroup>,
    c: &Contender,
    name: &str,
) -> anyhow::Result<(Attached, Measured)> {
    lab.bridge_netfilter(c.side == Side::Reference)?;
    let pod = Pod::new(name, vec![selection(c.side)])?;
    c.driver.prepare(&pod)?;
    let step_before = c.step.before();
    let t = Instant::now();
    let added = c.driver.add(rt, &pod);
    let add_ms = t.elapsed().as_secs_f64() * 1e3;
    c.driver.finish(&pod);
    added?;
    let step = match step_before {
        Err(e) => Err(format!("{e:#}")),
        Ok(before) => c.step.after(&pod, before).map_err(|e| format!("{e:#}")),
    };
    let servers = iperf_server(&pod.netns, IPERF_PORT, cg)
        .and_then(|iperf| Ok(vec![iperf, echo_server(&pod.netns, ECHO_PORT)?]));
    let servers = match servers {
        Ok(servers) => servers,
        Err(e) => {
            let deleted = c.driver.del(rt, &pod);
            return Err(e.context(format!("starting the pod's servers (its DEL: {deleted:?})")));
        }
    };
    Ok((Attached { pod, servers }, Measured::attached(add_ms, step)))
}

/// One side in a repeat: its pod while attached, and its outcome (an error once its ADD or
/// DEL failed).
struct Slot<'a> {
    c: &'a Contender<'a>,
    pod: Option<Attached>,
    outcome: Result<Measured, String>,
}

impl Slot<'_> {
    /// Stops the servers and deletes the pod, if attached; a failed DEL fails the repeat.
    fn detach(&mut self, rt: &Runtime) {
        if let Some(mut a) = self.pod.take() {
            a.servers.clear();
            if let Err(e) = self.c.driver.del(rt, &a.pod) {
                self.outcome = Err(format!("DEL: {e:#}"));
            }
        }
    }
}

/// The traffic of the measured pods, in the order of the section's figures.
#[derive(Clone, Copy)]
enum Run {
    Iperf,
    Rr,
    Crr,
}

/// One repeat: every side's pod attached, in `order`; then each kind of traffic against each
/// side in that order, so that the runs a ratio compares are seconds apart and the machine's
/// drift over the repeat falls on every side alike; every pod deleted; then each side's
/// crr_rate_100k_flows, on its second pod. The sides' outcomes, in `order`.
fn repeat<'a>(
    b: &Bench,
    lab: &Lab,
    rt: &Runtime,
    cg: Option<&Cgroup>,
    order: Vec<&'a Contender<'a>>,
    r: u32,
) -> anyhow::Result<Vec<(Side, Result<Measured, String>)>> {
    let mut slots: Vec<Slot> = Vec::new();
    for c in order {
        check_interrupt()?;
        let (pod, outcome) = match attach(lab, rt, cg, c, &format!("pm{r}-{}", c.side.name())) {
            Ok((a, m)) => (Some(a), Ok(m)),
            Err(e) => (None, Err(format!("{e:#}"))),
        };
        slots.push(Slot { c, pod, outcome });
    }
    let ran = interleaved(b, lab, cg, &mut slots);
    for slot in &mut slots {
        slot.detach(rt);
    }
    ran?;
    for slot in &mut slots {
        check_interrupt()?;
        if let Ok(m) = &mut slot.outcome {
            lab.bridge_netfilter(slot.c.side == Side::Reference)?;
            let name = format!("pm{r}-{}-full", slot.c.side.name());
            m.crr_full = with_full_table(b, lab, rt, slot.c, &name).map_err(|e| format!("{e:#}"));
        }
    }
    Ok(slots.into_iter().map(|s| (s.c.side, s.outcome)).collect())
}

/// Each kind of traffic against every attached pod in turn.
fn interleaved(b: &Bench, lab: &Lab, cg: Option<&Cgroup>, slots: &mut [Slot]) -> anyhow::Result<()> {
    let secs = b.set.traffic_secs;
    let text = |e: anyhow::Error| format!("{e:#}");
    for run in [Run::Iperf, Run::Rr, Run::Crr] {
        for slot in slots.iter_mut() {
            let (Some(a), Ok(m)) = (&slot.pod, &mut slot.outcome) else { continue };
            check_interrupt()?;
            let side = slot.c.side;
            lab.bridge_netfilter(side == Side::Reference)?;
            let host = destination(side, &a.pod)?;
            let ports = target_ports(side);
            let echo = format!("{host}:{}", ports.echo);
            match run {
                Run::Iperf => m.iperf = iperf(&lab.client, &host, ports.iperf, secs, cg).map_err(text),
                Run::Rr => m.rr = tcp_client(&lab.client, "rr", &echo, secs).map_err(text),
                Run::Crr => m.crr = tcp_client(&lab.client, "crr", &echo, secs).map_err(text),
            }
        }
    }
    Ok(())
}

/// Where the client reaches a pod: the host IP, or the pod's own address on the baseline.
fn destination(side: Side, pod: &Pod) -> anyhow::Result<String> {
    match side {
        Side::Baseline => pod.secondary_ip(1),
        _ => Ok(PM_GATEWAY.to_owned()),
    }
}

/// crr_rate_100k_flows on a second pod, attached after the measured one is deleted, so the
/// measured pod's ADD stays what it always was (two TCP mappings; a UDP mapping makes the
/// reference `portmap` sweep the node's whole conntrack table for stale entries on ADD).
fn with_full_table(
    b: &Bench,
    lab: &Lab,
    rt: &Runtime,
    c: &Contender,
    name: &str,
) -> anyhow::Result<(f64, Value)> {
    let pod = Pod::new(name, vec![full_selection(c.side)])?;
    c.driver.prepare(&pod)?;
    let added = c.driver.add(rt, &pod);
    c.driver.finish(&pod);
    let outcome = added.and_then(|()| {
        let _echo_server = echo_server(&pod.netns, ECHO_PORT)?;
        let _udp_sink = udp_sink(&pod.netns, UDP_PORT)?;
        crr_with_full_table(
            lab,
            c.table,
            &destination(c.side, &pod)?,
            target_ports(c.side),
            b.set.traffic_secs,
        )
    });
    let deleted = c.driver.del(rt, &pod);
    let measured = outcome?;
    deleted?;
    Ok(measured)
}

/// crr_rate_100k_flows: fills the side's table with [`FILL_FLOWS`] UDP flows through the pod's
/// UDP mapping, runs the CRR, and checks the flows were there throughout.
fn crr_with_full_table(
    lab: &Lab,
    table: FlowTable,
    host: &str,
    ports: Ports,
    secs: u32,
) -> anyhow::Result<(f64, Value)> {
    let before_fill = table.read().context("reading the table before the fill")?;
    let started = Instant::now();
    let fill = udp_fill_from(
        &lab.client,
        &format!("{host}:{}", ports.udp),
        &FILL_SOURCES,
        FILL_FIRST_PORT,
        FILL_FLOWS,
    )?;
    let filled_s = started.elapsed().as_secs_f64();
    let before_crr = table.read().context("reading the table after the fill")?;
    let crr =
        tcp_client(&lab.client, "crr", &format!("{host}:{}", ports.full_echo), secs).with_context(|| {
            format!(
                "the CRR after the fill ({filled_s:.1} s, {} datagrams sent; table before it: {})",
                fill["sent"],
                before_crr.as_ref().map_or(Value::Null, Occupancy::to_json)
            )
        })?;
    let crr_end_s = started.elapsed().as_secs_f64();
    let after_crr = table.read().context("reading the table after the CRR")?;
    let occupancy = |o: &Option<Occupancy>| o.as_ref().map(Occupancy::to_json);
    let detail = json!({
        "crr": crr,
        "fill": fill,
        "fill_secs": filled_s,
        "crr_end_secs_after_fill_start": crr_end_s,
        "table_source": table.what(),
        "table_before_fill": occupancy(&before_fill),
        "table_before_crr": occupancy(&before_crr),
        "table_after_crr": occupancy(&after_crr),
    });
    let sent = fill["sent"].as_u64().unwrap_or(0);
    if sent < u64::from(FILL_FLOWS) {
        bail!("the fill sent {sent} of {FILL_FLOWS} datagrams (first error: {})", fill["first_error"]);
    }
    if crr_end_s > UDP_FLOW_SECS {
        bail!(
            "the CRR ended {crr_end_s:.1} s after the fill began, past the {UDP_FLOW_SECS} s unanswered UDP \
             flows live (use shorter traffic runs)"
        );
    }
    if let (Some(f), Some(b), Some(a)) = (&before_fill, &before_crr, &after_crr) {
        if let Some(why) = flows::shortfall(FILL_FLOWS, b, a) {
            bail!(
                "{why}; the fill took {filled_s:.1} s; table before the fill {}, before the CRR {}, after it {}",
                f.to_json(),
                b.to_json(),
                a.to_json()
            );
        }
    }
    let rate = crr["rate"].as_f64().context("the CRR reported no rate")?;
    Ok((rate, detail))
}

/// The agent's option sizing its flow table, and the size: the node's `nf_conntrack_max`, the
/// reference's table. `None` when the agent has no such option (before flow tracking).
fn flow_capacity(b: &Bench, lab: &Lab) -> Option<u64> {
    let help = crate::util::output(Command::new(&b.bins.agent).args(["run", "--help"])).unwrap_or_default();
    if !help.contains("--portmap-max-flows") {
        return None;
    }
    let max = read_sysctl(&lab.node, "net.netfilter.nf_conntrack_max").ok().and_then(|v| v.parse().ok());
    Some(max.unwrap_or(FALLBACK_MAX_FLOWS))
}

pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let capacity = flow_capacity(b, lab);
    let extra: Vec<String> =
        capacity.map(|n| vec!["--portmap-max-flows".to_owned(), n.to_string()]).unwrap_or_default();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    // With a metrics endpoint: the plexus-portmap step and the flow count are read from it.
    let agent = Agent::start_with_metrics(lab, &b.bins, "portmap-plexus", Side::Plexus, &extra)?;
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
    // Held over the repeats: see super::wakeup.
    let polling = poll_while_idle();
    let idle = match &polling {
        Ok(_) => POLL.to_owned(),
        Err(e) => format!("as the kernel chooses ({e})"),
    };
    b.progress("portmap", &format!("idle CPUs during the repeats: {idle}"));
    let what = [
        Ok("plexus-portmap (eBPF, TC) chained after bridge, via plexus shim + agent"),
        Ok("reference portmap (iptables DNAT, br_netfilter on) chained after bridge"),
        Ok("no NAT: the client talks to the pod's address over the bridge"),
    ];
    let mk = |metric, unit, params: Value| Figure::new("portmap", metric, unit, params).sides(what);
    let vs_baseline_at_least = |r| Target::at_least(Side::Baseline, r, ISSUE);
    let vs_baseline_at_most = |r| Target::at_most(Side::Baseline, r, ISSUE);
    let mut figs = vec![
        mk("tcp_throughput", "Gbit/s", json!({"secs": secs, "streams": 1, "idle": idle}))
            .with_target(vs_baseline_at_least(0.97)),
        mk("cpu_per_gbit", "ms CPU/Gbit", json!({"secs": secs, "source": cpu_source, "idle": idle}))
            .with_target(vs_baseline_at_most(1.05)),
        mk("rr_latency_p50", "us", json!({"secs": secs, "bytes": 64, "idle": idle})),
        mk("rr_latency_p99", "us", json!({"secs": secs, "bytes": 64, "idle": idle}))
            .with_target(vs_baseline_at_most(1.05)),
        mk("crr_rate", "conn/s", json!({"secs": secs, "bytes": 64, "idle": idle}))
            .with_target(vs_baseline_at_least(0.95)),
        mk(
            "crr_rate_100k_flows",
            "conn/s",
            json!({"secs": secs, "bytes": 64, "flows": FILL_FLOWS, "idle": idle}),
        )
        .with_target(vs_baseline_at_least(0.95)),
        mk("add_latency", "ms", json!({"mappings": MAPPINGS})),
        mk("portmap_step_latency", "ms", json!({"mappings": MAPPINGS})).with_target(Target::at_most(
            Side::Reference,
            0.1,
            ISSUE,
        )),
    ];
    let full = &mut figs[F_CRR_FULL].sides;
    full[Side::Plexus.index()].what = match capacity {
        Some(n) => format!(
            "plexus-portmap, {FILL_FLOWS} UDP flows in its flow table of {n} entries (--portmap-max-flows, \
             the node's nf_conntrack_max)"
        ),
        None => {
            format!("plexus-portmap, {FILL_FLOWS} UDP flows in its flow table (the agent's default size)")
        }
    };
    full[Side::Reference.index()].what = format!("reference portmap, {FILL_FLOWS} UDP flows in conntrack");
    full[Side::Baseline.index()].what =
        format!("no NAT, no table: the same {FILL_FLOWS} UDP datagrams to the pod's own address");
    // add_latency of the baseline is the bridge ADD without any port mapping plugin.
    figs[F_ADD].sides[Side::Baseline.index()].what =
        "bridge + host-local without a port mapping plugin".into();
    figs[F_STEP].sides[Side::Plexus.index()].what =
        "the plexus-portmap ADD step alone, as the agent timed it \
        (plexus_plugin_duration_seconds _sum/_count around the pod's ADD)"
            .into();
    figs[F_STEP].sides[Side::Reference.index()].what =
        "the exec of the reference portmap ADD alone (spawn to exit, iptables work included)".into();
    figs[F_STEP].set_missing(
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
    let reference_table =
        FlowTable::Conntrack { node: &lab.node, dst: PM_GATEWAY, dport: host_ports(Side::Reference).udp };
    let contenders: Vec<Contender> = [
        Contender {
            side: Side::Plexus,
            driver: &plexus,
            step: Step::Agent(&agent),
            table: FlowTable::Agent { agent: &agent, port: host_ports(Side::Plexus).udp },
        },
        Contender {
            side: Side::Reference,
            driver: &reference,
            step: Step::Exec(&reference),
            table: reference_table,
        },
        Contender { side: Side::Baseline, driver: &baseline, step: Step::None, table: FlowTable::None },
    ]
    .into_iter()
    .filter(|c| c.side != Side::Plexus || supported.is_ok())
    .collect();

    let before = load();
    for r in 1..=b.set.repeat {
        // Each repeat starts with the next side, so that no side always runs first, or always
        // right after the same other side (what a side leaves behind, and the machine's drift
        // over a run, fall on every side alike).
        let order: Vec<&Contender> = rotated(&contenders, r as usize - 1).collect();
        for (side, outcome) in repeat(b, lab, &rt, cg.as_ref(), order, r)? {
            match outcome {
                Ok(m) => {
                    b.progress(
                        "portmap",
                        &format!("repeat {r}/{}: {}: {}", b.set.repeat, side.name(), m.line()),
                    );
                    m.record(side, &mut figs);
                }
                Err(e) => {
                    b.progress("portmap", &format!("repeat {r}: {} failed: {e}", side.name()));
                    for f in &mut figs {
                        f.fail(side, e.clone());
                    }
                }
            }
        }
    }
    drop(polling);
    // Back to the namespace's default for whatever runs next.
    lab.bridge_netfilter(true)?;
    let after = load();
    for mut f in figs {
        f.set_load(&before, &after);
        b.figures.push(f);
    }
    super::xdp::run(b, lab)
}

/// `items` starting at `start` (modulo their number), wrapping around.
fn rotated<T>(items: &[T], start: usize) -> impl Iterator<Item = &T> {
    let n = items.len().max(1);
    items.iter().cycle().skip(start % n).take(items.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_repeat_starts_with_the_next_side() {
        let sides = ["plexus", "reference", "baseline"];
        let order = |r| rotated(&sides, r).copied().collect::<Vec<_>>();
        assert_eq!(order(0), ["plexus", "reference", "baseline"]);
        assert_eq!(order(1), ["reference", "baseline", "plexus"]);
        assert_eq!(order(2), ["baseline", "plexus", "reference"]);
        assert_eq!(order(3), order(0));
        assert_eq!(rotated(&[] as &[u8], 5).count(), 0);
    }

    #[test]
    fn step_is_the_difference_of_one_observation() {
        let ms = step_from_metrics((0.0125, 3.0), (0.0155, 4.0)).expect("one run");
        assert!((ms - 3.0).abs() < 1e-9, "{ms}");
        assert_eq!(step_from_metrics((0.0, 0.0), (0.002, 1.0)).ok(), Some(2.0));
        assert!(step_from_metrics((0.01, 2.0), (0.01, 2.0)).is_err(), "not run");
        assert!(step_from_metrics((0.01, 2.0), (0.03, 4.0)).is_err(), "another ADD ran meanwhile");
    }
}
