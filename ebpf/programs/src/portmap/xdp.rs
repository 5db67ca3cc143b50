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
//! refreshed in the same flow table ([`crate::flows`]), so the pod's replies are translated back
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

use aya_ebpf::helpers::bpf_redirect;
use aya_ebpf::macros::xdp;
use aya_ebpf::programs::XdpContext;
use plexus_ebpf_common::csum::Delta;
use plexus_ebpf_common::flow::FlowKey;
use plexus_ebpf_common::{
    addr_eq, v4_mapped, Addr, Endpoint, DELIVER_BRIDGE, DELIVER_INGRESS, DELIVER_XDP_REDIRECT, PROTO_TCP,
    PROTO_UDP,
};

use crate::flows::{track_request, Request};
use crate::frame::{at, read, write};
use crate::maps::{
    count, flow_count, forward, ingress_limited, now, settings, Direction, FlowEvent, BW_CLOCK, BW_LIMITS,
    BW_STATS,
};
use crate::police::police;
use crate::shared::{ETH_HLEN, ETH_P_IP, ETH_P_IPV6};

/// Offsets of the L4 header: after an IPv4 header without options, or an IPv6 header.
const L4_V4: usize = ETH_HLEN + 20;
const L4_V6: usize = ETH_HLEN + 40;
/// TCP up to its checksum (the flags sit before it).
const TCP_LEN: usize = 18;
const UDP_LEN: usize = 8;

#[xdp]
pub fn pm_xdp(ctx: XdpContext) -> u32 {
    if let Some(redirected) = portmap(&ctx) {
        return redirected;
    }
    police(&ctx, &BW_LIMITS, &BW_STATS, &BW_CLOCK)
}

/// What the program reads of a candidate packet.
struct Packet {
    v6: bool,
    l4: usize,
    proto: u8,
    src: Addr,
    dst: Addr,
    sport: u16,
    dport: u16,
    tcp_flags: u8,
}

/// The packet, when it is one XDP translates (see the module's notes).
#[inline(always)]
fn parse(ctx: &XdpContext) -> Option<Packet> {
    let ethertype = u16::from_be(read::<u16>(ctx, 12)?);
    let (v6, l4, proto, src, dst) = if ethertype == ETH_P_IP {
        // Version 4, a 20-byte header: options go to TC.
        if read::<u8>(ctx, ETH_HLEN)? != 0x45 {
            return None;
        }
        // More fragments, or a fragment offset: TC's (it remembers first fragments).
        if u16::from_be(read::<u16>(ctx, ETH_HLEN + 6)?) & 0x3fff != 0 {
            return None;
        }
        let proto: u8 = read(ctx, ETH_HLEN + 9)?;
        let src: u32 = read(ctx, ETH_HLEN + 12)?;
        let dst: u32 = read(ctx, ETH_HLEN + 16)?;
        (false, L4_V4, proto, v4_mapped(src), v4_mapped(dst))
    } else if ethertype == ETH_P_IPV6 {
        // The next header must be TCP or UDP itself: extension headers (fragments among them)
        // go to TC.
        let proto: u8 = read(ctx, ETH_HLEN + 6)?;
        let src: Addr = read(ctx, ETH_HLEN + 8)?;
        let dst: Addr = read(ctx, ETH_HLEN + 24)?;
        (true, L4_V6, proto, src, dst)
    } else {
        return None;
    };
    let need = match proto {
        PROTO_TCP => TCP_LEN,
        PROTO_UDP => UDP_LEN,
        _ => return None,
    };
    // The whole header the rewrite touches must be there.
    at::<u8>(ctx, l4 + need - 1)?;
    let sport: u16 = read(ctx, l4)?;
    let dport: u16 = read(ctx, l4 + 2)?;
    let tcp_flags: u8 = if proto == PROTO_TCP { read(ctx, l4 + 13)? } else { 0 };
    Some(Packet { v6, l4, proto, src, dst, sport, dport, tcp_flags })
}

/// Translates the packet when it is a mapped one XDP can deliver; leaves it untouched
/// otherwise. The verdict when it redirected the packet into a pod's veth (the pod's own
/// ingress limit is on that veth, not here).
#[inline(always)]
fn portmap(ctx: &XdpContext) -> Option<u32> {
    let p = parse(ctx)?;
    let host = Endpoint::new(p.dst, p.dport, p.proto);
    let rw = forward(&host)?;
    // Up this interface to a macvlan pod, or through the bridge the frame is addressed to; any
    // other delivery (up another interface, a pod's veth from elsewhere) is TC's.
    let up_here = rw.flags & DELIVER_INGRESS != 0 && rw.ifindex as usize == ctx.ingress_ifindex();
    let through_bridge =
        rw.flags & DELIVER_BRIDGE != 0 && read::<[u8; 6]>(ctx, 0).is_some_and(|m| same_mac(&m, &rw.host_mac));
    if !up_here && !through_bridge {
        return None;
    }
    // The pod reaching its own host port (the source needs rewriting too): TC's.
    if addr_eq(&p.src, &rw.addr) {
        return None;
    }
    let s = settings()?;
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
    track_request(&request, s, now);
    flow_count(FlowEvent::Forward);

    // The destination: address (with the IPv4 header checksum), port, and the L4 checksum over
    // both (the address through the pseudo-header).
    let l4_delta = Delta::default().addr(&p.dst, &rw.addr).word(p.dport, rw.port_be);
    if p.v6 {
        write(ctx, ETH_HLEN + 24, rw.addr);
    } else {
        let ip_delta = Delta::default().dword(p.dst[3], rw.addr[3]);
        if let Some(csum) = read::<u16>(ctx, ETH_HLEN + 10) {
            write(ctx, ETH_HLEN + 10, ip_delta.apply(csum));
        }
        write(ctx, ETH_HLEN + 16, rw.addr[3]);
    }
    write(ctx, p.l4 + 2, rw.port_be);
    if p.proto == PROTO_TCP {
        if let Some(csum) = read::<u16>(ctx, p.l4 + 16) {
            write(ctx, p.l4 + 16, l4_delta.apply(csum));
        }
    } else if let Some(csum) = read::<u16>(ctx, p.l4 + 6) {
        // IPv4's "no checksum" (0) stays 0.
        write(ctx, p.l4 + 6, l4_delta.apply_udp(csum));
    }
    write(ctx, 0, rw.pod_mac);
    count(rw, (ctx.data_end() - ctx.data()) as u32, Direction::In);
    if through_bridge && rw.flags & DELIVER_XDP_REDIRECT != 0 && !ingress_limited(rw.ifindex) {
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
