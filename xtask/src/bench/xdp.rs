//! The XDP path against the TC path (issue #18), on the macvlan master (`pxmv0`, a veth whose
//! peer `mv0` is the client's), in the portmap section:
//!
//! udp_pps_64b: 64-byte UDP frames (22 bytes of payload) from the client to a pod, as fast as
//! iperf3 sends them (`-u -b 0`), for the traffic seconds; the figure is the packets per second
//! the pod's iperf3 received. Sides: plexus, the agent as it runs (`pm_xdp` translates the
//! requests on the master, native XDP on veth); the reference column, the same agent with
//! `--no-xdp` (TC translates them); the baseline, no NAT (the pod's own address, no port
//! mapping). One agent at a time: an interface holds one XDP program.
//!
//! On veth the frame is already a socket buffer when XDP runs (veth's native XDP takes the
//! skb its peer sent), and the sender is one user-space thread on a shared machine: what XDP
//! saves on a NIC (building the skb for what it drops or translates) does not show here.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::report::{Figure, Target};
use super::runner::{Driver, PlexusDriver, Pod, Runtime, Selection};
use super::stats::load;
use super::topology::{Agent, Lab, MASTER};
use super::traffic::iperf_server;
use super::{check_interrupt, Bench, Side};

/// The master's address (the host IP of the mapping) and the client's, on their own subnet.
const HOST_IP: &str = "10.69.0.1";
const CLIENT_IP: &str = "10.69.0.200";
const PREFIX: u8 = 16;
/// The pod's iperf3 port, and the host port mapping to it (TCP for iperf3's control
/// connection, UDP for its data).
const POD_PORT: u16 = 5201;
const HOST_PORT: u16 = 7201;
/// UDP payload of a 64-byte frame: 64 - Ethernet 14 - IPv4 20 - UDP 8.
const PAYLOAD: u32 = 22;
const ISSUE: &str = "issue #18";

/// The macvlan network of the figure, with or without plexus-portmap.
fn network(side: Side, ipam_dir: &std::path::Path) -> Value {
    let a = side.index() * 40 + 1;
    let mut plugins = vec![json!({
        "type": "macvlan", "master": MASTER, "mode": "bridge",
        "ipam": {"type": "host-local", "ranges": [[{
            "subnet": format!("10.69.0.0/{PREFIX}"),
            "rangeStart": format!("10.69.{a}.1"),
            "rangeEnd": format!("10.69.{}.254", a + 38),
        }]], "dataDir": ipam_dir},
    })];
    if side != Side::Baseline {
        plugins.push(json!({"type": "plexus-portmap", "capabilities": {"portMappings": true}}));
    }
    json!({"cniVersion": "1.0.0", "name": "bench-xdp", "plugins": plugins})
}

fn selection(side: Side) -> Selection {
    if side == Side::Baseline {
        return Selection::plain("bench-xdp");
    }
    let pm = |protocol| json!({"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": protocol});
    Selection::with("bench-xdp", "portMappings", json!([pm("tcp"), pm("udp")]))
}

/// Packets per second the pod received from one iperf3 UDP run, and the run's figures. The
/// server may need a moment to listen: refused runs are retried for 5 s.
fn pps(lab: &Lab, host: &str, port: u16, secs: u32) -> anyhow::Result<(f64, Value)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match pps_once(lab, host, port, secs) {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => return other,
        }
    }
}

fn pps_once(lab: &Lab, host: &str, port: u16, secs: u32) -> anyhow::Result<(f64, Value)> {
    let out = lab
        .client
        .command("iperf3")
        .args(["-c", host, "-p", &port.to_string(), "-u", "-b", "0", "-l", &PAYLOAD.to_string()])
        .args(["-t", &secs.to_string(), "-J"])
        .output()
        .context("running iperf3 -u")?;
    let v: Value = serde_json::from_slice(&out.stdout).context("iperf3 JSON")?;
    let sum = &v["end"]["sum"];
    let (packets, lost, seconds) =
        (sum["packets"].as_f64(), sum["lost_packets"].as_f64(), sum["seconds"].as_f64());
    match (packets, lost, seconds) {
        (Some(p), Some(l), Some(s)) if s > 0.0 => {
            Ok(((p - l) / s, json!({"sent": p, "lost": l, "secs": s, "payload_bytes": PAYLOAD})))
        }
        _ => anyhow::bail!("iperf3 -u to {host}:{port} gave no result: {}", v["error"]),
    }
}

