//! Bandwidth limits (NPWG 4.1.2.1.8) of secondary attachments, in eBPF instead of tbf and ifb.
//!
//! The programs of `ebpf/programs/src/bandwidth` run on the host-side hooks of the attachment
//! (see [`plan`]) and enforce each limit with a token bucket (or EDT pacing where the device has
//! an fq qdisc), with the state in a map: an ADD is a netlink dump, two map updates and at most
//! two TCX attachments; a limit changes in place, without re-creating the pod.
//!
//! - [`config`]: the plugin's config and `runtimeConfig.bandwidth`;
//! - [`plan`]: where limits go and the bucket arithmetic's parameters (pure);
//! - [`table`]: the BPF maps; [`store`]: durable records; [`qdisc`]: EDT or not;
//! - [`plugin`]: the `plexus-bandwidth` CNI plugin type; [`list`]: `plexus-agent bandwidth`.

pub mod config;
pub mod list;
pub mod plan;
pub mod plugin;
pub mod qdisc;
pub mod store;
pub mod table;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, MutexGuard};

use super::loader::{Attach, LoadError, Loaded, BANDWIDTH, BANDWIDTH_PIN_SUBDIR};
use super::pin::{PinDir, PinError};
use super::portmap::topology::AttachPoint;
use super::service::{load_records, node_interfaces, stale, Gate, Key, State};
use super::DataplaneOptions;
use config::Limits;
use plan::Direction;
use store::{Record, Store, StoreError};
use table::{Table, TableError};

#[derive(Debug, thiserror::Error)]
pub enum BandwidthError {
    #[error("the eBPF dataplane is not available, so bandwidth limits cannot be installed: {0}")]
    Unavailable(String),
    #[error("{what} is already limited for {owner}")]
    Conflict { what: String, owner: String },
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Place(#[from] plan::PlaceError),
    #[error("{0}")]
    Netdev(String),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("bandwidth limits of {attachment} are not in place: {what}")]
    Check { attachment: String, what: String },
    #[error("container {container_id} interface {ifname} has no bandwidth limits recorded")]
    NotFound { container_id: String, ifname: String },
    #[error(
        "container {container_id} interface {ifname} has no {direction} limit to change; a new direction needs the \
         attachment re-created (its hooks are attached at ADD)"
    )]
    NoSuchDirection { container_id: String, ifname: String, direction: &'static str },
}

impl BandwidthError {
    /// Errors the user fixes in the config or the pod's request (CNI code 7); the rest are the
    /// node's.
    pub fn is_config(&self) -> bool {
        matches!(self, BandwidthError::Conflict { .. } | BandwidthError::Config(_) | BandwidthError::Place(_))
    }
}

/// The loaded shaping object and its maps.
pub struct Shaper {
    pub loaded: Loaded,
    pub table: Table,
}

impl std::fmt::Debug for Shaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shaper").finish_non_exhaustive()
    }
}

impl Shaper {
    /// Loads the object with its maps, programs and links pinned under `<pin_dir>/bandwidth`.
    pub fn start(pin_dir: &Path) -> Result<Shaper, BandwidthError> {
        let pins = PinDir::prepare(&pin_dir.join(BANDWIDTH_PIN_SUBDIR))?;
        let mut loaded = Loaded::load_object(&BANDWIDTH, Some(pins))?;
        let table = Table::take(loaded.ebpf_mut())?;
        Ok(Shaper { loaded, table })
    }
}

type Inner = State<Shaper, Record>;

/// The bandwidth service of the agent: the shaping object, the records and the rules between
/// attachments (shared hooks, one limit per key).
pub struct Bandwidth {
    store: Store,
    gate: Gate<Shaper, Record>,
}

impl std::fmt::Debug for Bandwidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bandwidth").field("store", &self.store).finish_non_exhaustive()
    }
}

impl Bandwidth {
    /// Loads the object and reconciles the maps and hooks with the records of `state_dir`, in
    /// the background (operations wait for it). Never fails: without the object, ADDs asking
    /// for limits fail saying why.
    pub fn start(opts: &DataplaneOptions, state_dir: &Path) -> Arc<Bandwidth> {
        let bw = Arc::new(Bandwidth { store: Store::new(state_dir), gate: Gate::default() });
        let (service, pin_dir) = (bw.clone(), opts.pin_dir.clone());
        tokio::spawn(async move {
            let existing = node_interfaces().await;
            let loader = service.clone();
            let loading =
                tokio::task::spawn_blocking(move || loader.load(Shaper::start(&pin_dir), existing.as_ref()))
                    .await;
            if let Err(e) = loading {
                service
                    .gate
                    .publish(State::loaded(Err(format!("the loading task failed: {e}")), BTreeMap::new()));
            }
        });
        bw
    }

