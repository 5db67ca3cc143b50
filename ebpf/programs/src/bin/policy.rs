//! plexus's network policy object (MultiNetworkPolicy, issue 40), loaded and attached by the
//! agent: its maps and its two entry points. What the programs do is the library's
//! ([`plexus_ebpf::policy`]); the maps' keys and values are `plexus_ebpf_common::policy`'s.

#![no_std]
#![no_main]

use aya_ebpf::macros::classifier;
use aya_ebpf::maps::{HashMap, LpmTrie, LruHashMap, PerCpuArray};
use aya_ebpf::programs::TcContext;
use plexus_ebpf::map;
use plexus_ebpf::policy::{enforce, PolicyMaps};
use plexus_ebpf_common::policy::{
    Endpoint, EndpointKey, IdentityKey, PolicyCounters, PolicyFlow, PolicyFlowKey, RuleKey, COUNTER_SLOTS,
    DEFAULT_MAX_FLOWS, MAP_COUNTERS, MAP_ENDPOINTS, MAP_FLOWS, MAP_IDENTITIES, MAP_RULES, MAX_ENDPOINTS,
    MAX_IDENTITY_ENTRIES, MAX_RULE_ENTRIES,
};

map! { "NP_ENDPOINTS" == MAP_ENDPOINTS;
    static NP_ENDPOINTS: HashMap<EndpointKey, Endpoint> = HashMap::with_max_entries(MAX_ENDPOINTS, 0);
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
    identities: &NP_IDENTITIES,
    rules: &NP_RULES,
    flows: &NP_FLOWS,
    counters: &NP_COUNTERS,
};

/// Packets leaving the pod: the host end of its veth's receive path, or its own interface's
/// transmit path.
#[classifier]
pub fn np_from_pod(ctx: TcContext) -> i32 {
    enforce(&ctx, true, &MAPS)
}

/// Packets entering the pod: the host end of its veth's transmit path, or its own interface's
/// receive path.
#[classifier]
pub fn np_to_pod(ctx: TcContext) -> i32 {
    enforce(&ctx, false, &MAPS)
}
