//! The network selection annotation `k8s.v1.cni.cncf.io/networks` (spec 4.1), both formats.
//!
//! An invalid annotation is not an error of the pod's ADD: the spec says it "shall be
//! invalid and ignored". The parser therefore returns the exact reason, and the engine
//! decides whether to ignore loudly (default) or fail (strict mode).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cni::{CniCode, ErrorCode};

use super::validate::{
    is_infiniband_guid, is_kernel_ifname, is_mac, is_nad_name, is_namespace, parse_ip_with_optional_prefix,
};

/// One element of the selection: a request to attach one network (spec 4.1.2.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSelection {
    pub name: String,
    /// `None`: the pod's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ips: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni_args: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_mappings: Option<Vec<PortMapping>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_route: Option<Vec<IpAddr>>,
    /// The InfiniBand GUID the interface gets (spec 4.1.2.1.10): eight colon-separated hex
    /// bytes, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infiniband_guid: Option<String>,
    /// The IPAMClaim (in the pod's namespace) whose addresses the attachment gets (spec
    /// 4.1.2.1.11, section 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_claim_reference: Option<String>,
}

impl NetworkSelection {
    /// The namespace of the selected NAD: its own, or the pod's.
    pub fn namespace_or<'a>(&'a self, pod_namespace: &'a str) -> &'a str {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => pod_namespace,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// CNI CONVENTIONS spell protocols in lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<IpAddr>,
}

/// Rates in bits per second, bursts in bits (spec 4.1.2.1.8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub ingress_rate: Option<u64>,
    pub ingress_burst: Option<u64>,
    pub egress_rate: Option<u64>,
    pub egress_burst: Option<u64>,
}

/// Why an annotation is invalid, precise enough for the user to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid k8s.v1.cni.cncf.io/networks annotation: {0}")]
pub struct SelectionError(pub String);

/// Why one key of an element is invalid; the element's context is added by its caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidField(pub String);

/// An invalid selection is a config the user must fix.
impl CniCode for SelectionError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, SelectionError> {
    Err(SelectionError(msg.into()))
}

/// The most selections one annotation may hold. Each selection is an interface in the pod,
/// delegate plugins run one after another (tens of milliseconds each) and one network-status
/// entry: 64 attachments take a few seconds to ADD, far within the runtime's timeout, and keep
/// the status well below the API server's annotation size limit. Pods that need more than a
/// handful of secondary interfaces (SR-IOV, DPDK) use a few dozen at most.
pub const MAX_SELECTIONS: usize = 64;

/// The longest annotation value read, in bytes: the API server's limit for all of a pod's
/// annotations together (256 KiB). A longer value (only a standalone manifest can hold one)
/// is refused before anything of it is parsed.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;

/// Parses the annotation value. Blank means no secondary networks.
///
/// The length and the number of selections are checked before any element is looked at,
/// so a hostile value fails in time proportional to one scan of at most
/// [`MAX_ANNOTATION_BYTES`].
pub fn parse_selection(annotation: &str) -> Result<Vec<NetworkSelection>, SelectionError> {
    if annotation.len() > MAX_ANNOTATION_BYTES {
        return invalid(format!(
            "the value is {} bytes long; plexus reads at most {MAX_ANNOTATION_BYTES} bytes (256 KiB, the API \
             server's limit for all of a pod's annotations); select fewer networks",
            annotation.len()
        ));
    }
    let text = annotation.trim();
    let selections = if text.is_empty() {
        Vec::new()
    } else if text.starts_with('[') {
        parse_json_list(text)?
    } else if text.starts_with('{') {
        return invalid("the JSON format is a list: wrap the object in [ ]");
    } else {
        parse_comma_list(text)?
    };
    let with_default_route = selections.iter().filter(|s| s.default_route.is_some()).count();
    if with_default_route > 1 {
        return invalid(format!(
            "\"default-route\" is set on {with_default_route} networks; only one network may set it (spec 4.1.2.1.9)"
        ));
    }
    Ok(selections)
}

