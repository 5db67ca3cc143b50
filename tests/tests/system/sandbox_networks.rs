//! Sandboxes that name their networks (the CRI network API proposal): the runtime passes the
//! sandbox's `PodSandboxNetworkConfig` list to plexus as `runtimeConfig.podSandboxNetworks`,
//! and the pod gets exactly those networks, in order, the first in the place of the cluster
//! default network. Through the real shim, a running agent and real plugins (the reference
//! bridge and host-local, plexus's native macvlan and static IPAM), networks from NAD files.
//! Every test ends by asking the world what is left behind.

use std::time::{Duration, Instant};

use plexus_tests::addresses::{assert_in_subnet, bare, only_address};
use plexus_tests::{status_of, CniOutput, Netns, Recorder, World};
use serde_json::{json, Value};

const NS: &str = "default";
const POD: &str = "p";

/// The runtimeConfig of a runtime passing `networks` as the sandbox's list.
fn listing(networks: Value) -> Value {
    json!({"podSandboxNetworks": networks})
}

/// The bridge network `blue` (10.10.1.0/24) as a NAD of the pod's namespace.
fn write_blue(w: &World) {
    w.write_nad(NS, "blue", Some(&w.bridge_config("blue", "br-blue", "10.10.1.0/24", true)));
}

fn add(w: &World, cid: &str, pod: &Netns, pod_name: &str, runtime_config: &Value) -> CniOutput {
    w.cni_with_runtime_config("ADD", cid, pod, (NS, pod_name), runtime_config)
}

fn del(w: &World, cid: &str, pod: &Netns, pod_name: &str, runtime_config: &Value) -> CniOutput {
    w.cni_with_runtime_config("DEL", cid, pod, (NS, pod_name), runtime_config)
}

/// A pod manifest with exactly these annotations.
fn write_pod_annotated(w: &World, name: &str, annotations: Value) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": name, "namespace": NS, "annotations": annotations}});
    std::fs::write(w.path("pods").join(format!("{NS}_{name}.json")), pod.to_string()).expect("writing pod");
}

fn sorted_links(pod: &Netns) -> Vec<String> {
    let mut v = pod.link_names();
    v.sort();
    v
}

/// A CNI error with `code` whose message (or details) holds every one of `needles`.
#[track_caller]
fn assert_cni_error(out: &CniOutput, code: u64, needles: &[&str]) {
    assert!(!out.ok(), "expected CNI error {code}, got success: {}", out.stdout);
    assert_eq!(out.code(), Some(code), "stdout: {} stderr: {}", out.stdout, out.stderr);
    let text = format!("{} {}", out.msg(), out.json()["details"].as_str().unwrap_or_default());
    for needle in needles {
        assert!(text.contains(needle), "error {code} does not mention {needle:?}: {text}");
    }
}

