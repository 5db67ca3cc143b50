//! The native macvlan plugin against the reference binary, on the same NADs.
//!
//! Each comparison builds two worlds: one whose agent runs macvlan natively (the default) and
//! one started with `--exec-plugin macvlan`, which execs /usr/lib/cni/macvlan. The same pod
//! asks for the same NAD in both; then the macvlan's link, addresses and routes inside each pod
//! (`ip -d -j link/addr/route`) and its network-status entry must be equal once the values that
//! are generated differ anyway are masked: interface indexes, the MAC and the link-local
//! address derived from it when no MAC was requested, and host-local's picks. Every test ends by
//! deleting and asking the world what is left: no link, no IPAM allocation, no record.

use std::time::{Duration, Instant};

use plexus_tests::{status_of, CniOutput, Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";
const NAD: &str = "mv";
const POD: &str = "p1";

/// How the network assigns addresses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Addressing {
    /// No `ipam`: layer 2 only.
    None,
    /// `static`: IPv4, and IPv6 too when `dual_stack`, with gateways and extra routes.
    Static { dual_stack: bool },
    /// `host-local` over 10.30.0.0/24, state kept in the world so leftovers count.
    HostLocal,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    mode: &'static str,
    mtu: Option<u32>,
    /// Requested through the networks annotation (capability `mac`).
    mac: Option<&'static str>,
    addressing: Addressing,
}

fn nad_config(w: &World, case: &Case, master: &str) -> String {
    let mut plugin = json!({"type": "macvlan", "master": master, "mode": case.mode});
    if let Some(mtu) = case.mtu {
        plugin["mtu"] = json!(mtu);
    }
    if case.mac.is_some() {
        plugin["capabilities"] = json!({"mac": true});
    }
    match case.addressing {
        Addressing::None => {}
        Addressing::Static { dual_stack } => {
            let mut addresses = vec![json!({"address": "10.40.0.5/24", "gateway": "10.40.0.1"})];
            let mut routes =
                vec![json!({"dst": "0.0.0.0/0"}), json!({"dst": "192.168.50.0/24", "gw": "10.40.0.254"})];
            if dual_stack {
                addresses.push(json!({"address": "fd40::5/64", "gateway": "fd40::1"}));
                routes.push(json!({"dst": "fd41::/64"}));
            }
            plugin["ipam"] = json!({"type": "static", "addresses": addresses, "routes": routes,
                                     "dns": {"nameservers": ["10.40.0.53"]}});
            plugin["dns"] = json!({"nameservers": ["10.40.0.53"], "search": ["example.test"]});
        }
        Addressing::HostLocal => {
            plugin["ipam"] = json!({
                "type": "host-local",
                "ranges": [[{"subnet": "10.30.0.0/24", "gateway": "10.30.0.1"}]],
                "routes": [{"dst": "10.31.0.0/16"}],
                "dataDir": w.path("ipam").join(NAD),
            });
        }
    }
    json!({"cniVersion": "1.0.0", "name": NAD, "plugins": [plugin]}).to_string()
}

fn annotation(case: &Case) -> String {
    let mut selection = json!({"name": NAD, "interface": "net1"});
    if let Some(mac) = case.mac {
        selection["mac"] = json!(mac);
    }
    json!([selection]).to_string()
}

/// A world whose agent runs macvlan natively or execs the reference, with master `up0`.
fn world(native: bool, case: &Case, master_name: &str) -> World {
    let mut w = World::new();
    if !native {
        w.agent_args.extend(["--exec-plugin".to_owned(), "macvlan".to_owned()]);
    }
    w.master_link("up0");
    w.write_nad(NS, NAD, Some(&nad_config(&w, case, master_name)));
    w.write_pod(NS, POD, Some(&annotation(case)));
    w.start_agent();
    w
}

/// `ip -d -j ARGS` in the pod, parsed.
fn ip_json(pod: &Netns, args: &[&str]) -> Value {
    let mut full = vec!["-d", "-j"];
    full.extend_from_slice(args);
    serde_json::from_str(&pod.ip(&full)).unwrap_or(Value::Null)
}

