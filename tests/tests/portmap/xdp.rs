//! The XDP program on a macvlan master and on a bridge's uplink, with real traffic: mapped TCP
//! and UDP over both families translated in XDP (shown by detaching the TC ingress program of
//! the master or the bridge: the requests still reach the pods, translated by XDP alone, and
//! TC answers the flows XDP made; on the bridge, redirected straight into the pod's veth),
//! direct pod access untouched, an agent restart mid-stream losing nothing, `--no-xdp`,
//! ingress limits enforced in XDP and counted once, and nothing left after the DELs.

use super::*;

/// Port mappings on a macvlan master take its XDP hook only when asked: by default TC alone
/// translates there (XDP loses on a master, see `XdpWhere::Auto`).
const ALWAYS: &[&str] = &["--xdp", "always"];

/// The macvlan world of `kernel_macvlan_with_the_host_ip_on_the_master`: a client on the
/// master `pmm0` (a veth, native XDP), the host IPs on the master, the agent started.
fn macvlan_world(agent_args: &[&str]) -> (PmWorld, String) {
    macvlan_world_with(agent_args, macvlan_nad)
}

/// [`macvlan_world`] with the network `pmmv` of `nad`.
fn macvlan_world_with(agent_args: &[&str], nad: fn(&World, &str) -> String) -> (PmWorld, String) {
    let mut t = PmWorld::new();
    t.w.agent_args.extend(agent_args.iter().map(|a| a.to_string()));
    t.w.write_nad(NS, "pmmv", Some(&nad(&t.w, "pmmv")));
    let client = t.client("pmm0", &["10.78.0.200/24", "fd00:78::c8/64"]);
    t.w.node.ip(&["addr", "add", "10.78.0.1/24", "dev", "pmm0"]);
    t.w.node.ip(&["addr", "add", "fd00:78::1/64", "dev", "pmm0", "nodad"]);
    t.w.start_agent();
    t.wait_reconciled(1);
    let c = t.clients[client].name.clone();
    (t, c)
}

fn master_index(t: &PmWorld) -> u32 {
    node_index(t, "pmm0")
}

/// What `ip link` says runs at the master's XDP hook ("xdp" native, "xdpgeneric", or none).
fn ip_link_xdp(t: &PmWorld) -> String {
    ip_link_xdp_on(t, "pmm0")
}

