//! The shaping maps, as the agent writes them and `plexus-agent bandwidth` reads and updates
//! them (through their pins, while the agent runs).
//!
//! Counters are created before the limit (so the first limited packet is counted) and removed
//! after it.
//!
//! The interfaces without a transmit limit ([`MAP_UNLIMITED`], a bit per index's low 16 bits,
//! which the port mapping programs read instead of looking every delivery up in the limits)
//! follow the limits: an interface's bit is cleared before a limit is written on its transmit
//! path, so no packet ever skips a live limit, and set once no transmit limit of an interface
//! with those low bits remains. A limit keyed by a pod's MAC (a macvlan master's) clears the
//! bit too, though the programs only ask about limits of a whole device: a clear bit costs a
//! lookup, never a wrong answer. The whole map is rewritten from the limits when the table is
//! taken at start and on reconcile (a map new to the pin directory is all clear: everything is
//! looked up). The bits are read, changed and written back, so they need one writer at a time,
//! as the limits do (the agent's, under its shaper; `doctor` removes limits no record
//! describes): a bit set for an interface with a limit would let port-mapped traffic skip it.

use std::collections::BTreeSet;

use aya::maps::{HashMap, MapData, PerCpuHashMap};
use aya::Ebpf;
use plexus_ebpf_common::shape::{
    ifindex_bit, Shape, ShapeCounters, ShapeKey, HOOK_EGRESS, MAP_LIMITS, MAP_STATS, MAP_UNLIMITED,
    UNLIMITED_WORDS,
};

use super::plan::Entry;
pub use crate::dataplane::maps::TableError;
use crate::dataplane::maps::{ignore_missing, map_error, open_pinned_map, per_cpu, take_map};
use crate::dataplane::pin::PinDir;
use crate::dataplane::skip_bits::{all_set_but, SkipBits};

pub struct Table {
    limits: HashMap<MapData, ShapeKey, Shape>,
    stats: PerCpuHashMap<MapData, ShapeKey, ShapeCounters>,
    unlimited: SkipBits,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Table")
    }
}

/// Summed counters of one limit.
pub type Counters = ShapeCounters;

