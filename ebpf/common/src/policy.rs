//! Network policy (MultiNetworkPolicy, issue 40) in the dataplane: the maps a policy program
//! reads and the agent writes, and the pure rules that build their keys, so that the program
//! and the agent's tests build them alike.
//!
//! The maps are the agent's compiled tables (agent/src/network_policy/compile.rs) as lookups
//! whose cost does not grow with the number of policies or peers:
//!
//! - The endpoint: the isolated pod's attachment the program runs for, by an id the agent
//!   gives it. A program on a pod's own interface (inside the pod) is attached as a cls_bpf
//!   filter whose classid is the endpoint id, which the kernel hands the program in
//!   `skb->tc_classid`. A program on a pod's host end (in the node, where ifindexes are unique)
//!   finds it in [`MAP_HOST_ENDS`] by the interface's ifindex. Neither the packet's addresses
//!   nor its socket (whose namespace is the sender's, wherever the packet is) can tell it: a
//!   pod could claim another's address.
//! - [`MAP_ENDPOINTS`]: an array of [`Endpoint`] by endpoint id: its network's id and the
//!   directions it is isolated in (an unused id: every packet passes).
//! - [`MAP_IDENTITIES`]: an LPM trie of (network, address) → identity, the longest prefix
//!   deciding; a miss is [`WORLD`].
//! - [`MAP_RULES`]: an LPM trie, a set, of what each endpoint allows ([`RuleKey`]: endpoint and
//!   direction, the peer's identity, protocol, destination port). The trie's prefixes are its
//!   wildcards: every port of a protocol (a shorter prefix), every protocol, and port ranges
//!   as aligned blocks ([`port_blocks`]). A packet's verdict is at most two lookups: its peer's
//!   identity, then [`ANY_IDENTITY`] (a rule whose peers are "everyone").
//! - [`MAP_FLOWS`]: the connections an endpoint allowed, by their tuple in a canonical order
//!   ([`PolicyFlowKey`]), so a reply matches its request's entry and an established flow costs
//!   one lookup whatever the policies say since.
//! - [`MAP_COUNTERS`]: per-CPU [`PolicyCounters`] per endpoint and direction.

use crate::Addr;

pub const MAP_ENDPOINTS: &str = "NP_ENDPOINTS";
pub const MAP_HOST_ENDS: &str = "NP_HOST_ENDS";
pub const MAP_IDENTITIES: &str = "NP_IDENTITIES";
pub const MAP_RULES: &str = "NP_RULES";
pub const MAP_FLOWS: &str = "NP_FLOWS";
pub const MAP_COUNTERS: &str = "NP_COUNTERS";

/// Every map the policy object defines, for pinning.
pub const MAPS: [&str; 6] =
    [MAP_ENDPOINTS, MAP_HOST_ENDS, MAP_IDENTITIES, MAP_RULES, MAP_FLOWS, MAP_COUNTERS];

/// Isolated attachments on one node (endpoint ids are `1..=MAX_ENDPOINTS`).
pub const MAX_ENDPOINTS: u32 = 16_383;
/// Entries of [`MAP_ENDPOINTS`], indexed by endpoint id (0 is none's).
pub const ENDPOINT_SLOTS: u32 = MAX_ENDPOINTS + 1;
/// Entries of the identity trie: every peer address of every network with policies, and the
/// `ipBlock` prefixes. LPM tries allocate per entry, so the bound costs nothing until used.
pub const MAX_IDENTITY_ENTRIES: u32 = 1 << 20;
/// Entries of the rule trie.
pub const MAX_RULE_ENTRIES: u32 = 1 << 20;
/// Default size of the flow table (preallocated, an LRU).
pub const DEFAULT_MAX_FLOWS: u32 = 65_536;
/// Entries of [`MAP_COUNTERS`]: two per endpoint id (and the unused id 0).
pub const COUNTER_SLOTS: u32 = 2 * ENDPOINT_SLOTS;

/// An address no entry of the identity trie covers: it matches no peer.
pub const WORLD: u32 = 0;
/// The identity of a rule that allows every peer.
pub const ANY_IDENTITY: u32 = u32::MAX;

/// A packet into the pod (its ingress rules).
pub const INGRESS: u32 = 0;
/// A packet out of the pod (its egress rules).
pub const EGRESS: u32 = 1;

/// [`Endpoint::flags`]: the pod is isolated for ingress.
pub const ISOLATED_INGRESS: u32 = 1;
/// [`Endpoint::flags`]: the pod is isolated for egress.
pub const ISOLATED_EGRESS: u32 = 2;
/// [`Endpoint::flags`]: the programs run for this attachment (of a network with policies),
/// isolated or not. They remember its connections either way, so that a policy isolating it
/// later does not cut the connections it has: their packets are of a known flow.
pub const TRACKED: u32 = 4;

