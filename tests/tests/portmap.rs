//! Port mappings in eBPF (`plexus-portmap`), with real traffic.
//!
//! Each test builds a world (a node namespace running the real agent), attaches pods through
//! the real shim to a bridge or macvlan network whose configlist chains `plexus-portmap`, and
//! sends TCP and UDP over IPv4 and IPv6 from a client namespace on that network (and from the
//! node itself, and from the pods) to hostIP:hostPort. Every sender has checksum offload off
//! (`ethtool -K tx off`): with it on, veth passes CHECKSUM_PARTIAL packets whose checksums
//! nobody verifies, which would hide a broken rewrite.
//!
//! The agent pins its BPF objects on a bpffs the test mounts for the world (`ip netns exec`,
//! which runs the agent, hides /sys/fs/bpf), so they survive agent restarts like on a node.
//!
//! The tests of what flow tracking brings (a mapped port no longer hides the pod's own port:
//! direct peers, the pod's own connections, several host ports to one container port, path MTU
//! discovery, flows across restarts and DELs) are in the modules below; [`semantics`] runs
//! one suite against both plexus-portmap and the reference `portmap` plugin; [`xdp`] tests the
//! XDP program on a macvlan master.

#[path = "portmap/direct.rs"]
mod direct;
#[path = "portmap/flows.rs"]
mod flows;
#[path = "portmap/hooks.rs"]
mod hooks;
#[path = "portmap/pmtu.rs"]
mod pmtu;
#[path = "portmap/semantics.rs"]
mod semantics;
#[path = "portmap/xdp.rs"]
mod xdp;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_agent::dataplane::pin::PinDir;
use plexus_agent::dataplane::portmap::store::Store;
use plexus_agent::dataplane::portmap::table::Tables;
use plexus_tests::traffic::{
    cid, client_namespace, no_dad, plain, python, run_until_ok, start_server, tx_off,
};
use plexus_tests::world::bin;
use plexus_tests::{Netns, Proc, World};
use serde_json::{json, Value};

const NS: &str = "default";

/// Servers and clients: one small script (portmap/pm.py), run with the system python.
const SCRIPT: &str = include_str!("portmap/pm.py");

/// A world whose agent pins on its own bpffs (unmounted by the world, after its agent).
struct PmWorld {
    w: World,
    servers: Vec<Proc>,
    clients: Vec<Netns>,
    pods: Vec<Netns>,
    /// The world's bpffs, where the agent pins.
    pins: PathBuf,
}

impl PmWorld {
    fn new() -> PmWorld {
        let mut w = World::new();
        let pins = w.pin_on_own_bpffs();
        std::fs::write(w.path("pm.py"), SCRIPT).expect("writing the traffic script");
        // Addresses usable at once: no duplicate address detection in this private world.
        no_dad(&w.node);
        PmWorld { w, servers: Vec::new(), clients: Vec::new(), pods: Vec::new(), pins }
    }

    fn script(&self) -> String {
        self.w.path("pm.py").display().to_string()
    }

