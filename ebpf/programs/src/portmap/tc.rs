//! Port mappings on the node's interfaces, as TC programs.
//!
//! One program body, attached at the receive (`pm_tc_in`) or transmit (`pm_tc_out`) hook of
//! every interface a mapped packet or its reply crosses (the agent decides where: the bridge
//! and each pod's host-side veth, or the macvlan master and a host-side macvlan):
//!
//! 1. Forward: a packet whose destination is in `PM_FORWARD` (hostIP:hostPort/proto) is rewritten
//!    to podIP:containerPort, the destination MAC to the pod's, and delivered to the pod. When
//!    its source is the pod itself (hairpin), the source becomes the host IP too: a packet from
//!    its own address would be dropped by the pod's kernel as a martian. The flow is made or
//!    refreshed in `PM_FLOWS` (see [`crate::flows`]), keyed by the tuple its replies will have.
//! 2. Reverse: a packet whose tuple is a tracked flow's reply gets the host endpoint back as
//!    its source (and, for a hairpin flow, the pod's own address as destination, turned around
//!    to it). Every other packet passes untouched: peers talking to podIP:containerPort
//!    directly, the pod's own connections, node-local clients (translated at connect time by
//!    the cgroup hooks, their replies belong to no flow).
//! 3. ICMP errors are handed to `pm_icmp` (see [`crate::icmp`]), which translates those that
//!    quote a tracked flow; IP fragments after the first to `pm_fragment` (see
//!    [`crate::fragments`]), which translates them like their first fragment.
//!
//! Checksums are updated incrementally, the changes summed first (see [`rewrite`]): one
//! `bpf_l4_csum_replace` with `BPF_F_PSEUDO_HDR` for the addresses (in the TCP/UDP
//! pseudo-header), one without it for the ports, the IPv4 header checksum computed here and
//! stored with the addresses and ports; SCTP's CRC32c by its linearity
//! (plexus_ebpf_common::crc32c), in a program of its own (`pm_sctp`, tail-called) to keep each
//! program's verification small. Every helper call costs on every translated packet, so a
//! translation whose headers are contiguous (no IPv4 options, no IPv6 extension header) makes
//! two: the checksum updates. The headers and MACs are then written in place (direct packet
//! access, see [`store_in_place`]); other layouts store them with `bpf_skb_store_bytes`.
//!
//! Writing in place makes the verifier add a prologue to the programs: a cloned skb whose
//! linear data is not all its own (`skb_clone_writable`) is uncloned before the program runs,
//! translated or not. The segments of a local TCP socket are clones of its retransmit queue,
//! but their linear data is their headers, which the clone owns, so they are not copied; in
//! CRR traffic (the bench's, `kernel.bpf_stats_enabled`, three runs of each alternated) the
//! prologue's check and the stores fewer took `pm_tc_in` from a median 491 to 437 ns a run.

use aya_ebpf::bindings::{BPF_F_INGRESS, BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR};
use aya_ebpf::helpers::{bpf_redirect, bpf_redirect_peer, bpf_skb_store_bytes};
use aya_ebpf::macros::classifier;
use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::csum::Delta;
use plexus_ebpf_common::flow::{
    FlowKey, FragmentKey, FLOW_SNAT, FRAG_DST, FRAG_HAIRPIN, FRAG_REPLY, FRAG_SRC, FRAG_TO_POD,
};
use plexus_ebpf_common::{
    addr_eq, crc32c, v4_mapped, Addr, Endpoint, Rewrite, DELIVER_INGRESS, PROTO_ICMP, PROTO_ICMPV6,
    PROTO_SCTP, PROTO_TCP, PROTO_UDP, TAIL_FRAGMENT, TAIL_ICMP, TAIL_SCTP,
};

use crate::flows::{track_reply, track_request, Request};
use crate::fragments;
use crate::headers::{store16, store32, writable, Headers, FRAG_HLEN, IPPROTO_FRAGMENT, IPV6_HLEN};
use crate::icmp::is_error;
use crate::maps::{
    count, flow_count, forward, ingress_limited, now, settings, Direction, FlowEvent, PM_TAILS,
};
use crate::shared::{DROP, ETH_HLEN, ETH_P_IP, ETH_P_IPV6, NEXT};

#[classifier]
pub fn pm_tc_in(ctx: TcContext) -> i32 {
    portmap(&ctx, true)
}

