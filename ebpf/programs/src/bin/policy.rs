//! plexus's network policy object (MultiNetworkPolicy, issue 40), loaded and attached by the
//! agent: its maps and its entry points, a pair for each of the two places it runs. What the
//! programs do is the library's ([`plexus_ebpf::policy`]); the maps' keys and values are
//! `plexus_ebpf_common::policy`'s.

#![no_std]
#![no_main]

use aya_ebpf::macros::classifier;
use aya_ebpf::maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray};
use aya_ebpf::programs::TcContext;
use plexus_ebpf::map;
use plexus_ebpf::policy::{enforce, Hooked, PolicyMaps};
use plexus_ebpf_common::policy::{
    Endpoint, IdentityKey, PolicyCounters, PolicyFlow, PolicyFlowKey, RuleKey, COUNTER_SLOTS, DEFAULT_MAX_FLOWS,
    ENDPOINT_SLOTS, MAP_COUNTERS, MAP_ENDPOINTS, MAP_FLOWS, MAP_HOST_ENDS, MAP_IDENTITIES, MAP_RULES,
    MAX_ENDPOINTS, MAX_IDENTITY_ENTRIES, MAX_RULE_ENTRIES,
};

map! { "NP_ENDPOINTS" == MAP_ENDPOINTS;
    static NP_ENDPOINTS: Array<Endpoint> = Array::with_max_entries(ENDPOINT_SLOTS, 0);
}

map! { "NP_HOST_ENDS" == MAP_HOST_ENDS;
    /// The host ends' endpoint ids, by ifindex.
    static NP_HOST_ENDS: HashMap<u32, u32> = HashMap::with_max_entries(MAX_ENDPOINTS, 0);
}

map! { "NP_IDENTITIES" == MAP_IDENTITIES;
    static NP_IDENTITIES: LpmTrie<IdentityKey, u32> = LpmTrie::with_max_entries(MAX_IDENTITY_ENTRIES, 0);
}

map! { "NP_RULES" == MAP_RULES;
    static NP_RULES: LpmTrie<RuleKey, u8> = LpmTrie::with_max_entries(MAX_RULE_ENTRIES, 0);
}

map! { "NP_FLOWS" == MAP_FLOWS;
    /// Sized by the agent when it loads the object.
    static NP_FLOWS: LruHashMap<PolicyFlowKey, PolicyFlow> = LruHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);
}

map! { "NP_COUNTERS" == MAP_COUNTERS;
    static NP_COUNTERS: PerCpuArray<PolicyCounters> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);
}

static MAPS: PolicyMaps = PolicyMaps {
    endpoints: &NP_ENDPOINTS,
    host_ends: &NP_HOST_ENDS,
    identities: &NP_IDENTITIES,
    rules: &NP_RULES,
    flows: &NP_FLOWS,
    counters: &NP_COUNTERS,
};

/// Packets leaving the pod, on the receive path of its host end.
#[classifier]
pub fn np_host_in(ctx: TcContext) -> i32 {
    enforce(&ctx, true, Hooked::HostEnd, &MAPS)
}

/// Packets entering the pod, on the transmit path of its host end.
#[classifier]
pub fn np_host_out(ctx: TcContext) -> i32 {
    enforce(&ctx, false, Hooked::HostEnd, &MAPS)
}

/// Packets leaving the pod, on the transmit path of its own interface (a filter whose classid
/// is the endpoint id).
#[classifier]
pub fn np_pod_out(ctx: TcContext) -> i32 {
    enforce(&ctx, true, Hooked::PodSide, &MAPS)
}

/// Packets entering the pod, on the receive path of its own interface.
#[classifier]
pub fn np_pod_in(ctx: TcContext) -> i32 {
    enforce(&ctx, false, Hooked::PodSide, &MAPS)
}
