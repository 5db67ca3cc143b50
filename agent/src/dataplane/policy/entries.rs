//! One network's compiled tables ([`crate::network_policy::compile::Tables`]) as the entries of
//! the policy object's maps (`plexus_ebpf_common::policy`): the identity trie, and for each
//! attachment hooked on this node its endpoint and, if a policy isolates it, its rules. Pure:
//! writing them is the table's job.

use std::collections::BTreeMap;

use ipnet::IpNet;
use plexus_ebpf_common::policy::{
    identity_prefix, port_blocks, Endpoint, IdentityKey, RuleKey, ANY_IDENTITY, EGRESS, INGRESS,
    ISOLATED_EGRESS, ISOLATED_INGRESS, RULE_PEER_PREFIX, RULE_PROTO_PREFIX, TRACKED,
};

use crate::dataplane::maps::addr_words;
use crate::network_policy::compile::{Allow, Endpoint as Isolated, Tables};

/// A key of an LPM trie: its prefix length and its data.
pub type Prefixed<K> = (u32, K);

/// A pod's attachment whose programs run on this node: the id its entries use, and how its
/// programs find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hooked {
    /// `1..=MAX_ENDPOINTS`, unique on the node.
    pub id: u32,
    /// The ifindex of its host end (in the node), where its programs run there.
    pub host_end: Option<u32>,
}

/// The entries of one network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entries {
    /// By endpoint id.
    pub endpoints: Vec<(u32, Endpoint)>,
    /// (ifindex, endpoint id).
    pub host_ends: Vec<(u32, u32)>,
    pub identities: Vec<(Prefixed<IdentityKey>, u32)>,
    /// The rule trie is a set: what it holds is allowed.
    pub rules: Vec<Prefixed<RuleKey>>,
}

/// The entries of network `network` (its id in the identity trie): its identities, and for each
/// of its attachments whose programs run on this node (`hooked`, by `namespace/name`), its
/// endpoint and, if a policy isolates it, its rules. The other isolated pods' rules are their
/// nodes'.
pub fn entries(network: u32, tables: &Tables, hooked: &BTreeMap<String, Hooked>) -> Entries {
    let identities = tables
        .addresses
        .iter()
        .map(|(prefix, &identity)| {
            let v4 = matches!(prefix, IpNet::V4(_));
            let key = IdentityKey::new(network, addr_words(prefix.network()));
            ((identity_prefix(v4, prefix.prefix_len()), key), identity)
        })
        .collect();
    let mut out = Entries { identities, ..Entries::default() };
    let isolated: BTreeMap<&str, &Isolated> =
        tables.endpoint_list.iter().map(|e| (e.pod.as_str(), e)).collect();
    for (pod, hook) in hooked {
        let mut flags = TRACKED;
        if let Some(endpoint) = isolated.get(pod.as_str()) {
            for (direction, flag, allows) in
                [(INGRESS, ISOLATED_INGRESS, &endpoint.ingress), (EGRESS, ISOLATED_EGRESS, &endpoint.egress)]
            {
                let Some(allows) = allows else { continue };
                flags |= flag;
                out.rules.extend(allows.iter().flat_map(|allow| rule_keys(hook.id, direction, allow)));
            }
        }
        out.endpoints.push((hook.id, Endpoint { network, flags }));
        out.host_ends.extend(hook.host_end.map(|ifindex| (ifindex, hook.id)));
    }
    out.rules.sort_unstable();
    out.rules.dedup();
    out
}