#[classifier]
pub fn pm_tc_out(ctx: TcContext) -> i32 {
    portmap(&ctx, false)
}

#[inline(always)]
fn portmap(ctx: &TcContext, ingress: bool) -> i32 {
    match try_portmap(ctx, ingress) {
        Ok(verdict) => verdict,
        // A helper failed halfway through a rewrite: the packet is inconsistent, drop it.
        Err(_) => DROP,
    }
}

/// The fields of a TCP/UDP/SCTP packet the rewrite needs. Addresses and ports are kept as
/// read (network byte order), which is also what the checksum helpers expect.
struct Packet {
    v6: bool,
    /// Offset of the L4 header.
    l4: usize,
    /// Length of the L4 segment (SCTP's CRC covers all of it).
    l4_len: u32,
    proto: u8,
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
    /// TCP flags (0 for other protocols).
    tcp_flags: u8,
    /// The IPv4 header checksum as read (0 for IPv6, which has none).
    ip_csum: u16,
    /// The first fragment of a fragmented datagram, and its identification.
    fragment: bool,
    frag_id: u32,
}

/// What a packet is to the port mapping.
enum Kind {
    /// TCP, UDP or SCTP: a candidate for translation.
    Transport(Packet),
    /// An ICMP or ICMPv6 error message: `pm_icmp`'s.
    IcmpError,
    /// A TCP or UDP fragment after the first: `pm_fragment`'s.
    LaterFragment,
    /// Anything else.
    Other,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Src,
    Dst,
}

#[inline(always)]
fn parse(ctx: &TcContext) -> Option<Kind> {
    let h = Headers::new(ctx);
    let ethertype = u16::from_be(h.read::<u16>(12)?);
    // (offset of the L4 header, its length, protocol, addresses, the fragment's identification
    // when this is the first fragment of several, whether a later fragment).
    let (v6, l4, l4_len, proto, src, dst, frag_id, later, ip_csum) = if ethertype == ETH_P_IP {
        let vihl: u8 = h.read(ETH_HLEN)?;
        let ihl = usize::from(vihl & 0x0f) * 4;
        if vihl >> 4 != 4 || ihl < 20 {
            return None;
        }
        let frag = u16::from_be(h.read::<u16>(ETH_HLEN + 6)?);
        let id = u32::from(h.read::<u16>(ETH_HLEN + 4)?);
        let total = u32::from(u16::from_be(h.read::<u16>(ETH_HLEN + 2)?));
        let proto: u8 = h.read(ETH_HLEN + 9)?;
        let ip_csum: u16 = h.read(ETH_HLEN + 10)?;
        let src: u32 = h.read(ETH_HLEN + 12)?;
        let dst: u32 = h.read(ETH_HLEN + 16)?;
        let (first, later) = (frag & 0x2000 != 0 && frag & 0x1fff == 0, frag & 0x1fff != 0);
        let frag_id = if first { Some(id) } else { None };
        let (src, dst) = (v4_mapped(src), v4_mapped(dst));
        let l4_len = total.saturating_sub(ihl as u32);
        (false, ETH_HLEN + ihl, l4_len, proto, src, dst, frag_id, later, ip_csum)
    } else if ethertype == ETH_P_IPV6 {
        // Extension headers other than a fragment header are not followed: the L4 header must
        // come first.
        let payload = u32::from(u16::from_be(h.read::<u16>(ETH_HLEN + 4)?));
        let next: u8 = h.read(ETH_HLEN + 6)?;
        let src: Addr = h.read(ETH_HLEN + 8)?;
        let dst: Addr = h.read(ETH_HLEN + 24)?;
        if next == IPPROTO_FRAGMENT {
            let fh = ETH_HLEN + IPV6_HLEN;
            let proto: u8 = h.read(fh)?;
            let off_flags = u16::from_be(h.read::<u16>(fh + 2)?);
            let id: u32 = h.read(fh + 4)?;
            let (offset, more) = (off_flags & 0xfff8, off_flags & 1 != 0);
            let frag_id = if offset == 0 && more { Some(id) } else { None };
            let l4 = fh + FRAG_HLEN;
            (true, l4, payload.saturating_sub(FRAG_HLEN as u32), proto, src, dst, frag_id, offset != 0, 0)
        } else {
            (true, ETH_HLEN + IPV6_HLEN, payload, next, src, dst, None, false, 0)
        }
    } else {
        return Some(Kind::Other);
    };
    if (proto == PROTO_ICMP && !v6) || (proto == PROTO_ICMPV6 && v6) {
        if later {
            return Some(Kind::Other);
        }
        let kind: u8 = h.read(l4)?;
        return Some(if is_error(v6, kind) { Kind::IcmpError } else { Kind::Other });
    }
    // SCTP fragments itself (chunks): IP fragments of it are left alone, as the CRC fixup needs
    // the whole packet.
    if proto != PROTO_TCP && proto != PROTO_UDP && (proto != PROTO_SCTP || frag_id.is_some() || later) {
        return Some(Kind::Other);
    }
    if later {
        return Some(Kind::LaterFragment);
    }
    let sport: u16 = h.read(l4)?;
    let dport: u16 = h.read(l4 + 2)?;
    let tcp_flags: u8 = if proto == PROTO_TCP { h.read(l4 + 13)? } else { 0 };
    let (fragment, frag_id) = (frag_id.is_some(), frag_id.unwrap_or(0));
    Some(Kind::Transport(Packet {
        v6,
        l4,
        l4_len,
        proto,
        src,
        dst,
        sport,
        dport,
        tcp_flags,
        ip_csum,
        fragment,
        frag_id,
    }))
}

