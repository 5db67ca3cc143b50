//! The one lifecycle of the dataplane's services (port mappings, bandwidth limits): an object
//! loaded in the background and reconciled with the records at start, then ADD, DEL, CHECK,
//! GC and STATUS of attachments, each a record on disk and entries in the object's maps behind
//! TC hooks. A feature says what its object, entries and conflicts are ([`Feature`]); the rest
//! is written here once.
//!
//! A pod's own hooks (its veth's) are attached as filters in the ADD and moved to TCX links in
//! the background afterwards (see [`Attach::Filter`]), by a thread of the service's own.
//!
//! The records on disk are the truth: ADD writes one before installing, DEL removes it (even
//! when the agent never knew it: an orphan of a crash), and CHECK verifies against it, since
//! `plexus-agent bandwidth set`, another process, rewrites records and maps in place.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::attach::{Attach, AttachPoint};
use super::gate::{Gate, Records, State, Unloaded};
use super::loader::{unpinned_tc_link, LoadError, Loaded, Object, ObjectError};
use super::maps::TableError;
use super::netdev;
use super::records::{Record, RecordEntry, RecordStore, StoreError};
use super::DataplaneOptions;
use crate::cni::{AttachmentKey, CniCode, ErrorCode};

/// What a feature brings to the lifecycle: its loaded object (which implements this), its
/// entries and how they are installed, verified and reconciled, and its conflict rule.
pub trait Feature: Send + Sized + 'static {
    type Entry: RecordEntry;
    /// The feature's word in messages: "port mappings", "bandwidth limits".
    const WHAT: &'static str;
    /// What CHECK says when a config asks for entries and none are recorded.
    const NONE_RECORDED: &'static str;
    /// The BPF object [`Feature::start`] loads.
    const OBJECT: &'static Object;

    /// Loads the object with its maps and programs pinned under the agent's pin directory.
    fn start(opts: &DataplaneOptions) -> Result<Self, ObjectError>;
    fn loaded(&self) -> &Loaded;
    fn loaded_mut(&mut self) -> &mut Loaded;
    fn install(&mut self, entry: &Self::Entry) -> Result<(), TableError>;
    /// Removing what is not there is fine.
    fn remove(&mut self, entry: &Self::Entry) -> Result<(), TableError>;
    /// Why `entry` is not installed exactly, if it is not.
    fn verify(&self, entry: &Self::Entry) -> Option<String>;
    /// Makes the maps hold exactly `desired`; returns (removed, restored) entries.
    fn reconcile(&mut self, desired: &[Self::Entry]) -> Result<(usize, usize), TableError>;
    /// The sentence refusing `record` because `other` (another attachment) holds what it
    /// asks for, if it does.
    fn conflict(record: &Record<Self::Entry>, other: &Record<Self::Entry>) -> Option<String>;
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("the eBPF dataplane is not available, so {what} cannot be installed: {reason}")]
    Unavailable {
        what: &'static str,
        #[source]
        reason: Unloaded,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{what} of {attachment} are not in place: {problem}")]
    Check { what: &'static str, attachment: AttachmentKey, problem: String },
    #[error("the {what} task failed: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl CniCode for ServiceError {
    /// A conflict is the request's to fix (another host port, another MAC); the rest is the
    /// node's.
    fn cni_code(&self) -> ErrorCode {
        match self {
            ServiceError::Conflict(_) => ErrorCode::InvalidNetworkConfig,
            _ => ErrorCode::Internal,
        }
    }
}

/// What a start found and fixed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StartReport {
    pub records: usize,
    pub removed_entries: usize,
    pub restored_entries: usize,
    pub detached_hooks: usize,
    /// Interfaces whose XDP hook the object let go of (see [`Service::on_xdp_released`]).
    pub released_xdp: Vec<u32>,
}

/// Told the interface index of an XDP hook a service let go of.
type XdpReleased = Box<dyn Fn(u32) + Send + Sync>;