/// `net-a,other-ns/net-b` (spec 4.1.1), with Multus's `name@ifname` shorthand.
fn parse_comma_list(text: &str) -> Result<Vec<NetworkSelection>, SelectionError> {
    check_count(text.bytes().filter(|&b| b == b',').count() + 1)?;
    text.split(',').enumerate().map(|(i, item)| parse_comma_item(i, item.trim())).collect()
}

fn check_count(count: usize) -> Result<(), SelectionError> {
    if count > MAX_SELECTIONS {
        return invalid(format!(
            "it holds {count} selections; a pod may select at most {MAX_SELECTIONS} networks (MAX_SELECTIONS); \
             select fewer"
        ));
    }
    Ok(())
}

fn parse_comma_item(index: usize, item: &str) -> Result<NetworkSelection, SelectionError> {
    if item.is_empty() {
        return invalid(format!("element {index} of the comma-separated list is empty"));
    }
    let (reference, interface) = match item.split_once('@') {
        Some((r, i)) => (r, Some(i)),
        None => (item, None),
    };
    let (namespace, name) = match reference.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, reference),
    };
    let mut sel = NetworkSelection { name: name.to_owned(), ..Default::default() };
    if let Some(ns) = namespace {
        check_namespace(index, ns)?;
        sel.namespace = Some(ns.to_owned());
    }
    check_name(index, name)?;
    if let Some(ifname) = interface {
        check_interface(index, ifname)?;
        sel.interface = Some(ifname.to_owned());
    }
    Ok(sel)
}

fn parse_json_list(text: &str) -> Result<Vec<NetworkSelection>, SelectionError> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return invalid(format!("not valid JSON: {e}")),
    };
    let Value::Array(items) = value else { return invalid("the JSON format must be a list of objects") };
    check_count(items.len())?;
    items.iter().enumerate().map(|(i, item)| parse_json_item(i, item)).collect()
}

fn parse_json_item(index: usize, item: &Value) -> Result<NetworkSelection, SelectionError> {
    let Value::Object(obj) = item else {
        return invalid(format!("element {index} must be an object with at least a \"name\""));
    };
    let name = match obj.get("name") {
        Some(Value::String(n)) => n.clone(),
        Some(_) => return invalid(format!("element {index}: \"name\" must be a string")),
        None => return invalid(format!("element {index} has no \"name\"; it is required (spec 4.1.2.1.1)")),
    };
    check_name(index, &name)?;
    let mut sel = NetworkSelection { name, ..Default::default() };
    for (key, value) in obj {
        let ctx = |what: &str| format!("element {index} ({}): {what}", sel.name);
        match key.as_str() {
            "name" => {}
            "namespace" => {
                let ns =
                    string(value).ok_or_else(|| SelectionError(ctx("\"namespace\" must be a string")))?;
                if !ns.is_empty() {
                    check_namespace(index, ns)?;
                    sel.namespace = Some(ns.to_owned());
                }
            }
            "interface" => {
                let ifname =
                    string(value).ok_or_else(|| SelectionError(ctx("\"interface\" must be a string")))?;
                check_interface(index, ifname)?;
                sel.interface = Some(ifname.to_owned());
            }
            "default-route" => {
                sel.default_route =
                    Some(parse_default_route(value).map_err(|e| SelectionError(ctx(&e.to_string())))?)
            }
            "ipam-claim-reference" => {
                let claim = string(value)
                    .ok_or_else(|| SelectionError(ctx("\"ipam-claim-reference\" must be a string")))?;
                if !is_nad_name(claim) {
                    return invalid(ctx(&format!(
                        "\"ipam-claim-reference\" {claim:?} is not a valid IPAMClaim name (DNS-1123 subdomain: \
                         lower-case letters, digits, '-' and '.')"
                    )));
                }
                sel.ipam_claim_reference = Some(claim.to_owned());
            }
            // Reverse-domain keys belong to other implementations (spec 4.1.2.1); keys
            // without a period are reserved for future spec versions. Neither changes
            // what this version asks for, so both are ignored.
            other => {
                if let Err(e) = read_attachment_key(&mut sel, other, value) {
                    return invalid(format!("element {index} ({}): {e}", sel.name));
                }
            }
        }
    }
    if sel.ips.is_some() && sel.ipam_claim_reference.is_some() {
        return invalid(format!(
            "element {index} ({}): \"ips\" and \"ipam-claim-reference\" are both set; the addresses come from \
             the IPAMClaim or from \"ips\", not both (spec 4.1.2.1.11): remove one",
            sel.name
        ));
    }
    Ok(sel)
}

