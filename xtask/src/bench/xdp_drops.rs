//! drop_cpu_ns (issue #18), in the bandwidth section: what dropping a packet over an ingress
//! limit costs the node, in XDP against TC, on the macvlan master `pxmv0` (a veth whose peer
//! `mv0` is the client's). A pod on a macvlan network chaining plexus-bandwidth alone (so the
//! shaping object's `bw_xdp` runs on the master) has an ingress limit of 10 Mbit/s; the client
//! sends it 64-byte UDP frames (22 bytes of payload) as fast as `iperf3 -u -b 0` does, about
//! 100 Mbit/s here: ten times the limit. The figure is the CPU time spent in softirq context
//! (the `softirq` column of /proc/stat, every CPU: where the receive path, XDP or TC, runs;
//! the sender's own work is not in it) divided by the packets the limit dropped (its
//! `dropped_packets` in `plexus-agent bandwidth list`).
//!
//! Sides: plexus, the agent as it runs (`bw_xdp`, native XDP on the veth master); the
//! reference column, the same agent with `--no-xdp` (the TC program `bw_tc_in` drops). No
//! baseline: without a limit nothing is dropped. Issue #18 asks for a 100 Mbit/s limit at ten
//! times its rate; one user-space sender reaches ten times 10 Mbit/s of small frames here, so
//! the limit is scaled down, the ratio kept.
//!
//! On veth the frame is a socket buffer before XDP runs (veth's native XDP takes the skb its
//! peer sent, copying it when its headroom is short of XDP's), so what XDP saves on a NIC,
//! building the skb at all, does not show here.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use super::report::{Figure, Target};
use super::runner::Selection;
use super::stats::load;
use super::topology::{Agent, Lab, MASTER};
use super::traffic::iperf_server;
use super::xdp::with_side_pod;
use super::{check_interrupt, Bench, Side};

/// The client's address on the master's wire (the pods' subnet).
const CLIENT_IP: &str = "10.68.0.200";
const PREFIX: u8 = 16;
/// The limit, and the pod's iperf3 port.
const LIMIT_BPS: u64 = 10_000_000;
const POD_PORT: u16 = 5201;
/// UDP payload of a 64-byte frame: 64 - Ethernet 14 - IPv4 20 - UDP 8.
const PAYLOAD: u32 = 22;
/// USER_HZ: the unit of /proc/stat.
const TICK_NS: f64 = 10_000_000.0;
const ISSUE: &str = "issue #18";

fn network(side: Side, ipam_dir: &std::path::Path) -> Value {
    let a = side.index() * 40 + 1;
    json!({"cniVersion": "1.0.0", "name": "bench-xdpbw", "plugins": [
        {"type": "macvlan", "master": MASTER, "mode": "bridge",
         "ipam": {"type": "host-local", "ranges": [[{
             "subnet": format!("10.68.0.0/{PREFIX}"),
             "rangeStart": format!("10.68.{a}.1"),
             "rangeEnd": format!("10.68.{}.254", a + 38),
         }]], "dataDir": ipam_dir}},
        {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}},
    ]})
}

/// CPU time in softirq context so far, every CPU, in nanoseconds.
fn softirq_ns() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let cpu = stat.lines().find(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
    // user nice system idle iowait irq softirq ...
    let ticks: f64 = cpu.split_whitespace().nth(7).and_then(|v| v.parse().ok()).context("softirq field")?;
    Ok(ticks * TICK_NS)
}

/// (passed, dropped) packets of the pod's ingress limit, and the XDP mode listed for it.
fn limit_counters(lab: &Lab, agent: &Agent) -> anyhow::Result<(u64, u64, Value)> {
    let rows = agent.bandwidth_list(&lab.node)?;
    let row = rows.iter().find(|r| r["direction"] == "ingress").context("no ingress limit listed")?;
    let n = |k: &str| row[k].as_u64().unwrap_or(0);
    Ok((n("passed_packets"), n("dropped_packets"), row["xdp"].clone()))
}

