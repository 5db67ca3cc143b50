//! The decision: is a new connection on one network allowed, and by what (NetworkPolicy's
//! semantics, per attachment).
//!
//! A pod is isolated for ingress (egress) on a network when a policy for that network in its
//! namespace selects it and isolates that direction; then it accepts (sends) only what the
//! union of those policies' ingress (egress) rules allows. A connection is allowed when the
//! source's egress and the destination's ingress both allow it. Pods are known by their
//! addresses on the network the connection is on; an address no pod holds there is outside
//! the cluster, matched by `ipBlock`s only. Replies of an allowed connection are the flow
//! table's business, not this one's.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::model::{Namespaces, NetworkName, Peer, Policy, Port, PortRule, Protocol, Rule};
use super::selector::{Labels, Selector};

/// A container port of a pod, for named ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub number: u16,
    pub protocol: Protocol,
}

/// What the decision knows of a pod: no pod object, only this.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    /// Its addresses on each network it is attached to.
    pub addresses: BTreeMap<NetworkName, Vec<IpAddr>>,
    pub ports: Vec<NamedPort>,
}

/// The pods and namespaces the decision looks at.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    pub namespaces: BTreeMap<String, Labels>,
    pub pods: Vec<PodView>,
}

impl Cluster {
    /// The pod holding `address` on `network`.
    pub fn pod_at(&self, network: &NetworkName, address: IpAddr) -> Option<&PodView> {
        self.pods.iter().find(|p| p.addresses.get(network).is_some_and(|a| a.contains(&address)))
    }

    fn namespace_labels(&self, namespace: &str) -> Labels {
        self.namespaces.get(namespace).cloned().unwrap_or_default()
    }
}

/// A new connection (or, for UDP and SCTP, its first packet) on `network`. `port` is the
/// destination port, absent for protocols without ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub network: NetworkName,
    pub source: IpAddr,
    pub destination: IpAddr,
    pub protocol: ProbeProtocol,
    pub port: Option<u16>,
}

/// A probe's protocol: one a rule can name, or another (ICMP, ...), which only a rule with no
/// ports allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeProtocol {
    Known(Protocol),
    Other(u8),
}

/// One direction's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// The pod is not isolated in this direction on this network (or it is not a pod).
    Open,
    /// Allowed by that rule of that policy (`ingress[i]` or `egress[i]`).
    Allowed { policy: String, rule: String },
    /// The pod is isolated by these policies and none of their rules matches.
    Denied { policies: Vec<String> },
}

impl Side {
    pub fn allows(&self) -> bool {
        !matches!(self, Side::Denied { .. })
    }
}

/// Both directions' verdicts: the connection passes when both allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The source pod's egress.
    pub egress: Side,
    /// The destination pod's ingress.
    pub ingress: Side,
}

impl Decision {
    pub fn allowed(&self) -> bool {
        self.egress.allows() && self.ingress.allows()
    }
}

impl fmt::Display for Decision {
    /// What `policy explain` prints: the verdict and each side's reason.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |s: &Side, pod: &str, direction: &str| match s {
            Side::Open => format!("the {pod} is not isolated for {direction} on this network"),
            Side::Allowed { policy, rule } => format!("{direction} allowed by {policy} {rule}"),
            Side::Denied { policies } => {
                format!("{direction} denied: isolated by {} and no rule matches", policies.join(", "))
            }
        };
        write!(
            f,
            "{}: {}; {}",
            if self.allowed() { "allowed" } else { "denied" },
            side(&self.egress, "source", "egress"),
            side(&self.ingress, "destination", "ingress")
        )
    }
}