/// The keys of a selection element that parameterise one attachment (spec 4.1.2.1.3 to
/// 4.1.2.1.8, 4.1.2.1.10), as opposed to the keys that say which network (`name`, `namespace`), where
/// (`interface`) and the pod-wide `default-route`. plexus's AttachmentParameters objects carry
/// exactly these.
pub const ATTACHMENT_KEYS: [&str; 6] =
    ["ips", "mac", "cni-args", "portMappings", "bandwidth", "infiniband-guid"];

/// Reads one of [`ATTACHMENT_KEYS`] into `sel`, validated as the annotation's element is.
/// `Ok(false)`: `key` is not one of them and `sel` is unchanged.
pub fn read_attachment_key(
    sel: &mut NetworkSelection,
    key: &str,
    value: &Value,
) -> Result<bool, InvalidField> {
    match key {
        "ips" => sel.ips = Some(parse_ips(value)?),
        "mac" => {
            let mac = string(value).ok_or_else(|| InvalidField("\"mac\" must be a string".into()))?;
            if !is_mac(mac) {
                return Err(InvalidField(format!(
                    "\"mac\" {mac:?} is not a 6-byte Ethernet or 20-byte InfiniBand address"
                )));
            }
            sel.mac = Some(mac.to_owned());
        }
        "cni-args" => match value {
            Value::Object(m) => sel.cni_args = Some(m.clone()),
            Value::Null => {}
            _ => return Err(InvalidField("\"cni-args\" must be an object".into())),
        },
        "portMappings" => sel.port_mappings = Some(parse_port_mappings(value)?),
        "bandwidth" => sel.bandwidth = Some(parse_bandwidth(value)?),
        "infiniband-guid" => {
            let guid =
                string(value).ok_or_else(|| InvalidField("\"infiniband-guid\" must be a string".into()))?;
            if !is_infiniband_guid(guid) {
                return Err(InvalidField(format!(
                    "\"infiniband-guid\" {guid:?} is not an 8-byte InfiniBand GUID: eight hex byte pairs \
                     separated by ':', e.g. \"24:8a:07:03:00:8d:ae:2f\" (spec 4.1.2.1.10)"
                )));
            }
            sel.infiniband_guid = Some(guid.to_owned());
        }
        _ => return Ok(false),
    }
    Ok(true)
}

fn string(v: &Value) -> Option<&str> {
    v.as_str()
}

fn check_name(index: usize, name: &str) -> Result<(), SelectionError> {
    if is_nad_name(name) {
        Ok(())
    } else {
        invalid(format!(
            "element {index}: network name {name:?} is not a valid NetworkAttachmentDefinition name \
             (DNS-1123: lower-case letters, digits, '-' and '.', spec 3.3)"
        ))
    }
}

fn check_namespace(index: usize, ns: &str) -> Result<(), SelectionError> {
    if is_namespace(ns) {
        Ok(())
    } else {
        invalid(format!("element {index}: namespace {ns:?} is not a valid DNS-1123 label"))
    }
}

fn check_interface(index: usize, ifname: &str) -> Result<(), SelectionError> {
    if is_kernel_ifname(ifname) {
        Ok(())
    } else {
        invalid(format!(
            "element {index}: interface {ifname:?} is not a valid Linux interface name \
             (1 to 15 characters, no '/', ':' or spaces)"
        ))
    }
}