/// The attachment record of the sandbox, as the agent keeps it.
fn record(w: &World, cid: &str) -> Value {
    let path = w.path("state").join("attachments").join(format!("{cid}@eth0.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("record JSON")
}

#[test]
fn kernel_fallback_and_a_bridge_nad_are_exactly_the_pods_interfaces() {
    let mut w = World::new();
    write_blue(&w);
    w.write_pod(NS, POD, None);
    w.start_agent();
    let pod = Netns::new("pxsb");
    let runtime_config = listing(json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "data0", "networkName": "blue"},
    ]));

    let result = add(&w, "c1", &pod, POD, &runtime_config).expect_ok();

    assert_eq!(sorted_links(&pod), ["data0", "eth0", "lo"]);
    let eth0 = only_address(&pod, "eth0");
    let data0 = only_address(&pod, "data0");
    assert_in_subnet(&eth0, "10.88.0.");
    assert_in_subnet(&data0, "10.10.1.");
    // The result is the first network's: kubelet reads the pod IP from it.
    let ips = result["ips"].as_array().expect("ips in the result");
    assert_eq!(ips.len(), 1, "{result:#}");
    assert_eq!(ips[0]["address"], eth0.as_str());
    let status = w.network_status(NS, POD);
    assert_eq!(status.as_array().map(Vec::len), Some(2), "{status:#}");
    let first = status_of(&status, "eth0");
    assert_eq!((&first["name"], &first["default"]), (&json!("cluster"), &json!(true)), "{first:#}");
    assert_eq!(first["ips"], json!([bare(&eth0)]));
    let second = status_of(&status, "data0");
    assert_eq!((&second["name"], &second["default"]), (&json!("default/blue"), &json!(false)), "{second:#}");
    assert_eq!(second["ips"], json!([bare(&data0)]));
    assert_eq!(record(&w, "c1")["front_end"], "sandbox");
    let check = w.cni_with_runtime_config("CHECK", "c1", &pod, (NS, POD), &runtime_config);
    assert!(check.ok(), "CHECK: {} {}", check.stdout, w.agent_log());

    // The runtime's DEL carries the same config; the record says what to undo.
    assert!(del(&w, "c1", &pod, POD, &runtime_config).ok(), "{}", w.agent_log());
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_native_macvlan_gets_the_mac_and_addresses_of_its_parameters() {
    let mut w = World::new();
    w.master_link("up0");
    let macvlan = json!({"cniVersion": "1.0.0", "name": "mv", "plugins": [{
        "type": "macvlan", "master": "up0", "mode": "bridge",
        "capabilities": {"mac": true, "ips": true},
        "ipam": {"type": "static"},
    }]});
    w.write_nad(NS, "mv", Some(&macvlan.to_string()));
    w.write_pod(NS, POD, None);
    w.start_agent();
    let pod = Netns::new("pxsb");
    let mac = "02:a0:b0:c0:d0:07";
    let runtime_config = listing(json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "mv0", "networkName": "default/mv",
         "parameters": {"mac": mac, "ips": "[\"10.40.0.7/24\", \"fd40::7/64\"]"}},
    ]));

    add(&w, "c1", &pod, POD, &runtime_config).expect_ok();

    assert_eq!(sorted_links(&pod), ["eth0", "lo", "mv0"]);
    assert_in_subnet(&only_address(&pod, "eth0"), "10.88.0.");
    let link: Value =
        serde_json::from_str(&pod.ip(&["-d", "-j", "link", "show", "dev", "mv0"])).expect("ip -j");
    assert_eq!(link[0]["address"], mac, "{link:#}");
    assert_eq!(link[0]["linkinfo"]["info_kind"], "macvlan", "{link:#}");
    assert_eq!(link[0]["linkinfo"]["info_data"]["mode"], "bridge", "{link:#}");
    assert_eq!(pod.addresses("mv0"), ["10.40.0.7/24", "fd40::7/64"]);
    let entry = status_of(&w.network_status(NS, POD), "mv0").clone();
    assert_eq!(entry["name"], "default/mv");
    assert_eq!(entry["mac"], mac);
    assert_eq!(entry["ips"], json!(["10.40.0.7", "fd40::7"]));

    // A DEL without the list (and after an agent restart) undoes what the record holds.
    w.kill_agent();
    w.start_agent();
    assert!(w.del("c1", &pod, (NS, POD)).ok(), "{}", w.agent_log());
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_named_network_takes_the_default_networks_place_without_any_default_network() {
    let mut w = World::new();
    std::fs::remove_file(w.path("default").join("10-cluster.conflist"))
        .expect("removing the default network");
    write_blue(&w);
    w.write_nad(NS, "red", Some(&w.bridge_config("red", "br-red", "10.10.2.0/24", true)));
    w.write_pod(NS, POD, None);
    w.write_pod(NS, "plain", None);
    w.start_agent();
    let pod = Netns::new("pxsb");
    let plain = Netns::new("pxsb");
    // No interfaceName after the first: a generated name, as for a selection without one.
    let runtime_config = listing(json!([
        {"interfaceName": "eth0", "networkName": "default/blue"},
        {"networkName": "red"},
    ]));

    let result = add(&w, "c1", &pod, POD, &runtime_config).expect_ok();
    let without_list = w.add("c2", &plain, (NS, "plain"));

    assert_eq!(sorted_links(&pod), ["eth0", "lo", "net1"]);
    let eth0 = only_address(&pod, "eth0");
    assert_in_subnet(&eth0, "10.10.1.");
    assert_in_subnet(&only_address(&pod, "net1"), "10.10.2.");
    assert_eq!(result["ips"][0]["address"], eth0.as_str(), "{result:#}");
    let status = w.network_status(NS, POD);
    let first = status_of(&status, "eth0");
    assert_eq!((&first["name"], &first["default"]), (&json!("default/blue"), &json!(true)), "{first:#}");
    let second = status_of(&status, "net1");
    assert_eq!((&second["name"], &second["default"]), (&json!("default/red"), &json!(false)), "{second:#}");
    // A sandbox without a list still needs the default network, and says so.
    assert_cni_error(&without_list, 11, &["default network"]);

    assert!(del(&w, "c1", &pod, POD, &runtime_config).ok(), "{}", w.agent_log());
    assert!(w.del("c2", &plain, (NS, "plain")).ok());
    w.assert_nothing_left(&[&pod, &plain]);
}