    fn load(&self, shaper: Result<Shaper, BandwidthError>, existing: Option<&BTreeSet<(u32, String)>>) {
        let records = match load_records(&self.store) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("bandwidth: {e}");
                return self.gate.publish(State::loaded(Err(e.to_string()), BTreeMap::new()));
            }
        };
        let shaper = shaper.map_err(|e| e.to_string());
        if let Err(e) = &shaper {
            tracing::warn!(
                "the eBPF dataplane is not available, so bandwidth limits cannot be installed: {e}"
            );
        }
        let mut inner = State::loaded(shaper, records);
        match reconcile(&mut inner, existing) {
            Ok((records, removed, restored, detached)) => tracing::info!(
                records,
                removed,
                restored,
                detached,
                "bandwidth limits reconciled with the state"
            ),
            Err(e) => tracing::warn!("bandwidth: {e}"),
        }
        self.gate.publish(inner);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.gate.lock()
    }

    /// Installs an attachment's limits (replacing its previous ones, if any).
    pub fn add(&self, record: Record) -> Result<(), BandwidthError> {
        let mut inner = self.lock();
        let key: Key = (record.container_id.clone(), record.ifname.clone());
        let Inner { dataplane: shaper, records, .. } = &mut *inner;
        let sh = shaper.as_mut().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
        if let Some(conflict) = conflict(records, &key, &record) {
            return Err(conflict);
        }
        if let Some(previous) = records.remove(&key) {
            remove_entries(sh, &previous)?;
            detach_unused(sh, &previous, records, &record.hooks);
        }
        self.store.save(&record)?;
        let installed = (|| -> Result<(), BandwidthError> {
            // Limits before programs: the first packet the program sees is already limited.
            for e in &record.entries {
                sh.table.install(e)?;
            }
            for p in &record.hooks {
                sh.loaded.attach_point(p)?;
            }
            Ok(())
        })();
        if let Err(e) = installed {
            let _ = remove_entries(sh, &record);
            let _ = self.store.remove(&record.container_id, &record.ifname);
            detach_unused(sh, &record, records, &[]);
            return Err(e);
        }
        records.insert(key, record);
        Ok(())
    }

    /// Removes an attachment's limits; nothing recorded is fine (DEL is idempotent).
    pub fn del(&self, container_id: &str, ifname: &str) -> Result<(), BandwidthError> {
        let mut inner = self.lock();
        let Inner { dataplane: shaper, records, .. } = &mut *inner;
        let key: Key = (container_id.to_owned(), ifname.to_owned());
        let Some(record) = records.get(&key).cloned() else {
            // A record written by an agent that crashed before remembering it.
            return self.store.remove(container_id, ifname).map_err(Into::into);
        };
        let sh = shaper.as_mut().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
        remove_entries(sh, &record)?;
        self.store.remove(container_id, ifname)?;
        records.remove(&key);
        detach_unused(sh, &record, records, &[]);
        tracing::info!(container = %container_id, ifname = %ifname, "bandwidth limits removed");
        Ok(())
    }

    /// Verifies that the attachment's limits are installed as recorded (the record on disk,
    /// which `plexus-agent bandwidth set` may have changed) and its hooks attached.
    pub fn check(&self, container_id: &str, ifname: &str, expect_some: bool) -> Result<(), BandwidthError> {
        let inner = self.lock();
        let attachment = format!("container {container_id} interface {ifname}");
        let fail = |what: String| BandwidthError::Check { attachment: attachment.clone(), what };
        let Some(record) = self.store.load(container_id, ifname)? else {
            return if expect_some { Err(fail("no limit is recorded".into())) } else { Ok(()) };
        };
        let sh = inner.dataplane.as_ref().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
        if let Some(what) = record.entries.iter().find_map(|e| sh.table.verify(e)) {
            return Err(fail(what));
        }
        let links = sh.loaded.tc_links()?;
        for p in &record.hooks {
            if !sh.loaded.runs_at(p, &links)? {
                return Err(fail(format!("no program on {} ({:?})", p.ifname, p.hook)));
            }
        }
        Ok(())
    }

    /// Changes an attachment's limits in place (the map entries, then the record).
    pub fn update(
        &self,
        container_id: &str,
        ifname: &str,
        limits: &Limits,
    ) -> Result<Record, BandwidthError> {
        let mut inner = self.lock();
        let Inner { dataplane: shaper, records, .. } = &mut *inner;
        let sh = shaper.as_mut().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
        let record = update_in_place(&mut sh.table, &self.store, container_id, ifname, limits)?;
        records.insert((container_id.to_owned(), ifname.to_owned()), record.clone());
        Ok(record)
    }

    /// GC: removes the limits of `network`'s attachments that are not in `valid`.
    pub fn gc(&self, network: &str, valid: &[(String, String)]) -> Result<(), BandwidthError> {
        let stale = stale(&self.lock().records, network, valid, |r| &r.network);
        for (container_id, ifname) in stale {
            tracing::info!(container = %container_id, ifname = %ifname, "GC: removing stale bandwidth limits");
            self.del(&container_id, &ifname)?;
        }
        Ok(())
    }

    /// STATUS: ready when the object is loaded.
    pub fn status(&self) -> Result<(), BandwidthError> {
        self.lock().dataplane.as_ref().map(|_| ()).map_err(|e| BandwidthError::Unavailable(e.clone()))
    }

    /// The installed value and counters of every recorded limit.
    pub fn snapshot(&self) -> Result<Vec<list::Listed>, BandwidthError> {
        let inner = self.lock();
        let sh = inner.dataplane.as_ref().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
        Ok(list::rows(&sh.table, inner.records.values()))
    }
}