    /// `plexus-agent portmap list --json`, in the node's namespace (where the interfaces whose
    /// XDP mode it reports are).
    fn list(&self) -> Vec<Value> {
        let out = self
            .w
            .node
            .command(bin("plexus-agent"))
            .args(["portmap", "list", "--json", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .output()
            .expect("running plexus-agent portmap list");
        assert!(out.status.success(), "portmap list: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("portmap list JSON")
    }

    fn list_text(&self) -> String {
        let out = self
            .w
            .node
            .command(bin("plexus-agent"))
            .args(["portmap", "list", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .output()
            .expect("running plexus-agent portmap list");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the agent has reconciled the dataplane `starts` times (it loads in the
    /// background after each start).
    fn wait_reconciled(&self, starts: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while plain(&self.w.agent_log()).matches("port mappings reconciled").count() < starts {
            assert!(Instant::now() < deadline, "the agent never reconciled:\n{}", self.w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn link_pins(&self) -> Vec<String> {
        PinDir::open(&self.pins).link_names().expect("link pins")
    }

    /// A pod with the given networks annotation, attached, serving TCP and UDP on each of
    /// `ports` with its name as greeting. Returns its index in `pods`.
    fn pod(&mut self, name: &str, annotation: &Value, ports: &[u16]) -> usize {
        let ns = Netns::new("pmpod");
        no_dad(&ns);
        self.w.write_pod(NS, name, Some(&annotation.to_string()));
        self.w.add(&cid(name), &ns, (NS, name)).expect_ok();
        for ifname in ns.link_names().into_iter().filter(|n| n != "lo") {
            tx_off(&ns, &ifname);
        }
        for port in ports {
            let server = self.serve(&ns, name, *port);
            self.servers.push(server);
        }
        self.pods.push(ns);
        self.pods.len() - 1
    }

    fn serve(&self, ns: &Netns, name: &str, port: u16) -> Proc {
        self.start(ns, &["serve", name, &port.to_string()])
    }

    /// Starts a server of the traffic script in `ns` (`args`: its mode and arguments) and waits
    /// until it is listening.
    fn start(&self, ns: &Netns, args: &[&str]) -> Proc {
        start_server(ns, Path::new(&self.script()), args)
    }

    /// The IPv4 and IPv6 address (without prefix) of the pod's interface on the mapped
    /// network.
    fn pod_ips(&self, pod: usize) -> (String, String) {
        let addrs = self.pods[pod].addresses("net1");
        let pick = |v6: bool| {
            addrs
                .iter()
                .filter(|a| a.contains(':') == v6)
                .find_map(|a| a.split('/').next().map(str::to_owned))
                .unwrap_or_else(|| {
                    panic!("no {} address on net1: {addrs:?}", if v6 { "IPv6" } else { "IPv4" })
                })
        };
        (pick(false), pick(true))
    }

    /// The flows `plexus-agent portmap flows --json` lists.
    fn flows_json(&self) -> Vec<Value> {
        let out = Command::new(bin("plexus-agent"))
            .args(["portmap", "flows", "--json", "--bpf-pin-dir"])
            .arg(&self.pins)
            .output()
            .expect("running plexus-agent portmap flows");
        assert!(out.status.success(), "portmap flows: {}", String::from_utf8_lossy(&out.stderr));
        let listing: Value = serde_json::from_slice(&out.stdout).expect("portmap flows JSON");
        listing["flows"].as_array().cloned().unwrap_or_else(|| panic!("no flows in {listing}"))
    }

    /// The agent's maps, opened from their pins.
    fn tables(&self) -> Tables {
        Tables::open_pinned(&PinDir::open(&self.pins)).expect("pinned maps")
    }

    /// DEL of every pod (again: DEL is idempotent), then nothing may be left: no mapping, flow,
    /// counter or record, no iptables rule of the reference plugin, nothing of the attachments
    /// (records, addresses, veths but the test's own `infra` links, pods' links), and a restart
    /// detaches the TC programs.
    fn del_all_and_expect_nothing_left(&mut self, names: &[&str], infra: &[&str]) {
        assert_eq!(names.len(), self.pods.len(), "one name per pod");
        for (i, name) in names.iter().enumerate() {
            self.del(name, i);
        }
        assert_eq!(self.list(), Vec::<Value>::new(), "mappings left");
        assert_eq!(self.flows_json(), Vec::<Value>::new(), "flows listed after the DELs");
        let tables = self.tables();
        assert!(tables.flows().is_empty(), "flows left: {:?}", tables.flows());
        assert!(tables.stray_counters().is_empty(), "counters left: {:?}", tables.stray_counters());
        drop(tables);
        assert!(Store::new(&self.w.path("state")).load_all().expect("records").is_empty(), "records left");
        for tool in ["iptables", "ip6tables"] {
            let (ok, rules) = self.w.node.exec(&[tool, "-t", "nat", "-S"]);
            assert!(ok, "{tool}: {rules}");
            assert!(!rules.contains("CNI-DN-"), "{tool} rules of a DELeted mapping left:\n{rules}");
        }
        let pods: Vec<&Netns> = self.pods.iter().collect();
        let left: Vec<String> = self
            .w
            .leftovers(&pods)
            .into_iter()
            .filter(|l| !infra.iter().any(|i| l == &format!("node veth {i}")))
            .collect();
        plexus_testkit::assert_nothing_left(left);
        restart_and_expect_only_socket_hooks(self);
    }

    /// A TCP stream of the traffic script from client namespace `ns` to `host`:`port` for
    /// `secs` seconds: the client sends numbered chunks and checks that each comes back whole,
    /// in order, so a lost, duplicated or reordered byte breaks it.
    fn stream(&self, ns: &str, host: &str, port: &str, secs: &str) -> Stream {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, python(), &self.script(), "stream", host, port, secs])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("stream client");
        let mut stdout = BufReader::new(child.stdout.take().expect("stream stdout"));
        let mut first = String::new();
        stdout.read_line(&mut first).expect("the stream's first line");
        let port: u16 = first
            .strip_prefix("port ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the stream did not start: {first:?}"));
        Stream { child, stdout, port }
    }

    fn del(&self, name: &str, pod: usize) {
        let out = self.w.del(&cid(name), &self.pods[pod], (NS, name));
        assert!(out.ok(), "DEL {name}: {} {}", out.stdout, out.stderr);
    }

    /// A client namespace whose `eth0` is the peer of `node_end` (created in the node).
    fn client(&mut self, node_end: &str, addrs: &[&str]) -> usize {
        self.clients.push(client_namespace(&self.w.node, "pmcl", node_end, addrs));
        self.clients.len() - 1
    }

    /// Runs the traffic script in `ns` until it succeeds (servers and neighbours may need a
    /// moment), returning its output words.
    fn run(&self, ns: &str, args: &[&str]) -> Vec<String> {
        run_until_ok(ns, Path::new(&self.script()), args).unwrap_or_else(|last| {
            panic!(
                "{args:?} from {ns} never succeeded: {last}\nmappings:\n{}\nagent log:\n{}",
                self.list_text(),
                self.w.agent_log()
            )
        })
    }

    /// Runs it once; true when it succeeded.
    fn try_run(&self, ns: &str, args: &[&str]) -> bool {
        Command::new("ip")
            .args(["netns", "exec", ns, python(), &self.script()])
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    }
}

/// `[host]:port` for the script's output, which prints bare addresses.
/// A running [`PmWorld::stream`].
struct Stream {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
    /// The client's source port.
    port: u16,
}

impl Stream {
    /// Waits for the stream to end; fails the test if it broke. Returns the bytes it moved.
    fn finish(mut self) -> u64 {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("the stream's result");
        let out = self.child.wait_with_output().expect("stream client");
        assert!(
            out.status.success() && rest.starts_with("OK"),
            "stream broke: {rest} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        rest.split_whitespace().nth(1).and_then(|b| b.parse().ok()).unwrap_or(0)
    }
}

/// The index of the node's interface `dev`.
fn node_index(t: &PmWorld, dev: &str) -> u32 {
    let (ok, out) = t.w.node.exec(&["cat", &format!("/sys/class/net/{dev}/ifindex")]);
    assert!(ok, "{out}");
    out.trim().parse().expect("an interface index")
}

fn bare(ip: &str) -> String {
    ip.trim_start_matches("::ffff:").to_owned()
}

fn bridge_nad(w: &World, name: &str) -> String {
    bridge_nad_for(w, name, Plugin::Plexus, false)
}

/// The port mapping plugin chained after the network's main plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plugin {
    /// plexus-portmap: the agent's eBPF port mappings.
    Plexus,
    /// The reference `portmap` (containernetworking-plugins, iptables DNAT and masquerade), which
    /// the agent execs from its CNI bin dir like any delegate.
    Reference,
}

impl Plugin {
    fn conf(self) -> Value {
        let kind = match self {
            Plugin::Plexus => "plexus-portmap",
            Plugin::Reference => "portmap",
        };
        json!({"type": kind, "capabilities": {"portMappings": true}})
    }
}

/// A bridge network `pmbr0` (10.77.0.0/24, fd00:77::/64, the bridge as gateway: 10.77.0.1 and
/// fd00:77::1 are the host IPs) chaining `plugin`; `hairpin`: the bridge plugin's hairpinMode
/// (a pod's port sends frames back where they came from).
fn bridge_nad_for(w: &World, name: &str, plugin: Plugin, hairpin: bool) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "pmbr0",
                "isGateway": true,
                "hairpinMode": hairpin,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": "10.77.0.0/24", "rangeStart": "10.77.0.10", "rangeEnd": "10.77.0.99"}],
                        [{"subnet": "fd00:77::/64", "rangeStart": "fd00:77::10", "rangeEnd": "fd00:77::99"}]
                    ],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            plugin.conf()
        ]
    })
    .to_string()
}

/// Bridged traffic through iptables (`br_netfilter`, per namespace; on by default in a new one)
/// or not.
fn bridge_netfilter(ns: &Netns, on: bool) {
    let v = if on { "1" } else { "0" };
    let (ok, out) = ns.exec(&[
        "sysctl",
        "-qw",
        &format!("net.bridge.bridge-nf-call-iptables={v}"),
        &format!("net.bridge.bridge-nf-call-ip6tables={v}"),
    ]);
    assert!(ok, "sysctl in {}: {out}", ns.name);
}

fn macvlan_nad(w: &World, name: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "macvlan",
                "master": "pmm0",
                "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": "10.78.0.0/24", "rangeStart": "10.78.0.10", "rangeEnd": "10.78.0.99"}],
                        [{"subnet": "fd00:78::/64", "rangeStart": "fd00:78::10", "rangeEnd": "fd00:78::99"}]
                    ],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