/// Waits until no address of net1 is tentative, so both sides are compared after duplicate
/// address detection (the reference waits for it only when there is an IPv6 gateway).
fn settle(pod: &Netns) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pod.ip(&["addr", "show", "dev", "net1", "tentative"]).trim().is_empty() {
        assert!(Instant::now() < deadline, "net1 in {} stays tentative", pod.name);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The macvlan as iproute2 sees it inside the pod.
fn snapshot(pod: &Netns) -> Value {
    settle(pod);
    json!({
        "link": ip_json(pod, &["link", "show", "dev", "net1"]),
        "addr": ip_json(pod, &["addr", "show", "dev", "net1"]),
        "routes4": ip_json(pod, &["-4", "route", "show", "table", "all", "dev", "net1"]),
        "routes6": ip_json(pod, &["-6", "route", "show", "table", "all", "dev", "net1"]),
    })
}

/// One side of a comparison, after its ADD.
struct Side {
    w: World,
    pod: Netns,
    snapshot: Value,
    status: Value,
}

fn status_entry(w: &World) -> Value {
    status_of(&w.network_status(NS, POD), "net1").clone()
}

fn attach(native: bool, case: &Case) -> Side {
    let w = world(native, case, "up0");
    let pod = Netns::new("pxmv");
    let out = w.add("c1", &pod, (NS, POD));
    assert!(out.ok(), "{} ADD failed: {} {}\n{}", side_name(native), out.stdout, out.stderr, w.agent_log());
    let snapshot = snapshot(&pod);
    let status = status_entry(&w);
    Side { w, pod, snapshot, status }
}

fn side_name(native: bool) -> &'static str {
    if native {
        "native"
    } else {
        "reference"
    }
}

/// Replaces every occurrence of `from` in string values with `to`.
fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}

/// Drops keys whose values are generated by the kernel per link, wherever they appear.
fn drop_keys(value: &mut Value, keys: &[&str]) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| drop_keys(v, keys)),
        Value::Object(map) => {
            map.retain(|k, _| !keys.contains(&k.as_str()));
            map.values_mut().for_each(|v| drop_keys(v, keys));
        }
        _ => {}
    }
}

fn link_local_addresses(snapshot: &Value) -> Vec<String> {
    snapshot["addr"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] == "link")
        .filter_map(|a| a["local"].as_str().map(str::to_owned))
        .collect()
}

/// The side's snapshot and status with generated values masked.
fn masked(side: &Side, case: &Case) -> (Value, Value) {
    let mut snapshot = side.snapshot.clone();
    let mut status = side.status.clone();
    drop_keys(&mut snapshot, &["ifindex", "link_index"]);
    if case.mac.is_none() {
        for ll in link_local_addresses(&side.snapshot) {
            replace_strings(&mut snapshot, &ll, "<link-local>");
        }
        if let Some(mac) = side.status["mac"].as_str() {
            replace_strings(&mut snapshot, mac, "<mac>");
            replace_strings(&mut status, mac, "<mac>");
        }
    }
    if case.addressing == Addressing::HostLocal {
        for (i, ip) in side.status["ips"].as_array().into_iter().flatten().enumerate() {
            let ip = ip.as_str().unwrap_or_default().to_owned();
            assert!(ip.starts_with("10.30.0."), "host-local gave {ip}, outside 10.30.0.0/24");
            replace_strings(&mut snapshot, &ip, &format!("<ipam-{i}>"));
            replace_strings(&mut status, &ip, &format!("<ipam-{i}>"));
        }
    }
    (snapshot, status)
}

/// Every place where `a` (native) and `b` (reference) differ, as "path: a != b".
fn differences_between(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (l, r) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                differences_between(l, r, &format!("{path}.{key}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences_between(l, r, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => out.push(format!("{path}: native {a} != reference {b}")),
        _ => {}
    }
}

/// ADD on both sides, compare, DEL on both sides, nothing left.
fn compare_with_reference(case: Case) {
    let native = attach(true, &case);
    let reference = attach(false, &case);
    let (native_snapshot, native_status) = masked(&native, &case);
    let (reference_snapshot, reference_status) = masked(&reference, &case);
    let mut differences = Vec::new();
    differences_between(&native_snapshot, &reference_snapshot, "pod", &mut differences);
    differences_between(&native_status, &reference_status, "network-status", &mut differences);
    assert!(differences.is_empty(), "{case:?}: native differs from reference:\n{}", differences.join("\n"));
    if let Some(mac) = case.mac {
        assert_eq!(native.status["mac"], mac, "the requested MAC");
    }
    if let Some(mtu) = case.mtu {
        assert_eq!(native.snapshot["link"][0]["mtu"], mtu, "the configured MTU");
    }
    let log = native.w.agent_log();
    assert!(log.lines().any(|l| l.contains("run natively:") && l.contains("macvlan")), "{log}");
    for side in [&native, &reference] {
        side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
        side.w.assert_nothing_left(&[&side.pod]);
        // DEL again: idempotent.
        side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
    }
}

#[test]
fn kernel_bridge_mode_with_host_local_matches_the_reference() {
    compare_with_reference(Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::HostLocal });
}

#[test]
fn kernel_private_mode_with_static_ipam_and_an_mtu_matches_the_reference() {
    let addressing = Addressing::Static { dual_stack: false };
    compare_with_reference(Case { mode: "private", mtu: Some(1400), mac: None, addressing });
}

