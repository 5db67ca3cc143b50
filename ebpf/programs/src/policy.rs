//! Network policy on a pod's attachment (MultiNetworkPolicy, issue 40): the TC programs that
//! run on the interface of every attachment of a network with policies, wherever it is hooked (the host end of a
//! bridge's veth; the pod's own interface of a macvlan, inside the pod). The maps, their keys
//! and what they mean are `plexus_ebpf_common::policy`'s; the agent writes them from its
//! compiled tables.
//!
//! Per packet: the endpoint (on a pod's own interface, the id its filter's classid carries;
//! on a host end, its interface's in `NP_HOST_ENDS`) and what it is isolated in (an unused id
//! passes everything). An IP packet of a connection the endpoint allowed already (its flow,
//! either way) goes on after one lookup. Else it is the first of a new connection: in a
//! direction the pod is isolated in, it goes on only if a rule allows its peer's identity (or
//! any peer) with its protocol and destination port, and the connection is then remembered; in
//! a direction the pod is not isolated in, it goes on and is remembered, so that its replies
//! pass the other direction's rules.
//!
//! What is not a connection of its own passes: a packet that is not IP (ARP), IPv6 neighbour
//! discovery, ICMP errors (they concern a connection, and the kernel delivers them to its
//! socket only), and IP fragments after the first: they carry no ports, and the kernel cannot
//! reassemble a datagram whose first fragment, which carries them, was dropped here.

use aya_ebpf::bindings::BPF_NOEXIST;
use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::maps::lpm_trie::Key;
use aya_ebpf::maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray};
use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::flow::SEEN_GRANULARITY_NS;
use plexus_ebpf_common::policy::{
    counter_slot, Endpoint, IdentityKey, PolicyCounters, PolicyFlow, PolicyFlowKey, RuleKey,
    ANY_IDENTITY, EGRESS, IDENTITY_FULL_PREFIX, INGRESS, ISOLATED_EGRESS, ISOLATED_INGRESS, RULE_FULL_PREFIX,
    WORLD,
};
use plexus_ebpf_common::{Addr, PROTO_ICMP, PROTO_ICMPV6, PROTO_SCTP, PROTO_TCP, PROTO_UDP};

use crate::consts::{DROP, NEXT};
use crate::packet::{ip, Headers, Layer3};

/// The maps the programs read (and the flows and counters they write).
pub struct PolicyMaps {
    pub endpoints: &'static Array<Endpoint>,
    pub host_ends: &'static HashMap<u32, u32>,
    pub identities: &'static LpmTrie<IdentityKey, u32>,
    pub rules: &'static LpmTrie<RuleKey, u8>,
    pub flows: &'static LruHashMap<PolicyFlowKey, PolicyFlow>,
    pub counters: &'static PerCpuArray<PolicyCounters>,
}

/// ICMPv6 neighbour discovery: router solicitation and advertisement, neighbour solicitation
/// and advertisement, redirect.
const ND_FIRST: u8 = 133;
const ND_LAST: u8 = 137;
/// ICMP echo request and reply, and ICMPv6's.
const ECHO: [u8; 2] = [8, 0];
const ECHO6: [u8; 2] = [128, 129];

/// Where a program finds its endpoint.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Hooked {
    /// On a pod's own interface: a filter whose classid is the endpoint id.
    PodSide,
    /// On a pod's host end: `NP_HOST_ENDS` by ifindex.
    HostEnd,
}