/// An isolated pod's attachment, at its id in [`MAP_ENDPOINTS`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    /// Its network's id in [`IdentityKey`].
    pub network: u32,
    /// [`TRACKED`], [`ISOLATED_INGRESS`], [`ISOLATED_EGRESS`]; 0 for an unused id.
    pub flags: u32,
}

/// The data of an identity trie key: the network id (big-endian, so it is the prefix's first
/// 32 bits) and the address (IPv4 mapped into IPv6, as the packet reader gives it).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityKey {
    pub network_be: u32,
    pub addr: Addr,
}

/// Prefix length of an identity key for `prefix_len` bits of an address (`v4`: of the IPv4
/// address, which sits in the last 32 of the 128).
pub const fn identity_prefix(v4: bool, prefix_len: u8) -> u32 {
    32 + if v4 { 96 } else { 0 } + prefix_len as u32
}

/// Prefix length of a packet's address in an identity key (the whole of it).
pub const IDENTITY_FULL_PREFIX: u32 = 32 + 128;

impl IdentityKey {
    #[inline(always)]
    pub const fn new(network: u32, addr: Addr) -> IdentityKey {
        IdentityKey { network_be: network.to_be(), addr }
    }
}

/// The data of a rule trie key, in the order of its wildcards: who and which way, the peer,
/// the protocol, the destination port.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleKey {
    /// `endpoint << 1 | direction`, big-endian.
    pub endpoint_dir_be: u32,
    /// The peer's identity, big-endian.
    pub identity_be: u32,
    pub proto: u8,
    /// The destination port, big-endian (as the packet has it).
    pub port: [u8; 2],
    pub pad: u8,
}

/// Prefix length of a rule for one protocol and one port.
pub const RULE_FULL_PREFIX: u32 = 32 + 32 + 8 + 16;
/// Prefix length of a rule for every port of one protocol.
pub const RULE_PROTO_PREFIX: u32 = 32 + 32 + 8;
/// Prefix length of a rule for every protocol (and port).
pub const RULE_PEER_PREFIX: u32 = 32 + 32;

impl RuleKey {
    /// The key a packet looks up: `port_be` as the packet has it.
    #[inline(always)]
    pub const fn new(endpoint: u32, direction: u32, identity: u32, proto: u8, port_be: u16) -> RuleKey {
        RuleKey {
            endpoint_dir_be: (endpoint << 1 | direction).to_be(),
            identity_be: identity.to_be(),
            proto,
            port: port_be.to_ne_bytes(),
            pad: 0,
        }
    }
}

/// The aligned blocks that cover `first..=last` exactly, as (first port, prefix bits of the
/// port): at most 30 of them (a range of 65,535 ports is 16 blocks on each side of its middle).
pub fn port_blocks(first: u16, last: u16) -> impl Iterator<Item = (u16, u32)> {
    let (mut next, last) = (u32::from(first), u32::from(last));
    core::iter::from_fn(move || {
        if next > last {
            return None;
        }
        // The largest block that starts at `next` (aligned to its size) and ends by `last`.
        let mut size = 1u32 << next.trailing_zeros().min(16);
        while next + size - 1 > last {
            size >>= 1;
        }
        let block = (next as u16, 16 - size.trailing_zeros());
        next += size;
        Some(block)
    })
}

/// A connection as an endpoint saw it allowed: its ends in a canonical order (the lower
/// (address, port) first), so a packet and its reply make the same key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyFlowKey {
    pub endpoint: u32,
    pub proto: u8,
    pub pad: [u8; 3],
    pub low_port: u16,
    pub high_port: u16,
    pub low: Addr,
    pub high: Addr,
}

impl PolicyFlowKey {
    /// The key of a packet from `src:sport` to `dst:dport` (ports as the packet has them;
    /// ICMP echo's identifier as both).
    #[inline(always)]
    pub fn new(endpoint: u32, proto: u8, src: Addr, sport: u16, dst: Addr, dport: u16) -> PolicyFlowKey {
        let src_first = match compare(&src, &dst) {
            core::cmp::Ordering::Less => true,
            core::cmp::Ordering::Greater => false,
            core::cmp::Ordering::Equal => sport <= dport,
        };
        let ((low, low_port), (high, high_port)) =
            if src_first { ((src, sport), (dst, dport)) } else { ((dst, dport), (src, sport)) };
        PolicyFlowKey { endpoint, proto, pad: [0; 3], low_port, high_port, low, high }
    }
}

