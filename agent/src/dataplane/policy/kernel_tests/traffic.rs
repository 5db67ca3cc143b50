//! The policy programs on real traffic, against the decision: pods as network namespaces on a
//! bridge (the programs on their veths' host ends, as TCX links) and on a macvlan (the programs
//! on their own interfaces, as filters inside the pods), IPv4 and IPv6, TCP connections, UDP
//! requests answered by their server, and ping. Each probe's outcome must be what
//! `decide` says of it; a UDP reply and a TCP handshake's second packet cross the rules of the
//! other direction, so the flows are on trial too. Then a change of the peer's labels under an
//! established TCP stream: the stream loses no byte, and the peer's new connections fail.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use plexus_testkit::{Bpffs, Netns};
use serde_json::json;

use crate::dataplane::loader::Loaded;
use crate::dataplane::pin::PinDir;
use crate::dataplane::policy::entries::{entries, Entries, Hooked};
use crate::dataplane::policy::hooks::{hook_here, hook_host_end};
use crate::dataplane::policy::object::{OBJECT, PIN_SUBDIR};
use crate::dataplane::policy::table::Table;
use crate::network_policy::compile::compile;
use crate::network_policy::decide::{decide, Cluster, NamedPort, PodView, Probe, ProbeProtocol};
use crate::network_policy::tests::{network, policy};
use crate::network_policy::{Policy, Protocol};

/// How long a probe waits for its answer: a denied one costs this.
const WAIT: Duration = Duration::from_millis(600);

struct Pod {
    name: &'static str,
    netns: Netns,
    network: &'static str,
    v4: IpAddr,
    v6: IpAddr,
}

/// The node (a bridge and a macvlan master), five pods, the object pinned on a bpffs of the
/// test's own. Fields drop in order: the pods and the node (their links, filters and TCX links
/// with them), then the bpffs.
struct World {
    pods: Vec<Pod>,
    _node: Netns,
    _loaded: Loaded,
    table: Table,
    /// By network, then pod.
    hooked: BTreeMap<String, BTreeMap<String, Hooked>>,
    current: Vec<Entries>,
    _bpffs: Bpffs,
}

const BR: &str = "t/br";
const MV: &str = "t/mv";

impl World {
    fn new() -> World {
        let bpffs = Bpffs::new("pxnp");
        let pins = PinDir::prepare(&bpffs.path().join(PIN_SUBDIR)).expect("the pin directory");
        let mut loaded = Loaded::load_object(&OBJECT, Some(pins.clone())).expect("loading plexus-policy");
        let table = Table::take(loaded.ebpf_mut()).expect("the maps");
        let node = Netns::new("pxnpn");
        node.ip("link add br0 type bridge");
        node.ip("link set br0 up");
        // The macvlan master: one end of a veth, both ends up.
        node.ip("link add m0 type veth peer name m1");
        node.ip("link set m0 up");
        node.ip("link set m1 up");
        let mut pods = Vec::new();
        for (i, name, network) in [(1, "p1", BR), (2, "p2", BR), (3, "p3", BR), (4, "p4", MV), (5, "p5", MV)]
        {
            let netns = Netns::new("pxnpp");
            let subnet = if network == BR { 91 } else { 92 };
            if network == BR {
                node.ip(&format!("link add h{i} type veth peer name e0 netns {}", netns.name));
                node.ip(&format!("link set h{i} master br0 up"));
            } else {
                node.ip(&format!("link add link m0 name mv{i} type macvlan mode bridge"));
                node.ip(&format!("link set mv{i} netns {} name e0", netns.name));
            }
            netns.ip(&format!("addr add 10.{subnet}.0.{i}/24 dev e0"));
            netns.ip(&format!("addr add fd{subnet}::{i}/64 dev e0 nodad"));
            netns.ip("link set e0 up");
            let v4 = format!("10.{subnet}.0.{i}").parse().expect("v4");
            let v6 = format!("fd{subnet}::{i}").parse().expect("v6");
            pods.push(Pod { name, netns, network, v4, v6 });
        }
        let mut hooked: BTreeMap<String, BTreeMap<String, Hooked>> = BTreeMap::new();
        for (id, pod) in (1u16..).zip(&pods) {
            let host_end = if pod.network == BR {
                let _in = node.enter();
                let host_end = format!("h{}", &pod.name[1..]);
                let ifindex = ifindex(&host_end);
                hook_host_end(&mut loaded, ifindex, &host_end).expect("hooking a host end");
                Some(ifindex)
            } else {
                let _in = pod.netns.enter();
                hook_here(&pins, "e0", id).expect("hooking a pod's own interface");
                None
            };
            let hook = Hooked { id: u32::from(id), host_end };
            hooked.entry(pod.network.to_owned()).or_default().insert(format!("t/{}", pod.name), hook);
        }
        World { pods, _node: node, _loaded: loaded, table, hooked, current: Vec::new(), _bpffs: bpffs }
    }

