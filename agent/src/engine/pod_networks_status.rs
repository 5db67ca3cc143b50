//! The KEP status of a pod that asked for PodNetworks (`plexus.dev/pod-networks-status`),
//! from the record of its ADD: one entry per IP family per attachment, in attachment order,
//! `isDefaultGW` on the entries of the attachment that holds the pod's default route of
//! that family, as network-status' `default-route` says.

use std::net::IpAddr;

use crate::cni::result::CniResult;
use crate::podnetwork::status::{annotation_value, pod_networks_status, StatusInput};
use crate::spec::status::NetworkStatus;
use crate::state::ContainerRecord;

/// The annotation value; `statuses` is the record's network-status (one per attachment).
pub fn annotation(record: &ContainerRecord, statuses: &[NetworkStatus]) -> String {
    let results: Vec<Option<CniResult>> = record.attachments.iter().map(super::parsed_result).collect();
    let inputs: Vec<StatusInput> = record
        .attachments
        .iter()
        .zip(statuses)
        .zip(&results)
        .filter_map(|((a, status), result)| {
            let (v4, v6) = default_route_families(status.default_route.as_deref().unwrap_or_default());
            Some(StatusInput {
                pod_network: a.pod_network.as_deref()?,
                interface_name: &a.ifname,
                result: result.as_ref(),
                holds_default_v4: v4,
                holds_default_v6: v6,
            })
        })
        .collect();
    annotation_value(&pod_networks_status(&inputs))
}

/// Whether the gateways of a network-status `default-route` hold the IPv4 and the IPv6
/// default route.
fn default_route_families(gateways: &[String]) -> (bool, bool) {
    let parsed: Vec<IpAddr> = gateways.iter().filter_map(|g| g.parse().ok()).collect();
    (parsed.iter().any(IpAddr::is_ipv4), parsed.iter().any(IpAddr::is_ipv6))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{AttachmentRecord, FrontEnd};
    use serde_json::{json, Value};

    /// The engine's test attachment, asked for as the PodNetwork `pod_network`.
    fn attachment(pod_network: &str, network: &str, ifname: &str, result: Value) -> AttachmentRecord {
        AttachmentRecord {
            pod_network: Some(pod_network.into()),
            device: None,
            device_info: None,
            ipam_claim: None,
            ..crate::engine::tests::attachment(network, ifname, result, None)
        }
    }

    fn record(default_gw: Option<&[&str]>) -> ContainerRecord {
        let default = attachment(
            "default",
            "cluster",
            "eth0",
            json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/p"}],
                   "ips": [{"address": "10.88.0.5/24", "gateway": "10.88.0.1", "interface": 0},
                           {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0}],
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}),
        );
        let mut blue = attachment(
            "blue",
            "nets/blue",
            "net1",
            json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/p"}],
                   "ips": [{"address": "10.10.2.5/24", "gateway": "10.10.2.1", "interface": 0}]}),
        );
        blue.default_route = default_gw.map(|g| g.iter().map(|s| s.parse().unwrap()).collect());
        let bare = attachment("green", "green", "net2", json!({"cniVersion": "1.0.0"}));
        ContainerRecord {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/p".into(),
            cni_args: String::new(),
            pod: None,
            attachments: vec![default, blue, bare],
            complete: true,
            unconfirmed_del_failures: 0,
            front_end: FrontEnd::PodNetworks,
        }
    }

    fn status_of(record: &ContainerRecord) -> Value {
        let statuses = super::super::network_statuses(record);
        serde_json::from_str(&annotation(record, &statuses)).unwrap()
    }

    #[test]
    fn one_entry_per_family_and_the_default_network_holds_the_routes_by_default() {
        assert_eq!(
            status_of(&record(None)),
            json!([
                {"name": "default", "interfaceName": "eth0", "ip": "10.88.0.5", "isDefaultGW": true},
                {"name": "default", "interfaceName": "eth0", "ip": "fd00::5", "isDefaultGW": true},
                {"name": "blue", "interfaceName": "net1", "ip": "10.10.2.5"},
                {"name": "green", "interfaceName": "net2"}
            ])
        );
    }

    #[test]
    fn is_default_gw_moves_the_flag_of_the_family_it_took() {
        assert_eq!(
            status_of(&record(Some(&["10.10.2.1"]))),
            json!([
                {"name": "default", "interfaceName": "eth0", "ip": "10.88.0.5"},
                {"name": "default", "interfaceName": "eth0", "ip": "fd00::5", "isDefaultGW": true},
                {"name": "blue", "interfaceName": "net1", "ip": "10.10.2.5", "isDefaultGW": true},
                {"name": "green", "interfaceName": "net2"}
            ])
        );
    }

    #[test]
    fn npwg_attachments_have_no_entry() {
        let mut r = record(None);
        for a in &mut r.attachments {
            a.pod_network = None;
        }
        assert_eq!(status_of(&r), json!([]));
    }
}
