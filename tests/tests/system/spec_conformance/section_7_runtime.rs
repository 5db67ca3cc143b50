//! Section 7. Runtime and implementation considerations.

use std::time::Duration;

use plexus_tests::{Netns, Recorder, World};
use serde_json::{json, Value};

use super::support::{
    address_in, assert_add_refused, bridge_list, bridge_text, cni_with_config, now_ns, pod_links,
    set_default_network, wait_for, POD,
};

/// Each plugin of a configlist gets the list's name and cniVersion, whatever its own
/// object says.
#[test]
fn kernel_spec_7_1_name_and_cni_version_injected() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let liar = Recorder::plugin_with("r", json!({"name": "not-the-list", "cniVersion": "0.3.1"}));
    let mut list = bridge_list(&w, "net-b", "br-b", "10.10.2.0/24", &[liar]);
    list["cniVersion"] = json!("0.4.0");
    w.write_nad("default", "net-b", Some(&list.to_string()));
    w.write_pod("default", "p", Some("net-b"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    w.del("c1", &pod, POD).expect_ok();
    let calls = rec.calls_of("r");
    assert_eq!(calls.len(), 2);
    for c in &calls {
        assert_eq!(
            (c.config["name"].as_str(), c.config["cniVersion"].as_str()),
            (Some("net-b"), Some("0.4.0")),
            "{}",
            c.command
        );
    }
    // The 0.4.0 bridge result arrived as prevResult, in the list's version.
    assert_eq!(calls[0].config["prevResult"]["cniVersion"], "0.4.0");
    w.assert_nothing_left(&[&pod]);
}

/// ADD runs the plugins in order, each with the previous result; DEL runs them in reverse
/// with the cached result; the runtime gets the result in the version it asked for.
#[test]
fn kernel_spec_7_1_configlist_invoked_per_cni_spec() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let mut list = bridge_list(&w, "net-b", "br-b", "10.10.2.0/24", &[Recorder::plugin("last")]);
    list["plugins"].as_array_mut().unwrap().insert(0, Recorder::plugin("first"));
    w.write_nad("default", "net-b", Some(&list.to_string()));
    w.write_pod("default", "p", Some("net-b"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let addr = address_in(&pod, "net1", "10.10.2.");
    w.del("c1", &pod, POD).expect_ok();
    let calls = rec.calls();
    let seq: Vec<(&str, &str)> = calls.iter().map(|c| (c.command.as_str(), c.tag.as_str())).collect();
    assert_eq!(seq, [("ADD", "first"), ("ADD", "last"), ("DEL", "last"), ("DEL", "first")]);
    assert!(calls[0].config.get("prevResult").is_none(), "the first plugin has no previous result");
    let bridge_result = &calls[1].config["prevResult"];
    assert_eq!(bridge_result["ips"][0]["address"], addr.as_str(), "the bridge's result is chained");
    for del in &calls[2..] {
        assert_eq!(&del.config["prevResult"], bridge_result, "DEL gets the cached result");
    }
    w.assert_nothing_left(&[&pod]);

    for version in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let pod = Netns::new("pxpod");
        let cid = format!("v{}", version.replace('.', ""));
        let out = w.cni_versioned("ADD", &cid, &pod, POD, version).expect_ok();
        assert_eq!(out["cniVersion"], version);
        let ip = &out["ips"][0];
        assert_eq!(ip["address"], address_in(&pod, "eth0", "10.88.0.").as_str());
        assert_eq!(ip.get("version").is_some(), version < "1.0.0", "{version}: {out}");
        w.cni_versioned("DEL", &cid, &pod, POD, version).expect_ok();
        w.assert_nothing_left(&[&pod]);
    }
}

/// "net-a,bad,net-c": bad fails (its bridge attached, the plugin after it failed), the ADD
/// fails with the plugin's error, and net-c is never attempted.
fn failing_setup(rec: &Recorder) -> World {
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad(
        "default",
        "net-a",
        Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[Recorder::plugin("a")])),
    );
    let fail = Recorder::plugin_with("bad", json!({"failOn": ["ADD"]}));
    w.write_nad("default", "bad", Some(&bridge_text(&w, "bad", "br-bad", "10.10.2.0/24", &[fail])));
    w.write_nad(
        "default",
        "net-c",
        Some(&bridge_text(&w, "net-c", "br-c", "10.10.3.0/24", &[Recorder::plugin("c")])),
    );
    w.write_pod("default", "p", Some("net-a,bad,net-c"));
    w.start_agent();
    w
}