/// A service of the agent: the feature's object, the records and the rules between
/// attachments (conflicts, shared hooks). One mutex: every operation is a handful of syscalls.
pub struct Service<D: Feature> {
    store: RecordStore<D::Entry>,
    gate: Gate<D, D::Entry>,
    xdp_released: OnceLock<XdpReleased>,
    /// Where ADDs and the start send the attachments whose filters move to TCX links; set by
    /// [`Service::start`], which starts the thread moving them for an object that goes first on
    /// its hooks (port mappings; shaping keeps its filters, after them). Unset otherwise, and
    /// nothing is sent.
    tcx_moves: OnceLock<mpsc::Sender<AttachmentKey>>,
    /// Why the object is not loaded (None once it is): for readiness, which must not wait.
    load_problem: Mutex<Option<String>>,
    /// What the agent was started with: the features' plans read it too.
    options: DataplaneOptions,
}

/// The first wait before loading a failed object again, and the longest.
const LOAD_RETRY_FIRST: Duration = Duration::from_millis(250);
const LOAD_RETRY_MAX: Duration = Duration::from_secs(30);

impl<D: Feature> std::fmt::Debug for Service<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service").field("what", &D::WHAT).field("store", &self.store).finish_non_exhaustive()
    }
}

fn available<D: Feature>(object: &mut Result<D, Unloaded>) -> Result<&mut D, ServiceError> {
    object.as_mut().map_err(|reason| ServiceError::Unavailable { what: D::WHAT, reason: reason.clone() })
}

impl<D: Feature> Service<D> {
    fn new(options: &DataplaneOptions, state_dir: &Path) -> Self {
        Service {
            options: options.clone(),
            store: RecordStore::new(state_dir),
            gate: Gate::default(),
            xdp_released: OnceLock::new(),
            tcx_moves: OnceLock::new(),
            load_problem: Mutex::new(Some("still loading".into())),
        }
    }

    /// Calls `listener` with every interface whose XDP hook this service lets go of (the last
    /// attachment needing it went, or the start found it stale): the agent hands the hook back
    /// to the object this one displaced there ([`Object::xdp_displaces`](super::loader::Object)).
    /// Set once; later calls are ignored.
    pub fn on_xdp_released(&self, listener: impl Fn(u32) + Send + Sync + 'static) {
        let _ = self.xdp_released.set(Box::new(listener));
    }

    fn released_xdp(&self, ifindexes: &[u32]) {
        if let Some(listener) = self.xdp_released.get() {
            ifindexes.iter().for_each(|&i| listener(i));
        }
    }

    /// Attaches the object's XDP program on `ifindex` again where an attachment wants it
    /// there: another object's program has just let go of the hook (its link may take a moment
    /// to be freed, which the attach waits for). Best effort, like every XDP attach.
    pub fn reclaim_xdp(&self, ifindex: u32) {
        let mut state = self.lock();
        let State { object, records, .. } = &mut *state;
        let Ok(object) = available(object) else { return };
        let wanted = records.values().flat_map(|r| r.hooks.iter()).find(|p| p.is_xdp_of(ifindex)).cloned();
        let Some(p) = wanted else { return };
        match object.loaded_mut().reclaim_xdp(p.ifindex, &p.ifname) {
            Ok(Some(mode)) => {
                tracing::info!(interface = %p.ifname, mode = mode.as_str(), "{}: XDP hook taken back", D::WHAT)
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(interface = %p.ifname, "{}: no XDP on {} again, TC does the work: {e}", D::WHAT, p.ifname)
            }
        }
    }

    /// Loads the object and reconciles it with the records of `state_dir`, in the background
    /// so the agent serves CNI requests at once (loading and verifying the programs takes a few
    /// hundred milliseconds); operations wait for it. Reconciling: entries of attachments that
    /// no longer exist go, missing ones come back, hooks nobody needs are detached and needed
    /// ones attached. Never fails: without the object the agent still serves everything else,
    /// and ADDs asking for the feature fail saying why.
    pub fn start(opts: &DataplaneOptions, state_dir: &Path) -> Arc<Self> {
        let service = Arc::new(Service::new(opts, state_dir));
        // Only an object that goes first on its hooks moves its filters (see `Attach::Filter`).
        if D::OBJECT.first {
            service.run_tcx_moves();
        }
        let loader = service.clone();
        tokio::spawn(async move {
            let existing = netdev::node_interfaces().await;
            let task = loader.clone();
            let loading = tokio::task::spawn_blocking(move || task.load(existing.as_ref())).await;
            if let Err(e) = loading {
                tracing::warn!("{}: the loading task failed: {e}", D::WHAT);
                loader.gate.publish(State::loaded(Err(Unloaded::Task(Arc::new(e))), BTreeMap::new()));
            }
        });
        service
    }

