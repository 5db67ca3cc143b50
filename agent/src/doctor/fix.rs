//! Removes one leftover, the way the agent would, through the same layers; every removal is
//! idempotent (what is gone already is fine) and takes the lock its writer takes.
//!
//! A container record whose namespace is gone is torn down by the running agent itself: a DEL
//! through its socket, as the runtime would send it. The agent holds the per-container lock
//! and the dataplane's state in memory, and runs each attachment's DEL with the exact config it
//! recorded (delegate plugins, native types, capabilities), so nothing outside it could do the
//! same teardown safely. Everything else is removed here: the pinned maps (the agent's own
//! handles see the change), the records, host-local files under the network's `flock`, VFs
//! through the native `sriov` type's DEL (which `flock`s the VF as two agents would), links by
//! netlink, and the runtime's result cache files of gone containers (libcni takes no lock on
//! them; a gone container's DEL, their only reader, will not come). An address whose
//! container may be alive is never freed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus_cni_shim::shim::{run_with_retry_schedule, Invocation};
use serde_json::{json, Value};

use super::find::Fix;
use super::gather::{endpoint_text, limit_text, Sources};
use super::DoctorError;
use crate::cni::{AttachmentKey, Command};
use crate::dataplane::bandwidth::store::Store as BandwidthStore;
use crate::dataplane::bandwidth::table::Table;
use crate::dataplane::portmap::store::Store as PortmapStore;
use crate::dataplane::portmap::table::Tables;
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::ipam::host_local::allocator::Store as _;
use crate::ipam::host_local::store::DiskStore;
use crate::ipam::Ipam;
use crate::native::bridge::nft;
use crate::native::sriov::state::VfStore;
use crate::native::sriov::SriovPlugin;
use crate::netlink::Netlink;

/// What fixing needs besides the sources.
#[derive(Debug, Clone)]
pub struct Fixer {
    pub sources: Sources,
    /// The agent's socket, for its DEL of records whose namespace is gone.
    pub socket: PathBuf,
    /// For the IPAM plugins a VF's DEL runs.
    pub cni_bin_dirs: Vec<PathBuf>,
    /// Of one IPAM plugin run, and of the wait for a host-local lock.
    pub timeout: Duration,
}

/// The pauses between attempts to reach the agent: it may be restarting.
const AGENT_RETRIES: &[Duration] = &[Duration::from_millis(100), Duration::from_millis(400)];

impl Fixer {
    pub async fn fix(&self, fix: &Fix) -> Result<(), DoctorError> {
        match fix {
            Fix::AgentDel { container_id, ifname, netns, cni_args } => {
                self.agent_del(container_id, ifname, netns, cni_args).await
            }
            Fix::PortmapRecord { container_id, ifname } => {
                let key = AttachmentKey::new(container_id, ifname);
                let src = self.sources.clone();
                blocking(move || portmap_record(&src, &key)).await
            }
            Fix::BandwidthRecord { container_id, ifname } => {
                let key = AttachmentKey::new(container_id, ifname);
                let src = self.sources.clone();
                blocking(move || bandwidth_record(&src, &key)).await
            }
            Fix::PortmapMapping(host) => {
                let (src, host) = (self.sources.clone(), *host);
                blocking(move || match src.portmap_pins() {
                    Some(pins) => {
                        Ok(Tables::open_pinned(&pins)?.remove_mapping(&host, &endpoint_text(&host))?)
                    }
                    None => Ok(()),
                })
                .await
            }
            Fix::PortmapFlows(host) => {
                let (src, host) = (self.sources.clone(), *host);
                blocking(move || match src.portmap_pins() {
                    Some(pins) => {
                        Tables::open_pinned(&pins)?.remove_flows_of(&host).map(drop).map_err(Into::into)
                    }
                    None => Ok(()),
                })
                .await
            }
            Fix::BandwidthLimit(key) => {
                let (src, key) = (self.sources.clone(), *key);
                blocking(move || match src.bandwidth_pins() {
                    Some(pins) => Ok(Table::open_pinned(&pins)?.remove_key(&key, &limit_text(&key))?),
                    None => Ok(()),
                })
                .await
            }
            Fix::IpamAllocation { dir, file, content } => {
                let (dir, file, content) = (dir.clone(), file.clone(), content.clone());
                let wait = self.timeout;
                blocking(move || release_allocation(&dir, &file, &content, wait)).await
            }
            Fix::Unverified(path) => Err(DoctorError::Unverified { path: path.clone() }),
            Fix::TempFile(path) | Fix::ResultCache(path) | Fix::MultusCacheFile(path) => {
                let path = path.clone();
                blocking(move || remove_file(path)).await
            }
            Fix::VfRecord { pci } => self.vf(pci).await,
            Fix::Link { index, name } => delete_link(*index, name).await,
            Fix::NftChain { guard, name } => Ok(nft::remove_chain(*guard, name).await?),
        }
    }

