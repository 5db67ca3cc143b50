//! Reading a result of any supported version into the canonical model.

use super::model::{is_v4, CniResult, Dns, Interface, IpConfig, Route};
use super::version::Shape;
use super::ResultError;
use crate::cni::json::{FieldError, JsonObject};

impl CniResult {
    /// Parses a result JSON object. The version is its "cniVersion" field; `fallback_version` is used
    /// when that field is absent (plugins of old versions sometimes omit it).
    pub fn parse(value: &serde_json::Value, fallback_version: &str) -> Result<CniResult, ResultError> {
        let top = JsonObject::root(value, "(the result itself)")?;
        // libcni reads an empty cniVersion as "from before versioning", same as an absent one.
        let version = match top.string("cniVersion")? {
            Some(v) if !v.is_empty() => v.to_owned(),
            _ => fallback_version.to_owned(),
        };
        let shape = Shape::of(&version)?;
        let mut result =
            CniResult { cni_version: version, dns: Dns::read_field(&top, "dns")?, ..Default::default() };
        if shape == Shape::Legacy {
            for (key, want_v4) in [("ip4", true), ("ip6", false)] {
                if let Some(ip) = top.object(key)? {
                    let (config, routes) = parse_legacy_ip(&ip, want_v4)?;
                    result.ips.push(config);
                    result.routes.extend(routes);
                }
            }
        } else {
            result.interfaces = top.list("interfaces", |o| parse_interface(&o))?;
            let interface_count = result.interfaces.len();
            result.ips = top.list("ips", |o| parse_ip(&o, shape, interface_count))?;
            result.routes = top.list("routes", |o| parse_route(&o))?;
        }
        Ok(result)
    }
}

impl Dns {
    /// The DNS object `key` of `object` (a result's or a config's "dns"); absent: empty.
    pub fn read_field(object: &JsonObject<'_>, key: &str) -> Result<Dns, FieldError> {
        let Some(dns) = object.object(key)? else { return Ok(Dns::default()) };
        Ok(Dns {
            nameservers: dns.strings("nameservers")?,
            domain: dns.opt_string("domain")?,
            search: dns.strings("search")?,
            options: dns.strings("options")?,
        })
    }
}

fn parse_legacy_ip(ip: &JsonObject<'_>, want_v4: bool) -> Result<(IpConfig, Vec<Route>), ResultError> {
    let address = ip.cidr("ip")?;
    if is_v4(&address) != want_v4 {
        let family = if want_v4 { "IPv4" } else { "IPv6" };
        return Err(ip.malformed("ip", format!("{address} is not an {family} address")).into());
    }
    let config = IpConfig { address, gateway: ip.ip("gateway")?, interface: None };
    Ok((config, ip.list("routes", |o| parse_route(&o))?))
}

fn parse_interface(o: &JsonObject<'_>) -> Result<Interface, ResultError> {
    let name = o.string("name")?.ok_or_else(|| o.malformed("name", "is required".into()))?;
    Ok(Interface {
        name: name.to_owned(),
        mac: o.opt_string("mac")?,
        mtu: o.nonzero_uint("mtu")?,
        sandbox: o.opt_string("sandbox")?,
        socket_path: o.opt_string("socketPath")?,
        pci_id: o.opt_string("pciID")?,
    })
}

fn parse_ip(o: &JsonObject<'_>, shape: Shape, interface_count: usize) -> Result<IpConfig, ResultError> {
    let address = o.cidr("address")?;
    // The tag only exists in 0.3.x/0.4.0; later versions derive the family from the address.
    if shape == Shape::Tagged {
        if let Some(tag) = o.string("version")? {
            let actual = if is_v4(&address) { "4" } else { "6" };
            if tag != "4" && tag != "6" {
                return Err(o.malformed("version", format!("expected \"4\" or \"6\", got {tag:?}")).into());
            }
            if tag != actual {
                return Err(o
                    .malformed("version", format!("is {tag:?} but address {address} is IPv{actual}"))
                    .into());
            }
        }
    }
    let interface = o.typed("interface", "an integer index", serde_json::Value::as_i64)?;
    // A negative index means "bound to no interface" (NPWG spec 5.3.3.1 relies on it); a
    // non-negative one must exist, since consumers index `interfaces` with it.
    if let Some(index) = interface.filter(|i| *i >= 0) {
        if usize::try_from(index).map_or(true, |i| i >= interface_count) {
            return Err(o
                .malformed(
                    "interface",
                    format!("index {index} is out of range: the result has {interface_count} interface(s)"),
                )
                .into());
        }
    }
    Ok(IpConfig { address, gateway: o.ip("gateway")?, interface })
}