/// The flood of one run; its softirq time per dropped packet and the run's figures.
fn flood(lab: &Lab, agent: &Agent, pod_ip: &str, secs: u32) -> anyhow::Result<(f64, Value)> {
    let (p0, d0, _) = limit_counters(lab, agent)?;
    let s0 = softirq_ns()?;
    let out = lab
        .client
        .command("iperf3")
        .args(["-c", pod_ip, "-p", &POD_PORT.to_string(), "-u", "-b", "0", "-l", &PAYLOAD.to_string()])
        .args(["-t", &secs.to_string(), "-J"])
        .output()
        .context("running iperf3 -u")?;
    let s1 = softirq_ns()?;
    let (p1, d1, xdp) = limit_counters(lab, agent)?;
    let v: Value = serde_json::from_slice(&out.stdout).context("iperf3 JSON")?;
    let sent = v["end"]["sum"]["packets"].as_f64().context("iperf3 gave no packet count")?;
    let dropped = d1.saturating_sub(d0);
    if dropped == 0 {
        anyhow::bail!("the limit dropped nothing ({sent} packets sent): no flood over it");
    }
    let detail = json!({"sent": sent, "passed": p1.saturating_sub(p0), "dropped": dropped,
                        "softirq_ms": (s1 - s0) / 1e6, "secs": secs, "xdp": xdp});
    Ok(((s1 - s0) / dropped as f64, detail))
}

/// One side: its agent, the pod, the runs, DEL.
fn side_runs(b: &Bench, lab: &Lab, side: Side, fig: &mut Figure) -> anyhow::Result<()> {
    let selection = Selection::with("bench-xdpbw", "bandwidth", json!({"ingressRate": LIMIT_BPS}));
    with_side_pod(
        b,
        lab,
        side,
        "xdpbw",
        |ipam| network(side, ipam),
        selection,
        |agent, pod| {
            let _server = iperf_server(&pod.netns, POD_PORT, None)?;
            let pod_ip = pod.secondary_ip(1)?;
            for r in 1..=b.set.repeat {
                check_interrupt()?;
                // The bucket of the previous run drains first.
                std::thread::sleep(Duration::from_millis(500));
                let (value, detail) = flood(lab, agent, &pod_ip, b.set.traffic_secs)?;
                b.progress(
                    "bandwidth",
                    &format!(
                        "drop_cpu_ns {r}/{}: {}: {value:.0} ns of softirq per dropped packet ({} dropped)",
                        b.set.repeat,
                        side.name(),
                        detail["dropped"]
                    ),
                );
                fig.push(side, value, detail);
            }
            Ok(())
        },
    )
}

/// drop_cpu_ns: XDP against TC (see the module's notes).
pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let mut fig = Figure::new(
        "bandwidth",
        "drop_cpu_ns",
        "ns/packet",
        json!({"limit": "10M", "offered": "10x", "frame_bytes": 64, "secs": b.set.traffic_secs}),
    )
    .sides([
        Ok("plexus-bandwidth on a macvlan master, XDP drops (bw_xdp, native on the veth master)"),
        Ok("plexus-bandwidth with --no-xdp: TC drops (bw_tc_in) on the same master"),
        Err("no limit, nothing dropped"),
    ])
    .with_target(Target::at_most(Side::Reference, 0.5, ISSUE));
    lab.client.try_ip(&["addr", "add", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"])?;
    let before = load();
    for side in [Side::Plexus, Side::Reference] {
        check_interrupt()?;
        if let Err(e) = side_runs(b, lab, side, &mut fig) {
            b.progress("bandwidth", &format!("drop_cpu_ns: {} failed: {e:#}", side.name()));
            fig.fail(side, format!("{e:#}"));
        }
    }
    let after = load();
    let _ = lab.client.try_ip(&["addr", "del", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"]);
    fig.set_load(&before, &after);
    b.figures.push(fig);
    Ok(())
}
