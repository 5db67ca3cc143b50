//! Sandboxes that name their networks (the CRI network API proposal's
//! `PodSandboxConfig.networks`): the runtime passes the sandbox's list of
//! `PodSandboxNetworkConfig`s in plexus's CNI config as `runtimeConfig.podSandboxNetworks`,
//! each entry the proto message in its JSON form:
//!
//! ```json
//! {"interfaceName": "eth0", "networkName": "blue",
//!  "parameters": {"mac": "02:00:00:00:00:01", "ips": "[\"10.1.0.5/24\"]"}}
//! ```
//!
//! Each entry becomes an NPWG selection ([`NetworkSelection`]) of its network with its
//! interface and parameters, so the same keys are accepted and validated by the same code as
//! the selection annotation's (spec 4.1.2.1): a parameter's value that parses as JSON is JSON,
//! otherwise the string. The first entry takes the place of the cluster default network on the
//! runtime's interface (CNI_IFNAME); `_fallback` names the on-disk default network.
//!
//! Pure: values in, values out. Every rule refuses with code 7 (the runtime's list must change).

use serde_json::{Map, Value};

use super::selection::{
    parse_default_route, read_attachment_key, NetworkSelection, ATTACHMENT_KEYS, MAX_SELECTIONS,
};
use super::validate::{is_nad_name, is_namespace, kernel_ifname_problem};
use crate::cni::json::json_type;
use crate::cni::{CniCode, ErrorCode};

/// The `runtimeConfig` key (and CNI capability of plexus's own config) carrying the list.
pub const RUNTIME_CONFIG_KEY: &str = "podSandboxNetworks";

/// The reserved network name of the on-disk default network (the proposal's "Backwards
/// compatibility"): the CNI config the runtime would have used without plexus.
pub const FALLBACK_NETWORK: &str = "_fallback";

/// The parameter key an NPWG selection names its default route with (spec 4.1.2.1.9).
const DEFAULT_ROUTE_KEY: &str = "default-route";

/// Which network an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxNetworkName {
    /// `_fallback`: the on-disk default network.
    Fallback,
    /// A network selected as a NAD is (`name` or `namespace/name`): the network API's, else
    /// the NetworkAttachmentDefinition's. `namespace: None` is the pod's.
    Selected { namespace: Option<String>, name: String },
}

/// One entry of the list, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxNetwork {
    pub network: SandboxNetworkName,
    /// The entry as an NPWG selection: its network (`_fallback` as the name for the on-disk
    /// default network), `interface` (None when the entry gives none: a generated `netN`) and
    /// the per-attachment keys of its parameters.
    pub selection: NetworkSelection,
}