#[test]
fn kernel_vepa_mode_dual_stack_with_a_requested_mac_matches_the_reference() {
    let addressing = Addressing::Static { dual_stack: true };
    compare_with_reference(Case { mode: "vepa", mtu: None, mac: Some("0a:58:0a:28:00:05"), addressing });
}

#[test]
fn kernel_passthru_mode_layer_2_only_matches_the_reference() {
    compare_with_reference(Case { mode: "passthru", mtu: None, mac: None, addressing: Addressing::None });
}

#[test]
fn kernel_bridge_mode_with_mtu_mac_and_host_local_matches_the_reference() {
    let case = Case {
        mode: "bridge",
        mtu: Some(1280),
        mac: Some("0a:58:0a:1e:00:09"),
        addressing: Addressing::HostLocal,
    };
    compare_with_reference(case);
}

#[test]
fn kernel_check_passes_after_add_and_fails_once_an_address_is_removed_by_hand() {
    let case =
        Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::Static { dual_stack: false } };
    let side = attach(true, &case);
    let check = side.w.cni("CHECK", "c1", &side.pod, (NS, POD));
    assert!(check.ok(), "CHECK after ADD: {} {}", check.stdout, check.stderr);

    side.pod.ip(&["addr", "del", "10.40.0.5/24", "dev", "net1"]);
    let check = side.w.cni("CHECK", "c1", &side.pod, (NS, POD));
    assert!(!check.ok(), "CHECK must fail without the address");
    assert!(
        check.msg().contains("10.40.0.5/24") && check.msg().contains("not on the interface"),
        "CHECK should name the missing address: {}",
        check.stdout
    );

    side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
    side.w.assert_nothing_left(&[&side.pod]);
}

#[test]
fn kernel_check_fails_when_the_mode_was_changed_behind_its_back() {
    let case = Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::None };
    let side = attach(true, &case);
    side.pod.ip(&["link", "set", "net1", "type", "macvlan", "mode", "private"]);
    let check = side.w.cni("CHECK", "c1", &side.pod, (NS, POD));
    assert!(check.msg().contains("mode private does not match expected value: bridge"), "{}", check.stdout);
    side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
    side.w.assert_nothing_left(&[&side.pod]);
}

#[track_caller]
fn assert_fails_with(out: &CniOutput, code: u64, needles: &[&str]) {
    assert!(!out.ok(), "expected failure, got {}", out.stdout);
    assert_eq!(out.code(), Some(code), "{} {}", out.stdout, out.stderr);
    for needle in needles {
        assert!(out.msg().contains(needle), "{needle:?} missing from: {}", out.msg());
    }
}