#[test]
fn kernel_spec_7_2_attachment_failure_fails_setup_and_skips_the_rest() {
    let rec = Recorder::new();
    let w = failing_setup(&rec);
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert!(!out.ok());
    assert_eq!(out.code(), Some(123), "the delegate's own code: {}", out.stdout);
    assert!(out.msg().contains("default/bad") && out.msg().contains("told to fail ADD"), "{}", out.msg());
    assert!(rec.calls_of("c").is_empty(), "net-c was attempted: {:?}", rec.calls_of("c"));
    assert!(!w.node.link_names().contains(&"br-c".into()), "net-c's bridge was created");
    let events = w.events("default", "p");
    assert!(events.contains("AttachmentFailed") && events.contains("default/bad"), "{events}");
    w.assert_nothing_left(&[&pod]);
}

/// Everything attempted by the failed ADD (the default network, net-a, and the partly
/// attached bad) is torn down; what was never attempted gets no DEL either.
#[test]
fn kernel_spec_7_2_attempted_attachments_are_torn_down() {
    let rec = Recorder::new();
    let w = failing_setup(&rec);
    let pod = Netns::new("pxpod");
    assert!(!w.add("c1", &pod, POD).ok());
    let dels: Vec<(String, String)> =
        rec.calls().into_iter().filter(|c| c.command == "DEL").map(|c| (c.tag, c.ifname)).collect();
    assert_eq!(dels, [("bad".to_owned(), "net2".to_owned()), ("a".to_owned(), "net1".to_owned())]);
    assert_eq!(pod_links(&pod), Vec::<String>::new());
    assert_eq!(w.ipam_allocations(), Vec::<String>::new());
    // The runtime's DEL after the failed ADD has nothing left to do, and succeeds.
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// The default network fails (macvlan on a missing master): the ADD fails and no selected
/// network is attempted.
#[test]
fn kernel_spec_7_2_default_network_failure_fails_setup() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let default = json!({"cniVersion": "1.0.0", "name": "cluster", "plugins": [
        {"type": "macvlan", "master": "nosuchdev0",
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/24"}]],
                  "dataDir": w.path("ipam").join("cluster")}}
    ]});
    w.write_default_network("10-cluster.conflist", &default.to_string());
    w.write_nad(
        "default",
        "blue",
        Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[Recorder::plugin("blue")])),
    );
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert!(!out.ok());
    assert!(out.code().is_some(), "a CNI error: {}", out.stdout);
    assert!(out.msg().contains("attachment cluster") && out.msg().contains("macvlan"), "{}", out.stdout);
    assert!(rec.calls().is_empty(), "a selected network was attempted: {:?}", rec.calls());
    assert!(!w.node.link_names().contains(&"br-blue".into()));
    w.assert_nothing_left(&[&pod]);
}

