//! A packet's headers read in place (direct packet access): a bounds check against the
//! skb's linear data per read, where `bpf_skb_load_bytes` costs a helper call per field. Every
//! packet crossing a hooked interface is parsed, translated or not, so this is the programs'
//! hottest code.
//!
//! Headers that are not in the linear data (a driver that left them in fragments) are pulled
//! in first, once, up to what a parse reads. A field beyond the packet reads as absent, as a
//! failed `bpf_skb_load_bytes` did.
//!
//! Pointers into the packet die with the next helper that may move it (a store, a checksum
//! update, a pull): a [`Headers`] is for parsing, before any rewrite.

use aya_ebpf::programs::TcContext;

use crate::shared::ETH_HLEN;

/// The most a parse reads: Ethernet, the longest IPv4 header (60 bytes) and TCP up to its
/// flags (IPv6 with a fragment header reads less).
pub const PARSED_LEN: usize = ETH_HLEN + 60 + 14;

pub struct Headers {
    start: usize,
    end: usize,
}

impl Headers {
    #[inline(always)]
    pub fn new(ctx: &TcContext) -> Headers {
        let len = ctx.len() as usize;
        let want = if len < PARSED_LEN { len } else { PARSED_LEN };
        if ctx.data() + want > ctx.data_end() {
            // Best effort: when it fails, the reads beyond the linear data fail too.
            let _ = ctx.pull_data(want as u32);
        }
        Headers { start: ctx.data(), end: ctx.data_end() }
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
        // (the verifier checks it again); packet data has no alignment, hence unaligned.
        Some(unsafe { core::ptr::read_unaligned(at as *const T) })
    }
}
