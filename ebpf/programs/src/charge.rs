//! One packet charged to a limit's virtual clock (plexus_ebpf_common::shape's arithmetic),
//! published with a compare-and-swap against other CPUs' updates: what both the bandwidth TC
//! programs and the port mapping object's XDP program (ingress limits on a macvlan master) run,
//! on the same map entry, so a limit is one bucket whichever program sees the packet.

use core::intrinsics::{atomic_cxchg, AtomicOrdering};

use plexus_ebpf_common::shape::{cost_ns, step, Shape, Verdict};

/// Attempts to publish a packet's clock against other CPUs' updates.
const CAS_TRIES: u32 = 4;

/// The verdict for a packet of `len` bytes (IP bytes) under the limit at `limit`, at `now`;
/// the clock advanced when it passes.
///
/// # Safety
/// `limit` points into a map value, valid for the program's run.
#[inline(always)]
pub unsafe fn charge(limit: *mut Shape, len: u64, now: u64, ect: bool) -> Verdict {
    let s: Shape = *limit;
    let cost = cost_ns(len, s.rate_bps);
    let clock: *mut u64 = &mut (*limit).tat;
    let mut tat = core::ptr::read_volatile(clock);
    // Contention beyond a few retries is treated as over the limit.
    let mut verdict = Verdict::Drop;
    let mut tries = 0;
    while tries < CAS_TRIES {
        let (v, next) = step(tat, now, cost, &s, ect);
        if v == Verdict::Drop || next == tat {
            verdict = v;
            break;
        }
        // SeqCst: with Relaxed, LLVM 22's BPF backend has emitted atomics without their
        // fetch semantics (BPF_FETCH) yet used the register as if it held the old value.
        let (seen, swapped) =
            atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(clock, tat, next);
        if swapped {
            verdict = v;
            break;
        }
        tat = seen;
        tries += 1;
    }
    verdict
}
