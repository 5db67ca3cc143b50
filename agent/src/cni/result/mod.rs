//! CNI results of every spec version, read into and written from one canonical model.
//!
//! The model is the CNI 1.1.0 result. Older shapes are converted the way libcni's
//! `convertTo*`/`convertFrom*` functions (pkg/types/020, 040, 100) do, so a runtime
//! reading what plexus emits sees what a libcni-based plugin would have printed.
//!
//! Parsing is deliberately lenient where libcni is (unknown fields, `null`, empty
//! strings standing for "unset") and strict where a wrong value would mislead whoever
//! consumes the result (wrong JSON types, unparsable addresses, an `ips[].version` or
//! `ip4`/`ip6` contradicting the address, an interface index pointing nowhere).
//!
//! Route attributes and interface mtu/socketPath/pciID are read whatever the version, because
//! current libcni shares those types across versions and so prints them in 1.0.0 results too;
//! they are written only for 1.1.0.
//!
//! Layout: [`model`] (the canonical types), [`version`] (supported versions, their order and the
//! JSON shape of each), [`read`] (any version into the model, with [`crate::cni::json`]),
//! [`write`] (the model as any version). Converting between versions is reading one and writing
//! the other; the tests here check that every pair keeps exactly what both can express.

mod model;
mod read;
mod version;
mod write;

#[cfg(test)]
mod fixtures;

pub use model::{CniResult, Dns, Interface, IpConfig, Route};
pub use version::{compare_versions, is_supported_version};

use crate::cni::json::FieldError;
use crate::cni::SUPPORTED_VERSIONS;

/// Why a result cannot be read, or written in the version asked for.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("unsupported CNI version {version:?}: plexus supports {}", SUPPORTED_VERSIONS.join(", "))]
    UnsupportedVersion { version: String },
    #[error("malformed CNI result: {field}: {reason}")]
    Malformed { field: String, reason: String },
    #[error("invalid CNI version {version:?}: {reason}")]
    InvalidVersion { version: String, reason: String },
    #[error("cannot express the result in CNI version {version}: {reason}")]
    Unconvertible { version: String, reason: String },
}

