//! The XDP path against the TC path (issue #18), in the portmap section, on both wires where
//! clients' traffic enters the node:
//! - `udp_pps_64b`: the macvlan master (`pxmv0`, a veth whose peer `mv0` is the client's);
//!   `pm_xdp` translates and passes the frame up to macvlan;
//! - `udp_pps_64b_bridge`: the uplink of the portmap bridge (`pxcl0`, the port whose peer
//!   `eth1` is the client's, named in the network's `uplinks`); `pm_xdp` translates and
//!   redirects the frame straight into the pod's veth (whose pod end the agent gave GRO).
//!
//! 64-byte UDP frames (22 bytes of payload) from the client to a pod, sent by the kernel's
//! live-frame generator (see [`super::live_frames`]) as fast as it goes, for the traffic
//! seconds: they reach the node's interface as XDP frames on its NAPI ring, as a NIC delivers
//! them. The figure is the datagrams per second the node delivered to the pod's UDP socket
//! (read or dropped for a full buffer: the dataplane's rate, not the application's). Sides:
//! plexus, the agent with `--xdp always` (native XDP on veth, on a macvlan master too, where
//! the default `auto` leaves port mappings to TC because of this figure); the reference
//! column, the same agent with `--xdp never` (veth builds the socket buffer, TC translates: on the master, or on the bridge
//! after it forwarded the frame up to itself); the baseline, no NAT (the pod's own MAC and
//! address, no port mapping). One agent at a time: an interface holds one XDP program. GRO is
//! on on the receiving interface for the figure (it gives the veth NAPI when no XDP program
//! does; a NIC has both).
//!
//! The generator and the node's receive path share one CPU (the receiving NAPI runs in the
//! softirq the generator's send raises), so the rate is what one CPU sends and receives.

use std::net::SocketAddrV4;

use anyhow::Context;
use serde_json::{json, Value};

use super::report::{Figure, Target};
use super::runner::{Driver, PlexusDriver, Pod, Runtime, Selection};
use super::stats::load;
use super::topology::{
    bridge_network, mac, Agent, Lab, CLIENT_ADDR, CLIENT_PORT, MASTER, PM_BRIDGE, PM_GATEWAY,
};
use super::traffic::{flood_from, udp_delivered, udp_sink};
use super::{check_interrupt, Bench, Side};

/// The master's address (the host IP of the macvlan mapping) and the client's, on their own
/// subnet.
const HOST_IP: &str = "10.69.0.1";
const CLIENT_IP: &str = "10.69.0.200";
const CLIENT_PORT_UDP: u16 = 40000;
const PREFIX: u8 = 16;
/// The pod's UDP port, and the host port mapping to it.
const POD_PORT: u16 = 5201;
const HOST_PORT: u16 = 7201;
/// UDP payload of a 64-byte frame: 64 - Ethernet 14 - IPv4 20 - UDP 8.
const PAYLOAD: usize = 22;
const ISSUE: &str = "issue #18";

/// Where the client's frames enter the node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// The macvlan master.
    Macvlan,
    /// The portmap bridge's uplink.
    Bridge,
}