/// The program of the packets leaving the pod (`from_pod`: its egress rules) or entering it.
#[inline(always)]
pub fn enforce(ctx: &TcContext, from_pod: bool, hooked: Hooked, maps: &PolicyMaps) -> i32 {
    // SAFETY: the context's skb, valid while the program runs.
    let skb = unsafe { &*ctx.skb.skb };
    let id = match hooked {
        Hooked::PodSide => skb.tc_classid,
        // The key on the stack: the verifier takes no pointer into the context for one.
        // SAFETY: the value is copied out at once.
        Hooked::HostEnd => match unsafe { maps.host_ends.get(&{ skb.ifindex }) } {
            Some(id) => *id,
            None => return NEXT,
        },
    };
    let Some(endpoint) = maps.endpoints.get(id).copied() else { return NEXT };
    if endpoint.flags == 0 {
        return NEXT;
    }
    let h = Headers::new(ctx);
    let Some(Layer3::Ip(p)) = ip(&h) else { return NEXT };
    if p.later {
        return NEXT;
    }
    // The ports of the connection, or ICMP echo's identifier as both.
    let (sport, dport) = match p.proto {
        PROTO_TCP | PROTO_UDP | PROTO_SCTP => {
            let (Some(sport), Some(dport)) = (h.read::<u16>(p.l4), h.read::<u16>(p.l4 + 2)) else {
                return DROP;
            };
            (sport, dport)
        }
        PROTO_ICMP | PROTO_ICMPV6 => {
            let Some(kind) = h.read::<u8>(p.l4) else { return DROP };
            let echo = if p.v6 { ECHO6 } else { ECHO };
            if p.v6 && (ND_FIRST..=ND_LAST).contains(&kind) {
                return NEXT;
            }
            if kind != echo[0] && kind != echo[1] {
                // Errors, and what else ICMP carries: not a connection of its own.
                return NEXT;
            }
            let Some(echo_id) = h.read::<u16>(p.l4 + 4) else { return DROP };
            (echo_id, echo_id)
        }
        _ => (0, 0),
    };
    let direction = if from_pod { EGRESS } else { INGRESS };
    let key = PolicyFlowKey::new(id, p.proto, p.src, sport, p.dst, dport);
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(flow) = maps.flows.get_ptr_mut(&key) {
        // SAFETY: the map's value, valid while the program runs; a torn write of `seen_ns` by
        // two CPUs at once only moves one flow's last-seen time by a packet.
        let flow = unsafe { &mut *flow };
        if now.wrapping_sub(flow.seen_ns) > SEEN_GRANULARITY_NS {
            flow.seen_ns = now;
        }
        count(maps, id, direction, true);
        return NEXT;
    }
    let isolated = endpoint.flags & if from_pod { ISOLATED_EGRESS } else { ISOLATED_INGRESS } != 0;
    if isolated {
        let peer = if from_pod { p.dst } else { p.src };
        let identity = identity_of(maps, endpoint.network, &peer);
        // ICMP's identifier is no port: only rules for every protocol take it in.
        let port = if p.proto == PROTO_ICMP || p.proto == PROTO_ICMPV6 { 0 } else { dport };
        if !allows(maps, id, direction, identity, p.proto, port) {
            count(maps, id, direction, false);
            return DROP;
        }
    }
    let flow = PolicyFlow { seen_ns: now, opened: direction, pad: 0 };
    // A full table evicts its least recently used flow (an LRU): a connection idle the longest
    // is judged again by its next packet.
    let _ = maps.flows.insert(&key, &flow, u64::from(BPF_NOEXIST));
    count(maps, id, direction, true);
    NEXT
}

/// The identity of `addr` on `network`: its longest prefix's, or [`WORLD`].
#[inline(always)]
fn identity_of(maps: &PolicyMaps, network: u32, addr: &Addr) -> u32 {
    let key = Key::new(IDENTITY_FULL_PREFIX, IdentityKey::new(network, *addr));
    maps.identities.get(&key).copied().unwrap_or(WORLD)
}

/// Whether a rule of `endpoint` in `direction` allows `identity` with `proto` to `port_be`:
/// a rule for that identity, or for every peer. Each lookup finds the longest of the
/// prefixes that hold the packet (a port, a block of ports, every port, every protocol); any
/// one found allows.
#[inline(always)]
fn allows(maps: &PolicyMaps, endpoint: u32, direction: u32, identity: u32, proto: u8, port_be: u16) -> bool {
    let peer = Key::new(RULE_FULL_PREFIX, RuleKey::new(endpoint, direction, identity, proto, port_be));
    if maps.rules.get(&peer).is_some() {
        return true;
    }
    let anyone = Key::new(RULE_FULL_PREFIX, RuleKey::new(endpoint, direction, ANY_IDENTITY, proto, port_be));
    maps.rules.get(&anyone).is_some()
}

#[inline(always)]
fn count(maps: &PolicyMaps, endpoint: u32, direction: u32, allowed: bool) {
    if let Some(c) = maps.counters.get_ptr_mut(counter_slot(endpoint, direction)) {
        // SAFETY: this CPU's slot of the per-CPU array, valid while the program runs.
        let c = unsafe { &mut *c };
        if allowed {
            c.allowed += 1;
        } else {
            c.denied += 1;
        }
    }
}