/// Waits until no XDP program runs on `dev` (the kernel frees a link whose last pin went a
/// moment after), failing after 2 s.
fn expect_no_xdp_on(t: &PmWorld, dev: &str, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while ip_link_xdp_on(t, dev) != "none" {
        assert!(Instant::now() < deadline, "{why}: {dev} still runs {}", ip_link_xdp_on(t, dev));
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ip_link_xdp_on(t: &PmWorld, dev: &str) -> String {
    let (ok, out) = t.w.node.exec(&["ip", "-d", "link", "show", dev]);
    assert!(ok, "{out}");
    out.split_whitespace().find(|w| w.starts_with("xdp")).unwrap_or("none").to_owned()
}

/// A pod's mapped ports, by both host IPs, and its own TCP port.
struct Served {
    hosts: [&'static str; 2],
    tcp: u16,
    udp: u16,
    pod: &'static str,
    pod_tcp: u16,
}

/// The client reaches the pod through its mappings and, untranslated, at its own addresses;
/// then, with the TC ingress program at `tc_in` detached, through XDP alone, whose counters and
/// flows (one of them from `client_v6`) show it.
fn assert_xdp_serves(t: &PmWorld, c: &str, s: &Served, tc_in: &Path, client_v6: &str) {
    assert_reaches(t, c, &s.hosts, s.tcp, s.udp, s.pod);
    // Direct access to the pod's own address stays untouched: its replies come from it.
    let (pod4, pod6) = t.pod_ips(0);
    for pod in [&pod4, &pod6] {
        let got = t.run(c, &["tcp", pod, &s.pod_tcp.to_string(), "direct"]);
        assert_eq!(got[..2], [s.pod.to_owned(), "direct".into()]);
        assert_eq!(bare(&got[2]), *pod, "a direct peer sees the pod's address");
    }
    std::fs::remove_file(tc_in).expect("detaching the TC ingress program");
    let before: u64 = t.list().iter().filter_map(|r| r["packets_in"].as_u64()).sum();
    assert_reaches(t, c, &s.hosts, s.tcp, s.udp, s.pod);
    let after: u64 = t.list().iter().filter_map(|r| r["packets_in"].as_u64()).sum();
    assert!(after > before, "XDP counted the requests it translated ({before} -> {after})");
    let flows = t.flows_json();
    assert!(
        flows.iter().any(|f| f["client"].as_str().is_some_and(|x| x.starts_with(client_v6))),
        "XDP's flows are in the flow table: {flows:#?}"
    );
}

/// The agent's start attaches the detached TC program at `tc_in` again; the DEL of `pod` (the
/// first) then detaches XDP from `dev` with its last mapping.
fn restart_then_del_detaches_xdp(t: &mut PmWorld, tc_in: &Path, pod: &str, dev: &str) {
    let starts = plain(&t.w.agent_log()).matches("port mappings reconciled").count();
    t.w.kill_agent();
    t.w.start_agent();
    t.wait_reconciled(starts + 1);
    assert!(tc_in.exists(), "the TC ingress program is back");
    t.del(pod, 0);
    assert!(!t.link_pins().iter().any(|p| p.starts_with("xdp_")), "{:?}", t.link_pins());
    expect_no_xdp_on(t, dev, "no XDP program left after the last mapping's DEL");
}

#[test]
fn kernel_xdp_translates_mapped_tcp_and_udp_on_a_macvlan_master_both_families() {
    let (mut t, c) = macvlan_world(ALWAYS);
    t.pod("db", &mappings("pmmv", &[(5432, 5432, "TCP"), (5433, 5433, "udp")]), &[5432, 5433]);
    let ifindex = master_index(&t);
    assert!(t.link_pins().contains(&format!("xdp_{ifindex}")), "{:?}", t.link_pins());
    assert_eq!(ip_link_xdp(&t), "xdp", "native XDP on the veth master");
    let listed = t.list();
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|r| r["path"] == "xdp native"), "{listed:#?}");
    assert!(t.list_text().contains("xdp native"), "{}", t.list_text());

    // Without the master's TC ingress program, XDP alone translates the requests, and TC's
    // egress program still answers the flows it made.
    let tc_in = t.pins.join("links").join(format!("tc_{ifindex}_in"));
    let served =
        Served { hosts: ["10.78.0.1", "fd00:78::1"], tcp: 5432, udp: 5433, pod: "db", pod_tcp: 5432 };
    assert_xdp_serves(&t, &c, &served, &tc_in, "[fd00:78::c8]");

    restart_then_del_detaches_xdp(&mut t, &tc_in, "db", "pmm0");
    t.del_all_and_expect_nothing_left(&["db"], &["pmm0"]);
}

/// The bridge network of `kernel_bridge_tcp_udp_ipv4_ipv6_several_mappings_and_del_removes_everything`
/// with the client's port `pmcl0` named as the bridge's uplink.
fn bridge_nad_with_uplink(w: &World, name: &str) -> String {
    let mut nad: Value = serde_json::from_str(&bridge_nad(w, name)).expect("the NAD's JSON");
    nad["plugins"][1]["uplinks"] = json!(["pmcl0"]);
    nad.to_string()
}

/// The frames XDP redirected into the pod's veth on `bridge` (the port that is not `uplink`),
/// and those that failed: its host end's `tx_queue_0_xdp_xmit` and `_errors`.
fn xdp_xmit(t: &PmWorld, bridge: &str, uplink: &str) -> (u64, u64) {
    let (ok, ports) = t.w.node.exec(&["ip", "-o", "link", "show", "master", bridge]);
    assert!(ok, "{ports}");
    let veth: Vec<&str> = ports
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name))
        .filter(|name| *name != uplink)
        .collect();
    assert_eq!(veth.len(), 1, "one pod's veth on {bridge}: {ports}");
    let (ok, stats) = t.w.node.exec(&["ethtool", "-S", veth[0]]);
    assert!(ok, "{stats}");
    let stat = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.trim().strip_prefix(name).and_then(|v| v.strip_prefix(':')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
    };
    (stat("tx_queue_0_xdp_xmit"), stat("tx_queue_0_xdp_xmit_errors"))
}