impl Wire {
    fn figure(self) -> &'static str {
        match self {
            Wire::Macvlan => "udp_pps_64b",
            Wire::Bridge => "udp_pps_64b_bridge",
        }
    }

    /// The node's interface the frames arrive on.
    fn receiver(self) -> &'static str {
        match self {
            Wire::Macvlan => MASTER,
            Wire::Bridge => CLIENT_PORT,
        }
    }

    /// The client's interface the frames leave from.
    fn sender(self) -> &'static str {
        match self {
            Wire::Macvlan => "mv0",
            Wire::Bridge => "eth1",
        }
    }

    /// The node's interface holding the host IP, and that IP.
    fn host(self) -> (&'static str, &'static str) {
        match self {
            Wire::Macvlan => (MASTER, HOST_IP),
            Wire::Bridge => (PM_BRIDGE, PM_GATEWAY),
        }
    }

    fn client(self) -> SocketAddrV4 {
        let ip = match self {
            Wire::Macvlan => CLIENT_IP,
            Wire::Bridge => CLIENT_ADDR,
        };
        SocketAddrV4::new(ip.parse().expect("a literal address"), CLIENT_PORT_UDP)
    }

    /// The network of the figure, with or without plexus-portmap.
    fn network(self, side: Side, ipam_dir: &std::path::Path) -> Value {
        let portmap = (side != Side::Baseline).then_some(self).map(|w| match w {
            Wire::Macvlan => json!({"type": "plexus-portmap", "capabilities": {"portMappings": true}}),
            Wire::Bridge => json!({
                "type": "plexus-portmap", "capabilities": {"portMappings": true}, "uplinks": [CLIENT_PORT],
            }),
        });
        match self {
            Wire::Macvlan => {
                let a = side.index() * 40 + 1;
                let mut plugins = vec![json!({
                    "type": "macvlan", "master": MASTER, "mode": "bridge",
                    "ipam": {"type": "host-local", "ranges": [[{
                        "subnet": format!("10.69.0.0/{PREFIX}"),
                        "rangeStart": format!("10.69.{a}.1"),
                        "rangeEnd": format!("10.69.{}.254", a + 38),
                    }]], "dataDir": ipam_dir},
                })];
                plugins.extend(portmap);
                json!({"cniVersion": "1.0.0", "name": "bench-xdp", "plugins": plugins})
            }
            Wire::Bridge => bridge_network("bench-xdp", 1, side, ipam_dir, portmap),
        }
    }

    fn what(self) -> [Result<&'static str, &'static str>; 3] {
        match self {
            Wire::Macvlan => [
                Ok("plexus-portmap on a macvlan master, XDP path (pm_xdp, native on the veth master)"),
                Ok("plexus-portmap with --xdp never: the TC path on the same master"),
                Ok("no NAT: the pod's own macvlan address"),
            ],
            Wire::Bridge => [
                Ok("plexus-portmap on a bridge's uplink, XDP path (pm_xdp, native on the veth uplink, redirected into the pod's veth)"),
                Ok("plexus-portmap with --xdp never: the TC path on the bridge"),
                Ok("no NAT: the pod's own address, forwarded by the bridge"),
            ],
        }
    }
}

fn selection(side: Side) -> Selection {
    if side == Side::Baseline {
        return Selection::plain("bench-xdp");
    }
    let pm = json!({"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "udp"});
    Selection::with("bench-xdp", "portMappings", json!([pm]))
}

/// Packets per second the node delivered to the pod's UDP socket while the client's live
/// frames (see [`super::live_frames`]) went to `dst` through `dst_mac`, and the run's figures.
fn pps(
    lab: &Lab,
    wire: Wire,
    pod: &Pod,
    dst_mac: &str,
    dst: SocketAddrV4,
    secs: u32,
) -> anyhow::Result<(f64, Value)> {
    let before = udp_delivered(&pod.netns)?;
    let sent = flood_from(&lab.client, wire.sender(), dst_mac, wire.client(), dst, PAYLOAD, secs)?;
    let delivered = udp_delivered(&pod.netns)?.saturating_sub(before);
    let secs = sent["secs"].as_f64().context("the flood's duration")?;
    if delivered == 0 {
        anyhow::bail!("nothing reached the pod's socket at {dst} ({} frames sent)", sent["sent"]);
    }
    let detail = json!({"sent": sent["sent"], "delivered": delivered, "secs": secs, "frame_bytes": sent["frame_bytes"]});
    Ok((delivered as f64 / secs, detail))
}

/// Turns GRO on on a node interface for the life of the value (and back off after, if it
/// was): a veth takes live XDP frames only while it has NAPI, which GRO gives it when no XDP
/// program does (see [`super::live_frames`]). A NIC has both.
pub(super) struct GroOn<'a> {
    lab: &'a Lab,
    dev: &'static str,
    was_on: bool,
}

impl<'a> GroOn<'a> {
    pub(super) fn new(lab: &'a Lab, dev: &'static str) -> anyhow::Result<Self> {
        let k = lab.node.command("ethtool").args(["-k", dev]).output().context("ethtool -k")?;
        let was_on =
            String::from_utf8_lossy(&k.stdout).lines().any(|l| l.trim() == "generic-receive-offload: on");
        let on = lab.node.command("ethtool").args(["-K", dev, "gro", "on"]).status().context("ethtool -K")?;
        anyhow::ensure!(on.success(), "ethtool -K {dev} gro on failed");
        Ok(GroOn { lab, dev, was_on })
    }
}

impl Drop for GroOn<'_> {
    fn drop(&mut self) {
        if !self.was_on {
            let _ = self.lab.node.command("ethtool").args(["-K", self.dev, "gro", "off"]).status();
        }
    }
}

