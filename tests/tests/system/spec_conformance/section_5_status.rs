//! Section 5. Network attachment status annotation.

use plexus_agent::cni::result::CniResult;
use plexus_agent::spec::status::{network_status, StatusInput};
use plexus_agent::spec::NETWORK_STATUS_ANNOTATION;
use plexus_tests::{Netns, World};
use serde_json::{json, Value};

use super::support::{bridge_list, bridge_text, mac_of, pod_links, statuses, POD};

/// The DNS settings of the "blue" network, which the bridge plugin returns in its result.
fn blue_dns() -> Value {
    json!({"nameservers": ["10.10.1.53"], "domain": "blue.example", "search": ["blue.example", "example"]})
}

/// The addresses of a pod's interface as network-status lists them: bare, without prefix
/// length, as the NetworkAttachmentDefinition client library (and Multus) write them.
fn bare_addresses(pod: &Netns, ifname: &str) -> Value {
    json!(pod.addresses(ifname).iter().map(|a| a.split('/').next().unwrap_or(a)).collect::<Vec<_>>())
}

/// A pod with the default network and two selected ones, for the status tests.
struct StatusPod {
    w: World,
    pod: Netns,
    st: Vec<Value>,
}

impl StatusPod {
    fn new(annotation: &str) -> Self {
        StatusPod::with_agent_args(annotation, &[])
    }

    fn with_agent_args(annotation: &str, args: &[&str]) -> Self {
        let mut w = World::new();
        w.agent_args.extend(args.iter().map(|a| a.to_string()));
        let mut blue = bridge_list(&w, "blue", "br-blue", "10.10.1.0/24", &[]);
        blue["plugins"][0]["dns"] = blue_dns();
        w.write_nad("default", "blue", Some(&blue.to_string()));
        w.write_nad("default", "red", Some(&bridge_text(&w, "red", "br-red", "10.10.2.0/24", &[])));
        w.write_pod("default", "p", Some(annotation));
        w.start_agent();
        let pod = Netns::new("pxpod");
        w.add("c1", &pod, POD).expect_ok();
        let st = statuses(&w, "default", "p");
        StatusPod { w, pod, st }
    }

    fn finish(self) {
        self.w.del("c1", &self.pod, POD).expect_ok();
        self.w.assert_nothing_left(&[&self.pod]);
    }
}

#[test]
fn kernel_spec_5_status_annotation_is_a_json_list_of_maps() {
    assert_eq!(NETWORK_STATUS_ANNOTATION, "k8s.v1.cni.cncf.io/network-status");
    let p = StatusPod::new("blue,red");
    let path = p.w.path("state").join("pods/default/p.network-status.json");
    let value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let list = value.as_array().expect("a JSON list");
    assert_eq!(list.len(), 3, "one map per attachment: {value}");
    assert!(list.iter().all(Value::is_object), "{value}");
    p.finish();
}

/// The bridge plugin's result lists the bridge and the host veth before the pod's
/// interface: the status describes the pod's. The pure function, given a result with two
/// sandbox interfaces, takes the first.
#[test]
fn kernel_spec_5_1_1_status_from_first_sandbox_interface() {
    let p = StatusPod::new("blue");
    let blue = &p.st[1];
    assert_eq!(blue["interface"], "net1");
    assert_eq!(blue["mac"], mac_of(&p.pod, "net1"));
    assert_eq!(blue["ips"], bare_addresses(&p.pod, "net1"));
    p.finish();

    let result = CniResult::parse(
        &json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "br-x", "mac": "02:00:00:00:00:01"},
                {"name": "veth0", "mac": "02:00:00:00:00:02"},
                {"name": "net1", "mac": "02:00:00:00:00:03", "sandbox": "/run/netns/p"},
                {"name": "net9", "mac": "02:00:00:00:00:04", "sandbox": "/run/netns/p"}
            ],
            "ips": [
                {"address": "10.0.0.1/24", "interface": 0},
                {"address": "10.0.0.5/24", "interface": 2},
                {"address": "10.9.0.5/24", "interface": 3}
            ]
        }),
        "1.0.0",
    )
    .unwrap();
    let st = network_status(StatusInput {
        name: "default/x",
        ifname: "net5",
        result: Some(&result),
        is_default: false,
        default_route: None,
        gateways: &[],
        device_info: None,
    });
    assert_eq!(
        (st.interface.as_deref(), st.mac.as_deref(), st.ips.as_slice()),
        (Some("net1"), Some("02:00:00:00:00:03"), ["10.0.0.5".to_owned()].as_slice())
    );
}