#[test]
fn kernel_xdp_translates_mapped_tcp_and_udp_on_a_bridge_uplink_both_families() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad_with_uplink(&t.w, "pmbr")));
    t.w.start_agent();
    t.wait_reconciled(1);
    // The bridge with its uplink before the first ADD (the bridge plugin adopts it): a client
    // on the bridge's wire, behind the port `pmcl0` (a veth: native XDP).
    t.w.node.ip(&["link", "add", "pmbr0", "type", "bridge"]);
    t.w.node.ip(&["link", "set", "pmbr0", "up"]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    t.pod("web", &mappings("pmbr", &[(8080, 80, "TCP"), (5353, 53, "udp")]), &[80, 53]);

    let (uplink, bridge) = (node_index(&t, "pmcl0"), node_index(&t, "pmbr0"));
    assert!(t.link_pins().contains(&format!("xdp_{uplink}")), "{:?}", t.link_pins());
    assert_eq!(ip_link_xdp_on(&t, "pmcl0"), "xdp", "native XDP on the veth uplink");
    assert_eq!(ip_link_xdp_on(&t, "pmbr0"), "none", "the bridge itself keeps TC");
    let listed = t.list();
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|r| r["path"] == "xdp native redirect"), "{listed:#?}");

    // Without the bridge's TC ingress program, XDP on the uplink alone translates the
    // requests, the bridge forwards them to the pod, and the pod's veth answers the flows XDP
    // made.
    let tc_in = t.pins.join("links").join(format!("tc_{bridge}_in"));
    let served = Served { hosts: ["10.77.0.1", "fd00:77::1"], tcp: 8080, udp: 5353, pod: "web", pod_tcp: 80 };
    assert_xdp_serves(&t, &c, &served, &tc_in, "[fd00:77::c8]");
    // The requests went straight into the pod's veth, whose pod end has GRO on for it.
    let (ok, features) = t.pods[0].exec(&["ethtool", "-k", "net1"]);
    assert!(ok && features.contains("generic-receive-offload: on"), "{features}");
    let (redirected, failed) = xdp_xmit(&t, "pmbr0", "pmcl0");
    assert!(
        redirected > 0 && failed == 0,
        "XDP redirected {redirected} frames into the pod's veth, {failed} failed"
    );

    restart_then_del_detaches_xdp(&mut t, &tc_in, "web", "pmcl0");

    // An uplink that is not a port of the bridge: the ADD fails with what to fix, and the
    // attachment is undone (the checks below find no interface, allocation or record left).
    let mut bad: Value = serde_json::from_str(&bridge_nad_with_uplink(&t.w, "pmbad")).expect("JSON");
    bad["plugins"][1]["uplinks"] = json!(["lo"]);
    t.w.write_nad(NS, "pmbad", Some(&bad.to_string()));
    let pod = Netns::new("pmpod");
    t.w.write_pod(NS, "bad", Some(&mappings("pmbad", &[(7070, 70, "tcp")]).to_string()));
    let out = t.w.add(&cid("bad"), &pod, (NS, "bad"));
    assert_eq!(out.code(), Some(7), "{} {}", out.stdout, out.stderr);
    assert!(
        out.msg().contains("\"uplinks\" names lo, which is not a port of the bridge pmbr0"),
        "{}",
        out.msg()
    );
    assert!(pod.link_names().iter().all(|l| l == "lo"), "the failed attachment was undone");
    t.del_all_and_expect_nothing_left(&["web"], &["pmcl0"]);
}

