//! A network policy as the decision reads it: a `MultiNetworkPolicy`'s spec (NetworkPolicy's
//! schema) validated once, with the networks it is for.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{IPBlock, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::selector::{Selector, SelectorError};

/// A network a policy is for, as `namespace/name` (a NAD's, a PodNetwork's or a CRI-API
/// network's name in its namespace).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetworkName {
    pub namespace: String,
    pub name: String,
}

impl NetworkName {
    pub fn new(namespace: &str, name: &str) -> NetworkName {
        NetworkName { namespace: namespace.to_owned(), name: name.to_owned() }
    }
}

impl fmt::Display for NetworkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The annotation of a `MultiNetworkPolicy` naming the networks it is for.
pub const POLICY_FOR_ANNOTATION: &str = "k8s.v1.cni.cncf.io/policy-for";

/// The networks of a `policy-for` annotation, as multi-networkpolicy-iptables and Multus read
/// a network reference: a comma-separated list, spaces ignored, each `namespace/name` or a
/// `name` in the policy's `namespace`.
pub fn parse_policy_for(annotation: &str, namespace: &str) -> Result<Vec<NetworkName>, PolicyError> {
    let compact: String = annotation.chars().filter(|c| !c.is_whitespace()).collect();
    let mut networks = Vec::new();
    for entry in compact.split(',') {
        let network = match entry.split_once('/') {
            None if !entry.is_empty() => NetworkName::new(namespace, entry),
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                NetworkName::new(ns, name)
            }
            _ => {
                return Err(PolicyError::PolicyFor {
                    annotation: annotation.to_owned(),
                    entry: entry.to_owned(),
                })
            }
        };
        if !networks.contains(&network) {
            networks.push(network);
        }
    }
    Ok(networks)
}

/// One policy: which pods of its namespace it selects on its networks, the directions it
/// isolates them in, and what it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub networks: Vec<NetworkName>,
    pub pod_selector: Selector,
    /// Selected pods accept only what `ingress` allows.
    pub isolates_ingress: bool,
    /// Selected pods send only what `egress` allows.
    pub isolates_egress: bool,
    pub ingress: Vec<Rule>,
    pub egress: Vec<Rule>,
}

/// One rule: traffic to or from any of `peers` (every peer when empty) on any of `ports`
/// (every port and protocol when empty).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    pub peers: Vec<Peer>,
    pub ports: Vec<PortRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// Pods (their addresses on the policy's network) of the namespaces in `namespaces` that
    /// `pods` selects.
    Pods { namespaces: Namespaces, pods: Selector },
    /// Addresses in `cidr` but in none of `except`.
    Block { cidr: IpNet, except: Vec<IpNet> },
}

