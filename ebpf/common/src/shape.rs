//! Bandwidth shaping of attachments (NPWG 4.1.2.1.8): the maps of the `plexus-bandwidth` BPF
//! object and the arithmetic its programs run, in one place so the host can test it exhaustively
//! and the kernel runs exactly the same code.
//!
//! Both mechanisms keep one number per limited direction: the *virtual clock* `tat` (GCRA's
//! theoretical arrival time), the moment the traffic admitted so far would have finished
//! leaving at the configured rate. A packet of `cost` nanoseconds (its bytes at the rate)
//! advances it by `cost`.
//!
//! - Token bucket (policing, [`police`]): a packet passes when the clock, advanced by it, runs
//!   at most `burst_ns` ahead of now: the bucket holds `burst_ns` worth of bytes. Past half the
//!   bucket, ECN-capable packets are CE-marked (the sender slows down before anything is lost);
//!   past all of it, packets are dropped and do not advance the clock.
//! - Earliest Departure Time (pacing, [`pace`]): every packet passes with `skb->tstamp` set to
//!   when it may leave, and an fq qdisc holds it until then; within the burst that is now.
//!   Packets that would wait longer than the horizon are dropped.
//!
//! An idle clock (behind now) restarts from now: a full bucket. A clock further ahead than
//! admission ever puts it, by more than a packet's `now` can lag another CPU's
//! ([`STALE_NOW_NS`]), means time went backwards (or a hand-written state): it restarts from
//! now too, rather than refusing traffic until the clock catches up.

/// What the port mapping object's XDP program writes in a packet's metadata once it charged
/// the packet to a limit of the receive path of interface `ifindex` and passed it: the
/// bandwidth program on that hook then leaves the packet alone (one limit, enforced once).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpCharged {
    /// [`XDP_CHARGED`].
    pub magic: u32,
    pub ifindex: u32,
}

/// [`XdpCharged::magic`]: "PLXC".
pub const XDP_CHARGED: u32 = 0x504c_5843;

/// Limits and their state, by [`ShapeKey`].
pub const MAP_LIMITS: &str = "BW_LIMITS";
/// Per-CPU [`ShapeCounters`], by [`ShapeKey`].
pub const MAP_STATS: &str = "BW_STATS";
/// One u64 at index 0: a fixed "now" in nanoseconds for BPF_PROG_TEST_RUN tests; 0 (always,
/// in the agent) means the kernel's monotonic clock.
pub const MAP_CLOCK: &str = "BW_CLOCK";
/// A bit per interface index, by its low 16 bits ([`UNLIMITED_WORDS`] words, see
/// [`ifindex_bit`]), set when no interface whose index has those low bits has a limit on its
/// transmit path ([`HOOK_EGRESS`]): the port mapping programs, which ask of every packet they
/// deliver to a pod's veth whether its ingress is limited there, then answer no without the
/// [`MAP_LIMITS`] lookup, which almost always misses. A clear bit only means "look": a new map,
/// all clear, makes the programs look up every interface, as without it. The agent clears a
/// bit before it writes a transmit limit and sets it once the last such limit is gone.
pub const MAP_UNLIMITED: &str = "BW_UNLIMITED";
/// Every map of the object, for pinning.
pub const MAPS: [&str; 4] = [MAP_LIMITS, MAP_STATS, MAP_CLOCK, MAP_UNLIMITED];

/// How many limited directions a node can hold.
pub const MAX_SHAPED: u32 = 16384;

/// Words of [`MAP_UNLIMITED`]: 64 interface indexes (by their low 16 bits) each.
pub const UNLIMITED_WORDS: u32 = 65536 / 64;

/// The word of [`MAP_UNLIMITED`] that holds the bit of interface `ifindex`, and the bit. Indexes
/// that differ only above their low 16 bits share it: a bit is set only when none of them has a
/// transmit limit.
#[inline(always)]
pub const fn ifindex_bit(ifindex: u32) -> (u32, u64) {
    let low = ifindex & 0xffff;
    (low >> 6, 1u64 << (low & 63))
}

