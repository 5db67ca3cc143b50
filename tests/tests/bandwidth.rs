//! Bandwidth limits in eBPF (`plexus-bandwidth`), with real TCP traffic.
//!
//! Each test builds a world (a node namespace running the real agent) and attaches pods
//! through the real shim to a bridge or macvlan network whose configlist chains
//! `plexus-bandwidth`; a client namespace on that network runs iperf3 against the pod in both
//! directions, 1 and 8 flows, at 10 Mbit/s, 100 Mbit/s and 1 Gbit/s. The goodput iperf3's
//! receiver measures (after omitting the first second, TCP's slow start) must be within 5% of
//! what the configured rate lets through: the rate where TC enforces it, 1448/1500 of it where
//! XDP does (see `goodput`). With kubelet's huge burst it is measured from the first byte, to
//! show the burst changes nothing: at most the rate plus the bucket the limit starts with, at
//! least the rate. A measurement that comes out short is repeated, up to three attempts: see
//! `measured`.
//!
//! This kernel has no fq qdisc, so every limit here is the token bucket (the EDT arithmetic is
//! tested with BPF_PROG_TEST_RUN in the agent's unit tests).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_agent::dataplane::bandwidth::shaper::{BW_EGRESS, PIN_SUBDIR as BANDWIDTH_PIN_SUBDIR};
use plexus_agent::dataplane::bandwidth::table::Table;
use plexus_agent::dataplane::pin::PinDir;
use plexus_tests::traffic::cid;
use plexus_tests::world::bin;
use plexus_tests::{Netns, Proc, World};
use serde_json::{json, Value};

const NS: &str = "default";
const MBIT: u64 = 1_000_000;
/// Seconds of iperf3 per measurement, after one omitted second. Long against the bucket (at
/// least 300 ms, see plexus_agent::dataplane::bandwidth::plan), whose tokens may all be spent
/// inside the window on top of the rate.
const SECS: u32 = 8;

/// One measurement at a time: 1 Gbit/s through veths needs both cores of the machine.
static TRAFFIC: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// kubelet's "no burst limit": 2^31 - 1 bits.
const KUBELET_BURST: u64 = 2_147_483_647;

/// A world whose agent pins on its own bpffs (unmounted by the world, after its agent).
/// Fields drop in order: servers and namespaces first, then the world.
struct BwWorld {
    servers: Vec<Proc>,
    clients: Vec<Netns>,
    pods: Vec<Netns>,
    w: World,
    /// The world's bpffs, where the agent pins.
    pins: PathBuf,
}

impl BwWorld {
    fn new() -> BwWorld {
        let mut w = World::new();
        let pins = w.pin_on_own_bpffs();
        BwWorld { servers: Vec::new(), clients: Vec::new(), pods: Vec::new(), w, pins }
    }