/// What to do with a matched packet. Deciding and rewriting are separate so the rewriting
/// code exists once in the program: the verifier walks it once per path instead of once per
/// case. Every field is always initialised (no `Option` payloads): LLVM copies whole structs,
/// and stale stack bytes in an unused payload can look like a pointer to the verifier.
struct Action {
    /// Which counters of the mapping (`rw`'s).
    dir: Direction,
    rewrite_src: bool,
    src: Addr,
    sport: u16,
    rewrite_dst: bool,
    dst: Addr,
    dport: u16,
    /// The packet goes to the pod: destination MAC, delivery per `rw`.
    to_pod: bool,
    /// The pod is the source too: source MAC of the host interface.
    hairpin: bool,
    rw: &'static Rewrite,
}

#[inline(always)]
fn decide(p: &Packet) -> Option<Action> {
    let host = Endpoint::new(p.dst, p.dport, p.proto);
    if let Some(rw) = forward(&host) {
        let s = settings()?;
        let now = now(s);
        // The pod reaching its own hostPort (hairpin): from the host IP, or the pod's kernel
        // drops a packet from its own address as a martian.
        let hairpin = addr_eq(&p.src, &rw.addr);
        let peer = if hairpin { host.addr } else { p.src };
        let request = Request {
            key: FlowKey::new(rw.addr, rw.port_be, peer, p.sport, p.proto),
            host: &host,
            client: p.src,
            client_port: p.sport,
            snat: hairpin,
            rewrite: rw,
            tcp_flags: p.tcp_flags,
        };
        track_request(&request, s, now);
        flow_count(FlowEvent::Forward);
        return Some(Action {
            dir: Direction::In,
            rewrite_src: hairpin,
            src: host.addr,
            sport: p.sport,
            rewrite_dst: true,
            dst: rw.addr,
            dport: rw.port_be,
            to_pod: true,
            hairpin,
            rw,
        });
    }
    let key = FlowKey::new(p.src, p.sport, p.dst, p.dport, p.proto);
    let flow = track_reply(&key, p.tcp_flags)?;
    flow_count(FlowEvent::Reverse);
    // A hairpin flow's reply goes back to the pod, from hostIP:hostPort to its own address.
    let snat = flow.state & FLOW_SNAT != 0;
    Some(Action {
        dir: Direction::Out,
        rewrite_src: true,
        src: flow.host.addr,
        sport: flow.host.port_be,
        rewrite_dst: snat,
        dst: flow.client,
        dport: flow.client_port,
        to_pod: snat,
        hairpin: snat,
        rw: &flow.rewrite,
    })
}