/// The decision on `probe` under `policies` in `cluster`.
pub fn decide(policies: &[Policy], cluster: &Cluster, probe: &Probe) -> Decision {
    let source = cluster.pod_at(&probe.network, probe.source);
    let destination = cluster.pod_at(&probe.network, probe.destination);
    let egress = match source {
        Some(pod) => side(policies, cluster, probe, pod, Direction::Egress, (probe.destination, destination)),
        None => Side::Open,
    };
    let ingress = match destination {
        Some(pod) => side(policies, cluster, probe, pod, Direction::Ingress, (probe.source, source)),
        None => Side::Open,
    };
    Decision { egress, ingress }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// The policies for `network` that select `pod` and isolate it in `direction`.
pub fn isolating<'a>(
    policies: &'a [Policy],
    network: &'a NetworkName,
    pod: &'a PodView,
    ingress: bool,
) -> impl Iterator<Item = &'a Policy> + 'a {
    let attached = pod.addresses.contains_key(network);
    policies.iter().filter(move |p| {
        attached
            && p.namespace == pod.namespace
            && p.networks.contains(network)
            && (if ingress { p.isolates_ingress } else { p.isolates_egress })
            && p.pod_selector.matches(&pod.labels)
    })
}

/// One side: `pod` (the source for egress, the destination for ingress) and the peer at the
/// other end (its address, and the pod holding it on the network if one does).
fn side(
    policies: &[Policy],
    cluster: &Cluster,
    probe: &Probe,
    pod: &PodView,
    direction: Direction,
    peer: (IpAddr, Option<&PodView>),
) -> Side {
    let mut isolated_by = Vec::new();
    for policy in isolating(policies, &probe.network, pod, direction == Direction::Ingress) {
        let rules = if direction == Direction::Ingress { &policy.ingress } else { &policy.egress };
        // The destination's ports name the named ports: the pod itself for ingress, the peer
        // for egress (none when the peer is not a pod).
        let destination = if direction == Direction::Ingress { Some(pod) } else { peer.1 };
        for (i, rule) in rules.iter().enumerate() {
            if rule_matches(rule, cluster, peer, destination, probe) {
                let key = if direction == Direction::Ingress { "ingress" } else { "egress" };
                return Side::Allowed { policy: policy.id(), rule: format!("{key}[{i}]") };
            }
        }
        isolated_by.push(policy.id());
    }
    if isolated_by.is_empty() {
        Side::Open
    } else {
        Side::Denied { policies: isolated_by }
    }
}

fn rule_matches(
    rule: &Rule,
    cluster: &Cluster,
    peer: (IpAddr, Option<&PodView>),
    destination: Option<&PodView>,
    probe: &Probe,
) -> bool {
    let peer_matches = rule.peers.is_empty() || rule.peers.iter().any(|p| peer_is(p, cluster, peer));
    let port_matches = rule.ports.is_empty() || rule.ports.iter().any(|p| port_is(p, destination, probe));
    peer_matches && port_matches
}

fn peer_is(peer: &Peer, cluster: &Cluster, (address, pod): (IpAddr, Option<&PodView>)) -> bool {
    match peer {
        Peer::Block { .. } => peer.block_contains(address),
        Peer::Pods { namespaces, pods } => pod.is_some_and(|pod| pod_is(cluster, namespaces, pods, pod)),
    }
}

/// Whether `pod` is one of a pod peer's: in its namespaces, and selected by its `pods`.
pub(super) fn pod_is(cluster: &Cluster, namespaces: &Namespaces, pods: &Selector, pod: &PodView) -> bool {
    let namespace_ok = match namespaces {
        Namespaces::Own(ns) => pod.namespace == *ns,
        Namespaces::Selected(s) => s.matches(&cluster.namespace_labels(&pod.namespace)),
    };
    namespace_ok && pods.matches(&pod.labels)
}

fn port_is(rule: &PortRule, destination: Option<&PodView>, probe: &Probe) -> bool {
    if probe.protocol != ProbeProtocol::Known(rule.protocol) {
        return false;
    }
    let Some(port) = probe.port else {
        return false;
    };
    match &rule.port {
        Port::Any => true,
        Port::Range { first, last } => (*first..=*last).contains(&port),
        Port::Named(name) => destination.is_some_and(|pod| {
            pod.ports.iter().any(|p| p.name == *name && p.protocol == rule.protocol && p.number == port)
        }),
    }
}
