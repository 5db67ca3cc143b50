//! PodNetworks (KEP-3698) on a node: pods that ask for PodNetworks in the
//! `plexus.dev/pod-networks` annotation, through the real shim and the real agent.
//!
//! Each test builds a world (a node namespace running the agent, which attaches with the
//! reference bridge plugin and its native macvlan, and maps ports and limits bandwidth in
//! eBPF) whose agent reads the cluster from the in-process test API server (`--catalog kube`,
//! authorized by `deploy/rbac.yaml`'s ClusterRole). The API server listens on the host's
//! loopback; a forwarder listening on the same port of the node namespace's loopback lets the
//! agent reach it with the server's own kubeconfig. No controller runs here: the tests write
//! the objects' Ready conditions themselves, as the controller would.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_tests::test_apiserver::{
    nad, pod, rbac, ServerOptions, TestApiServer, ATTACHMENT_PARAMETERS, EVENTS, PODS, POD_NETWORKS,
    POD_NETWORK_ATTACHMENTS,
};
use plexus_tests::traffic::{
    cid, client_namespace, forward_into, no_dad, plain, run_until_ok, start_server, tx_off,
};
use plexus_tests::world::bin;
use plexus_tests::{CniOutput, Netns, Proc, World};
use serde_json::{json, Value};

const NODE: &str = "node-1";
const NS: &str = "default";
const POD_NETWORKS_ANNOTATION: &str = "plexus.dev/pod-networks";
const POD_NETWORKS_STATUS: &str = "plexus.dev/pod-networks-status";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const MBIT: u64 = 1_000_000;

/// Servers and clients of the port mapping tests, reused.
const SCRIPT: &str = include_str!("../portmap/pm.py");

/// Fields drop in order: servers and namespaces first, then the world (its agent), then the
/// API server.
struct KepWorld {
    servers: Vec<Proc>,
    clients: Vec<Netns>,
    pods: Vec<(String, Netns)>,
    w: World,
    api: TestApiServer,
    /// The world's bpffs, where the agent pins.
    pins: PathBuf,
}

impl KepWorld {
    fn new() -> KepWorld {
        KepWorld::authorized_by(rbac::deploy_rules())
    }

    /// A world whose API server authorizes with `rules` (the agent's, or more).
    fn authorized_by(rules: Vec<rbac::Rule>) -> KepWorld {
        let mut w = World::new();
        let pins = w.pin_on_own_bpffs();
        std::fs::write(w.path("pm.py"), SCRIPT).expect("writing the traffic script");
        no_dad(&w.node);
        let api = TestApiServer::start_with(ServerOptions { rbac: Some(rules), ..Default::default() });
        forward_into(&w.node, &api.url());
        w.agent_args.extend([
            "--catalog".into(),
            "kube".into(),
            "--kubeconfig".into(),
            api.kubeconfig().display().to_string(),
            "--node-name".into(),
            NODE.into(),
        ]);
        KepWorld { servers: Vec::new(), clients: Vec::new(), pods: Vec::new(), w, api, pins }
    }

