//! Port mappings in XDP, on the interfaces where clients' traffic enters the node (a macvlan
//! master, a bridge's uplink ports): one program per interface, for every network and pod
//! behind it.
//!
//! It takes the easy majority only, before the kernel builds a socket buffer: an unfragmented
//! TCP or UDP packet over IPv4 without options or over IPv6 without extension headers, to a
//! mapped host endpoint whose pod the frame reaches from here once its destination MAC is the
//! pod's:
//! - a macvlan pod: the mapping delivers up this very interface's receive path
//!   (`DELIVER_INGRESS` on the ingress interface), where macvlan's rx_handler hands the frame
//!   to the pod by its destination MAC;
//! - a bridge pod: the mapping's host IP is the bridge's and the pod is behind it
//!   (`DELIVER_BRIDGE`), and the frame is addressed to the bridge's MAC (`host_mac`), so it
//!   arrived on one of the bridge's ports (an uplink). Where the pod's veth takes XDP frames
//!   (`DELIVER_XDP_REDIRECT`) and the pod's ingress is not limited, the frame is redirected
//!   straight into the pod's host-side veth, whose peer receives it on its NAPI context: no
//!   socket buffer on the node, no bridge. Otherwise the bridge forwards it to the pod's port
//!   by the pod's MAC, and the veth's transmit path (where the pod's ingress limit is) runs.
//! It is translated exactly as `pm_tc_in` would translate it (destination address, port and
//! MAC, the IPv4 header checksum and the TCP/UDP checksum), with the same flow made or
//! refreshed in the same flow table ([`super::flows`]), so the pod's replies are translated back
//! by the TC programs (the master's transmit path, the pod's veth), and the same counters.
//! Everything else (replies, hairpin, fragments, IP options, extension headers, SCTP, ICMP,
//! VLAN tags, other protocols) passes unchanged to the TC programs, which handle all of it as
//! they do without XDP.
//!
//! Checksums are updated incrementally ([`plexus_ebpf_common::csum`]), which assumes complete
//! checksums: what a frame from the wire carries.
//!
//! Then the ingress limit of the pod the frame is for ([`crate::police`], the shaping object's
//! `bw_xdp` runs the same on masters without port mappings).
//!
//! The packet is read by the TC programs' own parser ([`crate::packet`]), over the XDP frame.

use aya_ebpf::helpers::bpf_redirect;
use aya_ebpf::programs::XdpContext;
use plexus_ebpf_common::csum::Delta;
use plexus_ebpf_common::flow::FlowKey;
use plexus_ebpf_common::{
    addr_eq, Endpoint, DELIVER_BRIDGE, DELIVER_INGRESS, DELIVER_XDP_REDIRECT, PROTO_TCP, PROTO_UDP,
};

use crate::consts::ETH_HLEN;
use crate::ctx::Buff;
use crate::packet::{parse, Headers, Kind, Packet};
use crate::police::police;
use crate::portmap::flows::{track_request, Request};
use crate::portmap::maps::{
    count, flow_count, forward, ingress_limited, now, settings, Direction, FlowEvent, Maps,
};

/// TCP up to its checksum (the flags sit before it).
const TCP_LEN: usize = 18;
const UDP_LEN: usize = 8;

/// `pm_xdp`: the translation, then the ingress limit of the pod the frame is for.
#[inline(always)]
pub fn xdp<M: Maps>(ctx: &XdpContext) -> u32 {
    if let Some(redirected) = portmap::<M>(ctx) {
        return redirected;
    }
    police(ctx, M::bw_limits(), M::bw_stats(), M::bw_clock())
}