/// A bridge network whose chain ends in a recorder declaring `portMappings`, so the test
/// sees the runtimeConfig each network's plugins get.
fn recorded_bridge(w: &World, name: &str, subnet: &str) -> String {
    let mut config: Value = serde_json::from_str(&w.bridge_config(name, &format!("br-{name}"), subnet, true))
        .expect("bridge JSON");
    let recorder = Recorder::plugin_with(name, json!({"capabilities": {"portMappings": true}}));
    config["plugins"].as_array_mut().expect("plugins").push(recorder);
    config.to_string()
}

#[test]
fn kernel_kubelets_runtime_config_reaches_the_first_network_and_parameters_their_own() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad(NS, "blue", Some(&recorded_bridge(&w, "blue", "10.10.1.0/24")));
    w.write_nad(NS, "red", Some(&recorded_bridge(&w, "red", "10.10.2.0/24")));
    w.write_pod(NS, POD, None);
    w.start_agent();
    let pod = Netns::new("pxsb");
    let kubelets = json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]);
    let runtime_config = json!({
        "portMappings": kubelets,
        "podSandboxNetworks": [
            {"interfaceName": "eth0", "networkName": "blue"},
            {"interfaceName": "net1", "networkName": "red",
             "parameters": {"portMappings": "[{\"hostPort\": 9090, \"containerPort\": 90}]"}},
        ],
    });

    add(&w, "c1", &pod, POD, &runtime_config).expect_ok();

    let added = |tag: &str| {
        let adds: Vec<_> = rec.calls_of(tag).into_iter().filter(|c| c.command == "ADD").collect();
        assert_eq!(adds.len(), 1, "{tag}: {adds:?}");
        adds[0].config["runtimeConfig"].clone()
    };
    // The list itself is plexus's: no plugin ever sees it.
    assert_eq!(added("blue"), json!({"portMappings": kubelets}));
    assert_eq!(
        added("red"),
        json!({"portMappings": [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]})
    );

    assert!(del(&w, "c1", &pod, POD, &runtime_config).ok(), "{}", w.agent_log());
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_refused_lists_fail_with_code_7_saying_what_to_fix_and_leave_nothing() {
    let mut w = World::new();
    write_blue(&w);
    w.start_agent();
    let fallback = json!({"interfaceName": "eth0", "networkName": "_fallback"});
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            listing(
                json!([fallback, {"interfaceName": "net1", "networkName": "blue", "parameters": {"vlan": "5"}}]),
            ),
            vec!["podSandboxNetworks[1].parameters has the key \"vlan\"", "plexus does not know"],
        ),
        (
            listing(json!([fallback, {"networkName": "blue", "parameters": {"mac": "02:00:00"}}])),
            vec!["podSandboxNetworks[1].parameters.mac", "6-byte Ethernet"],
        ),
        (
            listing(json!([fallback, {"networkName": "blue", "parameters": {"ips": "[\"10.10.1.50/24\"]"}}])),
            vec!["podSandboxNetworks[1] (blue)", "default/blue", "\"capabilities\": {\"ips\": true}"],
        ),
        (
            listing(json!([{"interfaceName": "net0", "networkName": "blue"}])),
            vec!["[0].interfaceName is \"net0\"", "CNI_IFNAME is \"eth0\""],
        ),
        (
            listing(json!([fallback, {"interfaceName": "eth0", "networkName": "blue"}])),
            vec![
                "interface \"eth0\" requested for network default/blue is already used by network _fallback",
            ],
        ),
        (
            listing(json!([fallback, {"networkName": "missing"}])),
            vec!["network default/missing does not exist", "runtimeConfig.podSandboxNetworks"],
        ),
        (
            listing(json!([{"interfaceName": "eth0", "networkName": "Blue"}])),
            vec!["[0].networkName \"Blue\""],
        ),
        (listing(json!({"networkName": "blue"})), vec!["must be a list", "it is an object"]),
    ];
    let mut pods = Vec::new();
    for (i, (runtime_config, needles)) in cases.iter().enumerate() {
        let name = format!("p{i}");
        w.write_pod(NS, &name, None);
        let pod = Netns::new("pxsb");
        let out = add(&w, &format!("c{i}"), &pod, &name, runtime_config);
        assert_cni_error(&out, 7, needles);
        assert!(w.events(NS, &name).contains("NetworkRefused"), "{}", w.events(NS, &name));
        pods.push(pod);
    }
    w.assert_nothing_left(&pods.iter().collect::<Vec<_>>());
}