#[test]
fn kernel_xdp_agent_restart_mid_stream_loses_nothing_and_no_xdp_hands_back_to_tc() {
    let (mut t, c) = macvlan_world(ALWAYS);
    t.pod("web", &mappings("pmmv", &[(8080, 80, "tcp")]), &[80]);
    t.run(&c, &["tcp", "10.78.0.1", "8080", "warm-up"]);
    let ifindex = master_index(&t);
    let xdp_pin = t.pins.join("links").join(format!("xdp_{ifindex}"));
    assert!(xdp_pin.exists());

    // A TCP stream through XDP for 8 s; the agent is killed 1.5 s in and started 2 s later.
    let stream = t.stream(&c, "10.78.0.1", "8080", "8");
    std::thread::sleep(Duration::from_millis(1500));
    t.w.kill_agent();
    std::thread::sleep(Duration::from_millis(2000));
    t.w.start_agent();
    t.wait_reconciled(2);
    assert_eq!(ip_link_xdp(&t), "xdp", "XDP kept running across the restart");
    stream.finish();
    assert!(
        plain(&t.w.agent_log()).matches("attached the XDP program").count() == 1,
        "the restart left the identical XDP program alone:\n{}",
        t.w.agent_log()
    );

    // --no-xdp: the start detaches it, and TC serves the mapping alone.
    t.w.kill_agent();
    t.w.agent_args.retain(|a| !ALWAYS.contains(&a.as_str()));
    t.w.agent_args.push("--no-xdp".into());
    t.w.start_agent();
    t.wait_reconciled(3);
    assert!(!xdp_pin.exists(), "--no-xdp detached the XDP program");
    expect_no_xdp_on(&t, "pmm0", "--no-xdp detached the XDP program");
    assert!(t.list().iter().all(|r| r["path"] == "tc"), "{:#?}", t.list());
    for host in ["10.78.0.1", "fd00:78::1"] {
        let got = t.run(&c, &["tcp", host, "8080", "via-tc"]);
        assert_eq!(got[..2], ["web".to_owned(), "via-tc".into()]);
    }
    t.del_all_and_expect_nothing_left(&["web"], &["pmm0"]);
}

/// A macvlan network on `pmm0` chaining both dataplane plugins.
fn macvlan_nad_limited(w: &World, name: &str) -> String {
    let mut nad: Value = serde_json::from_str(&macvlan_nad(w, name)).expect("the NAD");
    nad["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(json!({"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}));
    nad.to_string()
}

