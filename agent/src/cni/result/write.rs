//! Writing the canonical result as the JSON of any supported version, as libcni's converters do.

use serde_json::{Map, Value};

use super::model::{is_v4, CniResult, Dns, Interface, IpConfig, Route};
use super::version::Shape;
use super::ResultError;

impl CniResult {
    /// The result as the JSON object of CNI `version` (sets "cniVersion" to it). Errors for an
    /// unsupported version, and for a result 0.1.0/0.2.0 cannot express at all (no IP address),
    /// which libcni refuses too. Going down to 0.1.0/0.2.0 keeps only the first IP of each family
    /// and the routes of the families kept, as libcni's `convertTo02x` does.
    pub fn to_version(&self, version: &str) -> Result<Value, ResultError> {
        let shape = Shape::of(version)?;
        let mut out = Map::new();
        out.insert("cniVersion".into(), version.into());
        if shape == Shape::Legacy {
            self.emit_legacy(version, &mut out)?;
        } else {
            if !self.interfaces.is_empty() {
                let interfaces = self.interfaces.iter().map(|i| emit_interface(i, shape)).collect();
                out.insert("interfaces".into(), Value::Array(interfaces));
            }
            if !self.ips.is_empty() {
                out.insert(
                    "ips".into(),
                    Value::Array(self.ips.iter().map(|ip| emit_ip(ip, shape)).collect()),
                );
            }
            if !self.routes.is_empty() {
                let routes = self.routes.iter().map(|r| emit_route(r, shape == Shape::V1_1)).collect();
                out.insert("routes".into(), Value::Array(routes));
            }
        }
        // Before 1.0.0 libcni declares `dns` as a plain struct, which Go's omitempty never omits;
        // types100 deletes it when empty.
        if shape < Shape::V1_0 || !self.dns.is_empty() {
            out.insert("dns".into(), emit_dns(&self.dns));
        }
        Ok(Value::Object(out))
    }

    fn emit_legacy(&self, version: &str, out: &mut Map<String, Value>) -> Result<(), ResultError> {
        let first_of = |v4: bool| self.ips.iter().find(|ip| is_v4(&ip.address) == v4);
        let (ip4, ip6) = (first_of(true), first_of(false));
        if ip4.is_none() && ip6.is_none() {
            return Err(ResultError::Unconvertible {
                version: version.to_owned(),
                reason: "it has no IP address, and 0.1.0/0.2.0 results consist of an ip4 and/or ip6".into(),
            });
        }
        for (key, config, v4) in [("ip4", ip4, true), ("ip6", ip6, false)] {
            let Some(config) = config else { continue };
            let mut ip = Map::new();
            ip.insert("ip".into(), config.address.to_string().into());
            if let Some(gateway) = config.gateway {
                ip.insert("gateway".into(), gateway.to_string().into());
            }
            // Routes of a family with no address kept have nowhere to go, so libcni drops them.
            let routes: Vec<Value> =
                self.routes.iter().filter(|r| is_v4(&r.dst) == v4).map(|r| emit_route(r, false)).collect();
            if !routes.is_empty() {
                ip.insert("routes".into(), Value::Array(routes));
            }
            out.insert(key.into(), Value::Object(ip));
        }
        Ok(())
    }
}

fn insert_str(map: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        map.insert(key.into(), v.into());
    }
}

/// libcni's mtu/advmss/priority are omitempty ints, so 0 cannot be expressed: it means unset.
fn insert_nonzero(map: &mut Map<String, Value>, key: &str, value: Option<u32>) {
    if let Some(v) = value.filter(|v| *v != 0) {
        map.insert(key.into(), v.into());
    }
}

fn emit_interface(i: &Interface, shape: Shape) -> Value {
    let mut map = Map::new();
    // `name` has no omitempty in libcni: it is always printed.
    map.insert("name".into(), i.name.as_str().into());
    insert_str(&mut map, "mac", i.mac.as_deref());
    if shape == Shape::V1_1 {
        insert_nonzero(&mut map, "mtu", i.mtu);
    }
    insert_str(&mut map, "sandbox", i.sandbox.as_deref());
    if shape == Shape::V1_1 {
        insert_str(&mut map, "socketPath", i.socket_path.as_deref());
        insert_str(&mut map, "pciID", i.pci_id.as_deref());
    }
    Value::Object(map)
}

fn emit_ip(ip: &IpConfig, shape: Shape) -> Value {
    let mut map = Map::new();
    if shape == Shape::Tagged {
        map.insert("version".into(), if is_v4(&ip.address) { "4" } else { "6" }.into());
    }
    if let Some(index) = ip.interface {
        map.insert("interface".into(), index.into());
    }
    map.insert("address".into(), ip.address.to_string().into());
    if let Some(gateway) = ip.gateway {
        map.insert("gateway".into(), gateway.to_string().into());
    }
    Value::Object(map)
}

