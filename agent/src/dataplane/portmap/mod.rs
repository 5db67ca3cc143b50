//! Port mappings (NPWG 4.1.2.1.7) of secondary attachments, in eBPF instead of iptables.
//!
//! Traffic to hostIP:hostPort, where the host IP is the node's address on the attachment's
//! network, is translated to podIP:containerPort on the pod's interface of that network, and
//! the pod's replies back, by the programs of `ebpf/programs` (TC on the host-side interfaces,
//! see [`topology`]; cgroup socket hooks for the node's own clients). An ADD is a netlink dump,
//! a few map updates and at most one TCX attachment: no exec, no iptables, no conntrack.
//!
//! - [`config`]: the plugin's config and `runtimeConfig.portMappings`;
//! - [`topology`] and [`netdev`]: which node interfaces are involved;
//! - [`entries`]: mappings to map entries (pure);
//! - [`table`]: the BPF maps; [`store`]: durable records;
//! - [`plugin`]: the `plexus-portmap` CNI plugin type; [`list`]: `plexus-agent portmap list`.
//!
//! Other native plugins (macvlan) can offer the `portMappings` capability themselves by
//! calling [`Portmap::add`]/[`Portmap::del`] with a [`store::Record`] built the same way
//! [`plugin`] builds it (see `plugin::plan_record`).

pub mod config;
pub mod entries;
pub mod list;
pub mod netdev;
pub mod plugin;
pub mod store;
pub mod table;
pub mod topology;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, MutexGuard};

use super::loader::Attach;
use super::service::{load_records, node_interfaces, stale, Gate, Key, State};
use super::{Dataplane, DataplaneError, DataplaneOptions};
use entries::{endpoint_text, Entry};
use store::{Record, Store, StoreError};
use table::TableError;
use topology::AttachPoint;

#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    #[error("the eBPF dataplane is not available, so port mappings cannot be installed: {0}")]
    Unavailable(String),
    #[error("{what} is already mapped for {owner}; choose another host port")]
    Conflict { what: String, owner: String },
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Topology(#[from] topology::TopologyError),
    #[error(transparent)]
    Plan(#[from] entries::PlanError),
    #[error(transparent)]
    Netdev(#[from] netdev::NetdevError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dataplane(#[from] DataplaneError),
    #[error("port mappings of {attachment} are not in place: {what}")]
    Check { attachment: String, what: String },
}

impl PortmapError {
    /// Errors the user fixes in the config or the pod's request (CNI code 7); the rest are the
    /// node's (999, "internal").
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            PortmapError::Conflict { .. }
                | PortmapError::Config(_)
                | PortmapError::Topology(_)
                | PortmapError::Plan(_)
        )
    }
}

type Inner = State<Dataplane, Record>;

/// The port mapping service of the agent: the dataplane, the records and the rules between
/// attachments (conflicts, shared hooks). One mutex: every operation is a handful of syscalls.
pub struct Portmap {
    store: Store,
    gate: Gate<Dataplane, Record>,
}

impl std::fmt::Debug for Portmap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Portmap").field("store", &self.store).finish_non_exhaustive()
    }
}

/// What a start found and fixed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StartReport {
    pub records: usize,
    pub removed_entries: usize,
    pub restored_entries: usize,
    pub detached_hooks: usize,
}

impl Portmap {
    /// Loads the dataplane and reconciles it with the records of `state_dir`, in the
    /// background so the agent serves CNI requests at once (loading and verifying the programs
    /// takes a few hundred milliseconds); port mapping operations wait for it. Reconciling:
    /// entries of attachments that no longer exist go, missing ones come back, hooks nobody
    /// needs are detached and needed ones attached. Never fails: without a dataplane the agent
    /// still serves everything else, and ADDs asking for port mappings fail saying why.
    pub fn start(opts: &DataplaneOptions, state_dir: &std::path::Path) -> Arc<Portmap> {
        let portmap = Arc::new(Portmap { store: Store::new(state_dir), gate: Gate::default() });
        let (pm, opts) = (portmap.clone(), opts.clone());
        tokio::spawn(async move {
            let existing = node_interfaces().await;
            let loader = pm.clone();
            let loading = tokio::task::spawn_blocking(move || loader.load(&opts, existing.as_ref())).await;
            if let Err(e) = loading {
                tracing::warn!("port mappings: the loading task failed: {e}");
                pm.gate.publish(State::loaded(Err(format!("the loading task failed: {e}")), BTreeMap::new()));
            }
        });
        portmap
    }