    /// The agent's DEL of the runtime attachment, as the runtime would send it (through the
    /// shim's own code, so the framing is the shim's).
    async fn agent_del(
        &self,
        container_id: &str,
        ifname: &str,
        netns: &str,
        cni_args: &str,
    ) -> Result<(), DoctorError> {
        let config =
            json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus", "socket": self.socket});
        let env: HashMap<String, String> = [
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", container_id),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", ifname),
            ("CNI_ARGS", cni_args),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let inv = Invocation { env, stdin: config.to_string().into_bytes() };
        let outcome = tokio::task::spawn_blocking(move || run_with_retry_schedule(&inv, AGENT_RETRIES))
            .await
            .map_err(DoctorError::Task)?;
        if outcome.exit_code == 0 {
            return Ok(());
        }
        let msg = serde_json::from_str::<Value>(&outcome.stdout)
            .ok()
            .and_then(|v| v["msg"].as_str().map(str::to_owned))
            .or(outcome.diagnostic)
            .unwrap_or_else(|| outcome.stdout.trim().to_owned());
        Err(DoctorError::AgentDel { container_id: container_id.to_owned(), socket: self.socket.clone(), msg })
    }

    /// The native `sriov` type's DEL for the VF's owner, with the config its ADD recorded:
    /// under the VF's lock, it gives the VF back as the record found it and forgets the record.
    async fn vf(&self, pci: &str) -> Result<(), DoctorError> {
        let state_dir = &self.sources.state_dir;
        let Some(record) = VfStore::new(state_dir).load(pci).await? else { return Ok(()) };
        let ipam = Ipam { bin_dirs: self.cni_bin_dirs.clone(), timeout: self.timeout };
        let plugin = Arc::new(SriovPlugin::new(ipam, state_dir, "/sys".into()));
        let env = record.owner.env();
        let call = NativeCall { command: Command::Del, config: &record.config, env: &env, list: None };
        plugin
            .invoke(call)
            .await
            .map(drop)
            .map_err(|e| DoctorError::Vf { pci: pci.to_owned(), msg: e.to_string() })
    }
}

async fn blocking(f: impl FnOnce() -> Result<(), DoctorError> + Send + 'static) -> Result<(), DoctorError> {
    tokio::task::spawn_blocking(f).await.map_err(DoctorError::Task)?
}

/// Removes a file; one gone already is fine.
fn remove_file(path: PathBuf) -> Result<(), DoctorError> {
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(DoctorError::Io { path, source: e }),
        _ => Ok(()),
    }
}

/// The entries of an orphan port mapping record (with their flows), then the record.
fn portmap_record(src: &Sources, key: &AttachmentKey) -> Result<(), DoctorError> {
    let store = PortmapStore::new(&src.state_dir);
    let Some(record) = store.load(key)? else { return Ok(()) };
    if let Some(pins) = src.portmap_pins() {
        let mut tables = Tables::open_pinned(&pins)?;
        for e in &record.entries {
            tables.remove(e)?;
        }
    }
    Ok(store.remove(key)?)
}

/// The limits of an orphan bandwidth record, then the record.
fn bandwidth_record(src: &Sources, key: &AttachmentKey) -> Result<(), DoctorError> {
    let store = BandwidthStore::new(&src.state_dir);
    let Some(record) = store.load(key)? else { return Ok(()) };
    if let Some(pins) = src.bandwidth_pins() {
        let mut table = Table::open_pinned(&pins)?;
        for e in &record.entries {
            table.remove(e)?;
        }
    }
    Ok(store.remove(key)?)
}

/// Releases an allocation under the network's lock, unless it changed since it was found (the
/// address was released and allocated again meanwhile: it is someone's now).
fn release_allocation(dir: &Path, file: &str, content: &str, wait: Duration) -> Result<(), DoctorError> {
    let Some(mut store) = DiskStore::open_existing(dir, Instant::now() + wait)? else { return Ok(()) };
    let path = dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(now) if now == content => store.release(file).map_err(|source| DoctorError::Io { path, source }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(DoctorError::Io { path, source }),
    }
}

/// Deletes a virtual link still under its temporary name; a device (no link kind: a VF's or a
/// NIC's netdev) cannot be deleted and is refused, naming what to do.
async fn delete_link(index: u32, name: &str) -> Result<(), DoctorError> {
    let node = Netlink::agent()?;
    let Some(link) = node.link_by_index(index).await? else { return Ok(()) };
    if link.name != name {
        return Ok(());
    }
    if link.kind.is_none() {
        return Err(DoctorError::Device { name: name.to_owned() });
    }
    Ok(node.delete(&link).await?)
}
