//! Conformance of plexus to the NPWG multi-network spec v1.1, sections 3 to 7: one test
//! per MUST / SHALL / "must fail" requirement, named after its section.
//!
//! Parsing and validation requirements drive the agent's pure spec functions with real
//! annotation text, manifests, CNI configs and CNI results. Everything about attaching,
//! ordering, failures, capabilities, runtimeConfig, CNI_IFNAME, injection, status, the
//! default network, readiness and restrictions runs the real agent, the real `plexus` shim
//! and the reference CNI plugins in network namespaces. Where a test must see what a
//! delegate received, a recording plugin is chained after the real one ([`Recorder`]).
//!
//! Traceability (section: requirement -> test):
//!
//! - 3.2: the NAD object shall be metadata + spec.config (a string of CNI JSON) ->
//!   `spec_3_2_nad_object_definition`
//! - 3.2: without valid spec keys, the network known by the NAD's name shall be attached ->
//!   `spec_3_2_no_spec_keys_attaches_network_known_by_name`
//! - 3.3: NAD names must be made of DNS-1123 label units (63 characters per unit only recommended) ->
//!   `spec_3_3_nad_names_are_dns1123_label_units`
//! - 3.4.1: rule 1: spec.config is used when present ->
//!   `spec_3_4_1_rule_1_spec_config_first`
//! - 3.4.1: rule 2: else an on-disk configlist named after the NAD ->
//!   `spec_3_4_1_rule_2_on_disk_configlist`
//! - 3.4.1: rule 3: else an on-disk config named after the NAD ->
//!   `spec_3_4_1_rule_3_on_disk_config`
//! - 3.4.1: rule 4: otherwise the network request must fail ->
//!   `spec_3_4_1_rule_4_no_config_fails`
//! - 3.4.2: a missing CNI 'name' shall be filled with the NAD's name ->
//!   `spec_3_4_2_name_injected_from_nad`
//! - 3.4.3: each NAD must have a name ->
//!   `spec_3_4_3_nad_must_have_a_name`
//! - 3.4.3: NAD name and CNI config name need not match ->
//!   `spec_3_4_3_config_name_may_differ_from_nad_name`
//! - 4.1: the annotation name shall be k8s.v1.cni.cncf.io/networks ->
//!   `spec_4_1_annotation_name`
//! - 4.1: both formats must be supported: comma-delimited ->
//!   `spec_4_1_1_comma_delimited_format`
//! - 4.1: both formats must be supported: JSON list ->
//!   `spec_4_1_2_json_list_format`
//! - 4.1.2.1: non-standard keys use reverse domain names (and do not break the annotation) ->
//!   `spec_4_1_2_1_reverse_domain_keys_accepted`
//! - 4.1.2.1.1: "name" is required ->
//!   `spec_4_1_2_1_1_name_is_required`
//! - 4.1.2.1.3: invalid "ips" makes the annotation invalid and ignored ->
//!   `spec_4_1_2_1_3_invalid_ips_ignore_annotation`
//! - 4.1.2.1.3.2: "ips" goes into runtimeConfig ->
//!   `spec_4_1_2_1_3_2_ips_passed_in_runtime_config`
//! - 4.1.2.1.3.2: no plugin with the "ips" capability: the attachment must fail ->
//!   `spec_4_1_2_1_3_2_ips_without_capability_fails`
//! - 4.1.2.1.4: invalid "mac" makes the annotation invalid and ignored ->
//!   `spec_4_1_2_1_4_invalid_mac_ignores_annotation`
//! - 4.1.2.1.4.2: "mac" goes into runtimeConfig ->
//!   `spec_4_1_2_1_4_2_mac_passed_in_runtime_config`
//! - 4.1.2.1.4.2: no plugin with the "mac" capability: the attachment must fail ->
//!   `spec_4_1_2_1_4_2_mac_without_capability_fails`
//! - 4.1.2.1.5: invalid "interface" makes the annotation invalid and ignored ->
//!   `spec_4_1_2_1_5_invalid_interface_ignores_annotation`
//! - 4.1.2.1.5: an interface name already in use must fail the attachment ->
//!   `spec_4_1_2_1_5_interface_in_use_fails`
//! - 4.1.2.1.5.1: "interface" sets CNI_IFNAME ->
//!   `spec_4_1_2_1_5_1_interface_sets_cni_ifname`
//! - 4.1.2.1.6.2: "cni-args" must reach the plugin as "args", over the config's own args ->
//!   `spec_4_1_2_1_6_2_cni_args_override_config_args`
//! - 4.1.2.1.7: invalid "portMappings" makes the annotation invalid and ignored ->
//!   `spec_4_1_2_1_7_invalid_port_mappings_ignore_annotation`
//! - 4.1.2.1.7: port, protocol value rules (1-65535, TCP/UDP/SCTP any case, TCP default) ->
//!   `spec_4_1_2_1_7_port_mapping_values`
//! - 4.1.2.1.7.2: "portMappings" goes into runtimeConfig ->
//!   `spec_4_1_2_1_7_2_port_mappings_passed_in_runtime_config`
//! - 4.1.2.1.7 / .7.2: no plugin with the "portMappings" capability: the attachment must fail ->
//!   `spec_4_1_2_1_7_2_port_mappings_without_capability_fails`
//! - 4.1.2.1.8: invalid "bandwidth" makes the annotation invalid and ignored ->
//!   `spec_4_1_2_1_8_invalid_bandwidth_ignores_annotation`
//! - 4.1.2.1.8.2: "bandwidth" goes into runtimeConfig ->
//!   `spec_4_1_2_1_8_2_bandwidth_passed_in_runtime_config`
//! - 4.1.2.1.8 / .8.2: no plugin with the "bandwidth" capability: the attachment must fail ->
//!   `spec_4_1_2_1_8_2_bandwidth_without_capability_fails`
//! - 4.1.2.1.9: "default-route" on more than one item (or invalid): annotation invalid and ignored ->
//!   `spec_4_1_2_1_9_default_route_on_two_networks_ignores_annotation`
//! - 4.1.2.1.9: "default-route" moves the pod's default route to that attachment ->
//!   `spec_4_1_2_1_9_default_route_moves_to_selected_network`
//! - 4.1.2.1: (implementation option) strict mode fails instead of ignoring ->
//!   `spec_4_1_2_invalid_annotation_fails_in_strict_mode`
//! - 4.2: the same network twice: separate operations, separate status entries ->
//!   `spec_4_2_same_network_twice_is_two_attachments`
//! - 4.2.1: all operations of one attachment use the same [container, network, ifname] ->
//!   `spec_4_2_1_operations_use_the_same_tuple`
//! - 4.2.1: generated CNI_IFNAMEs must be unique per [container, network] ->
//!   `spec_4_2_1_generated_ifnames_are_unique`
//! - 5: status annotation name, value a JSON list of maps, one per attachment ->
//!   `spec_5_status_annotation_is_a_json_list_of_maps`
//! - 5.1 / 5.1.1: status shall come from the first sandbox interface of the result ->
//!   `spec_5_1_1_status_from_first_sandbox_interface`
//! - 5.2: the default network must have an entry with 'default' true ->
//!   `spec_5_2_default_network_entry`
//! - 5.3: non-standard status keys must use reverse domain names ->
//!   `spec_5_3_status_keys_are_standard`
//! - 5.3.1: "name" is the NAD reference or the default network's name ->
//!   `spec_5_3_1_status_name`
//! - 5.3.2: "interface" shall name the interface in the pod ->
//!   `spec_5_3_2_status_interface_is_in_the_pod`
//! - 5.3.3: "ips" shall be the addresses assigned to the pod ->
//!   `spec_5_3_3_status_ips_are_pod_addresses`
//! - 5.3.4: "mac" shall be the interface's address; "mac" needs "interface" ->
//!   `spec_5_3_4_status_mac_is_the_interface_address`
//! - 5.3.5: "default" is required and only one entry may be true ->
//!   `spec_5_3_5_exactly_one_default_entry`
//! - 5.3.6: "dns" shall hold the DNS information of the result ->
//!   `spec_5_3_6_status_dns_from_result`
//! - 5.3.6.4: "default-route" shall be set when the selection had it ->
//!   `spec_5_3_6_4_status_default_route`
//! - 6: every pod must be attached to the cluster default network ->
//!   `spec_6_every_pod_gets_the_default_network`
//! - 6.1: the CNI config is written only once the default network is ready ->
//!   `spec_6_1_config_written_once_default_network_ready`
//! - 6.1.2: operations must be blocked until the default network is ready ->
//!   `spec_6_1_2_add_blocked_until_default_network_ready`
//! - 6.2: the default network must be attached before selected networks ->
//!   `spec_6_2_default_network_attached_first`
//! - 7.1: name and cniVersion of the configlist must be injected into each plugin ->
//!   `spec_7_1_name_and_cni_version_injected`
//! - 7.1: configlists must be invoked per the CNI spec (prevResult, reverse DEL, result version) ->
//!   `spec_7_1_configlist_invoked_per_cni_spec`
//! - 7.2: a failed selected attachment shall fail setup at once; later ones not attempted ->
//!   `spec_7_2_attachment_failure_fails_setup_and_skips_the_rest`
//! - 7.2: a failed default network attachment shall fail setup ->
//!   `spec_7_2_default_network_failure_fails_setup`
//! - 7.2: every attempted attachment must be torn down ->
//!   `spec_7_2_attempted_attachments_are_torn_down`
//! - 7.2: one failed detachment shall not prevent the next ones ->
//!   `spec_7_2_teardown_continues_past_failure`
//! - 7.2: a failed detachment shall be reported to the runtime ->
//!   `spec_7_2_teardown_failure_is_reported`
//! - 7.3: operations for one container must not run in parallel ->
//!   `spec_7_3_operations_for_one_container_are_serialized`
//! - 7.4: a NAD the pod may not select must fail the operation ->
//!   `spec_7_4_disallowed_network_fails`
//! - 7.5: runtimeConfig from the runtime must reach only the default network ->
//!   `spec_7_5_runtime_config_only_for_default_network`

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use plexus_agent::catalog::manifest::parse_objects;
use plexus_agent::cni::config::NetworkConfigList;
use plexus_agent::cni::result::CniResult;
use plexus_agent::spec::delegate_conf::secondary_delegate;
use plexus_agent::spec::resolve::resolve_network_config;
use plexus_agent::spec::selection::parse_selection;
use plexus_agent::spec::status::{network_status, StatusInput};
use plexus_agent::spec::{NETWORKS_ANNOTATION, NETWORK_STATUS_ANNOTATION};
use plexus_tests::{CniOutput, Netns, Recorder, World};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