    /// The background part of [`Portmap::start`].
    fn load(&self, opts: &DataplaneOptions, existing: Option<&BTreeSet<(u32, String)>>) {
        let records = match load_records(&self.store) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("port mappings: {e}");
                return self.gate.publish(State::loaded(Err(e.to_string()), BTreeMap::new()));
            }
        };
        let dataplane = Dataplane::start(opts).map_err(|e| e.to_string());
        if let Err(e) = &dataplane {
            tracing::warn!("the eBPF dataplane is not available, so port mappings cannot be installed: {e}");
        }
        // Reconciled before anyone else sees the state: an ADD arriving meanwhile waits, so its
        // hooks are never mistaken for stale ones.
        let mut inner = State::loaded(dataplane, records);
        match reconcile(&mut inner, existing) {
            Ok(r) => tracing::info!(
                records = r.records,
                removed = r.removed_entries,
                restored = r.restored_entries,
                detached = r.detached_hooks,
                "port mappings reconciled with the state"
            ),
            Err(e) => tracing::warn!("port mappings: {e}"),
        }
        self.gate.publish(inner);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.gate.lock()
    }

    /// Installs an attachment's mappings (replacing its previous ones, if any).
    pub fn add(&self, record: Record) -> Result<(), PortmapError> {
        let mut inner = self.lock();
        let key: Key = (record.container_id.clone(), record.ifname.clone());
        let Inner { dataplane, records, .. } = &mut *inner;
        let dp = dataplane.as_mut().map_err(|e| PortmapError::Unavailable(e.clone()))?;
        if let Some(conflict) = conflict(records, &key, &record) {
            return Err(conflict);
        }
        if let Some(previous) = records.remove(&key) {
            remove_entries(dp, &previous)?;
        }
        let started = std::time::Instant::now();
        self.store.save(&record)?;
        let saved = started.elapsed();
        let installed = (|| -> Result<(), PortmapError> {
            for p in &record.hooks {
                dp.loaded.attach_point(p).map_err(DataplaneError::from)?;
            }
            let attached = started.elapsed();
            for e in &record.entries {
                dp.tables.install(e)?;
            }
            tracing::debug!(
                saved_us = saved.as_micros() as u64,
                attached_us = (attached - saved).as_micros() as u64,
                installed_us = (started.elapsed() - attached).as_micros() as u64,
                "port mapping ADD phases"
            );
            Ok(())
        })();
        if let Err(e) = installed {
            let _ = remove_entries(dp, &record);
            let _ = self.store.remove(&record.container_id, &record.ifname);
            detach_unused(dp, &record, records);
            return Err(e);
        }
        records.insert(key, record);
        Ok(())
    }

    /// Removes every entry of an attachment; nothing recorded is fine (DEL is idempotent).
    pub fn del(&self, container_id: &str, ifname: &str) -> Result<(), PortmapError> {
        let mut inner = self.lock();
        let Inner { dataplane, records, .. } = &mut *inner;
        let key: Key = (container_id.to_owned(), ifname.to_owned());
        let Some(record) = records.get(&key).cloned() else { return Ok(()) };
        let dp = dataplane.as_mut().map_err(|e| PortmapError::Unavailable(e.clone()))?;
        remove_entries(dp, &record)?;
        self.store.remove(container_id, ifname)?;
        records.remove(&key);
        detach_unused(dp, &record, records);
        tracing::info!(container = %container_id, ifname = %ifname, "port mappings removed");
        Ok(())
    }

    /// Verifies that the attachment's mappings are installed and its hooks attached.
    pub fn check(&self, container_id: &str, ifname: &str, expect_some: bool) -> Result<(), PortmapError> {
        let inner = self.lock();
        let attachment = format!("container {container_id} interface {ifname}");
        let fail = |what: String| PortmapError::Check { attachment: attachment.clone(), what };
        let Some(record) = inner.records.get(&(container_id.to_owned(), ifname.to_owned())) else {
            return if expect_some { Err(fail("no mapping is recorded".into())) } else { Ok(()) };
        };
        let dp = inner.dataplane.as_ref().map_err(|e| PortmapError::Unavailable(e.clone()))?;
        if let Some(what) = record.entries.iter().find_map(|e| dp.tables.verify(e)) {
            return Err(fail(what));
        }
        let links = dp.loaded.tc_links().map_err(DataplaneError::from)?;
        for p in &record.hooks {
            if !dp.loaded.runs_at(p, &links).map_err(DataplaneError::from)? {
                return Err(fail(format!("no program on {} ({:?})", p.ifname, p.hook)));
            }
        }
        Ok(())
    }

    /// GC: removes the mappings of `network`'s attachments that are not in `valid`.
    pub fn gc(&self, network: &str, valid: &[(String, String)]) -> Result<(), PortmapError> {
        let stale = stale(&self.lock().records, network, valid, |r| &r.network);
        for (container_id, ifname) in stale {
            tracing::info!(container = %container_id, ifname = %ifname, "GC: removing stale port mappings");
            self.del(&container_id, &ifname)?;
        }
        Ok(())
    }

    /// STATUS: ready when the dataplane is loaded.
    pub fn status(&self) -> Result<(), PortmapError> {
        self.lock().dataplane.as_ref().map(|_| ()).map_err(|e| PortmapError::Unavailable(e.clone()))
    }
}

