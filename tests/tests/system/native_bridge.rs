//! The native bridge plugin against the reference binary, on the same NADs.
//!
//! Each comparison builds two worlds: one whose agent runs bridge natively (the default) and
//! one started with `--exec-plugin bridge`, which execs /usr/lib/cni/bridge. The same pod asks
//! for the same NAD in both; then the pod's interface (`ip -d -j link/addr/route`), the node's
//! bridge and its port (`ip -d -j link/addr/route`, `bridge -j vlan show`), the sysctls the
//! plugin sets, and the network-status entry must be equal once the values that are generated
//! differ anyway are masked: interface indexes, MACs (unless requested) and the link-local
//! addresses derived from them, the host veth's random name, and the bridge's running timers.
//! Every test ends by deleting and asking the world what is left: no veth, no IPAM allocation,
//! no record.
//!
//! The reference binary here is v1.1.1, which predates `disableContainerInterface`: that one is
//! tested natively, against what the current reference's source does. VLAN configs are handed to
//! the reference binary (this kernel has no bridge VLAN filtering to compare them on), as are
//! `ipMasqBackend: "iptables"` and `portIsolation`. `ipMasq` and `macspoofchk` are compared with
//! real traffic in native_bridge_nft.rs.

use std::time::{Duration, Instant};

use plexus_tests::{status_of, CniOutput, Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";
const NAD: &str = "br";
const POD: &str = "p1";
const BRIDGE: &str = "brt0";

/// How the network assigns addresses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Addressing {
    /// No `ipam`: layer 2 only.
    None,
    /// `static`: IPv4 without a gateway (so the bridge plugin picks one), and with
    /// `dual_stack` IPv6 with one, plus an extra route.
    Static { dual_stack: bool },
    /// `host-local` over 10.30.0.0/24, state kept in the world so leftovers count.
    HostLocal,
}

#[derive(Clone, Debug)]
struct Case {
    /// The bridge plugin's own keys (type, bridge and ipam are added).
    options: Value,
    /// Requested through the networks annotation (capability `mac`).
    mac: Option<&'static str>,
    addressing: Addressing,
    /// An address the bridge has before the ADD.
    bridge_address: Option<&'static str>,
}

fn case(options: Value, addressing: Addressing) -> Case {
    Case { options, mac: None, addressing, bridge_address: None }
}

fn plugin_config(w: &World, case: &Case) -> Value {
    let mut plugin = json!({"type": "bridge", "bridge": BRIDGE});
    for (k, v) in case.options.as_object().into_iter().flatten() {
        plugin[k] = v.clone();
    }
    if case.mac.is_some() {
        plugin["capabilities"] = json!({"mac": true});
    }
    match case.addressing {
        Addressing::None => {}
        Addressing::Static { dual_stack } => {
            let mut addresses = vec![json!({"address": "10.40.0.5/24"})];
            let mut routes = vec![json!({"dst": "192.168.50.0/24", "gw": "10.40.0.254"})];
            if dual_stack {
                addresses.push(json!({"address": "fd40::5/64", "gateway": "fd40::1"}));
                routes.push(json!({"dst": "fd41::/64"}));
            }
            plugin["ipam"] = json!({"type": "static", "addresses": addresses, "routes": routes});
            plugin["dns"] = json!({"nameservers": ["10.40.0.53"], "search": ["example.test"]});
        }
        Addressing::HostLocal => {
            plugin["ipam"] = json!({
                "type": "host-local",
                "ranges": [[{"subnet": "10.30.0.0/24"}]],
                "routes": [{"dst": "10.31.0.0/16"}],
                "dataDir": w.path("ipam").join(NAD),
            });
        }
    }
    plugin
}

fn nad_config(w: &World, case: &Case) -> String {
    json!({"cniVersion": "1.0.0", "name": NAD, "plugins": [plugin_config(w, case)]}).to_string()
}

fn annotation(case: &Case) -> String {
    let mut selection = json!({"name": NAD, "interface": "net1"});
    if let Some(mac) = case.mac {
        selection["mac"] = json!(mac);
    }
    json!([selection]).to_string()
}