/// The namespaces a pod peer is looked for in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// A `podSelector` alone: the policy's own namespace, named.
    Own(String),
    /// A `namespaceSelector` (alone, every pod of the namespaces it selects; or with a
    /// `podSelector`).
    Selected(Selector),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn from_number(number: u8) -> Option<Protocol> {
        match number {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// `TCP`, `UDP` or `SCTP` in any case: NetworkPolicy's API server takes the upper case
    /// only, but the MultiNetworkPolicy CRD validates nothing and multi-networkpolicy-iptables
    /// lower-cases whatever it reads, so policies written for it may say `tcp`.
    pub fn parse(text: &str) -> Option<Protocol> {
        [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .into_iter()
            .find(|p| p.to_string().eq_ignore_ascii_case(text))
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// One entry of a rule's `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortRule {
    pub protocol: Protocol,
    pub port: Port,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Port {
    /// No `port`: every port of the protocol.
    Any,
    /// `port` and, with `endPort`, the range to it (both included).
    Range { first: u16, last: u16 },
    /// A container port's name, resolved on the destination pod.
    Named(String),
}

/// What makes a policy unusable, each naming the field to fix. The API server's validation
/// of NetworkPolicy refuses all of these; a `MultiNetworkPolicy` CRD does not validate that
/// deep, so the agent does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("{field}: {source}")]
    Selector {
        field: String,
        #[source]
        source: SelectorError,
    },
    #[error("spec.policyTypes: {0:?} is not Ingress or Egress")]
    PolicyType(String),
    #[error("{field}: {value:?} is not TCP, UDP or SCTP")]
    Protocol { field: String, value: String },
    #[error("{field}: port {value} is not between 1 and 65535")]
    PortNumber { field: String, value: i64 },
    #[error("{field}: {value:?} is not a port name (1 to 15 lowercase letters, digits and '-', with a letter, no '--')")]
    PortName { field: String, value: String },
    #[error("{field}: endPort {end} needs a numeric port not above it (port {port})")]
    EndPort { field: String, port: String, end: i64 },
    #[error("{field}: {value:?} is not a CIDR")]
    Cidr { field: String, value: String },
    #[error("{field}: except {except} is not inside cidr {cidr}")]
    ExceptOutside { field: String, cidr: IpNet, except: IpNet },
    #[error("{field}: ipBlock cannot be combined with podSelector or namespaceSelector")]
    BlockWithSelector { field: String },
    #[error("{field}: a peer needs podSelector, namespaceSelector or ipBlock")]
    EmptyPeer { field: String },
    #[error(
        "metadata.annotations[\"k8s.v1.cni.cncf.io/policy-for\"]: {entry:?} in {annotation:?} is not a network \
         (name or namespace/name, comma-separated)"
    )]
    PolicyFor { annotation: String, entry: String },
}

impl Policy {
    /// A policy from its spec, in `namespace`, for `networks`.
    pub fn from_spec(
        namespace: &str,
        name: &str,
        networks: Vec<NetworkName>,
        spec: &NetworkPolicySpec,
    ) -> Result<Policy, PolicyError> {
        let pod_selector = match &spec.pod_selector {
            Some(s) => Selector::from_api(s)
                .map_err(|source| PolicyError::Selector { field: "spec.podSelector".into(), source })?,
            None => Selector::everything(),
        };
        let ingress = spec.ingress.iter().flatten().map(|r| (r.from.as_deref(), r.ports.as_deref()));
        let ingress = rules(namespace, "spec.ingress", "from", ingress)?;
        let egress = spec.egress.iter().flatten().map(|r| (r.to.as_deref(), r.ports.as_deref()));
        let egress = rules(namespace, "spec.egress", "to", egress)?;
        // NetworkPolicy's default: every policy isolates ingress, and egress too when it has
        // an egress section.
        let (isolates_ingress, isolates_egress) = match &spec.policy_types {
            None => (true, spec.egress.is_some()),
            Some(types) => {
                // In any case, as multi-networkpolicy-iptables compares them (see Protocol::parse).
                let mut both = (false, false);
                for t in types {
                    if t.eq_ignore_ascii_case("Ingress") {
                        both.0 = true;
                    } else if t.eq_ignore_ascii_case("Egress") {
                        both.1 = true;
                    } else {
                        return Err(PolicyError::PolicyType(t.clone()));
                    }
                }
                both
            }
        };
        Ok(Policy {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            networks,
            pod_selector,
            isolates_ingress,
            isolates_egress,
            ingress,
            egress,
        })
    }

    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The rules of one direction (`field`: `spec.ingress` or `spec.egress`), each as its peers
/// (under `peers_key`) and its ports.
fn rules<'a>(
    namespace: &str,
    field: &str,
    peers_key: &str,
    rules: impl Iterator<Item = (Option<&'a [NetworkPolicyPeer]>, Option<&'a [NetworkPolicyPort]>)>,
) -> Result<Vec<Rule>, PolicyError> {
    rules
        .enumerate()
        .map(|(i, (peers, ports))| rule(namespace, &format!("{field}[{i}]"), peers_key, peers, ports))
        .collect()
}

fn rule(
    namespace: &str,
    field: &str,
    peers_key: &str,
    peers: Option<&[NetworkPolicyPeer]>,
    ports: Option<&[NetworkPolicyPort]>,
) -> Result<Rule, PolicyError> {
    let peers = peers
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| peer(namespace, &format!("{field}.{peers_key}[{i}]"), p))
        .collect::<Result<Vec<_>, _>>()?;
    let ports = ports
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| port_rule(&format!("{field}.ports[{i}]"), p))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Rule { peers, ports })
}