    fn pod(&self, name: &str) -> &Pod {
        self.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// The maps as `policies` make them on `cluster`.
    fn enforce(&mut self, policies: &[Policy], cluster: &Cluster) {
        let tables = compile(policies, cluster);
        let none = BTreeMap::new();
        let new: Vec<Entries> = tables
            .iter()
            .zip(1..)
            .map(|((network, t), id)| entries(id, t, self.hooked.get(&network.to_string()).unwrap_or(&none)))
            .collect();
        self.table.apply(&self.current, &new).expect("writing the maps");
        self.current = new;
    }
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).expect("a name");
    // SAFETY: a NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert!(i != 0, "no interface {name}");
    i
}

/// The pods as the decision sees them: labels `app=<role>`; p2 names its port 5432 "pg".
fn cluster(w: &World, roles: &[(&str, &str)]) -> Cluster {
    let pods = w
        .pods
        .iter()
        .map(|p| {
            let role = roles.iter().find(|(n, _)| *n == p.name).map_or("none", |(_, r)| *r);
            PodView {
                namespace: "t".to_owned(),
                name: p.name.to_owned(),
                labels: BTreeMap::from([("app".to_owned(), role.to_owned())]),
                addresses: BTreeMap::from([(network(p.network), vec![p.v4, p.v6])]),
                ports: if p.name == "p2" {
                    vec![NamedPort { name: "pg".to_owned(), number: 5432, protocol: Protocol::Tcp }]
                } else {
                    Vec::new()
                },
            }
        })
        .collect();
    Cluster { namespaces: BTreeMap::from([("t".to_owned(), BTreeMap::new())]), pods }
}

/// On the bridge: p2 (db) takes TCP on its port "pg" and UDP 5353 from web pods only. On the
/// macvlan: p4 (api) may send only TCP 6379 into fd92::/64 and UDP to cache pods.
fn policies() -> Vec<Policy> {
    vec![
        policy(
            "t",
            "db",
            BR,
            json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{
                "from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                "ports": [{"protocol": "TCP", "port": "pg"}, {"protocol": "UDP", "port": 5353}]}]}),
        ),
        policy(
            "t",
            "api",
            MV,
            json!({"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Egress"], "egress": [
                {"to": [{"ipBlock": {"cidr": "fd92::/64"}}], "ports": [{"protocol": "TCP", "port": 6379}]},
                {"to": [{"podSelector": {"matchLabels": {"app": "cache"}}}], "ports": [{"protocol": "UDP"}]}]}),
        ),
    ]
}

const ROLES: [(&str, &str); 5] = [("p1", "web"), ("p2", "db"), ("p3", "cli"), ("p4", "api"), ("p5", "cache")];

/// Whether `what` gets through from `from` to `to`, for real: a TCP connection accepted, a UDP
/// datagram answered, or a ping answered.
fn reaches(from: &Pod, to: &Pod, v6: bool, protocol: ProbeProtocol, port: u16) -> bool {
    let (src, dst) = if v6 { (from.v6, to.v6) } else { (from.v4, to.v4) };
    let target = SocketAddr::new(dst, port);
    match protocol {
        ProbeProtocol::Known(Protocol::Tcp) => {
            let listener = in_netns(&to.netns, move || TcpListener::bind(target).expect("listening"));
            let connected = in_netns(&from.netns, move || TcpStream::connect_timeout(&target, WAIT).is_ok());
            drop(listener);
            connected
        }
        ProbeProtocol::Known(Protocol::Udp) => {
            let server = in_netns(&to.netns, move || UdpSocket::bind(target).expect("binding"));
            server.set_read_timeout(Some(WAIT)).expect("timeout");
            let echo = thread::spawn(move || {
                let mut buf = [0u8; 64];
                if let Ok((n, peer)) = server.recv_from(&mut buf) {
                    let _ = server.send_to(&buf[..n], peer);
                }
            });
            let answered = in_netns(&from.netns, move || {
                let client = UdpSocket::bind(SocketAddr::new(src, 0)).expect("binding the client");
                client.set_read_timeout(Some(WAIT * 2)).expect("timeout");
                client.send_to(b"probe", target).expect("sending");
                let mut buf = [0u8; 64];
                matches!(client.recv_from(&mut buf), Ok((5, _)))
            });
            echo.join().expect("the echo thread");
            answered
        }
        ProbeProtocol::Known(Protocol::Sctp) => unreachable!("this kernel has no SCTP"),
        ProbeProtocol::Other(_) => from.netns.ping(&dst.to_string()),
    }
}

/// Runs `work` on a thread inside `netns` (sockets made there stay there).
fn in_netns<T: Send + 'static>(netns: &Netns, work: impl FnOnce() -> T + Send + 'static) -> T {
    let path = netns.path();
    thread::spawn(move || {
        let _in = plexus_testkit::Entered::new(&path).expect("entering the namespace");
        work()
    })
    .join()
    .expect("a thread in the namespace")
}