/// [`ShapeKey::hook`]: the device's receive path.
pub const HOOK_INGRESS: u8 = 0;
/// [`ShapeKey::hook`]: the device's transmit path.
pub const HOOK_EGRESS: u8 = 1;

/// [`Shape::flags`]: pace with `skb->tstamp` (an fq qdisc on the device enforces it).
pub const SHAPE_EDT: u32 = 1;

/// How long EDT lets a packet wait before dropping it instead.
pub const EDT_HORIZON_NS: u64 = 20_000_000;

pub const NSEC_PER_SEC: u64 = 1_000_000_000;

/// How far a packet's `now` may lag the clock another CPU published. A program reads now, then
/// another CPU reads a later now and advances the clock to up to its own now plus the bucket
/// before this one's compare-and-swap (a vCPU its host stalls in between widens the gap to
/// milliseconds). Seen from the earlier now, that clock is beyond the bucket: it is a full
/// bucket seen a little late (the packet is over the limit), not time gone backwards, and
/// restarting there would hand out a whole fresh bucket, 300 ms of the rate at once.
pub const STALE_NOW_NS: u64 = NSEC_PER_SEC;

/// Where a limit applies: a TC hook of a node device, for all its traffic (`mac` zero: the
/// pod's host-side veth) or for one pod's (`mac`: the pod interface's MAC, on a macvlan master,
/// matched as the destination on the receive path and the source on the transmit path).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeKey {
    pub ifindex: u32,
    /// [`HOOK_INGRESS`] or [`HOOK_EGRESS`].
    pub hook: u8,
    pub pad: u8,
    pub mac: [u8; 6],
}

/// One limit (written by the agent) and its virtual clock (advanced by the programs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Bits per second, never 0 (the agent validates).
    pub rate_bps: u64,
    /// The bucket, as time at the rate: how far ahead of now the clock may run.
    pub burst_ns: u64,
    /// [`SHAPE_EDT`] or 0.
    pub flags: u32,
    pub pad: u32,
    /// The virtual clock, in the monotonic clock's nanoseconds.
    pub tat: u64,
}

/// Per-CPU counters of one limit (the agent sums the CPUs, wrapping).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShapeCounters {
    pub passed_packets: u64,
    pub passed_bytes: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    /// ECN-capable packets passed with CE set instead of being dropped.
    pub marked_packets: u64,
}

/// What happens to a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Pass with ECN CE set.
    Mark,
    Drop,
    /// Pass, leaving at this time (EDT).
    Depart(u64),
}

/// The largest length charged: a 16 MiB packet (beyond any GSO packet) keeps `len * 8e9` far
/// from overflowing.
const MAX_LEN: u64 = 1 << 24;

/// The time `len` bytes take at `rate_bps`, rounded to the nearest nanosecond (a rate of 0,
/// which the agent never writes, costs nothing rather than dividing by zero).
#[inline(always)]
pub fn cost_ns(len: u64, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return 0;
    }
    let bits = if len > MAX_LEN { MAX_LEN } else { len } * 8;
    (bits * NSEC_PER_SEC + rate_bps / 2) / rate_bps
}

/// Where the clock continues from: itself while it is ahead of now by at most `reach` (the
/// furthest admission moves it) plus [`STALE_NOW_NS`], otherwise now (idle, or time went
/// backwards).
#[inline(always)]
pub fn restart(tat: u64, now: u64, reach: u64) -> u64 {
    if tat < now || tat - now > reach.saturating_add(STALE_NOW_NS) {
        now
    } else {
        tat
    }
}