fn emit_route(r: &Route, with_attributes: bool) -> Value {
    let mut map = Map::new();
    map.insert("dst".into(), r.dst.to_string().into());
    if let Some(gw) = r.gw {
        map.insert("gw".into(), gw.to_string().into());
    }
    if with_attributes {
        insert_nonzero(&mut map, "mtu", r.mtu);
        insert_nonzero(&mut map, "advmss", r.advmss);
        insert_nonzero(&mut map, "priority", r.priority);
        for (key, value) in [("table", r.table), ("scope", r.scope)] {
            if let Some(v) = value {
                map.insert(key.into(), v.into());
            }
        }
    }
    Value::Object(map)
}

fn emit_dns(dns: &Dns) -> Value {
    let mut map = Map::new();
    let list = |items: &[String]| Value::Array(items.iter().map(|s| s.as_str().into()).collect());
    if !dns.nameservers.is_empty() {
        map.insert("nameservers".into(), list(&dns.nameservers));
    }
    insert_str(&mut map, "domain", dns.domain.as_deref());
    if !dns.search.is_empty() {
        map.insert("search".into(), list(&dns.search));
    }
    if !dns.options.is_empty() {
        map.insert("options".into(), list(&dns.options));
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::fixtures::*;
    use serde_json::json;

    #[test]
    fn emits_0_2_0_with_first_ip_of_each_family_and_routes_nested_by_family() {
        assert_eq!(
            rich().to_version("0.2.0").unwrap(),
            json!({
                "cniVersion": "0.2.0",
                "ip4": {
                    "ip": "10.1.0.5/16",
                    "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16"}]
                },
                "ip6": {
                    "ip": "2001:db8::5/64",
                    "gateway": "2001:db8::1",
                    "routes": [{"dst": "::/0", "gw": "2001:db8::1"}, {"dst": "2001:db8:2::/48", "gw": "2001:db8::1"}]
                },
                "dns": {
                    "nameservers": ["10.1.0.1", "2001:db8::53"],
                    "domain": "example.com",
                    "search": ["svc.example.com", "example.com"],
                    "options": ["ndots:5"]
                }
            })
        );
    }

    #[test]
    fn emits_0_1_0_in_the_same_shape_as_0_2_0() {
        let mut v010 = rich().to_version("0.1.0").unwrap();
        assert_eq!(v010["cniVersion"], "0.1.0");
        v010["cniVersion"] = json!("0.2.0");
        assert_eq!(v010, rich().to_version("0.2.0").unwrap());
    }

    #[test]
    fn emits_0_3_x_and_0_4_0_with_ip_version_tags_and_without_1_1_0_extras() {
        for version in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_eq!(
                rich().to_version(version).unwrap(),
                json!({
                    "cniVersion": version,
                    "interfaces": [
                        {"name": "br0", "mac": "00:11:22:33:44:55"},
                        {"name": "veth1", "mac": "55:44:33:22:11:11"},
                        {"name": "net1", "mac": IB_MAC, "sandbox": "/var/run/netns/blue"}
                    ],
                    "ips": [
                        {"version": "4", "interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                        {"version": "6", "interface": 2, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
                        {"version": "4", "interface": 2, "address": "10.2.0.7/24"},
                        {"version": "6", "interface": 1, "address": "2001:db8:1::7/64"}
                    ],
                    "routes": [
                        {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                        {"dst": "::/0", "gw": "2001:db8::1"},
                        {"dst": "192.168.0.0/16"},
                        {"dst": "2001:db8:2::/48", "gw": "2001:db8::1"}
                    ],
                    "dns": {
                        "nameservers": ["10.1.0.1", "2001:db8::53"],
                        "domain": "example.com",
                        "search": ["svc.example.com", "example.com"],
                        "options": ["ndots:5"]
                    }
                }),
                "{version}"
            );
        }
    }

    #[test]
    fn emits_1_0_0_like_0_4_0_without_ip_version_tags() {
        let mut expected = rich().to_version("0.4.0").unwrap();
        expected["cniVersion"] = json!("1.0.0");
        for ip in expected["ips"].as_array_mut().unwrap() {
            ip.as_object_mut().unwrap().remove("version");
        }
        assert_eq!(rich().to_version("1.0.0").unwrap(), expected);
    }

    #[test]
    fn emits_1_1_0_with_every_field() {
        assert_eq!(
            rich().to_version("1.1.0").unwrap(),
            json!({
                "cniVersion": "1.1.0",
                "interfaces": [
                    {"name": "br0", "mac": "00:11:22:33:44:55"},
                    {"name": "veth1", "mac": "55:44:33:22:11:11", "mtu": 1500},
                    {"name": "net1", "mac": IB_MAC, "mtu": 9000, "sandbox": "/var/run/netns/blue",
                     "socketPath": "/run/vhost/net1.sock", "pciID": "0000:3b:00.1"}
                ],
                "ips": [
                    {"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"interface": 2, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
                    {"interface": 2, "address": "10.2.0.7/24"},
                    {"interface": 1, "address": "2001:db8:1::7/64"}
                ],
                "routes": [
                    {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1450, "advmss": 1400, "priority": 100,
                     "table": 100, "scope": 0},
                    {"dst": "::/0", "gw": "2001:db8::1", "priority": 50},
                    {"dst": "192.168.0.0/16", "scope": 253},
                    {"dst": "2001:db8:2::/48", "gw": "2001:db8::1", "table": 0}
                ],
                "dns": {
                    "nameservers": ["10.1.0.1", "2001:db8::53"],
                    "domain": "example.com",
                    "search": ["svc.example.com", "example.com"],
                    "options": ["ndots:5"]
                }
            })
        );
    }

    #[test]
    fn emits_keys_in_libcni_order() {
        let text = spec_example_canonical("0.4.0").to_version("0.4.0").unwrap().to_string();
        assert_eq!(
            text,
            concat!(
                r#"{"cniVersion":"0.4.0","interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},"#,
                r#"{"name":"veth3243","mac":"55:44:33:22:11:11"},"#,
                r#"{"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],"#,
                r#""ips":[{"version":"4","interface":2,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"#,
                r#""routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}"#
            )
        );
    }

    #[test]
    fn ip_version_field_is_present_exactly_for_0_3_x_and_0_4_0() {
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let out = rich().to_version(version).unwrap();
            let tags: Vec<Option<&str>> = out["ips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|ip| ip.get("version").and_then(Value::as_str))
                .collect();
            if version.starts_with("0.") {
                assert_eq!(tags, [Some("4"), Some("6"), Some("4"), Some("6")], "{version}");
            } else {
                assert_eq!(tags, [None, None, None, None], "{version}");
            }
        }
        for version in ["0.1.0", "0.2.0"] {
            let out = rich().to_version(version).unwrap();
            assert!(out.get("ips").is_none() && out["ip4"].get("version").is_none(), "{version}");
        }
    }

    #[test]
    fn routes_of_a_family_without_an_address_are_dropped_in_0_2_0() {
        let result = CniResult {
            ips: vec![ipc("10.1.0.5/16", None, Some(0))],
            routes: vec![route("::/0", Some("2001:db8::1")), route("0.0.0.0/0", Some("10.1.0.1"))],
            ..Default::default()
        };
        assert_eq!(
            result.to_version("0.2.0").unwrap(),
            json!({
                "cniVersion": "0.2.0",
                "ip4": {"ip": "10.1.0.5/16", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
                "dns": {}
            })
        );
    }

    #[test]
    fn converting_a_result_without_ips_to_0_1_0_or_0_2_0_fails_like_libcni() {
        let result = CniResult {
            interfaces: vec![iface("eth0", "00:11:22:33:44:55", Some("/var/run/netns/x"))],
            routes: vec![route("0.0.0.0/0", None)],
            ..Default::default()
        };
        for version in ["0.1.0", "0.2.0"] {
            let err = result.to_version(version).unwrap_err();
            assert!(matches!(&err, ResultError::Unconvertible { version: v, .. } if v == version), "{err:?}");
            assert!(err.to_string().contains("no IP address"), "{err}");
        }
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            assert!(result.to_version(version).is_ok(), "{version}");
        }
    }

    #[test]
    fn empty_dns_is_emitted_as_empty_object_before_1_0_0_and_omitted_from_1_0_0() {
        let result = CniResult { ips: vec![ipc("10.1.0.5/16", None, None)], ..Default::default() };
        for version in ALL {
            let out = result.to_version(version).unwrap();
            if version.starts_with("0.") {
                assert_eq!(out["dns"], json!({}), "{version}");
            } else {
                assert!(out.get("dns").is_none(), "{version}");
            }
        }
    }

    #[test]
    fn empty_and_unset_fields_are_omitted_never_null() {
        let result = CniResult {
            interfaces: vec![Interface {
                name: "eth0".into(),
                mac: Some(String::new()),
                sandbox: Some(String::new()),
                mtu: Some(0),
                ..Default::default()
            }],
            ips: vec![ipc("10.1.0.5/16", None, None)],
            routes: vec![Route { mtu: Some(0), ..route("0.0.0.0/0", None) }],
            dns: Dns { domain: Some(String::new()), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(
            result.to_version("1.1.0").unwrap(),
            json!({
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0"}],
                "ips": [{"address": "10.1.0.5/16"}],
                "routes": [{"dst": "0.0.0.0/0"}]
            })
        );
        assert_eq!(CniResult::default().to_version("1.1.0").unwrap(), json!({"cniVersion": "1.1.0"}));
        assert_eq!(
            CniResult::default().to_version("0.4.0").unwrap(),
            json!({"cniVersion": "0.4.0", "dns": {}})
        );
    }

    #[test]
    fn to_version_sets_requested_version_whatever_the_result_was_read_in() {
        let result = CniResult::parse(&legacy_example("0.1.0"), "").unwrap();
        assert_eq!(result.to_version("1.0.0").unwrap()["cniVersion"], "1.0.0");
    }

    #[test]
    fn to_version_rejects_unsupported_versions() {
        for version in ["2.0.0", "1.0", "", "v1.0.0"] {
            let err = rich().to_version(version).unwrap_err();
            assert!(
                matches!(&err, ResultError::UnsupportedVersion { version: v } if v == version),
                "{err:?}"
            );
        }
    }
}
