//! plexus's bandwidth shaping (NPWG 4.1.2.1.8): TC programs on the host-side hooks of
//! attachments, loaded and attached by the agent (agent/src/dataplane/bandwidth). This object's
//! maps and entry points; the programs' code is the library's ([`plexus_ebpf::shaping`],
//! [`plexus_ebpf::police`]), the arithmetic `plexus_ebpf_common::shape`'s, shared with the
//! agent's tests.
//!
//! A limit is found by the device and hook the packet is on: first for the whole device (a
//! pod's host-side veth, where everything is that pod's), then for one pod by MAC (a macvlan
//! master: the destination on the receive path, the source on the transmit path).
//!
//! The rate counts IP bytes (the skb less its Ethernet header; a GSO packet as one), so a
//! limit means the same on every kind of device.
//!
//! On a macvlan master whose XDP program (`bw_xdp` here, or the port mapping object's `pm_xdp`
//! where the master has port mappings too) charged a packet to the same limit already, the
//! receive path's program leaves it alone: the XDP program marks what it charged in the
//! packet's metadata (`plexus_ebpf_common::shape::XdpCharged`).

#![no_std]
#![no_main]

use aya_ebpf::macros::{classifier, xdp};
use aya_ebpf::maps::{Array, HashMap, PerCpuHashMap};
use aya_ebpf::programs::{TcContext, XdpContext};
use plexus_ebpf::map;
use plexus_ebpf::shaping::shape;
use plexus_ebpf_common::shape::{
    Shape, ShapeCounters, ShapeKey, HOOK_EGRESS, HOOK_INGRESS, MAP_CLOCK, MAP_LIMITS, MAP_STATS,
    MAP_UNLIMITED, MAX_SHAPED, UNLIMITED_WORDS,
};

map! { "BW_LIMITS" == MAP_LIMITS;
    static BW_LIMITS: HashMap<ShapeKey, Shape> = HashMap::with_max_entries(MAX_SHAPED, 0);
}

map! { "BW_STATS" == MAP_STATS;
    static BW_STATS: PerCpuHashMap<ShapeKey, ShapeCounters> = PerCpuHashMap::with_max_entries(MAX_SHAPED, 0);
}

map! { "BW_CLOCK" == MAP_CLOCK;
    /// Zero: the programs read the kernel's clock; else the time they use (tests).
    static BW_CLOCK: Array<u64> = Array::with_max_entries(1, 0);
}

map! { "BW_UNLIMITED" == MAP_UNLIMITED;
    /// The interfaces without a transmit limit, by bit (see
    /// plexus_ebpf_common::shape::MAP_UNLIMITED): the agent writes it with the limits, the port
    /// mapping programs read it. No program here does: it is declared so that it is created
    /// and pinned with this object's maps, whose limits it describes.
    static BW_UNLIMITED: Array<u64> = Array::with_max_entries(UNLIMITED_WORDS, 0);
}

/// The ingress limits of the pods behind a macvlan master without port mappings (where there
/// are, the port mapping object's `pm_xdp` runs instead and polices the same way).
#[xdp]
pub fn bw_xdp(ctx: XdpContext) -> u32 {
    plexus_ebpf::police::police(&ctx, &BW_LIMITS, &BW_STATS, &BW_CLOCK)
}

#[classifier]
pub fn bw_tc_in(ctx: TcContext) -> i32 {
    shape(&ctx, HOOK_INGRESS, &BW_LIMITS, &BW_STATS, &BW_CLOCK)
}

#[classifier]
pub fn bw_tc_out(ctx: TcContext) -> i32 {
    shape(&ctx, HOOK_EGRESS, &BW_LIMITS, &BW_STATS, &BW_CLOCK)
}