#[test]
fn kernel_spec_5_2_default_network_entry() {
    let p = StatusPod::new("blue");
    let defaults: Vec<&Value> = p.st.iter().filter(|s| s["default"] == true).collect();
    assert_eq!(defaults.len(), 1, "{:?}", p.st);
    assert_eq!(defaults[0]["name"], "cluster");
    assert_eq!(defaults[0]["interface"], "eth0");
    assert_eq!(defaults[0]["ips"], bare_addresses(&p.pod, "eth0"));
    p.finish();
}

/// Every status key is one the spec defines, one of the NetworkAttachmentDefinition client
/// library's `NetworkStatus` type (`mtu`, `gateway`: what Multus writes and readers parse),
/// or a reverse domain name.
#[test]
fn kernel_spec_5_3_status_keys_are_standard() {
    let p = StatusPod::new(r#"[{"name": "blue", "default-route": ["10.10.1.1"]}, {"name": "red"}]"#);
    let defined = ["name", "interface", "ips", "mac", "default", "dns", "default-route", "mtu", "gateway"];
    for s in &p.st {
        for key in s.as_object().unwrap().keys() {
            assert!(defined.contains(&key.as_str()) || key.contains('.'), "key {key:?} in {s}");
        }
        if let Some(dns) = s.get("dns") {
            for key in dns.as_object().unwrap().keys() {
                assert!(
                    ["nameservers", "domain", "search"].contains(&key.as_str()) || key.contains('.'),
                    "{dns}"
                );
            }
        }
    }
    p.finish();
}

#[test]
fn kernel_spec_5_3_1_status_name() {
    let p = StatusPod::new("blue,default/red");
    let names: Vec<&Value> = p.st.iter().map(|s| &s["name"]).collect();
    assert_eq!(names, [&json!("cluster"), &json!("default/blue"), &json!("default/red")]);
    p.finish();
}

#[test]
fn kernel_spec_5_3_2_status_interface_is_in_the_pod() {
    let p = StatusPod::new(r#"[{"name": "blue", "interface": "data0"}, {"name": "red"}]"#);
    let links = pod_links(&p.pod);
    let ifnames: Vec<&str> = p.st.iter().map(|s| s["interface"].as_str().unwrap()).collect();
    assert_eq!(ifnames, ["eth0", "data0", "net1"]);
    assert!(ifnames.iter().all(|i| links.contains(&i.to_string())), "{ifnames:?} vs {links:?}");
    p.finish();
}

#[test]
fn kernel_spec_5_3_3_status_ips_are_pod_addresses() {
    let p = StatusPod::new("blue,red");
    for s in &p.st {
        let ifname = s["interface"].as_str().unwrap();
        assert_eq!(s["ips"], bare_addresses(&p.pod, ifname), "{s}");
    }
    // Not the bridge's (gateway) address the bridge plugin also reports.
    assert!(!p.st[1]["ips"].as_array().unwrap().contains(&json!("10.10.1.1")), "{}", p.st[1]);
    p.finish();
}

#[test]
fn kernel_spec_5_3_4_status_mac_is_the_interface_address() {
    let p = StatusPod::new("blue,red");
    for s in &p.st {
        let ifname = s["interface"].as_str().expect("\"mac\" present needs \"interface\"");
        assert_eq!(s["mac"], mac_of(&p.pod, ifname), "{s}");
    }
    p.finish();
}

#[test]
fn kernel_spec_5_3_5_exactly_one_default_entry() {
    let p = StatusPod::new("blue,red,blue");
    assert_eq!(p.st.len(), 4);
    assert!(p.st.iter().all(|s| s["default"].is_boolean()), "'default' is required: {:?}", p.st);
    assert_eq!(p.st.iter().filter(|s| s["default"] == true).count(), 1);
    p.finish();
}

/// The bridge plugin returns the config's "dns" in its result; the status carries it.
#[test]
fn kernel_spec_5_3_6_status_dns_from_result() {
    let p = StatusPod::new("blue,red");
    assert_eq!(p.st[1]["dns"], blue_dns());
    assert!(p.st[2].get("dns").is_none(), "no DNS in the result, none in the status: {}", p.st[2]);
    p.finish();
}

#[test]
fn kernel_spec_5_3_6_4_status_default_route() {
    let p = StatusPod::new(r#"[{"name": "blue", "default-route": ["10.10.1.1"]}, {"name": "red"}]"#);
    assert_eq!(p.st[1]["default-route"], json!(["10.10.1.1"]));
    assert!(p.st[2].get("default-route").is_none(), "{}", p.st[2]);
    assert!(p.st[0].get("default-route").is_none(), "the default network's is cleared: {}", p.st[0]);
    assert_eq!(p.pod.default_routes(), ["net1 10.10.1.1"]);
    p.finish();
}

/// What readers of network-status parse (the NetworkAttachmentDefinition client library's
/// `NetworkStatus`, KubeVirt): `ips` plain addresses. The spec's own example (5.4) shows
/// prefix lengths; plexus writes what the readers and Multus use. And only the keys spec 5.3
/// defines: keys without a period are reserved to the spec, so Multus's `mtu` and `gateway`
/// are written only with `--network-status-multus-keys` (there `mtu` is the link's, `gateway`
/// plain addresses).
#[test]
fn kernel_spec_5_3_3_status_is_what_the_client_library_writes() {
    const SPEC_KEYS: [&str; 8] =
        ["name", "interface", "ips", "mac", "default", "dns", "default-route", "device-info"];
    let p = StatusPod::new("blue,red");
    for s in &p.st {
        let keys: Vec<&String> = s.as_object().expect("a map").keys().collect();
        assert!(keys.iter().all(|k| SPEC_KEYS.contains(&k.as_str())), "a key the spec reserves: {s}");
        for ip in s["ips"].as_array().expect("ips") {
            let text = ip.as_str().expect("a string");
            assert!(text.parse::<std::net::IpAddr>().is_ok(), "{text:?} is not a plain IP address: {s}");
        }
    }
    p.finish();
    let p = StatusPod::with_agent_args(
        r#"[{"name": "blue", "default-route": ["10.10.1.1"]}, {"name": "red"}]"#,
        &["--network-status-multus-keys"],
    );
    assert_eq!(p.st[1]["gateway"], json!(["10.10.1.1"]), "Multus's gateway: the default route's");
    for s in &p.st {
        let keys: Vec<&String> = s.as_object().expect("a map").keys().collect();
        let allowed = |k: &str| SPEC_KEYS.contains(&k) || ["mtu", "gateway"].contains(&k);
        assert!(keys.iter().all(|k| allowed(k)), "{s}");
        let ifname = s["interface"].as_str().unwrap();
        let link_mtu = p.pod.links().into_iter().find(|l| l["ifname"] == ifname).unwrap()["mtu"].clone();
        if let Some(mtu) = s.get("mtu") {
            assert_eq!(*mtu, link_mtu, "{s}");
        }
        for gw in s.get("gateway").and_then(Value::as_array).into_iter().flatten() {
            assert!(gw.as_str().is_some_and(|g| g.parse::<std::net::IpAddr>().is_ok()), "{s}");
        }
    }
    p.finish();
}
