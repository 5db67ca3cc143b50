//! The maps the port mapping programs share with the agent; names and layouts come from
//! plexus-ebpf-common. The agent pins them, so they outlive the agent process.
//!
//! The object's binary declares them ([`declare_portmap_maps!`](crate::declare_portmap_maps),
//! see [`crate::consts`] on why not here) and hands them to the library's code as a type
//! implementing [`Maps`]: each accessor names one static, so every map access compiles to the
//! map's own relocation, as a direct reference in the binary would.

use aya_ebpf::helpers::bpf_ktime_get_coarse_ns;
use aya_ebpf::maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, ProgramArray};
use plexus_ebpf_common::flow::{
    Flow, FlowKey, FlowStats, Fragment, FragmentKey, Settings, SockKey, STATS_PROGRAMS,
};
use plexus_ebpf_common::shape::{ifindex_bit, Shape, ShapeCounters, ShapeKey, HOOK_EGRESS};
use plexus_ebpf_common::{port_bit, Counters, Endpoint, Rewrite, NO_COUNTERS};

/// The port mapping object's maps, one accessor per map (see the module's notes).
pub trait Maps {
    fn forward() -> &'static HashMap<Endpoint, Rewrite>;
    fn unmapped() -> &'static Array<u64>;
    fn counters() -> &'static PerCpuArray<Counters>;
    fn settings() -> &'static Array<Settings>;
    fn tails() -> &'static ProgramArray;
    fn flows() -> &'static LruHashMap<FlowKey, Flow>;
    fn flow_stats() -> &'static PerCpuArray<FlowStats>;
    fn scratch() -> &'static PerCpuArray<Flow>;
    fn frags() -> &'static LruHashMap<FragmentKey, Fragment>;
    fn frag_scratch() -> &'static PerCpuArray<Fragment>;
    fn sockets() -> &'static LruHashMap<SockKey, Endpoint>;
    fn bw_limits() -> &'static HashMap<ShapeKey, Shape>;
    fn bw_unlimited() -> &'static Array<u64>;
    fn bw_stats() -> &'static PerCpuHashMap<ShapeKey, ShapeCounters>;
    fn bw_clock() -> &'static Array<u64>;
}