fn parse_route(o: &JsonObject<'_>) -> Result<Route, ResultError> {
    Ok(Route {
        dst: o.cidr("dst")?,
        gw: o.ip("gw")?,
        mtu: o.nonzero_uint("mtu")?,
        advmss: o.nonzero_uint("advmss")?,
        priority: o.nonzero_uint("priority")?,
        // libcni keeps these as pointers, so an explicit 0 (main table, global scope) is meaningful.
        table: o.uint("table")?,
        scope: o.uint("scope")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::fixtures::*;
    use serde_json::json;

    fn malformed_field(err: ResultError) -> String {
        match err {
            ResultError::Malformed { field, .. } => field,
            other => panic!("expected a malformed-result error, got {other:?}"),
        }
    }

    #[test]
    fn parses_0_1_0_ip4_and_ip6_into_ips_without_interface_and_their_routes_into_routes() {
        assert_eq!(CniResult::parse(&legacy_example("0.1.0"), "1.1.0").unwrap(), legacy_canonical("0.1.0"));
    }

    #[test]
    fn parses_0_2_0_spec_example() {
        assert_eq!(CniResult::parse(&legacy_example("0.2.0"), "1.1.0").unwrap(), legacy_canonical("0.2.0"));
    }

    #[test]
    fn parses_0_3_x_and_0_4_0_spec_example_with_ip_version_tags() {
        for version in ["0.3.0", "0.3.1", "0.4.0"] {
            let mut value = spec_example_1_1_0();
            value["cniVersion"] = json!(version);
            value["ips"][0]["version"] = json!("4");
            assert_eq!(
                CniResult::parse(&value, "1.1.0").unwrap(),
                spec_example_canonical(version),
                "{version}"
            );
        }
    }

    #[test]
    fn parses_0_3_x_ips_without_version_tag() {
        let mut value = spec_example_1_1_0();
        value["cniVersion"] = json!("0.3.1");
        assert_eq!(CniResult::parse(&value, "1.1.0").unwrap(), spec_example_canonical("0.3.1"));
    }

    #[test]
    fn parses_1_0_0_spec_example() {
        let mut value = spec_example_1_1_0();
        value["cniVersion"] = json!("1.0.0");
        assert_eq!(CniResult::parse(&value, "1.1.0").unwrap(), spec_example_canonical("1.0.0"));
    }

    #[test]
    fn parses_1_1_0_spec_example() {
        assert_eq!(
            CniResult::parse(&spec_example_1_1_0(), "0.1.0").unwrap(),
            spec_example_canonical("1.1.0")
        );
    }

    #[test]
    fn parses_1_1_0_route_attributes_and_interface_extras() {
        let value = json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": IB_MAC, "mtu": 9000, "sandbox": "/var/run/netns/blue",
                            "socketPath": "/run/vhost/net1.sock", "pciID": "0000:3b:00.1"}],
            "routes": [{"dst": "10.0.0.0/8", "gw": "10.1.0.1", "mtu": 1450, "advmss": 1400, "priority": 100,
                        "table": 100, "scope": 253}]
        });
        let result = CniResult::parse(&value, "1.1.0").unwrap();
        assert_eq!(
            result.interfaces,
            vec![Interface {
                name: "net1".into(),
                mac: Some(IB_MAC.into()),
                mtu: Some(9000),
                sandbox: Some("/var/run/netns/blue".into()),
                socket_path: Some("/run/vhost/net1.sock".into()),
                pci_id: Some("0000:3b:00.1".into()),
            }]
        );
        assert_eq!(
            result.routes,
            vec![Route {
                mtu: Some(1450),
                advmss: Some(1400),
                priority: Some(100),
                table: Some(100),
                scope: Some(253),
                ..route("10.0.0.0/8", Some("10.1.0.1"))
            }]
        );
        assert_eq!(result.dns, Dns::default());
    }

    #[test]
    fn unsupported_version_in_result_is_rejected_naming_it_and_listing_supported_ones() {
        let err = CniResult::parse(&json!({"cniVersion": "0.5.0", "ips": []}), "1.1.0").unwrap_err();
        assert!(matches!(&err, ResultError::UnsupportedVersion { version } if version == "0.5.0"), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("\"0.5.0\""), "{text}");
        assert!(text.contains("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"), "{text}");
    }

    #[test]
    fn missing_or_empty_cni_version_falls_back_to_the_given_version() {
        let mut value = legacy_example("x");
        value.as_object_mut().unwrap().remove("cniVersion");
        assert_eq!(CniResult::parse(&value, "0.2.0").unwrap(), legacy_canonical("0.2.0"));
        value["cniVersion"] = json!("");
        assert_eq!(CniResult::parse(&value, "0.1.0").unwrap(), legacy_canonical("0.1.0"));
        let err = CniResult::parse(&value, "9.9.9").unwrap_err();
        assert!(matches!(err, ResultError::UnsupportedVersion { .. }), "{err:?}");
    }

    #[test]
    fn shape_is_chosen_by_version_so_keys_of_other_shapes_are_ignored() {
        let mut legacy = legacy_example("0.2.0");
        legacy["ips"] = json!([{"address": "192.0.2.1/24"}]);
        assert_eq!(CniResult::parse(&legacy, "").unwrap(), legacy_canonical("0.2.0"));
        let mut modern = spec_example_1_1_0();
        modern["ip4"] = json!({"ip": "192.0.2.1/24"});
        assert_eq!(CniResult::parse(&modern, "").unwrap(), spec_example_canonical("1.1.0"));
    }

    #[test]
    fn non_object_results_and_non_string_versions_are_malformed() {
        let err = CniResult::parse(&json!([1, 2]), "1.1.0").unwrap_err();
        assert!(err.to_string().contains("expected an object, got an array"), "{err}");
        let err = CniResult::parse(&json!({"cniVersion": 1}), "1.1.0").unwrap_err();
        assert_eq!(err.to_string(), "malformed CNI result: cniVersion: expected a string, got the number 1");
    }

    #[test]
    fn wrong_types_and_bad_values_are_rejected_naming_the_field() {
        let cases = [
            ("1.1.0", json!({"interfaces": {}}), "interfaces"),
            ("1.1.0", json!({"interfaces": ["eth0"]}), "interfaces[0]"),
            ("1.1.0", json!({"interfaces": [{"mac": "00:11:22:33:44:55"}]}), "interfaces[0].name"),
            ("1.1.0", json!({"interfaces": [{"name": 5}]}), "interfaces[0].name"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "mtu": -1}]}), "interfaces[0].mtu"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "mtu": 1500.5}]}), "interfaces[0].mtu"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "sandbox": true}]}), "interfaces[0].sandbox"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "pciID": 3}]}), "interfaces[0].pciID"),
            ("1.1.0", json!({"ips": [{}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5"}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.500/16"}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "gateway": "gw"}]}), "ips[0].gateway"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": "0"}]}), "ips[0].interface"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": "x"}]}), "ips[0].interface"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": 0}]}), "ips[0].interface"),
            ("0.4.0", json!({"ips": [{"address": "10.1.0.5/16", "version": 4}]}), "ips[0].version"),
            ("0.3.1", json!({"ips": [{"address": "10.1.0.5/16", "version": "ipv4"}]}), "ips[0].version"),
            ("1.1.0", json!({"routes": [{"gw": "10.1.0.1"}]}), "routes[0].dst"),
            ("1.1.0", json!({"routes": [{"dst": "default"}]}), "routes[0].dst"),
            ("1.1.0", json!({"routes": [{"dst": "0.0.0.0/0", "table": 4294967296u64}]}), "routes[0].table"),
            ("1.1.0", json!({"routes": [{"dst": "0.0.0.0/0", "scope": "link"}]}), "routes[0].scope"),
            ("1.1.0", json!({"dns": []}), "dns"),
            ("1.1.0", json!({"dns": {"nameservers": ["10.1.0.1", 53]}}), "dns.nameservers[1]"),
            ("1.1.0", json!({"dns": {"domain": ["a"]}}), "dns.domain"),
            ("0.2.0", json!({"ip4": "10.1.0.5/16"}), "ip4"),
            ("0.2.0", json!({"ip4": {"gateway": "10.1.0.1"}}), "ip4.ip"),
            ("0.2.0", json!({"ip4": {"ip": "10.1.0.5/16", "routes": [{"dst": 0}]}}), "ip4.routes[0].dst"),
            ("0.1.0", json!({"ip6": {"ip": "2001:db8::5/64", "gateway": "10.1.0.1/16"}}), "ip6.gateway"),
        ];
        for (version, value, field) in cases {
            let err = CniResult::parse(&value, version).unwrap_err();
            let text = err.to_string();
            assert_eq!(malformed_field(err), field, "{value}: {text}");
        }
    }

    #[test]
    fn malformed_messages_say_what_was_expected_and_what_was_found() {
        let err = CniResult::parse(&json!({"ips": [{"address": "10.1.0.5"}]}), "1.1.0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed CNI result: ips[0].address: expected an address with prefix length like \
             \"10.1.0.5/16\", got \"10.1.0.5\""
        );
        let err = CniResult::parse(&json!({"interfaces": [{"name": "a", "mtu": -1}]}), "1.1.0").unwrap_err();
        assert!(err.to_string().ends_with("expected a non-negative integer, got the number -1"), "{err}");
    }

    #[test]
    fn ip_version_tag_contradicting_the_address_is_rejected() {
        let value = json!({"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "10.1.0.5/16"}]});
        let err = CniResult::parse(&value, "").unwrap_err();
        assert!(err.to_string().contains("is \"6\" but address 10.1.0.5/16 is IPv4"), "{err}");
        // From 1.0.0 on the key means nothing, so it is ignored like any unknown field.
        let value = json!({"cniVersion": "1.0.0", "ips": [{"version": "6", "address": "10.1.0.5/16"}]});
        assert_eq!(CniResult::parse(&value, "").unwrap().ips, vec![ipc("10.1.0.5/16", None, None)]);
    }

    #[test]
    fn legacy_ip4_or_ip6_of_the_wrong_family_is_rejected() {
        let err = CniResult::parse(&json!({"ip4": {"ip": "2001:db8::5/64"}}), "0.2.0").unwrap_err();
        assert_eq!(err.to_string(), "malformed CNI result: ip4.ip: 2001:db8::5/64 is not an IPv4 address");
        let err = CniResult::parse(&json!({"ip6": {"ip": "10.1.0.5/16"}}), "0.2.0").unwrap_err();
        assert_eq!(malformed_field(err), "ip6.ip");
    }

    #[test]
    fn unknown_fields_are_ignored_at_every_level() {
        let mut value = spec_example_1_1_0();
        value["extra"] = json!({"anything": [1, 2]});
        value["interfaces"][0]["metadata"] = json!({"k": "v"});
        value["ips"][0]["future"] = json!(true);
        value["routes"][0]["weight"] = json!(3);
        value["dns"]["ttl"] = json!(30);
        assert_eq!(CniResult::parse(&value, "").unwrap(), spec_example_canonical("1.1.0"));
        let mut legacy = legacy_example("0.2.0");
        legacy["ip4"]["extra"] = json!("x");
        assert_eq!(CniResult::parse(&legacy, "").unwrap(), legacy_canonical("0.2.0"));
    }

    #[test]
    fn null_and_empty_strings_read_as_unset_like_go_does() {
        let value = json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "", "sandbox": null, "mtu": null, "socketPath": ""}],
            "ips": [{"address": "10.1.0.5/16", "gateway": "", "interface": null}],
            "routes": [{"dst": "0.0.0.0/0", "gw": null, "table": null}],
            "dns": {"nameservers": null, "domain": ""}
        });
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.interfaces, vec![Interface { name: "eth0".into(), ..Default::default() }]);
        assert_eq!(result.ips, vec![ipc("10.1.0.5/16", None, None)]);
        assert_eq!(result.routes, vec![route("0.0.0.0/0", None)]);
        assert_eq!(result.dns, Dns::default());
        let top_nulls =
            json!({"cniVersion": "1.1.0", "interfaces": null, "ips": null, "routes": null, "dns": null});
        assert_eq!(
            CniResult::parse(&top_nulls, "").unwrap(),
            CniResult { cni_version: "1.1.0".into(), ..Default::default() }
        );
    }

    #[test]
    fn interface_index_must_point_into_interfaces() {
        let ok = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                        "ips": [{"address": "10.1.0.5/16", "interface": 1}]});
        assert_eq!(CniResult::parse(&ok, "").unwrap().ips[0].interface, Some(1));
        let bad = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                         "ips": [{"address": "10.1.0.5/16", "interface": 2}]});
        let err = CniResult::parse(&bad, "").unwrap_err();
        assert!(err.to_string().contains("index 2 is out of range: the result has 2 interface(s)"), "{err}");
    }
}