#[inline(always)]
fn try_portmap(ctx: &TcContext, ingress: bool) -> Result<i32, i64> {
    let mut p = match parse(ctx) {
        Some(Kind::Transport(p)) => p,
        Some(Kind::IcmpError) => return Ok(tail_call(ctx, ingress, TAIL_ICMP)),
        Some(Kind::LaterFragment) => return Ok(tail_call(ctx, ingress, TAIL_FRAGMENT)),
        _ => return Ok(NEXT),
    };
    let Some(a) = decide(&p) else { return Ok(NEXT) };
    if p.fragment {
        remember_fragment(&p.src, &p.dst, p.frag_id, p.proto, &a);
    }
    let ports_before = (p.sport, p.dport);
    rewrite(ctx, &mut p, &a)?;
    if a.to_pod {
        set_macs(ctx, a.rw, a.hairpin)?;
    }
    count(a.rw, ctx.len(), a.dir);
    let verdict = if a.to_pod { deliver(ctx, a.rw, ingress) } else { NEXT };
    if p.proto == PROTO_SCTP && ports_before != (p.sport, p.dport) {
        return Ok(sctp_tail_call(ctx, &p, ports_before, verdict));
    }
    Ok(verdict)
}

/// Hands an SCTP packet whose ports changed to `pm_sctp`, with what it needs in the skb's
/// control buffer: the ports before, where the SCTP header is and how long the packet is, and
/// the verdict to return (a redirect is already recorded by `bpf_redirect` and survives the
/// tail call).
///
/// A separate program because the CRC update made the verifier's walk of this one explode
/// (every path of the rewrite times the update's steps); alone it is verified in a few
/// thousand steps.
#[inline(always)]
fn sctp_tail_call(ctx: &TcContext, p: &Packet, before: (u16, u16), verdict: i32) -> i32 {
    let (s, d) = (before.0.to_ne_bytes(), before.1.to_ne_bytes());
    // SAFETY: the context pointer is the program's __sk_buff; TC programs may write cb.
    unsafe {
        let skb = ctx.skb.skb;
        (*skb).cb[0] = u32::from_ne_bytes([s[0], s[1], d[0], d[1]]);
        (*skb).cb[1] = p.l4 as u32;
        (*skb).cb[2] = p.l4_len;
        (*skb).cb[3] = verdict as u32;
        PM_TAILS.tail_call(ctx, TAIL_SCTP);
    }
    // Only reached when the tail call failed (no fixup program loaded): a packet with a stale
    // CRC would be dropped by the receiver anyway.
    DROP
}

/// Hands an ICMP error or a later fragment to its program (`pm_icmp`, `pm_fragment`), with the
/// hook it arrived on in the control buffer.
#[inline(always)]
fn tail_call(ctx: &TcContext, ingress: bool, index: u32) -> i32 {
    // SAFETY: as in `sctp_tail_call`.
    unsafe {
        (*ctx.skb.skb).cb[0] = u32::from(ingress);
        PM_TAILS.tail_call(ctx, index);
    }
    // No program loaded there: the packet goes on as it is, as it did without plexus.
    NEXT
}

/// Records what the first fragment's translation did, for the rest of its datagram.
#[inline(always)]
fn remember_fragment(src: &Addr, dst: &Addr, id: u32, proto: u8, a: &Action) {
    let key = FragmentKey { src: *src, dst: *dst, id, proto, pad: [0; 3] };
    let mut flags = 0;
    if a.rewrite_src {
        flags |= FRAG_SRC;
    }
    if a.rewrite_dst {
        flags |= FRAG_DST;
    }
    if a.to_pod {
        flags |= FRAG_TO_POD;
    }
    if a.hairpin {
        flags |= FRAG_HAIRPIN;
    }
    if matches!(a.dir, Direction::Out) {
        flags |= FRAG_REPLY;
    }
    let new_src = if a.rewrite_src { &a.src } else { src };
    let new_dst = if a.rewrite_dst { &a.dst } else { dst };
    fragments::remember(&key, new_src, new_dst, a.rw, flags);
}

/// SCTP's CRC32c update for the port rewrite `pm_tc_in`/`pm_tc_out` made (the addresses are
/// not covered by it). Entered by tail call only.
#[classifier]
pub fn pm_sctp(ctx: TcContext) -> i32 {
    // SAFETY: the context pointer is the program's __sk_buff.
    let cb = unsafe { (*ctx.skb.skb).cb };
    let verdict = cb[3] as i32;
    match sctp_fixup(&ctx, cb[0].to_ne_bytes(), cb[1] as usize, cb[2]) {
        Ok(()) => verdict,
        Err(_) => DROP,
    }
}