const POD: (&str, &str) = ("default", "p");

/// A bridge + host-local configlist with `more` plugins chained after the bridge, as JSON.
fn bridge_list(w: &World, name: &str, bridge: &str, subnet: &str, more: &[Value]) -> Value {
    let mut v: Value = serde_json::from_str(&w.bridge_config(name, bridge, subnet, true)).unwrap();
    v["plugins"].as_array_mut().unwrap().extend(more.iter().cloned());
    v
}

/// [`bridge_list`] as text, for `write_nad` and friends.
fn bridge_text(w: &World, name: &str, bridge: &str, subnet: &str, more: &[Value]) -> String {
    bridge_list(w, name, bridge, subnet, more).to_string()
}

/// The default network (`cluster`, bridge cni0 10.88.0.0/24) with `more` plugins chained.
fn set_default_network(w: &World, more: &[Value]) {
    w.write_default_network("10-cluster.conflist", &bridge_text(w, "cluster", "cni0", "10.88.0.0/24", more));
}

/// Interfaces of a pod other than `lo`, sorted.
fn pod_links(pod: &Netns) -> Vec<String> {
    let mut v: Vec<String> = pod.link_names().into_iter().filter(|n| n != "lo").collect();
    v.sort();
    v
}

fn mac_of(pod: &Netns, ifname: &str) -> String {
    pod.links()
        .iter()
        .find(|l| l["ifname"] == ifname)
        .and_then(|l| l["address"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The single non-link-local address of an interface, which must be in `prefix`.
#[track_caller]
fn address_in(pod: &Netns, ifname: &str, prefix: &str) -> String {
    let addrs = pod.addresses(ifname);
    assert_eq!(addrs.len(), 1, "{ifname}: {addrs:?}");
    assert!(addrs[0].starts_with(prefix), "{ifname} has {addrs:?}, expected an address in {prefix}*");
    addrs[0].clone()
}

fn statuses(w: &World, ns: &str, pod: &str) -> Vec<Value> {
    w.network_status(ns, pod).as_array().cloned().unwrap_or_else(|| panic!("network-status is not a list"))
}

fn status_of<'a>(st: &'a [Value], ifname: &str) -> &'a Value {
    st.iter().find(|s| s["interface"] == ifname).unwrap_or_else(|| panic!("no status for {ifname}: {st:?}"))
}

/// A raw manifest into the NAD or pod directory (for shapes `write_nad`/`write_pod` cannot
/// produce).
fn write_manifest(w: &World, sub: &str, file: &str, v: &Value) {
    std::fs::write(w.path(sub).join(file), v.to_string()).unwrap();
}

/// A CNI call through the real shim with a config of the test's choosing (runtimeConfig).
fn cni_with_config(
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

#[track_caller]
fn assert_clean(w: &World, pods: &[&Netns]) {
    assert_eq!(w.leftovers(pods), Vec::<String>::new(), "leftovers");
}

/// A failed ADD: non-zero exit, the CNI error `code`, a message containing `msg`, nothing
/// attached in the pod and nothing left on the node.
#[track_caller]
fn assert_add_refused(w: &World, out: &CniOutput, pod: &Netns, code: u64, msg: &[&str]) {
    assert!(!out.ok(), "ADD should fail: {}", out.stdout);
    assert_eq!(out.code(), Some(code), "{}", out.stdout);
    for m in msg {
        assert!(out.msg().contains(m), "message {:?} should contain {m:?}", out.msg());
    }
    assert_eq!(pod_links(pod), Vec::<String>::new(), "nothing may stay attached");
    assert_clean(w, &[pod]);
}

/// A network whose bridge declares every capability the annotation can ask for, so that
/// an annotation that is *invalid* is the only reason for it not to be attached.
fn all_caps_network(w: &World, name: &str) -> String {
    let mut v = bridge_list(w, name, "br-caps", "10.10.7.0/24", &[]);
    v["plugins"][0]["capabilities"] =
        json!({"ips": true, "mac": true, "portMappings": true, "bandwidth": true});
    v.to_string()
}

/// Spec: an invalid annotation "shall be invalid and ignored". For every case the parser
/// refuses the text with `reason`, and a real ADD of a pod carrying it succeeds with the
/// default network only and records the reason as a pod event.
#[track_caller]
fn assert_annotations_ignored(cases: &[(&str, &str)]) {
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
        assert_clean(&w, &[&pod]);
    }
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

#[track_caller]
fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------
// 3. NetworkAttachmentDefinition object
// ---------------------------------------------------------------------------------------

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
fn spec_3_2_no_spec_keys_attaches_network_known_by_name() {
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
    assert_clean(&w, &[&pod]);
}

/// Names are DNS-1123 label units joined by dots; 63 characters per unit is only a
/// recommendation, so a longer unit is still a valid name. Invalid names make the
/// annotation invalid (and ignored).
#[test]
fn spec_3_3_nad_names_are_dns1123_label_units() {
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
    assert_clean(&w, &[&pod]);
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
fn spec_3_4_1_rule_1_spec_config_first() {
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
    assert_clean(&w, &[&pod]);
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
fn spec_3_4_1_rule_2_on_disk_configlist() {
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
    assert_clean(&w, &[&pod]);
}

/// Rule 3: without spec.config or a configlist, the on-disk single config of that name.
#[test]
fn spec_3_4_1_rule_3_on_disk_config() {
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
    assert_clean(&w, &[&pod]);
}

/// Rule 4: no spec.config and no on-disk config of that name: the request fails, and
/// nothing (not even the default network) stays attached.
#[test]
fn spec_3_4_1_rule_4_no_config_fails() {
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
fn spec_3_4_2_name_injected_from_nad() {
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
    assert_clean(&w, &[&pod]);
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
fn spec_3_4_3_config_name_may_differ_from_nad_name() {
    let mut w = World::new();
    w.write_nad("default", "blue", Some(&bridge_text(&w, "blue-cni", "br-blue", "10.10.1.0/24", &[])));
    w.write_pod("default", "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, POD).expect_ok();
    address_in(&pod, "net1", "10.10.1.");
    assert_eq!(status_of(&statuses(&w, "default", "p"), "net1")["name"], "default/blue");
    w.del("c1", &pod, POD).expect_ok();
    assert_clean(&w, &[&pod]);
}

// ---------------------------------------------------------------------------------------
// 4. Network attachment selection annotation
// ---------------------------------------------------------------------------------------

/// Only the annotation named k8s.v1.cni.cncf.io/networks selects networks.
#[test]
fn spec_4_1_annotation_name() {
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
    assert_clean(&w, &[&a, &b]);
}

/// `name` references the pod's namespace, `namespace/name` another one.
#[test]
fn spec_4_1_1_comma_delimited_format() {
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
    assert_clean(&w, &[&pod]);
}

/// The JSON list format, with "namespace" given, empty (the pod's) and absent.
#[test]
fn spec_4_1_2_json_list_format() {
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
    assert_clean(&w, &[&pod]);
}

/// Keys other implementations write (reverse domain names) do not invalidate the annotation.
#[test]
fn spec_4_1_2_1_reverse_domain_keys_accepted() {
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
    assert_clean(&w, &[&pod]);
}

#[test]
fn spec_4_1_2_1_1_name_is_required() {
    assert_annotations_ignored(&[
        (r#"[{"namespace": "default"}]"#, "has no \"name\""),
        (r#"[{"name": "net-b"}, {"interface": "net9"}]"#, "has no \"name\""),
        (r#"[{"name": 5}]"#, "\"name\" must be a string"),
        (r#"[{"name": ""}]"#, "not a valid NetworkAttachmentDefinition name"),
    ]);
}

#[test]
fn spec_4_1_2_1_3_invalid_ips_ignore_annotation() {
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
fn spec_4_1_2_1_3_2_ips_passed_in_runtime_config() {
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
        status_of(&statuses(&w, "default", "p"), "net1")["ips"].as_array().unwrap().clone();
    st_ips.sort_by_key(|v| v.to_string());
    assert_eq!(st_ips, [json!("10.2.2.42/24"), json!("10.2.3.7/24")]);
    w.del("c1", &pod, POD).expect_ok();
    assert_clean(&w, &[&pod]);
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
fn spec_4_1_2_1_3_2_ips_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "ips": ["10.10.2.42/24"]}]"#, "ips");
}

#[test]
fn spec_4_1_2_1_4_invalid_mac_ignores_annotation() {
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
fn spec_4_1_2_1_4_2_mac_passed_in_runtime_config() {
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
    assert_clean(&w, &[&pod]);
}

#[test]
fn spec_4_1_2_1_4_2_mac_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "mac": "02:23:45:67:89:01"}]"#, "mac");
}

#[test]
fn spec_4_1_2_1_5_invalid_interface_ignores_annotation() {
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
fn spec_4_1_2_1_5_interface_in_use_fails() {
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
fn spec_4_1_2_1_5_1_interface_sets_cni_ifname() {
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
    assert_eq!(status_of(&statuses(&w, "default", "p"), "data0")["name"], "default/net-b");
    w.del("c1", &pod, POD).expect_ok();
    let calls = rec.calls_of("b");
    assert_eq!(
        calls.iter().map(|c| (c.command.as_str(), c.ifname.as_str())).collect::<Vec<_>>(),
        [("ADD", "data0"), ("DEL", "data0")]
    );
    assert_clean(&w, &[&pod]);
}

/// "cni-args" reach the plugins as CONVENTIONS' args.cni, winning over the config's own
/// args.cni keys, which are otherwise kept.
#[test]
fn spec_4_1_2_1_6_2_cni_args_override_config_args() {
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
    assert_clean(&w, &[&a, &b]);
}

#[test]
fn spec_4_1_2_1_7_invalid_port_mappings_ignore_annotation() {
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
fn spec_4_1_2_1_7_2_port_mappings_passed_in_runtime_config() {
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
    assert_clean(&w, &[&pod]);
}

#[test]
fn spec_4_1_2_1_7_2_port_mappings_without_capability_fails() {
    assert_capability_required(
        r#"[{"name": "net-b", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}]"#,
        "portMappings",
    );
}

#[test]
fn spec_4_1_2_1_8_invalid_bandwidth_ignores_annotation() {
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
fn spec_4_1_2_1_8_2_bandwidth_passed_in_runtime_config() {
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
    assert_clean(&w, &[&pod]);
}

#[test]
fn spec_4_1_2_1_8_2_bandwidth_without_capability_fails() {
    assert_capability_required(r#"[{"name": "net-b", "bandwidth": {"egressRate": 1000000}}]"#, "bandwidth");
}

#[test]
fn spec_4_1_2_1_9_default_route_on_two_networks_ignores_annotation() {
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
fn spec_4_1_2_1_9_default_route_moves_to_selected_network() {
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
    assert_clean(&w, &[&a, &b]);
}

/// plexus's option: with --strict-annotations an invalid annotation fails the ADD with
/// the reason, instead of being ignored.
#[test]
fn spec_4_1_2_invalid_annotation_fails_in_strict_mode() {
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
fn spec_4_2_same_network_twice_is_two_attachments() {
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
    assert_eq!(entries[0]["ips"], json!([one]));
    assert_eq!(entries[1]["ips"], json!([two]));
    w.del("c1", &pod, POD).expect_ok();
    assert_clean(&w, &[&pod]);
}

/// ADD and DEL of each attachment run with the same [container ID, network name,
/// CNI_IFNAME], also when the DEL comes from a restarted agent.
#[test]
fn spec_4_2_1_operations_use_the_same_tuple() {
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
    assert_clean(&w, &[&pod]);
}

/// Generated names never collide with each other or with requested ones.
#[test]
fn spec_4_2_1_generated_ifnames_are_unique() {
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
    assert_clean(&w, &[&pod]);
}

// ---------------------------------------------------------------------------------------
// 5. Network attachment status annotation
// ---------------------------------------------------------------------------------------

/// The DNS settings of the "blue" network, which the bridge plugin returns in its result.
fn blue_dns() -> Value {
    json!({"nameservers": ["10.10.1.53"], "domain": "blue.example", "search": ["blue.example", "example"]})
}

/// A pod with the default network and two selected ones, for the status tests.
struct StatusPod {
    w: World,
    pod: Netns,
    st: Vec<Value>,
}

impl StatusPod {
    fn new(annotation: &str) -> Self {
        let mut w = World::new();
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
        assert_clean(&self.w, &[&self.pod]);
    }
}

#[test]
fn spec_5_status_annotation_is_a_json_list_of_maps() {
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
fn spec_5_1_1_status_from_first_sandbox_interface() {
    let p = StatusPod::new("blue");
    let blue = &p.st[1];
    assert_eq!(blue["interface"], "net1");
    assert_eq!(blue["mac"], mac_of(&p.pod, "net1"));
    assert_eq!(blue["ips"], json!(p.pod.addresses("net1")));
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
    });
    assert_eq!(
        (st.interface.as_deref(), st.mac.as_deref(), st.ips.as_slice()),
        (Some("net1"), Some("02:00:00:00:00:03"), ["10.0.0.5/24".to_owned()].as_slice())
    );
}

#[test]
fn spec_5_2_default_network_entry() {
    let p = StatusPod::new("blue");
    let defaults: Vec<&Value> = p.st.iter().filter(|s| s["default"] == true).collect();
    assert_eq!(defaults.len(), 1, "{:?}", p.st);
    assert_eq!(defaults[0]["name"], "cluster");
    assert_eq!(defaults[0]["interface"], "eth0");
    assert_eq!(defaults[0]["ips"], json!(p.pod.addresses("eth0")));
    p.finish();
}

/// Every status key is one the spec defines, or a reverse domain name.
#[test]
fn spec_5_3_status_keys_are_standard() {
    let p = StatusPod::new(r#"[{"name": "blue", "default-route": ["10.10.1.1"]}, {"name": "red"}]"#);
    let defined = ["name", "interface", "ips", "mac", "default", "dns", "default-route"];
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
fn spec_5_3_1_status_name() {
    let p = StatusPod::new("blue,default/red");
    let names: Vec<&Value> = p.st.iter().map(|s| &s["name"]).collect();
    assert_eq!(names, [&json!("cluster"), &json!("default/blue"), &json!("default/red")]);
    p.finish();
}

#[test]
fn spec_5_3_2_status_interface_is_in_the_pod() {
    let p = StatusPod::new(r#"[{"name": "blue", "interface": "data0"}, {"name": "red"}]"#);
    let links = pod_links(&p.pod);
    let ifnames: Vec<&str> = p.st.iter().map(|s| s["interface"].as_str().unwrap()).collect();
    assert_eq!(ifnames, ["eth0", "data0", "net1"]);
    assert!(ifnames.iter().all(|i| links.contains(&i.to_string())), "{ifnames:?} vs {links:?}");
    p.finish();
}

#[test]
fn spec_5_3_3_status_ips_are_pod_addresses() {
    let p = StatusPod::new("blue,red");
    for s in &p.st {
        let ifname = s["interface"].as_str().unwrap();
        assert_eq!(s["ips"], json!(p.pod.addresses(ifname)), "{s}");
    }
    // Not the bridge's (gateway) address the bridge plugin also reports.
    assert!(!p.st[1]["ips"].to_string().contains("10.10.1.1/"), "{}", p.st[1]);
    p.finish();
}

#[test]
fn spec_5_3_4_status_mac_is_the_interface_address() {
    let p = StatusPod::new("blue,red");
    for s in &p.st {
        let ifname = s["interface"].as_str().expect("\"mac\" present needs \"interface\"");
        assert_eq!(s["mac"], mac_of(&p.pod, ifname), "{s}");
    }
    p.finish();
}

#[test]
fn spec_5_3_5_exactly_one_default_entry() {
    let p = StatusPod::new("blue,red,blue");
    assert_eq!(p.st.len(), 4);
    assert!(p.st.iter().all(|s| s["default"].is_boolean()), "'default' is required: {:?}", p.st);
    assert_eq!(p.st.iter().filter(|s| s["default"] == true).count(), 1);
    p.finish();
}

/// The bridge plugin returns the config's "dns" in its result; the status carries it.
#[test]
fn spec_5_3_6_status_dns_from_result() {
    let p = StatusPod::new("blue,red");
    assert_eq!(p.st[1]["dns"], blue_dns());
    assert!(p.st[2].get("dns").is_none(), "no DNS in the result, none in the status: {}", p.st[2]);
    p.finish();
}

#[test]
fn spec_5_3_6_4_status_default_route() {
    let p = StatusPod::new(r#"[{"name": "blue", "default-route": ["10.10.1.1"]}, {"name": "red"}]"#);
    assert_eq!(p.st[1]["default-route"], json!(["10.10.1.1"]));
    assert!(p.st[2].get("default-route").is_none(), "{}", p.st[2]);
    assert!(p.st[0].get("default-route").is_none(), "the default network's is cleared: {}", p.st[0]);
    assert_eq!(p.pod.default_routes(), ["net1 10.10.1.1"]);
    p.finish();
}

// ---------------------------------------------------------------------------------------
// 6. Cluster-wide default network
// ---------------------------------------------------------------------------------------

/// With or without an annotation (even an invalid one), and without pod arguments at all,
/// the pod gets the default network, whose result is what the runtime receives.
#[test]
fn spec_6_every_pod_gets_the_default_network() {
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
    assert_clean(&w, &all);
}

/// plexus's own config appears in the runtime's directory only once the default network's
/// config exists.
#[test]
fn spec_6_1_config_written_once_default_network_ready() {
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
    assert_clean(&w, &[&pod]);
}

/// Without a default network, ADD answers "try again later" (11) and leaves nothing; once
/// the default network exists, the same ADD succeeds.
#[test]
fn spec_6_1_2_add_blocked_until_default_network_ready() {
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
    assert_clean(&w, &[&pod]);
}

/// The default network's delegates finish before the first selected network's start.
#[test]
fn spec_6_2_default_network_attached_first() {
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
    assert_clean(&w, &[&pod]);
}

// ---------------------------------------------------------------------------------------
// 7. Runtime and implementation considerations
// ---------------------------------------------------------------------------------------

/// Each plugin of a configlist gets the list's name and cniVersion, whatever its own
/// object says.
#[test]
fn spec_7_1_name_and_cni_version_injected() {
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
    assert_clean(&w, &[&pod]);
}

/// ADD runs the plugins in order, each with the previous result; DEL runs them in reverse
/// with the cached result; the runtime gets the result in the version it asked for.
#[test]
fn spec_7_1_configlist_invoked_per_cni_spec() {
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
    assert_clean(&w, &[&pod]);

    for version in ["0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let pod = Netns::new("pxpod");
        let cid = format!("v{}", version.replace('.', ""));
        let out = w.cni_versioned("ADD", &cid, &pod, POD, version).expect_ok();
        assert_eq!(out["cniVersion"], version);
        let ip = &out["ips"][0];
        assert_eq!(ip["address"], address_in(&pod, "eth0", "10.88.0.").as_str());
        assert_eq!(ip.get("version").is_some(), version < "1.0.0", "{version}: {out}");
        w.cni_versioned("DEL", &cid, &pod, POD, version).expect_ok();
        assert_clean(&w, &[&pod]);
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
fn spec_7_2_attachment_failure_fails_setup_and_skips_the_rest() {
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
    assert_clean(&w, &[&pod]);
}

/// Everything attempted by the failed ADD (the default network, net-a, and the partly
/// attached bad) is torn down; what was never attempted gets no DEL either.
#[test]
fn spec_7_2_attempted_attachments_are_torn_down() {
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
    assert_clean(&w, &[&pod]);
}

/// The default network fails (macvlan on a missing master): the ADD fails and no selected
/// network is attempted.
#[test]
fn spec_7_2_default_network_failure_fails_setup() {
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
    assert_clean(&w, &[&pod]);
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
fn spec_7_2_teardown_continues_past_failure() {
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
fn spec_7_2_teardown_failure_is_reported() {
    let rec = Recorder::new();
    let (w, pod, flag) = failing_teardown(&rec);
    let out = w.del("c1", &pod, POD);
    assert!(!out.ok(), "a failed detachment must fail the DEL");
    assert!(out.code().is_some(), "a CNI error: {}", out.stdout);
    assert!(out.msg().contains("default/bad") && out.msg().contains("told to fail DEL"), "{}", out.msg());
    assert!(!w.state_files().is_empty(), "the failed attachment stays recorded for a retry");
    std::fs::remove_file(&flag).unwrap();
    w.del("c1", &pod, POD).expect_ok();
    assert_clean(&w, &[&pod]);
}

/// ADD and DEL of one container never overlap, even when the DEL arrives mid-ADD; another
/// container's ADD runs meanwhile.
#[test]
fn spec_7_3_operations_for_one_container_are_serialized() {
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
    assert_clean(&w, &[&a, &b]);
}

/// A pod may select its own namespace's networks and those of allowed namespaces
/// ("default" unless configured); anything else fails the ADD, leaving nothing behind.
#[test]
fn spec_7_4_disallowed_network_fails() {
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
    assert_clean(&w, &[&pod]);
    drop(w);

    let w = run(Some("default,secret"));
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, ("team-a", "p")).expect_ok();
    address_in(&pod, "net3", "10.10.6.");
    w.del("c1", &pod, ("team-a", "p")).expect_ok();
    assert_clean(&w, &[&pod]);
}

/// kubelet's runtimeConfig reaches the default network's plugins (those declaring the
/// capability) and no plugin of a selected network, which only gets what its own
/// selection asks for.
#[test]
fn spec_7_5_runtime_config_only_for_default_network() {
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
    assert_clean(&w, &[&pod]);
}
