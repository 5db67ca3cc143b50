//! The pod's list of PodNetworks: the `plexus.dev/pod-networks` annotation, which stands for the
//! KEP's `pod.spec.networks` (no released API server has that field), and the KEP's static
//! validations of it.
//!
//! The value is the KEP's JSON list:
//! `[{"name": "<PodNetwork>" | "attachmentName": "<PodNetworkAttachment>", "interfaceName": "net1",
//! "isDefaultGW": true}, ...]`. `null` for a key means the key is absent (as Go's JSON decoder
//! reads the KEP's types); a blank value is the empty list.
//!
//! The cluster default network (the PodNetwork `default`) is always attached, on the runtime's
//! interface (CNI_IFNAME, from which kubelet reads the pod IP), first. The list need not name
//! it; when it does, its entry may only name that interface (or none), and holds the pod's
//! default route with or without `isDefaultGW`. [`parse_pod_networks`] returns the entries as
//! written, in the pod's order, so that every index in a message is the one the user wrote;
//! the implied `default` is not inserted.
//!
//! Every rule here is static (it needs nothing but the text); a refused list is a config the
//! user must fix, CNI code 7, and nothing is attached. The active rules that need the objects
//! (present, Ready) belong to the node; [`check_each_network_once`] and
//! [`check_attachment_network`] are the ones it applies once PodNetworkAttachments are resolved.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cni::json::json_type;
use crate::cni::{CniCode, ErrorCode};
use crate::spec::selection::{MAX_ANNOTATION_BYTES, MAX_SELECTIONS};
use crate::spec::validate::{is_nad_name, kernel_ifname_problem};

use super::model::{DEFAULT_POD_NETWORK, POD_NETWORKS_ANNOTATION};

/// One entry of the pod's list: the KEP's `Network`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodNetworkRequest {
    /// A PodNetwork (cluster-scoped). Exactly one of `name` and `attachment_name` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A PodNetworkAttachment in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment_name: Option<String>,
    /// The interface in the pod; `None`: plexus names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_name: Option<String>,
    /// This attachment holds the pod's default route(s).
    #[serde(default, rename = "isDefaultGW", skip_serializing_if = "is_false")]
    pub is_default_gw: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PodNetworkRequest {
    /// Whether the entry names the cluster default network (`{"name": "default"}`).
    pub fn is_default_network(&self) -> bool {
        self.name.as_deref() == Some(DEFAULT_POD_NETWORK)
    }
}

/// The keys of an entry, as the KEP spells them.
const KEYS: &str = "name, attachmentName, interfaceName, isDefaultGW";