/// A world whose agent runs bridge natively or execs the reference.
fn world(native: bool, case: &Case) -> World {
    let mut w = World::new();
    if !native {
        w.agent_args.extend(["--exec-plugin".to_owned(), "bridge".to_owned()]);
    }
    if let Some(address) = case.bridge_address {
        w.node.ip(&["link", "add", BRIDGE, "type", "bridge"]);
        w.node.ip(&["addr", "add", address, "dev", BRIDGE]);
    }
    w.write_nad(NS, NAD, Some(&nad_config(&w, case)));
    w.write_pod(NS, POD, Some(&annotation(case)));
    w.start_agent();
    w
}

fn ip_json(ns: &Netns, args: &[&str]) -> Value {
    let mut full = vec!["-d", "-j"];
    full.extend_from_slice(args);
    serde_json::from_str(&ns.ip(&full)).unwrap_or(Value::Null)
}

fn sysctl(ns: &Netns, key: &str) -> Value {
    let (ok, out) = ns.exec(&["cat", &format!("/proc/sys/{}", key.replace('.', "/"))]);
    if ok {
        json!(out.trim())
    } else {
        Value::Null
    }
}

/// The host end: the one port of the bridge.
fn host_veth(node: &Netns) -> Option<String> {
    let ports = ip_json(node, &["link", "show", "master", BRIDGE]);
    ports.as_array()?.first()?["ifname"].as_str().map(str::to_owned)
}

/// What the attachment made, on both sides.
fn snapshot(w: &World, pod: &Netns) -> Value {
    let node = &w.node;
    let host = host_veth(node).unwrap_or_default();
    let vlans: Value = node
        .exec(&["bridge", "-j", "vlan", "show"])
        .1
        .parse::<Value>()
        .unwrap_or(Value::Null)
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["ifname"] == BRIDGE || e["ifname"] == host.as_str())
        .cloned()
        .collect();
    json!({
        "pod": {
            "link": ip_json(pod, &["link", "show", "dev", "net1"]),
            "addr": ip_json(pod, &["addr", "show", "dev", "net1"]),
            "routes4": ip_json(pod, &["-4", "route", "show", "table", "all", "dev", "net1"]),
            "routes6": ip_json(pod, &["-6", "route", "show", "table", "all", "dev", "net1"]),
            "accept_dad": sysctl(pod, "net.ipv6.conf.net1.accept_dad"),
            "enhanced_dad": sysctl(pod, "net.ipv6.conf.net1.enhanced_dad"),
            "arp_notify": sysctl(pod, "net.ipv4.conf.net1.arp_notify"),
        },
        "node": {
            "bridge": ip_json(node, &["link", "show", "dev", BRIDGE]),
            "bridge_addr": ip_json(node, &["addr", "show", "dev", BRIDGE]),
            "bridge_routes4": ip_json(node, &["-4", "route", "show", "table", "all", "dev", BRIDGE]),
            "bridge_routes6": ip_json(node, &["-6", "route", "show", "table", "all", "dev", BRIDGE]),
            "port": ip_json(node, &["link", "show", "dev", &host]),
            "vlans": vlans,
            "bridge_accept_ra": sysctl(node, &format!("net.ipv6.conf.{BRIDGE}.accept_ra")),
            "port_accept_ra": sysctl(node, &format!("net.ipv6.conf.{host}.accept_ra")),
            "ip_forward": sysctl(node, "net.ipv4.ip_forward"),
            "ipv6_forwarding": sysctl(node, "net.ipv6.conf.all.forwarding"),
        },
    })
}

/// Keys whose values run on their own (timers) or are per-link numbers.
const VOLATILE: &[&str] = &[
    "ifindex",
    "link_index",
    "hello_timer",
    "tcn_timer",
    "topology_change_timer",
    "gc_timer",
    "forward_delay_timer",
    "hold_timer",
    "message_age_timer",
];

