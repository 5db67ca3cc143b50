//! Helpers of the conformance tests: networks, pods, CNI calls and what to assert about them.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use plexus_agent::spec::selection::parse_selection;
use plexus_tests::{CniOutput, Netns, World};
use serde_json::{json, Value};

pub const POD: (&str, &str) = ("default", "p");

/// A bridge + host-local configlist with `more` plugins chained after the bridge, as JSON.
pub fn bridge_list(w: &World, name: &str, bridge: &str, subnet: &str, more: &[Value]) -> Value {
    let mut v: Value = serde_json::from_str(&w.bridge_config(name, bridge, subnet, true)).unwrap();
    v["plugins"].as_array_mut().unwrap().extend(more.iter().cloned());
    v
}

/// [`bridge_list`] as text, for `write_nad` and friends.
pub fn bridge_text(w: &World, name: &str, bridge: &str, subnet: &str, more: &[Value]) -> String {
    bridge_list(w, name, bridge, subnet, more).to_string()
}

/// The default network (`cluster`, bridge cni0 10.88.0.0/24) with `more` plugins chained.
pub fn set_default_network(w: &World, more: &[Value]) {
    w.write_default_network("10-cluster.conflist", &bridge_text(w, "cluster", "cni0", "10.88.0.0/24", more));
}

/// Interfaces of a pod other than `lo`, sorted.
pub fn pod_links(pod: &Netns) -> Vec<String> {
    let mut v: Vec<String> = pod.link_names().into_iter().filter(|n| n != "lo").collect();
    v.sort();
    v
}

pub fn mac_of(pod: &Netns, ifname: &str) -> String {
    pod.links()
        .iter()
        .find(|l| l["ifname"] == ifname)
        .and_then(|l| l["address"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The single non-link-local address of an interface, which must be in `prefix`.
#[track_caller]
pub fn address_in(pod: &Netns, ifname: &str, prefix: &str) -> String {
    let addrs = pod.addresses(ifname);
    assert_eq!(addrs.len(), 1, "{ifname}: {addrs:?}");
    assert!(addrs[0].starts_with(prefix), "{ifname} has {addrs:?}, expected an address in {prefix}*");
    addrs[0].clone()
}

pub fn statuses(w: &World, ns: &str, pod: &str) -> Vec<Value> {
    w.network_status(ns, pod).as_array().cloned().unwrap_or_else(|| panic!("network-status is not a list"))
}

/// A raw manifest into the NAD or pod directory (for shapes `write_nad`/`write_pod` cannot
/// produce).
pub fn write_manifest(w: &World, sub: &str, file: &str, v: &Value) {
    std::fs::write(w.path(sub).join(file), v.to_string()).unwrap();
}

/// A CNI call through the real shim with a config of the test's choosing (runtimeConfig).
pub fn cni_with_config(
    w: &World,
    cmd: &str,
    cid: &str,
    netns: &Netns,
    pod: (&str, &str),
    config: &str,
) -> CniOutput {
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={cid}",
        pod.0, pod.1
    );
    let path = netns.path_str();
    w.shim(
        &[
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", &path),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", &args),
        ],
        config,
    )
}

/// A failed ADD: non-zero exit, the CNI error `code`, a message containing `msg`, nothing
/// attached in the pod and nothing left on the node.
#[track_caller]
pub fn assert_add_refused(w: &World, out: &CniOutput, pod: &Netns, code: u64, msg: &[&str]) {
    assert!(!out.ok(), "ADD should fail: {}", out.stdout);
    assert_eq!(out.code(), Some(code), "{}", out.stdout);
    for m in msg {
        assert!(out.msg().contains(m), "message {:?} should contain {m:?}", out.msg());
    }
    assert_eq!(pod_links(pod), Vec::<String>::new(), "nothing may stay attached");
    w.assert_nothing_left(&[pod]);
}

/// A network whose bridge declares every capability the annotation can ask for, so that
/// an annotation that is *invalid* is the only reason for it not to be attached.
pub fn all_caps_network(w: &World, name: &str) -> String {
    let mut v = bridge_list(w, name, "br-caps", "10.10.7.0/24", &[]);
    v["plugins"][0]["capabilities"] =
        json!({"ips": true, "mac": true, "portMappings": true, "bandwidth": true});
    v.to_string()
}

/// Spec: an invalid annotation "shall be invalid and ignored". For every case the parser
/// refuses the text with `reason`, and a real ADD of a pod carrying it succeeds with the
/// default network only and records the reason as a pod event.
#[track_caller]
pub fn assert_annotations_ignored(cases: &[(&str, &str)]) {
    for (text, reason) in cases {
        let err = parse_selection(text).expect_err(text).to_string();
        assert!(err.contains(reason), "{text}: got {err:?}, want {reason:?}");
    }
    let mut w = World::new();
    for name in ["net-b", "net-c"] {
        w.write_nad("default", name, Some(&all_caps_network(&w, name)));
    }
    for (i, (text, _)) in cases.iter().enumerate() {
        w.write_pod("default", &format!("p{i}"), Some(text));
    }
    w.start_agent();
    for (i, (text, reason)) in cases.iter().enumerate() {
        let pod = Netns::new("pxpod");
        let name = format!("p{i}");
        let cid = format!("c{i}");
        w.add(&cid, &pod, ("default", &name)).expect_ok();
        assert_eq!(pod_links(&pod), ["eth0"], "{text}: only the default network");
        let st = statuses(&w, "default", &name);
        assert_eq!(st.len(), 1, "{text}: {st:?}");
        assert_eq!(st[0]["default"], true);
        let events = w.events("default", &name);
        assert!(events.contains("InvalidNetworksAnnotation") && events.contains(reason), "{text}: {events}");
        w.del(&cid, &pod, ("default", &name)).expect_ok();
        w.assert_nothing_left(&[&pod]);
    }
}

pub fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

#[track_caller]
pub fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