fn mappings(network: &str, list: &[(u16, u16, &str)]) -> Value {
    let pm: Vec<Value> =
        list.iter().map(|(h, c, p)| json!({"hostPort": h, "containerPort": c, "protocol": p})).collect();
    json!([{"name": network, "portMappings": pm}])
}

/// TCP and UDP over both families from `client` to `host`: the pod named `pod` answers, and the
/// answers come from the host endpoint.
fn assert_reaches(t: &PmWorld, from: &str, hosts: &[&str], tcp_port: u16, udp_port: u16, pod: &str) {
    for host in hosts {
        let got = t.run(from, &["tcp", host, &tcp_port.to_string(), "hello-tcp"]);
        assert_eq!(got[..2], [pod.to_owned(), "hello-tcp".into()], "TCP to {host}:{tcp_port} from {from}");
        assert_eq!((bare(&got[2]), got[3].clone()), (host.to_string(), tcp_port.to_string()), "TCP peer");
        let got = t.run(from, &["udp", host, &udp_port.to_string(), "hello-udp"]);
        assert_eq!(got[0], format!("{pod}:hello-udp"), "UDP to {host}:{udp_port} from {from}");
        assert_eq!(
            (bare(&got[1]), got[2].clone()),
            (host.to_string(), udp_port.to_string()),
            "UDP reply source"
        );
    }
}