/// Waits until the snapshot stops changing (link states settle asynchronously, IPv6 addresses
/// leave tentative), then returns it.
fn settled(w: &World, pod: &Netns) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = Value::Null;
    loop {
        let mut now = snapshot(w, pod);
        // Duplicate address detection runs only on a link with carrier: a bridge whose one
        // port leads to a pod end that is down keeps its link-local address tentative.
        let bridge_up = now["node"]["bridge"][0]["operstate"] == "UP";
        let tentative =
            has_tentative(&now["pod"]["addr"]) || bridge_up && has_tentative(&now["node"]["bridge_addr"]);
        let raw = now.clone();
        drop_keys(&mut now, VOLATILE);
        if now == last && !tentative {
            return raw;
        }
        assert!(Instant::now() < deadline, "the attachment in {} does not settle", pod.name);
        last = now;
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn has_tentative(addr: &Value) -> bool {
    addr.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .any(|a| a["tentative"] == true)
}

/// One side of a comparison, after its ADD.
struct Side {
    w: World,
    pod: Netns,
    snapshot: Value,
    status: Value,
}

fn attach(native: bool, case: &Case) -> Side {
    let w = world(native, case);
    let pod = Netns::new("pxbr");
    let out = w.add("c1", &pod, (NS, POD));
    assert!(out.ok(), "{} ADD failed: {} {}\n{}", side_name(native), out.stdout, out.stderr, w.agent_log());
    let snapshot = settled(&w, &pod);
    let status = status_of(&w.network_status(NS, POD), "net1").clone();
    Side { w, pod, snapshot, status }
}

fn side_name(native: bool) -> &'static str {
    if native {
        "native"
    } else {
        "reference"
    }
}

fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}

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

fn link_local_addresses(addr: &Value) -> Vec<String> {
    addr.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] == "link")
        .filter_map(|a| a["local"].as_str().map(str::to_owned))
        .collect()
}

fn mac_of(link: &Value) -> Option<String> {
    link[0]["address"].as_str().map(str::to_owned)
}

