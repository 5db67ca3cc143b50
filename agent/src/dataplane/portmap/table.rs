//! The port mapping maps, as the agent writes and the `list` and `flows` subcommands read them.
//!
//! Write order makes every intermediate state safe for traffic: on install the counters come
//! first (a free index of the counters array, zeroed), then the port's bit in the unmapped
//! ports (the programs look the port up), and the forward entry naming the counters last, so
//! every packet translated towards the pod is counted; removal goes the other way, and a
//! mapping's flows go once its forward entry is gone (no new flow can be made for it then), so
//! no reply of it is translated after its DEL. Its counters are zeroed last, once no flow
//! names them.
//!
//! A mapping's counters index is its forward entry's ([`Rewrite::counters`]): the forward
//! entries are the one record of which indexes are taken, so a new mapping takes the lowest
//! index none of them names (the forward map holds at most as many entries as there are
//! indexes). The unmapped ports are written
//! by one writer at a time (the agent's, under its mapper; `doctor` removes entries no record
//! describes): a bit set for a port a forward entry has would hide that mapping.
//!
//! Flows are made by the programs only; the agent reads them, removes those of deleted
//! mappings, and reaps expired ones ([`Tables::reap`]). What it removes is counted in
//! [`STATS_AGENT`] of the flow counters, so created − removed − live is the kernel's evictions.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::fd::AsFd;
use std::sync::Mutex;

use aya::maps::{Array, HashMap, IterableMap, MapData, MapError, PerCpuArray, PerCpuValues};
use aya::Ebpf;
use plexus_ebpf_common::flow::{
    Flow, FlowKey, FlowStats, Settings, SockKey, Timeouts, MAP_FLOWS, MAP_FLOW_STATS, MAP_SOCKETS,
    STATS_AGENT, STATS_PROGRAMS,
};
use plexus_ebpf_common::{
    port_bit, Counters, Endpoint, Rewrite, COUNTER_SLOTS, MAP_COUNTERS, MAP_FORWARD, MAP_SETTINGS,
    MAP_UNMAPPED, NO_COUNTERS, UNMAPPED_WORDS,
};

use super::entries::Entry;
use crate::dataplane::batch;
pub use crate::dataplane::maps::TableError;
use crate::dataplane::maps::{ignore_missing, map_error, open_pinned_map, per_cpu, take_map};
use crate::dataplane::pin::PinDir;
use crate::dataplane::skip_bits::{all_set_but, SkipBits};

/// Serialises the read-modify-write of the agent's flow counters between the handles of one
/// process (the service's, the reaper's): the map has no atomic add from user space.
static AGENT_STATS: Mutex<()> = Mutex::new(());

/// The flag of a map update that only adds: it fails with EEXIST when the key is there.
const BPF_NOEXIST: u64 = 1;

pub struct Tables {
    forward: HashMap<MapData, Endpoint, Rewrite>,
    unmapped: SkipBits,
    counters: PerCpuArray<MapData, Counters>,
    settings: Array<MapData, Settings>,
    flows: HashMap<MapData, FlowKey, Flow>,
    flow_stats: PerCpuArray<MapData, FlowStats>,
    sockets: HashMap<MapData, SockKey, Endpoint>,
    /// The flow table's max_entries, as created (a pinned table keeps its size).
    capacity: u32,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables").field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

/// What reconciling the maps with the records did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub removed: usize,
    pub restored: usize,
    /// Flows of mappings that are gone.
    pub flows_removed: usize,
}

/// What a pass of the reaper found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Expired flows removed.
    pub removed: usize,
    /// Flows left in the table.
    pub live: usize,
}

fn opened(name: &'static str) -> impl FnOnce(MapError) -> TableError {
    map_error(name, "opening")
}