    /// The background part of [`Service::start`]: loads the object until it loads, waiting
    /// longer after each failure ([`LOAD_RETRY_FIRST`] doubling up to [`LOAD_RETRY_MAX`]).
    /// Meanwhile operations fail at once saying why, and [`Service::loaded`] is false.
    fn load(&self, existing: Option<&BTreeSet<(u32, String)>>) {
        let mut wait = LOAD_RETRY_FIRST;
        for attempt in 1.. {
            // The records are read again for every try: DELs meanwhile remove theirs.
            let records: Records<D::Entry> = match self.store.load_all() {
                Ok(r) => r.into_iter().map(|r| (r.key(), r)).collect(),
                Err(e) => {
                    tracing::warn!("{}: {e}", D::WHAT);
                    self.set_load_problem(Some(e.to_string()));
                    return self
                        .gate
                        .publish(State::loaded(Err(Unloaded::Records(Arc::new(e))), BTreeMap::new()));
                }
            };
            match D::start(&self.options) {
                Ok(object) => return self.loaded_with(object, records, existing),
                Err(e) => {
                    tracing::warn!(
                        attempt,
                        "the eBPF dataplane is not available, so {} cannot be installed: {e}; loading again in {wait:?}",
                        D::WHAT
                    );
                    self.set_load_problem(Some(e.to_string()));
                    self.gate.publish(State::loaded(Err(Unloaded::Object(Arc::new(e))), records));
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(LOAD_RETRY_MAX);
                }
            }
        }
    }

    /// The options the service was started with.
    pub fn options(&self) -> &DataplaneOptions {
        &self.options
    }