/// Why the runtime's list is refused, naming the entry and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxNetworksError {
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY} must be a list of PodSandboxNetworkConfig objects; it is {found}"
    )]
    NotAList { found: &'static str },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY} holds {count} networks; a sandbox may have at most {MAX_SELECTIONS}"
    )]
    TooMany { count: usize },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}] must be an object with \"interfaceName\", \"networkName\" \
         and \"parameters\"; it is {found}"
    )]
    NotAnObject { entry: usize, found: &'static str },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}] has the unknown key {key:?}; a PodSandboxNetworkConfig has \
         \"interfaceName\", \"networkName\" and \"parameters\""
    )]
    UnknownKey { entry: usize, key: String },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}] gives {field} twice, as {camel:?} and as {snake:?}; keep one"
    )]
    FieldTwice { entry: usize, field: &'static str, camel: &'static str, snake: &'static str },
    #[error("runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}].{key} must be {expected}; it is {found}")]
    WrongType { entry: usize, key: &'static str, expected: &'static str, found: &'static str },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}] has no \"networkName\"; name the network the interface is on \
         ({FALLBACK_NETWORK:?} for the on-disk default network)"
    )]
    NoNetworkName { entry: usize },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}].networkName {network:?}: {problem}; a network is named as a \
         NetworkAttachmentDefinition is selected, \"name\" or \"namespace/name\" (name: DNS-1123 subdomain, \
         namespace: DNS-1123 label), or {FALLBACK_NETWORK:?}"
    )]
    InvalidNetworkName { entry: usize, network: String, problem: &'static str },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}].interfaceName {interface:?} is not a valid interface name: \
         {problem}"
    )]
    InvalidInterfaceName { entry: usize, interface: String, problem: String },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}].parameters has the key {key:?}, which {why}; the parameters \
         are the NPWG per-attachment keys: {known}",
        known = parameter_keys()
    )]
    UnknownParameter { entry: usize, key: String, why: &'static str },
    #[error("runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}].parameters.{key}: {reason}")]
    InvalidParameter { entry: usize, key: String, reason: String },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[{entry}] and [{other}] both set \"{DEFAULT_ROUTE_KEY}\"; only one \
         network may hold the pod's default route (NPWG spec 4.1.2.1.9)"
    )]
    DefaultRouteTwice { entry: usize, other: usize },
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[0] sets \"{DEFAULT_ROUTE_KEY}\", but the first network takes the place \
         of the cluster default network and holds the pod's default routes already; set it on another entry, or \
         leave it out"
    )]
    DefaultRouteOnFirst,
    #[error(
        "runtimeConfig.{RUNTIME_CONFIG_KEY}[0].interfaceName is {given:?}, but the runtime's CNI_IFNAME is \
         {runtime:?}: the first network takes the place of the cluster default network, on the runtime's \
         interface; make them the same"
    )]
    FirstNotOnRuntimeInterface { given: String, runtime: String },
    #[error(
        "the runtime passed runtimeConfig.{RUNTIME_CONFIG_KEY} and the pod has the {annotation} annotation; a pod \
         gets its networks from one of them: pick one (remove the annotation, or have the runtime pass no list)"
    )]
    WithAnnotation { annotation: &'static str },
}

/// Every refusal is a list (or a pod) the user must change.
impl CniCode for SandboxNetworksError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// The parameter keys accepted, for messages.
fn parameter_keys() -> String {
    let mut keys: Vec<&str> = ATTACHMENT_KEYS.to_vec();
    keys.push(DEFAULT_ROUTE_KEY);
    keys.join(", ")
}

/// The list in `runtimeConfig.podSandboxNetworks` (`None`: the key is absent), in order. An
/// absent, `null` or empty list asks for nothing: the sandbox gets the default network.
///
/// The number of entries is checked before any entry is looked at; then each entry in order
/// (its shape, its keys, their types, the network name, the interface, each parameter); then
/// the rules across entries (one `default-route`, not on the first entry).
pub fn parse_sandbox_networks(value: Option<&Value>) -> Result<Vec<SandboxNetwork>, SandboxNetworksError> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(SandboxNetworksError::NotAList { found: json_type(other) }),
    };
    if items.len() > MAX_SELECTIONS {
        return Err(SandboxNetworksError::TooMany { count: items.len() });
    }
    let entries =
        items.iter().enumerate().map(|(i, item)| parse_entry(i, item)).collect::<Result<Vec<_>, _>>()?;
    check_default_route(&entries)?;
    Ok(entries)
}

/// The first entry takes the place of the cluster default network, so it must be on the
/// runtime's interface (CNI_IFNAME), given explicitly.
pub fn check_first_interface(
    entries: &[SandboxNetwork],
    runtime_ifname: &str,
) -> Result<(), SandboxNetworksError> {
    let Some(first) = entries.first() else { return Ok(()) };
    match first.selection.interface.as_deref() {
        Some(given) if given == runtime_ifname => Ok(()),
        given => Err(SandboxNetworksError::FirstNotOnRuntimeInterface {
            given: given.unwrap_or_default().to_owned(),
            runtime: runtime_ifname.to_owned(),
        }),
    }
}

/// A field of PodSandboxNetworkConfig: its JSON name and its proto name, both accepted as the
/// proto3 JSON mapping requires of a parser.
struct Field {
    camel: &'static str,
    snake: &'static str,
}

const INTERFACE_NAME: Field = Field { camel: "interfaceName", snake: "interface_name" };
const NETWORK_NAME: Field = Field { camel: "networkName", snake: "network_name" };
const PARAMETERS: Field = Field { camel: "parameters", snake: "parameters" };