/// Which rule of the pod's list is broken, and what to fix. Each variant is one rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: the value is {bytes} bytes long; plexus reads at most \
         {MAX_ANNOTATION_BYTES} bytes (256 KiB, the API server's limit for all of a pod's annotations); \
         list fewer networks"
    )]
    TooLong { bytes: usize },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: not valid JSON ({reason}); write a JSON list such as \
         [{{\"name\":\"blue\",\"interfaceName\":\"net1\"}}]"
    )]
    NotJson { reason: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: an object holds the key {key:?} twice (line {line}, column \
         {column}); which of the values counts would be a guess: keep one"
    )]
    KeyTwice { key: String, line: usize, column: usize },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: the value must be a JSON list of entries, it is {found}; \
         wrap the entries in [ ]"
    )]
    NotAList { found: &'static str },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: it lists {count} networks; a pod may list at most \
         {MAX_SELECTIONS} (MAX_SELECTIONS); list fewer"
    )]
    TooManyEntries { count: usize },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} is {found}; each entry must be an object \
         with the keys {KEYS}"
    )]
    EntryNotAnObject { entry: usize, found: &'static str },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} has the unknown key {key:?}; an entry may \
         only hold {KEYS} (the KEP's Network); remove it or fix its spelling"
    )]
    UnknownKey { entry: usize, key: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry}: \"{key}\" is {found}; it must be {expected}"
    )]
    WrongType { entry: usize, key: &'static str, found: &'static str, expected: &'static str },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} names no network; set exactly one of \
         \"name\" (a PodNetwork) or \"attachmentName\" (a PodNetworkAttachment in the pod's namespace)"
    )]
    NoNetwork { entry: usize },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} sets both \"name\" ({name:?}) and \
         \"attachmentName\" ({attachment_name:?}); only one of them may be set (KEP-3698): keep \"name\" to \
         attach the PodNetwork as it is, or \"attachmentName\" to attach it with the PodNetworkAttachment's \
         parameters"
    )]
    BothNetworkAndAttachment { entry: usize, name: String, attachment_name: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry}: \"{key}\" is empty; give the object's name \
         or remove the key"
    )]
    EmptyName { entry: usize, key: &'static str },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry}: \"{key}\" {name:?} is not a valid object \
         name (DNS-1123 subdomain: at most 253 lower-case letters, digits, '-' and '.', alphanumeric at both \
         ends of each part); no such object can exist, fix the name"
    )]
    InvalidObjectName { entry: usize, key: &'static str, name: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entries {first} and {second} both name the PodNetwork \
         {name:?}; a pod may attach each PodNetwork only once (KEP-3698); remove one of them"
    )]
    PodNetworkTwice { first: usize, second: usize, name: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entries {first} and {second} both set \"isDefaultGW\": \
         true; only one network may hold the pod's default gateway (KEP-3698); keep it on one of them"
    )]
    DefaultGatewayTwice { first: usize, second: usize },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entries {first} and {second} both ask for the interface \
         {interface:?}; interface names must be unique in the pod (KEP-3698); rename one of them"
    )]
    InterfaceTwice { first: usize, second: usize, interface: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry}: \"interfaceName\" {interface:?} is not a \
         valid Linux interface name: {problem}; a Linux interface name is 1 to 15 bytes, without '/', ':' or \
         white space, and not \".\" or \"..\" (omit the key to let plexus name it)"
    )]
    InvalidInterfaceName { entry: usize, interface: String, problem: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} attaches the cluster default network \
         (\"{DEFAULT_POD_NETWORK}\") on {interface:?}, but it is always attached on the runtime's interface \
         {runtime_interface:?} (kubelet reads the pod IP there); set \"interfaceName\" to {runtime_interface:?} \
         or omit it"
    )]
    DefaultNetworkElsewhere { entry: usize, interface: String, runtime_interface: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry} asks for the interface {interface:?}, which \
         the cluster default network (\"{DEFAULT_POD_NETWORK}\") always holds (the runtime's interface); choose \
         another name"
    )]
    RuntimeInterfaceTaken { entry: usize, interface: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entries {first} and {second} both reach the PodNetwork \
         {pod_network:?} (through a PodNetworkAttachment); a pod may attach each PodNetwork only once \
         (KEP-3698); remove one of them"
    )]
    PodNetworkReachedTwice { first: usize, second: usize, pod_network: String },

    #[error(
        "invalid {POD_NETWORKS_ANNOTATION} annotation: entry {entry}: the PodNetworkAttachment {attachment:?} \
         is for the cluster default network (\"{DEFAULT_POD_NETWORK}\"), which every pod already has on the \
         runtime's interface; a pod may attach each PodNetwork only once (KEP-3698); remove the entry"
    )]
    DefaultNetworkThroughAttachment { entry: usize, attachment: String },

    #[error(
        "the pod has both the k8s.v1.cni.cncf.io/networks and the {POD_NETWORKS_ANNOTATION} annotations; a pod \
         asks for its networks in one of them: pick one and remove the other"
    )]
    BothAnnotations,
}

/// Every rule of the list is a config the user must fix.
impl CniCode for RequestError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// Parses the annotation value and applies the KEP's static validations. `default_ifname` is
/// the runtime's interface (CNI_IFNAME), which the cluster default network always holds.
///
/// The length and the number of entries are checked before any entry is looked at, so a
/// hostile value fails in time proportional to one scan of at most [`MAX_ANNOTATION_BYTES`].
/// The first broken rule is reported, in this order: the value (length, JSON, list, count),
/// each entry (in order: its shape, its keys, their types, its names, its interface), then the
/// rules across entries (each PodNetwork once, one `isDefaultGW`, unique interfaces) at the
/// first entry that breaks one.
pub fn parse_pod_networks(text: &str, default_ifname: &str) -> Result<Vec<PodNetworkRequest>, RequestError> {
    if text.len() > MAX_ANNOTATION_BYTES {
        return Err(RequestError::TooLong { bytes: text.len() });
    }
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let value = read_json(text)?;
    let Value::Array(items) = value else { return Err(RequestError::NotAList { found: json_type(&value) }) };
    if items.len() > MAX_SELECTIONS {
        return Err(RequestError::TooManyEntries { count: items.len() });
    }
    let requests = items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_entry(i, item, default_ifname))
        .collect::<Result<Vec<_>, _>>()?;
    check_across_entries(&requests, default_ifname)?;
    Ok(requests)
}

