//! Path MTU discovery through a mapping. A client behind a router reaches a pod's mapped port
//! at the bridge's address and fetches several MB from it; while the transfer is paused, the
//! router's link towards the client drops from MTU 1500 to 1280. The pod's next full-size
//! segments (DF set, as Linux TCP sends them over IPv4; IPv6 never fragments on the way) make
//! the router answer "fragmentation needed" / "packet too big" to the address they come from:
//! the host IP. Only if that error reaches the pod, translated back to its own flow, does the
//! pod lower its path MTU and the transfer complete.
//!
//! ```text
//! client 10.99.0.2 ── r1 [router] r0 10.77.0.254 ── pmbr0 10.77.0.1 (node) ── pod 10.77.0.x
//!        fd00:99::2   (MTU 1500→1280)  fd00:77::fe       fd00:77::1
//! ```
//!
//! The same test runs against the reference plugin, which conntrack makes pass: it shows the
//! topology and the transfer are sound, so a failure of plexus is plexus's.

use std::io::Write;

use super::*;

/// What the pod sends, and after how much the client pauses (numbered 1 KiB blocks).
const TOTAL: usize = 8 << 20;
const PAUSE_AT: usize = 4 << 20;
/// How long the rest of the transfer may take after the MTU drops (without a translated ICMP
/// error it never completes: every full-size segment is dropped at the router).
const RESUME_LIMIT: Duration = Duration::from_secs(15);

struct Routed {
    router: Netns,
    client: Netns,
}

/// The router and the client behind it, routes both ways.
fn behind_a_router(t: &PmWorld) -> Routed {
    let router = Netns::new("pmrt");
    let client = Netns::new("pmcl");
    for ns in [&router, &client] {
        no_dad(ns);
    }
    t.w.node.ip(&["link", "add", "pmrt0", "type", "veth", "peer", "name", "r0", "netns", &router.name]);
    t.w.node.ip(&["link", "set", "pmrt0", "master", "pmbr0", "up"]);
    router.ip(&["link", "add", "r1", "type", "veth", "peer", "name", "eth0", "netns", &client.name]);
    for (ns, dev, addrs) in [
        (&router, "r0", ["10.77.0.254/24", "fd00:77::fe/64"]),
        (&router, "r1", ["10.99.0.1/24", "fd00:99::1/64"]),
        (&client, "eth0", ["10.99.0.2/24", "fd00:99::2/64"]),
    ] {
        for a in addrs {
            ns.ip(&["addr", "add", a, "dev", dev, "nodad"]);
        }
        ns.ip(&["link", "set", dev, "up"]);
        tx_off(ns, dev);
    }
    let (ok, out) =
        router.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]);
    assert!(ok, "sysctl: {out}");
    client.ip(&["route", "add", "default", "via", "10.99.0.1"]);
    client.ip(&["-6", "route", "add", "default", "via", "fd00:99::1"]);
    t.w.node.ip(&["route", "add", "10.99.0.0/24", "via", "10.77.0.254"]);
    t.w.node.ip(&["-6", "route", "add", "fd00:99::/64", "via", "fd00:77::fe"]);
    // The pod's replies go to the router over the mapped network (its default route is the
    // cluster network's).
    let pod = &t.pods[0];
    pod.ip(&["route", "add", "10.99.0.0/24", "via", "10.77.0.254", "dev", "net1"]);
    pod.ip(&["-6", "route", "add", "fd00:99::/64", "via", "fd00:77::fe", "dev", "net1"]);
    Routed { router, client }
}

/// Fetches TOTAL bytes from `host`:8080 through the router, lowering the MTU at PAUSE_AT;
/// returns how long the rest took.
fn fetch_across_the_mtu_drop(t: &PmWorld, p: &Routed, host: &str) -> Duration {
    p.router.ip(&["link", "set", "r1", "mtu", "1500"]);
    let mut child = p
        .client
        .command(python())
        .arg(t.script())
        .args(["fetch", host, "8080", &TOTAL.to_string(), &PAUSE_AT.to_string(), "20"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the client");
    let mut stdin = child.stdin.take().expect("client stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("client stdout"));
    let mut stderr = child.stderr.take().expect("client stderr");
    let client = Proc(child);
    let mut paused = String::new();
    stdout.read_line(&mut paused).expect("the client's pause");
    if !paused.starts_with("paused") {
        let mut why = String::new();
        stderr.read_to_string(&mut why).expect("the client's stderr");
        panic!("the transfer from {host}:8080 did not start: {paused} {why}");
    }
    p.router.ip(&["link", "set", "r1", "mtu", "1280"]);
    let resumed = Instant::now();
    writeln!(stdin, "go").expect("resuming the client");
    // The client reads with a 20 s timeout per read: waiting for its end is bounded.
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("the client's result");
    let took = resumed.elapsed();
    let mut why = String::new();
    stderr.read_to_string(&mut why).expect("the client's stderr");
    drop(client);
    let words: Vec<&str> = rest.split_whitespace().collect();
    assert_eq!(
        words.get(..2),
        Some(&["OK", TOTAL.to_string().as_str()][..]),
        "the transfer from {host}:8080 broke after the MTU drop ({took:?}): {rest} {why}\n{}",
        t.w.agent_log()
    );
    took
}

fn pmtu_through_a_mapping(plugin: Plugin) {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad_for(&t.w, "pmbr", plugin, false)));
    // The replies cross the node bridged (pod → router): the reference un-NATs them only with
    // bridged traffic through netfilter. On, as in any new namespace, for both plugins.
    bridge_netfilter(&t.w.node, true);
    t.w.start_agent();
    t.pod("web", &mappings("pmbr", &[(8080, 80, "tcp")]), &[]);
    let source = t.start(&t.pods[0], &["source", "80"]);
    t.servers.push(source);
    let path = behind_a_router(&t);
    for (host, client) in [("10.77.0.1", "10.99.0.2"), ("fd00:77::1", "fd00:99::2")] {
        let took = fetch_across_the_mtu_drop(&t, &path, host);
        eprintln!("{plugin:?}: {host}:8080, the rest after the MTU drop took {took:?}");
        assert!(took < RESUME_LIMIT, "{host}: {took:?}");
        // The pod learnt the path's MTU (its route cache towards the client).
        let route = t.pods[0].ip(&["route", "get", client]);
        assert!(route.contains("mtu 1280"), "the pod's route to {client}: {route}");
    }
    if plugin == Plugin::Plexus {
        let stats = t.tables().flow_stats();
        assert!(stats.icmp >= 2, "ICMP errors translated (one family each at least): {stats:?}");
    }
    drop(path);
    t.del_all_and_expect_nothing_left(&["web"], &["pmrt0"]);
}

#[test]
fn kernel_pmtu_discovery_through_a_mapping_ipv4_and_ipv6() {
    pmtu_through_a_mapping(Plugin::Plexus);
}

#[test]
fn kernel_pmtu_discovery_through_a_mapping_ipv4_and_ipv6_reference_portmap() {
    pmtu_through_a_mapping(Plugin::Reference);
}