#[test]
fn kernel_bridge_tcp_udp_ipv4_ipv6_several_mappings_and_del_removes_everything() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    // The dataplane loads in the background; the first ADD would wait for it.
    t.wait_reconciled(1);
    t.pod("web-a", &mappings("pmbr", &[(8080, 80, "TCP"), (5353, 53, "udp")]), &[80, 53]);
    t.pod("web-b", &mappings("pmbr", &[(8081, 80, "tcp"), (5354, 53, "UDP")]), &[80, 53]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();

    assert_reaches(&t, &c, &["10.77.0.1", "fd00:77::1"], 8080, 5353, "web-a");
    assert_reaches(&t, &c, &["10.77.0.1", "fd00:77::1"], 8081, 5354, "web-b");

    let listed = t.list();
    assert_eq!(listed.len(), 8, "2 pods x 2 mappings x 2 families: {listed:#?}");
    for row in &listed {
        assert!(row["pod"].as_str().is_some_and(|p| p.starts_with("default/web-")), "{row}");
        assert!(row["packets_in"].as_u64() > Some(0) && row["packets_out"].as_u64() > Some(0), "{row}");
    }
    let text = t.list_text();
    assert!(text.contains("10.77.0.1:8080") && text.contains("default/web-a (net1)"), "{text}");

    // An ADD of plexus-portmap is a netlink dump, map updates and the TCX attachment to the
    // pod's veth (a few ms, RCU grace periods in the kernel): not the reference plugin's 50 to
    // 120 ms of iptables (the bound is generous for a loaded machine).
    let log = plain(&t.w.agent_log());
    let took: Vec<u64> = log
        .lines()
        .filter_map(|l| l.split("took_us=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    eprintln!("plexus-portmap ADD took (µs): {took:?}");
    assert_eq!(took.len(), 2, "{log}");
    assert!(took.iter().all(|us| *us < 100_000), "{took:?}");

    // DEL of web-a: its entries and its veth's program go; web-b keeps working.
    t.del("web-a", 0);
    let listed = t.list();
    assert_eq!(listed.len(), 4, "{listed:#?}");
    assert!(listed.iter().all(|r| r["pod"] == "default/web-b"), "{listed:#?}");
    assert!(!t.try_run(&c, &["tcp", "10.77.0.1", "8080", "x"]), "web-a's mapping still answers");
    assert_reaches(&t, &c, &["10.77.0.1"], 8081, 5354, "web-b");

    t.del("web-b", 1);
    assert!(t.list().is_empty());
    let tables = Tables::open_pinned(&PinDir::open(&t.pins)).expect("pinned maps");
    assert!(tables.flows().is_empty() && tables.stray_counters().is_empty(), "flows or counters left");
    assert!(Store::new(&t.w.path("state")).load_all().expect("records").is_empty(), "portmap records left");
    // The bridge's program stays while the agent runs (the next ADD needs it); a restart
    // with nothing mapped detaches it.
    restart_and_expect_only_socket_hooks(&mut t);
}

fn restart_and_expect_only_socket_hooks(t: &mut PmWorld) {
    let starts = plain(&t.w.agent_log()).matches("port mappings reconciled").count();
    t.w.kill_agent();
    t.w.start_agent();
    t.wait_reconciled(starts + 1);
    assert!(
        t.link_pins().iter().all(|l| l.starts_with("cg_")),
        "TC programs left attached with nothing mapped: {:?}",
        t.link_pins()
    );
}

#[test]
fn kernel_bridge_node_local_clients_hairpin_and_pod_to_pod() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web-a", &mappings("pmbr", &[(8080, 80, "tcp"), (8080, 80, "udp")]), &[80]);
    t.pod("web-b", &mappings("pmbr", &[(9090, 90, "tcp"), (9090, 90, "udp")]), &[90]);
    let node = t.w.node.name.clone();
    let (a, b) = (t.pods[0].name.clone(), t.pods[1].name.clone());
    let hosts = ["10.77.0.1", "fd00:77::1"];

    // A process of the node: the socket hooks send it to the pod, and its getpeername and
    // recvfrom still say hostIP:hostPort.
    assert_reaches(&t, &node, &hosts, 8080, 8080, "web-a");
    // Hairpin: web-a reaching its own hostPort.
    assert_reaches(&t, &a, &hosts, 8080, 8080, "web-a");
    // Another pod on the same bridge.
    assert_reaches(&t, &b, &hosts, 8080, 8080, "web-a");
    assert_reaches(&t, &a, &hosts, 9090, 9090, "web-b");

    let local: u64 = t.list().iter().filter_map(|r| r["local_translations"].as_u64()).sum();
    assert!(local >= 4, "the socket hooks counted node-local connections: {:#?}", t.list());
}

#[test]
fn kernel_macvlan_with_the_host_ip_on_the_master() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmmv", Some(&macvlan_nad(&t.w, "pmmv")));
    let client = t.client("pmm0", &["10.78.0.200/24", "fd00:78::c8/64"]);
    t.w.node.ip(&["addr", "add", "10.78.0.1/24", "dev", "pmm0"]);
    t.w.node.ip(&["addr", "add", "fd00:78::1/64", "dev", "pmm0", "nodad"]);
    t.w.start_agent();
    t.pod("db", &mappings("pmmv", &[(5432, 5432, "TCP"), (5433, 5433, "udp")]), &[5432, 5433]);
    let c = t.clients[client].name.clone();
    assert_reaches(&t, &c, &["10.78.0.1", "fd00:78::1"], 5432, 5433, "db");
    // (The pod and the node cannot reach an address of the master at all: macvlan never
    // passes traffic between a master and its macvlans. The next test has the remedy.)
    let pins = t.link_pins();
    assert!(pins.iter().any(|p| p.ends_with("_in")) && pins.iter().any(|p| p.ends_with("_out")), "{pins:?}");
    t.del("db", 0);
    assert!(t.list().is_empty());
    restart_and_expect_only_socket_hooks(&mut t);
}

