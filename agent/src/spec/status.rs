//! The network-status annotation (spec 5) built from CNI results of any version.
//!
//! Written with the keys spec 5.3 defines (`name`, `interface`, `ips`, `mac`, `default`,
//! `dns`, `default-route`, `device-info`): keys without a period are reserved to the spec.
//! `ips` are bare addresses without prefix length, as the NetworkAttachmentDefinition client
//! library (which Multus uses and KubeVirt and other readers parse) writes them. Multus also
//! writes `mtu` (the interface's) and `gateway` (the gateways of the attachment's default
//! routes), which some tools read: [`StatusKeys::Multus`] adds them, the compatibility switch
//! (`--network-status-multus-keys`).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::cni::result::{CniResult, IpConfig};

/// One element of `k8s.v1.cni.cncf.io/network-status` (spec 5.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Bare addresses (`10.99.0.2`), as the client library writes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, rename = "default-route", skip_serializing_if = "Option::is_none")]
    pub default_route: Option<Vec<String>>,
    pub default: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsStatus>,
    /// The gateways of the default routes this attachment holds in the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
    /// The device behind the attachment, in the Device Information Specification's format
    /// (spec 5.3.7).
    #[serde(default, rename = "device-info", skip_serializing_if = "Option::is_none")]
    pub device_info: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
}

/// What the engine knows about one attachment when it reports it.
#[derive(Debug, Clone, Copy)]
pub struct StatusInput<'a> {
    pub name: &'a str,
    /// CNI_IFNAME the attachment ran with: the interface when the result cannot name it.
    pub ifname: &'a str,
    pub result: Option<&'a CniResult>,
    pub is_default: bool,
    /// The gateways of the attachment's default route, when it has one.
    pub default_route: Option<&'a [IpAddr]>,
    /// The gateways of the default routes the attachment holds in the pod.
    pub gateways: &'a [IpAddr],
    /// The attachment's device information, when it has a device (spec 5.3.7).
    pub device_info: Option<&'a serde_json::Value>,
}

/// Builds one status map from the first sandbox interface of the result (spec 5.1.1).
pub fn network_status(input: StatusInput<'_>) -> NetworkStatus {
    let mut st = NetworkStatus {
        name: input.name.to_owned(),
        default: input.is_default,
        default_route: input.default_route.map(|gws| gws.iter().map(ToString::to_string).collect()),
        gateway: input.gateways.iter().map(ToString::to_string).collect(),
        device_info: input.device_info.cloned(),
        ..Default::default()
    };
    let Some(result) = input.result else {
        // No result (allowed by CNI): the minimal map of spec 5.1.1.
        st.interface = Some(input.ifname.to_owned());
        return st;
    };
    match sandbox_interface(result) {
        Some(i) => {
            let iface = &result.interfaces[i];
            st.interface = Some(iface.name.clone());
            st.mac = iface.mac.clone().filter(|m| !m.is_empty());
            st.mtu = iface.mtu.filter(|m| *m > 0);
        }
        // Results before 0.3.0 have no interfaces: CNI_IFNAME names it (5.3.2.1).
        None => st.interface = Some(input.ifname.to_owned()),
    }
    st.ips = pod_addresses(result).iter().map(ToString::to_string).collect();
    let dns = &result.dns;
    if !dns.nameservers.is_empty() || dns.domain.is_some() || !dns.search.is_empty() {
        st.dns = Some(DnsStatus {
            nameservers: dns.nameservers.clone(),
            domain: dns.domain.clone(),
            search: dns.search.clone(),
        });
    }
    st
}

/// The interface of the result that is in the pod: the first sandbox interface, for results
/// that have interfaces (0.3.0 and later).
fn sandbox_interface(result: &CniResult) -> Option<usize> {
    let pre_interfaces = matches!(result.cni_version.as_str(), "0.1.0" | "0.2.0");
    result.first_sandbox_interface().filter(|_| !pre_interfaces)
}

/// The addresses an attachment gave the pod, in the result's order: those of its first sandbox
/// interface (spec 5.1.1) or, without one, those bound to no interface (5.3.3.1 rule 2).
pub fn pod_addresses(result: &CniResult) -> Vec<IpAddr> {
    pod_ip_configs(result).iter().map(|ip| ip.address.addr()).collect()
}

/// The result's entries of [`pod_addresses`], with their prefix lengths and gateways.
pub fn pod_ip_configs(result: &CniResult) -> Vec<&IpConfig> {
    let sandbox = sandbox_interface(result);
    let in_pod = |bound_to: Option<i64>| match sandbox {
        Some(i) => bound_to == Some(i as i64),
        None => bound_to.is_none_or(|idx| idx < 0),
    };
    result.ips.iter().filter(|ip| in_pod(ip.interface)).collect()
}