/// The side's snapshot and status with generated values masked.
fn masked(side: &Side, case: &Case) -> (Value, Value) {
    let mut snapshot = side.snapshot.clone();
    let mut status = side.status.clone();
    drop_keys(&mut snapshot, VOLATILE);
    let raw = &side.snapshot;
    let mut addresses = link_local_addresses(&raw["node"]["bridge_addr"]);
    addresses.extend(link_local_addresses(&raw["pod"]["addr"]));
    if case.mac.is_some() {
        addresses.retain(|a| !link_local_addresses(&raw["pod"]["addr"]).contains(a));
    }
    for (i, ll) in addresses.iter().enumerate() {
        replace_strings(&mut snapshot, ll, &format!("<link-local-{i}>"));
    }
    let mut macs = vec![("bridge", mac_of(&raw["node"]["bridge"])), ("port", mac_of(&raw["node"]["port"]))];
    if case.mac.is_none() {
        macs.push(("pod", mac_of(&raw["pod"]["link"])));
    }
    for (what, mac) in macs {
        if let Some(mac) = mac {
            replace_strings(&mut snapshot, &mac, &format!("<{what}-mac>"));
            // Bridge identifiers print the MAC's bytes without leading zeros ("8000.2:e8:...").
            let short: Vec<String> = mac
                .split(':')
                .map(|b| u8::from_str_radix(b, 16).map_or(b.to_owned(), |b| format!("{b:x}")))
                .collect();
            replace_strings(&mut snapshot, &format!(".{}", short.join(":")), &format!(".<{what}-mac>"));
            replace_strings(&mut status, &mac, &format!("<{what}-mac>"));
        }
    }
    if let Some(host) = host_veth(&side.w.node) {
        replace_strings(&mut snapshot, &host, "<host-veth>");
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

/// DEL (twice: idempotent), then nothing of the pod is left; the bridge stays, as with the
/// reference.
fn delete_and_check(side: &Side) {
    side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
    side.w.assert_nothing_left(&[&side.pod]);
    side.w.del("c1", &side.pod, (NS, POD)).expect_ok();
    assert!(side.w.node.has_link(BRIDGE), "DEL leaves the bridge, as the reference does");
    assert_eq!(host_veth(&side.w.node), None, "the bridge has no port left");
}

/// ADD on both sides, compare, CHECK the native side, DEL on both sides, nothing left.
fn compare_with_reference(case: Case) -> Side {
    let native = attach(true, &case);
    let reference = attach(false, &case);
    let (native_snapshot, native_status) = masked(&native, &case);
    let (reference_snapshot, reference_status) = masked(&reference, &case);
    let mut differences = Vec::new();
    differences_between(&native_snapshot, &reference_snapshot, "", &mut differences);
    differences_between(&native_status, &reference_status, "network-status", &mut differences);
    assert!(
        differences.is_empty(),
        "{case:?}: native differs from reference:\n{}\nnative: {native_snapshot:#}",
        differences.join("\n")
    );
    let log = native.w.agent_log();
    assert!(log.lines().any(|l| l.contains("run natively:") && l.contains("bridge")), "{log}");
    let check = native.w.cni("CHECK", "c1", &native.pod, (NS, POD));
    assert!(check.ok(), "CHECK after a native ADD: {} {}", check.stdout, check.stderr);
    delete_and_check(&reference);
    native
}

#[test]
fn kernel_a_gateway_bridge_with_host_local_matches_the_reference() {
    let native = compare_with_reference(case(json!({"isGateway": true}), Addressing::HostLocal));
    assert_eq!(native.w.node.addresses(BRIDGE), ["10.30.0.1/24"]);
    delete_and_check(&native);
}

#[test]
fn kernel_a_default_gateway_dual_stack_with_mtu_hairpin_and_a_mac_matches_the_reference() {
    let mut case = case(
        json!({"isDefaultGateway": true, "mtu": 1400, "hairpinMode": true}),
        Addressing::Static { dual_stack: true },
    );
    case.mac = Some("0a:58:0a:28:00:05");
    let native = compare_with_reference(case);
    assert_eq!(native.status["mac"], "0a:58:0a:28:00:05");
    assert_eq!(native.snapshot["pod"]["link"][0]["mtu"], 1400);
    assert_eq!(native.snapshot["node"]["port"][0]["linkinfo"]["info_slave_data"]["hairpin"], true);
    assert_eq!(native.pod.default_routes(), ["net1 10.40.0.1", "net1 fd40::1"]);
    delete_and_check(&native);
}

#[test]
fn kernel_a_promiscuous_layer_2_bridge_matches_the_reference() {
    let native = compare_with_reference(case(json!({"promiscMode": true}), Addressing::None));
    let bridge = &native.snapshot["node"]["bridge"][0];
    assert!(bridge["flags"].as_array().unwrap().contains(&json!("PROMISC")), "{bridge}");
    delete_and_check(&native);
}

#[test]
fn kernel_enabledad_with_ipv6_and_no_gateway_matches_the_reference() {
    let native =
        compare_with_reference(case(json!({"enabledad": true}), Addressing::Static { dual_stack: true }));
    assert_eq!(native.snapshot["pod"]["accept_dad"], "1");
    delete_and_check(&native);
}

#[test]
fn kernel_force_address_replaces_the_bridges_address_as_the_reference_does() {
    let mut case = case(json!({"isGateway": true, "forceAddress": true}), Addressing::HostLocal);
    case.bridge_address = Some("10.99.0.1/24");
    let native = compare_with_reference(case);
    assert_eq!(native.w.node.addresses(BRIDGE), ["10.30.0.1/24"]);
    delete_and_check(&native);
}

fn native_side(case: &Case) -> Side {
    attach(true, case)
}

#[test]
fn kernel_disable_container_interface_leaves_the_pods_end_down() {
    let side = native_side(&case(json!({"disableContainerInterface": true}), Addressing::None));
    let link = &side.snapshot["pod"]["link"][0];
    assert!(!link["flags"].as_array().unwrap().contains(&json!("UP")), "{link}");
    assert_eq!(side.snapshot["node"]["port"][0]["master"], BRIDGE);
    delete_and_check(&side);
}

#[test]
fn kernel_check_fails_when_the_bridge_or_the_pod_changed_behind_its_back() {
    let side = native_side(&case(json!({"isGateway": true}), Addressing::Static { dual_stack: false }));
    side.w.node.ip(&["link", "set", BRIDGE, "promisc", "on"]);
    let check = side.w.cni("CHECK", "c1", &side.pod, (NS, POD));
    assert!(
        check.msg().contains("configured Promisc Mode false doesn't match current state: true"),
        "{}",
        check.stdout
    );
    side.w.node.ip(&["link", "set", BRIDGE, "promisc", "off"]);
    assert!(side.w.cni("CHECK", "c1", &side.pod, (NS, POD)).ok());

    side.pod.ip(&["addr", "del", "10.40.0.5/24", "dev", "net1"]);
    let check = side.w.cni("CHECK", "c1", &side.pod, (NS, POD));
    assert!(
        check.msg().contains("10.40.0.5/24") && check.msg().contains("not on the interface"),
        "{}",
        check.stdout
    );
    delete_and_check(&side);
}

#[track_caller]
fn assert_fails_with(out: &CniOutput, code: u64, needles: &[&str]) {
    assert!(!out.ok(), "expected failure, got {}", out.stdout);
    assert_eq!(out.code(), Some(code), "{} {}", out.stdout, out.stderr);
    for needle in needles {
        assert!(out.msg().contains(needle), "{needle:?} missing from: {}", out.msg());
    }
}

/// ADD of `case` on a native world fails with `code` and `needles`, leaving nothing behind.
fn refused(case: &Case, code: u64, needles: &[&str]) -> World {
    let w = world(true, case);
    let pod = Netns::new("pxbr");
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, code, needles);
    w.assert_nothing_left(&[&pod]);
    w
}

#[test]
fn kernel_bad_configs_fail_with_code_7_and_leave_nothing() {
    refused(&case(json!({"hairpinMode": true, "promiscMode": true}), Addressing::None), 7, &["drop one of"]);
    refused(
        &case(json!({"disableContainerInterface": true}), Addressing::HostLocal),
        7,
        &["cannot use IPAM when DisableContainerInterface"],
    );
    let w = refused(
        &case(json!({"bridge": "lo"}), Addressing::HostLocal),
        7,
        &["already exists but is not a bridge"],
    );
    drop(w);
}

#[test]
fn kernel_a_bridge_address_in_the_way_fails_without_force_address_and_leaves_nothing() {
    let mut case = case(json!({"isGateway": true}), Addressing::HostLocal);
    case.bridge_address = Some("10.99.0.1/24");
    let w = refused(&case, 7, &["already has an IP address different from 10.30.0.1/24", "forceAddress"]);
    assert_eq!(w.node.addresses(BRIDGE), ["10.99.0.1/24"], "the bridge keeps its address");
}

#[test]
fn kernel_a_layer_2_network_at_cni_0_2_0_fails_with_code_1_and_leaves_nothing() {
    // 0.2.0 results are IP addresses only: a bridge without IPAM has nothing to say in them.
    let mut w = World::new();
    let config = json!({"cniVersion": "0.2.0", "name": NAD, "type": "bridge", "bridge": BRIDGE});
    w.write_nad(NS, NAD, Some(&config.to_string()));
    w.write_pod(NS, POD, Some(NAD));
    w.start_agent();
    let pod = Netns::new("pxbr");
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 1, &["use cniVersion 0.3.0 or later"]);
    w.assert_nothing_left(&[&pod]);
    assert_eq!(host_veth(&w.node), None, "the pair is gone");
}