fn parse_entry(entry: usize, item: &Value, default_ifname: &str) -> Result<PodNetworkRequest, RequestError> {
    let Value::Object(obj) = item else {
        return Err(RequestError::EntryNotAnObject { entry, found: json_type(item) });
    };
    if let Some(key) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "name" | "attachmentName" | "interfaceName" | "isDefaultGW"))
    {
        return Err(RequestError::UnknownKey { entry, key: key.clone() });
    }
    let name = string_key(entry, obj, "name")?;
    let attachment_name = string_key(entry, obj, "attachmentName")?;
    let interface_name = string_key(entry, obj, "interfaceName")?;
    let is_default_gw = match obj.get("isDefaultGW") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(RequestError::WrongType {
                entry,
                key: "isDefaultGW",
                found: json_type(other),
                expected: "true or false",
            })
        }
    };
    match (&name, &attachment_name) {
        (None, None) => return Err(RequestError::NoNetwork { entry }),
        (Some(n), Some(a)) => {
            return Err(RequestError::BothNetworkAndAttachment {
                entry,
                name: n.clone(),
                attachment_name: a.clone(),
            })
        }
        (Some(n), None) => check_object_name(entry, "name", n)?,
        (None, Some(a)) => check_object_name(entry, "attachmentName", a)?,
    }
    if let Some(ifname) = &interface_name {
        if let Some(problem) = kernel_ifname_problem(ifname) {
            return Err(RequestError::InvalidInterfaceName { entry, interface: ifname.clone(), problem });
        }
        let is_default = name.as_deref() == Some(DEFAULT_POD_NETWORK);
        if is_default && ifname != default_ifname {
            return Err(RequestError::DefaultNetworkElsewhere {
                entry,
                interface: ifname.clone(),
                runtime_interface: default_ifname.to_owned(),
            });
        }
        if !is_default && ifname == default_ifname {
            return Err(RequestError::RuntimeInterfaceTaken { entry, interface: ifname.clone() });
        }
    }
    Ok(PodNetworkRequest { name, attachment_name, interface_name, is_default_gw })
}

/// The value as JSON, refusing an object that holds one key twice: serde_json (like Go) keeps
/// the last value silently, and `{"name":"a","name":"b"}` would attach one of the two without a
/// word.
fn read_json(text: &str) -> Result<Value, RequestError> {
    let twice = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let read = UniqueKeys { twice: &twice }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    read.map_err(|e| match twice.take() {
        Some(key) => RequestError::KeyTwice { key, line: e.line(), column: e.column() },
        None => RequestError::NotJson { reason: e.to_string() },
    })
}

/// Reads any JSON value as serde_json's `Value` does, recording the first key an object holds
/// twice (and failing there).
struct UniqueKeys<'a> {
    twice: &'a RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(UniqueKeys { twice: self.twice })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if obj.contains_key(&key) {
                let message = format!("the key {key:?} appears twice");
                self.twice.replace(Some(key));
                return Err(de::Error::custom(message));
            }
            let value = map.next_value_seed(UniqueKeys { twice: self.twice })?;
            obj.insert(key, value);
        }
        Ok(Value::Object(obj))
    }
}

/// A string key's value: absent and `null` are `None`, anything but a string is refused.
fn string_key(
    entry: usize,
    obj: &Map<String, Value>,
    key: &'static str,
) -> Result<Option<String>, RequestError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => {
            Err(RequestError::WrongType { entry, key, found: json_type(other), expected: "a string" })
        }
    }
}

fn check_object_name(entry: usize, key: &'static str, name: &str) -> Result<(), RequestError> {
    if name.is_empty() {
        Err(RequestError::EmptyName { entry, key })
    } else if !is_nad_name(name) {
        Err(RequestError::InvalidObjectName { entry, key, name: name.to_owned() })
    } else {
        Ok(())
    }
}

/// The rules across entries, each reported with the two entries that break it.
fn check_across_entries(requests: &[PodNetworkRequest], default_ifname: &str) -> Result<(), RequestError> {
    let mut pod_networks: HashMap<&str, usize> = HashMap::new();
    let mut interfaces: HashMap<&str, usize> = HashMap::new();
    let mut default_gw: Option<usize> = None;
    for (i, r) in requests.iter().enumerate() {
        if let Some(name) = r.name.as_deref() {
            if let Some(&first) = pod_networks.get(name) {
                return Err(RequestError::PodNetworkTwice { first, second: i, name: name.to_owned() });
            }
            pod_networks.insert(name, i);
        }
        if r.is_default_gw {
            if let Some(first) = default_gw {
                return Err(RequestError::DefaultGatewayTwice { first, second: i });
            }
            default_gw = Some(i);
        }
        // The default network's interface is the runtime's, named or not; another entry asking
        // for it was refused already.
        let interface =
            if r.is_default_network() { Some(default_ifname) } else { r.interface_name.as_deref() };
        if let Some(ifname) = interface {
            if let Some(&first) = interfaces.get(ifname) {
                return Err(RequestError::InterfaceTwice { first, second: i, interface: ifname.to_owned() });
            }
            interfaces.insert(ifname, i);
        }
    }
    Ok(())
}