impl Field {
    fn get<'a>(
        &self,
        entry: usize,
        obj: &'a Map<String, Value>,
    ) -> Result<Option<&'a Value>, SandboxNetworksError> {
        match (obj.get(self.camel), obj.get(self.snake)) {
            (Some(_), Some(_)) if self.camel != self.snake => Err(SandboxNetworksError::FieldTwice {
                entry,
                field: self.camel,
                camel: self.camel,
                snake: self.snake,
            }),
            (Some(v), _) | (None, Some(v)) => Ok(Some(v).filter(|v| !v.is_null())),
            (None, None) => Ok(None),
        }
    }

    /// The string value; absent, null and empty are all `None` (proto3's default).
    fn string<'a>(
        &self,
        entry: usize,
        obj: &'a Map<String, Value>,
    ) -> Result<Option<&'a str>, SandboxNetworksError> {
        match self.get(entry, obj)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
            Some(other) => Err(SandboxNetworksError::WrongType {
                entry,
                key: self.camel,
                expected: "a string",
                found: json_type(other),
            }),
        }
    }
}

fn parse_entry(entry: usize, item: &Value) -> Result<SandboxNetwork, SandboxNetworksError> {
    let Value::Object(obj) = item else {
        return Err(SandboxNetworksError::NotAnObject { entry, found: json_type(item) });
    };
    let known = [&INTERFACE_NAME, &NETWORK_NAME, &PARAMETERS];
    if let Some(key) =
        obj.keys().find(|k| !known.iter().any(|f| f.camel == k.as_str() || f.snake == k.as_str()))
    {
        return Err(SandboxNetworksError::UnknownKey { entry, key: key.clone() });
    }
    let network_name =
        NETWORK_NAME.string(entry, obj)?.ok_or(SandboxNetworksError::NoNetworkName { entry })?;
    let interface = INTERFACE_NAME.string(entry, obj)?;
    let parameters = match PARAMETERS.get(entry, obj)? {
        None => None,
        Some(Value::Object(p)) => Some(p),
        Some(other) => {
            return Err(SandboxNetworksError::WrongType {
                entry,
                key: PARAMETERS.camel,
                expected: "an object of strings",
                found: json_type(other),
            })
        }
    };
    let network = parse_network_name(entry, network_name)?;
    let mut selection = match &network {
        SandboxNetworkName::Fallback => {
            NetworkSelection { name: FALLBACK_NETWORK.to_owned(), ..Default::default() }
        }
        SandboxNetworkName::Selected { namespace, name } => {
            NetworkSelection { name: name.clone(), namespace: namespace.clone(), ..Default::default() }
        }
    };
    if let Some(ifname) = interface {
        if let Some(problem) = kernel_ifname_problem(ifname) {
            return Err(SandboxNetworksError::InvalidInterfaceName {
                entry,
                interface: ifname.to_owned(),
                problem,
            });
        }
        selection.interface = Some(ifname.to_owned());
    }
    for (key, raw) in parameters.into_iter().flatten() {
        read_parameter(entry, &mut selection, key, raw)?;
    }
    Ok(SandboxNetwork { network, selection })
}

/// `_fallback`, `name` or `namespace/name`, with the selection annotation's rules.
fn parse_network_name(entry: usize, network: &str) -> Result<SandboxNetworkName, SandboxNetworksError> {
    if network == FALLBACK_NETWORK {
        return Ok(SandboxNetworkName::Fallback);
    }
    let invalid =
        |problem| SandboxNetworksError::InvalidNetworkName { entry, network: network.to_owned(), problem };
    let (namespace, name) = match network.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, network),
    };
    if let Some(ns) = namespace {
        if !is_namespace(ns) {
            return Err(invalid("the namespace is not a DNS-1123 label"));
        }
    }
    if !is_nad_name(name) {
        return Err(invalid("the name is not a DNS-1123 subdomain"));
    }
    Ok(SandboxNetworkName::Selected { namespace: namespace.map(str::to_owned), name: name.to_owned() })
}