#[inline(always)]
fn sctp_fixup(ctx: &TcContext, before: [u8; 4], l4: usize, len: u32) -> Result<(), i64> {
    // The header sits after Ethernet and at least an IPv4 header, within a 60-byte IPv4 header.
    if !(ETH_HLEN + 20..=ETH_HLEN + IPV6_HLEN + 20).contains(&l4) {
        return Err(-1);
    }
    let now: [u8; 4] = ctx.load(l4)?;
    let crc: u32 = ctx.load(l4 + 8)?;
    // Too long to update (beyond crc32c::MAX_LEN): dropped, as the receiver would drop it.
    let crc = crc32c::update_ports(crc, before, now, len).ok_or(-1i64)?;
    ctx.store(l4 + 8, &crc, 0)?;
    Ok(())
}

/// Sends a packet addressed to the pod where the pod receives it. On the receive path of the
/// device that reaches the pod (a macvlan master, whose rx_handler runs after TC and picks the
/// pod by destination MAC) the packet just goes on. To a pod's host-side veth, from a receive
/// path (the bridge's, a pod's veth's), it goes straight into the pod (`bpf_redirect_peer`: no
/// second trip through the veth's transmit path and backlog queue), unless the pod's ingress
/// is limited on that veth's transmit path (a `BW_LIMITS` entry, the shaping object's pinned
/// map): then it takes the transmit path, where the limit applies.
#[inline(always)]
pub fn deliver(ctx: &TcContext, rw: &Rewrite, ingress: bool) -> i32 {
    let to_ingress = rw.flags & DELIVER_INGRESS != 0;
    // SAFETY: the context pointer is the program's __sk_buff.
    let here = unsafe { (*ctx.skb.skb).ifindex };
    if ingress && to_ingress && here == rw.ifindex {
        return NEXT;
    }
    if ingress && !to_ingress && !ingress_limited(rw.ifindex) {
        // SAFETY: a helper call with plain values.
        return unsafe { bpf_redirect_peer(rw.ifindex, 0) as i32 };
    }
    let flags = if to_ingress { u64::from(BPF_F_INGRESS) } else { 0 };
    // SAFETY: a helper call with plain values.
    unsafe { bpf_redirect(rw.ifindex, flags) as i32 }
}

/// Ethernet destination and source, as they sit in the frame.
#[repr(C)]
struct Macs {
    dst: [u8; 6],
    src: [u8; 6],
}

/// The destination MAC of a packet for the pod: the pod's; for a hairpin packet the source
/// too: the host interface's. Written in place (see [`writable`]).
#[inline(always)]
fn set_macs(ctx: &TcContext, rw: &Rewrite, hairpin: bool) -> Result<(), i64> {
    let Some(at) = writable(ctx, 12) else {
        if hairpin {
            return ctx.store(0, &Macs { dst: rw.pod_mac, src: rw.host_mac }, 0);
        }
        return ctx.store(0, &rw.pod_mac, 0);
    };
    let (pod, host) = (&rw.pod_mac, &rw.host_mac);
    // SAFETY: 12 bytes from `at` are in bounds; the words are the MACs' bytes in order.
    unsafe {
        store32(at, u32::from_ne_bytes([pod[0], pod[1], pod[2], pod[3]]));
        store16(at + 4, u16::from_ne_bytes([pod[4], pod[5]]));
        if hairpin {
            store16(at + 6, u16::from_ne_bytes([host[0], host[1]]));
            store32(at + 8, u32::from_ne_bytes([host[2], host[3], host[4], host[5]]));
        }
    }
    Ok(())
}

/// IPv4 from the header checksum to the ports, when no options sit between (a store of it
/// replaces the checksum helper and one store per field). The header checksum sits 2 bytes
/// past a 4-byte boundary of the header: `lead` puts every field at its natural alignment
/// (the verifier refuses a misaligned stack access), and the store starts after it.
#[repr(C)]
struct V4Headers {
    lead: u16,
    csum: u16,
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
}

/// IPv4 from the header checksum to the destination address (options follow), laid out as
/// [`V4Headers`].
#[repr(C)]
struct V4Addrs {
    lead: u16,
    csum: u16,
    src: u32,
    dst: u32,
}

