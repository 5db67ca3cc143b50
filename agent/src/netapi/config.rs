//! Pure: whether a [`NetworkConfig`] may be set ([`validate`]), the CNI configlist it stands
//! for ([`to_conflist`]), and the way back from a configlist to the API's `CNIv1Config` for
//! the list ([`from_conflist`]).

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{json, Map, Value};

pub use super::invalid::InvalidField;
use super::model::{Cniv1Config, NetworkConfig, PluginConfig};
use super::FALLBACK_NETWORK;
use crate::cni::config::NetworkConfigList;
use crate::spec::validate::{is_nad_name, is_namespace};

/// The capability names of the CNI conventions (conventions.md), and the pod annotations
/// capability containerd and CRI-O pass.
pub const KNOWN_CAPABILITIES: [&str; 11] = [
    "portMappings",
    "ipRanges",
    "bandwidth",
    "dns",
    "ips",
    "mac",
    "infinibandGUID",
    "deviceID",
    "aliases",
    "cgroupPath",
    "io.kubernetes.cri.pod-annotations",
];

/// Plugin keys that come from the config's fields, never from `parameters`.
pub const RESERVED_PARAMETERS: [&str; 4] = ["type", "capabilities", "cniVersion", "name"];

/// The longest plugin type: a file name.
const MAX_PLUGIN_TYPE: usize = 255;