    /// Starts the agent and waits until its caches and dataplane are ready.
    fn start(&mut self) {
        self.w.start_agent();
        let deadline = Instant::now() + Duration::from_secs(20);
        let log = || plain(&self.w.agent_log());
        while !(log().contains("PodNetworks: initial state complete")
            && log().contains("PodNetworkAttachments: initial state complete")
            && log().contains("AttachmentParameters: initial state complete")
            && log().contains("port mappings reconciled"))
        {
            assert!(Instant::now() < deadline, "the agent never got ready:\n{}", self.w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn script(&self) -> String {
        self.w.path("pm.py").display().to_string()
    }

    fn pod_network(&self, name: &str, nad: Option<(&str, &str)>, ready: bool) {
        let mut spec = json!({"enabled": true});
        if let Some((namespace, nad)) = nad {
            spec["parametersRefs"] = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition",
                                             "name": nad, "namespace": namespace}]);
        }
        self.api.apply(json!({
            "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": name}, "spec": spec,
        }));
        self.set_ready(POD_NETWORKS, "", name, ready);
    }

    fn attachment(&self, name: &str, pod_network: &str, params: Option<&str>, ready: bool) {
        let mut spec = json!({"podNetworkName": pod_network});
        if let Some(p) = params {
            spec["parametersRefs"] =
                json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": p}]);
        }
        self.api.apply(json!({
            "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetworkAttachment",
            "metadata": {"name": name, "namespace": NS}, "spec": spec,
        }));
        self.set_ready(POD_NETWORK_ATTACHMENTS, NS, name, ready);
    }

    fn parameters(&self, name: &str, spec: Value) {
        self.api.apply(json!({
            "apiVersion": "plexus.dev/v1alpha1", "kind": "AttachmentParameters",
            "metadata": {"name": name, "namespace": NS}, "spec": spec,
        }));
        assert!(self.api.get(ATTACHMENT_PARAMETERS, NS, name).is_some());
    }

    /// Writes the object's Ready condition, as the controller would.
    fn set_ready(&self, resource: &str, namespace: &str, name: &str, ready: bool) {
        let mut obj =
            self.api.get(resource, namespace, name).unwrap_or_else(|| panic!("no {resource} {name}"));
        let (status, reason) = if ready { ("True", "Ready") } else { ("False", "ParamsNotReady") };
        obj["status"] = json!({"conditions": [{
            "type": "Ready", "status": status, "reason": reason, "message": "written by the test",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        }]});
        self.api.apply(obj);
    }

    /// The pod object with `annotations`, scheduled to this node.
    fn pod_object(&self, name: &str, annotations: &[(&str, &str)]) {
        self.api.apply(pod(NS, name, NODE, annotations));
    }

    /// ADD of a pod asking for `networks` (the PodNetwork list); its namespace stays in the
    /// world whether the ADD succeeded or not.
    fn add(&mut self, name: &str, networks: &Value) -> CniOutput {
        self.pod_object(name, &[(POD_NETWORKS_ANNOTATION, &networks.to_string())]);
        self.add_existing(name)
    }

    fn add_existing(&mut self, name: &str) -> CniOutput {
        let index = match self.pods.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                let ns = Netns::new("kppod");
                no_dad(&ns);
                self.pods.push((name.to_owned(), ns));
                self.pods.len() - 1
            }
        };
        let out = self.w.add(&cid(name), &self.pods[index].1, (NS, name));
        if out.ok() {
            let ns = &self.pods[index].1;
            for ifname in ns.link_names().into_iter().filter(|n| n != "lo") {
                tx_off(ns, &ifname);
            }
        }
        out
    }

    fn netns(&self, name: &str) -> &Netns {
        &self.pods.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no pod {name}")).1
    }

    fn del(&self, name: &str) {
        let out = self.w.del(&cid(name), self.netns(name), (NS, name));
        assert!(out.ok(), "DEL {name}: {} {}", out.stdout, out.stderr);
    }

    /// A server of the traffic script in the pod, answering on `port` with the pod's name.
    fn serve(&mut self, name: &str, port: u16) {
        let server =
            start_server(self.netns(name), Path::new(&self.script()), &["serve", name, &port.to_string()]);
        self.servers.push(server);
    }

    /// A client namespace whose `eth0` is the peer of `node_end` (created in the node).
    fn client(&mut self, node_end: &str, addrs: &[&str]) -> String {
        let ns = client_namespace(&self.w.node, "kpcl", node_end, addrs);
        let name = ns.name.clone();
        self.clients.push(ns);
        name
    }

    /// TCP from the client namespace `from` to `host:port` until the pod answers (servers and
    /// neighbours may need a moment); returns the words the pod's server said.
    fn tcp(&self, from: &str, host: &str, port: u16) -> Vec<String> {
        run_until_ok(from, Path::new(&self.script()), &["tcp", host, &port.to_string(), "hi"]).unwrap_or_else(
            |last| {
                panic!(
                    "TCP to {host}:{port} from {from} never succeeded: {last}\nagent log:\n{}",
                    self.w.agent_log()
                )
            },
        )
    }

    /// `plexus-agent <tool> list --json` (tool: portmap or bandwidth).
    fn list(&self, tool: &str) -> Vec<Value> {
        let out = Command::new(bin("plexus-agent"))
            .args([tool, "list", "--json", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .output()
            .expect("running plexus-agent list");
        assert!(out.status.success(), "{tool} list: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("list JSON")
    }

    /// The annotation the agent published on the pod, once it is there.
    fn annotation(&self, name: &str, key: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let p = self.api.get(PODS, NS, name).expect("the pod");
            if let Some(v) = p["metadata"]["annotations"][key].as_str() {
                return v.to_owned();
            }
            assert!(Instant::now() < deadline, "{key} never published on {name}:\n{}", self.w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Event reasons and messages recorded on the pod.
    fn events(&self, name: &str) -> Vec<(String, String)> {
        self.api
            .objects(EVENTS)
            .into_iter()
            .filter(|e| e["regarding"]["name"] == name)
            .map(|e| {
                (e["reason"].as_str().unwrap_or("").to_owned(), e["note"].as_str().unwrap_or("").to_owned())
            })
            .collect()
    }

    fn wait_event(&self, name: &str, reason: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some((_, note)) = self.events(name).into_iter().find(|(r, _)| r == reason) {
                return note;
            }
            assert!(Instant::now() < deadline, "no {reason} event on {name}: {:?}", self.events(name));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// DEL of every pod, then nothing may be left of the attachments, mappings or limits.
    fn del_all_and_expect_nothing_left(&mut self, infra: &[&str]) {
        let names: Vec<String> = self.pods.iter().map(|(n, _)| n.clone()).collect();
        for name in &names {
            self.del(name);
        }
        assert_eq!(self.list("portmap"), Vec::<Value>::new(), "mappings left");
        assert_eq!(self.list("bandwidth"), Vec::<Value>::new(), "limits left");
        let pods: Vec<&Netns> = self.pods.iter().map(|(_, ns)| ns).collect();
        let left: Vec<String> = self
            .w
            .leftovers(&pods)
            .into_iter()
            .filter(|l| !infra.iter().any(|i| l == &format!("node veth {i}")))
            .collect();
        plexus_testkit::assert_nothing_left(left);
    }
}

/// A bridge network `kpbr0` (10.77.0.0/24 and fd00:77::/64, the bridge the gateway: 10.77.0.1
/// and fd00:77::1 are the host's addresses) chaining the eBPF port mappings and bandwidth.
fn bridge_config(w: &World, name: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "bridge", "bridge": "kpbr0", "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": "10.77.0.0/24", "rangeStart": "10.77.0.10", "rangeEnd": "10.77.0.99"}],
                        [{"subnet": "fd00:77::/64", "rangeStart": "fd00:77::10", "rangeEnd": "fd00:77::99"}]
                    ],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

/// A macvlan network on `kpm0` (10.78.0.0/24, gateway 10.78.0.1: the node's address on the
/// master) chaining the eBPF port mappings and bandwidth.
fn macvlan_config(w: &World, name: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {
                "type": "macvlan", "master": "kpm0", "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.78.0.0/24", "rangeStart": "10.78.0.10", "rangeEnd": "10.78.0.99",
                                 "gateway": "10.78.0.1"}]],
                    "dataDir": w.path("ipam").join(name),
                }
            },
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

