//! The KEP's per-pod status (`pod.status.networks`), published by the agent as the
//! `plexus.dev/pod-networks-status` annotation until a runtime can report it.
//!
//! One entry per IP family per attachment, in attachment order: the KEP allows "only 1 IP
//! address per family (v4, v6) per PodNetwork", so an attachment contributes the first IPv4 and
//! the first IPv6 address the pod got from its result (v4 first), each a bare address without
//! prefix length, as `pod.status.podIPs` writes them. An attachment without an address has one
//! entry without `ip`. `name` is the PodNetwork's name, also for an attachment made through a
//! PodNetworkAttachment (as in the KEP's example). `isDefaultGW` is written only when true: on
//! the entries of the attachment that holds the pod's default route of that entry's family.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::cni::result::CniResult;
use crate::spec::status::pod_addresses;

/// One entry of the status: the KEP's `NetworkStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNetworkStatus {
    /// The PodNetwork's name.
    pub name: String,
    pub interface_name: String,
    /// A bare address (`10.0.0.20`, `2011::233`); absent when the attachment has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The interface holding this address holds the pod's default route of its family.
    #[serde(default, rename = "isDefaultGW", skip_serializing_if = "is_false")]
    pub is_default_gw: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the engine knows about one attachment when it reports it.
#[derive(Debug, Clone, Copy)]
pub struct StatusInput<'a> {
    /// The PodNetwork the attachment is on (the PodNetworkAttachment's, for one made through
    /// an attachment).
    pub pod_network: &'a str,
    /// The interface in the pod.
    pub interface_name: &'a str,
    /// The attachment's CNI result, when the plugin gave one.
    pub result: Option<&'a CniResult>,
    /// The attachment holds the pod's IPv4 default route.
    pub holds_default_v4: bool,
    /// The attachment holds the pod's IPv6 default route.
    pub holds_default_v6: bool,
}

/// The status entries of the pod's attachments, in their order.
pub fn pod_networks_status(inputs: &[StatusInput]) -> Vec<PodNetworkStatus> {
    inputs.iter().flat_map(attachment_status).collect()
}

/// The entries of one attachment: its first IPv4 address, then its first IPv6 address, or one
/// entry without an address.
fn attachment_status(input: &StatusInput) -> Vec<PodNetworkStatus> {
    let addresses = input.result.map(pod_addresses).unwrap_or_default();
    let first = |v4: bool| addresses.iter().find(|a| a.is_ipv4() == v4).copied();
    let entry = |ip: Option<IpAddr>, is_default_gw: bool| PodNetworkStatus {
        name: input.pod_network.to_owned(),
        interface_name: input.interface_name.to_owned(),
        ip: ip.map(|a| a.to_string()),
        is_default_gw,
    };
    let mut entries = Vec::with_capacity(2);
    if let Some(v4) = first(true) {
        entries.push(entry(Some(v4), input.holds_default_v4));
    }
    if let Some(v6) = first(false) {
        entries.push(entry(Some(v6), input.holds_default_v6));
    }
    if entries.is_empty() {
        entries.push(entry(None, input.holds_default_v4 || input.holds_default_v6));
    }
    entries
}