impl Table {
    fn from_maps(
        open: &mut dyn FnMut(&'static str) -> Result<aya::maps::Map, TableError>,
    ) -> Result<Table, TableError> {
        Ok(Table {
            limits: HashMap::try_from(open(MAP_LIMITS)?).map_err(map_error(MAP_LIMITS, "opening"))?,
            stats: PerCpuHashMap::try_from(open(MAP_STATS)?).map_err(map_error(MAP_STATS, "opening"))?,
            unlimited: SkipBits::new(open(MAP_UNLIMITED)?, MAP_UNLIMITED)?,
        })
    }

    /// Takes the maps out of a freshly loaded object, with the interfaces without a transmit
    /// limit written from the limits (a map new to the pin directory has none set).
    pub fn take(ebpf: &mut Ebpf) -> Result<Table, TableError> {
        let mut table = Table::from_maps(&mut |name| take_map(ebpf, name))?;
        table.sync_unlimited()?;
        Ok(table)
    }

    /// The pinned maps of a running agent.
    pub fn open_pinned(pins: &PinDir) -> Result<Table, TableError> {
        Table::from_maps(&mut |name| open_pinned_map(pins, name))
    }

    /// Installs (or replaces, with a fresh bucket) the limit of `e`; its counters survive a
    /// replacement. A transmit limit clears its interface's bit first.
    pub fn install(&mut self, e: &Entry) -> Result<(), TableError> {
        let key = e.key();
        if self.stats.get(&key, 0).is_err() {
            self.stats
                .insert(key, per_cpu(ShapeCounters::default())?, 0)
                .map_err(map_error(MAP_STATS, format!("adding {e}")))?;
        }
        if key.hook == HOOK_EGRESS {
            self.set_unlimited(key.ifindex, false)?;
        }
        self.limits.insert(key, e.shape(), 0).map_err(map_error(MAP_LIMITS, format!("adding {e}")))
    }

    /// Sets (`unlimited`) or clears the bit of interface `ifindex`.
    fn set_unlimited(&mut self, ifindex: u32, unlimited: bool) -> Result<(), TableError> {
        let what = || format!("writing the bit of ifindex {ifindex}");
        self.unlimited.set(ifindex_bit(ifindex), unlimited, what)
    }

    /// Writes every word of the interfaces without a transmit limit that differs from what the
    /// limits say.
    fn sync_unlimited(&mut self) -> Result<(), TableError> {
        let keys = self.keys();
        self.unlimited.sync(&unlimited_words(&keys))
    }

    pub fn remove(&mut self, e: &Entry) -> Result<(), TableError> {
        self.remove_key(&e.key(), &e.to_string())
    }

    /// [`Table::remove`] by key (`what` names it in errors): for limits no record describes
    /// (`plexus-agent doctor`). The interface's bit is set again once no transmit limit of an
    /// interface with the same low index bits remains.
    pub fn remove_key(&mut self, key: &ShapeKey, what: &str) -> Result<(), TableError> {
        ignore_missing(self.limits.remove(key)).map_err(map_error(MAP_LIMITS, format!("removing {what}")))?;
        if key.hook == HOOK_EGRESS {
            let bit = ifindex_bit(key.ifindex);
            if !self.keys().iter().any(|k| k.hook == HOOK_EGRESS && ifindex_bit(k.ifindex) == bit) {
                self.set_unlimited(key.ifindex, true)?;
            }
        }
        ignore_missing(self.stats.remove(key)).map_err(map_error(MAP_STATS, format!("removing {what}")))
    }

    /// What is wrong with `e`'s installed limit, if anything: a transmit limit whose interface
    /// is marked unlimited is skipped by the port mapping programs.
    pub fn verify(&self, e: &Entry) -> Option<String> {
        let key = e.key();
        match self.limits.get(&key, 0) {
            Ok(s) if s.rate_bps == e.rate_bps && s.burst_ns == e.burst_ns && s.flags == e.shape().flags => {}
            Ok(s) => {
                return Some(format!("{e}: the map holds {} bit/s, burst {} ns", s.rate_bps, s.burst_ns))
            }
            Err(_) => return Some(format!("{e}: no limit in the map")),
        }
        if key.hook == HOOK_EGRESS && self.marked_unlimited(key.ifindex) {
            return Some(format!("{e}: ifindex {} is marked unlimited", key.ifindex));
        }
        None
    }

    /// Whether interface `ifindex`'s bit says it has no transmit limit (an unreadable word
    /// counts as set: it cannot be shown clear).
    pub fn marked_unlimited(&self, ifindex: u32) -> bool {
        self.unlimited.get(ifindex_bit(ifindex)).unwrap_or(true)
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
    /// differs, then rewrites the interfaces without a transmit limit from the limits. Returns
    /// (removed, restored).
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
        self.sync_unlimited()?;
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

    /// Marks interface `ifindex` unlimited whatever the limits say (tests).
    #[cfg(test)]
    pub fn mark_unlimited(&mut self, ifindex: u32) -> Result<(), TableError> {
        self.set_unlimited(ifindex, true)
    }
}

/// The words of the interfaces without a transmit limit when the limits have `keys`: every bit
/// set but those of the interfaces with a transmit limit ([`HOOK_EGRESS`], whatever the MAC).
fn unlimited_words<'a>(keys: impl IntoIterator<Item = &'a ShapeKey>) -> Vec<u64> {
    let limited = keys.into_iter().filter(|k| k.hook == HOOK_EGRESS).map(|k| ifindex_bit(k.ifindex));
    all_set_but(UNLIMITED_WORDS, limited)
}

#[cfg(test)]
mod tests {
    use plexus_ebpf_common::shape::HOOK_INGRESS;

    use super::*;

    fn key(ifindex: u32, hook: u8, mac: [u8; 6]) -> ShapeKey {
        ShapeKey { ifindex, hook, pad: 0, mac }
    }

    #[test]
    fn unlimited_words_have_every_bit_but_those_of_transmit_limits() {
        let all = unlimited_words(&[]);
        assert_eq!(all.len(), UNLIMITED_WORDS as usize);
        assert!(all.iter().all(|w| *w == u64::MAX));
        let mac = [2, 0, 0, 0, 0, 5];
        let words = unlimited_words(&[
            key(7, HOOK_EGRESS, [0; 6]),
            key(7, HOOK_INGRESS, [0; 6]),
            key(8, HOOK_INGRESS, [0; 6]),
            key(9, HOOK_INGRESS, mac),
            key(64, HOOK_EGRESS, mac),
            key(0x1_0007, HOOK_EGRESS, [0; 6]),
            key(65535, HOOK_EGRESS, [0; 6]),
        ]);
        assert_eq!(words[0], !(1 << 7), "receive limits leave their bits set; 7 and 65543 share one");
        assert_eq!(words[1], !1, "a transmit limit of one MAC clears its device's bit");
        assert_eq!(words[1023], !(1 << 63));
        assert_eq!(words.iter().map(|w| w.count_zeros()).sum::<u32>(), 3);
    }

    #[test]
    fn a_bit_stays_clear_while_an_interface_with_its_low_bits_is_limited() {
        let limited = [key(7, HOOK_EGRESS, [0; 6]), key(0x1_0007, HOOK_EGRESS, [0; 6])];
        let (index, bit) = ifindex_bit(7);
        assert_eq!(unlimited_words(&limited)[index as usize] & bit, 0);
        assert_eq!(unlimited_words(&limited[1..])[index as usize] & bit, 0, "7 gone, 65543 limited");
        assert_eq!(unlimited_words(&limited[..1])[index as usize] & bit, 0, "65543 gone, 7 limited");
        assert_ne!(unlimited_words(&[])[index as usize] & bit, 0, "both gone");
    }
}
