//! Fields of an XDP frame, read and written in place within its bounds: what both objects'
//! XDP programs use. Each object's root includes it with `#[path = "../frame.rs"] mod frame;`.

use aya_ebpf::programs::XdpContext;

/// A pointer to the `T` at `offset`, if the frame holds it.
#[inline(always)]
pub fn at<T>(ctx: &XdpContext, offset: usize) -> Option<*mut T> {
    let start = ctx.data();
    if start + offset + core::mem::size_of::<T>() > ctx.data_end() {
        return None;
    }
    Some((start + offset) as *mut T)
}

/// Reads the `T` at `offset`.
#[inline(always)]
pub fn read<T: Copy>(ctx: &XdpContext, offset: usize) -> Option<T> {
    // SAFETY: `at` checked the bounds; packet data has no alignment.
    at::<T>(ctx, offset).map(|p| unsafe { core::ptr::read_unaligned(p) })
}

/// Writes `value` at `offset` (a no-op beyond the frame, which the parse already excluded).
#[inline(always)]
pub fn write<T>(ctx: &XdpContext, offset: usize, value: T) {
    if let Some(p) = at::<T>(ctx, offset) {
        // SAFETY: as in `read`.
        unsafe { core::ptr::write_unaligned(p, value) };
    }
}