/// `plexus-agent bandwidth list --json` (in the node's namespace, where the master is): the
/// pod's ingress row.
fn ingress_limit_row(t: &PmWorld) -> Value {
    let out =
        t.w.node
            .command(bin("plexus-agent"))
            .args(["bandwidth", "list", "--json", "--bpf-pin-dir"])
            .arg(&t.pins)
            .arg("--state-dir")
            .arg(t.w.path("state"))
            .output()
            .expect("running plexus-agent bandwidth list");
    assert!(out.status.success(), "bandwidth list: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("bandwidth list JSON");
    rows.into_iter()
        .find(|r| r["direction"] == "ingress")
        .unwrap_or_else(|| panic!("no ingress limit listed"))
}

/// Packets the pod's `net1` received so far.
fn pod_rx_packets(t: &PmWorld, pod: usize) -> u64 {
    let (ok, out) = t.pods[pod].exec(&["cat", "/sys/class/net/net1/statistics/rx_packets"]);
    assert!(ok, "{out}");
    out.trim().parse().expect("a packet count")
}

/// `count` 100-byte UDP datagrams from the client to `host:port`, in bursts of 50.
fn flood(client: &str, host: &str, port: u16, count: u32) {
    let script = format!(
        "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor i in range({count}):\n    \
         s.sendto(b'x' * 100, ('{host}', {port}))\n    if i % 50 == 49: time.sleep(0.002)\n"
    );
    let out =
        Command::new("ip").args(["netns", "exec", client, python(), "-c", &script]).output().expect("flood");
    assert!(out.status.success(), "flood: {}", String::from_utf8_lossy(&out.stderr));
}

fn counted(row: &Value) -> (u64, u64) {
    (row["passed_packets"].as_u64().unwrap_or(0), row["dropped_packets"].as_u64().unwrap_or(0))
}

/// Floods the first pod's limited UDP port 5433 and checks that its ingress limit both passed
/// and dropped packets meanwhile (`who` is the XDP program expected to do it).
fn flood_is_policed(t: &PmWorld, client: &str, pod: &str, who: &str) {
    let (p0, d0) = counted(&ingress_limit_row(t));
    flood(client, pod, 5433, 4000);
    let (p1, d1) = counted(&ingress_limit_row(t));
    assert!(d1 > d0 && p1 > p0, "{who} dropped over the limit: {:?} -> {:?}", (p0, d0), (p1, d1));
}

/// A UDP flood at a pod's 1 Mbit/s ingress limit: XDP drops what is over it (with the master's
/// TC ingress shaping program detached, XDP alone), and what XDP passes is counted once, not
/// again by TC: the limit's passed packets follow what the pod received.
#[test]
fn kernel_xdp_enforces_ingress_limits_once() {
    let (mut t, c) = macvlan_world_with(ALWAYS, macvlan_nad_limited);
    let mut annotation = mappings("pmmv", &[(5433, 5433, "udp")]);
    annotation[0]["bandwidth"] = json!({"ingressRate": 1_000_000, "egressRate": 1_000_000});
    t.pod("sink", &annotation, &[5433]);
    t.run(&c, &["udp", "10.78.0.1", "5433", "warm-up"]);
    let row = ingress_limit_row(&t);
    assert_eq!(row["xdp"], "native", "{row}");

    // The shaping object's TC ingress program on the master detached: drops are XDP's.
    let ifindex = master_index(&t);
    let bw_in = t.pins.join("bandwidth").join("links").join(format!("tc_{ifindex}_in"));
    std::fs::remove_file(&bw_in).expect("detaching the master's shaping ingress program");
    let (p0, d0) = counted(&ingress_limit_row(&t));
    flood(&c, "10.78.0.1", 5433, 4000);
    let (p1, d1) = counted(&ingress_limit_row(&t));
    assert!(d1 > d0, "XDP dropped over the limit: {:?} -> {:?}", (p0, d0), (p1, d1));
    assert!(p1 > p0, "and passed the bucket's worth");

    // With both programs: what XDP passed, TC does not count again.
    let starts = plain(&t.w.agent_log()).matches("bandwidth limits reconciled").count();
    t.w.kill_agent();
    t.w.start_agent();
    let deadline = Instant::now() + Duration::from_secs(20);
    while plain(&t.w.agent_log()).matches("bandwidth limits reconciled").count() <= starts {
        assert!(Instant::now() < deadline, "never reconciled:\n{}", t.w.agent_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(bw_in.exists(), "the shaping ingress program is back");
    // A fresh bucket: wait for the flood's debt to drain.
    std::thread::sleep(Duration::from_millis(1500));
    let rx0 = pod_rx_packets(&t, 0);
    let (p2, d2) = counted(&ingress_limit_row(&t));
    flood(&c, "10.78.0.1", 5433, 4000);
    std::thread::sleep(Duration::from_millis(200));
    let rx = pod_rx_packets(&t, 0) - rx0;
    let (p3, d3) = counted(&ingress_limit_row(&t));
    assert!(d3 > d2, "drops over the limit: {:?} -> {:?}", (p2, d2), (p3, d3));
    let passed = p3 - p2;
    eprintln!("XDP and TC: passed {passed}, dropped {}, the pod received {rx}", d3 - d2);
    assert!(
        passed.abs_diff(rx) <= 20,
        "passed packets ({passed}) follow what the pod received ({rx}): counted once"
    );
    t.del_all_and_expect_nothing_left(&["sink"], &["pmm0"]);
}

/// Pods on a macvlan master with ingress limits and no port mappings get the shaping object's
/// own XDP program (`bw_xdp`), which drops what is over a limit; a pod with port mappings on the
/// same master brings the port mapping object's `pm_xdp`, which takes the hook over (an
/// interface holds one XDP program) and polices the same limits; once it goes, the shaping
/// object's program comes back at the agent's next reconciling.
#[test]
fn kernel_xdp_polices_a_limit_only_master_and_hands_it_to_port_mappings() {
    let (mut t, c) = macvlan_world_with(ALWAYS, macvlan_nad_limited);
    let ifindex = master_index(&t);
    let bw_xdp = t.pins.join("bandwidth").join("links").join(format!("xdp_{ifindex}"));
    let pm_xdp = t.pins.join("links").join(format!("xdp_{ifindex}"));

    // Limits only: no mapping asked, so plexus-portmap does nothing; bw_xdp runs.
    let annotation =
        json!([{"name": "pmmv", "bandwidth": {"ingressRate": 1_000_000, "egressRate": 1_000_000}}]);
    t.pod("sink", &annotation, &[5433]);
    let (pod4, _) = t.pod_ips(0);
    t.run(&c, &["udp", &pod4, "5433", "warm-up"]);
    assert!(bw_xdp.exists() && !pm_xdp.exists(), "{:?}", t.link_pins());
    assert_eq!(ip_link_xdp(&t), "xdp");
    assert_eq!(ingress_limit_row(&t)["xdp"], "native");
    // The shaping object's TC ingress program on the master detached: drops are XDP's.
    let bw_in = t.pins.join("bandwidth").join("links").join(format!("tc_{ifindex}_in"));
    std::fs::remove_file(&bw_in).expect("detaching the master's shaping ingress program");
    flood_is_policed(&t, &c, &pod4, "bw_xdp");

    // A pod with a port mapping: pm_xdp takes the hook over and polices the same limit.
    t.pod("web", &mappings("pmmv", &[(8080, 80, "tcp")]), &[80]);
    assert!(pm_xdp.exists() && !bw_xdp.exists(), "{:?}", t.link_pins());
    assert!(plain(&t.w.agent_log()).contains("took the interface's XDP hook over"), "{}", t.w.agent_log());
    assert_eq!(ingress_limit_row(&t)["xdp"], "native");
    assert!(t.list().iter().all(|r| r["path"] == "xdp native"), "{:#?}", t.list());
    let got = t.run(&c, &["tcp", "10.78.0.1", "8080", "mapped"]);
    assert_eq!(got[..2], ["web".to_owned(), "mapped".into()]);
    std::thread::sleep(Duration::from_millis(1500));
    flood_is_policed(&t, &c, &pod4, "pm_xdp");

    // The mapping goes, and its XDP program with it: the hook goes back to bw_xdp at once,
    // which drops over the limit again.
    t.del("web", 1);
    assert!(!pm_xdp.exists(), "{:?}", t.link_pins());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !bw_xdp.exists() {
        assert!(
            Instant::now() < deadline,
            "bw_xdp never came back: {:?}\n{}",
            t.link_pins(),
            t.w.agent_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(plain(&t.w.agent_log()).contains("XDP hook taken back"), "{}", t.w.agent_log());
    assert_eq!(ip_link_xdp(&t), "xdp");
    assert_eq!(ingress_limit_row(&t)["xdp"], "native");
    std::thread::sleep(Duration::from_millis(1500));
    flood_is_policed(&t, &c, &pod4, "bw_xdp, back,");
    t.del("sink", 0);
    assert!(!bw_xdp.exists(), "the last limit's DEL detaches bw_xdp");
    expect_no_xdp_on(&t, "pmm0", "the last limit's DEL detaches bw_xdp");
    t.del_all_and_expect_nothing_left(&["sink", "web"], &["pmm0"]);
}

/// By default (`--xdp auto`) port mappings on a macvlan master stay in TC, where XDP loses to
/// it: no port mapping XDP program on the master, `portmap list` says `tc`, and mapped TCP and
/// UDP are translated; a pod's ingress limit on the same master still gets the shaping
/// object's XDP program, which polices it (dropping before an skb is built wins there).
#[test]
fn kernel_by_default_port_mappings_on_a_macvlan_master_stay_in_tc() {
    let (mut t, c) = macvlan_world_with(&[], macvlan_nad_limited);
    let ifindex = master_index(&t);
    let bw_xdp = t.pins.join("bandwidth").join("links").join(format!("xdp_{ifindex}"));
    let pm_xdp = t.pins.join("links").join(format!("xdp_{ifindex}"));
    let mut annotation = mappings("pmmv", &[(8080, 80, "tcp"), (5433, 5433, "udp")]);
    annotation[0]["bandwidth"] = json!({"ingressRate": 1_000_000, "egressRate": 1_000_000});
    t.pod("web", &annotation, &[80, 5433]);
    for host in ["10.78.0.1", "fd00:78::1"] {
        let got = t.run(&c, &["tcp", host, "8080", "via-tc"]);
        assert_eq!(got[..2], ["web".to_owned(), "via-tc".into()]);
        let got = t.run(&c, &["udp", host, "5433", "via-tc"]);
        assert_eq!(got[0], "web:via-tc", "{got:?}");
    }
    assert!(!pm_xdp.exists(), "no port mapping XDP program on the master: {:?}", t.link_pins());
    assert!(t.list().iter().all(|r| r["path"] == "tc"), "{:#?}", t.list());
    assert!(bw_xdp.exists(), "the ingress limit's XDP program holds the master: {:?}", t.link_pins());
    assert_eq!(ip_link_xdp(&t), "xdp");
    assert_eq!(ingress_limit_row(&t)["xdp"], "native");
    let (pod4, _) = t.pod_ips(0);
    flood_is_policed(&t, &c, &pod4, "bw_xdp");
    t.del_all_and_expect_nothing_left(&["web"], &["pmm0"]);
}
