//! Keeping the agent's heap the size of what it holds: glibc's allocator, told to keep fewer
//! arenas, and given back what bursts of requests freed.
//!
//! Measured with `cargo xtask bench cni` (docs/bench.md): with glibc's defaults the agent held
//! 60 MiB with 250 pods × 4 attachments alive and 62 MiB after deleting them, against 21 MiB
//! idle. Two things kept it:
//! - **arenas**: glibc gives threads that contend for its lock arenas of their own, up to
//!   8 per core; the tokio runtime's workers and its blocking pool (netlink, files, plugin
//!   execs) run many threads during a burst, and each arena keeps the memory freed into it.
//!   [`limit_arenas`] allows two (the machine's cores were two where it was measured; the
//!   per-thread caches of glibc 2.26 and later take most of the contention an arena would);
//! - **freed memory stays mapped**: glibc returns memory to the kernel only from the top of
//!   the main heap; what a burst frees inside the heap stays resident. [`Trimmer`] looks once a
//!   second and, once the heap stopped changing after a burst that left more than
//!   [`TRIM_ABOVE`] bytes free, asks glibc to return every free page (`malloc_trim`, which
//!   `madvise`s them away in every arena): once per burst, after it, never in it.
//!
//! Elsewhere than glibc both are no-ops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Free bytes held by the allocator above which the trimmer gives them back.
pub const TRIM_ABOVE: usize = 1 << 20;

/// How often the trimmer looks.
pub const TRIM_EVERY: Duration = Duration::from_secs(1);

/// The arenas glibc may make (`M_ARENA_MAX`).
pub const ARENAS: i32 = 2;

/// Limits glibc's arenas to [`ARENAS`]. Call it first in `main`, before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of the allocator; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// What the allocator holds: in use, and free but still mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heap {
    pub in_use: usize,
    pub free: usize,
}

/// The allocator's figures now (zeros elsewhere than glibc).
pub fn heap() -> Heap {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics.
        let info = unsafe { libc::mallinfo2() };
        Heap { in_use: info.uordblks + info.hblkhd, free: info.fordblks }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    Heap { in_use: 0, free: 0 }
}

/// Requests answered so far ([`note_request`]): the trimmer's sign of a burst, since a
/// trim leaves the allocator's figures as they were (the free chunks stay, their pages go) and
/// a burst like the last one leaves them alike too.
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Counts a request answered (the metrics count every CNI request through here).
pub fn note_request() {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
}

/// What the trimmer sees at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    pub heap: Heap,
    pub requests: u64,
}

impl Look {
    pub fn now() -> Look {
        Look { heap: heap(), requests: REQUESTS.load(Ordering::Relaxed) }
    }
}

/// Whether the trimmer trims now, having looked `before` (one look ago), `now`, and `trimmed`
/// (after its last trim): once a burst is over (no request and no change of the heap since the
/// last look), if there was one since the last trim (a request, or the heap changed) and more
/// than [`TRIM_ABOVE`] bytes are free.
pub fn worth_trimming(before: Look, now: Look, trimmed: Option<Look>) -> bool {
    let quiet = before.requests == now.requests && before.heap.near(now.heap);
    let busy_since_trim = trimmed.is_none_or(|t| t.requests != now.requests || !t.heap.near(now.heap));
    quiet && busy_since_trim && now.heap.free > TRIM_ABOVE
}

/// How much the heap may change between two looks and still count as unchanged: the agent's
/// periodic work (catalog and readiness looks, metrics) allocates a little all the time.
pub const QUIET_WITHIN: usize = 256 << 10;

impl Heap {
    /// Whether `other` is this heap give or take [`QUIET_WITHIN`].
    pub fn near(self, other: Heap) -> bool {
        self.in_use.abs_diff(other.in_use) <= QUIET_WITHIN && self.free.abs_diff(other.free) <= QUIET_WITHIN
    }
}

/// Gives every free page back to the kernel; returns whether any was.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe: it takes each arena's lock in turn.
    unsafe {
        libc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// The background thread that gives freed memory back (see the module's notes).
pub struct Trimmer;

impl Trimmer {
    /// Starts the thread; it runs as long as the process.
    pub fn start() -> std::io::Result<()> {
        std::thread::Builder::new().name("plexus-trim".into()).spawn(|| {
            let (mut before, mut trimmed) = (Look::now(), None);
            loop {
                std::thread::sleep(TRIM_EVERY);
                let now = Look::now();
                if worth_trimming(before, now, trimmed) {
                    let gave = trim();
                    let after = Look::now();
                    tracing::debug!(
                        free = now.heap.free,
                        in_use = now.heap.in_use,
                        gave,
                        "gave freed memory back"
                    );
                    trimmed = Some(after);
                    before = after;
                } else {
                    before = now;
                }
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    #[test]
    fn a_trim_comes_once_after_a_burst_that_left_more_than_a_mebibyte_free() {
        let look = |in_use: usize, free: usize, requests: u64| Look { heap: Heap { in_use, free }, requests };
        let idle = look(1 << 20, 4 << 20, 10);
        assert!(worth_trimming(idle, idle, None), "quiet, never trimmed, 4 MiB free");
        assert!(!worth_trimming(idle, idle, Some(idle)), "nothing happened since the last trim");
        let busy = look(3 << 20, 2 << 20, 30);
        assert!(!worth_trimming(idle, busy, Some(idle)), "in a burst");
        assert!(worth_trimming(busy, busy, Some(idle)), "the burst is over");
        let alike = look(1 << 20, 4 << 20, 50);
        assert!(!worth_trimming(busy, alike, Some(idle)), "requests came since the last look: not quiet");
        assert!(
            worth_trimming(alike, alike, Some(idle)),
            "a burst that left the heap as the last one did: its pages came back, trimmed again"
        );
        let little = look(1 << 20, TRIM_ABOVE, 10);
        assert!(!worth_trimming(little, little, None), "at most a mebibyte free");
        let ticking = look(idle.heap.in_use + 4096, idle.heap.free - 4096, 10);
        assert!(worth_trimming(idle, ticking, None), "a few KiB of periodic work is quiet");
        assert!(!worth_trimming(ticking, idle, Some(ticking)), "and no change since the trim");
        let grown = look(idle.heap.in_use + (1 << 20), idle.heap.free, 10);
        assert!(worth_trimming(grown, grown, Some(idle)), "the heap changed without requests (watches)");
    }

    /// What a burst allocated on several threads and freed between what it kept stays
    /// resident (glibc returns only a heap's top) until a trim, which gives it back.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn a_trim_gives_back_what_a_burst_freed() {
        const PIECE: usize = 64 << 10;
        let kept: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        // 32 MiB in 64 KiB pieces (below glibc's mmap threshold), every other
                        // one freed: holes the heap's top cannot give back.
                        let pieces: Vec<Vec<u8>> = (0..512).map(|i| vec![i as u8; PIECE]).collect();
                        pieces.into_iter().skip(1).step_by(2).collect::<Vec<Vec<u8>>>()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let burst = rss_kib();
        let held = heap();
        assert!(held.free >= 32 << 20, "the freed half is free but held: {held:?}");
        let look = Look { heap: held, requests: 0 };
        assert!(worth_trimming(look, look, None));
        assert!(trim(), "something was given back");
        let after = rss_kib();
        assert!(after + 32 * 1024 < burst, "RSS {burst} KiB before the trim, {after} KiB after");
        assert_eq!(kept.iter().map(Vec::len).sum::<usize>(), 4 * 256, "what was kept is still there");
    }
}