impl Tables {
    fn from_maps(
        open: &mut dyn FnMut(&'static str) -> Result<aya::maps::Map, TableError>,
    ) -> Result<Tables, TableError> {
        let flows: HashMap<MapData, FlowKey, Flow> =
            HashMap::try_from(open(MAP_FLOWS)?).map_err(opened(MAP_FLOWS))?;
        let capacity = flows.map().info().map_err(map_error(MAP_FLOWS, "reading its size"))?.max_entries();
        Ok(Tables {
            forward: HashMap::try_from(open(MAP_FORWARD)?).map_err(opened(MAP_FORWARD))?,
            unmapped: SkipBits::new(open(MAP_UNMAPPED)?, MAP_UNMAPPED)?,
            counters: PerCpuArray::try_from(open(MAP_COUNTERS)?).map_err(opened(MAP_COUNTERS))?,
            settings: Array::try_from(open(MAP_SETTINGS)?).map_err(opened(MAP_SETTINGS))?,
            flows,
            flow_stats: PerCpuArray::try_from(open(MAP_FLOW_STATS)?).map_err(opened(MAP_FLOW_STATS))?,
            sockets: HashMap::try_from(open(MAP_SOCKETS)?).map_err(opened(MAP_SOCKETS))?,
            capacity,
        })
    }

    /// Takes the maps out of a freshly loaded object. The unmapped ports are left as they are
    /// until [`Tables::reconcile`] writes them from the forward entries: programs of the
    /// previous run still attached read them too, and after an upgrade that renamed the forward
    /// map theirs is not this one (a map new to the pin directory has no bit set: every port is
    /// looked up).
    pub fn take(ebpf: &mut Ebpf) -> Result<Tables, TableError> {
        Tables::from_maps(&mut |name| take_map(ebpf, name))
    }

    /// Opens the pinned maps of a running (or stopped) dataplane: `plexus-agent portmap list`
    /// and `flows`, and the agent's reaper.
    pub fn open_pinned(pins: &PinDir) -> Result<Tables, TableError> {
        Tables::from_maps(&mut |name| open_pinned_map(pins, name))
    }

    /// Writes the programs' settings: the node's network namespace for the socket hooks, and
    /// the flow timeouts.
    pub fn set_settings(&mut self, s: &Settings) -> Result<(), TableError> {
        self.settings.set(0, *s, 0).map_err(map_error(MAP_SETTINGS, "writing the settings"))
    }

    /// Installs (or rewrites) the mapping of `e`; a mapping already installed keeps its
    /// counters.
    pub fn install(&mut self, e: &Entry) -> Result<(), TableError> {
        let host = e.host_endpoint();
        let counters = match self.forward.get(&host, 0) {
            Ok(installed) if counters_index(installed.counters).is_some() => installed.counters,
            _ => {
                let what = e.to_string();
                let free = self.free_counters(&what)?;
                self.zero_counters(free, &what)?;
                free
            }
        };
        self.set_port_mapped(host.port_be, true)?;
        let value = Rewrite { counters, ..e.forward() };
        self.forward.insert(host, value, 0).map_err(map_error(MAP_FORWARD, format!("adding {e}")))
    }

    /// The lowest counters index no forward entry names (`what`: the mapping, for errors).
    fn free_counters(&self, what: &str) -> Result<u32, TableError> {
        let taken: BTreeSet<u32> = self.forward_values()?.iter().map(|(_, v)| v.counters).collect();
        lowest_free_counters(&taken).ok_or_else(|| TableError::Full {
            map: MAP_COUNTERS,
            what: format!(
                "every one of its {} mappings' counters is taken, none is left for {what}",
                COUNTER_SLOTS - 1
            ),
        })
    }

    fn zero_counters(&mut self, index: u32, what: &str) -> Result<(), TableError> {
        self.counters
            .set(index, per_cpu(Counters::default())?, 0)
            .map_err(map_error(MAP_COUNTERS, format!("zeroing the counters of {what}")))
    }

    /// Every forward entry with its value, read in chunks.
    fn forward_values(&self) -> Result<Vec<(Endpoint, Rewrite)>, TableError> {
        batch::lookup_all::<Endpoint, Rewrite>(self.forward.map().fd().as_fd()).map_err(|source| {
            TableError::Batch { map: MAP_FORWARD, action: "reading the forward entries", source }
        })
    }

    /// Clears (`mapped`) or sets the bit of port `port_be` in the unmapped ports.
    fn set_port_mapped(&mut self, port_be: u16, mapped: bool) -> Result<(), TableError> {
        let what = || format!("writing the bit of port {}", u16::from_be(port_be));
        self.unmapped.set(port_bit(port_be), !mapped, what)
    }

    /// Writes every word of the unmapped ports that differs from what the forward entries say.
    fn sync_unmapped(&mut self) -> Result<(), TableError> {
        let ports: Vec<u16> = self.forward_keys().iter().map(|k| k.port_be).collect();
        self.unmapped.sync(&unmapped_words(&ports))
    }

    /// Removes a mapping: its forward entry, then its flows and the sockets remembered for it,
    /// then its counters.
    pub fn remove(&mut self, e: &Entry) -> Result<(), TableError> {
        self.remove_mapping(&e.host_endpoint(), &e.to_string())
    }

    /// [`Tables::remove`] by the mapping's host endpoint (`what` names it in errors): for
    /// entries no record describes (`plexus-agent doctor`).
    pub fn remove_mapping(&mut self, host: &Endpoint, what: &str) -> Result<(), TableError> {
        let host = *host;
        let counters = self.forward.get(&host, 0).ok().and_then(|v| counters_index(v.counters));
        ignore_missing(self.forward.remove(&host))
            .map_err(map_error(MAP_FORWARD, format!("removing {what}")))?;
        if !self.forward_keys().iter().any(|k| k.port_be == host.port_be) {
            self.set_port_mapped(host.port_be, false)?;
        }
        self.remove_flows_of(&host)?;
        self.remove_sockets_where(|h| *h == host)?;
        match counters {
            Some(index) => self.zero_counters(index, what),
            None => Ok(()),
        }
    }

    /// The host endpoint of every forward entry.
    pub fn forward_keys(&self) -> Vec<Endpoint> {
        self.forward.keys().filter_map(Result::ok).collect()
    }

    /// The host endpoints the socket hooks remember sockets for.
    pub fn socket_hosts(&self) -> BTreeSet<Endpoint> {
        let bound = 2 * plexus_ebpf_common::flow::MAX_SOCKETS as usize;
        self.sockets.iter().take(bound).filter_map(Result::ok).map(|(_, host)| host).collect()
    }

    /// Why `e` is not installed exactly, if it is not.
    pub fn verify(&self, e: &Entry) -> Option<String> {
        let host = e.host_endpoint();
        match self.forward.get(&host, 0) {
            Ok(v) if Rewrite { counters: NO_COUNTERS, ..v } != e.forward() => {
                return Some(format!("the forward entry of {e} differs"))
            }
            Ok(v) if counters_index(v.counters).is_none() => {
                return Some(format!("the forward entry of {e} names no counters"))
            }
            Err(_) => return Some(format!("the forward entry of {e} is missing")),
            Ok(_) => {}
        }
        match self.unmapped.get(port_bit(host.port_be)) {
            Some(false) => None,
            _ => Some(format!("port {} of {e} is marked unmapped", e.host_port)),
        }
    }

    /// Makes the maps hold exactly `desired`: stale entries go with their flows, missing or
    /// different ones are written. Counters and flows of entries that stay are kept (a restart
    /// loses no connection).
    pub fn reconcile(&mut self, desired: &[Entry]) -> Result<Reconciled, TableError> {
        let mut done = Reconciled::default();
        let want: BTreeMap<Endpoint, Rewrite> =
            desired.iter().map(|e| (e.host_endpoint(), e.forward())).collect();
        let installed = self.forward_values()?;
        let mut stale_counters = Vec::new();
        for (k, v) in installed.iter().filter(|(k, _)| !want.contains_key(k)) {
            ignore_missing(self.forward.remove(k))
                .map_err(map_error(MAP_FORWARD, "removing a stale entry"))?;
            stale_counters.extend(counters_index(v.counters));
            done.removed += 1;
        }
        // Flows of any mapping not wanted: those just removed, and those a crash left behind
        // between a forward entry's removal and its flows'.
        done.flows_removed = self.remove_flows_where(|f| !want.contains_key(&f.host))?;
        self.remove_sockets_where(|h| !want.contains_key(h))?;
        for index in stale_counters {
            self.zero_counters(index, "a stale entry")?;
        }
        let present: BTreeSet<Endpoint> = installed.into_iter().map(|(k, _)| k).collect();
        for e in desired {
            let intact = present.contains(&e.host_endpoint()) && self.verify(e).is_none();
            if !intact {
                self.install(e)?;
                done.restored += 1;
            }
        }
        self.sync_unmapped()?;
        Ok(done)
    }

    /// Every forward entry with its value and summed counters.
    pub fn list(&self) -> Vec<(Endpoint, Rewrite, Counters)> {
        let mut out: Vec<(Endpoint, Rewrite, Counters)> = self
            .forward
            .iter()
            .filter_map(Result::ok)
            .map(|(host, fwd)| {
                let per_cpu = counters_index(fwd.counters).and_then(|i| self.counters.get(&i, 0).ok());
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

    /// The counters indexes no forward entry names that hold counts: what a removal left
    /// behind (tests and `doctor`; one read per index, the whole array).
    pub fn stray_counters(&self) -> Vec<u32> {
        let named: BTreeSet<u32> =
            self.forward.iter().filter_map(Result::ok).map(|(_, v)| v.counters).collect();
        (1..COUNTER_SLOTS)
            .filter(|i| !named.contains(i))
            .filter(|i| self.counters.get(i, 0).is_ok_and(|v| v.iter().any(|c| *c != Counters::default())))
            .collect()
    }

    /// Every flow of the table, by key. The programs add and remove flows meanwhile: a flow
    /// made during the walk may be missing, none is listed twice.
    pub fn flows(&self) -> Vec<(FlowKey, Flow)> {
        let mut seen = BTreeMap::new();
        self.walk_flows(|k, f| {
            seen.insert(k, f);
        });
        seen.into_iter().collect()
    }

    /// The flow counters, summed over the CPUs and both writers (programs and agent).
    pub fn flow_stats(&self) -> FlowStats {
        let mut total = FlowStats::default();
        for index in [STATS_PROGRAMS, STATS_AGENT] {
            if let Ok(values) = self.flow_stats.get(&index, 0) {
                values.iter().for_each(|v| total.add(v));
            }
        }
        total
    }

    /// How many flows the table holds at most.
    pub fn flow_capacity(&self) -> u32 {
        self.capacity
    }

    /// Removes every flow of the mapping whose host endpoint is `host`; returns how many.
    pub fn remove_flows_of(&mut self, host: &Endpoint) -> Result<usize, TableError> {
        self.remove_flows_where(|f| f.host == *host)
    }

    /// Removes the flows expired at `now_ns` (the coarse monotonic clock of
    /// `bpf_ktime_get_coarse_ns`, see [`monotonic_ns`]); returns how many.
    pub fn reap(&mut self, now_ns: u64, timeouts: &Timeouts) -> Result<usize, TableError> {
        self.reap_counted(now_ns, timeouts).map(|r| r.removed)
    }

    /// [`Tables::reap`], also counting the flows left (those read that were not expired).
    ///
    /// The table is read once, in chunks, for the keys of the flows expired at `now_ns`. A flow
    /// may be refreshed after it was read (a new packet, or the forward path overwrote it with a
    /// new flow), so each key is removed in one step that returns the flow as it was when
    /// removed ([`batch::lookup_and_delete`]): a flow no longer expired then goes back as it
    /// was, unless the programs have made a new flow on its key meanwhile, which stays. So only
    /// a packet in the microseconds between the removal of a refreshed flow and its reinsertion
    /// can miss it. The table is not read a second time: one system call per expired flow
    /// instead.
    pub fn reap_counted(&mut self, now_ns: u64, timeouts: &Timeouts) -> Result<Reaped, TableError> {
        let (expired, seen) = self.expired_keys(now_ns, timeouts);
        let removed = self.remove_if_expired(&expired, now_ns, timeouts)?;
        Ok(Reaped { removed, live: seen.saturating_sub(expired.len()) })
    }

    /// The keys of the flows expired at `now_ns`, and how many flows were read: the read of a
    /// pass of the reaper.
    fn expired_keys(&self, now_ns: u64, timeouts: &Timeouts) -> (Vec<FlowKey>, usize) {
        let mut expired = Vec::new();
        let mut seen = 0usize;
        self.walk_flows(|k, f| {
            seen += 1;
            if timeouts.expired(&f, now_ns) {
                expired.push(k);
            }
        });
        (expired, seen)
    }

    /// Removes the flows of `keys` that are expired at `now_ns` when removed; returns how many.
    /// A flow refreshed since it was read goes back (see [`Tables::reap_counted`]); a key gone
    /// already was removed, and counted, by the programs. Every flow this removes and does not
    /// put back is added to the agent's `removed` counter.
    fn remove_if_expired(
        &mut self,
        keys: &[FlowKey],
        now_ns: u64,
        timeouts: &Timeouts,
    ) -> Result<usize, TableError> {
        let mut expired = 0usize;
        // Refreshed flows removed that could not go back: the programs made a new flow on the
        // key (counted as created, so this one must count as removed), or the insert failed.
        let mut replaced = 0usize;
        let result = keys.iter().try_for_each(|k| {
            let fd = self.flows.map().fd().as_fd();
            let flow = batch::lookup_and_delete::<FlowKey, Flow>(fd, k).map_err(|source| {
                TableError::Batch { map: MAP_FLOWS, action: "removing an expired flow", source }
            })?;
            match flow {
                None => Ok(()),
                Some(f) if timeouts.expired(&f, now_ns) => {
                    expired += 1;
                    Ok(())
                }
                Some(f) => match self.flows.insert(*k, f, BPF_NOEXIST) {
                    Ok(()) => Ok(()),
                    Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::EEXIST) => {
                        replaced += 1;
                        Ok(())
                    }
                    Err(e) => {
                        replaced += 1;
                        Err(map_error(MAP_FLOWS, "putting back a flow refreshed while reaping")(e))
                    }
                },
            }
        });
        // What was removed is counted, also when a removal failed.
        self.count_removed(expired + replaced)?;
        result.map(|()| expired)
    }

    fn remove_flows_where(&mut self, pick: impl Fn(&Flow) -> bool) -> Result<usize, TableError> {
        let mut keys = BTreeSet::new();
        self.walk_flows(|k, f| {
            if pick(&f) {
                keys.insert(k);
            }
        });
        let keys: Vec<FlowKey> = keys.into_iter().collect();
        let removed = self.remove_flows(&keys)?;
        self.count_removed(removed)?;
        Ok(removed)
    }

    /// Calls `each` on the flows of the table, read in chunks as it goes
    /// ([`batch::lookup_each`]). Should the batch read fail, the table is walked key by key from
    /// its start, so flows passed before the failure are passed again; the kernel's walk (next
    /// key after the last one read) starts over when that key vanished meanwhile, so a table
    /// changing under it could be walked for long, and pass flows twice: that walk stops after
    /// twice the table's size.
    fn walk_flows(&self, mut each: impl FnMut(FlowKey, Flow)) {
        let fd = self.flows.map().fd().as_fd();
        if let Err(e) = batch::lookup_each::<FlowKey, Flow>(fd, |k, f| each(*k, *f)) {
            tracing::debug!("reading the flow table in chunks: {e}; reading it key by key");
            let bound = 2 * self.capacity as usize + 16;
            for (k, f) in self.flows.iter().take(bound).filter_map(Result::ok) {
                each(k, f);
            }
        }
    }

    /// Removes flows; returns how many were there (those gone already were removed, and
    /// counted, by the programs).
    fn remove_flows(&mut self, keys: &[FlowKey]) -> Result<usize, TableError> {
        batch::delete_all(self.flows.map().fd().as_fd(), keys).map_err(|source| TableError::Batch {
            map: MAP_FLOWS,
            action: "removing flows",
            source,
        })
    }

    /// Adds `n` to the agent's `removed` counter (index [`STATS_AGENT`], CPU 0's slot).
    fn count_removed(&mut self, n: usize) -> Result<(), TableError> {
        if n == 0 {
            return Ok(());
        }
        let _only = AGENT_STATS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut values: Vec<FlowStats> = match self.flow_stats.get(&STATS_AGENT, 0) {
            Ok(v) => v.to_vec(),
            Err(_) => vec![FlowStats::default(); crate::dataplane::maps::cpus()?],
        };
        if let Some(first) = values.first_mut() {
            first.removed += n as u64;
        }
        let values = PerCpuValues::try_from(values)
            .map_err(|source| TableError::Cpus { what: "the per-CPU flow counters", source })?;
        self.flow_stats
            .set(STATS_AGENT, values, 0)
            .map_err(map_error(MAP_FLOW_STATS, "counting removed flows"))
    }

    /// Removes the sockets the hooks remember for host endpoints `pick` selects.
    fn remove_sockets_where(&mut self, pick: impl Fn(&Endpoint) -> bool) -> Result<(), TableError> {
        let bound = 2 * plexus_ebpf_common::flow::MAX_SOCKETS as usize;
        let keys: HashSet<SockKey> = self
            .sockets
            .iter()
            .take(bound)
            .filter_map(Result::ok)
            .filter(|(_, host)| pick(host))
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            ignore_missing(self.sockets.remove(&k)).map_err(map_error(MAP_SOCKETS, "removing a socket"))?;
        }
        Ok(())
    }

    /// Adds a flow as the programs would: tests plant flows with it (the agent never makes
    /// flows).
    pub fn insert_flow(&mut self, k: FlowKey, f: Flow) -> Result<(), TableError> {
        self.flows.insert(k, f, 0).map_err(map_error(MAP_FLOWS, "adding a flow"))
    }

    /// Adds a socket as the hooks would (tests).
    #[cfg(test)]
    pub(crate) fn insert_socket(&mut self, k: SockKey, host: Endpoint) -> Result<(), TableError> {
        self.sockets.insert(k, host, 0).map_err(map_error(MAP_SOCKETS, "adding a socket"))
    }

    /// Every key of the sockets table (tests).
    #[cfg(test)]
    pub(crate) fn socket_keys(&self) -> Vec<SockKey> {
        self.sockets.keys().filter_map(Result::ok).collect()
    }

    /// The forward value installed for `e`, its counters index included (tests).
    #[cfg(test)]
    pub(crate) fn installed(&self, e: &Entry) -> Option<Rewrite> {
        self.forward.get(&e.host_endpoint(), 0).ok()
    }

    /// Writes the forward value of `e` as given (tests of what `verify` reports).
    #[cfg(test)]
    pub(crate) fn set_installed(&mut self, e: &Entry, value: Rewrite) {
        self.forward.insert(e.host_endpoint(), value, 0).expect("writing a forward entry");
    }

    /// Whether the unmapped ports have port `port` (host order) as mapped (tests).
    #[cfg(test)]
    pub(crate) fn port_looked_up(&self, port: u16) -> bool {
        self.unmapped.get(port_bit(port.to_be())) == Some(false)
    }

    /// Marks port `port` (host order) unmapped whatever the forward entries say (tests).
    #[cfg(test)]
    pub(crate) fn mark_unmapped(&mut self, port: u16) {
        self.set_port_mapped(port.to_be(), false).expect("writing the unmapped ports");
    }
}

/// `index` when it names a mapping's counters.
fn counters_index(index: u32) -> Option<u32> {
    (index != NO_COUNTERS && index < COUNTER_SLOTS).then_some(index)
}

/// The lowest counters index not `taken`, if any is left.
fn lowest_free_counters(taken: &BTreeSet<u32>) -> Option<u32> {
    (1..COUNTER_SLOTS).find(|i| !taken.contains(i))
}

/// The words of the unmapped ports when the forward entries have `ports` (network byte order):
/// every bit set but theirs.
fn unmapped_words(ports: &[u16]) -> Vec<u64> {
    all_set_but(UNMAPPED_WORDS, ports.iter().map(|p| port_bit(*p)))
}

/// Now on CLOCK_MONOTONIC_COARSE, the clock of `bpf_ktime_get_coarse_ns`, in nanoseconds: the
/// time base of [`Flow::created_ns`] and [`Flow::seen_ns`]. Both read the timekeeper's last
/// tick, so a flow the programs stamp is never later than the agent's now.
pub fn monotonic_ns() -> Result<u64, nix::Error> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE)?;
    let (secs, nanos) = (u64::try_from(t.tv_sec()).unwrap_or(0), u64::try_from(t.tv_nsec()).unwrap_or(0));
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// The maps of a freshly loaded object (not pinned), with flows written from user space as the
/// programs would make them. Needs root (CAP_BPF) and the object with the flow table.
#[cfg(test)]
mod kernel_tests {
    use plexus_ebpf_common::flow::{FLOW_FIN_CLIENT, FLOW_FIN_POD, FLOW_REPLIED, FLOW_RST, NSEC_PER_SEC};
    use plexus_ebpf_common::{PROTO_TCP, PROTO_UDP};