#[test]
fn kernel_macvlan_with_a_host_side_macvlan_serves_node_and_hairpin() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmmv", Some(&macvlan_nad(&t.w, "pmmv")));
    let client = t.client("pmm0", &["10.78.0.200/24", "fd00:78::c8/64"]);
    // The node's address on the macvlan network lives on a macvlan of the master, as macvlan
    // never delivers the master's own packets to its children.
    t.w.node.ip(&["link", "add", "pmh0", "link", "pmm0", "type", "macvlan", "mode", "bridge"]);
    t.w.node.ip(&["addr", "add", "10.78.0.1/24", "dev", "pmh0"]);
    t.w.node.ip(&["addr", "add", "fd00:78::1/64", "dev", "pmh0", "nodad"]);
    t.w.node.ip(&["link", "set", "pmh0", "up"]);
    tx_off(&t.w.node, "pmh0");
    t.w.start_agent();
    t.pod("web", &mappings("pmmv", &[(8080, 80, "tcp"), (8080, 80, "udp")]), &[80]);
    let hosts = ["10.78.0.1", "fd00:78::1"];
    let (c, node, pod) = (t.clients[client].name.clone(), t.w.node.name.clone(), t.pods[0].name.clone());
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web");
    assert_reaches(&t, &node, &hosts, 8080, 8080, "web");
    assert_reaches(&t, &pod, &hosts, 8080, 8080, "web");
}