#[test]
fn kernel_real_traffic_follows_the_decision_on_a_bridge_and_a_macvlan() {
    let mut w = World::new();
    let c = cluster(&w, &ROLES);
    let policies = policies();
    w.enforce(&policies, &c);
    let tcp = ProbeProtocol::Known(Protocol::Tcp);
    let udp = ProbeProtocol::Known(Protocol::Udp);
    let icmp = ProbeProtocol::Other(1);
    // (from, to, protocol, port): each in both families.
    let probes = [
        ("p1", "p2", tcp, 5432),
        ("p3", "p2", tcp, 5432),
        ("p1", "p2", tcp, 22),
        ("p1", "p2", udp, 5353),
        ("p3", "p2", udp, 5353),
        ("p2", "p1", tcp, 80),
        ("p2", "p3", udp, 9),
        ("p1", "p2", icmp, 0),
        ("p1", "p3", icmp, 0),
        ("p4", "p5", tcp, 6379),
        ("p4", "p5", tcp, 80),
        ("p4", "p5", udp, 1234),
        ("p5", "p4", tcp, 80),
        ("p5", "p4", udp, 53),
        ("p4", "p5", icmp, 0),
    ];
    let (mut checked, mut allowed, mut wrong) = (0, 0, Vec::new());
    for (from, to, protocol, port) in probes {
        for v6 in [false, true] {
            let (a, b) = (w.pod(from), w.pod(to));
            let probe = Probe {
                network: network(a.network),
                source: if v6 { a.v6 } else { a.v4 },
                destination: if v6 { b.v6 } else { b.v4 },
                protocol,
                port: (protocol != icmp).then_some(port),
            };
            let decided = decide(&policies, &c, &probe);
            let got = reaches(a, b, v6, protocol, port);
            checked += 1;
            allowed += usize::from(got);
            if got != decided.allowed() {
                wrong.push(format!(
                    "{from} -> {to} {protocol:?}/{port} over IPv{}: {}, the decision says {decided}",
                    if v6 { 6 } else { 4 },
                    if got { "got through" } else { "did not get through" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{} of {checked} probes wrong:\n{}", wrong.len(), wrong.join("\n"));
    assert!(allowed > 0 && allowed < checked, "{allowed} of {checked} allowed: the probes test nothing");
}

#[test]
fn kernel_a_label_change_keeps_the_established_stream_and_stops_new_connections() {
    let mut w = World::new();
    let policies = policies();
    w.enforce(&policies, &cluster(&w, &ROLES));
    let (p1, p2) = (w.pod("p1"), w.pod("p2"));
    let target = SocketAddr::new(p2.v4, 5432);
    let listener = in_netns(&p2.netns, move || TcpListener::bind(target).expect("listening"));
    // The server counts what it receives until the client closes.
    let server = thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("the stream's connection");
        let (mut total, mut buf) = (0u64, [0u8; 16 * 1024]);
        loop {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => return (total, listener),
                Ok(n) => total += n as u64,
            }
        }
    });
    let stream = in_netns(&p1.netns, move || TcpStream::connect_timeout(&target, WAIT).expect("allowed"));
    // A stream the change cut would block its sender: a write that waits this long fails it.
    stream.set_write_timeout(Some(Duration::from_secs(3))).expect("a write timeout");
    let stop = Arc::new(AtomicBool::new(false));
    let sending = {
        let stop = stop.clone();
        let mut stream = stream;
        thread::spawn(move || -> Result<u64, std::io::Error> {
            let (mut sent, chunk) = (0u64, [7u8; 4096]);
            while !stop.load(Ordering::Relaxed) {
                stream.write_all(&chunk)?;
                sent += chunk.len() as u64;
            }
            stream.shutdown(std::net::Shutdown::Write)?;
            Ok(sent)
        })
    };
    thread::sleep(Duration::from_millis(300));
    // p1 is no longer a web pod: the policy stops admitting it.
    let changed = Instant::now();
    w.enforce(
        &policies,
        &cluster(&w, &[("p1", "old"), ("p2", "db"), ("p3", "cli"), ("p4", "api"), ("p5", "cache")]),
    );
    // A new connection to the port the stream uses (the kernel completes a handshake the server
    // has not accepted yet, so only the policy can refuse it).
    let refused = !in_netns(&w.pod("p1").netns, move || TcpStream::connect_timeout(&target, WAIT).is_ok());
    let refused_after = changed.elapsed();
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let sent = sending.join().expect("the sender").expect("the established stream kept going");
    let (received, _listener) = server.join().expect("the server");
    assert!(refused, "p1's new connection got through after its label changed");
    assert!(refused_after < Duration::from_secs(3), "{refused_after:?}");
    assert_eq!(received, sent, "the established stream lost bytes across the change");
    assert!(sent > 0);
}