    /// Whether the object is loaded: `Err` says why not (still loading, or the last failure,
    /// which the background load retries). Never waits.
    pub fn loaded(&self) -> Result<(), String> {
        match &*self.load_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            None => Ok(()),
            Some(problem) => Err(format!("the eBPF dataplane of {} is not loaded: {problem}", D::WHAT)),
        }
    }

    fn set_load_problem(&self, problem: Option<String>) {
        *self.load_problem.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = problem;
    }

    /// Publishes the loaded object, reconciled with `records`.
    fn loaded_with(&self, object: D, records: Records<D::Entry>, existing: Option<&BTreeSet<(u32, String)>>) {
        // Reconciled before anyone else sees the state: an ADD arriving meanwhile waits, so its
        // hooks are never mistaken for stale ones.
        let mut state = State::loaded(Ok(object), records);
        let released = match reconcile(&mut state, existing) {
            Ok(r) => {
                tracing::info!(
                    records = r.records,
                    removed = r.removed_entries,
                    restored = r.restored_entries,
                    detached = r.detached_hooks,
                    "{} reconciled with the state",
                    D::WHAT
                );
                r.released_xdp
            }
            Err(e) => {
                tracing::warn!("{}: {e}", D::WHAT);
                Vec::new()
            }
        };
        self.gate.publish(state);
        self.set_load_problem(None);
        self.released_xdp(&released);
        // Queueing never blocks: the thread takes the lock once this one is let go of.
        self.lock().records.values().for_each(|r| self.queue_tcx_move(r));
    }

    fn lock(&self) -> MutexGuard<'_, State<D, D::Entry>> {
        self.gate.lock()
    }

    /// Installs an attachment's entries (replacing its previous ones, if any).
    pub fn add(&self, record: Record<D::Entry>) -> Result<(), ServiceError> {
        let mut state = self.lock();
        let State { object, records, .. } = &mut *state;
        let object = available(object)?;
        let key = record.key();
        let others = records.iter().filter(|(k, _)| **k != key).map(|(_, r)| r);
        if let Some(conflict) = others.into_iter().find_map(|other| D::conflict(&record, other)) {
            return Err(ServiceError::Conflict(conflict));
        }
        let mut released = Vec::new();
        if let Some(previous) = records.remove(&key) {
            remove_entries(object, &previous)?;
            released = detach_unused(object, &previous, records, &record.hooks);
        }
        let started = Instant::now();
        self.store.save(&record)?;
        let saved = started.elapsed();
        let installed = (|| -> Result<(), ServiceError> {
            // Entries before programs: the first packet a program sees is already served.
            for e in &record.entries {
                object.install(e)?;
            }
            let filled = started.elapsed();
            for p in &record.hooks {
                object.loaded_mut().attach_point(p)?;
            }
            tracing::debug!(
                saved_us = saved.as_micros() as u64,
                installed_us = (filled - saved).as_micros() as u64,
                attached_us = (started.elapsed() - filled).as_micros() as u64,
                "{} ADD phases",
                D::WHAT
            );
            Ok(())
        })();
        if let Err(e) = installed {
            if let Err(undo) = remove_entries(object, &record) {
                tracing::warn!("undoing a failed ADD of {} for {key}: {undo}", D::WHAT);
            }
            if let Err(undo) = self.store.remove(&key) {
                tracing::warn!("undoing a failed ADD of {} for {key}: {undo}", D::WHAT);
            }
            released.extend(detach_unused(object, &record, records, &[]));
            drop(state);
            self.released_xdp(&released);
            return Err(e);
        }
        self.queue_tcx_move(&record);
        records.insert(key, record);
        drop(state);
        self.released_xdp(&released);
        Ok(())
    }

    /// Starts the thread that moves attachments' filters to TCX links ([`Service::move_to_tcx`]),
    /// one attachment at a time, for as long as the service lives.
    fn run_tcx_moves(self: &Arc<Self>) {
        let (queue, requests) = mpsc::channel::<AttachmentKey>();
        let service = Arc::downgrade(self);
        let spawned = std::thread::Builder::new().name("tcx-moves".into()).spawn(move || {
            while let Ok(key) = requests.recv() {
                let Some(service) = service.upgrade() else { break };
                service.move_to_tcx(&key);
            }
        });
        match spawned {
            Ok(_) => {
                let _ = self.tcx_moves.set(queue);
            }
            Err(e) => tracing::warn!("{}: pods' hooks stay filters, no thread to move them: {e}", D::WHAT),
        }
    }

    /// Asks for the filters of `record` to be moved to TCX links, if it has any.
    fn queue_tcx_move(&self, record: &Record<D::Entry>) {
        if record.hooks.iter().any(|p| p.attach == Attach::Filter) {
            if let Some(queue) = self.tcx_moves.get() {
                // The thread is gone only with the service; no queue, no moves.
                let _ = queue.send(record.key());
            }
        }
    }

    /// Moves the filter points of attachment `key` to TCX links, where the object goes first on
    /// its hooks (see [`Attach::Filter`]). Each link is attached without the lock, since the
    /// attach waits for an RCU grace period; then, under the lock, and only while an
    /// attachment still wants that hook of that same interface, the link is pinned and the
    /// filter removed. Otherwise (a DEL came meanwhile) the link is dropped, which detaches it.
    /// Best effort: where it fails, the filter goes on doing the same work, and the failure
    /// is logged.
    fn move_to_tcx(&self, key: &AttachmentKey) {
        let (pins, object, points) = {
            let mut state = self.lock();
            let State { object, records, .. } = &mut *state;
            let (Ok(object), Some(record)) = (object.as_mut(), records.get(key)) else { return };
            let loaded = object.loaded_mut();
            let Some(pins) = loaded.pins().cloned() else { return };
            let mut points = Vec::new();
            for p in record.hooks.iter().filter(|p| p.attach == Attach::Filter) {
                match loaded.tc_link_is_current(p.ifindex, p.hook) {
                    Ok(false) => points.push(p.clone()),
                    // Moved already; an agent stopped between the pin and the filter's removal
                    // left the filter beside the link.
                    Ok(true) => {
                        if let Err(e) = loaded.detach_filter(&p.ifname, p.hook) {
                            tracing::warn!(interface = %p.ifname, "{}: {e}", D::WHAT);
                        }
                    }
                    Err(e) => tracing::warn!(interface = %p.ifname, "{}: {e}", D::WHAT),
                }
            }
            (pins, D::OBJECT, points)
        };
        for p in points {
            let started = Instant::now();
            // Attached by name: only while the name is still the recorded interface's.
            if netdev::index_of(&p.ifname) != Some(p.ifindex) {
                continue;
            }
            let link = match unpinned_tc_link(&pins, object, &p.ifname, p.hook) {
                Ok(link) => link,
                Err(e) => {
                    tracing::warn!(interface = %p.ifname, "{}: {} keeps its filter: {e}", D::WHAT, p.ifname);
                    continue;
                }
            };
            let mut state = self.lock();
            let wanted = state
                .records
                .values()
                .flat_map(|r| r.hooks.iter())
                .any(|q| q.attach == Attach::Filter && q.same_hook(&p))
                && netdev::index_of(&p.ifname) == Some(p.ifindex);
            let object = match state.object.as_mut() {
                Ok(object) if wanted => object,
                _ => {
                    // Detaching waits for a grace period too: not under the lock.
                    drop(state);
                    drop(link);
                    continue;
                }
            };
            let loaded = object.loaded_mut();
            match loaded
                .pin_tc_link(p.ifindex, p.hook, link)
                .and_then(|()| loaded.detach_filter(&p.ifname, p.hook))
            {
                Ok(()) => tracing::debug!(
                    interface = %p.ifname,
                    took_us = started.elapsed().as_micros() as u64,
                    "{}: the filter moved to a TCX link",
                    D::WHAT
                ),
                Err(e) => {
                    tracing::warn!(interface = %p.ifname, "{}: moving {} to a TCX link: {e}", D::WHAT, p.ifname)
                }
            }
        }
    }

    /// Removes an attachment's entries; nothing recorded is fine (DEL is idempotent).
    pub fn del(&self, key: &AttachmentKey) -> Result<(), ServiceError> {
        let mut state = self.lock();
        let State { object, records, .. } = &mut *state;
        let Some(record) = records.get(key).cloned() else {
            // A record written by an agent that crashed before remembering it.
            return Ok(self.store.remove(key)?);
        };
        let object = available(object)?;
        remove_entries(object, &record)?;
        self.store.remove(key)?;
        records.remove(key);
        let released = detach_unused(object, &record, records, &[]);
        tracing::info!(container = %key.container_id, ifname = %key.ifname, "{} removed", D::WHAT);
        drop(state);
        self.released_xdp(&released);
        Ok(())
    }

    /// Verifies that the attachment's entries are installed as recorded (the record on disk,
    /// which another process may have changed) and its hooks attached. `expect_some`: the
    /// config asks for entries, so none recorded is a failure.
    pub fn check(&self, key: &AttachmentKey, expect_some: bool) -> Result<(), ServiceError> {
        let mut state = self.lock();
        let fail = |problem: String| ServiceError::Check { what: D::WHAT, attachment: key.clone(), problem };
        let Some(record) = self.store.load(key)? else {
            return if expect_some { Err(fail(D::NONE_RECORDED.into())) } else { Ok(()) };
        };
        let object = available(&mut state.object)?;
        if let Some(problem) = record.entries.iter().find_map(|e| object.verify(e)) {
            return Err(fail(problem));
        }
        let links = object.loaded().tc_links()?;
        for p in &record.hooks {
            if !object.loaded().runs_at(p, &links)? {
                return Err(fail(format!("no program on {} ({:?})", p.ifname, p.hook)));
            }
        }
        Ok(())
    }

    /// GC: removes the entries of `network`'s attachments that are not in `valid`.
    pub fn gc(&self, network: &str, valid: &[AttachmentKey]) -> Result<(), ServiceError> {
        let stale: Vec<AttachmentKey> = self
            .lock()
            .records
            .iter()
            .filter(|(k, r)| r.network == network && !valid.contains(k))
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            tracing::info!(container = %key.container_id, ifname = %key.ifname, "GC: removing stale {}", D::WHAT);
            self.del(&key)?;
        }
        Ok(())
    }

    /// Changes an attachment's entries in place (its hooks stay): `change` gets the object and
    /// a copy of the record, installs what it changes, and the copy becomes the record (memory
    /// and disk) only when it succeeds. `Ok(false)`: no record of the attachment.
    pub fn change_entries<E: From<ServiceError>>(
        &self,
        key: &AttachmentKey,
        change: impl FnOnce(&mut D, &mut Record<D::Entry>) -> Result<(), E>,
    ) -> Result<bool, E> {
        let mut state = self.lock();
        let State { object, records, .. } = &mut *state;
        let Some(mut record) = records.get(key).cloned() else { return Ok(false) };
        let object = available(object)?;
        change(object, &mut record)?;
        self.store.save(&record).map_err(ServiceError::from)?;
        records.insert(key.clone(), record);
        Ok(true)
    }

    /// STATUS: ready when the object is loaded.
    pub fn status(&self) -> Result<(), ServiceError> {
        available(&mut self.lock().object).map(|_| ())
    }
}