/// The token bucket's verdict for a packet whose cost took the clock from `prev` to
/// `prev + cost`.
#[inline(always)]
pub fn police(prev: u64, cost: u64, now: u64, burst_ns: u64, ect: bool) -> Verdict {
    let ahead = prev.saturating_add(cost).saturating_sub(now);
    if ahead > burst_ns {
        Verdict::Drop
    } else if ect && ahead > burst_ns / 2 {
        Verdict::Mark
    } else {
        Verdict::Pass
    }
}

/// EDT's verdict for a packet whose cost took the clock from `prev` to `prev + cost`: it may
/// leave once the clock, minus the burst, has come.
#[inline(always)]
pub fn pace(prev: u64, cost: u64, now: u64, burst_ns: u64) -> Verdict {
    let due = prev.saturating_add(cost).saturating_sub(burst_ns);
    let departure = if due > now { due } else { now };
    if departure - now > EDT_HORIZON_NS {
        Verdict::Drop
    } else {
        Verdict::Depart(departure)
    }
}

/// How far ahead of now admission can move the clock.
#[inline(always)]
pub fn reach(shape: &Shape) -> u64 {
    if shape.flags & SHAPE_EDT != 0 {
        shape.burst_ns.saturating_add(EDT_HORIZON_NS)
    } else {
        shape.burst_ns
    }
}

/// One packet's verdict, and the clock it leaves: advanced by the packet's cost when it
/// passes, unchanged when it is dropped. The programs publish the new clock with a
/// compare-and-swap (retrying with the clock another CPU left), so no CPU ever sees a clock
/// that admission did not produce.
#[inline(always)]
pub fn step(tat: u64, now: u64, cost: u64, shape: &Shape, ect: bool) -> (Verdict, u64) {
    let start = restart(tat, now, reach(shape));
    let verdict = if shape.flags & SHAPE_EDT != 0 {
        pace(start, cost, now, shape.burst_ns)
    } else {
        police(start, cost, now, shape.burst_ns, ect)
    };
    let next = if verdict == Verdict::Drop { tat } else { start.saturating_add(cost) };
    (verdict, next)
}