/// The value of a parameter: the proto's `map<string, string>` holds strings, and one that
/// parses as JSON is that JSON (`"[\"10.1.0.5/24\"]"` is a list), otherwise it is the string
/// itself (`02:00:00:00:00:01`). A value that is already not a string is taken as it is.
pub fn parameter_value(raw: &Value) -> Value {
    match raw {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| raw.clone()),
        other => other.clone(),
    }
}

/// One parameter into the selection, validated as the selection annotation's key is.
fn read_parameter(
    entry: usize,
    selection: &mut NetworkSelection,
    key: &str,
    raw: &Value,
) -> Result<(), SandboxNetworksError> {
    let unknown = |why| SandboxNetworksError::UnknownParameter { entry, key: key.to_owned(), why };
    let invalid =
        |reason: String| SandboxNetworksError::InvalidParameter { entry, key: key.to_owned(), reason };
    let value = parameter_value(raw);
    match key {
        "name" | "namespace" => return Err(unknown("comes from the entry's \"networkName\"")),
        "interface" => return Err(unknown("comes from the entry's \"interfaceName\"")),
        DEFAULT_ROUTE_KEY => {
            selection.default_route = Some(parse_default_route(&value).map_err(|e| invalid(e.0))?);
        }
        _ => {
            if !read_attachment_key(selection, key, &value).map_err(|e| invalid(e.0))? {
                return Err(unknown("plexus does not know"));
            }
        }
    }
    Ok(())
}