/// Rewrites the limits of an attachment's existing directions (map first: the record must not
/// claim a limit the programs do not enforce), with fresh buckets.
pub fn update_in_place(
    table: &mut Table,
    store: &Store,
    container_id: &str,
    ifname: &str,
    limits: &Limits,
) -> Result<Record, BandwidthError> {
    let mut record = store.load(container_id, ifname)?.ok_or_else(|| BandwidthError::NotFound {
        container_id: container_id.into(),
        ifname: ifname.into(),
    })?;
    for (direction, limit) in [(Direction::Ingress, limits.ingress), (Direction::Egress, limits.egress)] {
        let Some(limit) = limit else { continue };
        let Some(entry) = record.entries.iter_mut().find(|e| e.direction == direction) else {
            return Err(BandwidthError::NoSuchDirection {
                container_id: container_id.into(),
                ifname: ifname.into(),
                direction: direction.as_str(),
            });
        };
        let updated = entry.with_limit(limit);
        table.install(&updated)?;
        *entry = updated;
    }
    store.save(&record)?;
    Ok(record)
}

/// Returns (records, removed entries, restored entries, detached hooks).
fn reconcile(
    inner: &mut Inner,
    existing: Option<&BTreeSet<(u32, String)>>,
) -> Result<(usize, usize, usize, usize), BandwidthError> {
    let Inner { dataplane: shaper, records, .. } = inner;
    let sh = shaper.as_mut().map_err(|e| BandwidthError::Unavailable(e.clone()))?;
    let desired: Vec<plan::Entry> = records.values().flat_map(|r| r.entries.iter().cloned()).collect();
    let (removed, restored) = sh.table.reconcile(&desired)?;
    let wanted: BTreeSet<&AttachPoint> = records.values().flat_map(|r| r.hooks.iter()).collect();
    let mut detached = 0;
    for (ifindex, hook) in sh.loaded.tc_links()? {
        let alive = existing.is_none_or(|e| e.iter().any(|(i, _)| *i == ifindex));
        let tcx = |p: &&&AttachPoint| p.attach == Attach::Tcx && p.ifindex == ifindex && p.hook == hook;
        if !alive || !wanted.iter().any(|p| tcx(&p)) {
            sh.loaded.detach_tc(ifindex, hook)?;
            detached += 1;
        }
    }
    for p in wanted {
        if existing.is_none_or(|e| e.contains(&(p.ifindex, p.ifname.clone()))) {
            sh.loaded.attach_point(p)?;
        } else {
            tracing::warn!(
                "bandwidth: interface {} (index {}) of a recorded attachment is gone; GC or DEL will remove it",
                p.ifname,
                p.ifindex
            );
        }
    }
    Ok((records.len(), removed, restored, detached))
}

/// Another attachment limiting the same traffic (same device, hook and MAC): stale state, or
/// two pods with one MAC on a master.
fn conflict(records: &BTreeMap<Key, Record>, key: &Key, record: &Record) -> Option<BandwidthError> {
    let others = records.iter().filter(|(k, _)| *k != key).map(|(_, r)| r);
    for other in others {
        for e in &record.entries {
            if other.entries.iter().any(|o| o.key() == e.key()) {
                let what = match e.mac {
                    Some(mac) => format!(
                        "{} traffic of MAC {} on {}",
                        e.direction.as_str(),
                        plan::mac_text(&mac),
                        e.ifname
                    ),
                    None => format!("{} traffic of {}", e.direction.as_str(), e.ifname),
                };
                return Some(BandwidthError::Conflict { what, owner: other.owner() });
            }
        }
    }
    None
}

fn remove_entries(sh: &mut Shaper, record: &Record) -> Result<(), BandwidthError> {
    for e in &record.entries {
        sh.table.remove(e)?;
    }
    Ok(())
}

/// Detaches the pod's own hooks of `record` (filters on its veth) that neither `remaining`
/// records nor `keep` need. Shared hooks (a master's) stay while the agent runs, as with port
/// mappings: a program there finds no limit and passes everything; the agent's start detaches
/// the ones no record needs. Best effort.
fn detach_unused(sh: &Shaper, record: &Record, remaining: &BTreeMap<Key, Record>, keep: &[AttachPoint]) {
    for p in &record.hooks {
        let same = |q: &AttachPoint| q.ifindex == p.ifindex && q.hook == p.hook;
        let used = remaining.values().any(|r| r.hooks.iter().any(same)) || keep.iter().any(same);
        if !used && p.attach == Attach::Filter {
            if let Err(e) = sh.loaded.detach_point(p) {
                tracing::warn!("detaching the bandwidth program from {}: {e}", p.ifname);
            }
        }
    }
}