/// The gateways of the default routes a result installs, for the default network's
/// `default-route` when no selection takes the default route away from it.
pub fn default_gateways(result: &CniResult) -> Vec<IpAddr> {
    let mut gws: Vec<IpAddr> = result
        .routes
        .iter()
        .filter(|r| r.dst.prefix_len() == 0)
        .filter_map(|r| {
            r.gw.or_else(|| {
                result.ips.iter().find(|ip| ip.address.addr().is_ipv4() == r.dst.addr().is_ipv4())?.gateway
            })
        })
        .collect();
    gws.dedup();
    gws
}

/// Which keys the annotation's maps carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StatusKeys {
    /// The spec's keys only (5.3).
    #[default]
    Spec,
    /// The spec's and those Multus writes besides (`mtu`, `gateway`), for tools that read them.
    Multus,
}

/// The keys Multus writes that the spec does not define (and reserves, having no period).
pub const MULTUS_ONLY_KEYS: [&str; 2] = ["mtu", "gateway"];

/// The annotation value: a JSON list of status maps with `keys`.
pub fn annotation_value(statuses: &[NetworkStatus], keys: StatusKeys) -> String {
    let written: Vec<serde_json::Value> = statuses
        .iter()
        .filter_map(|s| serde_json::to_value(s).ok())
        .map(|mut v| {
            if keys == StatusKeys::Spec {
                if let Some(map) = v.as_object_mut() {
                    MULTUS_ONLY_KEYS.iter().for_each(|k| drop(map.remove(*k)));
                }
            }
            v
        })
        .collect();
    serde_json::to_string_pretty(&written).unwrap_or_else(|_| "[]".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: serde_json::Value) -> CniResult {
        CniResult::parse(&v, "1.0.0").unwrap()
    }

    fn input<'a>(r: Option<&'a CniResult>) -> StatusInput<'a> {
        StatusInput {
            name: "ns/net",
            ifname: "net1",
            result: r,
            is_default: false,
            default_route: None,
            gateways: &[],
            device_info: None,
        }
    }

    #[test]
    fn status_comes_from_the_first_sandbox_interface() {
        let r = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "br0", "mac": "02:00:00:00:00:01"},
                {"name": "veth1", "mac": "02:00:00:00:00:02"},
                {"name": "net1", "mac": "02:00:00:00:00:03", "mtu": 1400, "sandbox": "/var/run/netns/p"},
                {"name": "net9", "mac": "02:00:00:00:00:04", "sandbox": "/var/run/netns/p"}
            ],
            "ips": [
                {"address": "10.0.0.1/24", "interface": 0},
                {"address": "10.0.0.5/24", "interface": 2, "gateway": "10.0.0.1"},
                {"address": "2001:db8::5/64", "interface": 2},
                {"address": "10.9.0.5/24", "interface": 3}
            ],
            "dns": {"nameservers": ["10.0.0.1"], "search": ["example.com"]}
        }));
        let st = network_status(input(Some(&r)));
        assert_eq!(st.interface.as_deref(), Some("net1"));
        assert_eq!(st.mac.as_deref(), Some("02:00:00:00:00:03"));
        assert_eq!(st.ips, ["10.0.0.5", "2001:db8::5"]);
        assert_eq!(st.mtu, Some(1400));
        assert_eq!(st.dns.as_ref().unwrap().search, ["example.com"]);
    }

    #[test]
    fn without_sandbox_interfaces_ips_come_from_unbound_entries() {
        let r = result(json!({
            "cniVersion": "0.4.0",
            "interfaces": [{"name": "br0"}],
            "ips": [
                {"version": "4", "address": "10.0.0.1/24", "interface": 0},
                {"version": "4", "address": "10.0.0.7/24"},
                {"version": "4", "address": "10.0.0.8/24", "interface": -1}
            ]
        }));
        let st = network_status(input(Some(&r)));
        assert_eq!(st.ips, ["10.0.0.7", "10.0.0.8"]);
        assert_eq!(st.interface.as_deref(), Some("net1"));
        assert_eq!(st.mac, None);
    }

    #[test]
    fn old_results_use_ip4_ip6_and_the_cni_ifname() {
        let r = result(json!({
            "cniVersion": "0.2.0",
            "ip4": {"ip": "10.1.0.5/16", "gateway": "10.1.0.1"},
            "ip6": {"ip": "2001:db8::5/64"}
        }));
        let st = network_status(input(Some(&r)));
        assert_eq!(st.interface.as_deref(), Some("net1"));
        assert_eq!(st.ips, ["10.1.0.5", "2001:db8::5"]);
        assert_eq!(st.mac, None);
    }

    #[test]
    fn no_result_gives_the_minimal_map() {
        let st = network_status(input(None));
        assert_eq!(
            serde_json::to_value(&st).unwrap(),
            json!({"name":"ns/net","interface":"net1","default":false})
        );
    }

    /// The shape the NetworkAttachmentDefinition client library's `NetworkStatus` writes and
    /// parses: bare `ips`, `mtu` a number, `gateway` a list of bare addresses.
    #[test]
    fn the_entry_is_what_the_client_library_writes() {
        let r = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:03", "mtu": 9000, "sandbox": "/p"}],
            "ips": [{"address": "10.99.0.2/24", "interface": 0, "gateway": "10.99.0.1"}]
        }));
        let gw: [IpAddr; 1] = ["10.99.0.1".parse().unwrap()];
        let st = network_status(StatusInput { gateways: &gw, ..input(Some(&r)) });
        assert_eq!(
            serde_json::to_value(&st).unwrap(),
            json!({
                "name": "ns/net", "interface": "net1", "ips": ["10.99.0.2"], "mac": "02:00:00:00:00:03",
                "mtu": 9000, "default": false, "gateway": ["10.99.0.1"]
            })
        );
    }

    /// The annotation holds the spec's keys only (5.3: keys without a period are reserved to
    /// it), unless Multus's are asked for; every key written is either the spec's or, with
    /// `StatusKeys::Multus`, one of Multus's.
    #[test]
    fn the_annotation_holds_the_specs_keys_and_multus_keys_only_when_asked() {
        const SPEC_KEYS: [&str; 8] =
            ["name", "interface", "ips", "mac", "default", "dns", "default-route", "device-info"];
        let r = result(json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:03", "mtu": 9000, "sandbox": "/p"}],
            "ips": [{"address": "10.99.0.2/24", "interface": 0, "gateway": "10.99.0.1"}],
            "dns": {"nameservers": ["10.99.0.53"], "domain": "d", "search": ["s"]}
        }));
        let gw: [IpAddr; 1] = ["10.99.0.1".parse().unwrap()];
        let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:02.5"}});
        let st = network_status(StatusInput {
            gateways: &gw,
            default_route: Some(&gw),
            device_info: Some(&info),
            ..input(Some(&r))
        });
        let keys = |k: StatusKeys| -> Vec<String> {
            let v: serde_json::Value =
                serde_json::from_str(&annotation_value(std::slice::from_ref(&st), k)).unwrap();
            let mut keys: Vec<String> = v[0].as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        let spec = keys(StatusKeys::Spec);
        assert!(spec.iter().all(|k| SPEC_KEYS.contains(&k.as_str())), "{spec:?}");
        assert_eq!(spec.len(), SPEC_KEYS.len(), "every spec key is written here: {spec:?}");
        let multus = keys(StatusKeys::Multus);
        let extra: Vec<&String> = multus.iter().filter(|k| !SPEC_KEYS.contains(&k.as_str())).collect();
        assert_eq!(extra, ["gateway", "mtu"]);
        let v: serde_json::Value =
            serde_json::from_str(&annotation_value(&[st], StatusKeys::Multus)).unwrap();
        assert_eq!((&v[0]["mtu"], &v[0]["gateway"]), (&json!(9000), &json!(["10.99.0.1"])));
    }

    /// Spec 5.3.7 with the Device Information Specification's example (its section 6.1.2).
    #[test]
    fn device_information_is_the_device_info_key() {
        let r = result(json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": "02:00:00:00:00:03", "sandbox": "/p", "pciID": "0000:18:02.5"}]
        }));
        let info = json!({"type": "pci", "version": "1.1.0",
                          "pci": {"pci-address": "0000:18:02.5", "pf-pci-address": "0000:18:00.0"}});
        let st = network_status(StatusInput { device_info: Some(&info), ..input(Some(&r)) });
        assert_eq!(
            serde_json::to_value(&st).unwrap(),
            json!({"name": "ns/net", "interface": "net1", "mac": "02:00:00:00:00:03", "default": false,
                   "device-info": info})
        );
        let minimal = network_status(StatusInput { device_info: Some(&info), ..input(None) });
        assert_eq!(minimal.device_info, Some(info));
    }

    #[test]
    fn pod_addresses_are_the_sandbox_interfaces_or_the_unbound_ones() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let with_sandbox = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "br0"}, {"name": "net1", "sandbox": "/p"}],
            "ips": [{"address": "10.0.0.1/24", "interface": 0}, {"address": "2001:db8::5/64", "interface": 1},
                    {"address": "10.0.0.5/24", "interface": 1}, {"address": "10.0.0.9/24"}]
        }));
        assert_eq!(pod_addresses(&with_sandbox), [ip("2001:db8::5"), ip("10.0.0.5")]);
        let without = result(json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "br0"}],
            "ips": [{"address": "10.0.0.1/24", "interface": 0}, {"address": "10.0.0.9/24"}]
        }));
        assert_eq!(pod_addresses(&without), [ip("10.0.0.9")]);
        assert_eq!(pod_addresses(&result(json!({"cniVersion": "1.0.0"}))), Vec::<IpAddr>::new());
    }

    #[test]
    fn default_gateways_from_routes_or_ip_gateways() {
        let r = result(json!({
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1"}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1"}, {"dst": "10.9.0.0/16", "gw": "10.0.0.9"}]
        }));
        assert_eq!(
            default_gateways(&r),
            ["10.0.0.1".parse::<IpAddr>().unwrap(), "2001:db8::1".parse().unwrap()]
        );
    }
}
