//! Port mappings on the node's interfaces, as TC programs: the translation `pm_tc_in`,
//! `pm_tc_out` and `pm_sctp` (entry points in the object's binary) run.
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
//! Checksums are updated incrementally (see [`super::rewrite`]); SCTP's CRC32c by its linearity
//! (plexus_ebpf_common::crc32c), in a program of its own (`pm_sctp`, tail-called) to keep each
//! program's verification small.
//!
//! Writing in place makes the verifier add a prologue to the programs: a cloned skb whose
//! linear data is not all its own (`skb_clone_writable`) is uncloned before the program runs,
//! translated or not. The segments of a local TCP socket are clones of its retransmit queue,
//! but their linear data is their headers, which the clone owns, so they are not copied; in

use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::flow::{
    FlowKey, FragmentKey, FLOW_SNAT, FRAG_DST, FRAG_HAIRPIN, FRAG_REPLY, FRAG_SRC, FRAG_TO_POD,
};
use plexus_ebpf_common::{addr_eq, crc32c, Addr, Endpoint, PROTO_SCTP, TAIL_FRAGMENT, TAIL_ICMP};

use crate::consts::{DROP, ETH_HLEN, NEXT};
use crate::packet::{parse, Kind, Packet, IPV6_HLEN};
use crate::portmap::flows::{track_reply, track_request, Request};
use crate::portmap::fragments;
use crate::portmap::maps::{count, flow_count, forward, now, settings, Direction, FlowEvent, Maps};
use crate::portmap::rewrite::{deliver, rewrite, set_macs, Action};
use crate::portmap::tail::{sctp_tail_call, tail_call};

/// `pm_tc_in` (`ingress`) and `pm_tc_out`.
#[inline(always)]
pub fn portmap<M: Maps>(ctx: &TcContext, ingress: bool) -> i32 {
    match try_portmap::<M>(ctx, ingress) {
        Ok(verdict) => verdict,
        // A helper failed halfway through a rewrite: the packet is inconsistent, drop it.
        Err(e) => {
            crate::rare!("a helper failed (error {}) halfway through a translation: packet dropped", e);
            DROP
        }
    }
}

#[inline(always)]
fn decide<M: Maps>(p: &Packet) -> Option<Action> {
    let host = Endpoint::new(p.dst, p.dport, p.proto);
    if let Some(rw) = forward::<M>(&host) {
        let s = settings::<M>()?;
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
        track_request::<M>(&request, s, now);
        flow_count::<M>(FlowEvent::Forward);
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
    let flow = track_reply::<M>(&key, p.tcp_flags)?;
    flow_count::<M>(FlowEvent::Reverse);
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
fn try_portmap<M: Maps>(ctx: &TcContext, ingress: bool) -> Result<i32, i64> {
    let mut p = match parse(ctx) {
        Some(Kind::Transport(p)) => p,
        Some(Kind::IcmpError) => return Ok(tail_call::<M>(ctx, ingress, TAIL_ICMP)),
        Some(Kind::LaterFragment) => return Ok(tail_call::<M>(ctx, ingress, TAIL_FRAGMENT)),
        _ => return Ok(NEXT),
    };
    let Some(a) = decide::<M>(&p) else { return Ok(NEXT) };
    if p.fragment {
        remember_fragment::<M>(&p.src, &p.dst, p.frag_id, p.proto, &a);
    }
    let ports_before = (p.sport, p.dport);
    rewrite(ctx, &mut p, &a)?;
    if a.to_pod {
        set_macs(ctx, a.rw, a.hairpin)?;
    }
    count::<M>(a.rw, ctx.len(), a.dir);
    let verdict = if a.to_pod { deliver::<M>(ctx, a.rw, ingress) } else { NEXT };
    if p.proto == PROTO_SCTP && ports_before != (p.sport, p.dport) {
        return Ok(sctp_tail_call::<M>(ctx, &p, ports_before, verdict));
    }
    Ok(verdict)
}

/// Records what the first fragment's translation did, for the rest of its datagram.
#[inline(always)]
fn remember_fragment<M: Maps>(src: &Addr, dst: &Addr, id: u32, proto: u8, a: &Action) {
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
    fragments::remember::<M>(&key, new_src, new_dst, a.rw, flags);
}

/// SCTP's CRC32c update for the port rewrite `pm_tc_in`/`pm_tc_out` made (the addresses are
/// not covered by it). Entered by tail call only.
#[inline(always)]
pub fn sctp(ctx: &TcContext) -> i32 {
    // SAFETY: the context pointer is the program's __sk_buff.
    let cb = unsafe { (*ctx.skb.skb).cb };
    let verdict = cb[3] as i32;
    match sctp_fixup(ctx, cb[0].to_ne_bytes(), cb[1] as usize, cb[2]) {
        Ok(()) => verdict,
        Err(e) => {
            crate::rare!("an SCTP packet of {} bytes could not be fixed up (error {}): dropped", cb[2], e);
            DROP
        }
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
