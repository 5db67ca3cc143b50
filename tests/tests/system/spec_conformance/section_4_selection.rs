//! Section 4. Network attachment selection annotation.

use plexus_agent::cni::config::NetworkConfigList;
use plexus_agent::spec::delegate_conf::secondary_delegate;
use plexus_agent::spec::selection::parse_selection;
use plexus_agent::spec::NETWORKS_ANNOTATION;
use plexus_tests::{status_of, Netns, Recorder, World};
use serde_json::{json, Value};

use super::support::{
    address_in, all_caps_network, assert_add_refused, assert_annotations_ignored, bridge_list, bridge_text,
    mac_of, pod_links, statuses, write_manifest, POD,
};

/// Only the annotation named k8s.v1.cni.cncf.io/networks selects networks.
#[test]
fn kernel_spec_4_1_annotation_name() {
    assert_eq!(NETWORKS_ANNOTATION, "k8s.v1.cni.cncf.io/networks");
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[])));
    write_manifest(
        &w,
        "pods",
        "default_other.json",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "default",
                "annotations": {"k8s.v1.cni.cncf.io/network": "blue", "networks": "blue"}}}),
    );
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let (a, b) = (Netns::new("pxpod"), Netns::new("pxpod"));
    w.add("c1", &a, ("default", "other")).expect_ok();
    assert_eq!(pod_links(&a), ["eth0"], "other annotation names select nothing");
    w.add("c2", &b, POD).expect_ok();
    assert_eq!(pod_links(&b), ["eth0", "net1"]);
    w.del("c1", &a, ("default", "other")).expect_ok();
    w.del("c2", &b, POD).expect_ok();
    w.assert_nothing_left(&[&a, &b]);
}

