//! The decision compiled into tables a packet's lookup can use at a cost that does not grow
//! with the number of policies or peers: per network, every address (a pod's, or a prefix of
//! an `ipBlock`) to an **identity**, found by longest prefix; per selected pod and direction,
//! the (identity, protocol, ports) it allows. The eBPF maps are these tables; [`Tables::allows`]
//! reads them as the programs will, and must agree with [`super::decide`] on every probe.
//!
//! An identity is what the rules can tell apart about an address: which peers of the
//! network's policies it matches (pod selectors through its pod, `ipBlock`s through the
//! address) and, for a pod's address, the pod's named ports. Addresses alike in all of that
//! share one, so pods of the same labels in the same namespace are one identity however many
//! there are. Identity 0 is an address no entry covers: it matches no peer.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::decide::{isolating, pod_is, Cluster, NamedPort, PodView, Probe, ProbeProtocol};
use super::model::{NetworkName, Peer, Policy, Port, Protocol, Rule};

/// An address that no entry covers.
pub const WORLD: u32 = 0;

/// What one identity stands for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// For each peer of the network's policies (in [`Tables::peers`]' order), whether it matches.
    pub matches: Vec<bool>,
    /// The pod's named ports (sorted), for a pod's address.
    pub ports: Vec<(String, Protocol, u16)>,
}

/// One thing an isolated pod allows in one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allow {
    /// The peer's identity; None for every peer.
    pub identity: Option<u32>,
    /// None for every protocol (and port): a rule without ports.
    pub protocol: Option<Protocol>,
    /// Both ends included; None for every port of the protocol.
    pub ports: Option<(u16, u16)>,
}

/// A selected pod on one network: None in a direction where it is not isolated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoint {
    pub pod: String,
    pub ingress: Option<BTreeSet<Allow>>,
    pub egress: Option<BTreeSet<Allow>>,
}

/// One network's tables.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// Every peer of the network's policies, as `namespace/policy direction[rule] peer[i]`.
    pub peers: Vec<String>,
    /// Identity `i + 1` is `identities[i]`.
    pub identities: Vec<Identity>,
    /// Longest prefix wins: every pod address (a host prefix) and every `ipBlock` prefix.
    pub addresses: BTreeMap<IpNet, u32>,
    /// The pods the network's policies isolate, by each of their addresses on it.
    pub endpoints: BTreeMap<IpAddr, usize>,
    pub endpoint_list: Vec<Endpoint>,
}

/// Every network's tables.
pub fn compile(policies: &[Policy], cluster: &Cluster) -> BTreeMap<NetworkName, Tables> {
    let networks: BTreeSet<&NetworkName> = policies.iter().flat_map(|p| p.networks.iter()).collect();
    networks.into_iter().map(|n| (n.clone(), compile_network(policies, cluster, n))).collect()
}

fn compile_network(policies: &[Policy], cluster: &Cluster, network: &NetworkName) -> Tables {
    let for_network: Vec<&Policy> = policies.iter().filter(|p| p.networks.contains(network)).collect();
    // Every peer of the network's policies, with the namespace it is read in.
    let mut peers: Vec<(&Peer, String)> = Vec::new();
    for policy in &for_network {
        for (direction, rules) in [("ingress", &policy.ingress), ("egress", &policy.egress)] {
            for (r, rule) in rules.iter().enumerate() {
                for (i, peer) in rule.peers.iter().enumerate() {
                    peers.push((peer, format!("{} {direction}[{r}] peer[{i}]", policy.id())));
                }
            }
        }
    }
    let mut tables =
        Tables { peers: peers.iter().map(|(_, name)| name.clone()).collect(), ..Tables::default() };
    let mut ids: BTreeMap<Identity, u32> = BTreeMap::new();
    let mut identify = |identity: Identity, tables: &mut Tables| -> u32 {
        *ids.entry(identity.clone()).or_insert_with(|| {
            tables.identities.push(identity);
            u32::try_from(tables.identities.len()).unwrap_or(u32::MAX)
        })
    };
    // The prefixes of the blocks: an address's longest one decides which blocks hold it.
    let mut prefixes: BTreeSet<IpNet> = BTreeSet::new();
    for (peer, _) in &peers {
        if let Peer::Block { cidr, except } = peer {
            prefixes.insert(*cidr);
            prefixes.extend(except.iter().copied());
        }
    }
    for prefix in prefixes {
        let matches = peers.iter().map(|(peer, _)| peer.block_holds(&prefix)).collect();
        let id = identify(Identity { matches, ports: Vec::new() }, &mut tables);
        tables.addresses.insert(prefix, id);
    }
    for pod in cluster.pods.iter().filter(|p| p.addresses.contains_key(network)) {
        let mut ports: Vec<(String, Protocol, u16)> =
            pod.ports.iter().map(|p| (p.name.clone(), p.protocol, p.number)).collect();
        ports.sort();
        for address in &pod.addresses[network] {
            let host = IpNet::from(*address);
            let matches = peers
                .iter()
                .map(|(peer, _)| match peer {
                    Peer::Block { .. } => peer.block_holds(&host),
                    Peer::Pods { namespaces, pods } => pod_is(cluster, namespaces, pods, pod),
                })
                .collect();
            let id = identify(Identity { matches, ports: ports.clone() }, &mut tables);
            tables.addresses.insert(host, id);
        }
    }
    let peer_index = |peer: &Peer| peers.iter().position(|(p, _)| std::ptr::eq(*p, peer));
    for pod in cluster.pods.iter().filter(|p| p.addresses.contains_key(network)) {
        let mut endpoint = Endpoint { pod: format!("{}/{}", pod.namespace, pod.name), ..Endpoint::default() };
        for ingress in [true, false] {
            let isolating: Vec<&Policy> = isolating(policies, network, pod, ingress).collect();
            if isolating.is_empty() {
                continue;
            }
            let mut allows = BTreeSet::new();
            for policy in isolating {
                let rules = if ingress { &policy.ingress } else { &policy.egress };
                for rule in rules {
                    // The identities the rule's peers take in (every one when it has none).
                    let identities: Option<Vec<u32>> = (!rule.peers.is_empty()).then(|| {
                        let indexes: Vec<usize> = rule.peers.iter().filter_map(&peer_index).collect();
                        (1..=tables.identities.len())
                            .filter(|&id| indexes.iter().any(|&i| tables.identities[id - 1].matches[i]))
                            .filter_map(|id| u32::try_from(id).ok())
                            .collect()
                    });
                    allows.extend(rule_allows(&tables, rule, identities, ingress.then_some(pod)));
                }
            }
            if ingress {
                endpoint.ingress = Some(allows);
            } else {
                endpoint.egress = Some(allows);
            }
        }
        if endpoint.ingress.is_some() || endpoint.egress.is_some() {
            let index = tables.endpoint_list.len();
            tables.endpoint_list.push(endpoint);
            for address in &pod.addresses[network] {
                tables.endpoints.insert(*address, index);
            }
        }
    }
    tables
}