/// The trie keys of one allow: its ports as aligned blocks, every port of a protocol, or every
/// protocol.
fn rule_keys(endpoint: u32, direction: u32, allow: &Allow) -> Vec<Prefixed<RuleKey>> {
    let identity = allow.identity.unwrap_or(ANY_IDENTITY);
    let key = |proto: u8, port: u16| RuleKey::new(endpoint, direction, identity, proto, port.to_be());
    match (allow.protocol, allow.ports) {
        (None, _) => vec![(RULE_PEER_PREFIX, key(0, 0))],
        (Some(protocol), None) => vec![(RULE_PROTO_PREFIX, key(protocol.number(), 0))],
        (Some(protocol), Some((first, last))) => port_blocks(first, last)
            .map(|(start, bits)| (RULE_PROTO_PREFIX + bits, key(protocol.number(), start)))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use plexus_ebpf_common::policy::RULE_FULL_PREFIX;

    use super::*;
    use crate::network_policy::Protocol;

    fn hooked(pod: &str, id: u32) -> BTreeMap<String, Hooked> {
        BTreeMap::from([(pod.to_owned(), Hooked { id, host_end: Some(id + 100) })])
    }

    fn tables(ingress: Option<Vec<Allow>>, egress: Option<Vec<Allow>>) -> Tables {
        let mut t = Tables::default();
        t.addresses.insert("10.1.0.0/16".parse().expect("net"), 1);
        t.addresses.insert("10.1.0.7/32".parse().expect("net"), 2);
        t.addresses.insert("fd00::/64".parse().expect("net"), 1);
        t.endpoint_list.push(Isolated {
            pod: "ns/a".to_owned(),
            ingress: ingress.map(BTreeSet::from_iter),
            egress: egress.map(BTreeSet::from_iter),
        });
        t.endpoint_list.push(Isolated {
            pod: "ns/elsewhere".to_owned(),
            ingress: Some(BTreeSet::new()),
            egress: None,
        });
        t
    }

    #[test]
    fn identities_keep_their_prefixes_in_the_mapped_space() {
        let e = entries(4, &tables(None, None), &BTreeMap::new());
        let mut got: Vec<(u32, u32)> = e.identities.iter().map(|((len, _), id)| (*len, *id)).collect();
        got.sort_unstable();
        assert_eq!(got, [(32 + 64, 1), (32 + 96 + 16, 1), (32 + 96 + 32, 2)]);
        assert!(e.identities.iter().all(|((_, key), _)| key.network_be == 4u32.to_be()));
        // Nothing hooked here: no endpoint, no rule.
        assert!(e.endpoints.is_empty() && e.rules.is_empty());
    }

    #[test]
    fn a_hooked_pod_gets_its_flags_and_each_allow_its_prefixes() {
        let allow = |identity, protocol, ports| Allow { identity, protocol, ports };
        let t = tables(
            Some(vec![
                allow(Some(2), None, None),
                allow(None, Some(Protocol::Tcp), Some((80, 80))),
                allow(None, Some(Protocol::Udp), None),
                allow(Some(1), Some(Protocol::Sctp), Some((1000, 1003))),
            ]),
            Some(vec![]),
        );
        let e = entries(4, &t, &hooked("ns/a", 3));
        assert_eq!(e.endpoints.len(), 1, "only the pod hooked here");
        let (id, endpoint) = e.endpoints[0];
        assert_eq!((id, endpoint.network), (3, 4));
        assert_eq!(e.host_ends, [(103, 3)]);
        assert_eq!(
            endpoint.flags,
            TRACKED | ISOLATED_INGRESS | ISOLATED_EGRESS,
            "egress isolated with nothing allowed"
        );
        let key = |identity, proto, port: u16| RuleKey::new(3, INGRESS, identity, proto, port.to_be());
        let want: BTreeSet<(u32, RuleKey)> = [
            (RULE_PEER_PREFIX, key(2, 0, 0)),
            (RULE_FULL_PREFIX, key(ANY_IDENTITY, 6, 80)),
            (RULE_PROTO_PREFIX, key(ANY_IDENTITY, 17, 0)),
            (RULE_PROTO_PREFIX + 14, key(1, 132, 1000)),
        ]
        .into();
        assert_eq!(e.rules.iter().copied().collect::<BTreeSet<_>>(), want);
    }

    #[test]
    fn a_pod_isolated_one_way_has_only_that_flag() {
        let e = entries(1, &tables(None, Some(vec![])), &hooked("ns/a", 1));
        assert_eq!(e.endpoints[0].1.flags, TRACKED | ISOLATED_EGRESS);
        assert!(e.rules.is_empty());
        // A pod no policy isolates: tracked, nothing else.
        let e = entries(1, &tables(None, Some(vec![])), &hooked("ns/free", 2));
        assert_eq!(e.endpoints, [(2, Endpoint { network: 1, flags: TRACKED })]);
        assert!(e.rules.is_empty());
    }
}