    /// Starts (or restarts) the agent and waits until it has reconciled the shaping maps.
    fn start(&mut self) {
        let before = self.w.agent_log().matches("bandwidth limits reconciled").count();
        self.w.start_agent();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.w.agent_log().matches("bandwidth limits reconciled").count() <= before {
            assert!(Instant::now() < deadline, "the agent never loaded the shaper:\n{}", self.w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A client namespace whose `eth0` (with `addr`) is the peer of `node_end` in the node.
    fn client(&mut self, node_end: &str, addr: &str) -> String {
        let ns = Netns::new("bwcl");
        self.w.node.ip(&["link", "add", node_end, "type", "veth", "peer", "name", "eth0", "netns", &ns.name]);
        self.w.node.ip(&["link", "set", node_end, "up"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["addr", "add", addr, "dev", "eth0"]);
        let name = ns.name.clone();
        self.clients.push(ns);
        name
    }

    /// A pod attached with `annotation`, running an iperf3 server; returns (netns, address on
    /// the secondary network).
    fn pod(&mut self, name: &str, annotation: &Value) -> (String, String) {
        let ns = Netns::new("bwpod");
        self.w.write_pod(NS, name, Some(&annotation.to_string()));
        self.w.add(&cid(name), &ns, (NS, name)).expect_ok();
        let addr = ns.addresses("net1").into_iter().next().expect("net1 address");
        let addr = addr.split('/').next().unwrap_or_default().to_owned();
        let server = ns
            .command("iperf3")
            .args(["-s", "-p", "5201"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting iperf3 -s (install iperf3)");
        self.servers.push(Proc(server));
        let netns = ns.name.clone();
        self.pods.push(ns);
        (netns, addr)
    }

    /// `plexus-agent bandwidth list --json`, in the node's namespace: where the masters are,
    /// whose XDP programs it reports.
    fn list(&self) -> Vec<Value> {
        let out = self
            .w
            .node
            .command(bin("plexus-agent"))
            .args(["bandwidth", "list", "--json", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .output()
            .expect("running plexus-agent bandwidth list");
        assert!(out.status.success(), "bandwidth list: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("bandwidth list JSON")
    }

    fn set(&self, name: &str, args: &[&str]) {
        let out = Command::new(bin("plexus-agent"))
            .args(["bandwidth", "set", "--container-id", &cid(name), "--ifname", "net1", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .args(args)
            .output()
            .expect("running plexus-agent bandwidth set");
        assert!(out.status.success(), "bandwidth set: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn shaper_pins(&self) -> PathBuf {
        self.pins.join(BANDWIDTH_PIN_SUBDIR)
    }
}

/// Goodput in bit/s measured by the receiver: client namespace `from` to `server` (or the
/// reverse with `reverse`: the server sends).
fn iperf(from: &str, server: &str, flows: u32, reverse: bool) -> f64 {
    iperf_flows(from, server, 5201, flows, reverse, 1)
}

/// One flow to `server:port`.
fn iperf_port(from: &str, server: &str, port: u16, reverse: bool) -> f64 {
    iperf_flows(from, server, port, 1, reverse, 1)
}

/// `omit`: seconds at the start left out of the measurement (TCP's slow start).
fn iperf_flows(from: &str, server: &str, port: u16, flows: u32, reverse: bool, omit: u32) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", from, "iperf3", "-J", "-c", server, "-p", &port.to_string()]).args([
            "-t",
            &SECS.to_string(),
            "-O",
            &omit.to_string(),
            "-P",
            &flows.to_string(),
        ]);
        if reverse {
            cmd.arg("-R");
        }
        let out = cmd.output().expect("running iperf3");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(bps) = report["end"]["sum_received"]["bits_per_second"].as_f64() {
            return bps;
        }
        // The server may not listen yet.
        assert!(
            Instant::now() < deadline,
            "iperf3 to {server} failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A rate measured until it is not below the limit's tolerance, at most three times; the best
/// attempt and how many were made. The machine's other work (two cores, shared with the test
/// harness and the agent) can only slow a flow down: a single TCP flow at 1 Gbit/s has come
/// out a few percent short now and then, and again within 1% on the next attempt; on CI's
/// machine one at 30 Mbit/s once came out 9% short, where the development machine measured it
/// within 3% every time, its two cores busy or not. A limiter that passes too much is caught
/// on any attempt (the best one is the highest), and one that passes too little on all three.
fn measured(rate: u64, mut measure: impl FnMut() -> f64) -> (f64, u32) {
    let mut best = measure();
    let mut attempts = 1;
    while best < rate as f64 * (1.0 - TOLERANCE) && attempts < 3 {
        best = best.max(measure());
        attempts += 1;
    }
    (best, attempts)
}

/// How far a measured rate may be from the limit.
const TOLERANCE: f64 = 0.05;

/// The TCP goodput a limit of `rate` lets through in `direction`, by where `bandwidth list`
/// (`rows`, one pod's) says it is enforced. A limit charges each packet its IP length. TC
/// mostly sees a flow's segments coalesced (GSO on the sending side, GRO on a receiving veth)
/// and charges their headers once: the goodput is the rate. XDP sees every segment as its own
/// frame, so each 1448 bytes of payload (MTU 1500, timestamps on) cost 1500: the goodput is
/// 3.5% under the rate, and taking the rate for it left a single flow 1.5% to recover its
/// policer drops in (under CI's load, all three attempts once came out at 94.4%).
fn goodput(rate: u64, rows: &[Value], direction: &str) -> u64 {
    const PAYLOAD: u64 = 1448;
    const PACKET: u64 = 1500;
    if limit_row(rows, direction)["xdp"].is_null() {
        rate
    } else {
        rate * PAYLOAD / PACKET
    }
}

/// The bucket of the limit in `direction` (`bandwidth list`'s burst), in bits.
fn bucket_bits(rows: &[Value], direction: &str) -> u64 {
    let row = limit_row(rows, direction);
    row["burst_bits"].as_u64().unwrap_or_else(|| panic!("no burst in {row}"))
}

/// The row of `bandwidth list` (`rows`, one pod's) for the limit in `direction`.
fn limit_row<'a>(rows: &'a [Value], direction: &str) -> &'a Value {
    let row = rows.iter().find(|r| r["direction"] == direction);
    row.unwrap_or_else(|| panic!("no {direction} limit in {rows:#?}"))
}

/// `measure` within the tolerance of `rate`, measured as [`measured`] says (best of at most
/// three attempts, the count in the message).
fn assert_measured(what: &str, rate: u64, measure: impl FnMut() -> f64) {
    let (got, attempts) = measured(rate, measure);
    assert_within(&format!("{what} (best of {attempts})"), got, rate);
}

/// `got` within [`TOLERANCE`] of `rate`, either way.
fn assert_within(what: &str, got: f64, rate: u64) {
    assert_between(what, got, rate, rate);
}

/// `got` no more than [`TOLERANCE`] under `low` and no more than it over `high`.
fn assert_between(what: &str, got: f64, low: u64, high: u64) {
    let (under, over) = (got / low as f64, got / high as f64);
    assert!(
        under >= 1.0 - TOLERANCE && over <= 1.0 + TOLERANCE,
        "{what}: {:.2} Mbit/s achieved for a limit of {:.2} Mbit/s ({:.1}%)",
        got / 1e6,
        if under < 1.0 { low } else { high } as f64 / 1e6,
        if under < 1.0 { under } else { over } * 100.0
    );
}

fn bridge_nad(w: &World, name: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "bwbr0",
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.79.0.0/24", "rangeStart": "10.79.0.10", "rangeEnd": "10.79.0.99"}]],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

fn macvlan_nad(w: &World, name: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "macvlan",
                "master": "bwm0",
                "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.80.0.0/24", "rangeStart": "10.80.0.10", "rangeEnd": "10.80.0.99"}]],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

fn limited(network: &str, rate: u64, burst: Option<u64>) -> Value {
    let mut bw = json!({"ingressRate": rate, "egressRate": rate});
    if let Some(b) = burst {
        bw["ingressBurst"] = json!(b);
        bw["egressBurst"] = json!(b);
    }
    json!([{"name": network, "bandwidth": bw}])
}

/// Both directions, 1 and 8 flows, each rate (a pod per rate), then DEL and nothing left. With
/// a burst, measured from the first byte: what the limit lets through is then the rate over
/// the window plus the bucket it starts with (the one `bandwidth list` shows, whatever burst
/// was configured), and that is what the goodput must be within the tolerance of.
fn rates_hold(nad: fn(&World, &str) -> String, network: &str, client: (&str, &str), burst: Option<u64>) {
    let _serial = TRAFFIC.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut t = BwWorld::new();
    // Bridge: the client's veth joins the bridge once the first ADD has made it. Macvlan: the
    // client's veth peer in the node is the master.
    let client = t.client(client.0, client.1);
    t.w.write_nad(NS, network, Some(&nad(&t.w, network)));
    t.start();
    let mut results = Vec::new();
    for (i, rate) in [10 * MBIT, 100 * MBIT, 1000 * MBIT].into_iter().enumerate() {
        let name = format!("bw{i}");
        let (_, addr) = t.pod(&name, &limited(network, rate, burst));
        if network == "bwbr" && i == 0 {
            t.w.node.ip(&["link", "set", "bwcl0", "master", "bwbr0"]);
        }
        let mine: Vec<Value> = t.list().into_iter().filter(|r| r["container_id"] == cid(&name)).collect();
        for flows in [1, 8] {
            for (direction, reverse) in [("ingress", false), ("egress", true)] {
                let omit = if burst.is_some() { 0 } else { 1 };
                // From the first byte, the bucket the limit starts with may go out on top of
                // the rate (its bits over the window): the most the limit lets through. It is
                // not the least: a flow's slow start overshoots the bucket, loses a window and
                // may sit out a timeout before the rate's tokens reach it, so one flow has been
                // measured at 97% of the rate alone (CI, three attempts in a row).
                let full_bucket = if omit == 0 { bucket_bits(&mine, direction) / u64::from(SECS) } else { 0 };
                let (low, high) =
                    (goodput(rate, &mine, direction), goodput(rate + full_bucket, &mine, direction));
                let (got, attempts) =
                    measured(low, || iperf_flows(&client, &addr, 5201, flows, reverse, omit));
                results.push((
                    format!(
                        "{network} {direction} {} Mbit/s, {flows} flow(s), {attempts} attempt(s), goodput the limit lets through {:.1} to {:.1} Mbit/s",
                        rate / MBIT,
                        low as f64 / 1e6,
                        high as f64 / 1e6
                    ),
                    got,
                    (low, high),
                ));
            }
        }
        let rows = t.list();
        let mine: Vec<&Value> = rows.iter().filter(|r| r["container_id"] == cid(&name)).collect();
        assert_eq!(mine.len(), 2, "{rows:#?}");
        for r in mine {
            assert_eq!(r["mechanism"], "token-bucket", "{r}");
            assert_eq!(r["rate_bps"].as_u64(), Some(rate), "{r}");
            assert!(r["installed"].as_bool() == Some(true) && r["passed_bytes"].as_u64() > Some(0), "{r}");
        }
    }
    let report: Vec<String> = results
        .iter()
        .map(|(what, got, (low, high))| {
            format!(
                "{what}: {:.1}% of the most, {:.1}% of the least",
                got / *high as f64 * 100.0,
                got / *low as f64 * 100.0
            )
        })
        .collect();
    eprintln!("{}", report.join("\n"));
    for (what, got, (low, high)) in &results {
        assert_between(what, *got, *low, *high);
    }

    for i in 0..3 {
        let name = format!("bw{i}");
        let out = t.w.del(&cid(&name), &t.pods[i], (NS, &name));
        assert!(out.ok(), "DEL: {}", out.stderr);
    }
    assert!(t.list().is_empty(), "limits left after DEL: {:#?}", t.list());
    let table = Table::open_pinned(&PinDir::open(&t.shaper_pins())).expect("pinned maps");
    assert!(table.keys().is_empty(), "map entries left after DEL: {:?}", table.keys());
    // A master's program stays while the agent runs (the next ADD needs it); a restart with
    // nothing limited detaches it. A pod's veth filters went with the DEL.
    t.w.kill_agent();
    t.start();
    let links = PinDir::open(&t.shaper_pins()).link_names().expect("link pins");
    assert!(links.is_empty(), "programs left attached with nothing limited: {links:?}");
    let records = std::fs::read_dir(t.w.path("state").join("bandwidth")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "bandwidth records left after DEL");
}

#[test]
fn kernel_bridge_attachments_hold_their_rates_both_ways() {
    rates_hold(bridge_nad, "bwbr", ("bwcl0", "10.79.0.200/24"), None);
}

#[test]
fn kernel_macvlan_attachments_hold_their_rates_both_ways() {
    rates_hold(macvlan_nad, "bwmv", ("bwm0", "10.80.0.200/24"), None);
}

#[test]
fn kernel_kubelets_huge_burst_does_not_break_the_rate() {
    rates_hold(bridge_nad, "bwbr", ("bwcl0", "10.79.0.200/24"), Some(KUBELET_BURST));
}

#[test]
fn kernel_limits_change_in_place_without_recreating_the_pod() {
    let _serial = TRAFFIC.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut t = BwWorld::new();
    let client = t.client("bwcl0", "10.79.0.200/24");
    t.w.write_nad(NS, "bwbr", Some(&bridge_nad(&t.w, "bwbr")));
    t.start();
    let (_, addr) = t.pod("resized", &limited("bwbr", 10 * MBIT, None));
    t.w.node.ip(&["link", "set", "bwcl0", "master", "bwbr0"]);
    assert_measured("before", 10 * MBIT, || iperf(&client, &addr, 1, false));

    t.set("resized", &["--ingress-rate", "30000000"]);
    assert_measured("after set", 30 * MBIT, || iperf(&client, &addr, 1, false));
    // The other direction kept its limit; the listing and the agent's CHECK agree.
    assert_measured("egress, untouched", 10 * MBIT, || iperf(&client, &addr, 1, true));
    let rows = t.list();
    let rate = |d: &str| rows.iter().find(|r| r["direction"] == d).and_then(|r| r["rate_bps"].as_u64());
    assert_eq!((rate("ingress"), rate("egress")), (Some(30 * MBIT), Some(10 * MBIT)), "{rows:#?}");
    let check = t.w.cni("CHECK", &cid("resized"), &t.pods[0], (NS, "resized"));
    assert!(check.ok(), "CHECK after an update in place: {} {}", check.stdout, check.stderr);

    // A direction without a limit cannot be added in place: it says why.
    let out = Command::new(bin("plexus-agent"))
        .args(["bandwidth", "set", "--container-id", "no-such", "--ifname", "net1", "--egress-rate", "1000"])
        .arg("--bpf-pin-dir")
        .arg(&t.pins)
        .arg("--state-dir")
        .arg(t.w.path("state"))
        .output()
        .expect("running plexus-agent bandwidth set");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("container no-such interface net1 has no bandwidth limits recorded"), "{err}");
}

/// The native macvlan declaring both capabilities itself, no chained plugin: the pod's port
/// mapping and its limit both apply (iperf3 reaches the pod through hostIP:hostPort, at the
/// limited rate), and DEL removes both.
#[test]
fn kernel_native_macvlan_serves_port_mappings_and_bandwidth_itself() {
    let _serial = TRAFFIC.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut t = BwWorld::new();
    let client = t.client("bwm0", "10.80.0.200/24");
    // The node's address on the network: the host IP of the mapping.
    t.w.node.ip(&["addr", "add", "10.80.0.1/24", "dev", "bwm0"]);
    let nad = json!({
        "cniVersion": "1.0.0",
        "name": "bwnative",
        "type": "macvlan",
        "master": "bwm0",
        "mode": "bridge",
        "capabilities": {"portMappings": true, "bandwidth": true},
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.80.0.0/24", "rangeStart": "10.80.0.10", "rangeEnd": "10.80.0.99"}]],
            "dataDir": t.w.path("ipam").join("bwnative"),
        }
    });
    t.w.write_nad(NS, "bwnative", Some(&nad.to_string()));
    t.start();
    let annotation = json!([{
        "name": "bwnative",
        "bandwidth": {"ingressRate": 20 * MBIT, "egressRate": 20 * MBIT},
        "portMappings": [{"hostPort": 15201, "containerPort": 5201, "protocol": "tcp"}]
    }]);
    t.pod("native", &annotation);
    let log = t.w.agent_log();
    assert!(log.lines().any(|l| l.contains("plugin types run natively:") && l.contains("macvlan")), "{log}");

    let rows = t.list();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    // Measured as the other rates are (see `measured`), against what the limit lets through
    // where it is enforced: XDP on the master (see `goodput`).
    let expected = goodput(20 * MBIT, &rows, "ingress");
    assert_measured("native macvlan, to the pod via hostIP:hostPort", expected, || {
        iperf_port(&client, "10.80.0.1", 15201, false)
    });
    let mappings = Command::new(bin("plexus-agent"))
        .args(["portmap", "list", "--json", "--bpf-pin-dir"])
        .arg(&t.pins)
        .arg("--state-dir")
        .arg(t.w.path("state"))
        .output()
        .expect("portmap list");
    let mappings: Value = serde_json::from_slice(&mappings.stdout).expect("portmap list JSON");
    assert_eq!(mappings.as_array().map(Vec::len), Some(1), "{mappings:#}");
    assert!(mappings[0]["packets_in"].as_u64() > Some(0), "{mappings:#}");

    let out = t.w.del(&cid("native"), &t.pods[0], (NS, "native"));
    assert!(out.ok(), "DEL: {}", out.stderr);
    assert!(t.list().is_empty(), "limits left after DEL: {:#?}", t.list());
    let left = Command::new(bin("plexus-agent"))
        .args(["portmap", "list", "--json", "--bpf-pin-dir"])
        .arg(&t.pins)
        .arg("--state-dir")
        .arg(t.w.path("state"))
        .output()
        .expect("portmap list");
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "[]", "mappings left after DEL");
}

/// Port-mapped traffic to a bridge pod is delivered straight into the pod (bpf_redirect_peer),
/// except when the pod limits its ingress: then through the veth's transmit path, where the
/// limit applies. Both chained plugins, one pod limited and one not.
#[test]
fn kernel_port_mapped_traffic_counts_against_the_ingress_limit() {
    let _serial = TRAFFIC.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut t = BwWorld::new();
    let client = t.client("bwcl0", "10.79.0.200/24");
    let mut nad: Value = serde_json::from_str(&bridge_nad(&t.w, "bwbr")).expect("NAD JSON");
    if let Some(plugins) = nad["plugins"].as_array_mut() {
        plugins.insert(1, json!({"type": "plexus-portmap", "capabilities": {"portMappings": true}}));
    }
    t.w.write_nad(NS, "bwbr", Some(&nad.to_string()));
    t.start();
    let mapped = |port: u16, bandwidth: Option<Value>| {
        let mut sel = json!({"name": "bwbr", "portMappings": [{"hostPort": port, "containerPort": 5201}]});
        if let Some(bw) = bandwidth {
            sel["bandwidth"] = bw;
        }
        json!([sel])
    };
    let (limited, _) = t.pod("limited", &mapped(15201, Some(json!({"ingressRate": 20 * MBIT}))));
    t.pod("free", &mapped(15202, None));
    t.w.node.ip(&["link", "set", "bwcl0", "master", "bwbr0"]);

    assert_measured("limited pod via 10.79.0.1:15201", 20 * MBIT, || {
        iperf_port(&client, "10.79.0.1", 15201, false)
    });
    let free = iperf_port(&client, "10.79.0.1", 15202, false);
    assert!(free > 200.0 * MBIT as f64, "the unlimited pod got {:.1} Mbit/s", free / 1e6);

    // Seconds after the ADDs, the port mappings' hooks on the pods' veths have moved to TCX
    // links, which run before every filter; shaping kept its filters, so on a hook both use
    // (the pod's veth) it still comes after the port mappings.
    let veth = node_end(&t, &limited);
    let portmap_links = PinDir::open(&t.pins).link_names().expect("port mapping link pins");
    assert!(
        portmap_links.contains(&format!("tc_{}_in", veth.1)),
        "the port mappings' hook on {} did not move: {portmap_links:?}",
        veth.0
    );
    let shaping_links =
        PinDir::open(&t.pins.join(BANDWIDTH_PIN_SUBDIR)).link_names().expect("shaping link pins");
    assert!(
        !shaping_links.iter().any(|l| l.starts_with(&format!("tc_{}_", veth.1))),
        "shaping moved off its filters on {}: {shaping_links:?}",
        veth.0
    );
    let (ok, out) = t.w.node.exec(&["tc", "filter", "show", "dev", &veth.0, "egress"]);
    assert!(ok && out.contains(BW_EGRESS), "no shaping filter on {}'s transmit path: {out}", veth.0);
}

/// The node's end (name, index) of the veth whose other end is `net1` in namespace `pod`.
fn node_end(t: &BwWorld, pod: &str) -> (String, u32) {
    let pod = t.pods.iter().find(|ns| ns.name == pod).expect("the pod's namespace");
    let net1 = pod.link("net1").expect("the pod's net1");
    let index = net1["link_index"].as_u64().and_then(|i| u32::try_from(i).ok()).expect("net1's peer index");
    let links: Value = serde_json::from_str(&t.w.node.ip(&["-j", "link", "show"])).expect("ip -j JSON");
    let name = links
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["ifindex"].as_u64() == Some(u64::from(index)))
        .and_then(|l| l["ifname"].as_str())
        .unwrap_or_else(|| panic!("no interface {index} in the node: {links}"));
    (name.to_owned(), index)
}