/// One side of an XDP figure: its agent (with `--no-xdp` for the reference column, the TC
/// path), the network `network` makes from the agent's IPAM directory, a pod with `selection`
/// attached, `runs` against them, the pod
/// deleted.
pub(super) fn with_side_pod(
    b: &Bench,
    lab: &Lab,
    side: Side,
    name: &str,
    network: impl FnOnce(&std::path::Path) -> Value,
    selection: Selection,
    runs: impl FnOnce(&Agent, &Pod) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let extra: &[&str] = if side == Side::Reference { &["--no-xdp"] } else { &[] };
    let agent = Agent::start(lab, &b.bins, &format!("{name}-{}", side.name()), side, extra)?;
    let rt = Runtime::spawn(&lab.node)?;
    let driver = PlexusDriver { agent: &agent, shim: b.bins.shim.clone() };
    driver.add_network(&network(&agent.ipam_dir()))?;
    let pod = Pod::new(&format!("{name}-{}", side.name()), vec![selection])?;
    driver.prepare(&pod)?;
    driver.add(&rt, &pod)?;
    driver.finish(&pod);
    let measured = runs(&agent, &pod);
    let deleted = driver.del(&rt, &pod);
    measured?;
    deleted
}

/// One side: its agent, the pod, the runs, DEL.
fn side_runs(b: &Bench, lab: &Lab, side: Side, fig: &mut Figure) -> anyhow::Result<()> {
    with_side_pod(
        b,
        lab,
        side,
        "xdp",
        |ipam| network(side, ipam),
        selection(side),
        |_, pod| {
            let _server = iperf_server(&pod.netns, POD_PORT, None)?;
            let (host, port) = match side {
                Side::Baseline => (pod.secondary_ip(1)?, POD_PORT),
                _ => (HOST_IP.to_owned(), HOST_PORT),
            };
            for r in 1..=b.set.repeat {
                check_interrupt()?;
                let (value, detail) = pps(lab, &host, port, b.set.traffic_secs)?;
                b.progress(
                    "portmap",
                    &format!("udp_pps_64b {r}/{}: {}: {value:.0} packets/s", b.set.repeat, side.name()),
                );
                fig.push(side, value, detail);
            }
            Ok(())
        },
    )
}

/// udp_pps_64b: XDP path, TC path and no NAT, side by side (see the module's notes).
pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let what = [
        Ok("plexus-portmap on a macvlan master, XDP path (pm_xdp, native on the veth master)"),
        Ok("plexus-portmap with --no-xdp: the TC path on the same master"),
        Ok("no NAT: the pod's own macvlan address"),
    ];
    let mut fig = Figure::new(
        "portmap",
        "udp_pps_64b",
        "packets/s",
        json!({"secs": b.set.traffic_secs, "frame_bytes": 64}),
    )
    .sides(what)
    .with_target(Target::at_least(Side::Reference, 1.5, ISSUE));
    lab.node.try_ip(&["addr", "add", &format!("{HOST_IP}/{PREFIX}"), "dev", MASTER])?;
    lab.client.try_ip(&["addr", "add", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"])?;
    let before = load();
    for side in [Side::Plexus, Side::Reference, Side::Baseline] {
        check_interrupt()?;
        if let Err(e) = side_runs(b, lab, side, &mut fig) {
            b.progress("portmap", &format!("udp_pps_64b: {} failed: {e:#}", side.name()));
            fig.fail(side, format!("{e:#}"));
        }
    }
    let after = load();
    // The addresses go: the other sections' macvlan networks do not expect them.
    let _ = lab.node.try_ip(&["addr", "del", &format!("{HOST_IP}/{PREFIX}"), "dev", MASTER]);
    let _ = lab.client.try_ip(&["addr", "del", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"]);
    fig.set_load(&before, &after);
    b.figures.push(fig);
    Ok(())
}