    use super::*;
    use crate::dataplane::attach::Hook;
    use crate::dataplane::loader::Loaded;
    use crate::dataplane::maps::addr_words;
    use crate::dataplane::portmap::mapper;
    use crate::spec::selection::Protocol;

    const S: u64 = NSEC_PER_SEC;

    fn tables(max_flows: u32) -> (Loaded, Tables) {
        let mut loaded =
            mapper::load_with(None, max_flows).expect("loading the BPF object (run the tests as root)");
        let tables = Tables::take(loaded.ebpf_mut()).expect("maps");
        (loaded, tables)
    }

    fn entry(protocol: Protocol, host_port: u16, pod: &str, container_port: u16) -> Entry {
        Entry {
            protocol,
            host_ip: "10.77.0.1".parse().unwrap(),
            host_port,
            pod_ip: pod.parse().unwrap(),
            container_port,
            pod_mac: "0a:58:00:00:00:05".into(),
            host_mac: "02:00:00:00:00:01".into(),
            deliver_ifindex: 7,
            deliver: Hook::Egress,
            via_bridge: false,
            xdp_redirect: false,
        }
    }

    /// A flow of `e` from client 10.0.0.<n>:<40000+n>, last seen at `seen_s` seconds.
    fn flow_of(e: &Entry, n: u8, state: u8, seen_s: u64) -> (FlowKey, Flow) {
        let client = addr_words(std::net::IpAddr::from([10, 0, 0, n]));
        let port = (40000 + u16::from(n)).to_be();
        let pod = e.pod_endpoint();
        let key = FlowKey::new(pod.addr, pod.port_be, client, port, pod.proto);
        let flow = Flow {
            host: e.host_endpoint(),
            client,
            client_port: port,
            state,
            rewrite: e.forward(),
            created_ns: S,
            seen_ns: seen_s * S,
            ..Flow::default()
        };
        (key, flow)
    }