/// Declares the port mapping object's maps in the binary that invokes it, and `$maps`, the
/// type implementing [`Maps`] with them.
#[macro_export]
macro_rules! declare_portmap_maps {
    ($maps:ident) => {
        mod portmap_maps {
            use aya_ebpf::maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, ProgramArray};
            use plexus_ebpf_common::flow::{
                Flow, FlowKey, FlowStats, Fragment, FragmentKey, Settings, SockKey, DEFAULT_MAX_FLOWS,
                MAP_FLOWS, MAP_FLOW_STATS, MAP_FRAGMENTS, MAP_FRAGMENT_SCRATCH, MAP_SCRATCH, MAP_SOCKETS,
                MAX_FRAGMENTED, MAX_SOCKETS,
            };
            use plexus_ebpf_common::shape::{
                Shape, ShapeCounters, ShapeKey, MAP_CLOCK, MAP_LIMITS, MAP_STATS as MAP_SHAPE_STATS,
                MAP_UNLIMITED, MAX_SHAPED, UNLIMITED_WORDS,
            };
            use plexus_ebpf_common::{
                Counters, Endpoint, Rewrite, COUNTER_SLOTS, MAP_COUNTERS, MAP_FORWARD, MAP_SETTINGS,
                MAP_TAIL, MAP_UNMAPPED, MAX_MAPPINGS, TAILS, UNMAPPED_WORDS,
            };
            use $crate::map;


            map! { "PM_FORWARD" == MAP_FORWARD;
                pub static PM_FORWARD: HashMap<Endpoint, Rewrite> = HashMap::with_max_entries(MAX_MAPPINGS, 0);
            }

            map! { "PM_UNMAPPED" == MAP_UNMAPPED;
                /// The host ports no mapping has (see plexus_ebpf_common::MAP_UNMAPPED): an array lookup,
                /// which the verifier inlines, in front of a hash lookup, which is a call.
                pub static PM_UNMAPPED: Array<u64> = Array::with_max_entries(UNMAPPED_WORDS, 0);
            }

            map! { "PM_COUNTERS" == MAP_COUNTERS;
                /// By [`Rewrite::counters`]: an array lookup, which the verifier inlines.
                pub static PM_COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);
            }

            map! { "PM_SETTINGS" == MAP_SETTINGS;
                pub static PM_SETTINGS: Array<Settings> = Array::with_max_entries(1, 0);
            }

            map! { "PM_TAILS" == MAP_TAIL;
                /// The SCTP checksum fixup and the ICMP error translation, programs of their own (see
                /// `tc::pm_sctp`, `icmp::pm_icmp`).
                pub static PM_TAILS: ProgramArray = ProgramArray::with_max_entries(TAILS, 0);
            }

            map! { "PM_FLOWS" == MAP_FLOWS;
                /// The flow table (see plexus_ebpf_common::flow). Its size is the agent's to set at load.
                pub static PM_FLOWS: LruHashMap<FlowKey, Flow> = LruHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);
            }

            map! { "PM_FLOW_STATS" == MAP_FLOW_STATS;
                pub static PM_FLOW_STATS: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(2, 0);
            }

            map! { "PM_SCRATCH" == MAP_SCRATCH;
                pub static PM_SCRATCH: PerCpuArray<Flow> = PerCpuArray::with_max_entries(1, 0);
            }

            map! { "PM_FRAGS" == MAP_FRAGMENTS;
                pub static PM_FRAGS: LruHashMap<FragmentKey, Fragment> = LruHashMap::with_max_entries(MAX_FRAGMENTED, 0);
            }

            map! { "PM_FRAG_SCRATCH" == MAP_FRAGMENT_SCRATCH;
                pub static PM_FRAG_SCRATCH: PerCpuArray<Fragment> = PerCpuArray::with_max_entries(1, 0);
            }

            map! { "PM_SOCKETS" == MAP_SOCKETS;
                pub static PM_SOCKETS: LruHashMap<SockKey, Endpoint> = LruHashMap::with_max_entries(MAX_SOCKETS, 0);
            }

            map! { "BW_LIMITS" == MAP_LIMITS;
                /// The shaping object's limits, the same pinned map (the agent points both objects at one
                /// pin): to know which pods' veths limit their ingress, and the limits the XDP program
                /// enforces on a macvlan master (their clocks advanced as the shaping programs do).
                pub static BW_LIMITS: HashMap<ShapeKey, Shape> = HashMap::with_max_entries(MAX_SHAPED, 0);
            }

            map! { "BW_UNLIMITED" == MAP_UNLIMITED;
                /// The shaping object's interfaces without a transmit limit, the same pinned map (see
                /// plexus_ebpf_common::shape::MAP_UNLIMITED): an array lookup, which the verifier inlines,
                /// in front of the `BW_LIMITS` lookup, which is a call.
                pub static BW_UNLIMITED: Array<u64> = Array::with_max_entries(UNLIMITED_WORDS, 0);
            }

            map! { "BW_STATS" == MAP_SHAPE_STATS;
                /// The shaping object's counters, the same pinned map: what the XDP program passed and
                /// dropped counts where the shaping programs count.
                pub static BW_STATS: PerCpuHashMap<ShapeKey, ShapeCounters> = PerCpuHashMap::with_max_entries(MAX_SHAPED, 0);
            }

            map! { "BW_CLOCK" == MAP_CLOCK;
                /// The shaping object's clock (a fixed time in tests), the same pinned map.
                pub static BW_CLOCK: Array<u64> = Array::with_max_entries(1, 0);
            }

            pub struct $maps;

            impl $crate::portmap::maps::Maps for $maps {
                #[inline(always)]
                fn forward() -> &'static HashMap<Endpoint, Rewrite> { &PM_FORWARD }
                #[inline(always)]
                fn unmapped() -> &'static Array<u64> { &PM_UNMAPPED }
                #[inline(always)]
                fn counters() -> &'static PerCpuArray<Counters> { &PM_COUNTERS }
                #[inline(always)]
                fn settings() -> &'static Array<Settings> { &PM_SETTINGS }
                #[inline(always)]
                fn tails() -> &'static ProgramArray { &PM_TAILS }
                #[inline(always)]
                fn flows() -> &'static LruHashMap<FlowKey, Flow> { &PM_FLOWS }
                #[inline(always)]
                fn flow_stats() -> &'static PerCpuArray<FlowStats> { &PM_FLOW_STATS }
                #[inline(always)]
                fn scratch() -> &'static PerCpuArray<Flow> { &PM_SCRATCH }
                #[inline(always)]
                fn frags() -> &'static LruHashMap<FragmentKey, Fragment> { &PM_FRAGS }
                #[inline(always)]
                fn frag_scratch() -> &'static PerCpuArray<Fragment> { &PM_FRAG_SCRATCH }
                #[inline(always)]
                fn sockets() -> &'static LruHashMap<SockKey, Endpoint> { &PM_SOCKETS }
                #[inline(always)]
                fn bw_limits() -> &'static HashMap<ShapeKey, Shape> { &BW_LIMITS }
                #[inline(always)]
                fn bw_unlimited() -> &'static Array<u64> { &BW_UNLIMITED }
                #[inline(always)]
                fn bw_stats() -> &'static PerCpuHashMap<ShapeKey, ShapeCounters> { &BW_STATS }
                #[inline(always)]
                fn bw_clock() -> &'static Array<u64> { &BW_CLOCK }
            }
        }
        use portmap_maps::$maps;
    };
}