/// The packet, when it is one XDP translates (see the module's notes): the TC programs' parse
/// ([`crate::packet::parse`]), narrowed to an unfragmented TCP or UDP packet with contiguous
/// headers, all of the L4 header the rewrite touches in the frame.
#[inline(always)]
fn candidate(ctx: &XdpContext) -> Option<Packet> {
    let Some(Kind::Transport(p)) = parse(ctx) else { return None };
    // IP options and extension headers (a fragment header among them), first fragments (TC
    // remembers them for the rest of their datagram), SCTP: TC's.
    if !p.contiguous() || p.fragment {
        return None;
    }
    let need = match p.proto {
        PROTO_TCP => TCP_LEN,
        PROTO_UDP => UDP_LEN,
        _ => return None,
    };
    if !Headers::linear(ctx).holds(p.l4 + need) {
        return None;
    }
    Some(p)
}

/// Translates the packet when it is a mapped one XDP can deliver; leaves it untouched
/// otherwise. The verdict when it redirected the packet into a pod's veth (the pod's own
/// ingress limit is on that veth, not here).
#[inline(always)]
fn portmap<M: Maps>(ctx: &XdpContext) -> Option<u32> {
    let p = candidate(ctx)?;
    // The L4 header's offset as a constant: the parse left it in a register.
    let l4 = ETH_HLEN + if p.v6 { 40 } else { 20 };
    let host = Endpoint::new(p.dst, p.dport, p.proto);
    let rw = forward::<M>(&host)?;
    // Up this interface to a macvlan pod, or through the bridge the frame is addressed to; any
    // other delivery (up another interface, a pod's veth from elsewhere) is TC's.
    let up_here = rw.flags & DELIVER_INGRESS != 0 && rw.ifindex as usize == ctx.ingress_ifindex();
    let through_bridge = rw.flags & DELIVER_BRIDGE != 0
        && Headers::linear(ctx).read::<[u8; 6]>(0).is_some_and(|m| same_mac(&m, &rw.host_mac));
    if !up_here && !through_bridge {
        return None;
    }
    // The pod reaching its own host port (the source needs rewriting too): TC's.
    if addr_eq(&p.src, &rw.addr) {
        return None;
    }
    let s = settings::<M>()?;
    let now = now(s);
    let request = Request {
        key: FlowKey::new(rw.addr, rw.port_be, p.src, p.sport, p.proto),
        host: &host,
        client: p.src,
        client_port: p.sport,
        snat: false,
        rewrite: rw,
        tcp_flags: p.tcp_flags,
    };
    track_request::<M>(&request, s, now);
    flow_count::<M>(FlowEvent::Forward);

    // The destination: address (with the IPv4 header checksum), port, and the L4 checksum over
    // both (the address through the pseudo-header).
    let l4_delta = Delta::default().addr(&p.dst, &rw.addr).word(p.dport, rw.port_be);
    // No helper that may move the frame ran since the parse: one view of it for the writes.
    let h = Headers::linear(ctx);
    if p.v6 {
        h.write(ETH_HLEN + 24, rw.addr);
    } else {
        let ip_delta = Delta::default().dword(p.dst[3], rw.addr[3]);
        h.write(ETH_HLEN + 10, ip_delta.apply(p.ip_csum));
        h.write(ETH_HLEN + 16, rw.addr[3]);
    }
    h.write(l4 + 2, rw.port_be);
    if p.proto == PROTO_TCP {
        if let Some(csum) = h.read::<u16>(l4 + 16) {
            h.write(l4 + 16, l4_delta.apply(csum));
        }
    } else if let Some(csum) = h.read::<u16>(l4 + 6) {
        // IPv4's "no checksum" (0) stays 0.
        h.write(l4 + 6, l4_delta.apply_udp(csum));
    }
    h.write(0, rw.pod_mac);
    count::<M>(rw, ctx.len(), Direction::In);
    if through_bridge && rw.flags & DELIVER_XDP_REDIRECT != 0 && !ingress_limited::<M>(rw.ifindex) {
        // SAFETY: a helper call with plain values.
        return Some(unsafe { bpf_redirect(rw.ifindex, 0) } as u32);
    }
    None
}

/// Compares MACs byte by byte (array equality may compile to `memcmp`, which BPF lacks).
#[inline(always)]
fn same_mac(a: &[u8; 6], b: &[u8; 6]) -> bool {
    a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4] && a[5] == b[5]
}