/// `existing` lists the node's interfaces (index, name); hooks of vanished interfaces are
/// neither attached nor kept.
fn reconcile<D: Feature>(
    state: &mut State<D, D::Entry>,
    existing: Option<&BTreeSet<(u32, String)>>,
) -> Result<StartReport, ServiceError> {
    let State { object, records, .. } = state;
    let object = available(object)?;
    let desired: Vec<D::Entry> = records.values().flat_map(|r| r.entries.iter().cloned()).collect();
    let (removed, restored) = object.reconcile(&desired)?;
    let wanted: BTreeSet<&AttachPoint> = records.values().flat_map(|r| r.hooks.iter()).collect();
    let mut report = StartReport {
        records: records.len(),
        removed_entries: removed,
        restored_entries: restored,
        detached_hooks: 0,
        released_xdp: Vec::new(),
    };
    let loaded = object.loaded_mut();
    for (ifindex, hook) in loaded.tc_links()? {
        let alive = existing.is_none_or(|e| e.iter().any(|(i, _)| *i == ifindex));
        // A filter point's hook may have moved to a TCX link.
        let tcx = |p: &&AttachPoint| {
            matches!(p.attach, Attach::Tcx | Attach::Filter) && p.ifindex == ifindex && p.hook == hook
        };
        if !alive || !wanted.iter().any(tcx) {
            loaded.detach_tc(ifindex, hook)?;
            report.detached_hooks += 1;
        }
    }
    // XDP links: the same rule, and none at all when XDP is off.
    for ifindex in loaded.xdp_links()? {
        let alive = existing.is_none_or(|e| e.iter().any(|(i, _)| *i == ifindex));
        if !alive || !loaded.xdp_enabled() || !wanted.iter().any(|p| p.is_xdp_of(ifindex)) {
            loaded.detach_xdp(ifindex)?;
            report.detached_hooks += 1;
            report.released_xdp.push(ifindex);
        }
    }
    for p in wanted {
        if existing.is_none_or(|e| e.contains(&(p.ifindex, p.ifname.clone()))) {
            loaded.attach_point(p)?;
        } else {
            tracing::warn!(
                interface = %p.ifname,
                "{}: interface {} (index {}) of a recorded attachment is gone; GC or DEL will remove it",
                D::WHAT,
                p.ifname,
                p.ifindex
            );
        }
    }
    Ok(report)
}