/// One packet through `shape`, single-threaded: [`step`] with the clock kept in `shape`. For
/// tests and models on the host.
pub fn admit(shape: &mut Shape, len: u64, now: u64, ect: bool) -> Verdict {
    let cost = cost_ns(len, shape.rate_bps);
    let (verdict, next) = step(shape.tat, now, cost, shape, ect);
    shape.tat = next;
    verdict
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data with explicit padding fields; every bit pattern is valid.
    unsafe impl aya::Pod for super::ShapeKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Shape {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ShapeCounters {}
}

// Part of the pinned maps' ABI, like the port mapping layouts.
const _: () = assert!(core::mem::size_of::<ShapeKey>() == 12);
const _: () = assert!(core::mem::size_of::<Shape>() == 32);
const _: () = assert!(core::mem::size_of::<ShapeCounters>() == 40);
const _: () = assert!(core::mem::size_of::<XdpCharged>() == 8);

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    const MBIT: u64 = 1_000_000;

    fn shape(rate_bps: u64, burst_bits: u64) -> Shape {
        Shape { rate_bps, burst_ns: burst_bits * NSEC_PER_SEC / rate_bps, ..Shape::default() }
    }

    #[test]
    fn every_interface_has_one_bit_shared_only_above_its_low_16_bits() {
        let mut seen = [0u64; UNLIMITED_WORDS as usize];
        for ifindex in 0..=u32::from(u16::MAX) {
            let (word, bit) = ifindex_bit(ifindex);
            assert!(word < UNLIMITED_WORDS, "ifindex {ifindex}");
            assert_eq!(bit.count_ones(), 1, "ifindex {ifindex}");
            assert_eq!(seen[word as usize] & bit, 0, "ifindex {ifindex} shares a bit");
            seen[word as usize] |= bit;
            assert_eq!(ifindex_bit(ifindex + 0x1_0000), (word, bit), "ifindex {ifindex} + 65536");
            assert_eq!(ifindex_bit(ifindex | 0xffff_0000), (word, bit), "ifindex {ifindex} | 0xffff0000");
        }
        assert!(seen.iter().all(|w| *w == u64::MAX), "every bit belongs to an ifindex");
        assert_eq!(ifindex_bit(7), (0, 1 << 7));
        assert_eq!(ifindex_bit(1000), (1000 / 64, 1 << (1000 % 64)));
        assert_eq!(ifindex_bit(u32::MAX), (UNLIMITED_WORDS - 1, 1 << 63));
    }

    #[test]
    fn costs_are_bytes_at_the_rate() {
        assert_eq!(cost_ns(1500, 12 * MBIT), 1_000_000);
        assert_eq!(cost_ns(1500, 10_000 * MBIT), 1200);
        assert_eq!(cost_ns(64, 10_000 * MBIT), 51); // 51.2 rounds down
        assert_eq!(cost_ns(65, 10_000 * MBIT), 52); // 52.0
        assert_eq!(cost_ns(1, 1), 8 * NSEC_PER_SEC);
        assert_eq!(cost_ns(u64::MAX, 1), MAX_LEN * 8 * NSEC_PER_SEC);
        assert_eq!(cost_ns(1500, 0), 0);
    }

    /// Offers `len`-byte packets every `gap` ns for `secs` seconds, returns bits passed.
    fn offer(s: &mut Shape, start: u64, len: u64, gap: u64, secs: u64) -> u64 {
        let mut passed = 0;
        let mut now = start;
        while now < start + secs * NSEC_PER_SEC {
            if admit(s, len, now, false) == Verdict::Pass {
                passed += len * 8;
            }
            now += gap;
        }
        passed
    }

    #[test]
    fn policing_holds_the_rate_from_1_mbit_to_10_gbit() {
        for rate in [MBIT, 10 * MBIT, 100 * MBIT, 1000 * MBIT, 10_000 * MBIT] {
            // Offered at twice the rate, in 1500-byte packets; a burst of 100 packets.
            let mut s = shape(rate, 100 * 1500 * 8);
            let gap = cost_ns(1500, rate) / 2;
            let passed = offer(&mut s, 1_000, 1500, gap, 2);
            let expected = 2 * rate + 100 * 1500 * 8;
            let error = passed.abs_diff(expected) as f64 / expected as f64;
            assert!(error < 0.01, "rate {rate}: passed {passed} bits, expected {expected}");
        }
    }

    #[test]
    fn a_full_bucket_passes_its_burst_at_once_then_the_rate() {
        let mut s = shape(8 * MBIT, 10 * 1000 * 8); // 1000-byte packets cost 1 ms; 10 ms of burst
        let now = 5 * NSEC_PER_SEC;
        let verdicts: Vec<Verdict> = (0..12).map(|_| admit(&mut s, 1000, now, false)).collect();
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Pass).count(), 10);
        assert_eq!(verdicts[10], Verdict::Drop);
        // 1 ms later, room for exactly one more.
        assert_eq!(admit(&mut s, 1000, now + 1_000_000, false), Verdict::Pass);
        assert_eq!(admit(&mut s, 1000, now + 1_000_000, false), Verdict::Drop);
    }

    #[test]
    fn ect_packets_are_marked_past_half_the_bucket_and_dropped_past_all_of_it() {
        let mut s = shape(8 * MBIT, 10 * 1000 * 8);
        let now = NSEC_PER_SEC;
        let verdicts: Vec<Verdict> = (0..11).map(|_| admit(&mut s, 1000, now, true)).collect();
        assert_eq!(&verdicts[..5], [Verdict::Pass; 5]);
        assert_eq!(&verdicts[5..10], [Verdict::Mark; 5]);
        assert_eq!(verdicts[10], Verdict::Drop);
    }

    #[test]
    fn time_going_backwards_restarts_the_clock_instead_of_starving() {
        let mut s = shape(8 * MBIT, 10 * 1000 * 8);
        let now = 100 * NSEC_PER_SEC;
        for _ in 0..10 {
            admit(&mut s, 1000, now, false);
        }
        assert_eq!(admit(&mut s, 1000, now, false), Verdict::Drop);
        // The clock jumps back a minute: a fresh bucket, not a minute of drops.
        assert_eq!(admit(&mut s, 1000, now - 60 * NSEC_PER_SEC, false), Verdict::Pass);
        // A clock state from the far future (a limit written by hand, a wrapped value) too.
        s.tat = u64::MAX - 5;
        assert_eq!(admit(&mut s, 1000, now, false), Verdict::Pass);
        assert_eq!(s.tat, now + 1_000_000);
        // A drop leaves the clock exactly as it was.
        let mut full = s;
        full.tat = now + full.burst_ns;
        assert_eq!(admit(&mut full, 1000, now, false), Verdict::Drop);
        assert_eq!(full.tat, now + full.burst_ns);
    }

    #[test]
    fn a_now_that_lags_another_cpus_sees_the_full_bucket_not_a_fresh_one() {
        for edt in [false, true] {
            let mut s = shape(8 * MBIT, 10 * 1000 * 8);
            if edt {
                s.flags = SHAPE_EDT;
            }
            // Another CPU, at a later now, filled the bucket (and, with EDT, the horizon).
            let later = 100 * NSEC_PER_SEC;
            while admit(&mut s, 1000, later, false) != Verdict::Drop {}
            let full = s.tat;
            // This CPU read its now before that one, by a microsecond up to the whole margin:
            // over the limit, the clock untouched.
            for lag in [1_000, 1_000_000, STALE_NOW_NS] {
                assert_eq!(admit(&mut s, 1000, later - lag, false), Verdict::Drop, "edt {edt}, lag {lag}");
                assert_eq!(s.tat, full, "edt {edt}, lag {lag}");
            }
            // Past the margin it is time gone backwards: a fresh bucket.
            assert_ne!(admit(&mut s, 1000, later - 2 * STALE_NOW_NS, false), Verdict::Drop, "edt {edt}");
            assert_eq!(s.tat, later - 2 * STALE_NOW_NS + 1_000_000, "edt {edt}");
        }
    }

    #[test]
    fn clock_arithmetic_saturates_instead_of_wrapping() {
        let mut s = shape(1, 1); // 1 bit/s: a byte costs 8 s
        s.burst_ns = u64::MAX;
        let now = u64::MAX - 1;
        assert_eq!(admit(&mut s, 1500, now, false), Verdict::Pass);
        assert_eq!(s.tat, u64::MAX);
        assert_eq!(police(u64::MAX, u64::MAX, 0, u64::MAX - 1, false), Verdict::Drop);
    }

    #[test]
    fn edt_spaces_departures_by_the_cost_after_the_burst() {
        let mut s = shape(8 * MBIT, 2 * 1000 * 8); // 1 ms per packet, 2 ms of burst
        s.flags = SHAPE_EDT;
        let now = 7 * NSEC_PER_SEC;
        let departures: Vec<Verdict> = (0..5).map(|_| admit(&mut s, 1000, now, false)).collect();
        assert_eq!(
            departures,
            [
                Verdict::Depart(now),
                Verdict::Depart(now),
                Verdict::Depart(now + 1_000_000),
                Verdict::Depart(now + 2_000_000),
                Verdict::Depart(now + 3_000_000),
            ]
        );
        // Past the horizon: dropped, and the clock does not move.
        let mut far = s;
        far.tat = now + EDT_HORIZON_NS + 2_000_000;
        let tat = far.tat;
        assert_eq!(admit(&mut far, 1000, now, false), Verdict::Drop);
        assert_eq!(far.tat, tat);
    }
}