/// What one rule allows: for each identity it takes in (None: any) and each of its ports. A
/// named port is the destination's: `endpoint` for ingress, else each identity's own (one that
/// has no such port allows nothing through it, and "any peer" then means every identity that
/// has it).
fn rule_allows(
    tables: &Tables,
    rule: &Rule,
    identities: Option<Vec<u32>>,
    endpoint: Option<&PodView>,
) -> Vec<Allow> {
    // The rule's peers (or any peer) with one protocol and port range.
    let each = |protocol: Option<Protocol>, ports: Option<(u16, u16)>| -> Vec<Allow> {
        match &identities {
            None => vec![Allow { identity: None, protocol, ports }],
            Some(ids) => ids.iter().map(|&id| Allow { identity: Some(id), protocol, ports }).collect(),
        }
    };
    if rule.ports.is_empty() {
        return each(None, None);
    }
    let mut out = Vec::new();
    for port in &rule.ports {
        let protocol = Some(port.protocol);
        match (&port.port, endpoint) {
            (Port::Any, _) => out.extend(each(protocol, None)),
            (Port::Range { first, last }, _) => out.extend(each(protocol, Some((*first, *last)))),
            // Ingress: the selected pod's own port, whoever the peer.
            (Port::Named(name), Some(pod)) => {
                if let Some(number) = named(&pod.ports, name, port.protocol) {
                    out.extend(each(protocol, Some((number, number))));
                }
            }
            // Egress: each destination identity's own port.
            (Port::Named(name), None) => {
                let all: Vec<u32> =
                    (1..=tables.identities.len()).filter_map(|id| u32::try_from(id).ok()).collect();
                for &id in identities.as_ref().unwrap_or(&all) {
                    let Some(identity) = usize::try_from(id).ok().and_then(|i| tables.identities.get(i - 1))
                    else {
                        continue;
                    };
                    let found = identity.ports.iter().find(|(n, p, _)| n == name && *p == port.protocol);
                    if let Some((_, _, number)) = found {
                        out.push(Allow { identity: Some(id), protocol, ports: Some((*number, *number)) });
                    }
                }
            }
        }
    }
    out
}

fn named(ports: &[NamedPort], name: &str, protocol: Protocol) -> Option<u16> {
    ports.iter().find(|p| p.name == name && p.protocol == protocol).map(|p| p.number)
}

impl Tables {
    /// The identity of `address`: its longest prefix's, or [`WORLD`].
    pub fn identity_of(&self, address: IpAddr) -> u32 {
        self.addresses
            .iter()
            .filter(|(prefix, _)| prefix.contains(&address))
            .max_by_key(|(prefix, _)| prefix.prefix_len())
            .map_or(WORLD, |(_, id)| *id)
    }

    /// Whether the tables let `probe` through, read as a packet's lookup reads them: the
    /// source's egress (if it is an isolated endpoint) against the destination's identity,
    /// the destination's ingress against the source's.
    pub fn allows(&self, probe: &Probe) -> bool {
        let side = |endpoint: Option<&usize>, ingress: bool, peer: IpAddr| {
            let Some(endpoint) = endpoint.and_then(|i| self.endpoint_list.get(*i)) else {
                return true;
            };
            let Some(allows) = (if ingress { &endpoint.ingress } else { &endpoint.egress }) else {
                return true;
            };
            let identity = self.identity_of(peer);
            allows.iter().any(|a| {
                a.identity.is_none_or(|id| id == identity)
                    && match a.protocol {
                        None => true,
                        Some(p) => {
                            probe.protocol == ProbeProtocol::Known(p)
                                && a.ports.is_none_or(|(first, last)| {
                                    probe.port.is_some_and(|n| (first..=last).contains(&n))
                                })
                        }
                    }
            })
        };
        side(self.endpoints.get(&probe.source), false, probe.destination)
            && side(self.endpoints.get(&probe.destination), true, probe.source)
    }
}

/// Whether the compiled tables let `probe` through (a network without policies lets
/// everything through).
pub fn allows(tables: &BTreeMap<NetworkName, Tables>, probe: &Probe) -> bool {
    tables.get(&probe.network).is_none_or(|t| t.allows(probe))
}
