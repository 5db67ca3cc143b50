//! Section 3. NetworkAttachmentDefinition object.

use plexus_agent::catalog::manifest::parse_objects;
use plexus_agent::cni::config::NetworkConfigList;
use plexus_agent::spec::resolve::resolve_network_config;
use plexus_agent::spec::selection::parse_selection;
use plexus_tests::{status_of, Netns, Recorder, World};
use serde_json::{json, Value};

use super::support::{
    address_in, assert_add_refused, assert_annotations_ignored, bridge_list, bridge_text, write_manifest, POD,
};

/// The spec's own YAML examples 3.2.1 to 3.2.4 are read as NADs; spec.config is a string.
#[test]
fn spec_3_2_nad_object_definition() {
    let examples = r#"
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
spec:
  config: '{
    "cniVersion": "0.3.0",
    "name": "a-bridge-network",
    "type": "bridge",
    "bridge": "br0",
    "isGateway": true,
    "ipam": {
      "type": "host-local",
      "subnet": "192.168.5.0/24",
      "dataDir": "/mnt/cluster-ipam"
    }
  }'
---
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: another-bridge-network
spec:
  config: '{
    "cniVersion": "0.3.0",
    "name": "another-bridge-network",
    "plugins": [
      {"type": "bridge", "bridge": "br0", "ipam": {"type": "host-local", "subnet": "192.168.5.0/24"}},
      {"type": "port-forwarding"},
      {"type": "tuning", "sysctl": {"net.ipv4.conf.all.log_martians": "1"}}
    ]
  }'
---
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: thick-network
spec:
  config: '{
    "cniVersion": "0.3.0",
    "type": "awesome-plugin"
  }'
---
apiVersion: "k8s.cni.cncf.io/v1"
kind: NetworkAttachmentDefinition
metadata:
  name: implementation-known
"#;
    let nads = parse_objects(examples).unwrap().nads;
    let names: Vec<&str> = nads.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(
        names,
        ["a-bridge-network", "another-bridge-network", "thick-network", "implementation-known"]
    );
    assert!(nads.iter().all(|n| n.namespace == "default"), "no namespace: the default one");
    assert!(nads[3].config.is_none(), "3.2.4 has no spec");
    let lists: Vec<NetworkConfigList> =
        nads[..3].iter().map(|n| resolve_network_config(n, &[]).unwrap().0).collect();
    assert_eq!(lists[0].plugin_type(0), "bridge");
    assert_eq!(lists[0].plugins[0]["ipam"]["subnet"], "192.168.5.0/24");
    assert_eq!((lists[1].plugins.len(), lists[1].plugin_type(2)), (3, "tuning"));
    assert_eq!((lists[2].name.as_str(), lists[2].plugin_type(0)), ("thick-network", "awesome-plugin"));
    // Config "string" per the Go definition: an object there is not a valid NAD.
    let err = parse_objects(
        "kind: NetworkAttachmentDefinition\nmetadata: {name: x}\nspec: {config: {type: bridge}}\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("must be a string"), "{err}");
}