/// AttachmentParameters with one TCP mapping and a limit both ways.
fn mapped_and_limited(host_port: u16, container_port: u16, rate: u64) -> Value {
    json!({
        "portMappings": [{"hostPort": host_port, "containerPort": container_port, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": rate, "egressRate": rate}
    })
}

/// The addresses (without prefix) of an interface of the pod, IPv4 first.
fn addresses(ns: &Netns, ifname: &str) -> Vec<String> {
    let mut all: Vec<String> = ns
        .addresses(ifname)
        .into_iter()
        .filter(|a| !a.starts_with("fe80:"))
        .filter_map(|a| a.split('/').next().map(str::to_owned))
        .collect();
    all.sort_by_key(|a| a.contains(':'));
    all
}

/// The interfaces the pod's default routes of one family go out of.
fn default_route_devices(ns: &Netns, v6: bool) -> Vec<String> {
    let family = if v6 { "-6" } else { "-4" };
    let routes: Vec<Value> =
        serde_json::from_str(&ns.ip(&["-j", family, "route", "show", "default"])).unwrap_or_default();
    routes.iter().filter_map(|r| r["dev"].as_str().map(str::to_owned)).collect()
}

/// The KEP status the pod must carry, from what is in the pod: one entry per address family
/// of each attachment, `isDefaultGW` where the pod's default route of that family goes out.
fn expected_status(ns: &Netns, attachments: &[(&str, &str)]) -> Value {
    let mut out = Vec::new();
    for (pod_network, ifname) in attachments {
        let addrs = addresses(ns, ifname);
        let mut families: Vec<(Option<String>, bool)> = Vec::new();
        for v6 in [false, true] {
            if let Some(a) = addrs.iter().find(|a| a.contains(':') == v6) {
                let holds = default_route_devices(ns, v6).iter().any(|d| d == ifname);
                families.push((Some(a.clone()), holds));
            }
        }
        if families.is_empty() {
            families.push((None, false));
        }
        for (ip, holds) in families {
            let mut entry = json!({"name": pod_network, "interfaceName": ifname});
            if let Some(ip) = ip {
                entry["ip"] = json!(ip);
            }
            if holds {
                entry["isDefaultGW"] = json!(true);
            }
            out.push(entry);
        }
    }
    Value::Array(out)
}

#[test]
fn kernel_bridge_by_pod_network_and_by_attachment_with_port_mapping_and_bandwidth() {
    let mut t = KepWorld::new();
    t.api.apply(nad("nets", "blue", Some(&bridge_config(&t.w, "blue"))));
    t.pod_network("blue", Some(("nets", "blue")), true);
    t.parameters("blue-web", mapped_and_limited(8080, 80, 20 * MBIT));
    t.attachment("blue-web", "blue", Some("blue-web"), true);
    t.start();

    // By PodNetwork, on the interface the pod names.
    let by_name = t.add("plain", &json!([{"name": "blue", "interfaceName": "blue0"}]));
    by_name.expect_ok();
    // By PodNetworkAttachment, with its parameters: the interface is plexus's net1.
    t.add("web", &json!([{"attachmentName": "blue-web"}])).expect_ok();
    t.serve("web", 80);
    let client = t.client("kpcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "kpcl0", "master", "kpbr0"]);

    // Real traffic through the mapping, both families.
    for host in ["10.77.0.1", "fd00:77::1"] {
        let got = t.tcp(&client, host, 8080);
        assert_eq!(got[..2], ["web".to_owned(), "hi".into()], "TCP to {host}:8080");
    }
    let mappings = t.list("portmap");
    assert_eq!(mappings.len(), 2, "one mapping, two families: {mappings:#?}");
    assert!(mappings.iter().all(|m| m["pod"] == "default/web"), "{mappings:#?}");
    let limits = t.list("bandwidth");
    assert_eq!(limits.len(), 2, "{limits:#?}");
    assert!(
        limits.iter().all(|l| l["container_id"] == cid("web") && l["rate_bps"] == 20 * MBIT),
        "{limits:#?}"
    );

    // The KEP status: exact, against what is in the pods.
    for (pod_name, ifname) in [("plain", "blue0"), ("web", "net1")] {
        let text = t.annotation(pod_name, POD_NETWORKS_STATUS);
        let status: Value = serde_json::from_str(&text).expect("KEP status JSON");
        let ns = t.netns(pod_name);
        assert_eq!(status, expected_status(ns, &[("default", "eth0"), ("blue", ifname)]), "{text}");
        assert_eq!(
            status.as_array().map(Vec::len),
            Some(3),
            "eth0 IPv4, the network's IPv4 and IPv6: {text}"
        );
        // network-status names the NAD, as for an NPWG selection, in the same publication.
        let npwg: Value = serde_json::from_str(&t.annotation(pod_name, NETWORK_STATUS)).unwrap();
        assert_eq!(npwg[1]["name"], "nets/blue", "{npwg:#}");
        assert_eq!(npwg[1]["interface"], ifname, "{npwg:#}");
    }
    t.del_all_and_expect_nothing_left(&["kpcl0"]);
}

#[test]
fn kernel_native_macvlan_by_pod_network_with_is_default_gw_and_by_attachment_with_parameters() {
    let mut t = KepWorld::new();
    // The master is the node's end of a veth to a client namespace, with the node's address.
    let client = t.client("kpm0", &["10.78.0.200/24"]);
    t.w.node.ip(&["addr", "add", "10.78.0.1/24", "dev", "kpm0"]);
    // A PodNetwork without a NAD: its config is the on-disk one named after it.
    t.w.write_netconf("green.conflist", &macvlan_config(&t.w, "green"));
    t.pod_network("green", None, true);
    // The cluster default network gives pods a default route, for isDefaultGW to take.
    let mut cluster: Value =
        serde_json::from_str(&t.w.bridge_config("cluster", "cni0", "10.88.0.0/24", true)).unwrap();
    cluster["plugins"][0]["isDefaultGateway"] = json!(true);
    t.w.write_default_network("10-cluster.conflist", &cluster.to_string());
    t.parameters("green-db", mapped_and_limited(5432, 5432, 10 * MBIT));
    t.attachment("green-db", "green", Some("green-db"), true);
    t.start();

    let out = t.add("gw", &json!([{"name": "green", "isDefaultGW": true}]));
    out.expect_ok();
    let gw = t.netns("gw");
    let (ok, details) = gw.exec(&["ip", "-d", "-j", "link", "show", "net1"]);
    assert!(ok && details.contains(r#""info_kind":"macvlan""#), "net1 is a macvlan: {details}");
    assert_eq!(gw.default_routes(), ["net1 10.78.0.1"], "isDefaultGW moves the default route to net1");
    let text = t.annotation("gw", POD_NETWORKS_STATUS);
    let status: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status, expected_status(gw, &[("default", "eth0"), ("green", "net1")]), "{text}");
    assert_eq!(status[1]["isDefaultGW"], true, "{text}");
    let npwg: Value = serde_json::from_str(&t.annotation("gw", NETWORK_STATUS)).unwrap();
    assert_eq!(npwg[1]["name"], "green", "a PodNetwork without a NAD is named after itself: {npwg:#}");

    t.add("db", &json!([{"attachmentName": "green-db", "interfaceName": "data"}])).expect_ok();
    assert_eq!(
        t.netns("db").default_routes(),
        ["eth0 10.88.0.1"],
        "without isDefaultGW the default network keeps it"
    );
    t.serve("db", 5432);
    let got = t.tcp(&client, "10.78.0.1", 5432);
    assert_eq!(got[..2], ["db".to_owned(), "hi".into()]);
    let limits = t.list("bandwidth");
    assert!(
        limits
            .iter()
            .filter(|l| l["container_id"] == cid("db"))
            .all(|l| l["rate_bps"] == 10 * MBIT && l["ifname"] == "data"),
        "{limits:#?}"
    );
    assert_eq!(limits.len(), 2, "{limits:#?}");
    t.del_all_and_expect_nothing_left(&["kpm0"]);
}

#[test]
fn kernel_a_network_not_ready_is_code_11_and_an_event_then_the_same_pod_attaches() {
    let mut t = KepWorld::new();
    t.api.apply(nad("nets", "blue", Some(&bridge_config(&t.w, "blue"))));
    t.pod_network("blue", Some(("nets", "blue")), false);
    t.start();

    // The PodNetwork is not Ready.
    let out = t.add("waiting", &json!([{"name": "blue"}]));
    assert_eq!(out.code(), Some(11), "try again later: {}", out.msg());
    assert!(out.msg().contains("PodNetwork \"blue\" is not Ready"), "{}", out.msg());
    let note = t.wait_event("waiting", "PodNetworkNotReady");
    assert!(note.contains("blue"), "{note}");
    t.w.assert_nothing_left(&[t.netns("waiting")]);

    // A missing PodNetworkAttachment likewise.
    let out = t.add("pna-waiting", &json!([{"attachmentName": "later"}]));
    assert_eq!(out.code(), Some(11), "{}", out.msg());
    assert!(out.msg().contains("PodNetworkAttachment default/later does not exist"), "{}", out.msg());
    t.wait_event("pna-waiting", "PodNetworkNotReady");

    // Ready now: the runtime's retry of the same pod attaches it.
    t.set_ready(POD_NETWORKS, "", "blue", true);
    t.attachment("later", "blue", None, true);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = t.add_existing("waiting");
        if out.ok() {
            break;
        }
        assert_eq!(out.code(), Some(11), "{}", out.msg());
        assert!(Instant::now() < deadline, "still refused once Ready: {}", out.msg());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t.netns("waiting").has_link("net1"));
    t.add_existing("pna-waiting").expect_ok();
    t.del_all_and_expect_nothing_left(&[]);
}

#[test]
fn kernel_every_static_rule_is_refused_clearly_and_leaves_nothing() {
    let mut t = KepWorld::new();
    t.api.apply(nad("nets", "blue", Some(&bridge_config(&t.w, "blue"))));
    t.pod_network("blue", Some(("nets", "blue")), true);
    t.pod_network("red", Some(("nets", "blue")), true);
    t.attachment("blue-again", "blue", None, true);
    t.attachment("to-default", "default", None, true);
    t.pod_network("default", None, true);
    t.api.apply(json!({
        "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork",
        "metadata": {"name": "theirs"}, "spec": {"provider": "example.com/other"},
    }));
    t.set_ready(POD_NETWORKS, "", "theirs", true);
    t.start();

    // (annotation, words the message must hold)
    let cases: Vec<(String, &[&str])> = vec![
        ("not json".into(), &["not valid JSON"]),
        (r#"{"name":"blue"}"#.into(), &["JSON list"]),
        (r#"["blue"]"#.into(), &["entry 0", "object"]),
        (r#"[{"name":"blue","interface":"net1"}]"#.into(), &["unknown key", "interface"]),
        (r#"[{"interfaceName":"net1"}]"#.into(), &["entry 0 names no network"]),
        (r#"[{"name":"blue","attachmentName":"blue-again"}]"#.into(), &["both", "only one"]),
        (r#"[{"name":""}]"#.into(), &["entry 0", "empty"]),
        (r#"[{"name":"Blue"}]"#.into(), &["not a valid object name"]),
        (r#"[{"name":"blue","interfaceName":"eth0"}]"#.into(), &["eth0", "another name"]),
        (r#"[{"name":"blue"},{"name":"blue"}]"#.into(), &["blue", "once"]),
        (
            r#"[{"name":"blue","isDefaultGW":true},{"name":"red","isDefaultGW":true}]"#.into(),
            &["isDefaultGW"],
        ),
        (
            r#"[{"name":"blue","interfaceName":"net5"},{"name":"red","interfaceName":"net5"}]"#.into(),
            &["net5"],
        ),
        (r#"[{"name":"blue","interfaceName":"a-name-too-long-for-linux"}]"#.into(), &["interfaceName"]),
        (r#"[{"name":"blue","interfaceName":"bad/name"}]"#.into(), &["interfaceName"]),
        (r#"[{"name":"blue","interfaceName":".."}]"#.into(), &["interfaceName"]),
        (r#"[{"name":"default","interfaceName":"net1"}]"#.into(), &["default", "eth0"]),
        (r#"[{"name":"blue","isDefaultGW":"yes"}]"#.into(), &["isDefaultGW"]),
        // Active rules that are the pod's to fix: code 7 too.
        (
            r#"[{"name":"blue"},{"attachmentName":"blue-again"}]"#.into(),
            &["both reach the PodNetwork", "blue"],
        ),
        (r#"[{"attachmentName":"to-default"}]"#.into(), &["cluster default network"]),
        (r#"[{"name":"theirs"}]"#.into(), &["example.com/other", "plexus.dev/plexus"]),
    ];
    for (i, (annotation, words)) in cases.iter().enumerate() {
        let name = format!("bad-{i}");
        t.pod_object(&name, &[(POD_NETWORKS_ANNOTATION, annotation)]);
        let out = t.add_existing(&name);
        assert_eq!(out.code(), Some(7), "{annotation}: {} {}", out.stdout, out.stderr);
        let msg = out.msg();
        for w in *words {
            assert!(msg.contains(w), "{annotation}: the message should say {w:?}: {msg}");
        }
        t.w.assert_nothing_left(&[t.netns(&name)]);
    }

    // Both front-ends at once: refused, saying to pick one.
    t.pod_object("both", &[(NETWORKS, "nets/blue"), (POD_NETWORKS_ANNOTATION, r#"[{"name":"blue"}]"#)]);
    let out = t.add_existing("both");
    assert_eq!(out.code(), Some(7), "{}", out.msg());
    assert!(out.msg().contains("pick one"), "{}", out.msg());
    assert!(t.wait_event("both", "NetworkRefused").contains("pick one"));
    t.w.assert_nothing_left(&[t.netns("both")]);

    // Nothing was attached, so DEL has nothing to undo; a valid pod still attaches.
    t.add("fine", &json!([{"name": "default"}, {"name": "blue"}])).expect_ok();
    t.del_all_and_expect_nothing_left(&[]);
}

/// A cluster without the PodNetwork CRDs (NPWG only): the API server answers 404 for the three
/// kinds. The catalog is ready all the same (their caches are empty and current), a lookup says
/// the object does not exist, and the agent says once why there are none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crds_the_catalog_is_ready_and_has_no_pod_networks() {
    use plexus_agent::catalog::Catalog;
    use plexus_agent::kube::{build_client, ClientSource, KubeCatalog, KubeCatalogConfig};

    let api =
        TestApiServer::start_with(ServerOptions { rbac: Some(rbac::deploy_rules()), ..Default::default() });
    for resource in ["podnetworks", "podnetworkattachments", "attachmentparameters"] {
        for verb in ["list", "watch", "get"] {
            api.fail_next(verb, resource, 404, 1000);
        }
    }
    let client = build_client(&ClientSource::Kubeconfig(api.kubeconfig())).await.expect("client");
    let catalog = KubeCatalog::start(client, KubeCatalogConfig::new(NODE));
    assert!(catalog.wait_synced(Duration::from_secs(20)).await, "not ready without the CRDs");
    assert!(catalog.pod_network("blue").await.expect("a 404 is no object").is_none());
    assert!(catalog.pod_network_attachment(NS, "blue-web").await.expect("no object").is_none());
    assert!(catalog.attachment_parameters(NS, "web").await.expect("no object").is_none());
    let listed = api.requests().iter().filter(|r| r.resource == "podnetworks" && r.verb != "get").count();
    assert!(listed >= 1, "the PodNetworks were asked for");
}

/// The rules of the controller's ClusterRole and Role (`deploy/controller.yaml`).
fn controller_rules() -> Vec<rbac::Rule> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/controller.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/controller.yaml");
    let mut rules = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("controller.yaml is YAML");
        if v["kind"] == "ClusterRole" || v["kind"] == "Role" {
            rules.extend(rbac::rules_of(&v));
        }
    }
    rules
}

/// The Ready condition's (status, reason) of the PodNetwork `name`, once it has one.
fn ready_of(api: &TestApiServer, name: &str) -> Option<(String, String)> {
    let pn = api.get(POD_NETWORKS, "", name)?;
    let c = pn["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
    Some((c["status"].as_str()?.to_owned(), c["reason"].as_str()?.to_owned()))
}

fn wait_ready_of(t: &KepWorld, name: &str, want: (&str, &str)) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready_of(&t.api, name) != Some((want.0.to_owned(), want.1.to_owned())) {
        assert!(
            Instant::now() < deadline,
            "PodNetwork {name} never became Ready={}/{}: {:?}",
            want.0,
            want.1,
            t.api.get(POD_NETWORKS, "", name)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The KEP's life cycle with both halves of plexus running: the real controller decides
/// Ready, the real agent obeys it. Disabling a network stops new pods (code 11 and an event,
/// the pod stays Pending) and leaves running ones alone (CHECK passes, traffic flows, the InUse
/// finalizer stays); enabling it again lets the waiting pod attach.
#[test]
fn kernel_a_disabled_network_blocks_new_pods_but_not_running_ones() {
    let mut rules = rbac::deploy_rules();
    rules.extend(controller_rules());
    let mut t = KepWorld::authorized_by(rules);
    t.api.apply(nad("nets", "blue", Some(&bridge_config(&t.w, "blue"))));
    // No conditions written by the test: the controller decides them.
    t.api.apply(json!({
        "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork",
        "metadata": {"name": "blue"},
        "spec": {"enabled": true, "parametersRefs": [{"group": "k8s.cni.cncf.io",
                 "kind": "NetworkAttachmentDefinition", "name": "blue", "namespace": "nets"}]},
    }));
    let controller = Command::new(bin("plexus-agent"))
        .args(["controller", "--identity", "node-test", "--lease-namespace", "kube-system"])
        .args(["--metrics-addr", "off", "--resync", "2", "--kubeconfig"])
        .arg(t.api.kubeconfig())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Proc)
        .expect("starting plexus-agent controller");
    wait_ready_of(&t, "blue", ("True", "Ready"));
    t.start();

    t.add("running", &json!([{"name": "blue"}])).expect_ok();
    let addr = addresses(t.netns("running"), "net1");
    let v4 = addr.iter().find(|a| !a.contains(':')).expect("an IPv4 address on net1").clone();
    let in_use = |t: &KepWorld| {
        t.api.get(POD_NETWORKS, "", "blue").is_some_and(|pn| {
            pn["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "plexus.dev/in-use"))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !in_use(&t) {
        assert!(Instant::now() < deadline, "the controller never marked blue in use");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The operator disables the network.
    let mut pn = t.api.get(POD_NETWORKS, "", "blue").expect("blue");
    pn["spec"]["enabled"] = json!(false);
    t.api.apply(pn);
    wait_ready_of(&t, "blue", ("False", "AdministrativelyDisabled"));

    // A new pod waits: code 11, an event naming the reason, nothing attached (the node holds
    // what it held before: the running pod's attachments).
    let before = t.w.leftovers(&[t.netns("running")]);
    let out = t.add("new", &json!([{"name": "blue"}]));
    assert_eq!(out.code(), Some(11), "try again later: {}", out.msg());
    assert!(out.msg().contains("AdministrativelyDisabled"), "{}", out.msg());
    let note = t.wait_event("new", "PodNetworkNotReady");
    assert!(note.contains("AdministrativelyDisabled"), "{note}");
    assert_eq!(
        t.w.leftovers(&[t.netns("running"), t.netns("new")]),
        before,
        "the refused ADD left something"
    );
    assert!(!t.w.state_files().iter().any(|f| f.contains("c-new")), "{:?}", t.w.state_files());

    // The running pod keeps its attachment: CHECK passes, it still reaches the bridge's
    // gateway, and the network stays in use.
    let check = t.w.cni("CHECK", &cid("running"), t.netns("running"), (NS, "running"));
    assert!(check.ok(), "CHECK of the running pod: {} {}", check.stdout, check.stderr);
    assert_eq!(addresses(t.netns("running"), "net1").iter().find(|a| !a.contains(':')), Some(&v4));
    let (ok, out) = t.netns("running").exec(&["ping", "-c1", "-W2", "10.77.0.1"]);
    assert!(ok, "the running pod reaches its network's gateway: {out}");
    assert!(in_use(&t), "a disabled network in use keeps its finalizer");

    // Enabled again: the runtime's retry of the waiting pod attaches it.
    let mut pn = t.api.get(POD_NETWORKS, "", "blue").expect("blue");
    pn["spec"]["enabled"] = json!(true);
    t.api.apply(pn);
    wait_ready_of(&t, "blue", ("True", "Ready"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = t.add_existing("new");
        if out.ok() {
            break;
        }
        assert_eq!(out.code(), Some(11), "{}", out.msg());
        assert!(Instant::now() < deadline, "still refused once enabled: {}", out.msg());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(t.netns("new").has_link("net1"));
    t.del_all_and_expect_nothing_left(&[]);
    drop(controller);
}
