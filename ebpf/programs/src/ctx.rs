//! The packet a program runs on, whichever hook it is: the one interface the packet reader
//! ([`crate::packet`]) is written against, as Cilium's `bpf/lib` is written once against
//! `__ctx_buff` for both `__sk_buff` and `xdp_md`.

use aya_ebpf::programs::{TcContext, XdpContext};

/// A packet with direct access to its bytes: `data..data_end` is what the program may read and
/// write in place, after a bounds check the verifier sees.
pub trait Buff {
    /// Whether `data..data_end` always holds the whole packet (an XDP frame), so there is
    /// never anything to pull in.
    const LINEAR: bool;
    fn data(&self) -> usize;
    fn data_end(&self) -> usize;
    /// The whole packet's length: an skb's (the linear data and its fragments), a frame's.
    fn len(&self) -> u32;
    /// Pulls the packet's first `len` bytes into its linear data, best effort (a failure
    /// leaves reads beyond the linear data failing). Invalidates every packet pointer.
    fn pull(&self, len: u32);
}

impl Buff for TcContext {
    const LINEAR: bool = false;

    #[inline(always)]
    fn data(&self) -> usize {
        TcContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        TcContext::data_end(self)
    }

    #[inline(always)]
    fn len(&self) -> u32 {
        TcContext::len(self)
    }

    #[inline(always)]
    fn pull(&self, len: u32) {
        let _ = self.pull_data(len);
    }
}

impl Buff for XdpContext {
    const LINEAR: bool = true;

    #[inline(always)]
    fn data(&self) -> usize {
        XdpContext::data(self)
    }

    #[inline(always)]
    fn data_end(&self) -> usize {
        XdpContext::data_end(self)
    }

    #[inline(always)]
    fn len(&self) -> u32 {
        (XdpContext::data_end(self) - XdpContext::data(self)) as u32
    }

    #[inline(always)]
    fn pull(&self, _len: u32) {}
}