impl From<FieldError> for ResultError {
    fn from(e: FieldError) -> Self {
        ResultError::Malformed { field: e.field, reason: e.reason }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use serde_json::json;

    fn strip_route(r: &Route) -> Route {
        route(&r.dst.to_string(), r.gw.map(|g| g.to_string()).as_deref())
    }

    /// What a canonical result must look like after being written in `version` and read back,
    /// spelled out from the spec/libcni rules independently of the code under test.
    fn expected_after(version: &str, r: &CniResult) -> CniResult {
        let mut e = r.clone();
        e.cni_version = version.into();
        match version {
            "1.1.0" => {}
            "0.1.0" | "0.2.0" => {
                e.interfaces.clear();
                let first = |v4: bool| {
                    r.ips
                        .iter()
                        .find(|i| i.address.addr().is_ipv4() == v4)
                        .map(|i| IpConfig { interface: None, ..i.clone() })
                };
                let (v4, v6) = (first(true), first(false));
                let routes_of =
                    |v4: bool| r.routes.iter().filter(move |x| x.dst.addr().is_ipv4() == v4).map(strip_route);
                e.routes = Vec::new();
                if v4.is_some() {
                    e.routes.extend(routes_of(true));
                }
                if v6.is_some() {
                    e.routes.extend(routes_of(false));
                }
                e.ips = v4.into_iter().chain(v6).collect();
            }
            _ => {
                for i in &mut e.interfaces {
                    i.mtu = None;
                    i.socket_path = None;
                    i.pci_id = None;
                }
                e.routes = r.routes.iter().map(strip_route).collect();
            }
        }
        e
    }

    #[test]
    fn round_trip_through_every_version_pair_keeps_exactly_what_both_can_express() {
        let rich = rich();
        for from in ALL {
            let first = CniResult::parse(&rich.to_version(from).unwrap(), "1.1.0").unwrap();
            assert_eq!(first, expected_after(from, &rich), "read back in {from}");
            for to in ALL {
                let second = CniResult::parse(&first.to_version(to).unwrap(), "1.1.0").unwrap();
                assert_eq!(second, expected_after(to, &expected_after(from, &rich)), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn same_version_round_trip_is_lossless_for_what_the_version_can_express() {
        for version in ALL {
            let expressible = expected_after(version, &rich());
            let emitted = expressible.to_version(version).unwrap();
            assert_eq!(CniResult::parse(&emitted, "1.1.0").unwrap(), expressible, "{version}");
            assert_eq!(CniResult::parse(&emitted, "1.1.0").unwrap().to_version(version).unwrap(), emitted);
        }
    }

    #[test]
    fn going_down_to_0_2_0_keeps_first_ip_per_family_and_drops_interfaces_and_indexes() {
        let back = CniResult::parse(&rich().to_version("0.2.0").unwrap(), "").unwrap();
        assert!(back.interfaces.is_empty());
        assert_eq!(
            back.ips,
            vec![
                ipc("10.1.0.5/16", Some("10.1.0.1"), None),
                ipc("2001:db8::5/64", Some("2001:db8::1"), None)
            ]
        );
        // 0.2.0 nests routes per family, so the interleaving of the original is lost.
        assert_eq!(
            back.routes,
            vec![
                route("0.0.0.0/0", Some("10.1.0.1")),
                route("192.168.0.0/16", None),
                route("::/0", Some("2001:db8::1")),
                route("2001:db8:2::/48", Some("2001:db8::1")),
            ]
        );
        assert_eq!(back.dns, rich().dns);
        assert_eq!(back.first_sandbox_interface(), None);
    }

    #[test]
    fn going_below_1_1_0_drops_route_attributes_and_interface_extras_but_keeps_the_rest() {
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
            let back = CniResult::parse(&rich().to_version(version).unwrap(), "").unwrap();
            assert_eq!(back.ips, rich().ips, "{version}");
            assert_eq!(back.dns, rich().dns, "{version}");
            assert_eq!(back.first_sandbox_interface(), Some(2), "{version}");
            assert_eq!(back.interfaces[2], iface("net1", IB_MAC, Some("/var/run/netns/blue")), "{version}");
            assert!(back.interfaces.iter().all(|i| i.mtu.is_none()), "{version}");
            assert!(
                back.routes.iter().all(
                    |r| (r.mtu, r.advmss, r.priority, r.table, r.scope) == (None, None, None, None, None)
                ),
                "{version}"
            );
            let dsts: Vec<String> = back.routes.iter().map(|r| r.dst.to_string()).collect();
            assert_eq!(dsts, ["0.0.0.0/0", "::/0", "192.168.0.0/16", "2001:db8:2::/48"], "{version}");
        }
    }

    #[test]
    fn addresses_keep_their_host_bits() {
        let value = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16"}, {"address": "2001:db8::5/64"}],
                           "routes": [{"dst": "10.9.9.9/8"}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.ips[0].address.addr(), addr("10.1.0.5"));
        assert_eq!(result.ips[0].address.prefix_len(), 16);
        let out = result.to_version("0.2.0").unwrap();
        assert_eq!(out["ip4"]["ip"], "10.1.0.5/16");
        assert_eq!(out["ip6"]["ip"], "2001:db8::5/64");
        assert_eq!(out["ip4"]["routes"][0]["dst"], "10.9.9.9/8");
    }

    #[test]
    fn infiniband_mac_keeps_its_text() {
        let value = json!({"cniVersion": "0.3.1", "interfaces": [{"name": "ib0", "mac": IB_MAC}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.interfaces[0].mac.as_deref(), Some(IB_MAC));
        assert_eq!(result.to_version("1.1.0").unwrap()["interfaces"][0]["mac"], IB_MAC);
    }

    #[test]
    fn zero_route_mtu_advmss_priority_mean_unset_but_zero_table_and_scope_are_kept() {
        let value = json!({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "mtu": 0, "advmss": 0,
                           "priority": 0, "table": 0, "scope": 0}], "interfaces": [{"name": "a", "mtu": 0}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.routes, vec![Route { table: Some(0), scope: Some(0), ..route("0.0.0.0/0", None) }]);
        assert_eq!(result.interfaces[0].mtu, None);
        assert_eq!(
            result.to_version("1.1.0").unwrap()["routes"],
            json!([{"dst": "0.0.0.0/0", "table": 0, "scope": 0}])
        );
    }
}