fn parse_ips(value: &Value) -> Result<Vec<String>, InvalidField> {
    let Value::Array(items) = value else {
        return Err(InvalidField("\"ips\" must be a list of strings".into()));
    };
    if items.is_empty() {
        return Err(InvalidField("\"ips\" must contain at least one address (spec 4.1.2.1.3)".into()));
    }
    items
        .iter()
        .map(|ip| match ip.as_str() {
            Some(s) if parse_ip_with_optional_prefix(s).is_some() => Ok(s.to_owned()),
            _ => Err(InvalidField(format!(
                "\"ips\" element {ip} is not an IPv4 or IPv6 address with optional /prefix"
            ))),
        })
        .collect()
}

fn parse_port_mappings(value: &Value) -> Result<Vec<PortMapping>, InvalidField> {
    let Value::Array(items) = value else {
        return Err(InvalidField("\"portMappings\" must be a list of objects".into()));
    };
    if items.is_empty() {
        return Err(InvalidField(
            "\"portMappings\" must contain at least one mapping (spec 4.1.2.1.7)".into(),
        ));
    }
    items.iter().enumerate().map(|(i, m)| parse_port_mapping(i, m)).collect()
}

fn parse_port_mapping(i: usize, value: &Value) -> Result<PortMapping, InvalidField> {
    let Value::Object(m) = value else {
        return Err(InvalidField(format!("portMappings[{i}] must be an object")));
    };
    let port = |key: &str| -> Result<u16, InvalidField> {
        match m.get(key) {
            None => Err(InvalidField(format!("portMappings[{i}] has no \"{key}\"; it is required"))),
            Some(v) => match v.as_u64() {
                Some(p @ 1..=65535) => Ok(p as u16),
                _ => Err(InvalidField(format!(
                    "portMappings[{i}].{key} is {v}; it must be an integer from 1 to 65535"
                ))),
            },
        }
    };
    let host_port = port("hostPort")?;
    let container_port = port("containerPort")?;
    let protocol = match m.get("protocol") {
        None => Protocol::Tcp,
        Some(Value::String(p)) => match p.to_ascii_uppercase().as_str() {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            "SCTP" => Protocol::Sctp,
            _ => {
                return Err(InvalidField(format!(
                    "portMappings[{i}].protocol {p:?} must be TCP, UDP or SCTP"
                )))
            }
        },
        Some(v) => {
            return Err(InvalidField(format!("portMappings[{i}].protocol is {v}; it must be a string")))
        }
    };
    // hostIP is CNI CONVENTIONS' key for binding a mapping to one host address.
    let host_ip = match m.get("hostIP") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            s.parse()
                .map_err(|_| InvalidField(format!("portMappings[{i}].hostIP {s:?} is not an IP address")))?,
        ),
        Some(v) => return Err(InvalidField(format!("portMappings[{i}].hostIP is {v}; it must be a string"))),
    };
    Ok(PortMapping { host_port, container_port, protocol, host_ip })
}

fn parse_bandwidth(value: &Value) -> Result<Bandwidth, InvalidField> {
    let Value::Object(m) = value else { return Err(InvalidField("\"bandwidth\" must be an object".into())) };
    if m.is_empty() {
        return Err(InvalidField(
            "\"bandwidth\" must contain at least one of ingressRate, ingressBurst, egressRate, \
                    egressBurst (spec 4.1.2.1.8)"
                .into(),
        ));
    }
    let mut bw = Bandwidth::default();
    for (key, v) in m {
        let n = match v.as_u64() {
            Some(n) if n > 0 => n,
            _ => return Err(InvalidField(format!("bandwidth.{key} is {v}; it must be a non-zero integer"))),
        };
        match key.as_str() {
            "ingressRate" => bw.ingress_rate = Some(n),
            "ingressBurst" => bw.ingress_burst = Some(n),
            "egressRate" => bw.egress_rate = Some(n),
            "egressBurst" => bw.egress_burst = Some(n),
            other => {
                return Err(InvalidField(format!(
                "bandwidth key {other:?} is unknown; use ingressRate, ingressBurst, egressRate, egressBurst"
            )))
            }
        }
    }
    if bw.ingress_burst.is_some() && bw.ingress_rate.is_none() {
        return Err(InvalidField(
            "bandwidth.ingressBurst is set without ingressRate; set the rate too".into(),
        ));
    }
    if bw.egress_burst.is_some() && bw.egress_rate.is_none() {
        return Err(InvalidField("bandwidth.egressBurst is set without egressRate; set the rate too".into()));
    }
    Ok(bw)
}

