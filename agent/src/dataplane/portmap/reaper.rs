//! The reaper of the flow table: while the agent runs, a thread of its own removes expired
//! flows every few seconds, off the packet path, and publishes the table's figures as metrics.
//!
//! It works on its own handles to the pinned maps, not under the service's lock: a walk of a
//! full table takes a fraction of a second, which ADDs and DELs need not wait for.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use plexus_ebpf_common::flow::Timeouts;

use super::table::{monotonic_ns, Tables};
use crate::metrics::metrics;

/// Bounds of the reaper's period.
const MIN_PERIOD: Duration = Duration::from_secs(1);
const MAX_PERIOD: Duration = Duration::from_secs(10);

/// How often the table is reaped: half the shortest timeout, within [1 s, 10 s].
///
/// An expired flow is already gone for traffic: the programs treat it as absent (the reverse
/// path deletes it, the forward path overwrites it), so reaping only frees its slot and keeps
/// the occupancy figures true. Half the shortest timeout removes a flow at most 1.5 timeouts
/// after its last packet, which keeps expired flows from crowding a busy table; the ceiling
/// keeps the figures fresh when every timeout is long, and the floor bounds the cost of a pass
/// (it reads the whole table) when a timeout is very short.
pub fn period(t: &Timeouts) -> Duration {
    let shortest = [t.tcp_syn, t.tcp_established, t.tcp_closed, t.tcp_reset, t.udp, t.udp_stream, t.sctp]
        .into_iter()
        .min()
        .unwrap_or(0);
    Duration::from_nanos(shortest / 2).clamp(MIN_PERIOD, MAX_PERIOD)
}

/// The running reaper; dropping it stops the thread (after its current pass).
#[derive(Debug)]
pub struct Reaper {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    /// Starts reaping `tables` (its own handles to the maps) with `timeouts`.
    pub fn spawn(mut tables: Tables, timeouts: Timeouts) -> std::io::Result<Reaper> {
        let (stop, stopped) = mpsc::channel::<()>();
        let every = period(&timeouts);
        let thread = std::thread::Builder::new().name("portmap-reaper".into()).spawn(move || {
            tracing::debug!(period_ms = every.as_millis() as u64, "reaping expired port mapping flows");
            loop {
                pass(&mut tables, &timeouts);
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })?;
        Ok(Reaper { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::warn!("the port mapping flow reaper panicked");
            }
        }
    }
}

/// One pass: reap, then publish the figures.
fn pass(tables: &mut Tables, timeouts: &Timeouts) {
    let now = match monotonic_ns() {
        Ok(now) => now,
        Err(e) => return tracing::warn!("reading the monotonic clock to reap flows: {e}"),
    };
    let started = Instant::now();
    match tables.reap_counted(now, timeouts) {
        Ok(reaped) => {
            tracing::debug!(
                removed = reaped.removed,
                live = reaped.live,
                took_us = started.elapsed().as_micros() as u64,
                "reaped expired port mapping flows"
            );
            metrics().portmap_flow_table(
                reaped.live as u64,
                u64::from(tables.flow_capacity()),
                &tables.flow_stats(),
            );
        }
        Err(e) => tracing::warn!("reaping expired port mapping flows: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_ebpf_common::flow::NSEC_PER_SEC;

    fn secs(s: u64) -> u64 {
        s * NSEC_PER_SEC
    }

    #[test]
    fn the_period_is_half_the_shortest_timeout_within_bounds() {
        // The defaults: the shortest is TCP after a RST, 10 s.
        assert_eq!(period(&Timeouts::default()), Duration::from_secs(5));
        let all = |s: u64| Timeouts {
            tcp_syn: secs(s),
            tcp_established: secs(s),
            tcp_closed: secs(s),
            tcp_reset: secs(s),
            udp: secs(s),
            udp_stream: secs(s),
            sctp: secs(s),
        };
        assert_eq!(period(&all(1)), MIN_PERIOD);
        assert_eq!(period(&all(3600)), MAX_PERIOD);
        assert_eq!(period(&Timeouts { udp: secs(4), ..all(3600) }), Duration::from_secs(2));
        assert_eq!(period(&Timeouts { sctp: secs(5), ..all(3600) }), Duration::from_millis(2500));
    }
}