#[test]
fn kernel_an_interface_name_taken_in_the_pod_fails_and_leaves_the_other_interface_alone() {
    let w = world(true, &case(json!({}), Addressing::HostLocal));
    let pod = Netns::new("pxbr");
    pod.ip(&["link", "add", "net1", "type", "veth", "peer", "name", "other1"]);
    let out = w.add("c1", &pod, (NS, POD));
    assert_fails_with(&out, 7, &["net1 is taken", "another interface name"]);
    assert!(pod.link_names().contains(&"net1".to_owned()), "the pod's own net1 must survive the undo");
    pod.ip(&["link", "del", "net1"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_config_with_the_iptables_masquerading_backend_is_handed_to_the_reference_binary() {
    let case =
        case(json!({"isGateway": true, "ipMasq": true, "ipMasqBackend": "iptables"}), Addressing::HostLocal);
    let w = world(true, &case);
    let pod = Netns::new("pxbr");
    let out = w.add("c1", &pod, (NS, POD));
    assert!(out.ok(), "ADD through the reference: {} {}", out.stdout, out.stderr);
    let (_, rules) = w.node.exec(&["iptables", "-t", "nat", "-S", "POSTROUTING"]);
    assert!(rules.contains("10.30.0."), "the reference's masquerading rule: {rules}");
    w.del("c1", &pod, (NS, POD)).expect_ok();
    w.assert_nothing_left(&[&pod]);
    assert_eq!(w.agent_log().matches("asks for ipMasqBackend \"iptables\"").count(), 1, "{}", w.agent_log());
}

#[test]
fn kernel_vlan_configs_are_handed_to_the_reference_binary() {
    // The reference's own words, which the native plugin would not say: the reference ran.
    let w = refused(
        &case(json!({"vlan": 5000}), Addressing::None),
        999,
        &["invalid VLAN ID 5000 (must be between 0 and 4094)"],
    );
    let log = w.agent_log();
    assert!(
        log.lines().any(|l| l.contains("run natively:") && l.contains("bridge")),
        "bridge stays native: {log}"
    );
    assert_eq!(w.agent_log().matches("asks for VLANs (vlan, vlanTrunk)").count(), 1, "{}", w.agent_log());
    // This kernel has no bridge VLAN filtering: the reference fails to make the bridge.
    refused(
        &case(json!({"vlan": 100, "isGateway": true}), Addressing::HostLocal),
        999,
        &["operation not supported"],
    );
}

/// An empty plugin directory: nothing can be exec'd.
fn no_plugins(w: &World) -> std::path::PathBuf {
    let dir = w.path("no-plugins");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn kernel_the_default_network_and_bridge_attachments_run_without_any_plugin_binary() {
    // The world's default network is a bridge (cni0, gateway, host-local) that masquerades, as
    // the usual default network does; the attachment another bridge with host-local and a MAC
    // spoof check. Nothing can be exec'd: the plugin directory is empty.
    let mut w = World::new();
    w.cni_bin_dir = no_plugins(&w);
    let mut default: Value =
        serde_json::from_str(&w.bridge_config("cluster", "cni0", "10.88.0.0/24", true)).unwrap();
    default["plugins"][0]["ipMasq"] = json!(true);
    w.write_default_network("10-cluster.conflist", &default.to_string());
    let attachment = case(json!({"isGateway": true, "macspoofchk": true}), Addressing::HostLocal);
    w.write_nad(NS, NAD, Some(&nad_config(&w, &attachment)));
    w.write_pod(NS, POD, Some(&annotation(&attachment)));
    w.start_agent();
    let pod = Netns::new("pxbr");
    let out = w.add("c1", &pod, (NS, POD));
    assert!(out.ok(), "ADD: {} {}\n{}", out.stdout, out.stderr, w.agent_log());
    assert_eq!(pod.addresses("eth0").len(), 1, "the default network's address");
    assert_eq!(pod.addresses("net1"), ["10.30.0.2/24"]);
    assert_eq!(w.nft_chains().len(), 2, "eth0's masquerading, net1's spoof check: {:?}", w.nft_chains());
    assert!(w.cni("CHECK", "c1", &pod, (NS, POD)).ok());
    w.del("c1", &pod, (NS, POD)).expect_ok();
    w.assert_nothing_left(&[&pod]);

    // What goes to the reference does need the binary, which proves the rest did not.
    let w2 = {
        let mut w2 = World::new();
        w2.cni_bin_dir = no_plugins(&w2);
        let case = case(json!({"ipMasq": true, "ipMasqBackend": "iptables"}), Addressing::HostLocal);
        w2.write_nad(NS, NAD, Some(&nad_config(&w2, &case)));
        w2.write_pod(NS, POD, Some(&annotation(&case)));
        w2.start_agent();
        w2
    };
    let pod = Netns::new("pxbr");
    let out = w2.add("c1", &pod, (NS, POD));
    assert!(!out.ok() && out.msg().contains("bridge"), "{}", out.stdout);
    w2.assert_nothing_left(&[&pod]);
}