/// The active rule once every entry's PodNetworkAttachment is resolved: each PodNetwork is
/// attached once. `resolved` holds, for every entry of the list (indexes as returned by
/// [`parse_pod_networks`]), the PodNetwork it reaches: a `name` entry its name, an
/// `attachmentName` entry its PodNetworkAttachment's `podNetworkName`.
pub fn check_each_network_once(resolved: &[(usize, &str)]) -> Result<(), RequestError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for &(entry, pod_network) in resolved {
        if let Some(&first) = seen.get(pod_network) {
            let (first, second) = (first.min(entry), first.max(entry));
            return Err(RequestError::PodNetworkReachedTwice {
                first,
                second,
                pod_network: pod_network.to_owned(),
            });
        }
        seen.insert(pod_network, entry);
    }
    Ok(())
}

/// The active rule for one resolved PodNetworkAttachment: it may not be for the cluster default
/// network, which every pod has on the runtime's interface whether its list names it or not.
pub fn check_attachment_network(
    entry: usize,
    attachment: &str,
    pod_network: &str,
) -> Result<(), RequestError> {
    if pod_network == DEFAULT_POD_NETWORK {
        return Err(RequestError::DefaultNetworkThroughAttachment {
            entry,
            attachment: attachment.to_owned(),
        });
    }
    Ok(())
}