/// The annotation value: the entries as one compact JSON list.
pub fn annotation_value(statuses: &[PodNetworkStatus]) -> String {
    serde_json::to_string(statuses).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: serde_json::Value) -> CniResult {
        CniResult::parse(&v, "1.0.0").unwrap()
    }

    fn input<'a>(
        pod_network: &'a str,
        interface_name: &'a str,
        result: Option<&'a CniResult>,
    ) -> StatusInput<'a> {
        StatusInput { pod_network, interface_name, result, holds_default_v4: false, holds_default_v6: false }
    }

    fn json_of(inputs: &[StatusInput]) -> serde_json::Value {
        serde_json::from_str(&annotation_value(&pod_networks_status(inputs))).unwrap()
    }

    fn single(address: &str) -> CniResult {
        result(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/var/run/netns/p"}],
                      "ips": [{"address": address, "interface": 0}]}))
    }

    /// The KEP's example status, from the results its three networks would give.
    #[test]
    fn the_keps_example() {
        let default = single("192.168.5.54/24");
        let dataplane = single("10.0.0.20/24");
        let fast = single("2011::233/64");
        let inputs = [
            StatusInput {
                holds_default_v4: true,
                holds_default_v6: true,
                ..input("default", "eth0", Some(&default))
            },
            input("dataplane1", "net1", Some(&dataplane)),
            // Attached through the PodNetworkAttachment my-interface-fast-net: the PodNetwork's name.
            input("fast-net", "net2", Some(&fast)),
        ];
        assert_eq!(
            annotation_value(&pod_networks_status(&inputs)),
            r#"[{"name":"default","interfaceName":"eth0","ip":"192.168.5.54","isDefaultGW":true},"#
                .to_owned()
                + r#"{"name":"dataplane1","interfaceName":"net1","ip":"10.0.0.20"},"#
                + r#"{"name":"fast-net","interfaceName":"net2","ip":"2011::233"}]"#
        );
    }

    #[test]
    fn dual_stack_gives_one_entry_per_family_v4_first() {
        // The result lists IPv6 first, and a second address of each family.
        let r = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "sandbox": "/p"}],
            "ips": [
                {"address": "2001:db8::5/64", "interface": 0},
                {"address": "2001:db8::6/64", "interface": 0},
                {"address": "10.1.0.5/16", "interface": 0, "gateway": "10.1.0.1"},
                {"address": "10.1.0.6/16", "interface": 0}
            ]
        }));
        assert_eq!(
            json_of(&[input("blue", "net1", Some(&r))]),
            json!([
                {"name": "blue", "interfaceName": "net1", "ip": "10.1.0.5"},
                {"name": "blue", "interfaceName": "net1", "ip": "2001:db8::5"}
            ])
        );
    }

    #[test]
    fn is_default_gw_follows_the_family_of_the_default_route() {
        let r = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "sandbox": "/p"}],
            "ips": [{"address": "10.1.0.5/16", "interface": 0}, {"address": "2001:db8::5/64", "interface": 0}]
        }));
        let both =
            StatusInput { holds_default_v4: true, holds_default_v6: true, ..input("blue", "net1", Some(&r)) };
        let v4 = StatusInput { holds_default_v4: true, ..input("blue", "net1", Some(&r)) };
        let v6 = StatusInput { holds_default_v6: true, ..input("blue", "net1", Some(&r)) };
        let flags =
            |i: StatusInput| pod_networks_status(&[i]).iter().map(|s| s.is_default_gw).collect::<Vec<_>>();
        assert_eq!(flags(both), [true, true]);
        assert_eq!(flags(v4), [true, false]);
        assert_eq!(flags(v6), [false, true]);
        assert_eq!(flags(input("blue", "net1", Some(&r))), [false, false]);
        // The key is written only when true.
        assert_eq!(
            json_of(&[v6]),
            json!([
                {"name": "blue", "interfaceName": "net1", "ip": "10.1.0.5"},
                {"name": "blue", "interfaceName": "net1", "ip": "2001:db8::5", "isDefaultGW": true}
            ])
        );
    }

    #[test]
    fn a_default_route_of_a_family_without_an_address_marks_no_entry() {
        let r = single("10.1.0.5/16");
        let v6_only = StatusInput { holds_default_v6: true, ..input("blue", "net1", Some(&r)) };
        assert_eq!(json_of(&[v6_only]), json!([{"name": "blue", "interfaceName": "net1", "ip": "10.1.0.5"}]));
    }

    #[test]
    fn an_attachment_without_addresses_has_one_entry_without_ip() {
        let no_ips =
            result(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/p"}]}));
        for r in [None, Some(&no_ips)] {
            assert_eq!(
                json_of(&[input("blue", "net1", r)]),
                json!([{"name": "blue", "interfaceName": "net1"}])
            );
            // A device route without an address can still hold the default route.
            let gw = StatusInput { holds_default_v6: true, ..input("blue", "net1", r) };
            assert_eq!(
                json_of(&[gw]),
                json!([{"name": "blue", "interfaceName": "net1", "isDefaultGW": true}])
            );
        }
    }

    #[test]
    fn only_the_pods_addresses_count() {
        // The bridge's address on the host and an address on a second sandbox interface are not
        // the attachment's address in the pod (as in the NPWG network-status).
        let r = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "br0"}, {"name": "veth1"}, {"name": "net1", "sandbox": "/p"}, {"name": "net9", "sandbox": "/p"}],
            "ips": [
                {"address": "10.0.0.1/24", "interface": 0},
                {"address": "10.9.0.5/24", "interface": 3},
                {"address": "10.0.0.5/24", "interface": 2}
            ]
        }));
        assert_eq!(
            json_of(&[input("blue", "net1", Some(&r))]),
            json!([{"name": "blue", "interfaceName": "net1", "ip": "10.0.0.5"}])
        );
    }

    #[test]
    fn old_results_give_their_addresses_too() {
        let r = result(
            json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.5/16"}, "ip6": {"ip": "2001:db8::5/64"}}),
        );
        let ips: Vec<_> =
            pod_networks_status(&[input("blue", "net1", Some(&r))]).into_iter().map(|s| s.ip).collect();
        assert_eq!(ips, [Some("10.1.0.5".to_owned()), Some("2001:db8::5".to_owned())]);
        let unbound =
            result(json!({"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "2001:db8::7/64"}]}));
        let ips: Vec<_> =
            pod_networks_status(&[input("blue", "net1", Some(&unbound))]).into_iter().map(|s| s.ip).collect();
        assert_eq!(ips, [Some("2001:db8::7".to_owned())]);
    }

    #[test]
    fn entries_keep_the_attachment_order() {
        let a = single("2001:db8::1/64");
        let b = single("10.0.0.2/24");
        let names: Vec<_> = pod_networks_status(&[
            input("zeta", "net1", Some(&a)),
            input("alpha", "net2", Some(&b)),
            input("mid", "net3", None),
        ])
        .into_iter()
        .map(|s| (s.name, s.interface_name))
        .collect();
        assert_eq!(
            names,
            [
                ("zeta".to_owned(), "net1".to_owned()),
                ("alpha".into(), "net2".into()),
                ("mid".into(), "net3".into())
            ]
        );
    }

    #[test]
    fn no_attachments_is_an_empty_list() {
        assert_eq!(pod_networks_status(&[]), vec![]);
        assert_eq!(annotation_value(&[]), "[]");
    }

    #[test]
    fn the_annotation_reads_back() {
        let r = single("10.0.0.20/24");
        let statuses = pod_networks_status(&[
            StatusInput { holds_default_v4: true, ..input("blue", "net1", Some(&r)) },
            input("red", "net2", None),
        ]);
        let back: Vec<PodNetworkStatus> = serde_json::from_str(&annotation_value(&statuses)).unwrap();
        assert_eq!(back, statuses);
        assert_eq!(
            back[0],
            PodNetworkStatus {
                name: "blue".into(),
                interface_name: "net1".into(),
                ip: Some("10.0.0.20".into()),
                is_default_gw: true
            }
        );
    }
}
