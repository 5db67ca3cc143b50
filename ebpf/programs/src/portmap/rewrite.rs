//! The port mapping's rewriting helpers on TC packets: addresses and ports with their
//! checksums (summed first, [`Delta`]; the pseudo-header's by `bpf_l4_csum_replace`), the MACs,
//! and the delivery of a packet for a pod. Used by the translation ([`super::nat`]), the ICMP
//! errors ([`super::icmp`]) and the fragments ([`super::fragments`]); it imports none of them.
//!
//! Checksums are updated incrementally, the changes summed first (see [`rewrite`]): one
//! `bpf_l4_csum_replace` with `BPF_F_PSEUDO_HDR` for the addresses (in the TCP/UDP
//! pseudo-header), one without it for the ports, the IPv4 header checksum computed here and
//! stored with the addresses and ports. Every helper call costs on every translated packet, so a
//! translation whose headers are contiguous (no IPv4 options, no IPv6 extension header) makes
//! two: the checksum updates. The headers and MACs are then written in place (direct packet
//! access, see [`store_in_place`]); other layouts store them with `bpf_skb_store_bytes`.

use aya_ebpf::bindings::{BPF_F_INGRESS, BPF_F_MARK_MANGLED_0, BPF_F_PSEUDO_HDR};
use aya_ebpf::helpers::{bpf_redirect, bpf_redirect_peer, bpf_skb_store_bytes};
use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::csum::Delta;
use plexus_ebpf_common::{Addr, Rewrite, DELIVER_INGRESS, PROTO_TCP, PROTO_UDP};

use crate::consts::{ETH_HLEN, NEXT};
use crate::packet::{store16, store32, writable, Packet, IPV6_HLEN};
use crate::portmap::maps::{ingress_limited, Direction, Maps};

/// Which address of a header a rewrite changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Src,
    Dst,
}

/// What to do with a matched packet. Deciding and rewriting are separate so the rewriting
/// code exists once in the program: the verifier walks it once per path instead of once per
/// case. Every field is always initialised (no `Option` payloads): LLVM copies whole structs,
/// and stale stack bytes in an unused payload can look like a pointer to the verifier.
pub struct Action {
    /// Which counters of the mapping (`rw`'s).
    pub dir: Direction,
    pub rewrite_src: bool,
    pub src: Addr,
    pub sport: u16,
    pub rewrite_dst: bool,
    pub dst: Addr,
    pub dport: u16,
    /// The packet goes to the pod: destination MAC, delivery per `rw`.
    pub to_pod: bool,
    /// The pod is the source too: source MAC of the host interface.
    pub hairpin: bool,
    pub rw: &'static Rewrite,
}

/// Sends a packet addressed to the pod where the pod receives it. On the receive path of the
/// device that reaches the pod (a macvlan master, whose rx_handler runs after TC and picks the
/// pod by destination MAC) the packet just goes on. To a pod's host-side veth, from a receive
/// path (the bridge's, a pod's veth's), it goes straight into the pod (`bpf_redirect_peer`: no
/// second trip through the veth's transmit path and backlog queue), unless the pod's ingress
/// is limited on that veth's transmit path (a `BW_LIMITS` entry, the shaping object's pinned
/// map): then it takes the transmit path, where the limit applies.
#[inline(always)]
pub fn deliver<M: Maps>(ctx: &TcContext, rw: &Rewrite, ingress: bool) -> i32 {
    let to_ingress = rw.flags & DELIVER_INGRESS != 0;
    // SAFETY: the context pointer is the program's __sk_buff.
    let here = unsafe { (*ctx.skb.skb).ifindex };
    if ingress && to_ingress && here == rw.ifindex {
        return NEXT;
    }
    if ingress && !to_ingress && !ingress_limited::<M>(rw.ifindex) {
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
pub fn set_macs(ctx: &TcContext, rw: &Rewrite, hairpin: bool) -> Result<(), i64> {
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
pub fn rewrite(ctx: &TcContext, p: &mut Packet, a: &Action) -> Result<(), i64> {
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
