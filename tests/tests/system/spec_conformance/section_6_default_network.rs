//! Section 6. Cluster-wide default network.

use std::time::Duration;

use plexus_tests::{Netns, Recorder, World};
use serde_json::Value;

use super::support::{
    address_in, assert_add_refused, bridge_text, pod_links, set_default_network, wait_for, POD,
};

/// With or without an annotation (even an invalid one), and without pod arguments at all,
/// the pod gets the default network, whose result is what the runtime receives.
#[test]
fn kernel_spec_6_every_pod_gets_the_default_network() {
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[])));
    w.write_pod("default", "plain", None);
    w.write_pod("default", "multi", Some("blue"));
    w.write_pod("default", "broken", Some("[{"));
    w.start_agent();
    let mut pods = Vec::new();
    for (i, name) in ["plain", "multi", "broken"].into_iter().enumerate() {
        let pod = Netns::new("pxpod");
        let cid = format!("c{i}");
        let result = w.add(&cid, &pod, ("default", name)).expect_ok();
        let addr = address_in(&pod, "eth0", "10.88.0.");
        assert_eq!(
            result["ips"][0]["address"],
            addr.as_str(),
            "{name}: the runtime gets the default network's"
        );
        pods.push((cid, name, pod));
    }
    let bare = Netns::new("pxpod");
    let path = bare.path_str();
    let out = w.shim(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c9"),
            ("CNI_NETNS", &path),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "IgnoreUnknown=1"),
        ],
        &w.plexus_config("1.0.0"),
    );
    out.expect_ok();
    address_in(&bare, "eth0", "10.88.0.");
    for (cid, name, pod) in &pods {
        w.del(cid, pod, ("default", name)).expect_ok();
    }
    let out = w.shim(
        &[("CNI_COMMAND", "DEL"), ("CNI_CONTAINERID", "c9"), ("CNI_NETNS", &path), ("CNI_IFNAME", "eth0")],
        &w.plexus_config("1.0.0"),
    );
    out.expect_ok();
    let all: Vec<&Netns> = pods.iter().map(|p| &p.2).chain([&bare]).collect();
    w.assert_nothing_left(&all);
}

/// plexus's own config appears in the runtime's directory only once the default network's
/// config exists.
#[test]
fn kernel_spec_6_1_config_written_once_default_network_ready() {
    let mut w = World::new();
    std::fs::remove_file(w.path("default").join("10-cluster.conflist")).unwrap();
    w.start_agent();
    let ours = w.path("runtime").join("00-plexus.conflist");
    // The readiness loop runs every second: give it more than one round.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!ours.exists(), "written before the default network is ready");
    set_default_network(&w, &[]);
    wait_for("plexus's CNI config", Duration::from_secs(5), || ours.exists());
    let conf: Value = serde_json::from_str(&std::fs::read_to_string(&ours).unwrap()).unwrap();
    assert_eq!(conf["plugins"][0]["type"], "plexus");
    // Ready means a pod can be attached right away.
    w.write_pod("default", "p", None);
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "eth0", "10.88.0.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Without a default network, ADD answers "try again later" (11) and leaves nothing; once
/// the default network exists, the same ADD succeeds.
#[test]
fn kernel_spec_6_1_2_add_blocked_until_default_network_ready() {
    let mut w = World::new();
    std::fs::remove_file(w.path("default").join("10-cluster.conflist")).unwrap();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[])));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert_add_refused(&w, &out, &pod, 11, &["not ready"]);
    assert!(!w.node.link_names().contains(&"br-blue".into()), "no selected network was attempted");
    set_default_network(&w, &[]);
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(pod_links(&pod), ["eth0", "net1"]);
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// The default network's delegates finish before the first selected network's start.
#[test]
fn kernel_spec_6_2_default_network_attached_first() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    set_default_network(&w, &[Recorder::plugin("default")]);
    w.write_nad(
        "default",
        "blue",
        Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[Recorder::plugin("blue")])),
    );
    w.write_nad(
        "default",
        "red",
        Some(&bridge_text(&w, "red", "br-red", "10.10.2.0/24", &[Recorder::plugin("red")])),
    );
    // The selection lists the networks in an order unrelated to the default one.
    w.write_pod("default", "p", Some("red,blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let adds: Vec<_> = rec.calls().into_iter().filter(|c| c.command == "ADD").collect();
    assert_eq!(adds.iter().map(|c| c.tag.as_str()).collect::<Vec<_>>(), ["default", "red", "blue"]);
    assert!(adds[0].end_ns <= adds[1].start_ns, "default still running when {} started", adds[1].tag);
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}
