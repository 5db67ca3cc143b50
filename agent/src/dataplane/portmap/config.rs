//! The `plexus-portmap` plugin's configuration: the reference `portmap`'s (its other keys,
//! such as `snat` or `conditionsV4`, are iptables details and are ignored), plus
//! `hostInterface` and, for a bridge network, `uplinks`.
//!
//! ```json
//! {"type": "plexus-portmap", "capabilities": {"portMappings": true}, "hostInterface": "eth1"}
//! {"type": "plexus-portmap", "capabilities": {"portMappings": true}, "uplinks": ["eth2"]}
//! ```
//!
//! The mappings come from `runtimeConfig.portMappings` (CNI CONVENTIONS), the pod's interface
//! and addresses from `prevResult`.

use std::net::IpAddr;

use serde_json::{Map, Value};

use crate::dataplane::chained::ChainArgs;
use crate::spec::selection::Protocol;

/// One `runtimeConfig.portMappings` element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// Only this host address; otherwise the node's address on the network.
    pub host_ip: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PortmapConf {
    pub chain: ChainArgs,
    pub mappings: Vec<PortMapping>,
    /// The node interface whose address is the host IP, instead of the one the attachment's
    /// first plugin names (the bridge, the macvlan master).
    pub host_interface: Option<String>,
    /// The bridge's ports where clients' traffic enters the node, which get the XDP program
    /// (`[]`: none). Unset: the bridge's ports that reach the wire (see
    /// [`NodeInterface::wire`](crate::dataplane::netdev::NodeInterface::wire)).
    pub uplinks: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plexus-portmap config: {0}")]
pub struct ConfigError(pub String);

fn invalid<T>(msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError(msg.into()))
}

impl PortmapConf {
    pub fn parse(config: &Value) -> Result<PortmapConf, ConfigError> {
        let Value::Object(c) = config else { return invalid("the config must be a JSON object") };
        let host_interface = match c.get("hostInterface") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return invalid(format!("\"hostInterface\" is {v}; it must be an interface name")),
        };
        let uplinks = match c.get("uplinks") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(name) if !name.is_empty() => Ok(name.clone()),
                        other => {
                            invalid(format!("\"uplinks\" holds {other}; each must be an interface name"))
                        }
                    })
                    .collect::<Result<Vec<String>, ConfigError>>()?,
            ),
            Some(v) => {
                return invalid(format!(
                    "\"uplinks\" is {v}; it must be a list of interface names (the bridge's ports)"
                ))
            }
        };
        let mappings = match c.get("runtimeConfig").and_then(|r| r.get("portMappings")) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                items.iter().enumerate().map(|(i, m)| parse_mapping(i, m)).collect::<Result<_, _>>()?
            }
            Some(v) => return invalid(format!("runtimeConfig.portMappings is {v}; it must be a list")),
        };
        Ok(PortmapConf { chain: ChainArgs::read(c), mappings, host_interface, uplinks })
    }
}

fn parse_mapping(i: usize, value: &Value) -> Result<PortMapping, ConfigError> {
    let Value::Object(m) = value else { return invalid(format!("portMappings[{i}] must be an object")) };
    let port = |key: &str| -> Result<u16, ConfigError> {
        match m.get(key).and_then(Value::as_u64) {
            Some(p @ 1..=65535) => Ok(p as u16),
            _ => invalid(format!("portMappings[{i}].{key} must be an integer from 1 to 65535")),
        }
    };
    Ok(PortMapping {
        host_port: port("hostPort")?,
        container_port: port("containerPort")?,
        protocol: protocol(i, m)?,
        host_ip: host_ip(i, m)?,
    })
}

/// Case-insensitive, TCP when absent (as Kubernetes and the reference plugin).
fn protocol(i: usize, m: &Map<String, Value>) -> Result<Protocol, ConfigError> {
    match m.get("protocol") {
        None | Some(Value::Null) => Ok(Protocol::Tcp),
        Some(Value::String(p)) if p.is_empty() => Ok(Protocol::Tcp),
        Some(Value::String(p)) => match p.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            "sctp" => Ok(Protocol::Sctp),
            _ => invalid(format!("portMappings[{i}].protocol {p:?} must be TCP, UDP or SCTP")),
        },
        Some(v) => invalid(format!("portMappings[{i}].protocol is {v}; it must be a string")),
    }
}

fn host_ip(i: usize, m: &Map<String, Value>) -> Result<Option<IpAddr>, ConfigError> {
    match m.get("hostIP") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => match s.parse::<IpAddr>() {
            // 0.0.0.0 and :: mean "any", as no hostIP does.
            Ok(ip) if ip.is_unspecified() => Ok(None),
            Ok(ip) => Ok(Some(ip)),
            Err(_) => invalid(format!("portMappings[{i}].hostIP {s:?} is not an IP address")),
        },
        Some(v) => invalid(format!("portMappings[{i}].hostIP is {v}; it must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_mappings_case_insensitively_with_tcp_by_default() {
        let c = PortmapConf::parse(&json!({
            "cniVersion": "1.0.0", "name": "net", "type": "plexus-portmap", "hostInterface": "eth1",
            "runtimeConfig": {"portMappings": [
                {"hostPort": 8080, "containerPort": 80},
                {"hostPort": 53, "containerPort": 5353, "protocol": "UDP", "hostIP": "10.0.0.1"},
                {"hostPort": 9, "containerPort": 9, "protocol": "Sctp", "hostIP": "0.0.0.0"},
            ]},
            "prevResult": {"cniVersion": "1.0.0"},
        }))
        .unwrap();
        assert_eq!(c.chain.network, "net");
        assert_eq!(c.host_interface.as_deref(), Some("eth1"));
        assert_eq!(
            c.mappings.iter().map(|m| m.protocol).collect::<Vec<_>>(),
            [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
        );
        assert_eq!(c.mappings[1].host_ip, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(c.mappings[2].host_ip, None);
        assert!(c.chain.prev_result.is_some());
        assert_eq!(c.uplinks, None, "unset: the bridge's wire ports");
    }

    #[test]
    fn uplinks_are_interface_names_and_an_empty_list_means_none() {
        let parse = |v: Value| PortmapConf::parse(&json!({"name": "n", "uplinks": v}));
        assert_eq!(
            parse(json!(["eth1", "bond0"])).unwrap().uplinks,
            Some(vec!["eth1".into(), "bond0".into()])
        );
        assert_eq!(parse(json!([])).unwrap().uplinks, Some(Vec::new()));
        assert_eq!(parse(Value::Null).unwrap().uplinks, None);
        for bad in [json!("eth1"), json!([""]), json!([3]), json!({"eth1": true})] {
            let err = parse(bad.clone()).unwrap_err().to_string();
            assert!(err.contains("\"uplinks\"") && err.contains("interface name"), "{bad}: {err}");
        }
    }

    #[test]
    fn no_mappings_is_fine_and_bad_ones_are_named() {
        assert!(PortmapConf::parse(&json!({"name": "n"})).unwrap().mappings.is_empty());
        for (bad, needle) in [
            (json!([{"hostPort": 0, "containerPort": 1}]), "hostPort"),
            (json!([{"hostPort": 1, "containerPort": 70000}]), "containerPort"),
            (json!([{"hostPort": 1, "containerPort": 1, "protocol": "icmp"}]), "protocol"),
            (json!([{"hostPort": 1, "containerPort": 1, "hostIP": "x"}]), "hostIP"),
            (json!({"hostPort": 1}), "list"),
        ] {
            let err = PortmapConf::parse(&json!({"runtimeConfig": {"portMappings": bad}})).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}