/// A pod asks for its networks through one front-end: the NPWG selection annotation
/// (`k8s.v1.cni.cncf.io/networks`) or the pod's PodNetwork list, not both. A blank value
/// selects nothing and counts as absent.
pub fn check_one_front_end(
    npwg_networks: Option<&str>,
    pod_networks: Option<&str>,
) -> Result<(), RequestError> {
    let given = |v: Option<&str>| v.is_some_and(|t| !t.trim().is_empty());
    if given(npwg_networks) && given(pod_networks) {
        return Err(RequestError::BothAnnotations);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETH0: &str = "eth0";

    fn parse(text: &str) -> Result<Vec<PodNetworkRequest>, RequestError> {
        parse_pod_networks(text, ETH0)
    }

    fn net(name: &str) -> PodNetworkRequest {
        PodNetworkRequest { name: Some(name.into()), ..Default::default() }
    }

    fn attachment(name: &str) -> PodNetworkRequest {
        PodNetworkRequest { attachment_name: Some(name.into()), ..Default::default() }
    }

    fn on(mut r: PodNetworkRequest, ifname: &str) -> PodNetworkRequest {
        r.interface_name = Some(ifname.into());
        r
    }

    fn gw(mut r: PodNetworkRequest) -> PodNetworkRequest {
        r.is_default_gw = true;
        r
    }

    /// The error of `text`, checked to name the annotation and to be a config error (code 7).
    fn refused(text: &str) -> RequestError {
        let err = parse(text).expect_err(text);
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig, "{text}");
        assert_eq!(err.cni_code().code(), 7);
        assert!(err.to_string().starts_with("invalid plexus.dev/pod-networks annotation: "), "{err}");
        err
    }

    #[test]
    fn the_keps_example_list_is_read_in_the_pods_order() {
        let list = parse(
            r#"[{"name":"default","interfaceName":"eth0","isDefaultGW":true},
                {"name":"dataplane1","interfaceName":"net1"},
                {"attachmentName":"my-interface-fast-net","interfaceName":"net2"}]"#,
        )
        .unwrap();
        assert_eq!(
            list,
            vec![
                gw(on(net("default"), "eth0")),
                on(net("dataplane1"), "net1"),
                on(attachment("my-interface-fast-net"), "net2")
            ]
        );
        assert!(list[0].is_default_network());
        assert!(!list[1].is_default_network() && !list[2].is_default_network());
    }

    #[test]
    fn blank_and_empty_lists_ask_for_nothing_but_the_default_network() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse(" \n\t"), Ok(vec![]));
        assert_eq!(parse("[]"), Ok(vec![]));
        assert_eq!(parse(" [ ] "), Ok(vec![]));
    }

    #[test]
    fn the_default_network_is_not_inserted_nor_moved() {
        assert_eq!(parse(r#"[{"name":"blue"}]"#).unwrap(), vec![net("blue")]);
        assert_eq!(
            parse(r#"[{"name":"blue"},{"name":"default"}]"#).unwrap(),
            vec![net("blue"), net("default")]
        );
    }

    #[test]
    fn optional_keys_and_null_values_are_absent() {
        let list = parse(
            r#"[{"name":"blue","interfaceName":null,"isDefaultGW":null,"attachmentName":null},
                {"attachmentName":"fast","isDefaultGW":false}]"#,
        )
        .unwrap();
        assert_eq!(list, vec![net("blue"), attachment("fast")]);
    }

    #[test]
    fn the_value_is_bounded_before_it_is_parsed() {
        let huge = format!("[{}]", " ".repeat(MAX_ANNOTATION_BYTES));
        let err = refused(&huge);
        assert_eq!(err, RequestError::TooLong { bytes: MAX_ANNOTATION_BYTES + 2 });
        assert!(err.to_string().contains("at most 262144 bytes") && err.to_string().contains("list fewer"));
        // At the limit the value is read.
        let padded = format!("[]{}", " ".repeat(MAX_ANNOTATION_BYTES - 2));
        assert_eq!(parse(&padded), Ok(vec![]));
    }

    #[test]
    fn the_number_of_entries_is_bounded_before_any_entry_is_read() {
        let at_limit: Vec<String> = (0..MAX_SELECTIONS).map(|i| format!(r#"{{"name":"n{i}"}}"#)).collect();
        assert_eq!(parse(&format!("[{}]", at_limit.join(","))).unwrap().len(), MAX_SELECTIONS);
        // 65 entries, all invalid: the count is what is reported.
        let over = format!("[{}]", vec!["5"; MAX_SELECTIONS + 1].join(","));
        let err = refused(&over);
        assert_eq!(err, RequestError::TooManyEntries { count: MAX_SELECTIONS + 1 });
        assert!(
            err.to_string().contains("lists 65 networks") && err.to_string().contains("at most 64"),
            "{err}"
        );
    }

    #[test]
    fn the_value_must_be_a_json_list_of_objects() {
        let err = refused(r#"[{"name":"blue"}"#);
        assert!(matches!(err, RequestError::NotJson { .. }), "{err:?}");
        assert!(err.to_string().contains("not valid JSON") && err.to_string().contains("write a JSON list"));
        // The NPWG comma format is not this annotation's.
        assert!(matches!(refused("blue,red"), RequestError::NotJson { .. }));

        for (text, found) in [
            (r#"{"name":"blue"}"#, "an object"),
            (r#""blue""#, "a string"),
            ("7", "a number"),
            ("true", "a boolean"),
            ("null", "null"),
        ] {
            let err = refused(text);
            assert_eq!(err, RequestError::NotAList { found }, "{text}");
            assert!(err.to_string().contains("wrap the entries in [ ]"), "{err}");
        }

        for (text, found) in
            [(r#"["blue"]"#, "a string"), ("[[]]", "a list"), ("[null]", "null"), ("[1]", "a number")]
        {
            let err = refused(text);
            assert_eq!(err, RequestError::EntryNotAnObject { entry: 0, found }, "{text}");
            assert!(err.to_string().contains("entry 0 is") && err.to_string().contains(KEYS), "{err}");
        }
    }

    #[test]
    fn a_key_twice_in_one_object_is_refused() {
        let err = refused(r#"[{"name":"blue"},{"name":"red","name":"green"}]"#);
        assert_eq!(err, RequestError::KeyTwice { key: "name".into(), line: 1, column: 37 });
        assert!(err.to_string().contains("holds the key \"name\" twice (line 1, column 37)"), "{err}");
        assert!(err.to_string().contains("keep one"), "{err}");
        assert!(matches!(
            refused("[{\"name\":\"blue\",\n \"isDefaultGW\":true,\"isDefaultGW\":false}]"),
            RequestError::KeyTwice { line: 2, .. }
        ));
        // Unknown keys are refused anyway; twice, they are reported as twice.
        assert!(matches!(refused(r#"[{"name":"blue","x":{"a":1,"a":2}}]"#), RequestError::KeyTwice { .. }));
        // The same key in two objects is no duplicate.
        assert_eq!(parse(r#"[{"name":"blue"},{"name":"red"}]"#).unwrap(), vec![net("blue"), net("red")]);
    }

    #[test]
    fn every_json_value_is_read_as_serde_json_reads_it() {
        let text =
            r#"[{"a":null,"b":true,"c":-1,"d":18446744073709551615,"e":1.5,"f":"s\u00e9","g":[[],{}]}]"#;
        assert_eq!(read_json(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        assert!(matches!(read_json("[1] x"), Err(RequestError::NotJson { .. })), "trailing characters");
        assert!(
            matches!(read_json(&"[".repeat(200)), Err(RequestError::NotJson { .. })),
            "nesting is bounded"
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for key in ["namespace", "interface", "ips", "isDefaultGw", "podNetworkName", "Name", ""] {
            let text = format!(r#"[{{"name":"blue"}},{{"name":"red","{key}":"x"}}]"#);
            let err = refused(&text);
            assert_eq!(err, RequestError::UnknownKey { entry: 1, key: key.into() }, "{text}");
            let msg = err.to_string();
            assert!(msg.contains(&format!("entry 1 has the unknown key {key:?}")), "{msg}");
            assert!(msg.contains("fix its spelling"), "{msg}");
        }
    }

    #[test]
    fn wrong_json_types_name_the_key() {
        let cases = [
            (r#"[{"name":5}]"#, "name", "a number", "a string"),
            (r#"[{"name":["blue"]}]"#, "name", "a list", "a string"),
            (r#"[{"attachmentName":{"n":1}}]"#, "attachmentName", "an object", "a string"),
            (r#"[{"name":"blue","interfaceName":1}]"#, "interfaceName", "a number", "a string"),
            (r#"[{"name":"blue","interfaceName":false}]"#, "interfaceName", "a boolean", "a string"),
            (r#"[{"name":"blue","isDefaultGW":"true"}]"#, "isDefaultGW", "a string", "true or false"),
            (r#"[{"name":"blue","isDefaultGW":1}]"#, "isDefaultGW", "a number", "true or false"),
        ];
        for (text, key, found, expected) in cases {
            let err = refused(text);
            assert_eq!(err, RequestError::WrongType { entry: 0, key, found, expected }, "{text}");
            let msg = err.to_string();
            assert!(msg.contains(&format!("entry 0: \"{key}\" is {found}; it must be {expected}")), "{msg}");
        }
    }

    #[test]
    fn exactly_one_of_name_and_attachment_name() {
        for text in [r#"[{}]"#, r#"[{"interfaceName":"net1"}]"#, r#"[{"name":null,"isDefaultGW":true}]"#] {
            let err = refused(text);
            assert_eq!(err, RequestError::NoNetwork { entry: 0 }, "{text}");
            assert!(err.to_string().contains("set exactly one of \"name\""), "{err}");
        }
        let err = refused(r#"[{"name":"blue","attachmentName":"fast"}]"#);
        assert_eq!(
            err,
            RequestError::BothNetworkAndAttachment {
                entry: 0,
                name: "blue".into(),
                attachment_name: "fast".into()
            }
        );
        assert!(err.to_string().contains("only one of them may be set"), "{err}");
    }

    #[test]
    fn names_are_non_empty_object_names() {
        for key in ["name", "attachmentName"] {
            let err = refused(&format!(r#"[{{"{key}":""}}]"#));
            assert_eq!(
                err,
                RequestError::EmptyName {
                    entry: 0,
                    key: if key == "name" { "name" } else { "attachmentName" }
                }
            );
            assert!(err.to_string().contains(&format!("\"{key}\" is empty")), "{err}");
            for bad in ["Blue", "blue_net", "-blue", "blue.", "a..b", " blue", "blue/x"] {
                let err = refused(&format!(r#"[{{"{key}":"{bad}"}}]"#));
                assert!(
                    matches!(&err, RequestError::InvalidObjectName { entry: 0, name, .. } if name == bad),
                    "{err:?}"
                );
                assert!(
                    err.to_string().contains("DNS-1123 subdomain")
                        && err.to_string().contains("fix the name")
                );
            }
        }
        let longest = "a".repeat(253);
        assert!(parse(&format!(r#"[{{"name":"{longest}"}}]"#)).is_ok());
        assert!(matches!(
            refused(&format!(r#"[{{"attachmentName":"{longest}a"}}]"#)),
            RequestError::InvalidObjectName { key: "attachmentName", .. }
        ));
        assert!(parse(r#"[{"name":"blue.example-1"},{"attachmentName":"0fast"}]"#).is_ok());
    }

    #[test]
    fn each_pod_network_is_named_once() {
        let err = refused(r#"[{"name":"blue"},{"name":"red"},{"name":"blue","interfaceName":"net7"}]"#);
        assert_eq!(err, RequestError::PodNetworkTwice { first: 0, second: 2, name: "blue".into() });
        assert!(err.to_string().contains("entries 0 and 2 both name the PodNetwork \"blue\""), "{err}");
        assert!(matches!(
            refused(r#"[{"name":"default"},{"name":"default"}]"#),
            RequestError::PodNetworkTwice { first: 0, second: 1, .. }
        ));
        // The same PodNetworkAttachment twice is two interfaces on one PodNetwork: the active
        // rule (check_each_network_once) refuses it once the attachment is resolved.
        assert_eq!(parse(r#"[{"attachmentName":"fast"},{"attachmentName":"fast"}]"#).unwrap().len(), 2);
    }

    #[test]
    fn at_most_one_default_gateway() {
        let ok = parse(r#"[{"name":"blue","isDefaultGW":true},{"name":"red","isDefaultGW":false}]"#).unwrap();
        assert_eq!(ok, vec![gw(net("blue")), net("red")]);
        let err = refused(
            r#"[{"name":"blue","isDefaultGW":true},{"name":"red"},{"attachmentName":"fast","isDefaultGW":true}]"#,
        );
        assert_eq!(err, RequestError::DefaultGatewayTwice { first: 0, second: 2 });
        assert!(err.to_string().contains("only one network may hold the pod's default gateway"), "{err}");
        assert!(matches!(
            refused(r#"[{"name":"default","isDefaultGW":true},{"name":"red","isDefaultGW":true}]"#),
            RequestError::DefaultGatewayTwice { first: 0, second: 1 }
        ));
    }

    #[test]
    fn interface_names_are_unique() {
        let err = refused(
            r#"[{"name":"blue","interfaceName":"net1"},{"attachmentName":"fast","interfaceName":"net1"}]"#,
        );
        assert_eq!(err, RequestError::InterfaceTwice { first: 0, second: 1, interface: "net1".into() });
        assert!(err.to_string().contains("rename one of them"), "{err}");
        // Names differing in case are different interfaces to the kernel.
        assert!(parse(r#"[{"name":"blue","interfaceName":"net1"},{"name":"red","interfaceName":"NET1"}]"#)
            .is_ok());
        // Entries without a name get one from plexus: they do not collide.
        assert!(parse(r#"[{"name":"blue"},{"name":"red"}]"#).is_ok());
    }

    #[test]
    fn interface_names_are_valid_linux_names() {
        let fifteen = "a".repeat(15);
        for good in ["net1", "n", fifteen.as_str(), "eth0.100", "data-plane_1", "...", "é", "net@1"] {
            assert!(parse(&format!(r#"[{{"name":"blue","interfaceName":"{good}"}}]"#)).is_ok(), "{good}");
        }
        let cases = [
            ("", "it is empty"),
            ("this-is-sixteen!", "16 bytes long"),
            ("ééééééééé", "18 bytes long"),
            (".", "path component"),
            ("..", "path component"),
            ("net/1", "'/'"),
            ("net:1", "':'"),
            ("net 1", "' '"),
            ("net\\t1", "'\\t'"),
            ("net\\n", "'\\n'"),
            ("net\\u00001", "'\\0'"),
            // The kernel's isspace: the vertical tab, and byte 0xA0 (in 'à', C3 A0).
            ("net\\u000b1", "'\\u{b}'"),
            ("netà", "'à'"),
        ];
        for (bad, problem) in cases {
            let err = refused(&format!(r#"[{{"name":"blue","interfaceName":"{bad}"}}]"#));
            let RequestError::InvalidInterfaceName { entry: 0, problem: got, .. } = &err else {
                panic!("{bad}: {err:?}")
            };
            assert!(got.contains(problem), "{bad}: {got}");
            let msg = err.to_string();
            assert!(msg.contains("1 to 15 bytes") && msg.contains("omit the key"), "{msg}");
        }
    }

    #[test]
    fn the_default_network_is_on_the_runtimes_interface() {
        assert_eq!(
            parse(r#"[{"name":"default","interfaceName":"eth0"}]"#).unwrap(),
            vec![on(net("default"), "eth0")]
        );
        assert_eq!(parse(r#"[{"name":"default"}]"#).unwrap(), vec![net("default")]);
        let err = refused(r#"[{"name":"blue"},{"name":"default","interfaceName":"net1"}]"#);
        assert_eq!(
            err,
            RequestError::DefaultNetworkElsewhere {
                entry: 1,
                interface: "net1".into(),
                runtime_interface: "eth0".into()
            }
        );
        assert!(err.to_string().contains("set \"interfaceName\" to \"eth0\" or omit it"), "{err}");
        // The runtime's interface is CNI_IFNAME, whatever it is.
        assert!(parse_pod_networks(r#"[{"name":"default","interfaceName":"net0"}]"#, "net0").is_ok());
        assert!(parse_pod_networks(r#"[{"name":"default","interfaceName":"eth0"}]"#, "net0").is_err());
    }

    #[test]
    fn no_other_network_takes_the_runtimes_interface() {
        for text in [
            r#"[{"name":"blue","interfaceName":"eth0"}]"#,
            r#"[{"name":"default"},{"attachmentName":"fast","interfaceName":"eth0"}]"#,
        ] {
            let err = refused(text);
            assert!(
                matches!(&err, RequestError::RuntimeInterfaceTaken { interface, .. } if interface == "eth0"),
                "{err:?}"
            );
            assert!(err.to_string().contains("choose another name"), "{err}");
        }
        assert!(parse_pod_networks(r#"[{"name":"blue","interfaceName":"eth0"}]"#, "net0").is_ok());
    }

    #[test]
    fn entry_rules_come_before_rules_across_entries() {
        // Entry 2 is broken and entries 0 and 1 name one PodNetwork: the entry is reported.
        let err = refused(r#"[{"name":"blue"},{"name":"blue"},{"name":"red","bogus":1}]"#);
        assert!(matches!(err, RequestError::UnknownKey { entry: 2, .. }), "{err:?}");
        // Within an entry, unknown keys before types before names before the interface.
        assert!(matches!(refused(r#"[{"name":5,"bogus":1}]"#), RequestError::UnknownKey { .. }));
        assert!(matches!(refused(r#"[{"name":"B","isDefaultGW":"x"}]"#), RequestError::WrongType { .. }));
        assert!(matches!(
            refused(r#"[{"name":"B","interfaceName":""}]"#),
            RequestError::InvalidObjectName { .. }
        ));
    }

    #[test]
    fn each_network_is_reached_once_after_attachments_are_resolved() {
        assert_eq!(check_each_network_once(&[]), Ok(()));
        assert_eq!(check_each_network_once(&[(0, "default"), (1, "blue"), (2, "red")]), Ok(()));
        let err = check_each_network_once(&[(0, "blue"), (1, "red"), (2, "blue")]).unwrap_err();
        assert_eq!(
            err,
            RequestError::PodNetworkReachedTwice { first: 0, second: 2, pod_network: "blue".into() }
        );
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().contains("entries 0 and 2 both reach the PodNetwork \"blue\""), "{err}");
        // Reported in the pod's order whatever the order of the pairs.
        assert_eq!(
            check_each_network_once(&[(3, "blue"), (1, "blue")]),
            Err(RequestError::PodNetworkReachedTwice { first: 1, second: 3, pod_network: "blue".into() })
        );
    }

    #[test]
    fn an_attachment_cannot_reach_the_default_network() {
        assert_eq!(check_attachment_network(1, "fast", "blue"), Ok(()));
        let err = check_attachment_network(1, "fast", DEFAULT_POD_NETWORK).unwrap_err();
        assert_eq!(
            err,
            RequestError::DefaultNetworkThroughAttachment { entry: 1, attachment: "fast".into() }
        );
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().contains("remove the entry"), "{err}");
    }

    #[test]
    fn a_pod_uses_one_front_end() {
        assert_eq!(check_one_front_end(None, None), Ok(()));
        assert_eq!(check_one_front_end(Some("blue"), None), Ok(()));
        assert_eq!(check_one_front_end(None, Some(r#"[{"name":"blue"}]"#)), Ok(()));
        assert_eq!(check_one_front_end(Some("  "), Some(r#"[{"name":"blue"}]"#)), Ok(()));
        assert_eq!(check_one_front_end(Some("blue"), Some("")), Ok(()));
        let err = check_one_front_end(Some("blue"), Some(r#"[{"name":"blue"}]"#)).unwrap_err();
        assert_eq!(err, RequestError::BothAnnotations);
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().contains("pick one and remove the other"), "{err}");
    }

    #[test]
    fn the_request_serialises_as_the_keps_network() {
        let r = gw(on(attachment("fast"), "net2"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"attachmentName": "fast", "interfaceName": "net2", "isDefaultGW": true})
        );
        assert_eq!(serde_json::to_value(net("blue")).unwrap(), serde_json::json!({"name": "blue"}));
        let back: PodNetworkRequest = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert!(serde_json::from_str::<PodNetworkRequest>(r#"{"name":"blue","bogus":1}"#).is_err());
    }
}