/// The gateways of a `default-route` key (spec 4.1.2.1.9): a list of IP addresses, possibly
/// empty (the engine's `default_route` says what each takes).
pub fn parse_default_route(value: &Value) -> Result<Vec<IpAddr>, InvalidField> {
    let Value::Array(items) = value else {
        return Err(InvalidField("\"default-route\" must be a list of gateway addresses".into()));
    };
    items
        .iter()
        .map(|gw| match gw.as_str().map(str::parse::<IpAddr>) {
            Some(Ok(ip)) => Ok(ip),
            _ => Err(InvalidField(format!("\"default-route\" element {gw} is not an IP address"))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(json: &str) -> Result<NetworkSelection, SelectionError> {
        parse_selection(json).map(|mut v| v.remove(0))
    }

    #[test]
    fn blank_annotation_selects_nothing() {
        assert_eq!(parse_selection("  \n"), Ok(vec![]));
        assert_eq!(parse_selection("[]"), Ok(vec![]));
    }

    #[test]
    fn comma_format_with_namespaces_spaces_and_interface_shorthand() {
        let s = parse_selection("net-a, net-b ,other-ns/net-c,net-d@eth7").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "net-a");
        assert_eq!(s[1].name, "net-b");
        assert_eq!((s[2].namespace.as_deref(), s[2].name.as_str()), (Some("other-ns"), "net-c"));
        assert_eq!(s[3].interface.as_deref(), Some("eth7"));
    }

    #[test]
    fn comma_format_rejects_bad_items() {
        for bad in ["net-a,,net-b", "Net-A", "ns/", "/net", "NS/net", "net@", "net@a/b", "a/b/c"] {
            assert!(parse_selection(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_format_every_key() {
        let s = one(
            r#"[{"name":"net-b","namespace":"other-ns","ips":["10.2.2.42/24","2001:db8::5"],
                "mac":"02:23:45:67:89:01","interface":"data0","cni-args":{"spoofchk":"on"},
                "portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"udp"},{"hostPort":1,"containerPort":2}],
                "bandwidth":{"ingressRate":2048,"ingressBurst":300,"egressRate":8000,"egressBurst":200},
                "default-route":["10.0.0.1","2001:db8::1"],"infiniband-guid":"24:8a:07:03:00:8d:ae:2f",
                "org.example.custom":{"anything":1}}]"#,
        )
        .unwrap();
        assert_eq!(s.namespace.as_deref(), Some("other-ns"));
        assert_eq!(s.ips.as_ref().unwrap().len(), 2);
        assert_eq!(s.mac.as_deref(), Some("02:23:45:67:89:01"));
        assert_eq!(s.interface.as_deref(), Some("data0"));
        assert_eq!(s.cni_args.as_ref().unwrap()["spoofchk"], "on");
        let pm = s.port_mappings.as_ref().unwrap();
        assert_eq!(
            pm[0],
            PortMapping { host_port: 8080, container_port: 80, protocol: Protocol::Udp, host_ip: None }
        );
        assert_eq!(pm[1].protocol, Protocol::Tcp);
        assert_eq!(s.bandwidth.as_ref().unwrap().egress_burst, Some(200));
        assert_eq!(s.default_route.as_ref().unwrap().len(), 2);
        assert_eq!(s.infiniband_guid.as_deref(), Some("24:8a:07:03:00:8d:ae:2f"));
    }

    #[test]
    fn empty_namespace_means_the_pods() {
        let s = one(r#"[{"name":"n","namespace":""}]"#).unwrap();
        assert_eq!(s.namespace, None);
        assert_eq!(s.namespace_or("pod-ns"), "pod-ns");
    }

    #[test]
    fn protocol_is_case_insensitive() {
        for (text, want) in [("tCp", Protocol::Tcp), ("UDP", Protocol::Udp), ("sctp", Protocol::Sctp)] {
            let json = format!(
                r#"[{{"name":"n","portMappings":[{{"hostPort":1,"containerPort":1,"protocol":"{text}"}}]}}]"#
            );
            assert_eq!(one(&json).unwrap().port_mappings.unwrap()[0].protocol, want);
        }
    }

    #[test]
    fn every_invalid_value_is_reported_with_its_reason() {
        let cases = [
            (r#"{"name":"n"}"#, "wrap the object"),
            (r#"[{"name":"n"}"#, "not valid JSON"),
            (r#"["n"]"#, "must be an object"),
            (r#"[{"namespace":"x"}]"#, "no \"name\""),
            (r#"[{"name":5}]"#, "must be a string"),
            (r#"[{"name":"N"}]"#, "not a valid NetworkAttachmentDefinition name"),
            (r#"[{"name":"n","namespace":"Bad_ns"}]"#, "not a valid DNS-1123 label"),
            (r#"[{"name":"n","ips":[]}]"#, "at least one address"),
            (r#"[{"name":"n","ips":["10.0.0.300"]}]"#, "not an IPv4 or IPv6"),
            (r#"[{"name":"n","ips":"10.0.0.1"}]"#, "list of strings"),
            (r#"[{"name":"n","mac":"02:23:45:67:89"}]"#, "6-byte Ethernet or 20-byte"),
            (r#"[{"name":"n","interface":"this-name-is-too-long"}]"#, "not a valid Linux interface name"),
            (r#"[{"name":"n","cni-args":[1]}]"#, "must be an object"),
            (r#"[{"name":"n","portMappings":[]}]"#, "at least one mapping"),
            (r#"[{"name":"n","portMappings":[{"hostPort":0,"containerPort":80}]}]"#, "from 1 to 65535"),
            (r#"[{"name":"n","portMappings":[{"hostPort":8080,"containerPort":65536}]}]"#, "from 1 to 65535"),
            (r#"[{"name":"n","portMappings":[{"containerPort":80}]}]"#, "no \"hostPort\""),
            (r#"[{"name":"n","portMappings":[{"hostPort":80}]}]"#, "no \"containerPort\""),
            (
                r#"[{"name":"n","portMappings":[{"hostPort":1,"containerPort":1,"protocol":"icmp"}]}]"#,
                "TCP, UDP or SCTP",
            ),
            (r#"[{"name":"n","portMappings":[{"hostPort":1,"containerPort":1,"hostIP":"x"}]}]"#, "hostIP"),
            (r#"[{"name":"n","bandwidth":{}}]"#, "at least one of"),
            (r#"[{"name":"n","bandwidth":{"ingressRate":0}}]"#, "non-zero"),
            (r#"[{"name":"n","bandwidth":{"egressRate":-5}}]"#, "non-zero"),
            (r#"[{"name":"n","bandwidth":{"ingressBurst":300}}]"#, "without ingressRate"),
            (r#"[{"name":"n","bandwidth":{"egressBurst":300}}]"#, "without egressRate"),
            (r#"[{"name":"n","bandwidth":{"rate":1}}]"#, "unknown"),
            (r#"[{"name":"n","default-route":"10.0.0.1"}]"#, "list of gateway"),
            (r#"[{"name":"n","default-route":["gw"]}]"#, "not an IP address"),
            (r#"[{"name":"n","infiniband-guid":5}]"#, "\"infiniband-guid\" must be a string"),
            (r#"[{"name":"n","ipam-claim-reference":7}]"#, "\"ipam-claim-reference\" must be a string"),
            (r#"[{"name":"n","ipam-claim-reference":"VM_1"}]"#, "not a valid IPAMClaim name"),
            (
                r#"[{"name":"n","ipam-claim-reference":"vm-a.tenantred","ips":["10.0.0.1/24"]}]"#,
                "\"ips\" and \"ipam-claim-reference\" are both set",
            ),
            (r#"[{"name":"n","infiniband-guid":"24:8a:07:03:00:8d:ae"}]"#, "not an 8-byte InfiniBand GUID"),
            (r#"[{"name":"n","infiniband-guid":"02:23:45:67:89:01"}]"#, "not an 8-byte InfiniBand GUID"),
            (
                r#"[{"name":"a","default-route":[]},{"name":"b","default-route":["10.0.0.1"]}]"#,
                "only one network",
            ),
        ];
        for (text, want) in cases {
            let err = parse_selection(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: got {err:?}, want {want:?}");
        }
    }

    #[test]
    fn an_ipam_claim_reference_names_a_claim() {
        let s = one(r#"[{"name":"net-b","ipam-claim-reference":"vm123.tenantblue"}]"#).unwrap();
        assert_eq!(s.ipam_claim_reference.as_deref(), Some("vm123.tenantblue"));
        assert_eq!(s.ips, None);
    }

    #[test]
    fn an_empty_default_route_list_is_valid() {
        assert_eq!(one(r#"[{"name":"n","default-route":[]}]"#).unwrap().default_route, Some(vec![]));
    }

    #[test]
    fn the_number_of_selections_is_bounded_in_both_formats() {
        let at_limit = vec!["net-a"; MAX_SELECTIONS].join(",");
        assert_eq!(parse_selection(&at_limit).unwrap().len(), MAX_SELECTIONS);
        let over = vec!["net-a"; MAX_SELECTIONS + 1].join(",");
        let err = parse_selection(&over).unwrap_err().to_string();
        assert!(err.contains(&format!("{} selections", MAX_SELECTIONS + 1)), "{err}");
        assert!(err.contains(&format!("at most {MAX_SELECTIONS} networks")), "{err}");

        let many = vec!["net-a"; 10_000].join(",");
        let err = parse_selection(&many).unwrap_err().to_string();
        assert!(err.contains("10000 selections") && err.contains("at most 64"), "{err}");
        let json = format!("[{}]", vec![r#"{"name":"net-a"}"#; 10_000].join(","));
        let err = parse_selection(&json).unwrap_err().to_string();
        assert!(err.contains("10000 selections") && err.contains("at most 64"), "{err}");
    }

    #[test]
    fn the_count_is_checked_before_any_element() {
        // Element 1 is invalid, but the count is what the user must fix first: it is
        // reported without looking at elements.
        let many = format!("net-a,BAD,{}", vec!["net-a"; 100].join(","));
        assert!(parse_selection(&many).unwrap_err().to_string().contains("102 selections"));
    }

    #[test]
    fn a_value_longer_than_the_api_servers_limit_is_refused_by_its_length() {
        let huge = "a,".repeat(512 * 1024);
        assert_eq!(huge.len(), 1024 * 1024);
        let err = parse_selection(&huge).unwrap_err().to_string();
        assert!(err.contains("1048576 bytes long") && err.contains("at most 262144 bytes"), "{err}");
        let json = format!("[{}]", " ".repeat(MAX_ANNOTATION_BYTES));
        assert!(parse_selection(&json).unwrap_err().to_string().contains("bytes long"));
        // At the limit the value is parsed (blank padding around a short list).
        let padded = format!("net-a{}", " ".repeat(MAX_ANNOTATION_BYTES - 5));
        assert_eq!(parse_selection(&padded).unwrap().len(), 1);
    }

    #[test]
    fn the_same_network_twice_is_two_selections() {
        assert_eq!(parse_selection("net-a,net-a").unwrap().len(), 2);
    }
}
