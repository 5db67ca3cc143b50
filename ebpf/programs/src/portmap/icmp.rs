//! ICMP and ICMPv6 errors about mapped flows (destination unreachable, including
//! fragmentation needed; packet too big; time exceeded), translated like the packets they
//! quote, so path MTU discovery and error reporting work through a mapping. Entered by tail
//! call from `pm_tc_in`/`pm_tc_out` (the hook's direction in `cb[0]`).
//!
//! Two cases, told apart by the flow table:
//! - From the pod's side, quoting a request the pod received (client → podIP:containerPort):
//!   the quoted destination becomes hostIP:hostPort, and the outer source, when it is the pod,
//!   the host IP: the client recognises its own request to the address it used.
//! - Towards the host IP, quoting a reply the pod sent (hostIP:hostPort → client): the quoted
//!   source becomes podIP:containerPort and the outer destination the pod, which receives it
//!   like a forward packet. This is the one path MTU discovery needs: a router on the way to
//!   the client reports a smaller MTU to the address the pod's replies came from.
//!
//! Every checksum the rewrite touches is updated: the outer IPv4 header's and the ICMPv6
//! pseudo-header's by the kernel helpers (which keep `skb->csum` right), the quoted IPv4
//! header's, the quoted TCP/UDP checksum (when the quote holds it) and the ICMP checksum over
//! all of them by plexus_ebpf_common::csum. A quoted SCTP header's CRC32c covers data the quote
//! lacks and is left alone, as the receiver cannot check it either. Errors about hairpin flows
//! (whose source was rewritten too) are left alone.

use aya_ebpf::bindings::BPF_F_PSEUDO_HDR;
use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::csum::Delta;
use plexus_ebpf_common::flow::{FlowKey, FLOW_SNAT};
use plexus_ebpf_common::{addr_eq, v4_mapped, Addr, Endpoint, PROTO_SCTP, PROTO_TCP, PROTO_UDP};

use crate::consts::{DROP, ETH_HLEN, ETH_P_IP, ETH_P_IPV6, NEXT};
use crate::packet::IPV6_HLEN;
use crate::portmap::flows::find;
use crate::portmap::maps::{flow_count, forward, now, settings, FlowEvent, Maps};
use crate::portmap::rewrite::{deliver, pseudo_header_addr, set_ip_addr, Side};
use crate::portmap::tail::tail_called_ingress;

const ICMP_HLEN: usize = 8;

/// `pm_icmp`: an ICMP error (plexus_ebpf_common::icmp_is_error), tail-called from
/// `pm_tc_in`/`pm_tc_out`.
#[inline(always)]
pub fn icmp<M: Maps>(ctx: &TcContext) -> i32 {
    let Some(m) = parse(ctx) else { return NEXT };
    match translate::<M>(ctx, &m, tail_called_ingress(ctx)) {
        Ok(verdict) => verdict,
        // A helper failed halfway through a rewrite: the packet is inconsistent, drop it.
        Err(_) => DROP,
    }
}

/// An error message and the packet it quotes. Values as read (network byte order).
struct Message {
    v6: bool,
    /// Offset of the ICMP header.
    icmp: usize,
    outer_src: Addr,
    outer_dst: Addr,
    /// Offset of the quoted IP header and of its L4 header.
    inner: usize,
    inner_l4: usize,
    proto: u8,
    inner_src: Addr,
    inner_dst: Addr,
    sport: u16,
    dport: u16,
}

#[inline(always)]
fn parse(ctx: &TcContext) -> Option<Message> {
    let ethertype = u16::from_be(ctx.load::<u16>(12).ok()?);
    let (v6, icmp, outer_src, outer_dst, inner, inner_l4, proto, inner_src, inner_dst) =
        if ethertype == ETH_P_IP {
            let vihl: u8 = ctx.load(ETH_HLEN).ok()?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if ihl < 20 {
                return None;
            }
            let outer_src: u32 = ctx.load(ETH_HLEN + 12).ok()?;
            let outer_dst: u32 = ctx.load(ETH_HLEN + 16).ok()?;
            let icmp = ETH_HLEN + ihl;
            let inner = icmp + ICMP_HLEN;
            let ivihl: u8 = ctx.load(inner).ok()?;
            let iihl = usize::from(ivihl & 0x0f) * 4;
            if ivihl >> 4 != 4 || iihl < 20 {
                return None;
            }
            let proto: u8 = ctx.load(inner + 9).ok()?;
            let src: u32 = ctx.load(inner + 12).ok()?;
            let dst: u32 = ctx.load(inner + 16).ok()?;
            (
                false,
                icmp,
                v4_mapped(outer_src),
                v4_mapped(outer_dst),
                inner,
                inner + iihl,
                proto,
                v4_mapped(src),
                v4_mapped(dst),
            )
        } else if ethertype == ETH_P_IPV6 {
            let outer_src: Addr = ctx.load(ETH_HLEN + 8).ok()?;
            let outer_dst: Addr = ctx.load(ETH_HLEN + 24).ok()?;
            let icmp = ETH_HLEN + IPV6_HLEN;
            let inner = icmp + ICMP_HLEN;
            let version: u8 = ctx.load(inner).ok()?;
            if version >> 4 != 6 {
                return None;
            }
            // Extension headers in the quote are not followed: the L4 header must come first.
            let proto: u8 = ctx.load(inner + 6).ok()?;
            let src: Addr = ctx.load(inner + 8).ok()?;
            let dst: Addr = ctx.load(inner + 24).ok()?;
            (true, icmp, outer_src, outer_dst, inner, inner + IPV6_HLEN, proto, src, dst)
        } else {
            return None;
        };
    if proto != PROTO_TCP && proto != PROTO_UDP && proto != PROTO_SCTP {
        return None;
    }
    let sport: u16 = ctx.load(inner_l4).ok()?;
    let dport: u16 = ctx.load(inner_l4 + 2).ok()?;
    Some(Message {
        v6,
        icmp,
        outer_src,
        outer_dst,
        inner,
        inner_l4,
        proto,
        inner_src,
        inner_dst,
        sport,
        dport,
    })
}

