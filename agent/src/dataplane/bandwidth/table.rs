//! The shaping maps, as the agent writes them and `plexus-agent bandwidth` reads and updates
//! them (through their pins, while the agent runs).
//!
//! Counters are created before the limit (so the first limited packet is counted) and removed
//! after it.

use std::collections::BTreeSet;

use aya::maps::{HashMap, MapData, PerCpuHashMap};
use aya::Ebpf;
use plexus_ebpf_common::shape::{Shape, ShapeCounters, ShapeKey, MAP_LIMITS, MAP_STATS};

use super::plan::Entry;
pub use crate::dataplane::maps::TableError;
use crate::dataplane::maps::{ignore_missing, map_error, open_pinned_map, per_cpu, take_map};
use crate::dataplane::pin::PinDir;

pub struct Table {
    limits: HashMap<MapData, ShapeKey, Shape>,
    stats: PerCpuHashMap<MapData, ShapeKey, ShapeCounters>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Table")
    }
}

/// Summed counters of one limit.
pub type Counters = ShapeCounters;

impl Table {
    /// Takes the maps out of a freshly loaded object.
    pub fn take(ebpf: &mut Ebpf) -> Result<Table, TableError> {
        let limits = take_map(ebpf, MAP_LIMITS)?;
        let stats = take_map(ebpf, MAP_STATS)?;
        Ok(Table {
            limits: HashMap::try_from(limits).map_err(map_error(MAP_LIMITS, "opening"))?,
            stats: PerCpuHashMap::try_from(stats).map_err(map_error(MAP_STATS, "opening"))?,
        })
    }

    /// The pinned maps of a running agent.
    pub fn open_pinned(pins: &PinDir) -> Result<Table, TableError> {
        let open = |name| open_pinned_map(pins, name);
        Ok(Table {
            limits: HashMap::try_from(open(MAP_LIMITS)?).map_err(map_error(MAP_LIMITS, "opening"))?,
            stats: PerCpuHashMap::try_from(open(MAP_STATS)?).map_err(map_error(MAP_STATS, "opening"))?,
        })
    }

    /// Installs (or replaces, with a fresh bucket) the limit of `e`; its counters survive a
    /// replacement.
    pub fn install(&mut self, e: &Entry) -> Result<(), TableError> {
        let key = e.key();
        if self.stats.get(&key, 0).is_err() {
            self.stats
                .insert(key, per_cpu(ShapeCounters::default())?, 0)
                .map_err(map_error(MAP_STATS, format!("adding {e}")))?;
        }
        self.limits.insert(key, e.shape(), 0).map_err(map_error(MAP_LIMITS, format!("adding {e}")))
    }

    pub fn remove(&mut self, e: &Entry) -> Result<(), TableError> {
        self.remove_key(&e.key(), &e.to_string())
    }

    /// [`Table::remove`] by key (`what` names it in errors): for limits no record describes
    /// (`plexus-agent doctor`).
    pub fn remove_key(&mut self, key: &ShapeKey, what: &str) -> Result<(), TableError> {
        ignore_missing(self.limits.remove(key)).map_err(map_error(MAP_LIMITS, format!("removing {what}")))?;
        ignore_missing(self.stats.remove(key)).map_err(map_error(MAP_STATS, format!("removing {what}")))
    }

    /// What is wrong with `e`'s installed limit, if anything.
    pub fn verify(&self, e: &Entry) -> Option<String> {
        match self.limits.get(&e.key(), 0) {
            Ok(s) if s.rate_bps == e.rate_bps && s.burst_ns == e.burst_ns && s.flags == e.shape().flags => {
                None
            }
            Ok(s) => Some(format!("{e}: the map holds {} bit/s, burst {} ns", s.rate_bps, s.burst_ns)),
            Err(_) => Some(format!("{e}: no limit in the map")),
        }
    }

    /// The counters of a limit, summed over the CPUs (wrapping, as the programs count).
    pub fn counters(&self, key: &ShapeKey) -> Counters {
        let Ok(per_cpu) = self.stats.get(key, 0) else { return Counters::default() };
        per_cpu.iter().fold(Counters::default(), |a, c| Counters {
            passed_packets: a.passed_packets.wrapping_add(c.passed_packets),
            passed_bytes: a.passed_bytes.wrapping_add(c.passed_bytes),
            dropped_packets: a.dropped_packets.wrapping_add(c.dropped_packets),
            dropped_bytes: a.dropped_bytes.wrapping_add(c.dropped_bytes),
            marked_packets: a.marked_packets.wrapping_add(c.marked_packets),
        })
    }

    /// Every installed key.
    pub fn keys(&self) -> BTreeSet<ShapeKey> {
        self.limits.keys().filter_map(Result::ok).collect()
    }

    /// Every key of the counters (a limit's counters outlive it for a moment on removal).
    pub fn stats_keys(&self) -> BTreeSet<ShapeKey> {
        self.stats.keys().filter_map(Result::ok).collect()
    }

    /// Makes the maps hold exactly `desired`: removes the rest, installs what is missing or
    /// differs. Returns (removed, restored).
    pub fn reconcile(&mut self, desired: &[Entry]) -> Result<(usize, usize), TableError> {
        let wanted: BTreeSet<ShapeKey> = desired.iter().map(Entry::key).collect();
        let mut removed = 0;
        for key in self.keys().difference(&wanted) {
            ignore_missing(self.limits.remove(key))
                .map_err(map_error(MAP_LIMITS, "removing a stale limit"))?;
            ignore_missing(self.stats.remove(key))
                .map_err(map_error(MAP_STATS, "removing stale counters"))?;
            removed += 1;
        }
        let mut restored = 0;
        for e in desired {
            if self.verify(e).is_some() {
                self.install(e)?;
                restored += 1;
            }
        }
        Ok((removed, restored))
    }

    /// Writes per-CPU counters as given (tests of the wrapping sums).
    #[cfg(test)]
    pub fn set_counters(&mut self, key: ShapeKey, per_cpu: Vec<Counters>) -> Result<(), TableError> {
        let values = aya::maps::PerCpuValues::try_from(per_cpu)
            .map_err(|source| TableError::Cpus { what: "the per-CPU values", source })?;
        self.stats.insert(key, values, 0).map_err(map_error(MAP_STATS, "setting counters"))
    }

    /// The installed value of a limit (its clock included).
    pub fn shape(&self, key: &ShapeKey) -> Option<Shape> {
        self.limits.get(key, 0).ok()
    }

    /// Replaces a limit's value as given (tests: a clock from elsewhere).
    #[cfg(test)]
    pub fn set_shape(&mut self, key: ShapeKey, shape: Shape) -> Result<(), TableError> {
        self.limits.insert(key, shape, 0).map_err(map_error(MAP_LIMITS, "setting a limit"))
    }
}