fn peer(namespace: &str, field: &str, peer: &NetworkPolicyPeer) -> Result<Peer, PolicyError> {
    let selector = |s, key: &str| {
        Selector::from_api(s)
            .map_err(|source| PolicyError::Selector { field: format!("{field}.{key}"), source })
    };
    match (&peer.ip_block, &peer.namespace_selector, &peer.pod_selector) {
        (Some(block), None, None) => ip_block(&format!("{field}.ipBlock"), block),
        (Some(_), _, _) => Err(PolicyError::BlockWithSelector { field: field.to_owned() }),
        (None, None, None) => Err(PolicyError::EmptyPeer { field: field.to_owned() }),
        (None, namespaces, pods) => {
            let namespaces = match namespaces {
                Some(s) => Namespaces::Selected(selector(s, "namespaceSelector")?),
                None => Namespaces::Own(namespace.to_owned()),
            };
            let pods = match pods {
                Some(s) => selector(s, "podSelector")?,
                None => Selector::everything(),
            };
            Ok(Peer::Pods { namespaces, pods })
        }
    }
}

fn ip_block(field: &str, block: &IPBlock) -> Result<Peer, PolicyError> {
    let net = |text: &str, field: String| {
        text.parse::<IpNet>().map_err(|_| PolicyError::Cidr { field, value: text.to_owned() })
    };
    let cidr = net(&block.cidr, format!("{field}.cidr"))?.trunc();
    let mut except = Vec::new();
    for (i, e) in block.except.iter().flatten().enumerate() {
        let e = net(e, format!("{field}.except[{i}]"))?.trunc();
        if !cidr.contains(&e) {
            return Err(PolicyError::ExceptOutside {
                field: format!("{field}.except[{i}]"),
                cidr,
                except: e,
            });
        }
        except.push(e);
    }
    Ok(Peer::Block { cidr, except })
}

fn port_rule(field: &str, port: &NetworkPolicyPort) -> Result<PortRule, PolicyError> {
    let protocol = match &port.protocol {
        None => Protocol::Tcp,
        Some(p) => Protocol::parse(p)
            .ok_or_else(|| PolicyError::Protocol { field: format!("{field}.protocol"), value: p.clone() })?,
    };
    let number = |n: i64| {
        u16::try_from(n)
            .ok()
            .filter(|n| *n > 0)
            .ok_or(PolicyError::PortNumber { field: format!("{field}.port"), value: n })
    };
    let port = match (&port.port, port.end_port) {
        (None, None) => Port::Any,
        (Some(IntOrString::Int(first)), None) => {
            let first = number(i64::from(*first))?;
            Port::Range { first, last: first }
        }
        (Some(IntOrString::Int(first)), Some(end)) => {
            let first = number(i64::from(*first))?;
            let last = u16::try_from(end).ok().filter(|last| *last >= first).ok_or(PolicyError::EndPort {
                field: field.to_owned(),
                port: first.to_string(),
                end: end.into(),
            })?;
            Port::Range { first, last }
        }
        (Some(IntOrString::String(name)), None) => {
            if !is_port_name(name) {
                return Err(PolicyError::PortName { field: format!("{field}.port"), value: name.clone() });
            }
            Port::Named(name.clone())
        }
        (Some(IntOrString::String(name)), Some(end)) => {
            return Err(PolicyError::EndPort {
                field: field.to_owned(),
                port: format!("{name:?}"),
                end: end.into(),
            })
        }
        (None, Some(end)) => {
            return Err(PolicyError::EndPort {
                field: field.to_owned(),
                port: "unset".into(),
                end: end.into(),
            })
        }
    };
    Ok(PortRule { protocol, port })
}