/// IPv6 from the source address to the ports, when no extension header sits between.
#[repr(C)]
struct V6Headers {
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
}

/// Stores `value` at `offset` of the packet, but for its first `skip` bytes (a `lead`).
#[inline(always)]
fn store_from<T>(ctx: &TcContext, offset: usize, value: &T, skip: usize) -> Result<(), i64> {
    let len = core::mem::size_of::<T>() - skip;
    // SAFETY: `skip..size_of::<T>()` is within `value`, which the helper only reads.
    let rc = unsafe {
        let from = (value as *const T as *const u8).add(skip);
        bpf_skb_store_bytes(ctx.skb.skb, offset as u32, from as *const _, len as u32, 0)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(rc)
    }
}

/// The ports of a TCP, UDP or SCTP header.
#[repr(C)]
struct Ports {
    sport: u16,
    dport: u16,
}

/// Rewrites the addresses and ports `a` changes, with every checksum, and updates `p`.
///
/// The changes are summed first ([`Delta`]), so the work is the same for one side or both
/// (hairpin): one checksum update for the addresses (they sit in the TCP/UDP pseudo-header:
/// `BPF_F_PSEUDO_HDR`, which also keeps a checksum the device will finish, `CHECKSUM_PARTIAL`,
/// right), one for the ports (not in the pseudo-header), both as precomputed differences
/// (field size 0); the IPv4 header checksum computed here and written with the addresses and
/// ports in one store where they are contiguous. SCTP's CRC is updated once, afterwards.
#[inline(always)]
fn rewrite(ctx: &TcContext, p: &mut Packet, a: &Action) -> Result<(), i64> {
    let (mut addrs, mut ports) = (Delta(0), Delta(0));
    if a.rewrite_src {
        addrs = addrs.ip(p.v6, &p.src, &a.src);
        ports = ports.word(p.sport, a.sport);
        p.src = a.src;
        p.sport = a.sport;
    }
    if a.rewrite_dst {
        addrs = addrs.ip(p.v6, &p.dst, &a.dst);
        ports = ports.word(p.dport, a.dport);
        p.dst = a.dst;
        p.dport = a.dport;
    }
    // TCP and UDP checksums cover the pseudo-header (the addresses) and the ports. A UDP
    // checksum of 0 means "none" over IPv4 and must stay 0 (BPF_F_MARK_MANGLED_0).
    let l4_csum = match p.proto {
        PROTO_TCP => Some((p.l4 + 16, 0)),
        PROTO_UDP => Some((p.l4 + 6, u64::from(BPF_F_MARK_MANGLED_0))),
        _ => None,
    };
    if let Some((off, mangled)) = l4_csum {
        // A sum of 0 or 0xffff (one's complement zero) changes nothing: no call.
        if !addrs.is_nil() {
            ctx.l4_csum_replace(off, 0, u64::from(addrs.0), u64::from(BPF_F_PSEUDO_HDR) | mangled)?;
        }
        if !ports.is_nil() {
            ctx.l4_csum_replace(off, 0, u64::from(ports.0), mangled)?;
        }
    }
    if !p.v6 {
        p.ip_csum = addrs.apply(p.ip_csum);
    }
    if store_in_place(ctx, p, a) {
        return Ok(());
    }
    let ports = Ports { sport: p.sport, dport: p.dport };
    if p.v6 {
        if p.l4 == ETH_HLEN + IPV6_HLEN {
            let h = V6Headers { src: p.src, dst: p.dst, sport: p.sport, dport: p.dport };
            return ctx.store(ETH_HLEN + 8, &h, 0);
        }
        ctx.store(ETH_HLEN + 8, &p.src, 0)?;
        ctx.store(ETH_HLEN + 24, &p.dst, 0)?;
        return ctx.store(p.l4, &ports, 0);
    }
    if p.l4 == ETH_HLEN + 20 {
        let h = V4Headers {
            lead: 0,
            csum: p.ip_csum,
            src: p.src[3],
            dst: p.dst[3],
            sport: p.sport,
            dport: p.dport,
        };
        return store_from(ctx, ETH_HLEN + 10, &h, 2);
    }
    store_from(ctx, ETH_HLEN + 10, &V4Addrs { lead: 0, csum: p.ip_csum, src: p.src[3], dst: p.dst[3] }, 2)?;
    ctx.store(p.l4, &ports, 0)
}

