//! The port mapping maps, as the agent writes and the `list` subcommand reads them.
//!
//! Write order makes every intermediate state safe for traffic: on install the counters and
//! the reverse entry come first and the forward entry last, so no packet is translated towards
//! the pod before its reply can be translated back; removal goes the other way.

use std::collections::{BTreeMap, BTreeSet};

use aya::maps::{Array, HashMap, MapData, PerCpuHashMap};
use aya::Ebpf;
use plexus_ebpf_common::{
    Config, Counters, Endpoint, Rewrite, MAP_CONFIG, MAP_FORWARD, MAP_REVERSE, MAP_STATS,
};

use super::entries::Entry;
pub use crate::dataplane::maps::TableError;
use crate::dataplane::maps::{ignore_missing, map_error, open_pinned_map, per_cpu, take_map};
use crate::dataplane::pin::PinDir;

pub struct Tables {
    forward: HashMap<MapData, Endpoint, Rewrite>,
    reverse: HashMap<MapData, Endpoint, Rewrite>,
    stats: PerCpuHashMap<MapData, Endpoint, Counters>,
    config: Option<Array<MapData, Config>>,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tables")
    }
}

/// What reconciling the maps with the records did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub removed: usize,
    pub restored: usize,
}

impl Tables {
    /// Takes the maps out of a freshly loaded object.
    pub fn take(ebpf: &mut Ebpf) -> Result<Tables, TableError> {
        let forward = take_map(ebpf, MAP_FORWARD)?;
        let reverse = take_map(ebpf, MAP_REVERSE)?;
        let stats = take_map(ebpf, MAP_STATS)?;
        let config = take_map(ebpf, MAP_CONFIG)?;
        Ok(Tables {
            forward: HashMap::try_from(forward).map_err(map_error(MAP_FORWARD, "opening"))?,
            reverse: HashMap::try_from(reverse).map_err(map_error(MAP_REVERSE, "opening"))?,
            stats: PerCpuHashMap::try_from(stats).map_err(map_error(MAP_STATS, "opening"))?,
            config: Some(Array::try_from(config).map_err(map_error(MAP_CONFIG, "opening"))?),
        })
    }

    /// Opens the pinned maps of a running dataplane, read-mostly (`plexus-agent portmap list`).
    pub fn open_pinned(pins: &PinDir) -> Result<Tables, TableError> {
        let open = |name| open_pinned_map(pins, name);
        Ok(Tables {
            forward: HashMap::try_from(open(MAP_FORWARD)?).map_err(map_error(MAP_FORWARD, "opening"))?,
            reverse: HashMap::try_from(open(MAP_REVERSE)?).map_err(map_error(MAP_REVERSE, "opening"))?,
            stats: PerCpuHashMap::try_from(open(MAP_STATS)?).map_err(map_error(MAP_STATS, "opening"))?,
            config: None,
        })
    }

    /// Tells the socket hooks which network namespace is the node's.
    pub fn set_netns_cookie(&mut self, netns_cookie: u64) -> Result<(), TableError> {
        if let Some(config) = &mut self.config {
            config
                .set(0, Config { netns_cookie }, 0)
                .map_err(map_error(MAP_CONFIG, "setting the netns cookie"))?;
        }
        Ok(())
    }

    pub fn install(&mut self, e: &Entry) -> Result<(), TableError> {
        let (host, pod) = (e.host_endpoint(), e.pod_endpoint());
        if self.stats.get(&host, 0).is_err() {
            self.stats
                .insert(host, per_cpu(Counters::default())?, 0)
                .map_err(map_error(MAP_STATS, format!("adding {e}")))?;
        }
        self.reverse.insert(pod, e.reverse(), 0).map_err(map_error(MAP_REVERSE, format!("adding {e}")))?;
        self.forward.insert(host, e.forward(), 0).map_err(map_error(MAP_FORWARD, format!("adding {e}")))
    }