/// A container port's name as the API server accepts it (IANA_SVC_NAME): 1 to 15 characters
/// of lowercase letters, digits and '-', at least one letter, no leading, trailing or double
/// '-'.
pub fn is_port_name(name: &str) -> bool {
    (1..=15).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

impl Peer {
    /// Whether an address in a block (a pod's or not) is this peer's; pod peers are matched
    /// on pods, not addresses.
    pub fn block_contains(&self, address: IpAddr) -> bool {
        self.block_holds(&IpNet::from(address))
    }

    /// Whether every address of `prefix` is in this block (false for a pod peer): inside its
    /// cidr and inside none of its excepts. For a host prefix, whether the block holds that
    /// address.
    pub fn block_holds(&self, prefix: &IpNet) -> bool {
        match self {
            Peer::Block { cidr, except } => {
                cidr.contains(prefix) && !except.iter().any(|e| e.contains(prefix))
            }
            Peer::Pods { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(value: serde_json::Value) -> NetworkPolicySpec {
        serde_json::from_value(value).expect("a NetworkPolicy spec")
    }

    fn policy(value: serde_json::Value) -> Result<Policy, PolicyError> {
        Policy::from_spec("team-a", "p", vec![NetworkName::new("team-a", "net1")], &spec(value))
    }

    #[test]
    fn policy_types_default_as_networkpolicy_documents() {
        let p = policy(json!({"podSelector": {}})).expect("valid");
        assert_eq!((p.isolates_ingress, p.isolates_egress), (true, false));
        // Ingress is implied even with no ingress section; egress only with one.
        let p = policy(json!({"podSelector": {}, "egress": []})).expect("valid");
        assert_eq!((p.isolates_ingress, p.isolates_egress), (true, true));
        let p = policy(json!({"podSelector": {}, "policyTypes": ["Egress"]})).expect("valid");
        assert_eq!((p.isolates_ingress, p.isolates_egress), (false, true));
        let p = policy(json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}]}))
            .expect("valid");
        assert_eq!((p.isolates_ingress, p.isolates_egress), (true, true));
        assert_eq!(p.ingress, vec![Rule::default()]);
        let p = policy(json!({"podSelector": {}, "policyTypes": ["egress"]})).expect("any case");
        assert_eq!((p.isolates_ingress, p.isolates_egress), (false, true));
        assert_eq!(
            policy(json!({"podSelector": {}, "policyTypes": ["Ingres"]})).expect_err("refused").to_string(),
            "spec.policyTypes: \"Ingres\" is not Ingress or Egress"
        );
    }

    #[test]
    fn a_pod_selector_alone_is_the_policys_namespace() {
        let p = policy(json!({"podSelector": {}, "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"app": "web"}}},
            {"namespaceSelector": {}},
            {"namespaceSelector": {"matchLabels": {"team": "b"}}, "podSelector": {"matchLabels": {"app": "db"}}},
        ]}]}))
        .expect("valid");
        let peers = &p.ingress[0].peers;
        assert!(
            matches!(&peers[0], Peer::Pods { namespaces: Namespaces::Own(ns), pods } if ns == "team-a" && pods.to_string() == "app=web")
        );
        assert!(
            matches!(&peers[1], Peer::Pods { namespaces: Namespaces::Selected(s), pods } if s.is_everything() && pods.is_everything())
        );
        assert!(
            matches!(&peers[2], Peer::Pods { namespaces: Namespaces::Selected(s), pods } if s.to_string() == "team=b" && pods.to_string() == "app=db")
        );
    }

    #[test]
    fn ports_protocols_ranges_and_names() {
        let p = policy(json!({"podSelector": {}, "ingress": [{"ports": [
            {"port": 80},
            {"protocol": "UDP", "port": 5000, "endPort": 5010},
            {"protocol": "sctp"},
            {"port": "http"},
        ]}]}))
        .expect("valid");
        assert_eq!(
            p.ingress[0].ports,
            vec![
                PortRule { protocol: Protocol::Tcp, port: Port::Range { first: 80, last: 80 } },
                PortRule { protocol: Protocol::Udp, port: Port::Range { first: 5000, last: 5010 } },
                PortRule { protocol: Protocol::Sctp, port: Port::Any },
                PortRule { protocol: Protocol::Tcp, port: Port::Named("http".into()) },
            ]
        );
    }

    #[test]
    fn every_invalid_field_is_named() {
        let refused = |v| policy(v).expect_err("refused").to_string();
        let cases = [
            (json!({"ingress": [{"ports": [{"protocol": "ICMP"}]}]}), "spec.ingress[0].ports[0].protocol: \"ICMP\" is not TCP, UDP or SCTP"),
            (json!({"ingress": [{"ports": [{"protocol": "tcpx"}]}]}), "spec.ingress[0].ports[0].protocol: \"tcpx\" is not TCP, UDP or SCTP"),
            (json!({"ingress": [{"ports": [{"port": 0}]}]}), "spec.ingress[0].ports[0].port: port 0 is not between 1 and 65535"),
            (json!({"egress": [{"ports": [{"port": 70000}]}]}), "spec.egress[0].ports[0].port: port 70000 is not between 1 and 65535"),
            (json!({"ingress": [{"ports": [{"port": 90, "endPort": 80}]}]}), "spec.ingress[0].ports[0]: endPort 80 needs a numeric port not above it (port 90)"),
            (json!({"ingress": [{"ports": [{"port": "http", "endPort": 80}]}]}), "spec.ingress[0].ports[0]: endPort 80 needs a numeric port not above it (port \"http\")"),
            (json!({"ingress": [{"ports": [{"endPort": 80}]}]}), "spec.ingress[0].ports[0]: endPort 80 needs a numeric port not above it (port unset)"),
            (json!({"ingress": [{"ports": [{"port": "HTTP"}]}]}), "spec.ingress[0].ports[0].port: \"HTTP\" is not a port name (1 to 15 lowercase letters, digits and '-', with a letter, no '--')"),
            (json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}), "spec.ingress[0].from[0].ipBlock.cidr: \"10.0.0.0/33\" is not a CIDR"),
            (json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}]}), "spec.ingress[0].from[0].ipBlock.except[0]: except 10.1.0.0/24 is not inside cidr 10.0.0.0/16"),
            (json!({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}, "podSelector": {}}]}]}), "spec.egress[0].to[0]: ipBlock cannot be combined with podSelector or namespaceSelector"),
            (json!({"egress": [{"to": [{}]}]}), "spec.egress[0].to[0]: a peer needs podSelector, namespaceSelector or ipBlock"),
            (json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}), "spec.podSelector: matchExpressions key \"a\": operator In needs at least one value"),
            (json!({"ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}}]}]}), "spec.ingress[0].from[0].namespaceSelector: matchExpressions key \"a\": operator Exists takes no values"),
        ];
        for (value, message) in cases {
            assert_eq!(refused(value.clone()), message, "{value}");
        }
    }

    #[test]
    fn blocks_are_truncated_and_except_only_narrows_its_own_block() {
        let p = policy(
            json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.1.2.3/16", "except": ["10.1.5.0/24"]}}]}]}),
        )
        .expect("valid");
        let block = &p.ingress[0].peers[0];
        assert_eq!(
            block,
            &Peer::Block {
                cidr: "10.1.0.0/16".parse().unwrap(),
                except: vec!["10.1.5.0/24".parse().unwrap()]
            }
        );
        assert!(block.block_contains("10.1.4.9".parse().unwrap()));
        assert!(!block.block_contains("10.1.5.9".parse().unwrap()));
        assert!(!block.block_contains("10.2.0.1".parse().unwrap()));
        let v6 = policy(json!({"ingress": [{"from": [{"ipBlock": {"cidr": "fd00::/64"}}]}]})).expect("valid");
        assert!(v6.ingress[0].peers[0].block_contains("fd00::5".parse().unwrap()));
        assert!(!v6.ingress[0].peers[0].block_contains("10.1.4.9".parse().unwrap()));
    }

    #[test]
    fn policy_for_names_networks_as_multus_references_them() {
        let parsed = parse_policy_for(" net1, team-b/net2 ,net1", "team-a").expect("valid");
        assert_eq!(parsed, vec![NetworkName::new("team-a", "net1"), NetworkName::new("team-b", "net2")]);
        assert_eq!(parsed[1].to_string(), "team-b/net2");
        for bad in ["", "net1,", "/net", "ns/", "a/b/c", "net1,,net2"] {
            let err = parse_policy_for(bad, "team-a").expect_err(bad).to_string();
            assert!(err.starts_with("metadata.annotations[\"k8s.v1.cni.cncf.io/policy-for\"]: "), "{err}");
            assert!(err.ends_with("is not a network (name or namespace/name, comma-separated)"), "{err}");
        }
    }

    #[test]
    fn port_names_as_the_api_server_takes_them() {
        for ok in ["http", "h2", "web-80", "a", "abcdefghijklmno"] {
            assert!(is_port_name(ok), "{ok}");
        }
        for bad in ["", "80", "-a", "a-", "a--b", "HTTP", "a_b", "abcdefghijklmnop"] {
            assert!(!is_port_name(bad), "{bad}");
        }
    }
}