/// Word by word; any total order does, as long as both directions agree.
#[inline(always)]
fn compare(a: &Addr, b: &Addr) -> core::cmp::Ordering {
    let mut i = 0;
    while i < 4 {
        if a[i] != b[i] {
            return if a[i] < b[i] { core::cmp::Ordering::Less } else { core::cmp::Ordering::Greater };
        }
        i += 1;
    }
    core::cmp::Ordering::Equal
}

/// An allowed connection: when the endpoint last saw it (written at most every
/// [`crate::flow::SEEN_GRANULARITY_NS`]) and which way it was opened.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyFlow {
    pub seen_ns: u64,
    /// [`INGRESS`] or [`EGRESS`]: the direction of its first packet.
    pub opened: u32,
    pub pad: u32,
}

/// One endpoint's counts in one direction, per CPU; the slot is [`counter_slot`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyCounters {
    /// Packets of connections the rules allowed (their first, and those of established flows).
    pub allowed: u64,
    /// Packets the rules denied.
    pub denied: u64,
}

/// The [`MAP_COUNTERS`] slot of `endpoint`'s `direction`.
#[inline(always)]
pub const fn counter_slot(endpoint: u32, direction: u32) -> u32 {
    endpoint << 1 | direction
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data with explicit padding fields; every bit pattern is valid.
    unsafe impl aya::Pod for super::Endpoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::IdentityKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RuleKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PolicyFlowKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PolicyFlow {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PolicyCounters {}
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::v4_mapped;

    fn covered(blocks: &[(u16, u32)]) -> Vec<u32> {
        let mut ports: Vec<u32> = blocks
            .iter()
            .flat_map(|&(start, bits)| {
                let size = 1u32 << (16 - bits);
                assert_eq!(u32::from(start) % size, 0, "block {start}/{bits} is not aligned");
                u32::from(start)..u32::from(start) + size
            })
            .collect();
        ports.sort_unstable();
        ports
    }

    #[test]
    fn port_blocks_cover_each_range_exactly() {
        let edges = [0u16, 1, 2, 3, 79, 80, 1023, 1024, 1025, 32767, 32768, 65534, 65535];
        for &first in &edges {
            for &last in &edges {
                let blocks: Vec<(u16, u32)> = port_blocks(first, last).collect();
                let want: Vec<u32> = (u32::from(first)..=u32::from(last)).collect();
                assert_eq!(covered(&blocks), want, "{first}..={last}: {blocks:?}");
                assert!(blocks.len() <= 30, "{first}..={last}: {} blocks", blocks.len());
            }
        }
        assert_eq!(port_blocks(0, 65535).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(port_blocks(80, 80).collect::<Vec<_>>(), [(80, 16)]);
        assert_eq!(port_blocks(1, 65535).count(), 16);
        assert_eq!(port_blocks(1, 65534).count(), 30);
    }

    #[test]
    fn a_packet_and_its_reply_make_one_flow_key() {
        let (a, b) =
            (v4_mapped(u32::from_ne_bytes([10, 0, 0, 1])), v4_mapped(u32::from_ne_bytes([10, 0, 0, 2])));
        let forward = PolicyFlowKey::new(7, 6, a, 1234u16.to_be(), b, 80u16.to_be());
        assert_eq!(forward, PolicyFlowKey::new(7, 6, b, 80u16.to_be(), a, 1234u16.to_be()));
        assert_ne!(forward, PolicyFlowKey::new(8, 6, a, 1234u16.to_be(), b, 80u16.to_be()));
        assert_ne!(forward, PolicyFlowKey::new(7, 17, a, 1234u16.to_be(), b, 80u16.to_be()));
        // Same address both ways (a pod talking to itself): the ports order the ends.
        let own = PolicyFlowKey::new(7, 6, a, 5000u16.to_be(), a, 80u16.to_be());
        assert_eq!(own, PolicyFlowKey::new(7, 6, a, 80u16.to_be(), a, 5000u16.to_be()));
    }

    #[test]
    fn keys_hold_their_fields_in_prefix_order() {
        let key = RuleKey::new(3, EGRESS, 0x0102_0304, 6, 443u16.to_be());
        // SAFETY: RuleKey is plain bytes of its size.
        let bytes: [u8; 12] = unsafe { core::mem::transmute(key) };
        assert_eq!(bytes, [0, 0, 0, 7, 1, 2, 3, 4, 6, 0x01, 0xbb, 0]);
        let key = IdentityKey::new(5, v4_mapped(u32::from_ne_bytes([192, 168, 1, 2])));
        // SAFETY: IdentityKey is plain bytes of its size.
        let bytes: [u8; 20] = unsafe { core::mem::transmute(key) };
        assert_eq!(bytes, [0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2]);
        assert_eq!(identity_prefix(true, 24), 32 + 96 + 24);
        assert_eq!(identity_prefix(false, 64), 32 + 64);
    }
}
