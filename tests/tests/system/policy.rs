//! The network attachment policy in standalone mode (`--nad-policy FILE`), end to end: the real
//! shim, a running agent, the reference plugins. Refused networks fail with code 7 and a
//! NetworkRefused event naming the rule, before anything is attached; allowed ones attach as
//! before; the file is followed while the agent runs.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use plexus_tests::world::bin;
use plexus_tests::{CniOutput, Netns, World};
use serde_json::json;

const TENANT: &str = "tenant";

/// Tenants may use bridges named br-* and macvlan on up0; the namespace `tenant` may not use
/// bridges at all but may use macvlan on up0.
const POLICY: &str = r#"
apiVersion: plexus.dev/v1alpha1
kind: NetworkAttachmentPolicy
metadata: {name: node-safety}
spec:
  rules:
    - name: everyone
      namespaces: ["*"]
      plugins: [bridge, host-local]
      interfaces:
        bridges: ["br-*"]
    - name: tenant-macvlan
      namespaces: [tenant]
      plugins: [bridge, macvlan, host-local]
      interfaces:
        bridges: ["br-*"]
        macvlanMasters: [up0]
"#;

fn macvlan_config(w: &World, name: &str, master: &str, subnet: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{
            "type": "macvlan",
            "master": master,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": w.path("ipam").join(name)}
        }]
    })
    .to_string()
}

fn ptp_config(w: &World) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "ptp-net",
        "type": "ptp",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.40.0.0/24"}]], "dataDir": w.path("ipam").join("ptp-net")}
    })
    .to_string()
}

fn write_policy(w: &World, text: &str) -> PathBuf {
    let path = w.path("policy.yaml");
    // Replaced by rename, as a ConfigMap update does.
    let tmp = w.path("policy.yaml.tmp");
    std::fs::write(&tmp, text).expect("writing the policy");
    std::fs::rename(&tmp, &path).expect("replacing the policy");
    path
}

fn start_with_policy(w: &mut World) {
    let path = write_policy(w, POLICY);
    w.agent_args.extend(["--nad-policy".into(), path.display().to_string()]);
    w.start_agent();
}

#[track_caller]
fn assert_refused(out: &CniOutput, needles: &[&str]) {
    assert_eq!(out.code(), Some(7), "expected code 7: {} {}", out.stdout, out.stderr);
    let msg = out.msg();
    for n in needles {
        assert!(msg.contains(n), "{n:?} not in: {msg}");
    }
}

fn links(pod: &Netns) -> Vec<String> {
    let mut l = pod.link_names();
    l.sort();
    l
}