/// Checks every field, in the order of the proto; the first problem is the answer.
pub fn validate(config: &NetworkConfig) -> Result<(), InvalidField> {
    if let Some(problem) = name_problem(&config.metadata.name) {
        return Err(InvalidField::new("config.metadata.name", problem));
    }
    if let Some(problem) = namespace_problem(&config.metadata.namespace) {
        return Err(InvalidField::new("config.metadata.namespace", problem));
    }
    for (i, range) in config.ip_ranges.iter().enumerate() {
        parse_cidr(&range.cidr)
            .map_err(|problem| InvalidField::new(format!("config.ip_ranges[{i}].cidr"), problem))?;
    }
    let cni = &config.cniv1_config;
    if !crate::cni::SUPPORTED_VERSIONS.contains(&cni.cni_version.as_str()) {
        return Err(InvalidField::new(
            "config.cniv1_config.cni_version",
            format!(
                "{:?} is not a CNI version plexus supports ({})",
                cni.cni_version,
                crate::cni::SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    if !cni.network_name.is_empty() && !is_cni_network_name(&cni.network_name) {
        return Err(InvalidField::new(
            "config.cniv1_config.network_name",
            format!(
                "{:?} is not a CNI network name (letters, digits, '_', '-' and '.'); leave it empty to use the \
                 metadata's name",
                cni.network_name
            ),
        ));
    }
    if cni.plugins.is_empty() {
        return Err(InvalidField::new(
            "config.cniv1_config.plugins",
            "it is empty; a network needs at least one plugin",
        ));
    }
    for (i, plugin) in cni.plugins.iter().enumerate() {
        validate_plugin(&format!("config.cniv1_config.plugins[{i}]"), plugin)?;
    }
    Ok(())
}

/// Why `name` cannot name a network (a DNS-1123 subdomain, as a NAD's, and not the
/// reserved `_fallback`), or `None`.
pub fn name_problem(name: &str) -> Option<String> {
    if name == FALLBACK_NETWORK {
        return Some(fallback_is_reserved());
    }
    if name.is_empty() {
        return Some("it is empty; a network needs a name".into());
    }
    if !is_nad_name(name) {
        return Some(format!(
            "{name:?} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 \
             characters), as a NetworkAttachmentDefinition's name must be"
        ));
    }
    None
}

/// Why `namespace` cannot be a network's namespace (empty for `default`, or a DNS-1123
/// label), or `None`.
pub fn namespace_problem(namespace: &str) -> Option<String> {
    if namespace.is_empty() || is_namespace(namespace) {
        return None;
    }
    Some(format!(
        "{namespace:?} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters); \
         leave it empty for \"default\""
    ))
}

/// What to say when `_fallback` is set or removed.
pub fn fallback_is_reserved() -> String {
    format!("{FALLBACK_NETWORK:?} is the on-disk default network and is managed by its file")
}

fn validate_plugin(field: &str, plugin: &PluginConfig) -> Result<(), InvalidField> {
    if let Some(problem) = plugin_type_problem(&plugin.plugin_type) {
        return Err(InvalidField::new(format!("{field}.type"), problem));
    }
    for (j, capability) in plugin.capabilities.iter().enumerate() {
        if !KNOWN_CAPABILITIES.contains(&capability.as_str()) {
            return Err(InvalidField::new(
                format!("{field}.capabilities[{j}]"),
                format!("{capability:?} is not a CNI capability (known: {})", KNOWN_CAPABILITIES.join(", ")),
            ));
        }
    }
    for (key, value) in &plugin.parameters {
        let key_field = format!("{field}.parameters[{key:?}]");
        if key.is_empty() {
            return Err(InvalidField::new(key_field, "a parameter needs a name"));
        }
        if RESERVED_PARAMETERS.contains(&key.as_str()) {
            return Err(InvalidField::new(
                key_field,
                format!(
                    "{key:?} comes from the config's own fields (type, capabilities, cni_version, network_name); \
                     remove it from the parameters"
                ),
            ));
        }
        if key == "ipam" && !parameter_value(value).is_object() {
            return Err(InvalidField::new(
                key_field,
                "\"ipam\" must be a JSON object, such as {\"type\": \"host-local\"}",
            ));
        }
    }
    Ok(())
}

/// Why `t` is not a plain plugin name (a file in the plugin directories), or `None`.
fn plugin_type_problem(t: &str) -> Option<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if t.is_empty() {
        return Some("it is empty; every plugin needs a type".into());
    }
    let first_ok = t.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if t.len() > MAX_PLUGIN_TYPE || !first_ok || !t.chars().all(plain) {
        return Some(format!(
            "{t:?} is not a plain plugin name (a letter or digit, then letters, digits, '.', '_' or '-'; at most \
             {MAX_PLUGIN_TYPE} characters)"
        ));
    }
    None
}

/// The CNI spec's network name: letters, digits, '_', '-' and '.'.
fn is_cni_network_name(name: &str) -> bool {
    name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A CIDR with its host bits zero (`10.1.0.0/24`, `fd00::/64`).
fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let net: IpNet =
        text.parse().map_err(|_| format!("{text:?} is not a CIDR such as 10.1.0.0/24 or fd00::/64"))?;
    if net.trunc() != net {
        return Err(format!("{text:?} has host bits set; the range is {}", net.trunc()));
    }
    Ok(net)
}

/// A parameter's value in the plugin's config: JSON when it parses as JSON, else the string.
pub fn parameter_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The configlist a validated config stands for: its plugins with their capabilities and
/// parameters, and `ip_ranges` in the IPAM of the plugins that have no ranges (see
/// [`fill_ip_ranges`]).
pub fn to_conflist(config: &NetworkConfig) -> Value {
    let cni = &config.cniv1_config;
    let mut plugins: Vec<Map<String, Value>> = cni.plugins.iter().map(plugin_object).collect();
    let cidrs: Vec<IpNet> = config.ip_ranges.iter().filter_map(|r| parse_cidr(&r.cidr).ok()).collect();
    fill_ip_ranges(&mut plugins, &cidrs);
    let mut list = json!({"cniVersion": cni.cni_version, "name": config.network_name()});
    if cni.disable_check {
        list["disableCheck"] = Value::Bool(true);
    }
    list["plugins"] = Value::Array(plugins.into_iter().map(Value::Object).collect());
    list
}

fn plugin_object(plugin: &PluginConfig) -> Map<String, Value> {
    let mut object = Map::new();
    object.insert("type".into(), Value::String(plugin.plugin_type.clone()));
    if !plugin.capabilities.is_empty() {
        let caps = plugin.capabilities.iter().map(|c| (c.clone(), Value::Bool(true))).collect();
        object.insert("capabilities".into(), Value::Object(caps));
    }
    for (key, value) in &plugin.parameters {
        object.insert(key.clone(), parameter_value(value));
    }
    object
}

/// Puts `cidrs` into IPAM as range sets, one per address family in the order the families
/// first appear: into every plugin whose `ipam` object has neither `ranges` nor `subnet`,
/// or, when no plugin has an `ipam` object, into a host-local IPAM of the first plugin.
/// Without CIDRs nothing changes.
pub fn fill_ip_ranges(plugins: &mut [Map<String, Value>], cidrs: &[IpNet]) {
    if cidrs.is_empty() {
        return;
    }
    let ranges = range_sets(cidrs);
    let mut any_ipam = false;
    for plugin in plugins.iter_mut() {
        if let Some(Value::Object(ipam)) = plugin.get_mut("ipam") {
            any_ipam = true;
            if !ipam.contains_key("ranges") && !ipam.contains_key("subnet") {
                ipam.insert("ranges".into(), ranges.clone());
            }
        }
    }
    if !any_ipam {
        if let Some(first) = plugins.first_mut() {
            first.insert("ipam".into(), json!({"type": "host-local", "ranges": ranges}));
        }
    }
}

/// host-local's `ranges`: a list of range sets, one per family.
fn range_sets(cidrs: &[IpNet]) -> Value {
    let mut families: Vec<(bool, Vec<Value>)> = Vec::new();
    for net in cidrs {
        let v4 = matches!(net.addr(), IpAddr::V4(_));
        let range = json!({"subnet": net.to_string()});
        match families.iter_mut().find(|(f, _)| *f == v4) {
            Some((_, set)) => set.push(range),
            None => families.push((v4, vec![range])),
        }
    }
    Value::Array(families.into_iter().map(|(_, set)| Value::Array(set)).collect())
}

/// A configlist (a NAD's, the on-disk default network's) as the API's `CNIv1Config`: each
/// plugin's type, the capabilities it declares true, and its other keys as parameters
/// (strings as they are, other values JSON-encoded).
pub fn from_conflist(list: &NetworkConfigList) -> Cniv1Config {
    let plugins = list
        .plugins
        .iter()
        .map(|plugin| {
            let plugin_type = plugin.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
            let capabilities = match plugin.get("capabilities") {
                Some(Value::Object(caps)) => {
                    caps.iter().filter(|(_, v)| v.as_bool() == Some(true)).map(|(k, _)| k.clone()).collect()
                }
                _ => Vec::new(),
            };
            let parameters = plugin
                .iter()
                .filter(|(k, _)| !RESERVED_PARAMETERS.contains(&k.as_str()))
                .map(|(k, v)| {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), text)
                })
                .collect();
            PluginConfig { plugin_type, capabilities, parameters }
        })
        .collect();
    Cniv1Config {
        cni_version: list.cni_version.clone(),
        network_name: list.name.clone(),
        disable_check: list.disable_check,
        plugins,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netapi::model::{IpRange, NetworkMetadata};

    fn plugin(t: &str) -> PluginConfig {
        PluginConfig { plugin_type: t.into(), ..Default::default() }
    }

    fn valid() -> NetworkConfig {
        NetworkConfig {
            metadata: NetworkMetadata {
                name: "blue".into(),
                namespace: "".into(),
                uid: "u1".into(),
                generation: 1,
            },
            ip_ranges: Vec::new(),
            network_type: Default::default(),
            cniv1_config: Cniv1Config {
                cni_version: "1.0.0".into(),
                network_name: String::new(),
                disable_check: false,
                plugins: vec![plugin("bridge")],
            },
        }
    }

    fn field_of(config: &NetworkConfig) -> String {
        validate(config).unwrap_err().field
    }

    #[test]
    fn a_minimal_config_is_valid() {
        assert_eq!(validate(&valid()), Ok(()));
    }

    #[test]
    fn names_and_namespaces_are_checked_as_a_nads() {
        for (name, ok) in [
            ("blue", true),
            ("blue.net-1", true),
            ("a", true),
            ("", false),
            ("Blue", false),
            ("-blue", false),
            ("blue-", false),
            ("blue..net", false),
            ("blue/net", false),
            ("..", false),
            ("_fallback", false),
            (&"a".repeat(254), false),
        ] {
            let mut c = valid();
            c.metadata.name = name.to_owned();
            assert_eq!(validate(&c).is_ok(), ok, "{name:?}");
            if !ok {
                assert_eq!(field_of(&c), "config.metadata.name");
            }
        }
        for (namespace, ok) in
            [("", true), ("team-a", true), ("Team", false), ("a.b", false), (&*"a".repeat(64), false)]
        {
            let mut c = valid();
            c.metadata.namespace = namespace.to_owned();
            assert_eq!(validate(&c).is_ok(), ok, "{namespace:?}");
            if !ok {
                assert_eq!(field_of(&c), "config.metadata.namespace");
            }
        }
    }

    #[test]
    fn fallback_is_reserved_with_its_reason() {
        let mut c = valid();
        c.metadata.name = "_fallback".into();
        let e = validate(&c).unwrap_err();
        assert!(e.problem.contains("on-disk default network"), "{e}");
    }

    #[test]
    fn cni_versions_must_be_supported() {
        for v in crate::cni::SUPPORTED_VERSIONS {
            let mut c = valid();
            c.cniv1_config.cni_version = (*v).to_owned();
            assert_eq!(validate(&c), Ok(()), "{v}");
        }
        for v in ["", "2.0.0", "1.0", "v1.0.0"] {
            let mut c = valid();
            c.cniv1_config.cni_version = v.to_owned();
            assert_eq!(field_of(&c), "config.cniv1_config.cni_version", "{v:?}");
        }
    }

    #[test]
    fn network_names_follow_the_cni_spec() {
        let mut c = valid();
        c.cniv1_config.network_name = "blue_net.v1-a".into();
        assert_eq!(validate(&c), Ok(()));
        c.cniv1_config.network_name = "blue net".into();
        assert_eq!(field_of(&c), "config.cniv1_config.network_name");
        c.cniv1_config.network_name = "blue/net".into();
        assert_eq!(field_of(&c), "config.cniv1_config.network_name");
    }

    #[test]
    fn a_network_needs_a_plugin() {
        let mut c = valid();
        c.cniv1_config.plugins.clear();
        assert_eq!(field_of(&c), "config.cniv1_config.plugins");
    }

    #[test]
    fn plugin_types_are_plain_names() {
        for (t, ok) in [
            ("bridge", true),
            ("host-local", true),
            ("my_plugin.v2", true),
            ("0plugin", true),
            (&*"a".repeat(255), true),
            ("", false),
            (".", false),
            ("..", false),
            ("../bridge", false),
            ("/usr/bin/bridge", false),
            ("-bridge", false),
            (".hidden", false),
            ("bri dge", false),
            ("bridge\n", false),
            ("brïdge", false),
            (&*"a".repeat(256), false),
        ] {
            let mut c = valid();
            c.cniv1_config.plugins.push(plugin(t));
            assert_eq!(validate(&c).is_ok(), ok, "{t:?}");
            if !ok {
                assert_eq!(field_of(&c), "config.cniv1_config.plugins[1].type", "{t:?}");
            }
        }
        let mut c = valid();
        c.cniv1_config.plugins.push(plugin("../bridge"));
        assert_eq!(
            validate(&c).unwrap_err().to_string().split(" (").next().unwrap(),
            "config.cniv1_config.plugins[1].type: \"../bridge\" is not a plain plugin name"
        );
    }

    #[test]
    fn capabilities_must_be_known() {
        for cap in KNOWN_CAPABILITIES {
            let mut c = valid();
            c.cniv1_config.plugins[0].capabilities = vec![cap.to_owned()];
            assert_eq!(validate(&c), Ok(()), "{cap}");
        }
        for cap in ["", "portmappings", "ports", "podSandboxNetworks"] {
            let mut c = valid();
            c.cniv1_config.plugins[0].capabilities = vec!["ips".into(), cap.to_owned()];
            assert_eq!(field_of(&c), "config.cniv1_config.plugins[0].capabilities[1]", "{cap:?}");
        }
    }

    #[test]
    fn parameters_cannot_replace_the_configs_own_fields() {
        for key in RESERVED_PARAMETERS {
            let mut c = valid();
            c.cniv1_config.plugins[0].parameters.insert(key.to_owned(), "x".into());
            assert_eq!(field_of(&c), format!("config.cniv1_config.plugins[0].parameters[{key:?}]"));
        }
        let mut c = valid();
        c.cniv1_config.plugins[0].parameters.insert(String::new(), "x".into());
        assert_eq!(field_of(&c), "config.cniv1_config.plugins[0].parameters[\"\"]");
        let mut c = valid();
        c.cniv1_config.plugins[0].parameters.insert("ipam".into(), "host-local".into());
        assert_eq!(field_of(&c), "config.cniv1_config.plugins[0].parameters[\"ipam\"]");
        c.cniv1_config.plugins[0].parameters.insert("ipam".into(), r#"{"type":"host-local"}"#.into());
        assert_eq!(validate(&c), Ok(()));
    }

    #[test]
    fn ip_ranges_are_cidrs_without_host_bits() {
        for (cidr, ok) in [
            ("10.1.0.0/24", true),
            ("fd00::/64", true),
            ("0.0.0.0/0", true),
            ("10.1.0.1/32", true),
            ("10.1.0.5/24", false),
            ("fd00::1/64", false),
            ("10.1.0.0", false),
            ("10.1.0.0/33", false),
            ("blue", false),
            ("", false),
        ] {
            let mut c = valid();
            c.ip_ranges = vec![IpRange { cidr: "10.9.0.0/16".into() }, IpRange { cidr: cidr.into() }];
            assert_eq!(validate(&c).is_ok(), ok, "{cidr:?}");
            if !ok {
                assert_eq!(field_of(&c), "config.ip_ranges[1].cidr", "{cidr:?}");
            }
        }
        let mut c = valid();
        c.ip_ranges = vec![IpRange { cidr: "10.1.0.5/24".into() }];
        assert!(validate(&c).unwrap_err().problem.contains("10.1.0.0/24"), "the message says the range");
    }

    #[test]
    fn parameters_are_json_when_they_parse_and_strings_otherwise() {
        assert_eq!(parameter_value("1500"), json!(1500));
        assert_eq!(parameter_value("true"), json!(true));
        assert_eq!(parameter_value(r#"{"a":[1]}"#), json!({"a": [1]}));
        assert_eq!(parameter_value(r#""quoted""#), json!("quoted"));
        assert_eq!(parameter_value("cni0"), json!("cni0"));
        assert_eq!(parameter_value(""), json!(""));
        assert_eq!(parameter_value("{broken"), json!("{broken"));
    }

    #[test]
    fn a_config_becomes_a_conflist() {
        let mut c = valid();
        c.cniv1_config.disable_check = true;
        c.cniv1_config.plugins[0].capabilities = vec!["ips".into(), "mac".into()];
        c.cniv1_config.plugins[0].parameters =
            [("bridge", "br-blue"), ("mtu", "1400"), ("ipam", r#"{"type":"static"}"#)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        c.cniv1_config.plugins.push(plugin("tuning"));
        assert_eq!(
            to_conflist(&c),
            json!({
                "cniVersion": "1.0.0",
                "name": "blue",
                "disableCheck": true,
                "plugins": [
                    {"type": "bridge", "capabilities": {"ips": true, "mac": true}, "bridge": "br-blue", "ipam": {"type": "static"}, "mtu": 1400},
                    {"type": "tuning"}
                ]
            })
        );
        c.cniv1_config.network_name = "blue-cni".into();
        c.cniv1_config.disable_check = false;
        let list = to_conflist(&c);
        assert_eq!(list["name"], "blue-cni");
        assert!(list.get("disableCheck").is_none());
        let parsed = NetworkConfigList::from_value(list, None).unwrap();
        assert_eq!(parsed.plugin_type(1), "tuning");
    }

    fn nets(cidrs: &[&str]) -> Vec<IpNet> {
        cidrs.iter().map(|c| c.parse().unwrap()).collect()
    }

    fn objects(plugins: Value) -> Vec<Map<String, Value>> {
        serde_json::from_value(plugins).unwrap()
    }

    #[test]
    fn ip_ranges_go_into_a_host_local_ipam_of_the_first_plugin_when_none_has_ipam() {
        let mut plugins = objects(json!([{"type": "bridge"}, {"type": "tuning"}]));
        fill_ip_ranges(&mut plugins, &nets(&["10.1.0.0/24", "fd00::/64", "10.2.0.0/24"]));
        assert_eq!(
            Value::Array(plugins.into_iter().map(Value::Object).collect()),
            json!([
                {"type": "bridge", "ipam": {"type": "host-local", "ranges": [
                    [{"subnet": "10.1.0.0/24"}, {"subnet": "10.2.0.0/24"}],
                    [{"subnet": "fd00::/64"}]
                ]}},
                {"type": "tuning"}
            ])
        );
        let mut v6_first = objects(json!([{"type": "bridge"}]));
        fill_ip_ranges(&mut v6_first, &nets(&["fd00::/64", "10.1.0.0/24"]));
        assert_eq!(
            v6_first[0]["ipam"]["ranges"],
            json!([[{"subnet": "fd00::/64"}], [{"subnet": "10.1.0.0/24"}]]),
            "families in the order they first appear"
        );
    }

    #[test]
    fn ip_ranges_fill_only_the_ipam_objects_without_ranges_or_subnet() {
        let mut plugins = objects(json!([
            {"type": "macvlan", "ipam": {"type": "whereabouts"}},
            {"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.9.0.0/16"}},
            {"type": "ipvlan", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.8.0.0/16"}]]}},
            {"type": "tuning"}
        ]));
        fill_ip_ranges(&mut plugins, &nets(&["10.1.0.0/24"]));
        assert_eq!(
            plugins[0]["ipam"],
            json!({"type": "whereabouts", "ranges": [[{"subnet": "10.1.0.0/24"}]]})
        );
        assert_eq!(plugins[1]["ipam"], json!({"type": "host-local", "subnet": "10.9.0.0/16"}));
        assert_eq!(plugins[2]["ipam"]["ranges"], json!([[{"subnet": "10.8.0.0/16"}]]));
        assert!(plugins[3].get("ipam").is_none());
        let mut kept =
            objects(json!([{"type": "bridge", "ipam": {"type": "dhcp", "subnet": "x"}}, {"type": "tuning"}]));
        let before = kept.clone();
        fill_ip_ranges(&mut kept, &nets(&["10.1.0.0/24"]));
        assert_eq!(kept, before, "a plugin with IPAM means none is added to the first");
    }

    #[test]
    fn without_ip_ranges_nothing_is_added() {
        let mut plugins = objects(json!([{"type": "bridge"}]));
        fill_ip_ranges(&mut plugins, &[]);
        assert_eq!(plugins, objects(json!([{"type": "bridge"}])));
        let mut c = valid();
        c.ip_ranges = vec![IpRange { cidr: "10.3.0.0/24".into() }];
        assert_eq!(to_conflist(&c)["plugins"][0]["ipam"]["ranges"], json!([[{"subnet": "10.3.0.0/24"}]]));
    }

    #[test]
    fn a_conflist_comes_back_as_a_cniv1_config() {
        let list = NetworkConfigList::parse(
            r#"{"cniVersion":"0.4.0","name":"cluster","disableCheck":true,"plugins":[
                {"type":"bridge","bridge":"cni0","mtu":1400,"ipam":{"type":"host-local"}},
                {"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false},"snat":true}]}"#,
            None,
        )
        .unwrap();
        let cni = from_conflist(&list);
        assert_eq!(
            (cni.cni_version.as_str(), cni.network_name.as_str(), cni.disable_check),
            ("0.4.0", "cluster", true)
        );
        assert_eq!(cni.plugins[0].plugin_type, "bridge");
        assert!(cni.plugins[0].capabilities.is_empty());
        assert_eq!(cni.plugins[0].parameters["bridge"], "cni0");
        assert_eq!(cni.plugins[0].parameters["mtu"], "1400");
        assert_eq!(cni.plugins[0].parameters["ipam"], r#"{"type":"host-local"}"#);
        assert_eq!(cni.plugins[1].capabilities, ["portMappings"]);
        assert_eq!(cni.plugins[1].parameters.keys().collect::<Vec<_>>(), ["snat"]);
    }

    #[test]
    fn a_valid_config_survives_the_round_trip_through_its_conflist() {
        let mut c = valid();
        c.cniv1_config.network_name = "blue".into();
        c.cniv1_config.plugins[0].capabilities = vec!["portMappings".into()];
        c.cniv1_config.plugins[0].parameters =
            [("bridge", "br0"), ("mtu", "1400"), ("isGateway", "true"), ("ipam", r#"{"type":"host-local"}"#)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let list = NetworkConfigList::from_value(to_conflist(&c), None).unwrap();
        assert_eq!(from_conflist(&list), c.cniv1_config);
    }
}
