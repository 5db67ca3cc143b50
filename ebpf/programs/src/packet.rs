//! The packet reader and header parser every program uses, TC's and XDP's alike, written once
//! against the context trait ([`Buff`]): a packet's headers read in place (direct packet
//! access), a bounds check against the linear data per read, where `bpf_skb_load_bytes` costs a
//! helper call per field. Every packet crossing a hooked interface is parsed, translated or
//! not, so this is the programs' hottest code.
//!
//! An skb's headers that are not in the linear data (a driver that left them in fragments) are
//! pulled in first, once, up to what a parse of this packet reads. Only then:
//! `bpf_skb_pull_data` also makes the skb writable, which copies the head of a cloned one
//! (TCP's segments are clones of its retransmit queue), and the linear data of a TCP segment
//! from a local socket ends with the TCP header, well short of the longest header a parse may
//! read. An XDP frame is linear: nothing to pull. A field beyond the packet reads as absent, as
//! a failed `bpf_skb_load_bytes` did.
//!
//! Pointers into the packet die with the next helper that may move it (a store, a checksum
//! update, a pull): a [`Headers`] is for parsing, before any rewrite (an XDP program, which
//! calls no such helper, may write through one too: [`Headers::write`]).

use plexus_ebpf_common::{
    icmp_is_error, v4_mapped, Addr, PROTO_ICMP, PROTO_ICMPV6, PROTO_SCTP, PROTO_TCP, PROTO_UDP,
};

use crate::consts::{ETH_HLEN, ETH_P_IP, ETH_P_IPV6};
use crate::ctx::Buff;

/// What a parse reads of the L4 header: TCP up to its flags (byte 13), and the byte after them
/// (see [`Headers::read`]).
const L4_PARSED: usize = 16;
/// The most a parse reads: Ethernet, the longest IPv4 header (60 bytes) and [`L4_PARSED`]
/// (IPv6 with a fragment header reads less).
const PARSED_LEN: usize = ETH_HLEN + 60 + L4_PARSED;
/// IPv6's fixed header, and the fragment header's next-header number and length.
pub const IPV6_HLEN: usize = 40;
pub const IPPROTO_FRAGMENT: u8 = 44;
pub const FRAG_HLEN: usize = 8;

pub struct Headers {
    start: usize,
    end: usize,
}

impl Headers {
    /// The packet's headers, pulled into an skb's linear data first if they are not there.
    #[inline(always)]
    pub fn new<C: Buff>(ctx: &C) -> Headers {
        let linear = Headers::linear(ctx);
        if C::LINEAR {
            return linear;
        }
        let (len, need) = (ctx.len() as usize, linear.parsed_len());
        let want = if len < need { len } else { need };
        if linear.start + want <= linear.end {
            return linear;
        }
        // Best effort: when it fails, the reads beyond the linear data fail too.
        ctx.pull(want as u32);
        Headers::linear(ctx)
    }

    /// The packet's direct-access bytes as they are, pulling nothing.
    #[inline(always)]
    pub fn linear<C: Buff>(ctx: &C) -> Headers {
        Headers { start: ctx.data(), end: ctx.data_end() }
    }

    /// Whether the packet holds `len` bytes from the start of the frame.
    #[inline(always)]
    pub fn holds(&self, len: usize) -> bool {
        self.start + len <= self.end
    }

    /// How much of the packet a parse reads, as far as the linear data tells: Ethernet, the IP
    /// header (IPv4's options, IPv6's fragment header) and [`L4_PARSED`]; [`PARSED_LEN`] when
    /// the linear data does not even hold what says so.
    #[inline(always)]
    fn parsed_len(&self) -> usize {
        let Some(ethertype) = self.read::<u16>(12) else { return PARSED_LEN };
        match u16::from_be(ethertype) {
            ETH_P_IP => match self.read::<u8>(ETH_HLEN) {
                Some(vihl) => ETH_HLEN + usize::from(vihl & 0x0f) * 4 + L4_PARSED,
                None => PARSED_LEN,
            },
            ETH_P_IPV6 => match self.read::<u8>(ETH_HLEN + 6) {
                Some(IPPROTO_FRAGMENT) => ETH_HLEN + IPV6_HLEN + FRAG_HLEN + L4_PARSED,
                Some(_) => ETH_HLEN + IPV6_HLEN + L4_PARSED,
                None => PARSED_LEN,
            },
            // Nothing but the EtherType is read.
            _ => ETH_HLEN,
        }
    }