/// Writes what `rewrite` changed in the IP and L4 headers in place, when they are contiguous
/// (no IPv4 options, no IPv6 extension header) and in the linear data; false otherwise (the
/// caller stores them with `bpf_skb_store_bytes`). The checksum helpers ran before: the
/// packet's pointers are taken afresh.
#[inline(always)]
fn store_in_place(ctx: &TcContext, p: &Packet, a: &Action) -> bool {
    if p.v6 {
        if p.l4 != ETH_HLEN + IPV6_HLEN {
            return false;
        }
        let Some(at) = writable(ctx, ETH_HLEN + IPV6_HLEN + 4) else { return false };
        // SAFETY: every word written lies within the bounds `writable` checked.
        unsafe {
            if a.rewrite_src {
                store_addr(at + ETH_HLEN + 8, &p.src);
                store16(at + ETH_HLEN + IPV6_HLEN, p.sport);
            }
            if a.rewrite_dst {
                store_addr(at + ETH_HLEN + 24, &p.dst);
                store16(at + ETH_HLEN + IPV6_HLEN + 2, p.dport);
            }
        }
        return true;
    }
    if p.l4 != ETH_HLEN + 20 {
        return false;
    }
    let Some(at) = writable(ctx, ETH_HLEN + 24) else { return false };
    // SAFETY: as above.
    unsafe {
        store16(at + ETH_HLEN + 10, p.ip_csum);
        if a.rewrite_src {
            store32(at + ETH_HLEN + 12, p.src[3]);
            store16(at + ETH_HLEN + 20, p.sport);
        }
        if a.rewrite_dst {
            store32(at + ETH_HLEN + 16, p.dst[3]);
            store16(at + ETH_HLEN + 22, p.dport);
        }
    }
    true
}

/// # Safety
/// `at..at + 16` is in bounds ([`writable`]).
#[inline(always)]
unsafe fn store_addr(at: usize, addr: &Addr) {
    store32(at, addr[0]);
    store32(at + 4, addr[1]);
    store32(at + 8, addr[2]);
    store32(at + 12, addr[3]);
}

/// Writes an address of the IP header: with the IPv4 header checksum, or as it is (IPv6 has
/// no header checksum). Checksums that cover it elsewhere (a pseudo-header) are the caller's.
#[inline(always)]
pub fn set_ip_addr(ctx: &TcContext, v6: bool, side: Side, old: &Addr, new: &Addr) -> Result<(), i64> {
    if v6 {
        let off = ETH_HLEN + if side == Side::Src { 8 } else { 24 };
        ctx.store(off, new, 0)
    } else {
        ctx.l3_csum_replace(ETH_HLEN + 10, u64::from(old[3]), u64::from(new[3]), 4)?;
        let off = ETH_HLEN + if side == Side::Src { 12 } else { 16 };
        ctx.store(off, &new[3], 0)
    }
}

/// The hook a tail-called program (`pm_icmp`, `pm_fragment`) was entered from, as
/// [`tail_call`] left it in the control buffer: true for the receive path.
#[inline(always)]
pub fn tail_called_ingress(ctx: &TcContext) -> bool {
    // SAFETY: the context pointer is the program's __sk_buff.
    unsafe { (*ctx.skb.skb).cb[0] != 0 }
}

/// Updates the checksum at `csum_off`, whose pseudo-header holds an address changing from `old`
/// to `new` (`flags`: `BPF_F_PSEUDO_HDR`, the field size, and any others): one word for IPv4
/// (IPv4-mapped, the last), four for IPv6. Unchanged words add nothing: none is skipped.
#[inline(always)]
pub fn pseudo_header_addr(
    ctx: &TcContext,
    csum_off: usize,
    v6: bool,
    old: &Addr,
    new: &Addr,
    flags: u64,
) -> Result<(), i64> {
    if v6 {
        ctx.l4_csum_replace(csum_off, u64::from(old[0]), u64::from(new[0]), flags)?;
        ctx.l4_csum_replace(csum_off, u64::from(old[1]), u64::from(new[1]), flags)?;
        ctx.l4_csum_replace(csum_off, u64::from(old[2]), u64::from(new[2]), flags)?;
    }
    ctx.l4_csum_replace(csum_off, u64::from(old[3]), u64::from(new[3]), flags)
}