#[test]
fn kernel_conflicts_name_the_pod_holding_the_port_and_a_network_without_host_address_fails() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.write_nad(NS, "pmmv", Some(&macvlan_nad(&t.w, "pmmv")));
    t.client("pmm0", &[]);
    t.w.start_agent();
    t.pod("first", &mappings("pmbr", &[(8080, 80, "tcp")]), &[80]);

    let second = Netns::new("pmpod");
    t.w.write_pod(NS, "second", Some(&mappings("pmbr", &[(8080, 81, "TCP")]).to_string()));
    let out = t.w.add(&cid("second"), &second, (NS, "second"));
    assert_eq!(out.code(), Some(7), "{} {}", out.stdout, out.stderr);
    assert!(
        out.msg().contains("10.77.0.1:8080/tcp") && out.msg().contains("pod default/first"),
        "{}",
        out.msg()
    );
    // The failed ADD left nothing: the first pod's mapping is the only one.
    assert_eq!(t.list().len(), 2, "{:#?}", t.list());
    // Another protocol on the same port is no conflict.
    t.w.write_pod(NS, "second", Some(&mappings("pmbr", &[(8080, 81, "udp")]).to_string()));
    t.w.add(&cid("second"), &second, (NS, "second")).expect_ok();
    assert_eq!(t.list().len(), 4);

    // pmm0 has no address and no host-side macvlan: the network cannot offer port mappings.
    let third = Netns::new("pmpod");
    t.w.write_pod(NS, "third", Some(&mappings("pmmv", &[(7070, 70, "tcp")]).to_string()));
    let out = t.w.add(&cid("third"), &third, (NS, "third"));
    assert_eq!(out.code(), Some(7), "{} {}", out.stdout, out.stderr);
    assert!(out.msg().contains("cannot offer port mappings") && out.msg().contains("pmm0"), "{}", out.msg());
    assert!(third.link_names().iter().all(|l| l == "lo"), "the failed attachment was undone");
    assert!(t.w.del(&cid("second"), &second, (NS, "second")).ok());
}

