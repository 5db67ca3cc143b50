//! A packet's headers read in place (direct packet access): a bounds check against the
//! skb's linear data per read, where `bpf_skb_load_bytes` costs a helper call per field. Every
//! packet crossing a hooked interface is parsed, translated or not, so this is the programs'
//! hottest code.
//!
//! Headers that are not in the linear data (a driver that left them in fragments) are pulled
//! in first, once, up to what a parse of this packet reads. Only then: `bpf_skb_pull_data` also
//! makes the skb writable, which copies the head of a cloned one (TCP's segments are clones of
//! its retransmit queue), and the linear data of a TCP segment from a local socket ends with
//! the TCP header, well short of the longest header a parse may read. A field beyond the
//! packet reads as absent, as a failed `bpf_skb_load_bytes` did.
//!
//! Pointers into the packet die with the next helper that may move it (a store, a checksum
//! update, a pull): a [`Headers`] is for parsing, before any rewrite.

use aya_ebpf::programs::TcContext;

use crate::shared::{ETH_HLEN, ETH_P_IP, ETH_P_IPV6};

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
    #[inline(always)]
    pub fn new(ctx: &TcContext) -> Headers {
        let linear = Headers { start: ctx.data(), end: ctx.data_end() };
        let (len, need) = (ctx.len() as usize, linear.parsed_len());
        let want = if len < need { len } else { need };
        if linear.start + want <= linear.end {
            return linear;
        }
        // Best effort: when it fails, the reads beyond the linear data fail too.
        let _ = ctx.pull_data(want as u32);
        Headers { start: ctx.data(), end: ctx.data_end() }
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
pub fn writable(ctx: &TcContext, len: usize) -> Option<usize> {
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