    pub fn remove(&mut self, e: &Entry) -> Result<(), TableError> {
        let (host, pod) = (e.host_endpoint(), e.pod_endpoint());
        ignore_missing(self.forward.remove(&host))
            .map_err(map_error(MAP_FORWARD, format!("removing {e}")))?;
        ignore_missing(self.reverse.remove(&pod)).map_err(map_error(MAP_REVERSE, format!("removing {e}")))?;
        ignore_missing(self.stats.remove(&host)).map_err(map_error(MAP_STATS, format!("removing {e}")))
    }

    /// Why `e` is not installed exactly, if it is not.
    pub fn verify(&self, e: &Entry) -> Option<String> {
        match self.forward.get(&e.host_endpoint(), 0) {
            Ok(v) if v == e.forward() => {}
            Ok(_) => return Some(format!("the forward entry of {e} differs")),
            Err(_) => return Some(format!("the forward entry of {e} is missing")),
        }
        match self.reverse.get(&e.pod_endpoint(), 0) {
            Ok(v) if v == e.reverse() => None,
            Ok(_) => Some(format!("the reverse entry of {e} differs")),
            Err(_) => Some(format!("the reverse entry of {e} is missing")),
        }
    }

    /// Makes the maps hold exactly `desired`: stale entries go, missing or different ones are
    /// written. Counters of entries that stay are kept.
    pub fn reconcile(&mut self, desired: &[Entry]) -> Result<Reconciled, TableError> {
        let mut done = Reconciled::default();
        let want_fwd: BTreeMap<Endpoint, Rewrite> =
            desired.iter().map(|e| (e.host_endpoint(), e.forward())).collect();
        let want_rev: BTreeMap<Endpoint, Rewrite> =
            desired.iter().map(|e| (e.pod_endpoint(), e.reverse())).collect();
        let fwd_keys: Vec<Endpoint> = self.forward.keys().filter_map(Result::ok).collect();
        for k in fwd_keys.iter().filter(|k| !want_fwd.contains_key(k)) {
            ignore_missing(self.forward.remove(k))
                .map_err(map_error(MAP_FORWARD, "removing a stale entry"))?;
            done.removed += 1;
        }
        let rev_keys: Vec<Endpoint> = self.reverse.keys().filter_map(Result::ok).collect();
        for k in rev_keys.iter().filter(|k| !want_rev.contains_key(k)) {
            ignore_missing(self.reverse.remove(k))
                .map_err(map_error(MAP_REVERSE, "removing a stale entry"))?;
        }
        let stat_keys: Vec<Endpoint> = self.stats.keys().filter_map(Result::ok).collect();
        for k in stat_keys.iter().filter(|k| !want_fwd.contains_key(k)) {
            ignore_missing(self.stats.remove(k)).map_err(map_error(MAP_STATS, "removing stale counters"))?;
        }
        let present: BTreeSet<Endpoint> = fwd_keys.into_iter().collect();
        for e in desired {
            let intact = present.contains(&e.host_endpoint()) && self.verify(e).is_none();
            if !intact {
                self.install(e)?;
                done.restored += 1;
            }
        }
        Ok(done)
    }

    /// Every forward entry with its reverse value and summed counters.
    pub fn list(&self) -> Vec<(Endpoint, Rewrite, Counters)> {
        let mut out: Vec<(Endpoint, Rewrite, Counters)> = self
            .forward
            .iter()
            .filter_map(Result::ok)
            .map(|(host, fwd)| {
                let per_cpu = self.stats.get(&host, 0).ok();
                let total = per_cpu.iter().flat_map(|v| v.iter()).fold(Counters::default(), |mut t, c| {
                    t.packets_in += c.packets_in;
                    t.bytes_in += c.bytes_in;
                    t.packets_out += c.packets_out;
                    t.bytes_out += c.bytes_out;
                    t.local += c.local;
                    t
                });
                (host, fwd, total)
            })
            .collect();
        out.sort_by_key(|row| row.0);
        out
    }

    /// Every key of the reverse map (tests check that DEL leaves nothing behind).
    pub fn reverse_keys(&self) -> Vec<Endpoint> {
        self.reverse.keys().filter_map(Result::ok).collect()
    }

    pub fn stats_keys(&self) -> Vec<Endpoint> {
        self.stats.keys().filter_map(Result::ok).collect()
    }
}