/// A NAD whose spec holds no valid key attaches and detaches the network the
/// implementation knows by the NAD's name (an on-disk config of that name).
#[test]
fn kernel_spec_3_2_no_spec_keys_attaches_network_known_by_name() {
    let mut w = World::new();
    write_manifest(
        &w,
        "nads",
        "default_known.json",
        &json!({"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": "known", "namespace": "default"}, "spec": {}}),
    );
    w.write_netconf("known.conflist", &bridge_text(&w, "known", "br-known", "10.10.4.0/24", &[]));
    w.write_pod("default", "p", Some("known"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.4.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Names are DNS-1123 label units joined by dots; 63 characters per unit is only a
/// recommendation, so a longer unit is still a valid name. Invalid names make the
/// annotation invalid (and ignored).
#[test]
fn kernel_spec_3_3_nad_names_are_dns1123_label_units() {
    let long_unit = "a".repeat(64);
    for ok in
        ["attachment-name", "example-namespace/attachment-name", "a", "0net", "sriov.vendor-a", &long_unit]
    {
        assert!(parse_selection(ok).is_ok(), "{ok} is a valid reference: {:?}", parse_selection(ok));
    }
    // A 64-character unit is a real network that a pod can select.
    let mut w = World::new();
    w.write_nad("default", &long_unit, Some(&bridge_text(&w, "long", "br-long", "10.10.5.0/24", &[])));
    w.write_pod("default", "p", Some(&long_unit));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.5.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
    drop(w);
    let reason = "not a valid NetworkAttachmentDefinition name";
    assert_annotations_ignored(&[
        ("Net-B", reason),
        ("net_b", reason),
        ("-net-b", reason),
        ("net-b-", reason),
        ("default/net..b", reason),
        (r#"[{"name":"Net-B"}]"#, reason),
    ]);
}

/// Rule 1: spec.config is used, even when an on-disk config carries the same name.
#[test]
fn kernel_spec_3_4_1_rule_1_spec_config_first() {
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue", "br-spec", "10.10.1.0/24", &[])));
    w.write_netconf("blue.conflist", &bridge_text(&w, "blue", "br-disk", "10.10.9.0/24", &[]));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    let node_links = w.node.link_names();
    assert!(
        node_links.contains(&"br-spec".into()) && !node_links.contains(&"br-disk".into()),
        "{node_links:?}"
    );
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// A single (non-list) bridge config named `name`, as a `.conf` file holds it.
fn single_config(w: &World, name: &str, bridge: &str, subnet: &str) -> Value {
    let mut single = bridge_list(w, name, bridge, subnet, &[])["plugins"][0].clone();
    single["cniVersion"] = json!("1.0.0");
    single["name"] = json!(name);
    single
}

/// Rule 2: without spec.config, the on-disk configlist named after the NAD, even though a
/// single config of that name sorts first.
#[test]
fn kernel_spec_3_4_1_rule_2_on_disk_configlist() {
    let mut w = World::new();
    w.write_nad("default", "blue", None);
    let single = single_config(&w, "blue", "br-conf", "10.10.3.0/24");
    w.write_netconf("10-blue.conf", &single.to_string());
    w.write_netconf("20-blue.conflist", &bridge_text(&w, "blue", "br-list", "10.10.2.0/24", &[]));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.2.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Rule 3: without spec.config or a configlist, the on-disk single config of that name.
#[test]
fn kernel_spec_3_4_1_rule_3_on_disk_config() {
    let mut w = World::new();
    w.write_nad("default", "blue", None);
    let single = single_config(&w, "blue", "br-conf", "10.10.3.0/24");
    w.write_netconf("blue.conf", &single.to_string());
    w.write_netconf("other.conflist", &bridge_text(&w, "other", "br-other", "10.10.9.0/24", &[]));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.3.");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Rule 4: no spec.config and no on-disk config of that name: the request fails, and
/// nothing (not even the default network) stays attached.
#[test]
fn kernel_spec_3_4_1_rule_4_no_config_fails() {
    let mut w = World::new();
    w.write_nad("default", "ghost", None);
    w.write_netconf("other.conflist", &bridge_text(&w, "other", "br-other", "10.10.9.0/24", &[]));
    w.write_pod("default", "p", Some("ghost"));
    w.write_pod("default", "q", Some("no-such-nad"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    let out = w.add("c1", &pod, POD);
    assert_add_refused(&w, &out, &pod, 7, &["default/ghost", "no spec.config"]);
    let out = w.add("c2", &pod, ("default", "q"));
    assert_add_refused(&w, &out, &pod, 7, &["default/no-such-nad", "does not exist"]);
}

/// A config without 'name' reaches the delegate with the NAD's name, for a single "thick"
/// plugin config (the spec's 3.4.2.1 example verbatim) and for a configlist.
#[test]
fn kernel_spec_3_4_2_name_injected_from_nad() {
    let rec = Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    w.write_nad("default", "a-bridge-network", Some(r#"{"cniVersion": "0.3.0", "type": "recorder"}"#));
    let mut list = bridge_list(&w, "thick-list", "br-thick", "10.10.1.0/24", &[Recorder::plugin("in-list")]);
    list.as_object_mut().unwrap().remove("name");
    w.write_nad("default", "thick-list", Some(&list.to_string()));
    w.write_pod("default", "p", Some("a-bridge-network,thick-list"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    let adds: Vec<_> = rec.calls().into_iter().filter(|c| c.command == "ADD").collect();
    assert_eq!(adds.len(), 2, "{adds:?}");
    assert_eq!(
        adds[0].config,
        json!({"cniVersion": "0.3.0", "name": "a-bridge-network", "type": "recorder"})
    );
    assert_eq!(adds[1].config["name"], "thick-list");
    address_in(&pod, "net2", "10.10.1.");
    w.del("c1", &pod, POD).expect_ok();
    assert!(rec.calls().iter().filter(|c| c.command == "DEL").all(|c| c.config["name"].is_string()));
    w.assert_nothing_left(&[&pod]);
}

/// Every NAD must have a name: a manifest without one is refused with the reason.
#[test]
fn spec_3_4_3_nad_must_have_a_name() {
    for text in [
        "kind: NetworkAttachmentDefinition\nmetadata: {namespace: default}\nspec: {config: '{}'}\n",
        r#"{"kind":"NetworkAttachmentDefinition","metadata":{"name":""},"spec":{"config":"{}"}}"#,
    ] {
        let err = parse_objects(text).unwrap_err().to_string();
        assert!(err.contains("metadata.name"), "{err}");
    }
}

/// Matching names are only recommended: a spec.config named differently still attaches,
/// and the status reports the NAD.
#[test]
fn kernel_spec_3_4_3_config_name_may_differ_from_nad_name() {
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue-cni", "br-blue", "10.10.1.0/24", &[])));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    assert_eq!(status_of(&w.network_status("default", "p"), "net1")["name"], "default/blue");
    w.del("c1", &pod, POD).expect_ok();
    w.assert_nothing_left(&[&pod]);
}