/// "net-a,bad,net-c" where bad's DEL fails while a flag file exists.
fn failing_teardown(rec: &Recorder) -> (World, Netns, std::path::PathBuf) {
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let flag = w.path("fail-del");
    w.write_nad("default", "net-a", Some(&bridge_text(&w, "net-a", "br-a", "10.10.1.0/24", &[])));
    let fail = Recorder::plugin_with("bad", json!({"failOn": ["DEL"], "failFlag": flag}));
    w.write_nad("default", "bad", Some(&bridge_text(&w, "bad", "br-bad", "10.10.2.0/24", &[fail])));
    w.write_nad("default", "net-c", Some(&bridge_text(&w, "net-c", "br-c", "10.10.3.0/24", &[])));
    w.write_pod("default", "p", Some("net-a,bad,net-c"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    assert_eq!(pod_links(&pod), ["eth0", "net1", "net2", "net3"]);
    std::fs::write(&flag, "").unwrap();
    (w, pod, flag)
}

/// Teardown runs newest first (net-c, bad, net-a, default): bad's failure does not stop
/// net-a and the default network from being detached.
#[test]
fn kernel_spec_7_2_teardown_continues_past_failure() {
    let rec = Recorder::new();
    let (w, pod, _flag) = failing_teardown(&rec);
    assert!(!w.del("c1", &pod, POD).ok());
    let links = pod_links(&pod);
    assert!(
        !links.iter().any(|l| ["eth0", "net1", "net3"].contains(&l.as_str())),
        "still attached: {links:?}"
    );
    let held: Vec<String> = w.ipam_allocations().into_iter().filter(|a| !a.starts_with("bad/")).collect();
    assert_eq!(held, Vec::<String>::new(), "addresses of detached networks are released");
    assert!(rec.calls_of("bad").iter().any(|c| c.command == "DEL" && c.failed));
}

/// The failed detachment is reported as an error naming it, its record is kept, and a
/// later DEL finishes the job.
#[test]
fn kernel_spec_7_2_teardown_failure_is_reported() {
    let rec = Recorder::new();
    let (w, pod, flag) = failing_teardown(&rec);
    let out = w.del("c1", &pod, POD);
    assert!(!out.ok(), "a failed detachment must fail the DEL");
    assert!(out.code().is_some(), "a CNI error: {}", out.stdout);
    assert!(out.msg().contains("default/bad") && out.msg().contains("told to fail DEL"), "{}", out.msg());
    assert!(!w.state_files().is_empty(), "the failed attachment stays recorded for a retry");
    std::fs::remove_file(&flag).unwrap();
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// ADD and DEL of one container never overlap, even when the DEL arrives mid-ADD; another
/// container's ADD runs meanwhile.
#[test]
fn kernel_spec_7_3_operations_for_one_container_are_serialized() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    set_default_network(&w, &[Recorder::plugin_with("slow", json!({"sleepMs": 700}))]);
    w.write_pod("default", "p", None);
    w.write_pod("default", "q", None);
    w.start_agent();
    let (a, b) = (Netns::new("pxpod"), Netns::new("pxpod"));
    let (del_sent, add2_sent) = std::thread::scope(|s| {
        let add1 = s.spawn(|| w.add("c1", &a, POD));
        // The record is written before the first delegate runs: the ADD holds the container.
        wait_for("c1's ADD to start", Duration::from_secs(5), || {
            w.state_files().iter().any(|f| f.starts_with("c1@"))
        });
        let del_sent = now_ns();
        let del1 = s.spawn(|| w.del("c1", &a, POD));
        let add2_sent = now_ns();
        let add2 = s.spawn(|| w.add("c2", &b, ("default", "q")));
        add1.join().unwrap().expect_ok();
        del1.join().unwrap().expect_ok();
        add2.join().unwrap().expect_ok();
        (del_sent, add2_sent)
    });
    let calls = rec.calls_of("slow");
    let find = |cid: &str, cmd: &str| {
        calls
            .iter()
            .find(|c| c.container_id == cid && c.command == cmd)
            .unwrap_or_else(|| panic!("{cid} {cmd}: {calls:?}"))
    };
    let (add1, del1, add2) = (find("c1", "ADD"), find("c1", "DEL"), find("c2", "ADD"));
    assert!(del_sent < add1.end_ns, "the DEL must have been sent while the ADD ran");
    assert!(
        !add1.overlaps(del1) && add1.end_ns <= del1.start_ns,
        "DEL ran inside the ADD: {add1:?} {del1:?}"
    );
    assert!(add2_sent < add1.end_ns && add1.overlaps(add2), "different containers may run in parallel");
    assert_eq!(pod_links(&a), Vec::<String>::new(), "the DEL came last and removed everything");
    w.del("c2", &b, ("default", "q")).expect_ok();
    w.assert_nothing_left(&[&a, &b]);
}

/// A pod may select its own namespace's networks and those of allowed namespaces
/// ("default" unless configured); anything else fails the ADD, leaving nothing behind.
#[test]
fn kernel_spec_7_4_disallowed_network_fails() {
    let run = |allow: Option<&str>| {
        let mut w = World::new();
        if let Some(ns) = allow {
            w.agent_args.push(format!("--allow-namespace={ns}"));
        }
        w.write_nad("secret", "vault", Some(&bridge_text(&w, "vault", "br-vault", "10.10.6.0/24", &[])));
        w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-blue", "10.10.1.0/24", &[])));
        w.write_nad("team-a", "own", Some(&bridge_text(&w, "own", "br-own", "10.10.2.0/24", &[])));
        w.write_pod("team-a", "p", Some("own,default/blue,secret/vault"));
        w.write_pod("team-a", "q", Some("own,default/blue"));
        w.start_agent();
        w
    };
    let w = run(None);
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, ("team-a", "p"));
    assert_add_refused(&w, &out, &pod, 7, &["secret/vault", "not in the agent's allowed list"]);
    assert!(w.events("team-a", "p").contains("NetworkRefused"));
    w.add("c2", &pod, ("team-a", "q")).expect_ok();
    assert_eq!(pod_links(&pod), ["eth0", "net1", "net2"], "own namespace and the default allow-list");
    w.del("c2", &pod, ("team-a", "q")).expect_ok();
    w.assert_nothing_left(&[&pod]);
    drop(w);

    let w = run(Some("default,secret"));
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, ("team-a", "p")).expect_ok();
    address_in(&pod, "net3", "10.10.6.");
    w.del("c1", &pod, ("team-a", "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// kubelet's runtimeConfig reaches the default network's plugins (those declaring the
/// capability) and no plugin of a selected network, which only gets what its own
/// selection asks for.
#[test]
fn kernel_spec_7_5_runtime_config_only_for_default_network() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let caps = json!({"capabilities": {"portMappings": true, "bandwidth": true, "ips": true}});
    set_default_network(&w, &[Recorder::plugin_with("default", caps.clone())]);
    w.write_nad(
        "default",
        "blue",
        Some(&bridge_text(
            &w,
            "blue",
            "br-blue",
            "10.10.1.0/24",
            &[Recorder::plugin_with("blue", caps.clone())],
        )),
    );
    w.write_nad(
        "default",
        "red",
        Some(&bridge_text(&w, "red", "br-red", "10.10.2.0/24", &[Recorder::plugin_with("red", caps)])),
    );
    let annotation =
        r#"[{"name": "blue"}, {"name": "red", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}]"#;
    w.write_pod("default", "p", Some(annotation));
    w.start_agent();
    let kubelet = json!({
        "portMappings": [{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000},
    });
    let mut config: Value = serde_json::from_str(&w.plexus_config("1.0.0")).unwrap();
    config["runtimeConfig"] = kubelet.clone();
    let pod = Netns::new("pxpod");
    cni_with_config(&w, "ADD", "c1", &pod, POD, &config.to_string()).expect_ok();
    let rc = |tag: &str| rec.calls_of(tag)[0].config.get("runtimeConfig").cloned();
    assert_eq!(rc("default"), Some(kubelet));
    assert_eq!(rc("blue"), None, "a selected network got kubelet's runtimeConfig");
    assert_eq!(
        rc("red"),
        Some(json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}))
    );
    cni_with_config(&w, "DEL", "c1", &pod, POD, &config.to_string()).expect_ok();
    assert_eq!(
        rec.calls()
            .iter()
            .filter(|c| c.command == "DEL" && c.tag == "blue" && c.config.get("runtimeConfig").is_some())
            .count(),
        0
    );
    w.assert_nothing_left(&[&pod]);
}