#[test]
fn kernel_policy_refuses_a_plugin_type_a_master_and_the_nodes_bridge_with_an_event_and_leaves_nothing() {
    let mut w = World::new();
    w.master_link("up0");
    w.master_link("up1");
    w.write_nad(TENANT, "blue", Some(&w.bridge_config("blue", "br-blue", "10.10.1.0/24", true)));
    w.write_nad(TENANT, "mac-ok", Some(&macvlan_config(&w, "mac-ok", "up0", "10.20.0.0/24")));
    w.write_nad(TENANT, "mac-node", Some(&macvlan_config(&w, "mac-node", "up1", "10.21.0.0/24")));
    // The cluster default network's own bridge (cni0), named by a tenant.
    w.write_nad(TENANT, "node-bridge", Some(&w.bridge_config("node-bridge", "cni0", "10.22.0.0/24", false)));
    w.write_nad(TENANT, "ptp-net", Some(&ptp_config(&w)));
    w.write_nad("other", "mac-ok", Some(&macvlan_config(&w, "mac-ok", "up0", "10.23.0.0/24")));
    w.write_pod(TENANT, "good", Some("blue,mac-ok"));
    w.write_pod(TENANT, "bad-type", Some("blue,ptp-net"));
    w.write_pod(TENANT, "bad-master", Some("mac-ok,mac-node"));
    w.write_pod(TENANT, "bad-bridge", Some("node-bridge"));
    w.write_pod("other", "bad-default-rule", Some("mac-ok"));
    start_with_policy(&mut w);
    let pods: Vec<Netns> = (0..5).map(|_| Netns::new("pxpod")).collect();

    // Allowed networks attach as without a policy.
    w.add("c-good", &pods[0], (TENANT, "good")).expect_ok();
    assert_eq!(links(&pods[0]), ["eth0", "lo", "net1", "net2"]);
    assert!(w.events(TENANT, "good").is_empty(), "{}", w.events(TENANT, "good"));

    let cases = [
        (
            "c-type",
            (TENANT, "bad-type"),
            vec![r#"rule "tenant-macvlan""#, r#"plugin type "ptp""#, "namespace tenant", "tenant/ptp-net"],
        ),
        (
            "c-master",
            (TENANT, "bad-master"),
            vec![r#"node interface "up1" (macvlan "master")"#, "macvlanMasters: up0", "tenant/mac-node"],
        ),
        (
            "c-bridge",
            (TENANT, "bad-bridge"),
            vec![r#"node interface "cni0" (bridge "bridge")"#, "bridges: br-*", "tenant/node-bridge"],
        ),
        // Namespace `other` falls under the default rule, which has no macvlan.
        (
            "c-default",
            ("other", "bad-default-rule"),
            vec![r#"rule "everyone""#, r#"plugin type "macvlan""#, "namespace other"],
        ),
    ];
    for (i, (cid, pod, needles)) in cases.iter().enumerate() {
        let netns = &pods[i + 1];
        let out = w.add(cid, netns, *pod);
        assert_refused(&out, needles);
        assert!(out.msg().contains("NetworkAttachmentPolicy \"node-safety\""), "{}", out.msg());
        // Nothing was attached, not even the default network.
        assert_eq!(links(netns), ["lo"], "{cid}");
        let events = w.events(pod.0, pod.1);
        assert!(events.contains("NetworkRefused"), "{cid}: {events}");
        assert!(events.contains(needles[0]), "{cid}: the event names the rule: {events}");
        // The runtime's DEL after a failed ADD succeeds.
        w.del(cid, netns, *pod).expect_ok();
    }

    w.del("c-good", &pods[0], (TENANT, "good")).expect_ok();
    w.assert_nothing_left(&pods.iter().collect::<Vec<_>>());
}

#[test]
fn kernel_policy_file_changes_apply_without_restart_and_an_invalid_version_keeps_the_last_good_one() {
    let mut w = World::new();
    w.master_link("up1");
    w.write_nad(TENANT, "mac-node", Some(&macvlan_config(&w, "mac-node", "up1", "10.21.0.0/24")));
    w.write_pod(TENANT, "p", Some("mac-node"));
    start_with_policy(&mut w);
    let pod = Netns::new("pxpod");
    assert_refused(&w.add("c1", &pod, (TENANT, "p")), &["\"up1\""]);

    // An invalid version: logged, the last good one stays (still refused, not allowed).
    write_policy(&w, &POLICY.replace("namespaces: [tenant]", "namespaces: [Tenant_1]"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.agent_log().contains("the last valid version stays in force") {
        assert!(Instant::now() < deadline, "the invalid version was not reported:\n{}", w.agent_log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(w.agent_log().contains("\"Tenant_1\" is not a namespace name"), "{}", w.agent_log());
    assert_refused(&w.add("c1", &pod, (TENANT, "p")), &["\"up1\""]);

    // A valid new version allowing up1: applied.
    write_policy(&w, &POLICY.replace("macvlanMasters: [up0]", "macvlanMasters: [up0, \"up*\"]"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = w.add("c1", &pod, (TENANT, "p"));
        if out.ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the new policy was not applied: {}", out.stdout);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(links(&pod), ["eth0", "lo", "net1"]);
    w.del("c1", &pod, (TENANT, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Runs `plexus-agent run` with `--nad-policy policy` in the node namespace and returns its
/// exit status and output (it must exit by itself).
fn agent_exit(w: &World, policy: &Path) -> (bool, String) {
    let mut cmd = w.node.command(bin("plexus-agent"));
    cmd.arg("run")
        .arg("--socket")
        .arg(w.socket())
        .arg("--state-dir")
        .arg(w.path("state"))
        .arg("--default-network-dir")
        .arg(w.path("default"))
        .arg("--network-api-socket")
        .arg(w.network_api_socket())
        .arg("--metrics-addr")
        .arg("off")
        .arg("--nad-policy")
        .arg(policy)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("starting plexus-agent");
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent did not stop on an invalid policy");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("agent output");
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn kernel_an_invalid_or_missing_policy_file_stops_the_agent_at_start_saying_why() {
    let w = World::new();
    let bad = w.path("bad-policy.yaml");
    std::fs::write(&bad, POLICY.replace("plugins: [bridge, host-local]", "plugin: [bridge]")).unwrap();
    let (ok, out) = agent_exit(&w, &bad);
    assert!(!ok);
    assert!(out.contains("unknown field `plugin`") && out.contains("bad-policy.yaml"), "{out}");
    assert!(!w.socket().exists(), "no socket: the agent did not serve");

    let (ok, out) = agent_exit(&w, &w.path("missing.yaml"));
    assert!(!ok);
    assert!(out.contains("reading the network attachment policy") && out.contains("missing.yaml"), "{out}");
}
