//! The port mapping's tail calls: `pm_tc_in`/`pm_tc_out` hand SCTP packets whose ports
//! changed to `pm_sctp`, ICMP errors to `pm_icmp` and later fragments to `pm_fragment` (through
//! `PM_TAILS`), with what they need in the skb's control buffer.

use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::TAIL_SCTP;

use crate::consts::{DROP, NEXT};
use crate::packet::Packet;
use crate::portmap::maps::Maps;

/// Hands an SCTP packet whose ports changed to `pm_sctp`, with what it needs in the skb's
/// control buffer: the ports before, where the SCTP header is and how long the packet is, and
/// the verdict to return (a redirect is already recorded by `bpf_redirect` and survives the
/// tail call).
///
/// A separate program because the CRC update made the verifier's walk of this one explode
/// (every path of the rewrite times the update's steps); alone it is verified in a few
/// thousand steps.
#[inline(always)]
pub fn sctp_tail_call<M: Maps>(ctx: &TcContext, p: &Packet, before: (u16, u16), verdict: i32) -> i32 {
    let (s, d) = (before.0.to_ne_bytes(), before.1.to_ne_bytes());
    // SAFETY: the context pointer is the program's __sk_buff; TC programs may write cb.
    unsafe {
        let skb = ctx.skb.skb;
        (*skb).cb[0] = u32::from_ne_bytes([s[0], s[1], d[0], d[1]]);
        (*skb).cb[1] = p.l4 as u32;
        (*skb).cb[2] = p.l4_len;
        (*skb).cb[3] = verdict as u32;
        M::tails().tail_call(ctx, TAIL_SCTP);
    }
    // Only reached when the tail call failed (no fixup program loaded): a packet with a stale
    // CRC would be dropped by the receiver anyway.
    DROP
}

/// Hands an ICMP error or a later fragment to its program (`pm_icmp`, `pm_fragment`), with the
/// hook it arrived on in the control buffer.
#[inline(always)]
pub fn tail_call<M: Maps>(ctx: &TcContext, ingress: bool, index: u32) -> i32 {
    // SAFETY: as in `sctp_tail_call`.
    unsafe {
        (*ctx.skb.skb).cb[0] = u32::from(ingress);
        M::tails().tail_call(ctx, index);
    }
    // No program loaded there: the packet goes on as it is, as it did without plexus.
    NEXT
}

/// The hook a tail-called program (`pm_icmp`, `pm_fragment`) was entered from, as
/// [`tail_call`] left it in the control buffer: true for the receive path.
#[inline(always)]
pub fn tail_called_ingress(ctx: &TcContext) -> bool {
    // SAFETY: the context pointer is the program's __sk_buff.
    unsafe { (*ctx.skb.skb).cb[0] != 0 }
}