#[test]
fn kernel_agent_restart_keeps_a_running_stream_and_reconciles_the_maps() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web-a", &mappings("pmbr", &[(8080, 80, "tcp")]), &[80]);
    t.pod("web-b", &mappings("pmbr", &[(8081, 80, "tcp")]), &[80]);
    let client = t.client("pmcl0", &["10.77.0.200/24"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    t.run(&c, &["tcp", "10.77.0.1", "8080", "warm-up"]);

    // A TCP stream through the mapping for 10 s: the agent is killed 1.5 s in and started again
    // 2 s later.
    let stream = t.stream(&c, "10.77.0.1", "8080", "10");
    let port = stream.port;
    std::thread::sleep(Duration::from_millis(1500));
    t.w.kill_agent();
    std::thread::sleep(Duration::from_millis(2000));
    t.w.start_agent();
    t.wait_reconciled(2);
    // The stream's flow, made before the restart, is still tracked after the agent reconciled
    // (the same entry: it is older than the restart), while the stream goes on.
    let client = format!("10.77.0.200:{port}");
    let flows = t.flows_json();
    let flow = flows
        .iter()
        .find(|f| f["client"] == client.as_str())
        .unwrap_or_else(|| panic!("the stream's flow from {client} is gone after the restart: {flows:#?}"));
    assert_eq!(flow["host"], "10.77.0.1:8080", "{flow}");
    assert!(flow["protocol"].as_str().is_some_and(|p| p.eq_ignore_ascii_case("tcp")), "{flow}");
    assert_eq!(flow["state"], "established", "{flow}");
    assert!(flow["age_secs"].as_f64().is_some_and(|a| a >= 3.0), "made before the restart: {flow}");
    let bytes = stream.finish();
    assert!(bytes > 100_000, "the stream moved {bytes} bytes");
    assert!(t.w.agent_log().contains("port mappings reconciled"), "{}", t.w.agent_log());

    // While the agent is down: web-a's entries vanish from the maps, and web-b's record (as if
    // web-b had been deleted without the agent): the next start restores web-a and removes
    // web-b's stale entries.
    t.w.kill_agent();
    let store = Store::new(&t.w.path("state"));
    let records = store.load_all().expect("records");
    let mut tables = Tables::open_pinned(&PinDir::open(&t.pins)).expect("pinned maps");
    for r in records.iter().filter(|r| r.pod.as_deref() == Some("default/web-a")) {
        for e in &r.entries {
            tables.remove(e).expect("removing an entry");
        }
    }
    for r in records.iter().filter(|r| r.pod.as_deref() == Some("default/web-b")) {
        store.remove(&r.key()).expect("removing a record");
    }
    drop(tables);
    let hosts = |rows: Vec<Value>| -> Vec<String> {
        let mut h: Vec<String> = rows.iter().filter_map(|r| r["host"].as_str().map(str::to_owned)).collect();
        h.sort();
        h
    };
    assert_eq!(hosts(t.list()), ["10.77.0.1:8081", "[fd00:77::1]:8081"]);
    t.w.start_agent();
    t.wait_reconciled(3);
    assert_eq!(hosts(t.list()), ["10.77.0.1:8080", "[fd00:77::1]:8080"]);
    let got = t.run(&c, &["tcp", "10.77.0.1", "8080", "again"]);
    assert_eq!(got[..2], ["web-a".to_owned(), "again".into()]);
    assert!(!t.try_run(&c, &["tcp", "10.77.0.1", "8081", "x"]), "web-b's stale mapping still answers");
    let log = plain(&t.w.agent_log());
    assert!(log.contains("removed=2 restored=2"), "{log}");
}

/// Two agents starting at once on one pin directory (a DaemonSet update with `maxSurge`, a
/// restart that overlaps the old process), again and again on a fresh bpffs: whichever pins a
/// map first, the other opens that pin, and both serve port mappings. Before, the one that lost
/// the race between aya's lookup of a pin and its own pin failed to load ("BPF_OBJ_PIN failed:
/// File exists") and refused every ADD with port mappings for its whole life.
#[test]
fn kernel_two_agents_starting_at_once_on_one_pin_directory_both_serve_port_mappings() {
    const ROUNDS: usize = 10;
    for round in 0..ROUNDS {
        let mut t = PmWorld::new();
        // Both in the node's namespace: one metrics port between them would stop the second.
        t.w.agent_args.extend(["--metrics-addr".into(), "off".into()]);
        t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
        let (other, other_socket) = t.w.spawn_other_agent("other");
        t.w.start_agent();
        let other_log_path = t.w.path("other.log");
        let other_log = || plain(&std::fs::read_to_string(&other_log_path).unwrap_or_default());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !other_log().contains("port mappings reconciled") {
            assert!(
                Instant::now() < deadline,
                "round {round}: the other agent never loaded:\n{}",
                other_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        t.wait_reconciled(1);

        t.pod("web-a", &mappings("pmbr", &[(8080, 80, "tcp")]), &[80]);
        let ns = Netns::new("pmpod");
        no_dad(&ns);
        t.w.write_pod(NS, "web-b", Some(&mappings("pmbr", &[(8081, 80, "tcp")]).to_string()));
        let added = t.w.cni_via(&other_socket, "ADD", &cid("web-b"), &ns, (NS, "web-b"));
        assert!(
            added.ok(),
            "round {round}: ADD through the other agent: {} {}\n{}",
            added.stdout,
            added.stderr,
            other_log()
        );
        let server = t.serve(&ns, "web-b", 80);
        t.servers.push(server);
        t.pods.push(ns);
        let mut hosts: Vec<String> =
            t.list().iter().filter_map(|r| r["host"].as_str().map(str::to_owned)).collect();
        hosts.sort();
        assert_eq!(hosts, ["10.77.0.1:8080", "10.77.0.1:8081", "[fd00:77::1]:8080", "[fd00:77::1]:8081"]);
        for log in [plain(&t.w.agent_log()), other_log()] {
            assert!(!log.contains("not available"), "round {round}: {log}");
        }
        if round == ROUNDS - 1 {
            // And the mappings of both translate.
            let client = t.client("pmcl0", &["10.77.0.200/24"]);
            t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
            let c = t.clients[client].name.clone();
            assert_eq!(
                t.run(&c, &["tcp", "10.77.0.1", "8080", "hi"])[..2],
                ["web-a".to_owned(), "hi".into()]
            );
            assert_eq!(
                t.run(&c, &["tcp", "10.77.0.1", "8081", "hi"])[..2],
                ["web-b".to_owned(), "hi".into()]
            );
        }
        let deleted = t.w.cni_via(&other_socket, "DEL", &cid("web-b"), &t.pods[1], (NS, "web-b"));
        assert!(deleted.ok(), "DEL through the other agent: {} {}", deleted.stdout, deleted.stderr);
        other.kill();
        t.del("web-a", 0);
        assert_eq!(t.list(), Vec::<Value>::new(), "round {round}: mappings left");
    }
}

/// GET `path` of the agent's metrics endpoint (its default address, in the node's namespace).
fn agent_http(w: &World, path: &str) -> Option<String> {
    let _inside = w.node.enter();
    plexus_tests::traffic::http_get("127.0.0.1:9465", path)
}

/// A dataplane that fails to load (here: its pin directory cannot be made, a file stands in
/// the way) is loaded again in the background, waiting longer after each failure: meanwhile an
/// ADD with port mappings fails at once saying that the agent keeps trying, and `/readyz` is
/// 503 naming the dataplane; once the obstacle is gone, the next try loads it, `/readyz` is
/// 200 and the same ADD succeeds. Before, a failed load was final for the agent's whole life.
#[test]
fn kernel_a_dataplane_that_failed_to_load_is_loaded_again_and_readyz_waits_for_it() {
    let mut w = World::new();
    let blocker = w.path("pins");
    std::fs::write(&blocker, "a file where the pin directory should go").expect("the blocker");
    w.agent_args.extend(["--bpf-pin-dir".into(), blocker.join("plexus").display().to_string()]);
    w.write_nad(NS, "pmbr", Some(&bridge_nad(&w, "pmbr")));
    w.start_agent();
    let wait_for = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; agent log:\n{}", w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("readyz to name the dataplane", &|| {
        agent_http(&w, "/readyz")
            .is_some_and(|r| r.starts_with("HTTP/1.1 503") && r.contains("port mappings is not loaded"))
    });
    let pod = Netns::new("pmpod");
    w.write_pod(NS, "web", Some(&mappings("pmbr", &[(8080, 80, "tcp")]).to_string()));
    let refused = w.add(&cid("web"), &pod, (NS, "web"));
    assert!(!refused.ok(), "an ADD with port mappings while the dataplane is not loaded");
    assert_eq!(refused.code(), Some(999), "{}", refused.stdout);
    assert!(refused.msg().contains("the agent loads it again"), "{}", refused.msg());
    assert!(w.del(&cid("web"), &pod, (NS, "web")).ok(), "DEL of the failed ADD");

    std::fs::remove_file(&blocker).expect("removing the blocker");
    wait_for("readyz", &|| agent_http(&w, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    w.add(&cid("web"), &pod, (NS, "web")).expect_ok();
    let log = plain(&w.agent_log());
    assert!(log.contains("loading again in") && log.contains("port mappings reconciled"), "{log}");
    assert!(w.del(&cid("web"), &pod, (NS, "web")).ok());
    w.assert_nothing_left(&[&pod]);
}
