//! The maps the programs share with the agent; names and layouts come from
//! plexus-ebpf-common. The agent pins them, so they outlive the agent process.

use aya_ebpf::maps::{Array, HashMap, PerCpuHashMap, ProgramArray};
use plexus_ebpf_common::shape::{Shape, ShapeKey, HOOK_EGRESS, MAP_LIMITS, MAX_SHAPED};
use plexus_ebpf_common::{
    Config, Counters, Endpoint, Rewrite, MAP_CONFIG, MAP_FORWARD, MAP_REVERSE, MAP_STATS, MAP_TAIL,
    MAX_MAPPINGS,
};

use crate::shared::map;

map! { "PM_FWD" == MAP_FORWARD;
    pub static PM_FWD: HashMap<Endpoint, Rewrite> = HashMap::with_max_entries(MAX_MAPPINGS, 0);
}

map! { "PM_REV" == MAP_REVERSE;
    pub static PM_REV: HashMap<Endpoint, Rewrite> = HashMap::with_max_entries(MAX_MAPPINGS, 0);
}

map! { "PM_STATS" == MAP_STATS;
    pub static PM_STATS: PerCpuHashMap<Endpoint, Counters> = PerCpuHashMap::with_max_entries(MAX_MAPPINGS, 0);
}

map! { "PM_CONFIG" == MAP_CONFIG;
    pub static PM_CONFIG: Array<Config> = Array::with_max_entries(1, 0);
}

map! { "PM_TAIL" == MAP_TAIL;
    /// The SCTP checksum fixup, a program of its own (see `tc::pm_sctp`).
    pub static PM_TAIL: ProgramArray = ProgramArray::with_max_entries(1, 0);
}

map! { "BW_LIMITS" == MAP_LIMITS;
    /// The shaping object's limits, the same pinned map (the agent points both objects at one
    /// pin): read only, to know which pods' veths limit their ingress.
    pub static BW_LIMITS: HashMap<ShapeKey, Shape> = HashMap::with_max_entries(MAX_SHAPED, 0);
}

/// True when the pod behind host-side veth `ifindex` has an ingress limit on the veth's
/// transmit path.
#[inline(always)]
pub fn ingress_limited(ifindex: u32) -> bool {
    let key = ShapeKey { ifindex, hook: HOOK_EGRESS, pad: 0, mac: [0; 6] };
    // SAFETY: only the presence is read.
    unsafe { BW_LIMITS.get(&key).is_some() }
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

/// Adds one packet of `len` bytes to the counters of the mapping whose host side is `host`.
/// The agent creates the (per-CPU) entry with the mapping, so the program never inserts and
/// needs no atomics.
#[inline(always)]
pub fn count(host: &Endpoint, len: u32, dir: Direction) {
    if let Some(c) = PM_STATS.get_ptr_mut(host) {
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

/// The forward entry of a host endpoint, copied out of the map.
#[inline(always)]
pub fn forward(host: &Endpoint) -> Option<Rewrite> {
    // SAFETY: the value is copied before the program can be preempted by an update.
    unsafe { PM_FWD.get(host).copied() }
}

/// The reverse entry of a pod endpoint, copied out of the map.
#[inline(always)]
pub fn reverse(pod: &Endpoint) -> Option<Rewrite> {
    // SAFETY: as in `forward`.
    unsafe { PM_REV.get(pod).copied() }
}

/// The network namespace whose sockets the cgroup hooks translate (0: none).
#[inline(always)]
pub fn netns_cookie() -> u64 {
    PM_CONFIG.get(0).map_or(0, |c| c.netns_cookie)
}