#[inline(always)]
fn translate<M: Maps>(ctx: &TcContext, m: &Message, ingress: bool) -> Result<i32, i64> {
    let Some(s) = settings::<M>() else { return Ok(NEXT) };
    let now = now(s);
    // From the pod's side: the quote is a request the pod received, so its reversed tuple is a
    // flow's key.
    let key = FlowKey::new(m.inner_dst, m.dport, m.inner_src, m.sport, m.proto);
    if let Some(flow) = find::<M>(&key, s, now) {
        if flow.state & FLOW_SNAT != 0 {
            return Ok(NEXT);
        }
        rewrite_inner(ctx, m, Side::Dst, &flow.host.addr, flow.host.port_be)?;
        if addr_eq(&m.outer_src, &m.inner_dst) {
            rewrite_outer(ctx, m, Side::Src, &flow.host.addr)?;
        }
        flow_count::<M>(FlowEvent::Icmp);
        return Ok(NEXT);
    }
    // Towards the host IP: the quote is a reply sent as hostIP:hostPort.
    if !addr_eq(&m.outer_dst, &m.inner_src) {
        return Ok(NEXT);
    }
    let host = Endpoint::new(m.inner_src, m.sport, m.proto);
    let Some(rw) = forward::<M>(&host) else { return Ok(NEXT) };
    let key = FlowKey::new(rw.addr, rw.port_be, m.inner_dst, m.dport, m.proto);
    let Some(flow) = find::<M>(&key, s, now) else { return Ok(NEXT) };
    if !flow.host.same(&host) || flow.state & FLOW_SNAT != 0 {
        return Ok(NEXT);
    }
    rewrite_inner(ctx, m, Side::Src, &rw.addr, rw.port_be)?;
    rewrite_outer(ctx, m, Side::Dst, &rw.addr)?;
    ctx.store(0, &flow.rewrite.pod_mac, 0)?;
    flow_count::<M>(FlowEvent::Icmp);
    Ok(deliver::<M>(ctx, &flow.rewrite, ingress))
}

/// Rewrites the quoted packet's source or destination address and port, with the quoted IPv4
/// header checksum, the quoted TCP/UDP checksum when present, and the ICMP checksum over all
/// of those changes.
#[inline(always)]
fn rewrite_inner(ctx: &TcContext, m: &Message, side: Side, addr: &Addr, port: u16) -> Result<(), i64> {
    let (addr_off, port_off, old_addr, old_port) = match (side, m.v6) {
        (Side::Src, false) => (m.inner + 12, m.inner_l4, m.inner_src, m.sport),
        (Side::Dst, false) => (m.inner + 16, m.inner_l4 + 2, m.inner_dst, m.dport),
        (Side::Src, true) => (m.inner + 8, m.inner_l4, m.inner_src, m.sport),
        (Side::Dst, true) => (m.inner + 24, m.inner_l4 + 2, m.inner_dst, m.dport),
    };
    let addr_delta = Delta::default().ip(m.v6, &old_addr, addr);
    let port_delta = Delta::default().word(old_port, port);
    let mut icmp = addr_delta.plus(port_delta);

    if !m.v6 {
        let old: u16 = ctx.load(m.inner + 10)?;
        let new = addr_delta.apply(old);
        ctx.store(m.inner + 10, &new, 0)?;
        icmp = icmp.word(old, new);
    }
    let l4_csum = match m.proto {
        PROTO_TCP => m.inner_l4 + 16,
        PROTO_UDP => m.inner_l4 + 6,
        _ => 0,
    };
    // The quoted L4 checksum, when the quote is long enough to hold it.
    if l4_csum != 0 {
        if let Ok(old) = ctx.load::<u16>(l4_csum) {
            let d = addr_delta.plus(port_delta);
            let new = if m.proto == PROTO_UDP { d.apply_udp(old) } else { d.apply(old) };
            ctx.store(l4_csum, &new, 0)?;
            icmp = icmp.word(old, new);
        }
    }
    if m.v6 {
        ctx.store(addr_off, addr, 0)?;
    } else {
        ctx.store(addr_off, &addr[3], 0)?;
    }
    ctx.store(port_off, &port, 0)?;
    let off = m.icmp + 2;
    let old: u16 = ctx.load(off)?;
    ctx.store(off, &icmp.apply(old), 0)
}

/// Rewrites the outer source or destination address: with the IPv4 header checksum, or with
/// the ICMPv6 checksum, whose pseudo-header holds it.
#[inline(always)]
fn rewrite_outer(ctx: &TcContext, m: &Message, side: Side, addr: &Addr) -> Result<(), i64> {
    let old = if side == Side::Src { m.outer_src } else { m.outer_dst };
    if m.v6 {
        pseudo_header_addr(ctx, m.icmp + 2, true, &old, addr, u64::from(BPF_F_PSEUDO_HDR) | 4)?;
    }
    set_ip_addr(ctx, m.v6, side, &old, addr)
}