/// `existing` lists the node's interfaces (index, name); hooks of vanished interfaces are
/// neither attached nor kept.
fn reconcile(
    inner: &mut Inner,
    existing: Option<&BTreeSet<(u32, String)>>,
) -> Result<StartReport, PortmapError> {
    let Inner { dataplane, records, .. } = inner;
    let dp = dataplane.as_mut().map_err(|e| PortmapError::Unavailable(e.clone()))?;
    let desired: Vec<Entry> = records.values().flat_map(|r| r.entries.iter().cloned()).collect();
    let done = dp.tables.reconcile(&desired)?;
    let wanted: BTreeSet<&AttachPoint> = records.values().flat_map(|r| r.hooks.iter()).collect();
    let mut report = StartReport {
        records: records.len(),
        removed_entries: done.removed,
        restored_entries: done.restored,
        detached_hooks: 0,
    };
    for (ifindex, hook) in dp.loaded.tc_links().map_err(DataplaneError::from)? {
        let alive = existing.is_none_or(|e| e.iter().any(|(i, _)| *i == ifindex));
        let tcx = |p: &&&AttachPoint| p.attach == Attach::Tcx && p.ifindex == ifindex && p.hook == hook;
        if !alive || !wanted.iter().any(|p| tcx(&p)) {
            dp.loaded.detach_tc(ifindex, hook).map_err(DataplaneError::from)?;
            report.detached_hooks += 1;
        }
    }
    for p in wanted {
        let alive = existing.is_none_or(|e| e.contains(&(p.ifindex, p.ifname.clone())));
        if alive {
            dp.loaded.attach_point(p).map_err(DataplaneError::from)?;
        } else {
            tracing::warn!(
                interface = %p.ifname,
                "port mappings: interface {} (index {}) of a recorded attachment is gone; GC or DEL will remove it",
                p.ifname,
                p.ifindex
            );
        }
    }
    Ok(report)
}

/// The first mapping of `record` that another attachment holds: the same host endpoint, or the
/// same pod endpoint (stale state: pod addresses are unique).
fn conflict(records: &BTreeMap<Key, Record>, key: &Key, record: &Record) -> Option<PortmapError> {
    let others = records.iter().filter(|(k, _)| *k != key).map(|(_, r)| r);
    for other in others {
        for e in &record.entries {
            for o in &other.entries {
                let what = if o.host_endpoint() == e.host_endpoint() {
                    format!("host port {}/{}", endpoint_text(e.host_ip, e.host_port), e.protocol.as_str())
                } else if o.pod_endpoint() == e.pod_endpoint() {
                    format!("pod port {}/{}", endpoint_text(e.pod_ip, e.container_port), e.protocol.as_str())
                } else {
                    continue;
                };
                return Some(PortmapError::Conflict { what, owner: other.owner() });
            }
        }
    }
    None
}

fn remove_entries(dp: &mut Dataplane, record: &Record) -> Result<(), PortmapError> {
    for e in &record.entries {
        dp.tables.remove(e)?;
    }
    Ok(())
}

/// Detaches the pod's own hooks of `record` (filters on its veth) that no remaining record
/// needs. Shared hooks (a bridge's, a master's) stay while the agent runs: a program there
/// finds no mapping and passes everything, and attaching one again would cost the next ADD an
/// RCU grace period; the agent's start detaches the ones no record needs. Best effort.
fn detach_unused(dp: &Dataplane, record: &Record, remaining: &BTreeMap<Key, Record>) {
    for p in &record.hooks {
        let used =
            remaining.values().any(|r| r.hooks.iter().any(|q| q.ifindex == p.ifindex && q.hook == p.hook));
        if !used && p.attach == Attach::Filter {
            if let Err(e) = dp.loaded.detach_point(p) {
                tracing::warn!("detaching the port mapping program from {}: {e}", p.ifname);
            }
        }
    }
}
