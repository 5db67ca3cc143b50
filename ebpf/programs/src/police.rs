//! Ingress limits in XDP, on a macvlan master: the limit `bw_tc_in` enforces on the master's
//! receive path for the destination MAC, in the same map entry with the same clock
//! ([`crate::charge`]), so a frame over it is dropped before the kernel builds an skb. A frame
//! XDP charged and passed carries a mark in its metadata ([`XdpCharged`]) telling `bw_tc_in` to
//! leave it alone: the limit is enforced once. ECN-capable packets (which `bw_tc_in` may
//! CE-mark instead of dropping), limits paced by EDT, frames other than IP, and drivers without
//! XDP metadata stay entirely TC's.
//!
//! Both objects run it: the port mapping object's `pm_xdp` after its translation, the shaping
//! object's `bw_xdp` alone (a master without port mappings). Each passes its own handles of the
//! shaping maps, which are one pinned set.

use aya_ebpf::bindings::xdp_action::{XDP_DROP, XDP_PASS};
use aya_ebpf::helpers::{bpf_ktime_get_ns, bpf_xdp_adjust_meta};
use aya_ebpf::maps::{Array, HashMap, PerCpuHashMap};
use aya_ebpf::programs::XdpContext;
use plexus_ebpf_common::shape::{
    Shape, ShapeCounters, ShapeKey, Verdict, XdpCharged, HOOK_INGRESS, SHAPE_EDT, XDP_CHARGED,
};

use crate::charge::charge;
use crate::consts::{ETH_HLEN, ETH_P_IP, ETH_P_IPV6};
use crate::packet::Headers;

/// Enforces the ingress limit of the pod the frame is for, if it has one (see the module's
/// notes); the verdict for the frame.
#[inline(always)]
pub fn police(
    ctx: &XdpContext,
    limits: &HashMap<ShapeKey, Shape>,
    stats: &PerCpuHashMap<ShapeKey, ShapeCounters>,
    clock: &Array<u64>,
) -> u32 {
    let ifindex = ctx.ingress_ifindex() as u32;
    let h = Headers::linear(ctx);
    let Some(mac) = h.read::<[u8; 6]>(0) else { return XDP_PASS };
    let key = ShapeKey { ifindex, hook: HOOK_INGRESS, pad: 0, mac };
    let Some(limit) = limits.get_ptr_mut(&key) else { return XDP_PASS };
    let ecn = match h.read::<u16>(12).map(u16::from_be) {
        Some(ETH_P_IP) => h.read::<u8>(ETH_HLEN + 1).map(|tos| tos & 3),
        Some(ETH_P_IPV6) => h.read::<u8>(ETH_HLEN + 1).map(|b| (b >> 4) & 3),
        _ => None,
    };
    if ecn != Some(0) {
        return XDP_PASS;
    }
    // SAFETY: a map value, valid for the program's run.
    if unsafe { (*limit).flags } & SHAPE_EDT != 0 {
        return XDP_PASS;
    }
    let len = (ctx.data_end() - ctx.data()).saturating_sub(ETH_HLEN) as u64;
    // Room for the mark first: where there is none, TC enforces the limit.
    // SAFETY: a helper on the program's own context.
    if unsafe { bpf_xdp_adjust_meta(ctx.ctx, -(core::mem::size_of::<XdpCharged>() as i32)) } != 0 {
        return XDP_PASS;
    }
    // SAFETY: `limit` points into the map's value, valid for this run.
    let verdict = unsafe { charge(limit, len, now(clock), false) };
    count(stats, &key, len, verdict);
    if verdict == Verdict::Drop {
        return XDP_DROP;
    }
    let meta = ctx.metadata();
    if meta + core::mem::size_of::<XdpCharged>() <= ctx.data() {
        // SAFETY: within the metadata, checked above.
        unsafe {
            core::ptr::write_unaligned(meta as *mut XdpCharged, XdpCharged { magic: XDP_CHARGED, ifindex })
        };
    }
    XDP_PASS
}

/// The shaping programs' clock: the kernel's, or the tests' fixed time.
#[inline(always)]
fn now(clock: &Array<u64>) -> u64 {
    match clock.get(0) {
        Some(fixed) if *fixed != 0 => *fixed,
        // SAFETY: a helper without arguments.
        _ => unsafe { bpf_ktime_get_ns() },
    }
}

/// Adds a packet to the limit's counters, as the shaping programs do.
#[inline(always)]
fn count(stats: &PerCpuHashMap<ShapeKey, ShapeCounters>, key: &ShapeKey, len: u64, verdict: Verdict) {
    let Some(c) = stats.get_ptr_mut(key) else { return };
    // SAFETY: this CPU's value, valid while the program runs; the agent created the entry.
    unsafe {
        if verdict == Verdict::Drop {
            (*c).dropped_packets = (*c).dropped_packets.wrapping_add(1);
            (*c).dropped_bytes = (*c).dropped_bytes.wrapping_add(len);
        } else {
            (*c).passed_packets = (*c).passed_packets.wrapping_add(1);
            (*c).passed_bytes = (*c).passed_bytes.wrapping_add(len);
        }
    }
}