/// One side of an XDP figure: its agent (`--xdp always` for plexus's column, the XDP path
/// wherever the programs can run, a macvlan master's port mappings included, which `auto`
/// leaves to TC; `--xdp never` for the reference column, the TC path), the network `network` makes from the agent's IPAM directory, a pod with `selection`
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
    let extra: &[&str] = if side == Side::Reference { &["--xdp", "never"] } else { &["--xdp", "always"] };
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
fn side_runs(b: &Bench, lab: &Lab, wire: Wire, side: Side, fig: &mut Figure) -> anyhow::Result<()> {
    with_side_pod(
        b,
        lab,
        side,
        "xdp",
        |ipam| wire.network(side, ipam),
        selection(side),
        |_, pod| {
            let _sink = udp_sink(&pod.netns, POD_PORT)?;
            let (mac, dst) = match side {
                Side::Baseline => {
                    let ip = pod.secondary_ip(1)?.parse().context("the pod's address")?;
                    (mac(&pod.netns, "net1")?, SocketAddrV4::new(ip, POD_PORT))
                }
                _ => {
                    let (dev, ip) = wire.host();
                    (mac(&lab.node, dev)?, SocketAddrV4::new(ip.parse()?, HOST_PORT))
                }
            };
            for r in 1..=b.set.repeat {
                check_interrupt()?;
                let (value, detail) = pps(lab, wire, pod, &mac, dst, b.set.traffic_secs)?;
                b.progress(
                    "portmap",
                    &format!("{} {r}/{}: {}: {value:.0} packets/s", wire.figure(), b.set.repeat, side.name()),
                );
                fig.push(side, value, detail);
            }
            Ok(())
        },
    )
}

/// One figure: XDP path, TC path and no NAT, side by side (see the module's notes).
fn figure(b: &mut Bench, lab: &Lab, wire: Wire) -> anyhow::Result<()> {
    let mut fig = Figure::new(
        "portmap",
        wire.figure(),
        "packets/s",
        json!({"secs": b.set.traffic_secs, "frame_bytes": 64}),
    )
    .sides(wire.what())
    .with_target(Target::at_least(Side::Reference, 1.5, ISSUE));
    let gro = GroOn::new(lab, wire.receiver())?;
    let before = load();
    for side in [Side::Plexus, Side::Reference, Side::Baseline] {
        check_interrupt()?;
        if let Err(e) = side_runs(b, lab, wire, side, &mut fig) {
            b.progress("portmap", &format!("{}: {} failed: {e:#}", wire.figure(), side.name()));
            fig.fail(side, format!("{e:#}"));
        }
    }
    let after = load();
    drop(gro);
    fig.set_load(&before, &after);
    b.figures.push(fig);
    Ok(())
}

/// udp_pps_64b on the macvlan master, then udp_pps_64b_bridge on the bridge's uplink.
pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    lab.node.try_ip(&["addr", "add", &format!("{HOST_IP}/{PREFIX}"), "dev", MASTER])?;
    lab.client.try_ip(&["addr", "add", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"])?;
    let macvlan = figure(b, lab, Wire::Macvlan);
    // The addresses go: the other sections' macvlan networks do not expect them.
    let _ = lab.node.try_ip(&["addr", "del", &format!("{HOST_IP}/{PREFIX}"), "dev", MASTER]);
    let _ = lab.client.try_ip(&["addr", "del", &format!("{CLIENT_IP}/{PREFIX}"), "dev", "mv0"]);
    macvlan?;
    // No side needs bridged traffic through iptables (plexus and the baselines of the section
    // run without it too): with it, the TC path and the baseline would pay netfilter's hooks
    // on the bridge, which the XDP redirect skips.
    lab.bridge_netfilter(false)?;
    let bridge = figure(b, lab, Wire::Bridge);
    lab.bridge_netfilter(true)?;
    bridge
}