    /// The `T` at `offset` from the start of the frame, if the packet holds it.
    ///
    /// The check is for at least two bytes: LLVM turns `at + 1 > end` into `at >= end`, a
    /// comparison the verifier does not take as a bound when `at` has a variable offset (the
    /// L4 header's). Every one-byte field read here is followed by more of its header, so a
    /// packet that holds the field and not the next byte is malformed anyway.
    #[inline(always)]
    pub fn read<T: Copy>(&self, offset: usize) -> Option<T> {
        let at = self.start + offset;
        let size = core::mem::size_of::<T>();
        if at + if size < 2 { 2 } else { size } > self.end {
            return None;
        }
        // SAFETY: `at..at + size_of::<T>()` is within the packet's linear data, checked above
        // (the verifier checks it again), and `T` is plain data of that size.
        Some(unsafe { load(at) })
    }

    /// Writes `value` at `offset` from the start of the frame (nothing beyond the packet, which
    /// a parse excluded already), one store per 16- or 32-bit word as [`load`] reads them.
    /// Only where no helper that may move the packet ran since the [`Headers`] was made.
    #[inline(always)]
    pub fn write<T: Copy>(&self, offset: usize, value: T) {
        let at = self.start + offset;
        let size = core::mem::size_of::<T>();
        if at + size > self.end {
            return;
        }
        // SAFETY: `at..at + size_of::<T>()` is within the packet's linear data, checked above.
        unsafe {
            if size == 2 {
                store16(at, core::mem::transmute_copy(&value));
            } else if size == 4 {
                store32(at, core::mem::transmute_copy(&value));
            } else {
                core::ptr::write_unaligned(at as *mut T, value);
            }
        }
    }
}

/// Reads the `T` at packet address `at`, with one load per 16- or 32-bit word.
///
/// Packet fields have no alignment (an IPv4 address sits 2 bytes past a 4-byte boundary
/// behind Ethernet), and LLVM's BPF backend splits a load it cannot prove aligned into a load
/// per byte, shifted and or-ed together: four loads and six operations per address, and the
/// register pressure spills the parse to the stack. The BPF instruction itself has no
/// alignment rule for packet data: the verifier accepts misaligned packet loads where the
/// kernel runs on a CPU that handles them (x86-64, arm64), and refuses to load the program
/// elsewhere. The words are loaded here by instruction, in assembly, so no Rust reference or
/// typed load ever claims an alignment the packet lacks.
///
/// # Safety
/// `at..at + size_of::<T>()` is packet data the verifier knows is in bounds.
#[inline(always)]
unsafe fn load<T: Copy>(at: usize) -> T {
    let size = core::mem::size_of::<T>();
    if size == 2 {
        let v: u16 = load16(at);
        return core::mem::transmute_copy(&v);
    }
    if size == 4 {
        let v: u32 = load32(at);
        return core::mem::transmute_copy(&v);
    }
    if size == 16 {
        let v: [u32; 4] = [load32(at), load32(at + 4), load32(at + 8), load32(at + 12)];
        return core::mem::transmute_copy(&v);
    }
    core::ptr::read_unaligned(at as *const T)
}

/// # Safety
/// As [`load`]'s.
#[inline(always)]
unsafe fn load32(at: usize) -> u32 {
    let v: u32;
    core::arch::asm!("{0} = *(u32 *)({1} + 0)", lateout(wreg) v, in(reg) at, options(pure, readonly, nostack));
    v
}

/// # Safety
/// As [`load`]'s.
#[inline(always)]
unsafe fn load16(at: usize) -> u16 {
    let v: u16;
    core::arch::asm!("{0} = *(u16 *)({1} + 0)", lateout(wreg) v, in(reg) at, options(pure, readonly, nostack));
    v
}

/// The packet's linear data from its start, when it holds `len` bytes: an address the
/// verifier knows has `len` bytes in bounds, for writes in place ([`store16`], [`store32`]).
/// A program that writes in place makes the verifier add a prologue that unclones a cloned
/// skb whose linear data the clone does not own (`bpf_skb_pull_data(skb, 0)`: writable over
/// `skb_headlen`), so what the program writes is its own.
/// Pointers die with the next helper that may move the packet: take one after them.
#[inline(always)]
pub fn writable<C: Buff>(ctx: &C, len: usize) -> Option<usize> {
    let start = ctx.data();
    if start + len > ctx.data_end() {
        return None;
    }
    Some(start)
}

/// Writes the 16-bit word `v` (as it sits in memory) at packet address `at`, by instruction
/// (see [`load`] on alignment).
///
/// # Safety
/// `at..at + 2` is packet data the verifier knows is in bounds ([`writable`]).
#[inline(always)]
pub unsafe fn store16(at: usize, v: u16) {
    core::arch::asm!("*(u16 *)({0} + 0) = {1}", in(reg) at, in(wreg) v, options(nostack));
}

/// Writes the 32-bit word `v` at packet address `at`, as [`store16`].
///
/// # Safety
/// `at..at + 4` is packet data the verifier knows is in bounds ([`writable`]).
#[inline(always)]
pub unsafe fn store32(at: usize, v: u32) {
    core::arch::asm!("*(u32 *)({0} + 0) = {1}", in(reg) at, in(wreg) v, options(nostack));
}