fn remove_entries<D: Feature>(object: &mut D, record: &Record<D::Entry>) -> Result<(), ServiceError> {
    for e in &record.entries {
        object.remove(e)?;
    }
    Ok(())
}

/// Detaches the hooks of `record` that neither the `remaining` records nor `keep` need: the
/// pod's own (filters on its veth) and XDP programs (an interface's XDP hook is one program,
/// which another tool may want once plexus no longer does). Shared TC hooks (a bridge's, a
/// master's) stay while the agent runs: a program there finds no entry and passes everything,
/// and attaching one again would cost the next ADD an RCU grace period; the agent's start
/// detaches the ones no record needs. Best effort: a failure is logged. Returns the interfaces
/// whose XDP hook was let go of.
fn detach_unused<D: Feature>(
    object: &D,
    record: &Record<D::Entry>,
    remaining: &Records<D::Entry>,
    keep: &[AttachPoint],
) -> Vec<u32> {
    let mut released = Vec::new();
    for p in record.hooks.iter().filter(|p| matches!(p.attach, Attach::Filter | Attach::Xdp)) {
        let used = remaining.values().flat_map(|r| r.hooks.iter()).chain(keep).any(|q| q.same_hook(p));
        if !used {
            let held =
                p.attach == Attach::Xdp && object.loaded().xdp_links().is_ok_and(|l| l.contains(&p.ifindex));
            match object.loaded().detach_point(p) {
                Ok(()) if held => released.push(p.ifindex),
                Ok(()) => {}
                Err(e) => tracing::warn!("detaching the program of {} from {}: {e}", D::WHAT, p.ifname),
            }
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::bandwidth::shaper::Shaper;
    use crate::dataplane::portmap::mapper::Mapper;

    /// A service whose object never loaded, remembering `records`.
    fn unloaded<D: Feature>(state_dir: &Path, records: &[Record<D::Entry>]) -> Service<D> {
        let options = DataplaneOptions {
            pin_dir: state_dir.join("pins"),
            cgroup_root: state_dir.join("cgroup"),
            max_flows: 1,
            timeouts: plexus_ebpf_common::flow::Timeouts::default(),
            xdp: super::super::XdpWhere::Auto,
        };
        let service = Service::<D>::new(&options, state_dir);
        let records = records.iter().map(|r| (r.key(), r.clone())).collect();
        service.gate.publish(State::loaded(Err(Unloaded::Loading), records));
        service
    }

    fn record<E>(container_id: &str) -> Record<E> {
        Record {
            container_id: container_id.into(),
            ifname: "net1".into(),
            network: "n".into(),
            pod: None,
            entries: Vec::new(),
            hooks: Vec::new(),
        }
    }

    fn del_removes_orphaned_records<D: Feature>() {
        let d = tempfile::tempdir().unwrap();
        let service = unloaded::<D>(d.path(), &[]);
        // A record the service never remembered (an agent that crashed after writing it).
        let orphan = record::<D::Entry>("c1");
        service.store.save(&orphan).unwrap();
        service.del(&orphan.key()).unwrap();
        assert!(service.store.load(&orphan.key()).unwrap().is_none(), "{}: the orphan stays", D::WHAT);
        service.del(&orphan.key()).unwrap();
    }

    #[test]
    fn both_services_remove_orphaned_records_on_del() {
        del_removes_orphaned_records::<Mapper>();
        del_removes_orphaned_records::<Shaper>();
    }

    fn check_reads_the_records_on_disk<D: Feature>() {
        let d = tempfile::tempdir().unwrap();
        let remembered = record::<D::Entry>("c1");
        let service = unloaded::<D>(d.path(), std::slice::from_ref(&remembered));
        // Remembered but no longer on disk (removed by another process): nothing is recorded.
        let err = service.check(&remembered.key(), true).unwrap_err();
        assert!(matches!(err, ServiceError::Check { .. }), "{}: {err}", D::WHAT);
        assert_eq!(
            err.to_string(),
            format!("{} of container c1 interface net1 are not in place: {}", D::WHAT, D::NONE_RECORDED)
        );
        service.check(&remembered.key(), false).unwrap();
        // On disk but not remembered (written by another process): verified against the
        // object, which is not there.
        let written = record::<D::Entry>("c2");
        service.store.save(&written).unwrap();
        let err = service.check(&written.key(), true).unwrap_err();
        assert!(matches!(err, ServiceError::Unavailable { .. }), "{}: {err}", D::WHAT);
    }

    #[test]
    fn both_services_check_against_the_records_on_disk() {
        check_reads_the_records_on_disk::<Mapper>();
        check_reads_the_records_on_disk::<Shaper>();
    }

    #[test]
    fn conflicts_are_the_requests_to_fix_and_the_rest_the_nodes() {
        assert_eq!(ServiceError::Conflict("x".into()).cni_code(), ErrorCode::InvalidNetworkConfig);
        let unavailable = ServiceError::Unavailable { what: "port mappings", reason: Unloaded::Loading };
        assert_eq!(unavailable.cni_code(), ErrorCode::Internal);
        assert_eq!(
            unavailable.to_string(),
            "the eBPF dataplane is not available, so port mappings cannot be installed: the dataplane is still loading"
        );
    }
}