#[test]
fn kernel_a_network_failing_after_the_first_is_attached_leaves_nothing() {
    let mut w = World::new();
    let no_master = json!({"cniVersion": "1.0.0", "name": "nomaster", "plugins": [{
        "type": "macvlan", "master": "pxabsent0", "ipam": {"type": "static", "addresses": [{"address": "10.40.0.9/24"}]}
    }]});
    w.write_nad(NS, "nomaster", Some(&no_master.to_string()));
    w.write_pod(NS, POD, None);
    w.start_agent();
    let pod = Netns::new("pxsb");
    let runtime_config = listing(json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "net1", "networkName": "nomaster"},
    ]));

    let out = add(&w, "c1", &pod, POD, &runtime_config);

    assert!(!out.ok(), "{}", out.stdout);
    assert!(out.msg().contains("default/nomaster") && out.msg().contains("pxabsent0"), "{}", out.msg());
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_list_beside_a_pod_annotation_is_refused_pick_one() {
    let mut w = World::new();
    write_blue(&w);
    w.write_pod(NS, "npwg", Some("blue"));
    write_pod_annotated(&w, "kep", json!({"plexus.dev/pod-networks": "[{\"name\": \"default\"}]"}));
    w.start_agent();
    let runtime_config = listing(json!([{"interfaceName": "eth0", "networkName": "_fallback"}]));
    let npwg = Netns::new("pxsb");
    let kep = Netns::new("pxsb");

    let out = add(&w, "c1", &npwg, "npwg", &runtime_config);
    assert_cni_error(&out, 7, &["podSandboxNetworks", "k8s.v1.cni.cncf.io/networks annotation", "pick one"]);
    let out = add(&w, "c2", &kep, "kep", &runtime_config);
    assert_cni_error(&out, 7, &["podSandboxNetworks", "plexus.dev/pod-networks annotation", "pick one"]);

    w.assert_nothing_left(&[&npwg, &kep]);
}

#[test]
fn kernel_without_a_list_the_pod_gets_the_default_network_on_eth0_and_its_annotation() {
    let mut w = World::new();
    write_blue(&w);
    w.write_pod(NS, "alone", None);
    w.write_pod(NS, "annotated", Some("blue"));
    w.start_agent();
    let alone = Netns::new("pxsb");
    let annotated = Netns::new("pxsb");

    // No runtimeConfig at all, and an empty list: both are today's behaviour.
    w.add("c1", &alone, (NS, "alone")).expect_ok();
    add(&w, "c2", &annotated, "annotated", &listing(json!([]))).expect_ok();

    assert_eq!(sorted_links(&alone), ["eth0", "lo"]);
    assert_in_subnet(&only_address(&alone, "eth0"), "10.88.0.");
    assert_eq!(status_of(&w.network_status(NS, "alone"), "eth0")["default"], true);
    assert_eq!(sorted_links(&annotated), ["eth0", "lo", "net1"]);
    assert_in_subnet(&only_address(&annotated, "net1"), "10.10.1.");
    assert!(record(&w, "c1").get("front_end").is_none(), "an NPWG record: {:#}", record(&w, "c1"));

    assert!(w.del("c1", &alone, (NS, "alone")).ok());
    assert!(w.del("c2", &annotated, (NS, "annotated")).ok());
    w.assert_nothing_left(&[&alone, &annotated]);
}

#[test]
fn kernel_plexus_cni_config_declares_the_pod_sandbox_networks_capability() {
    let mut w = World::new();
    w.start_agent();
    let path = w.path("runtime").join("00-plexus.conflist");
    let deadline = Instant::now() + Duration::from_secs(15);
    let config: Value = loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            break serde_json::from_str(&text).expect("plexus's CNI config is JSON");
        }
        assert!(Instant::now() < deadline, "{} was never written; log:\n{}", path.display(), w.agent_log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(config["plugins"][0]["type"], "plexus");
    assert_eq!(config["plugins"][0]["capabilities"]["podSandboxNetworks"], true, "{config:#}");
}