/// True when the pod behind host-side veth `ifindex` has an ingress limit on the veth's
/// transmit path. Not looked up when the interface's bit in `BW_UNLIMITED` says no interface
/// with its low index bits has one.
#[inline(always)]
pub fn ingress_limited<M: Maps>(ifindex: u32) -> bool {
    let (word, bit) = ifindex_bit(ifindex);
    if M::bw_unlimited().get(word).is_some_and(|w| *w & bit != 0) {
        return false;
    }
    let key = ShapeKey { ifindex, hook: HOOK_EGRESS, pad: 0, mac: [0; 6] };
    // SAFETY: only the presence is read.
    unsafe { M::bw_limits().get(&key).is_some() }
}

/// Which counters of a mapping a packet adds to.
#[derive(Clone, Copy)]
pub enum Direction {
    /// Towards the pod.
    In,
    /// A reply, back to the host endpoint.
    Out,
    /// A node-local socket translated by a cgroup hook.
    Local,
}

/// Adds one packet of `len` bytes to the counters of the mapping whose forward value (or a
/// flow's copy of it) is `rw`. Per-CPU values, so no atomics; the agent zeroes a mapping's
/// counters before its forward entry names them.
#[inline(always)]
pub fn count<M: Maps>(rw: &Rewrite, len: u32, dir: Direction) {
    if rw.counters == NO_COUNTERS {
        return;
    }
    if let Some(c) = M::counters().get_ptr_mut(rw.counters) {
        // SAFETY: a per-CPU value of this CPU, valid while the program runs.
        unsafe {
            match dir {
                Direction::In => {
                    (*c).packets_in += 1;
                    (*c).bytes_in += u64::from(len);
                }
                Direction::Out => {
                    (*c).packets_out += 1;
                    (*c).bytes_out += u64::from(len);
                }
                Direction::Local => (*c).local += 1,
            }
        }
    }
}

/// The forward entry of a host endpoint, read in place: a map value stays valid while the
/// program runs (an update by the agent replaces it atomically for later lookups). Not looked
/// up when no mapping has the port.
#[inline(always)]
pub fn forward<M: Maps>(host: &Endpoint) -> Option<&'static Rewrite> {
    let (word, bit) = port_bit(host.port_be);
    if M::unmapped().get(word).is_some_and(|w| *w & bit != 0) {
        return None;
    }
    // SAFETY: see above.
    unsafe { M::forward().get(host) }
}

/// The settings (an array entry: always present), read in place.
#[inline(always)]
pub fn settings<M: Maps>() -> Option<&'static Settings> {
    M::settings().get(0)
}

/// Now, in nanoseconds of the coarse monotonic clock, or the tests' fixed clock. Flow times
/// need seconds, not nanoseconds: the coarse clock is the timekeeper's last tick, read without
/// the clock source (`bpf_ktime_get_ns` reads the TSC on every packet).
#[inline(always)]
pub fn now(s: &Settings) -> u64 {
    if s.fixed_now_ns != 0 {
        return s.fixed_now_ns;
    }
    // SAFETY: a helper call without arguments.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// Which flow counter a packet adds to.
#[derive(Clone, Copy)]
pub enum FlowEvent {
    Created,
    Removed,
    Forward,
    Reverse,
    Icmp,
}

/// Adds one to a flow counter of this CPU (programs' index; no atomics needed).
#[inline(always)]
pub fn flow_count<M: Maps>(event: FlowEvent) {
    if let Some(s) = M::flow_stats().get_ptr_mut(STATS_PROGRAMS) {
        // SAFETY: a per-CPU value of this CPU, valid while the program runs.
        unsafe {
            match event {
                FlowEvent::Created => (*s).created += 1,
                FlowEvent::Removed => (*s).removed += 1,
                FlowEvent::Forward => (*s).forward += 1,
                FlowEvent::Reverse => (*s).reverse += 1,
                FlowEvent::Icmp => (*s).icmp += 1,
            }
        }
    }
}

/// The network namespace whose sockets the cgroup hooks translate (0: none).
#[inline(always)]
pub fn netns_cookie<M: Maps>() -> u64 {
    M::settings().get(0).map_or(0, |c| c.netns_cookie)
}