/// At most one entry sets `default-route`, and not the first, which holds the default routes
/// as the cluster default network does.
fn check_default_route(entries: &[SandboxNetwork]) -> Result<(), SandboxNetworksError> {
    let mut setting =
        entries.iter().enumerate().filter(|(_, e)| e.selection.default_route.is_some()).map(|(i, _)| i);
    match (setting.next(), setting.next()) {
        (Some(0), _) => Err(SandboxNetworksError::DefaultRouteOnFirst),
        (Some(entry), Some(other)) => Err(SandboxNetworksError::DefaultRouteTwice { entry, other }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use serde_json::json;

    use super::*;
    use crate::spec::selection::{parse_selection, Bandwidth, PortMapping, Protocol};

    fn parse(list: Value) -> Result<Vec<SandboxNetwork>, SandboxNetworksError> {
        parse_sandbox_networks(Some(&list))
    }

    fn one(entry: Value) -> Result<SandboxNetwork, SandboxNetworksError> {
        parse(json!([entry])).map(|mut v| v.remove(0))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn no_list_an_empty_list_and_null_ask_for_nothing() {
        assert_eq!(parse_sandbox_networks(None).unwrap(), []);
        assert_eq!(parse(Value::Null).unwrap(), []);
        assert_eq!(parse(json!([])).unwrap(), []);
    }

    #[test]
    fn entries_become_selections_in_order() {
        let entries = parse(json!([
            {"interfaceName": "eth0", "networkName": "_fallback"},
            {"interfaceName": "data0", "networkName": "blue",
             "parameters": {"mac": "02:00:00:00:00:01", "ips": "[\"10.1.0.5/24\", \"fd01::5/64\"]"}},
            {"interface_name": "net7", "network_name": "other-ns/red.v2", "parameters": {}},
            {"networkName": "green", "parameters": null},
        ]))
        .unwrap();
        let names: Vec<&SandboxNetworkName> = entries.iter().map(|e| &e.network).collect();
        assert_eq!(
            names,
            [
                &SandboxNetworkName::Fallback,
                &SandboxNetworkName::Selected { namespace: None, name: "blue".into() },
                &SandboxNetworkName::Selected { namespace: Some("other-ns".into()), name: "red.v2".into() },
                &SandboxNetworkName::Selected { namespace: None, name: "green".into() },
            ]
        );
        assert_eq!(
            entries[0].selection,
            NetworkSelection {
                name: "_fallback".into(),
                interface: Some("eth0".into()),
                ..Default::default()
            }
        );
        assert_eq!(
            entries[1].selection,
            NetworkSelection {
                name: "blue".into(),
                interface: Some("data0".into()),
                mac: Some("02:00:00:00:00:01".into()),
                ips: Some(vec!["10.1.0.5/24".into(), "fd01::5/64".into()]),
                ..Default::default()
            }
        );
        assert_eq!(
            entries[2].selection,
            NetworkSelection {
                name: "red.v2".into(),
                namespace: Some("other-ns".into()),
                interface: Some("net7".into()),
                ..Default::default()
            }
        );
        assert_eq!(entries[3].selection.interface, None, "no interface: a generated name");
    }

    #[test]
    fn every_npwg_per_attachment_key_is_read_from_its_string() {
        let first = json!({"interfaceName": "eth0", "networkName": "_fallback"});
        let e = parse(json!([first, {"interfaceName": "net1", "networkName": "n", "parameters": {
            "portMappings": r#"[{"hostPort": 8080, "containerPort": 80, "protocol": "udp"}]"#,
            "bandwidth": r#"{"ingressRate": 2048, "egressRate": 4096, "egressBurst": 300}"#,
            "cni-args": r#"{"spoofchk": "on", "vlan": 5}"#,
            "default-route": r#"["10.1.0.1", "fd01::1"]"#,
            "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
        }}]))
        .unwrap();
        let s = e[1].selection.clone();
        assert_eq!(
            s.port_mappings,
            Some(vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Udp,
                host_ip: None
            }])
        );
        assert_eq!(
            s.bandwidth,
            Some(Bandwidth {
                ingress_rate: Some(2048),
                ingress_burst: None,
                egress_rate: Some(4096),
                egress_burst: Some(300)
            })
        );
        assert_eq!(Value::Object(s.cni_args.unwrap()), json!({"spoofchk": "on", "vlan": 5}));
        assert_eq!(s.default_route, Some(vec![ip("10.1.0.1"), ip("fd01::1")]));
        assert_eq!(s.infiniband_guid.as_deref(), Some("24:8a:07:03:00:8d:ae:2f"));
    }

    #[test]
    fn a_parameter_is_json_when_it_parses_as_json_otherwise_the_string() {
        assert_eq!(parameter_value(&json!("02:00:00:00:00:01")), json!("02:00:00:00:00:01"));
        assert_eq!(parameter_value(&json!("[\"10.1.0.5/24\"]")), json!(["10.1.0.5/24"]));
        assert_eq!(parameter_value(&json!("{\"a\": 1}")), json!({"a": 1}));
        assert_eq!(parameter_value(&json!("\"quoted\"")), json!("quoted"));
        assert_eq!(parameter_value(&json!("42")), json!(42));
        assert_eq!(parameter_value(&json!("")), json!(""));
        assert_eq!(parameter_value(&json!("[unclosed")), json!("[unclosed"));
        // A runtime writing JSON values directly is taken at its word.
        assert_eq!(parameter_value(&json!(["10.1.0.5/24"])), json!(["10.1.0.5/24"]));
        assert_eq!(parameter_value(&json!(7)), json!(7));
        let e = one(json!({"networkName": "n", "parameters": {"ips": ["10.1.0.5/24"]}})).unwrap();
        assert_eq!(e.selection.ips, Some(vec!["10.1.0.5/24".into()]));
    }

    /// Each invalid parameter is refused with the reason the selection annotation's parser
    /// gives for the same key and value: one validator for both.
    #[test]
    fn parameters_are_validated_as_the_selection_annotations_keys_are() {
        for (key, value) in [
            ("ips", json!("10.1.0.5/24")),
            ("ips", json!("[]")),
            ("ips", json!("[\"10.1.0.300\"]")),
            ("mac", json!("02:00:00:00:00")),
            ("mac", json!("5")),
            ("cni-args", json!("[1]")),
            ("portMappings", json!("[]")),
            ("portMappings", json!("[{\"hostPort\": 0, \"containerPort\": 80}]")),
            ("portMappings", json!("[{\"hostPort\": 1, \"containerPort\": 1, \"protocol\": \"icmp\"}]")),
            ("bandwidth", json!("{}")),
            ("bandwidth", json!("{\"ingressBurst\": 300}")),
            ("bandwidth", json!("{\"rate\": 1}")),
            ("default-route", json!("10.1.0.1")),
            ("default-route", json!("[\"gw\"]")),
        ] {
            let err = one(json!({"networkName": "n", "parameters": {key: value.clone()}})).unwrap_err();
            let SandboxNetworksError::InvalidParameter { entry: 0, key: ref k, ref reason } = err else {
                panic!("{key}={value}: {err:?}")
            };
            assert_eq!(k, key);
            let annotation = json!([{"name": "n", key: parameter_value(&value)}]).to_string();
            let npwg = parse_selection(&annotation).unwrap_err().to_string();
            assert!(
                npwg.ends_with(reason.as_str()),
                "{key}={value}: {reason:?} is not the annotation's {npwg:?}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("runtimeConfig.podSandboxNetworks[0].parameters.{key}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn every_invalid_list_is_refused_naming_the_entry_and_the_field() {
        let cases: Vec<(Value, &str)> = vec![
            (json!({"networkName": "n"}), "must be a list of PodSandboxNetworkConfig objects; it is an object"),
            (json!("n"), "it is a string"),
            (json!(["n"]), "[0] must be an object with \"interfaceName\", \"networkName\" and \"parameters\"; it is a string"),
            (json!([{"networkName": "n", "ifname": "x"}]), "[0] has the unknown key \"ifname\""),
            (json!([{"networkName": "n", "network_name": "n"}]), "[0] gives networkName twice, as \"networkName\" and as \"network_name\""),
            (json!([{"networkName": "n", "interfaceName": "a", "interface_name": "a"}]), "gives interfaceName twice"),
            (json!([{"networkName": 5}]), "[0].networkName must be a string; it is a number"),
            (json!([{"networkName": "n", "interfaceName": ["eth0"]}]), "[0].interfaceName must be a string; it is a list"),
            (json!([{"networkName": "n", "parameters": "mac=x"}]), "[0].parameters must be an object of strings; it is a string"),
            (json!([{"networkName": "n", "parameters": []}]), "it is a list"),
            (json!([{"interfaceName": "eth0"}]), "[0] has no \"networkName\""),
            (json!([{"networkName": ""}]), "[0] has no \"networkName\""),
            (json!([{"networkName": "a"}, {"networkName": "Blue"}]), "[1].networkName \"Blue\": the name is not a DNS-1123 subdomain"),
            (json!([{"networkName": "a/b/c"}]), "\"a/b/c\": the name is not a DNS-1123 subdomain"),
            (json!([{"networkName": "My_ns/b"}]), "\"My_ns/b\": the namespace is not a DNS-1123 label"),
            (json!([{"networkName": "/b"}]), "\"/b\": the namespace is not a DNS-1123 label"),
            (json!([{"networkName": "a/"}]), "\"a/\": the name is not a DNS-1123 subdomain"),
            (json!([{"networkName": "_Fallback"}]), "\"_Fallback\": the name is not"),
            (json!([{"networkName": "ns/_fallback"}]), "\"ns/_fallback\": the name is not"),
            (json!([{"networkName": "n", "interfaceName": "this-name-is-too-long"}]), "[0].interfaceName \"this-name-is-too-long\" is not a valid interface name: it is 21 bytes long"),
            (json!([{"networkName": "n", "interfaceName": "a/b"}]), "it contains '/'"),
            (json!([{"networkName": "n", "parameters": {"vlan": "5"}}]), "[0].parameters has the key \"vlan\", which plexus does not know; the parameters are the NPWG per-attachment keys: ips, mac, cni-args, portMappings, bandwidth, infiniband-guid, default-route"),
            (json!([{"networkName": "n", "parameters": {"infiniband-guid": "00:01:02:03:04:05:06"}}]), "[0].parameters.infiniband-guid: \"infiniband-guid\" \"00:01:02:03:04:05:06\" is not an 8-byte InfiniBand GUID"),
            (json!([{"networkName": "n", "parameters": {"name": "other"}}]), "the key \"name\", which comes from the entry's \"networkName\""),
            (json!([{"networkName": "n", "parameters": {"namespace": "x"}}]), "the key \"namespace\", which comes from the entry's \"networkName\""),
            (json!([{"networkName": "n", "parameters": {"interface": "x"}}]), "the key \"interface\", which comes from the entry's \"interfaceName\""),
            (json!([{"networkName": "n", "parameters": {"mac": "zz"}}]), "[0].parameters.mac: \"mac\" \"zz\" is not a 6-byte Ethernet"),
            (json!([{"networkName": "a", "parameters": {"default-route": "[]"}}]), "[0] sets \"default-route\", but the first network takes the place"),
            (
                json!([{"networkName": "a"}, {"networkName": "b", "parameters": {"default-route": "[]"}},
                       {"networkName": "c", "parameters": {"default-route": "[\"10.0.0.1\"]"}}]),
                "[1] and [2] both set \"default-route\"",
            ),
        ];
        for (list, want) in cases {
            let err = parse(list.clone()).unwrap_err();
            assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
            let text = err.to_string();
            assert!(text.starts_with("runtimeConfig.podSandboxNetworks"), "{list}: {text}");
            assert!(text.contains(want), "{list}: got {text:?}, want {want:?}");
        }
    }

    #[test]
    fn the_first_broken_entry_is_reported() {
        let err =
            parse(json!([{"networkName": "ok"}, {"networkName": "Bad"}, {"networkName": 1}])).unwrap_err();
        assert!(matches!(err, SandboxNetworksError::InvalidNetworkName { entry: 1, .. }), "{err:?}");
    }

    #[test]
    fn the_number_of_entries_is_bounded_before_any_entry_is_read() {
        let at_limit = Value::Array(vec![json!({"networkName": "n"}); MAX_SELECTIONS]);
        assert_eq!(parse(at_limit).unwrap().len(), MAX_SELECTIONS);
        let over = Value::Array(vec![json!("not an entry"); MAX_SELECTIONS + 1]);
        assert_eq!(parse(over).unwrap_err(), SandboxNetworksError::TooMany { count: MAX_SELECTIONS + 1 });
    }

    #[test]
    fn the_same_network_twice_is_two_entries() {
        let e = parse(json!([{"networkName": "n", "interfaceName": "eth0"}, {"networkName": "n"}])).unwrap();
        assert_eq!(e[0].network, e[1].network);
    }

    #[test]
    fn the_first_entry_must_be_on_the_runtimes_interface() {
        let list =
            |first: Value| parse(json!([first, {"networkName": "b", "interfaceName": "net1"}])).unwrap();
        assert_eq!(check_first_interface(&[], "eth0"), Ok(()));
        assert_eq!(
            check_first_interface(&list(json!({"networkName": "a", "interfaceName": "eth0"})), "eth0"),
            Ok(())
        );
        let elsewhere =
            check_first_interface(&list(json!({"networkName": "a", "interfaceName": "net0"})), "eth0");
        assert_eq!(
            elsewhere,
            Err(SandboxNetworksError::FirstNotOnRuntimeInterface {
                given: "net0".into(),
                runtime: "eth0".into()
            })
        );
        let text = elsewhere.unwrap_err().to_string();
        assert!(
            text.contains("[0].interfaceName is \"net0\", but the runtime's CNI_IFNAME is \"eth0\""),
            "{text}"
        );
        let absent = check_first_interface(&list(json!({"networkName": "a"})), "eth0").unwrap_err();
        assert_eq!(
            absent,
            SandboxNetworksError::FirstNotOnRuntimeInterface { given: "".into(), runtime: "eth0".into() }
        );
        // Only the first: a later entry is on any interface but the runtime's (the plan's rule).
        assert_eq!(
            check_first_interface(&list(json!({"networkName": "a", "interfaceName": "eth1"})), "eth1"),
            Ok(())
        );
    }

    #[test]
    fn a_list_with_an_annotation_says_pick_one() {
        let err = SandboxNetworksError::WithAnnotation { annotation: "k8s.v1.cni.cncf.io/networks" };
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().contains(
            "k8s.v1.cni.cncf.io/networks annotation; a pod gets its networks from one of them: pick one"
        ));
    }
}