#[test]
fn kernel_a_master_that_does_not_exist_fails_clearly_and_leaves_nothing() {
    let case = Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::HostLocal };
    let w = world(true, &case, "nope0");
    let pod = Netns::new("pxmv");
    let out = w.add("c1", &pod, (NS, POD));
    // The reference's words first, then what to do about it.
    assert_fails_with(&out, 7, &["failed to lookup master \"nope0\": Link not found", "set \"master\""]);
    w.assert_nothing_left(&[&pod]);

    // The reference fails too, with its code and without the advice, which also shows that
    // --exec-plugin took effect.
    let w = world(false, &case, "nope0");
    let pod = Netns::new("pxmv");
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 999, &["Link not found"]);
    assert!(!out.msg().contains("set \"master\""), "{}", out.stdout);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_an_mtu_above_the_masters_fails_with_code_7_and_leaves_nothing() {
    let case = Case { mode: "bridge", mtu: Some(9000), mac: None, addressing: Addressing::HostLocal };
    let w = world(true, &case, "up0");
    let pod = Netns::new("pxmv");
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 7, &["invalid MTU 9000", "master MTU(1500)"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_an_interface_name_taken_in_the_pod_fails_and_leaves_the_other_interface_alone() {
    let case = Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::HostLocal };
    let w = world(true, &case, "up0");
    let pod = Netns::new("pxmv");
    // Someone else's interface already holds the name.
    pod.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "other1"]);
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 7, &["net1 already exists", "another interface name"]);
    assert!(pod.link_names().contains(&"net1".to_owned()), "the pod's own net1 must survive the undo");
    pod.ip(&["link", "del", "net1"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_del_after_the_pod_namespace_is_gone_still_releases_the_address() {
    let case = Case { mode: "bridge", mtu: None, mac: None, addressing: Addressing::HostLocal };
    let side = attach(true, &case);
    assert!(!side.w.ipam_allocations().is_empty());
    let path = side.pod.path_str();
    let name = side.pod.name.clone();
    drop(side.pod);
    let env = [
        ("CNI_COMMAND", "DEL"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", path.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1"),
    ];
    side.w.shim(&env, &side.w.plexus_config("1.0.0")).expect_ok();
    assert_eq!(
        side.w.ipam_allocations(),
        Vec::<String>::new(),
        "pod netns {name} gone, address must be freed"
    );
    assert_eq!(side.w.state_files(), Vec::<String>::new());
}

/// Sets a sysctl of the node namespace.
fn node_sysctl(w: &World, key: &str, value: &str) {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let (ok, out) = w.node.exec(&["sh", "-c", &format!("echo {value} > {path}")]);
    assert!(ok, "{key}={value}: {out}");
}

#[test]
fn kernel_the_new_addresses_are_announced_to_the_neighbours() {
    let case = Case {
        mode: "bridge",
        mtu: None,
        mac: Some("0a:58:0a:28:00:07"),
        addressing: Addressing::Static { dual_stack: true },
    };
    let w = world(true, &case, "up0");
    // The master's peer stands in for the neighbours on the wire: it learns from unsolicited
    // announcements only when told to, which is what shows they were sent.
    w.node.ip(&["addr", "add", "10.40.0.1/24", "dev", "up0p"]);
    w.node.ip(&["addr", "add", "fd40::1/64", "dev", "up0p", "nodad"]);
    node_sysctl(&w, "net.ipv4.conf.up0p.arp_accept", "1");
    // RFC 9131: only a router creates entries from unsolicited advertisements.
    node_sysctl(&w, "net.ipv6.conf.up0p.forwarding", "1");
    node_sysctl(&w, "net.ipv6.conf.up0p.accept_untracked_na", "1");
    let pod = Netns::new("pxmv");
    w.add("c1", &pod, (NS, POD)).expect_ok();

    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let neighbours = w.node.ip(&["neigh", "show", "dev", "up0p"]);
        let learnt =
            |ip: &str| neighbours.lines().any(|l| l.starts_with(&format!("{ip} lladdr 0a:58:0a:28:00:07")));
        if learnt("10.40.0.5") && learnt("fd40::5") {
            break;
        }
        assert!(Instant::now() < deadline, "the neighbours did not learn the pod's addresses:\n{neighbours}");
        std::thread::sleep(Duration::from_millis(100));
    }

    w.del("c1", &pod, (NS, POD)).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_link_in_container_puts_the_macvlan_on_a_master_inside_the_pod() {
    // The reference binary in use (v1.1.1) predates linkInContainer: native only.
    let mut w = World::new();
    let config = json!({"cniVersion": "1.0.0", "name": NAD, "plugins": [{
        "type": "macvlan", "master": "up1", "linkInContainer": true, "mode": "private",
        "ipam": {"type": "static", "addresses": [{"address": "10.60.0.5/24"}]},
    }]});
    w.write_nad(NS, NAD, Some(&config.to_string()));
    w.write_pod(
        NS,
        POD,
        Some(&annotation(&Case { mode: "private", mtu: None, mac: None, addressing: Addressing::None })),
    );
    w.start_agent();
    let pod = Netns::new("pxmv");
    pod.ip(&["link", "add", "up1", "type", "veth", "peer", "name", "up1p"]);
    pod.ip(&["link", "set", "up1", "up"]);

    w.add("c1", &pod, (NS, POD)).expect_ok();
    let link = &ip_json(&pod, &["link", "show", "dev", "net1"])[0];
    assert_eq!(link["link"], "up1", "the master is the pod's own up1: {link}");
    assert_eq!(link["linkinfo"]["info_data"]["mode"], "private");
    assert_eq!(pod.addresses("net1"), ["10.60.0.5/24"]);
    let check = w.cni("CHECK", "c1", &pod, (NS, POD));
    assert!(check.ok(), "CHECK: {}", check.stdout);

    w.del("c1", &pod, (NS, POD)).expect_ok();
    assert!(pod.link_names().contains(&"up1".to_owned()), "DEL must leave the master alone");
    pod.ip(&["link", "del", "up1"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_layer_2_network_at_cni_0_2_0_fails_with_code_1_and_leaves_nothing() {
    // 0.2.0 results are IP addresses only: a macvlan without IPAM has nothing to say in them.
    let mut w = World::new();
    w.master_link("up0");
    let config = json!({"cniVersion": "0.2.0", "name": NAD, "type": "macvlan", "master": "up0"});
    w.write_nad(NS, NAD, Some(&config.to_string()));
    w.write_pod(NS, POD, Some(NAD));
    w.start_agent();
    let pod = Netns::new("pxmv");
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 1, &["use cniVersion 0.3.0 or later"]);
    w.assert_nothing_left(&[&pod]);
}
