//! Bandwidth shaping (NPWG 4.1.2.1.8) on TC hooks: what the shaping object's `bw_tc_in` and
//! `bw_tc_out` run (see the object's binary, `src/bin/bandwidth.rs`, for the whole picture). The
//! arithmetic is `plexus_ebpf_common::shape`'s, shared with the agent's tests; this finds the
//! limit of a packet, runs the arithmetic against the shared clock ([`crate::charge`]), and
//! applies the verdict.

use aya_ebpf::helpers::bpf_ktime_get_ns;
use aya_ebpf::maps::{Array, HashMap, PerCpuHashMap};
use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::shape::{
    Shape, ShapeCounters, ShapeKey, Verdict, XdpCharged, HOOK_INGRESS, XDP_CHARGED,
};

use crate::charge::charge;
use crate::consts::{DROP, ETH_HLEN, ETH_P_IP, ETH_P_IPV6, NEXT};

#[inline(always)]
fn now(clock: &Array<u64>) -> u64 {
    match clock.get(0) {
        Some(fixed) if *fixed != 0 => *fixed,
        // SAFETY: a helper without arguments.
        _ => unsafe { bpf_ktime_get_ns() },
    }
}

/// `bw_tc_in` (`hook` [`HOOK_INGRESS`]) and `bw_tc_out`, with the object's maps (see
/// [`crate::police::police`]: the port mapping object has handles of its own of the same maps).
#[inline(always)]
pub fn shape(
    ctx: &TcContext,
    hook: u8,
    limits: &HashMap<ShapeKey, Shape>,
    stats: &PerCpuHashMap<ShapeKey, ShapeCounters>,
    clock: &Array<u64>,
) -> i32 {
    // SAFETY: the context pointer is the program's __sk_buff.
    let ifindex = unsafe { (*ctx.skb.skb).ifindex };
    if hook == HOOK_INGRESS && charged_in_xdp(ctx, ifindex) {
        return NEXT;
    }
    let mut key = ShapeKey { ifindex, hook, pad: 0, mac: [0; 6] };
    let mut limit = limits.get_ptr_mut(&key);
    if limit.is_none() {
        let pod_mac_at = if hook == HOOK_INGRESS { 0 } else { 6 };
        let Ok(mac) = ctx.load::<[u8; 6]>(pod_mac_at) else { return NEXT };
        key.mac = mac;
        limit = limits.get_ptr_mut(&key);
    }
    let Some(limit) = limit else { return NEXT };
    let len = u64::from(ctx.len()).saturating_sub(ETH_HLEN as u64);
    let ecn = ecn_field(ctx);
    let now = now(clock);
    // SAFETY: `limit` points into the map's value, valid for this run.
    let verdict = unsafe { charge(limit, len, now, ecn.capable) };
    let action = match verdict {
        Verdict::Pass => NEXT,
        // A failed store after the checksum update would leave the header inconsistent.
        Verdict::Mark => match set_ce(ctx, ecn) {
            Ok(()) => NEXT,
            Err(_) => DROP,
        },
        Verdict::Depart(at) => {
            // SAFETY: TC programs may write the departure time of the skb they run on.
            unsafe { (*ctx.skb.skb).tstamp = at };
            NEXT
        }
        Verdict::Drop => DROP,
    };
    count(stats, &key, len, verdict);
    action
}

/// True when the port mapping object's XDP program on this interface already charged the
/// packet to its limit (and passed it): its mark in the packet's metadata (see
/// `plexus_ebpf_common::shape::XdpCharged`). A limit is enforced once.
#[inline(always)]
fn charged_in_xdp(ctx: &TcContext, ifindex: u32) -> bool {
    // SAFETY: the context pointer is the program's __sk_buff; the metadata is read only after
    // the bounds check against the packet's start, which the verifier requires.
    unsafe {
        let skb = ctx.skb.skb;
        let meta = (*skb).data_meta as usize;
        let data = (*skb).data as usize;
        if meta + core::mem::size_of::<XdpCharged>() > data {
            return false;
        }
        let mark = core::ptr::read_unaligned(meta as *const XdpCharged);
        mark.magic == XDP_CHARGED && mark.ifindex == ifindex
    }
}

#[inline(always)]
fn count(stats: &PerCpuHashMap<ShapeKey, ShapeCounters>, key: &ShapeKey, len: u64, verdict: Verdict) {
    let Some(c) = stats.get_ptr_mut(key) else { return };
    // SAFETY: this CPU's value, valid while the program runs; the agent created the entry.
    unsafe {
        match verdict {
            Verdict::Drop => {
                (*c).dropped_packets = (*c).dropped_packets.wrapping_add(1);
                (*c).dropped_bytes = (*c).dropped_bytes.wrapping_add(len);
            }
            _ => {
                (*c).passed_packets = (*c).passed_packets.wrapping_add(1);
                (*c).passed_bytes = (*c).passed_bytes.wrapping_add(len);
                if verdict == Verdict::Mark {
                    (*c).marked_packets = (*c).marked_packets.wrapping_add(1);
                }
            }
        }
    }
}

/// Where a packet's ECN bits are and whether it is ECN-capable (ECT(0) or ECT(1)). Every field
/// is always set (no `Option`): LLVM copies whole values, and an unset payload read from a
/// clobbered register is rejected by the verifier.
#[derive(Clone, Copy)]
struct Ecn {
    /// 4, 6, or 0 when the packet is not IP.
    family: u8,
    /// The byte holding the bits: IPv4's TOS, or IPv6's second byte.
    byte: u8,
    capable: bool,
}

const NOT_IP: Ecn = Ecn { family: 0, byte: 0, capable: false };

#[inline(always)]
fn ecn_field(ctx: &TcContext) -> Ecn {
    let Ok(ethertype) = ctx.load::<u16>(12) else { return NOT_IP };
    let ethertype = u16::from_be(ethertype);
    if ethertype == ETH_P_IP {
        let Ok(tos) = ctx.load::<u8>(ETH_HLEN + 1) else { return NOT_IP };
        let bits = tos & 3;
        Ecn { family: 4, byte: tos, capable: bits == 1 || bits == 2 }
    } else if ethertype == ETH_P_IPV6 {
        let Ok(b) = ctx.load::<u8>(ETH_HLEN + 1) else { return NOT_IP };
        let bits = (b >> 4) & 3;
        Ecn { family: 6, byte: b, capable: bits == 1 || bits == 2 }
    } else {
        NOT_IP
    }
}

/// Sets Congestion Experienced, with the IPv4 header checksum.
#[inline(always)]
fn set_ce(ctx: &TcContext, e: Ecn) -> Result<(), i64> {
    if e.family == 6 {
        return ctx.store(ETH_HLEN + 1, &(e.byte | 0x30), 0);
    }
    let vihl: u8 = ctx.load(ETH_HLEN)?;
    // The checksum covers the 16-bit word (version/IHL, TOS), in network order.
    let old = u16::from_be_bytes([vihl, e.byte]).to_be();
    let new = u16::from_be_bytes([vihl, e.byte | 3]).to_be();
    ctx.l3_csum_replace(ETH_HLEN + 10, u64::from(old), u64::from(new), 2)?;
    ctx.store(ETH_HLEN + 1, &(e.byte | 3), 0)
}