    fn keys(t: &Tables) -> BTreeSet<FlowKey> {
        t.flows().into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn the_unmapped_ports_follow_the_forward_entries() {
        let (_loaded, mut t) = tables(1024);
        let looked_up = |t: &Tables| (0..=u16::MAX).filter(|p| t.port_looked_up(*p)).collect::<Vec<u16>>();
        assert_eq!(looked_up(&t).len(), 65536, "a fresh map looks up every port");
        t.reconcile(&[]).unwrap();
        assert_eq!(looked_up(&t), Vec::<u16>::new(), "reconciled with no mapping, none");
        // The same host port in two protocols and on two host IPs, and another port.
        let tcp = entry(Protocol::Tcp, 8080, "10.77.0.5", 80);
        let udp = entry(Protocol::Udp, 8080, "10.77.0.5", 80);
        let other_ip = Entry { host_ip: "10.77.0.2".parse().unwrap(), ..tcp.clone() };
        let dns = entry(Protocol::Udp, 53, "10.77.0.6", 53);
        for e in [&tcp, &udp, &other_ip, &dns] {
            t.install(e).unwrap();
            assert_eq!(t.verify(e), None);
        }
        assert_eq!(looked_up(&t), vec![53, 8080]);
        t.remove(&tcp).unwrap();
        t.remove(&udp).unwrap();
        assert_eq!(looked_up(&t), vec![53, 8080], "another mapping still has 8080");
        t.remove(&other_ip).unwrap();
        assert_eq!(looked_up(&t), vec![53], "the last mapping of 8080 is gone");

        // A bit wrongly set hides the mapping: verify says so, reconcile mends it.
        t.mark_unmapped(53);
        assert_eq!(t.verify(&dns), Some(format!("port 53 of {dns} is marked unmapped")));
        let done = t.reconcile(std::slice::from_ref(&dns)).unwrap();
        assert_eq!(done.restored, 1);
        assert_eq!((t.verify(&dns), looked_up(&t)), (None, vec![53]));
        // Reconcile sets the bits of the ports it removes.
        t.reconcile(&[]).unwrap();
        assert_eq!(looked_up(&t), Vec::<u16>::new());
    }

    #[test]
    fn the_flow_table_has_the_size_asked_and_starts_empty() {
        let (_loaded, t) = tables(2048);
        assert_eq!(t.flow_capacity(), 2048);
        assert!(t.flows().is_empty());
        assert_eq!(t.flow_stats(), FlowStats::default());
    }

    #[test]
    fn removing_a_mapping_removes_exactly_its_flows_and_sockets_and_counts_them() {
        let (_loaded, mut t) = tables(1024);
        // Two host ports to one container port, and another pod.
        let a = entry(Protocol::Tcp, 8080, "10.77.0.5", 80);
        let b = entry(Protocol::Tcp, 8081, "10.77.0.5", 80);
        let c = entry(Protocol::Udp, 5353, "10.77.0.6", 53);
        for e in [&a, &b, &c] {
            t.install(e).unwrap();
        }
        let mut kept = BTreeSet::new();
        for (e, n) in [(&a, 1), (&a, 2), (&a, 3), (&b, 4), (&c, 5)] {
            let (k, f) = flow_of(e, n, FLOW_REPLIED, 10);
            t.insert_flow(k, f).unwrap();
            if e.host_port != 8080 {
                kept.insert(k);
            }
        }
        let sock = |cookie: u64, e: &Entry| SockKey { cookie, pod: e.pod_endpoint(), pad: 0 };
        t.insert_socket(sock(1, &a), a.host_endpoint()).unwrap();
        t.insert_socket(sock(2, &b), b.host_endpoint()).unwrap();
        assert_eq!(
            crate::dataplane::portmap::flows::counts_by_host(&t.flows()).get(&a.host_endpoint()),
            Some(&3)
        );

        t.remove(&a).unwrap();
        assert_eq!(keys(&t), kept, "the flows of 8080 went, the others stay");
        assert_eq!(t.socket_keys(), [sock(2, &b)]);
        assert_eq!(t.flow_stats().removed, 3);
        assert_eq!(
            t.verify(&a).as_deref(),
            Some("the forward entry of 10.77.0.1:8080/tcp -> 10.77.0.5:80/tcp is missing")
        );
        assert_eq!(t.verify(&b), None);

        assert_eq!(t.remove_flows_of(&c.host_endpoint()).unwrap(), 1);
        assert_eq!(t.remove_flows_of(&c.host_endpoint()).unwrap(), 0, "nothing left to remove");
        assert_eq!(t.flow_stats().removed, 4);
        t.remove(&a).unwrap();
        assert_eq!(t.flow_stats().removed, 4, "removing again removes nothing");
    }

    #[test]
    fn reaping_removes_exactly_the_expired_flows_and_counts_them() {
        let (_loaded, mut t) = tables(1024);
        let tcp = entry(Protocol::Tcp, 8080, "10.77.0.5", 80);
        let udp = entry(Protocol::Udp, 5353, "10.77.0.5", 53);
        let timeouts = Timeouts::default();
        let now_s = 1000;
        // (entry, client, state, last seen, expired at now?)
        let cases = [
            (&tcp, 1, 0, now_s - 120, false),                     // syn: 120 s
            (&tcp, 2, 0, now_s - 121, true),                      // syn, past
            (&tcp, 3, FLOW_REPLIED, 10, false),                   // established: 5 days
            (&tcp, 4, FLOW_REPLIED | FLOW_RST, now_s - 11, true), // reset: 10 s
            (&tcp, 5, FLOW_REPLIED | FLOW_RST, now_s - 9, false),
            (&tcp, 6, FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD, now_s - 121, true), // closed: 120 s
            (&tcp, 7, FLOW_REPLIED | FLOW_FIN_CLIENT, now_s - 121, false), // closing: established
            (&udp, 8, 0, now_s - 31, true),                                // udp: 30 s
            (&udp, 9, FLOW_REPLIED, now_s - 31, false),                    // replied: 120 s
            (&udp, 10, FLOW_REPLIED, now_s - 200, true),
            (&udp, 11, 0, now_s + 5, false), // seen "after" now
        ];
        let mut live = BTreeSet::new();
        for (e, n, state, seen, expired) in cases {
            let (k, f) = flow_of(e, n, state, seen);
            t.insert_flow(k, f).unwrap();
            if !expired {
                live.insert(k);
            }
        }
        let reaped = t.reap_counted(now_s * S, &timeouts).unwrap();
        assert_eq!(reaped, Reaped { removed: 5, live: 6 });
        assert_eq!(keys(&t), live);
        assert_eq!(t.flow_stats().removed, 5);
        assert_eq!(t.reap(now_s * S, &timeouts).unwrap(), 0, "a second pass finds nothing");
        // Shorter timeouts expire more.
        let short = Timeouts { udp_stream: S, tcp_syn: S, ..timeouts };
        assert_eq!(t.reap(now_s * S, &short).unwrap(), 2);
        assert_eq!(t.flow_stats().removed, 7);
        assert_eq!(
            t.flows().iter().map(|(_, f)| (f.host.proto, f.state)).collect::<BTreeSet<_>>(),
            [
                (PROTO_TCP, FLOW_REPLIED),
                (PROTO_TCP, FLOW_REPLIED | FLOW_RST),
                (PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT),
                (PROTO_UDP, 0)
            ]
            .into_iter()
            .collect()
        );
    }

    /// Between the reaper's read and its removal, a packet refreshes one expired flow and the
    /// programs remove another: the refreshed one stays as refreshed, the one gone is not
    /// counted, the other expired flows go.
    #[test]
    fn reaping_keeps_a_flow_refreshed_after_the_read_and_skips_one_gone_meanwhile() {
        let (_loaded, mut t) = tables(1024);
        let udp = entry(Protocol::Udp, 5353, "10.77.0.5", 53);
        let timeouts = Timeouts::default();
        let now_s = 1000;
        // Clients 1 to 5 expired (UDP, no reply: 30 s), 6 and 7 not.
        let flows: Vec<(FlowKey, Flow)> =
            (1..=7).map(|n| flow_of(&udp, n, 0, if n <= 5 { now_s - 31 } else { now_s - 1 })).collect();
        for (k, f) in &flows {
            t.insert_flow(*k, *f).unwrap();
        }
        let (expired, seen) = t.expired_keys(now_s * S, &timeouts);
        assert_eq!(seen, 7);
        assert_eq!(
            expired.iter().copied().collect::<BTreeSet<_>>(),
            flows[..5].iter().map(|(k, _)| *k).collect::<BTreeSet<_>>()
        );

        // A reply refreshes client 1's flow; the programs remove client 2's.
        let refreshed = flow_of(&udp, 1, FLOW_REPLIED, now_s);
        t.insert_flow(refreshed.0, refreshed.1).unwrap();
        t.flows.remove(&flows[1].0).unwrap();

        assert_eq!(t.remove_if_expired(&expired, now_s * S, &timeouts).unwrap(), 3, "clients 3 to 5");
        assert_eq!(t.flow_stats().removed, 3);
        let left: BTreeMap<FlowKey, Flow> = t.flows().into_iter().collect();
        assert_eq!(left, [refreshed, flows[5], flows[6]].into_iter().collect(), "refreshed as refreshed");
    }

    #[test]
    fn reconciling_removes_the_flows_of_mappings_that_are_gone() {
        let (_loaded, mut t) = tables(1024);
        let keep = entry(Protocol::Tcp, 8080, "10.77.0.5", 80);
        let stale = entry(Protocol::Tcp, 8081, "10.77.0.6", 80);
        t.install(&keep).unwrap();
        t.install(&stale).unwrap();
        let (k1, f1) = flow_of(&keep, 1, FLOW_REPLIED, 10);
        let (k2, f2) = flow_of(&stale, 2, FLOW_REPLIED, 10);
        // A flow of a mapping whose forward entry is gone already (a crash during a DEL).
        let orphan = entry(Protocol::Udp, 53, "10.77.0.7", 53);
        let (k3, f3) = flow_of(&orphan, 3, 0, 10);
        for (k, f) in [(k1, f1), (k2, f2), (k3, f3)] {
            t.insert_flow(k, f).unwrap();
        }
        let done = t.reconcile(std::slice::from_ref(&keep)).unwrap();
        assert_eq!(done, Reconciled { removed: 1, restored: 0, flows_removed: 2 });
        assert_eq!(keys(&t), [k1].into_iter().collect());
        assert_eq!(t.flow_stats().removed, 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmapped_words_have_every_bit_but_the_ports_given() {
        let all = unmapped_words(&[]);
        assert_eq!(all.len(), UNMAPPED_WORDS as usize);
        assert!(all.iter().all(|w| *w == u64::MAX));
        let words =
            unmapped_words(&[0u16.to_be(), 63u16.to_be(), 64u16.to_be(), 65535u16.to_be(), 64u16.to_be()]);
        assert_eq!(words[0], !(1 | 1 << 63));
        assert_eq!(words[1], !1);
        assert_eq!(words[1023], !(1 << 63));
        assert_eq!(
            words.iter().map(|w| w.count_zeros()).sum::<u32>(),
            4,
            "a port given twice clears one bit"
        );
    }

    #[test]
    fn a_new_mapping_takes_the_lowest_counters_index_none_names() {
        assert_eq!(lowest_free_counters(&BTreeSet::new()), Some(1), "index 0 is no mapping's");
        assert_eq!(lowest_free_counters(&[NO_COUNTERS, 1, 2, 4].into()), Some(3));
        assert_eq!(lowest_free_counters(&[2, COUNTER_SLOTS + 5].into()), Some(1));
        let all: BTreeSet<u32> = (1..COUNTER_SLOTS).collect();
        assert_eq!(all.len(), plexus_ebpf_common::MAX_MAPPINGS as usize, "an index for every mapping");
        assert_eq!(lowest_free_counters(&all), None);
        let mut one_free = all.clone();
        one_free.remove(&(COUNTER_SLOTS - 1));
        assert_eq!(lowest_free_counters(&one_free), Some(COUNTER_SLOTS - 1));
    }

    #[test]
    fn only_indexes_of_the_array_but_zero_name_counters() {
        assert_eq!(counters_index(NO_COUNTERS), None);
        assert_eq!(counters_index(1), Some(1));
        assert_eq!(counters_index(COUNTER_SLOTS - 1), Some(COUNTER_SLOTS - 1));
        assert_eq!(counters_index(COUNTER_SLOTS), None);
        assert_eq!(counters_index(u32::MAX), None);
    }
}

#[cfg(test)]
mod batch_kernel_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::dataplane::portmap::mapper;

    fn flow(n: u32) -> (FlowKey, Flow) {
        let peer = [0, 0, plexus_ebpf_common::V4_MAPPED_WORD2, n.to_be()];
        let key = FlowKey::new([1, 2, 3, 4], 80u16.to_be(), peer, (n as u16).to_be(), 6);
        (key, Flow { client: peer, seen_ns: u64::from(n), ..Flow::default() })
    }

    /// The chunked read returns exactly what the key-by-key walk does, on a table large enough
    /// to take several chunks, and the chunked removal skips keys already gone.
    #[test]
    fn kernel_flows_are_read_and_removed_in_chunks() {
        let mut loaded =
            mapper::load_with(None, 20_000).expect("loading the BPF object (run the tests as root)");
        let mut t = Tables::take(loaded.ebpf_mut()).expect("maps");
        let want: BTreeMap<FlowKey, Flow> = (1..=10_000).map(flow).collect();
        for (k, f) in &want {
            t.insert_flow(*k, *f).unwrap();
        }
        let chunked = batch::lookup_all::<FlowKey, Flow>(t.flows.map().fd().as_fd()).expect("batch read");
        assert_eq!(chunked.len(), want.len(), "no entry missing or twice");
        assert_eq!(chunked.into_iter().collect::<BTreeMap<_, _>>(), want);
        // Streamed, chunk by chunk: every entry once.
        let mut streamed = BTreeMap::new();
        batch::lookup_each::<FlowKey, Flow>(t.flows.map().fd().as_fd(), |k, f| {
            assert_eq!(streamed.insert(*k, *f), None, "{k:?} passed twice");
        })
        .expect("streamed read");
        assert_eq!(streamed, want);
        let by_key: BTreeMap<FlowKey, Flow> = t.flows.iter().filter_map(Result::ok).collect();
        assert_eq!(by_key, want);

        // Remove the even ones, three of them already gone.
        for n in [2u32, 500, 9_998] {
            t.flows.remove(&flow(n).0).unwrap();
        }
        let even: Vec<FlowKey> = (1..=5_000).map(|i| flow(2 * i).0).collect();
        assert_eq!(t.remove_flows(&even).unwrap(), 5_000 - 3);
        let left: BTreeMap<FlowKey, Flow> = t.flows().into_iter().collect();
        assert_eq!(left, (0..5_000).map(|i| flow(2 * i + 1)).collect());
        assert_eq!(t.remove_flows(&[]).unwrap(), 0);
    }
}