/// The fields of a TCP/UDP/SCTP packet a translation needs. Addresses and ports are kept as
/// read (network byte order), which is also what the checksum helpers expect.
pub struct Packet {
    pub v6: bool,
    /// Offset of the L4 header.
    pub l4: usize,
    /// Length of the L4 segment (SCTP's CRC covers all of it).
    pub l4_len: u32,
    pub proto: u8,
    pub src: Addr,
    pub dst: Addr,
    pub sport: u16,
    pub dport: u16,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// The IPv4 header checksum as read (0 for IPv6, which has none).
    pub ip_csum: u16,
    /// The first fragment of a fragmented datagram, and its identification.
    pub fragment: bool,
    pub frag_id: u32,
}

impl Packet {
    /// Whether the L4 header follows the IP header directly: IPv4 without options, IPv6
    /// without extension headers.
    #[inline(always)]
    pub fn contiguous(&self) -> bool {
        self.l4 == ETH_HLEN + if self.v6 { IPV6_HLEN } else { 20 }
    }
}

/// What a packet is to the programs.
pub enum Kind {
    /// TCP, UDP or SCTP (not an IP fragment of SCTP): a candidate for translation.
    Transport(Packet),
    /// An ICMP or ICMPv6 error message (see plexus_ebpf_common::icmp_is_error).
    IcmpError,
    /// A TCP or UDP fragment after the first.
    LaterFragment,
    /// Anything else.
    Other,
}

/// A packet's IP layer, as [`ip`] reads it.
pub struct Ip {
    pub v6: bool,
    /// Offset of the L4 header.
    pub l4: usize,
    /// Length of the L4 segment (the IP payload less a fragment header).
    pub l4_len: u32,
    pub proto: u8,
    pub src: Addr,
    pub dst: Addr,
    /// The identification of the first fragment of a fragmented datagram.
    pub frag_id: Option<u32>,
    /// A fragment after the first (no L4 header).
    pub later: bool,
    /// The IPv4 header checksum as read (0 for IPv6, which has none).
    pub ip_csum: u16,
}

/// What [`ip`] finds behind the Ethernet header.
pub enum Layer3 {
    Ip(Ip),
    /// Not IPv4 or IPv6 (ARP...).
    NotIp,
}

/// Parses the packet's Ethernet and IP headers (IPv4 with options; IPv6 with a fragment
/// header, no other extension header); `None` for a malformed or truncated one.
///
/// A packet that is not IP is an answer of its own, apart from a malformed header's `None`, so
/// that [`parse`] keeps the two exits it had before this function existed: joining them cost
/// `pm_xdp` 97 more instructions of the verifier's walk.
#[inline(always)]
pub fn ip(h: &Headers) -> Option<Layer3> {
    let ethertype = u16::from_be(h.read::<u16>(12)?);
    if ethertype == ETH_P_IP {
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
        Some(Layer3::Ip(Ip {
            v6: false,
            l4: ETH_HLEN + ihl,
            l4_len: total.saturating_sub(ihl as u32),
            proto,
            src: v4_mapped(src),
            dst: v4_mapped(dst),
            frag_id: if first { Some(id) } else { None },
            later,
            ip_csum,
        }))
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
            Some(Layer3::Ip(Ip {
                v6: true,
                l4: fh + FRAG_HLEN,
                l4_len: payload.saturating_sub(FRAG_HLEN as u32),
                proto,
                src,
                dst,
                frag_id: if offset == 0 && more { Some(id) } else { None },
                later: offset != 0,
                ip_csum: 0,
            }))
        } else {
            let l4 = ETH_HLEN + IPV6_HLEN;
            Some(Layer3::Ip(Ip {
                v6: true,
                l4,
                l4_len: payload,
                proto: next,
                src,
                dst,
                frag_id: None,
                later: false,
                ip_csum: 0,
            }))
        }
    } else {
        Some(Layer3::NotIp)
    }
}

/// Parses the packet's Ethernet, IP ([`ip`]) and L4 headers; `None` for a malformed or
/// truncated one.
#[inline(always)]
pub fn parse<C: Buff>(ctx: &C) -> Option<Kind> {
    let h = Headers::new(ctx);
    let Layer3::Ip(Ip { v6, l4, l4_len, proto, src, dst, frag_id, later, ip_csum }) = ip(&h)? else {
        return Some(Kind::Other);
    };
    if (proto == PROTO_ICMP && !v6) || (proto == PROTO_ICMPV6 && v6) {
        if later {
            return Some(Kind::Other);
        }
        let kind: u8 = h.read(l4)?;
        return Some(if icmp_is_error(v6, kind) { Kind::IcmpError } else { Kind::Other });
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