/// `name` references the pod's namespace, `namespace/name` another one.
#[test]
fn kernel_spec_4_1_1_comma_delimited_format() {
    let mut w = World::new();
    w.agent_args.push("--allow-namespace=other-ns".into());
    w.write_nad("my-ns", "net-a", Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[])));
    w.write_nad("my-ns", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[])));
    w.write_nad("other-ns", "net-c", Some(&bridge_text(&w, "net-c", "br-c", "10.10.3.0/24", &[])));
    // A same-named NAD in the pod's namespace must not be picked for other-ns/net-c.
    w.write_nad("my-ns", "net-c", Some(&bridge_text(&w, "wrong-c", "br-wrong", "10.10.9.0/24", &[])));
    w.write_pod("my-ns", "my-pod", Some("net-a,net-b,other-ns/net-c"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, ("my-ns", "my-pod")).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    address_in(&pod, "net2", "10.10.2.");
    address_in(&pod, "net3", "10.10.3.");
    let names: Vec<Value> = statuses(&w, "my-ns", "my-pod").iter().map(|s| s["name"].clone()).collect();
    assert_eq!(
        names,
        [json!("cluster"), json!("my-ns/net-a"), json!("my-ns/net-b"), json!("other-ns/net-c")]
    );
    w.del("c1", &pod, ("my-ns", "my-pod")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// The JSON list format, with "namespace" given, empty (the pod's) and absent.
#[test]
fn kernel_spec_4_1_2_json_list_format() {
    let mut w = World::new();
    w.agent_args.push("--allow-namespace=other-ns".into());
    w.write_nad("my-ns", "net-a", Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[])));
    w.write_nad("other-ns", "net-c", Some(&bridge_text(&w, "net-c", "br-c", "10.10.3.0/24", &[])));
    let annotation = r#"
      [
        {"name": "net-a"},
        {"name": "net-c", "namespace": "other-ns"},
        {"name": "net-a", "namespace": ""}
      ]"#;
    w.write_pod("my-ns", "my-pod", Some(annotation));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, ("my-ns", "my-pod")).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    address_in(&pod, "net2", "10.10.3.");
    address_in(&pod, "net3", "10.10.1.");
    let names: Vec<Value> = statuses(&w, "my-ns", "my-pod").iter().map(|s| s["name"].clone()).collect();
    assert_eq!(
        names,
        [json!("cluster"), json!("my-ns/net-a"), json!("other-ns/net-c"), json!("my-ns/net-a")]
    );
    w.del("c1", &pod, ("my-ns", "my-pod")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Keys other implementations write (reverse domain names) do not invalidate the annotation.
#[test]
fn kernel_spec_4_1_2_1_reverse_domain_keys_accepted() {
    let annotation =
        r#"[{"name": "blue", "org.example.plexus-test/key": {"x": 1}, "com.example.flag": true}]"#;
    assert_eq!(parse_selection(annotation).unwrap()[0].name, "blue");
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[])));
    w.write_pod("default", "p", Some(annotation));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_spec_4_1_2_1_1_name_is_required() {
    assert_annotations_ignored(&[
        (r#"[{"namespace": "default"}]"#, "has no \"name\""),
        (r#"[{"name": "net-b"}, {"interface": "net9"}]"#, "has no \"name\""),
        (r#"[{"name": 5}]"#, "\"name\" must be a string"),
        (r#"[{"name": ""}]"#, "not a valid NetworkAttachmentDefinition name"),
    ]);
}

#[test]
fn kernel_spec_4_1_2_1_3_invalid_ips_ignore_annotation() {
    for ok in [r#"["10.2.2.42/24", "2001:db8::5/64"]"#, r#"["10.2.2.42"]"#, r#"["2001:db8::5"]"#] {
        let text = format!(r#"[{{"name": "net-b", "ips": {ok}}}]"#);
        assert!(parse_selection(&text).is_ok(), "{text}");
    }
    assert_annotations_ignored(&[
        (r#"[{"name": "net-b", "ips": []}]"#, "at least one address"),
        (r#"[{"name": "net-b", "ips": ["10.2.2.300/24"]}]"#, "not an IPv4 or IPv6"),
        (r#"[{"name": "net-b", "ips": ["10.2.2.42/33"]}]"#, "not an IPv4 or IPv6"),
        (r#"[{"name": "net-b", "ips": ["2001:db8::5/129"]}]"#, "not an IPv4 or IPv6"),
        (r#"[{"name": "net-b", "ips": ["net-b.example.com"]}]"#, "not an IPv4 or IPv6"),
        (r#"[{"name": "net-b", "ips": "10.2.2.42/24"}]"#, "list of strings"),
        // One bad element among valid ones still invalidates the whole annotation.
        (r#"[{"name": "net-c"}, {"name": "net-b", "ips": ["10.2.2.42/24", "x"]}]"#, "not an IPv4 or IPv6"),
    ]);
}

/// The static IPAM plugin, declaring the "ips" capability, assigns exactly the requested
/// addresses: they can only have come from runtimeConfig.
#[test]
fn kernel_spec_4_1_2_1_3_2_ips_passed_in_runtime_config() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let config = json!({
        "cniVersion": "1.0.0", "name": "static-net",
        "plugins": [
            {"type": "bridge", "bridge": "br-st", "capabilities": {"ips": true}, "ipam": {"type": "static"}},
            Recorder::plugin_with("rec", json!({"capabilities": {"ips": true}})),
        ]
    });
    w.write_nad("default", "static-net", Some(&config.to_string()));
    w.write_pod("default", "p", Some(r#"[{"name": "static-net", "ips": ["10.2.2.42/24", "10.2.3.7/24"]}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let mut addrs = pod.addresses("net1");
    addrs.sort();
    assert_eq!(addrs, ["10.2.2.42/24", "10.2.3.7/24"]);
    let add = &rec.calls_of("rec")[0];
    assert_eq!(add.config["runtimeConfig"], json!({"ips": ["10.2.2.42/24", "10.2.3.7/24"]}));
    let mut st_ips: Vec<Value> =
        status_of(&w.network_status("default", "p"), "net1")["ips"].as_array().unwrap().clone();
    st_ips.sort_by_key(|v| v.to_string());
    assert_eq!(st_ips, [json!("10.2.2.42"), json!("10.2.3.7")]);
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// One test body for the four "no plugin has the capability: the request must fail".
#[track_caller]
fn assert_capability_required(annotation: &str, key: &str) {
    let mut w = World::new();
    // Capabilities declared false, or for other keys, do not count.
    let mut config = bridge_list(&w, "net-b", "br-b", "10.10.2.0/24", &[]);
    config["plugins"][0]["capabilities"] = json!({key: false, "org.example.other": true});
    w.write_nad("default", "net-b", Some(&config.to_string()));
    w.write_pod("default", "p", Some(annotation));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    let capability = format!("\"capabilities\": {{\"{key}\": true}}");
    assert_add_refused(&w, &out, &pod, 7, &["default/net-b", &capability]);
    let events = w.events("default", "p");
    assert!(events.contains("NetworkRefused"), "{events}");
}

#[test]
fn kernel_spec_4_1_2_1_3_2_ips_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "ips": ["10.10.2.42/24"]}]"#, "ips");
}

#[test]
fn kernel_spec_4_1_2_1_4_invalid_mac_ignores_annotation() {
    for ok in [
        "02:23:45:67:89:01",
        "02-23-45-67-89-0A",
        "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
    ] {
        let text = format!(r#"[{{"name": "net-b", "mac": "{ok}"}}]"#);
        assert!(parse_selection(&text).is_ok(), "{text}: 6-byte Ethernet and 20-byte InfiniBand are valid");
    }
    let reason = "not a 6-byte Ethernet or 20-byte InfiniBand address";
    assert_annotations_ignored(&[
        (r#"[{"name": "net-b", "mac": "02:23:45:67:89"}]"#, reason),
        (r#"[{"name": "net-b", "mac": "02:23:45:67:89:01:02"}]"#, reason),
        (r#"[{"name": "net-b", "mac": "0g:23:45:67:89:01"}]"#, reason),
        (r#"[{"name": "net-b", "mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11"}]"#, reason),
        (r#"[{"name": "net-b", "mac": 2}]"#, "\"mac\" must be a string"),
    ]);
}

/// tuning, declaring the "mac" capability, sets the requested address on the interface.
#[test]
fn kernel_spec_4_1_2_1_4_2_mac_passed_in_runtime_config() {
    let mut w = World::new();
    let tuning = json!({"type": "tuning", "capabilities": {"mac": true}});
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[tuning])));
    w.write_pod("default", "p", Some(r#"[{"name": "net-b", "mac": "02:23:45:67:89:01"}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(mac_of(&pod, "net1"), "02:23:45:67:89:01");
    assert_ne!(mac_of(&pod, "eth0"), "02:23:45:67:89:01", "the default network is not affected");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_spec_4_1_2_1_4_2_mac_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "mac": "02:23:45:67:89:01"}]"#, "mac");
}

#[test]
fn kernel_spec_4_1_2_1_5_invalid_interface_ignores_annotation() {
    let reason = "not a valid Linux interface name";
    assert_annotations_ignored(&[
        (r#"[{"name": "net-b", "interface": "this-name-is-too-long"}]"#, reason),
        (r#"[{"name": "net-b", "interface": "a/b"}]"#, reason),
        (r#"[{"name": "net-b", "interface": "a b"}]"#, reason),
        (r#"[{"name": "net-b", "interface": "a:b"}]"#, reason),
        (r#"[{"name": "net-b", "interface": ".."}]"#, reason),
        (r#"[{"name": "net-b", "interface": ""}]"#, reason),
        ("net-b@bad/name", reason),
    ]);
}

/// A name a previous attachment (selected or the default network) uses fails the request.
#[test]
fn kernel_spec_4_1_2_1_5_interface_in_use_fails() {
    let mut w = World::new();
    w.write_nad("default", "net-a", Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[])));
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[])));
    w.write_pod(
        "default",
        "p",
        Some(r#"[{"name": "net-a", "interface": "data"}, {"name": "net-b", "interface": "data"}]"#),
    );
    w.write_pod("default", "q", Some(r#"[{"name": "net-a", "interface": "eth0"}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert_add_refused(&w, &out, &pod, 7, &["\"data\"", "default/net-b", "already used"]);
    let out = w.add("c2", &pod, ("default", "q"));
    assert_add_refused(&w, &out, &pod, 7, &["\"eth0\"", "already used"]);
}

/// The delegate runs with CNI_IFNAME set to the requested name, for ADD and DEL alike.
#[test]
fn kernel_spec_4_1_2_1_5_1_interface_sets_cni_ifname() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad(
        "default",
        "net-b",
        Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[Recorder::plugin("b")])),
    );
    w.write_pod("default", "p", Some(r#"[{"name": "net-b", "interface": "data0"}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(pod_links(&pod), ["data0", "eth0"]);
    address_in(&pod, "data0", "10.10.2.");
    assert_eq!(status_of(&w.network_status("default", "p"), "data0")["name"], "default/net-b");
    w.del("c1", &pod, POD).expect_ok();
    let calls = rec.calls_of("b");
    assert_eq!(
        calls.iter().map(|c| (c.command.as_str(), c.ifname.as_str())).collect::<Vec<_>>(),
        [("ADD", "data0"), ("DEL", "data0")]
    );
    w.assert_nothing_left(&[&pod]);
}

/// "cni-args" reach the plugins as CONVENTIONS' args.cni, winning over the config's own
/// args.cni keys, which are otherwise kept.
#[test]
fn kernel_spec_4_1_2_1_6_2_cni_args_override_config_args() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let recorder = Recorder::plugin_with("b", json!({"args": {"cni": {"spoofchk": "off", "keep": "yes"}}}));
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[recorder])));
    w.write_pod("default", "p", Some(r#"[{"name": "net-b", "cni-args": {"spoofchk": "on", "extra": 1}}]"#));
    w.write_pod("default", "q", Some("net-b"));
    w.start_agent();
    let (a, b) = (Netns::new("pxpod"), Netns::new("pxpod"));
    w.add("c1", &a, POD).expect_ok();
    w.add("c2", &b, ("default", "q")).expect_ok();
    let args_of = |cid: &str| {
        rec.calls_of("b").into_iter().find(|c| c.container_id == cid && c.command == "ADD").unwrap().config
            ["args"]
            .clone()
    };
    assert_eq!(args_of("c1"), json!({"cni": {"spoofchk": "on", "keep": "yes", "extra": 1}}));
    assert_eq!(
        args_of("c2"),
        json!({"cni": {"spoofchk": "off", "keep": "yes"}}),
        "without cni-args: the config's"
    );
    w.del("c1", &a, POD).expect_ok();
    w.del("c2", &b, ("default", "q")).expect_ok();
    w.assert_nothing_left(&[&a, &b]);
}

#[test]
fn kernel_spec_4_1_2_1_7_invalid_port_mappings_ignore_annotation() {
    let pm = |m: &str| format!(r#"[{{"name": "net-b", "portMappings": {m}}}]"#);
    let cases = [
        (pm("[]"), "at least one mapping"),
        (pm(r#"{"hostPort": 8080, "containerPort": 80}"#), "must be a list"),
        (pm(r#"[{"hostPort": 0, "containerPort": 80}]"#), "from 1 to 65535"),
        (pm(r#"[{"hostPort": 65536, "containerPort": 80}]"#), "from 1 to 65535"),
        (pm(r#"[{"hostPort": 8080, "containerPort": 0}]"#), "from 1 to 65535"),
        (pm(r#"[{"hostPort": 8080, "containerPort": "80"}]"#), "from 1 to 65535"),
        (pm(r#"[{"containerPort": 80}]"#), "no \"hostPort\""),
        (pm(r#"[{"hostPort": 8080}]"#), "no \"containerPort\""),
        (pm(r#"[{"hostPort": 8080, "containerPort": 80, "protocol": "icmp"}]"#), "TCP, UDP or SCTP"),
    ];
    let cases: Vec<(&str, &str)> = cases.iter().map(|(t, r)| (t.as_str(), *r)).collect();
    assert_annotations_ignored(&cases);
}

/// Ports 1 and 65535 are valid, the protocol is case-insensitive and defaults to TCP.
#[test]
fn spec_4_1_2_1_7_port_mapping_values() {
    let sel = parse_selection(
        r#"[{"name": "n", "portMappings": [
            {"hostPort": 1, "containerPort": 65535},
            {"hostPort": 65535, "containerPort": 1, "protocol": "Udp"},
            {"hostPort": 8080, "containerPort": 80, "protocol": "sctp"},
            {"hostPort": 8443, "containerPort": 443, "protocol": "TCP"}]}]"#,
    )
    .unwrap();
    let list = NetworkConfigList::parse(
        r#"{"cniVersion": "1.0.0", "name": "n",
            "plugins": [{"type": "portmap", "capabilities": {"portMappings": true}}]}"#,
        None,
    )
    .unwrap();
    let d = secondary_delegate("default/n", list, &sel[0]).unwrap();
    assert_eq!(
        d.runtime_config["portMappings"],
        json!([
            {"hostPort": 1, "containerPort": 65535, "protocol": "tcp"},
            {"hostPort": 65535, "containerPort": 1, "protocol": "udp"},
            {"hostPort": 8080, "containerPort": 80, "protocol": "sctp"},
            {"hostPort": 8443, "containerPort": 443, "protocol": "tcp"}
        ])
    );
}

/// The reference portmap plugin, declaring the capability, installs the requested DNAT;
/// a recorder declaring it too sees the CONVENTIONS form.
#[test]
fn kernel_spec_4_1_2_1_7_2_port_mappings_passed_in_runtime_config() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let more = [
        json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        Recorder::plugin_with("pm", json!({"capabilities": {"portMappings": true}})),
        Recorder::plugin("no-caps"),
    ];
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &more)));
    let annotation = r#"[{"name": "net-b",
        "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}]}]"#;
    w.write_pod("default", "p", Some(annotation));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let ip = address_in(&pod, "net1", "10.10.2.");
    let ip = ip.split('/').next().unwrap();
    let (ok, nat) = w.node.exec(&["iptables-save", "-t", "nat"]);
    assert!(ok, "{nat}");
    assert!(
        nat.lines().any(|l| l.contains("--dport 8080") && l.contains(&format!("--to-destination {ip}:80"))),
        "no DNAT 8080 -> {ip}:80 in:\n{nat}"
    );
    let pm = &rec.calls_of("pm")[0];
    assert_eq!(
        pm.config["runtimeConfig"],
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    );
    assert!(
        rec.calls_of("no-caps")[0].config.get("runtimeConfig").is_none(),
        "only plugins declaring the capability"
    );
    w.del("c1", &pod, POD).expect_ok();
    let (_, nat) = w.node.exec(&["iptables-save", "-t", "nat"]);
    assert!(!nat.contains("--dport 8080"), "DEL removes the mapping:\n{nat}");
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_spec_4_1_2_1_7_2_port_mappings_without_capability_fails() {
    assert_capability_required(
        r#"[{"name": "net-b", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}]"#,
        "portMappings",
    );
}

#[test]
fn kernel_spec_4_1_2_1_8_invalid_bandwidth_ignores_annotation() {
    let bw = |b: &str| format!(r#"[{{"name": "net-b", "bandwidth": {b}}}]"#);
    let cases = [
        (bw("{}"), "at least one of"),
        (bw("[]"), "must be an object"),
        (bw(r#"{"ingressRate": 0}"#), "non-zero"),
        (bw(r#"{"egressRate": -5}"#), "non-zero"),
        (bw(r#"{"egressRate": 1000, "egressBurst": 0}"#), "non-zero"),
        (bw(r#"{"ingressRate": "1000"}"#), "non-zero integer"),
        (bw(r#"{"ingressBurst": 300}"#), "without ingressRate"),
        (bw(r#"{"egressRate": 1000, "ingressBurst": 300}"#), "without ingressRate"),
        (bw(r#"{"egressBurst": 300}"#), "without egressRate"),
        (bw(r#"{"rate": 1000}"#), "unknown"),
    ];
    let cases: Vec<(&str, &str)> = cases.iter().map(|(t, r)| (t.as_str(), *r)).collect();
    assert_annotations_ignored(&cases);
}

/// The reference bandwidth plugin, declaring the capability, shapes the pod's traffic.
#[test]
fn kernel_spec_4_1_2_1_8_2_bandwidth_passed_in_runtime_config() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let more = [
        json!({"type": "bandwidth", "capabilities": {"bandwidth": true}}),
        Recorder::plugin_with("bw", json!({"capabilities": {"bandwidth": true}})),
    ];
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &more)));
    let annotation = r#"[{"name": "net-b", "bandwidth":
        {"ingressRate": 1000000, "ingressBurst": 200000, "egressRate": 2000000, "egressBurst": 300000}}]"#;
    w.write_pod("default", "p", Some(annotation));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(
        rec.calls_of("bw")[0].config["runtimeConfig"],
        json!({"bandwidth": {
            "ingressRate": 1000000, "ingressBurst": 200000, "egressRate": 2000000, "egressBurst": 300000
        }})
    );
    let (ok, qdiscs) = w.node.exec(&["tc", "qdisc", "show"]);
    assert!(ok, "{qdiscs}");
    assert!(
        qdiscs.contains("tbf") && qdiscs.contains("rate 1Mbit") && qdiscs.contains("rate 2Mbit"),
        "{qdiscs}"
    );
    w.del("c1", &pod, POD).expect_ok();
    let (_, qdiscs) = w.node.exec(&["tc", "qdisc", "show"]);
    assert!(!qdiscs.contains("tbf"), "DEL removes the shaping:\n{qdiscs}");
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_spec_4_1_2_1_8_2_bandwidth_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "bandwidth": {"egressRate": 1000000}}]"#, "bandwidth");
}

#[test]
fn kernel_spec_4_1_2_1_9_default_route_on_two_networks_ignores_annotation() {
    assert!(parse_selection(r#"[{"name": "net-b", "default-route": []}]"#).is_ok(), "the list may be empty");
    assert_annotations_ignored(&[
        (
            r#"[{"name": "net-b", "default-route": ["10.10.7.1"]},
                {"name": "net-c", "default-route": ["10.10.7.1"]}]"#,
            "only one network",
        ),
        (
            r#"[{"name": "net-b", "default-route": []}, {"name": "net-c", "default-route": []}]"#,
            "only one network",
        ),
        (r#"[{"name": "net-b", "default-route": ["gateway"]}]"#, "not an IP address"),
        (r#"[{"name": "net-b", "default-route": "10.10.7.1"}]"#, "list of gateway"),
    ]);
}

/// The default network installs a default route; "default-route" on a selected network
/// moves it there (and clears the default network's).
#[test]
fn kernel_spec_4_1_2_1_9_default_route_moves_to_selected_network() {
    let mut w = World::new();
    let mut default = bridge_list(&w, "cluster", "cni0", "10.88.0.0/24", &[]);
    default["plugins"][0]["ipam"]["routes"] = json!([{"dst": "0.0.0.0/0"}]);
    w.write_default_network("10-cluster.conflist", &default.to_string());
    w.write_nad("default", "net-b", Some(&bridge_text(&w, "net-b", "br-b", "10.10.2.0/24", &[])));
    w.write_pod("default", "plain", Some("net-b"));
    w.write_pod("default", "p", Some(r#"[{"name": "net-b", "default-route": ["10.10.2.1"]}]"#));
    w.start_agent();
    let (a, b) = (Netns::new("pxpod"), Netns::new("pxpod"));
    w.add("c1", &a, ("default", "plain")).expect_ok();
    assert_eq!(a.default_routes(), ["eth0 10.88.0.1"], "without the key: the default network's");
    w.add("c2", &b, POD).expect_ok();
    assert_eq!(b.default_routes(), ["net1 10.10.2.1"]);
    assert!(b.ping("10.10.2.1"), "the gateway is reachable");
    w.del("c1", &a, ("default", "plain")).expect_ok();
    w.del("c2", &b, POD).expect_ok();
    w.assert_nothing_left(&[&a, &b]);
}

/// plexus's option: with --strict-annotations an invalid annotation fails the ADD with
/// the reason, instead of being ignored.
#[test]
fn kernel_spec_4_1_2_invalid_annotation_fails_in_strict_mode() {
    let mut w = World::new();
    w.agent_args.push("--strict-annotations".into());
    w.write_nad("default", "net-b", Some(&all_caps_network(&w, "net-b")));
    w.write_pod("default", "p", Some(r#"[{"name": "net-b", "mac": "02:23:45:67:89"}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert_add_refused(&w, &out, &pod, 7, &["\"mac\"", "6-byte Ethernet"]);
}

/// "net-a,net-a": two attachments, each its own delegate operation and status entry.
#[test]
fn kernel_spec_4_2_same_network_twice_is_two_attachments() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad(
        "default",
        "net-a",
        Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[Recorder::plugin("a")])),
    );
    w.write_pod("default", "p", Some("net-a,net-a"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let one = address_in(&pod, "net1", "10.10.1.");
    let two = address_in(&pod, "net2", "10.10.1.");
    assert_ne!(one, two);
    assert_eq!(rec.calls_of("a").iter().filter(|c| c.command == "ADD").count(), 2);
    let st = statuses(&w, "default", "p");
    let entries: Vec<&Value> = st.iter().filter(|s| s["name"] == "default/net-a").collect();
    assert_eq!(entries.len(), 2, "{st:?}");
    let bare = |a: &str| a.split('/').next().unwrap_or_default().to_owned();
    assert_eq!(entries[0]["ips"], json!([bare(&one)]));
    assert_eq!(entries[1]["ips"], json!([bare(&two)]));
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// ADD and DEL of each attachment run with the same [container ID, network name,
/// CNI_IFNAME], also when the DEL comes from a restarted agent.
#[test]
fn kernel_spec_4_2_1_operations_use_the_same_tuple() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad(
        "default",
        "net-a",
        Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[Recorder::plugin("a")])),
    );
    w.write_pod("default", "p", Some("net-a,net-a"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    w.kill_agent();
    w.start_agent();
    w.del("c1", &pod, POD).expect_ok();
    let tuples = |cmd: &str| {
        let mut v: Vec<(String, String, String)> = rec
            .calls_of("a")
            .into_iter()
            .filter(|c| c.command == cmd)
            .map(|c| (c.container_id, c.config["name"].as_str().unwrap_or_default().to_owned(), c.ifname))
            .collect();
        v.sort();
        v
    };
    let adds = tuples("ADD");
    assert_eq!(adds.len(), 2);
    assert_eq!(adds[0].1, "net-a");
    assert_eq!(adds, tuples("DEL"));
    w.assert_nothing_left(&[&pod]);
}

/// Generated names never collide with each other or with requested ones.
#[test]
fn kernel_spec_4_2_1_generated_ifnames_are_unique() {
    let mut w = World::new();
    w.write_nad("default", "net-a", Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[])));
    w.write_pod(
        "default",
        "p",
        Some(
            r#"[{"name": "net-a"}, {"name": "net-a", "interface": "net1"},
                {"name": "net-a"}, {"name": "net-a", "interface": "net3"}]"#,
        ),
    );
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(pod_links(&pod), ["eth0", "net1", "net2", "net3", "net4"]);
    let st = statuses(&w, "default", "p");
    let ifnames: Vec<&str> = st.iter().skip(1).map(|s| s["interface"].as_str().unwrap()).collect();
    assert_eq!(ifnames, ["net2", "net1", "net4", "net3"]);
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}
