//! Reads what the node holds and what the records say into a [`Snapshot`], through the layers
//! that write them (state store, dataplane records and pinned maps, host-local store, VF store,
//! netlink).
//!
//! The node's side is read before the records that explain it: everything the agent makes has
//! its record written first and removed last (container record, then dataplane or VF record,
//! then map entries; IPAM under the container record), so an ADD or DEL running meanwhile
//! never makes a live entry look unexplained.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plexus_ebpf_common::shape::{ShapeKey, HOOK_INGRESS};
use serde_json::Value;

use super::find::{
    AllocationView, ContainerView, DataplaneRecordView, FlowsView, LimitView, LinkView, MappingView,
    NftChainView, Snapshot, TempFileView, VfView,
};
use super::DoctorError;
use crate::dataplane::bandwidth::{self, shaper::PIN_SUBDIR, store::Store as BandwidthStore, table::Table};
use crate::dataplane::pin::PinDir;
use crate::dataplane::portmap;
use crate::dataplane::portmap::entries::{map_endpoint_text, protocol_text};
use crate::dataplane::portmap::flows::counts_by_host;
use crate::dataplane::portmap::store::Store as PortmapStore;
use crate::dataplane::portmap::table::Tables;
use crate::ipam::host_local::allocator::Store as _;
use crate::ipam::host_local::store::DiskStore;
use crate::native::bridge::nft::{self, Guard};
use crate::native::sriov::state::VfStore;
use crate::netlink::{netns_exists, Netlink};
use crate::state::{temp_file_pid, ContainerRecord, StateStore};

/// host-local's dataDir when a config names none.
pub const DEFAULT_IPAM_DIR: &str = "/var/lib/cni/networks";

/// How long to wait for a host-local network's lock (held for one allocation at a time).
const IPAM_LOCK_WAIT: Duration = Duration::from_secs(10);

/// Where doctor looks.
#[derive(Debug, Clone)]
pub struct Sources {
    pub state_dir: PathBuf,
    pub pin_dir: PathBuf,
    /// host-local dataDirs to look in besides those of the recorded secondary attachments.
    pub ipam_dirs: Vec<PathBuf>,
}

impl Sources {
    /// The port mapping object's pins, when all its maps are pinned.
    pub fn portmap_pins(&self) -> Option<PinDir> {
        let pins = PinDir::open(&self.pin_dir);
        portmap::mapper::OBJECT.pinned_in(&pins).then_some(pins)
    }

    /// The shaping object's pins, when all its maps are pinned (the port mapping object
    /// creates the shared limits map when it loads first).
    pub fn bandwidth_pins(&self) -> Option<PinDir> {
        let pins = PinDir::open(&self.pin_dir.join(PIN_SUBDIR));
        bandwidth::shaper::OBJECT.pinned_in(&pins).then_some(pins)
    }
}

/// Everything, node first, records last.
pub async fn snapshot(src: &Sources) -> Result<Snapshot, DoctorError> {
    let store = StateStore::new(&src.state_dir);
    // A first look at the records, for the dataDirs of their networks.
    let ipam_dirs = ipam_dirs(&src.ipam_dirs, &store.list().await?);
    let mut s = Snapshot {
        links: links().await?,
        nft_chains: nft_chains().await?,
        allocations: blocking(move || allocations(&ipam_dirs)).await?,
        ..Snapshot::default()
    };
    let (maps_src, records_src) = (src.clone(), src.clone());
    let (mappings, flows, limits) = blocking(move || maps(&maps_src)).await?;
    (s.mappings, s.flows, s.limits) = (mappings, flows, limits);
    let (portmap, bandwidth) = blocking(move || dataplane_records(&records_src)).await?;
    (s.portmap_records, s.bandwidth_records) = (portmap, bandwidth);
    s.vfs = VfStore::new(&src.state_dir)
        .list()
        .await?
        .into_iter()
        .map(|r| VfView {
            pci: r.device.pci.clone(),
            container_id: r.owner.container_id.clone(),
            ifname: r.owner.ifname.clone(),
            owner: r.owner.to_string(),
        })
        .collect();
    let state_dir = src.state_dir.clone();
    s.temp_files = blocking(move || temp_files(&state_dir)).await?;
    let records = store.list().await?;
    s.records = blocking(move || records.iter().map(container_view).collect()).await?;
    Ok(s)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DoctorError> + Send + 'static,
) -> Result<T, DoctorError> {
    tokio::task::spawn_blocking(f).await.map_err(DoctorError::Task)?
}

fn container_view(r: &ContainerRecord) -> Result<ContainerView, DoctorError> {
    Ok(ContainerView {
        container_id: r.container_id.clone(),
        ifname: r.ifname.clone(),
        netns: r.netns.clone(),
        netns_alive: !r.netns.is_empty() && netns_exists(Path::new(&r.netns)),
        cni_args: r.cni_args.clone(),
        attachment_ifnames: r.attachments.iter().map(|a| a.ifname.clone()).collect(),
        pod: r.pod.as_ref().map(|p| format!("{}/{}", p.namespace, p.name)),
    })
}

/// The chains of the native bridge's nftables tables.
async fn nft_chains() -> Result<Vec<NftChainView>, DoctorError> {
    let mut out = Vec::new();
    for guard in Guard::ALL {
        let chains = nft::chains(guard).await?;
        out.extend(chains.into_iter().map(|c| NftChainView { guard, name: c.name, comment: c.comment }));
    }
    Ok(out)
}

async fn links() -> Result<Vec<LinkView>, DoctorError> {
    let node = Netlink::agent()?;
    Ok(node
        .links()
        .await?
        .into_iter()
        .map(|l| LinkView { index: l.index, name: l.name, kind: l.kind.map(|k| k.to_string()) })
        .collect())
}

/// The given dataDirs, and those of the host-local IPAM of every recorded secondary attachment.
/// The cluster default network's is left out unless given: pods attached before plexus was
/// installed hold addresses there without a record of plexus.
pub fn ipam_dirs(given: &[PathBuf], records: &[ContainerRecord]) -> BTreeSet<PathBuf> {
    let mut dirs: BTreeSet<PathBuf> = given.iter().cloned().collect();
    for a in records.iter().flat_map(|r| &r.attachments).filter(|a| !a.is_default) {
        if let Ok(list) = serde_json::to_value(&a.delegate.list) {
            host_local_data_dirs(&list, &mut dirs);
        }
    }
    dirs
}

/// Every `"ipam": {"type": "host-local", "dataDir": ...}` in a config, at any depth.
fn host_local_data_dirs(v: &Value, out: &mut BTreeSet<PathBuf>) {
    match v {
        Value::Object(map) => {
            if let Some(ipam) = map.get("ipam").filter(|i| i["type"] == "host-local") {
                out.insert(ipam["dataDir"].as_str().unwrap_or(DEFAULT_IPAM_DIR).into());
            }
            map.values().for_each(|v| host_local_data_dirs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| host_local_data_dirs(v, out)),
        _ => {}
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DoctorError + '_ {
    move |source| DoctorError::Io { path: path.to_owned(), source }
}

/// The allocations of every network directory (`<dataDir>/<network>`) of `data_dirs`, each
/// read under the network's lock.
fn allocations(data_dirs: &BTreeSet<PathBuf>) -> Result<Vec<AllocationView>, DoctorError> {
    let mut out = Vec::new();
    for data_dir in data_dirs {
        let entries = match std::fs::read_dir(data_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(data_dir)(e)),
        };
        let mut networks: Vec<PathBuf> =
            entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect();
        networks.sort();
        for dir in networks {
            let Some(store) = DiskStore::open_existing(&dir, Instant::now() + IPAM_LOCK_WAIT)? else {
                continue;
            };
            let mut found = store.allocations().map_err(io(&dir))?;
            found.sort_by(|a, b| a.file.cmp(&b.file));
            out.extend(found.into_iter().map(|a| AllocationView {
                dir: dir.clone(),
                file: a.file,
                content: a.content,
            }));
        }
    }
    Ok(out)
}

type Maps = (Vec<MappingView>, Vec<FlowsView>, Vec<LimitView>);

/// The keys of the pinned port mapping and bandwidth maps; none when a dataplane never ran.
fn maps(src: &Sources) -> Result<Maps, DoctorError> {
    let (mut mappings, mut flows, mut limits) = (Vec::new(), Vec::new(), Vec::new());
    if let Some(pins) = src.portmap_pins() {
        let tables = Tables::open_pinned(&pins)?;
        let hosts: BTreeSet<_> = tables.forward_keys().into_iter().chain(tables.socket_hosts()).collect();
        mappings = hosts.into_iter().map(|host| MappingView { host, text: endpoint_text(&host) }).collect();
        flows = counts_by_host(&tables.flows())
            .into_iter()
            .map(|(host, count)| FlowsView { host, text: endpoint_text(&host), count })
            .collect();
    }
    if let Some(pins) = src.bandwidth_pins() {
        let table = Table::open_pinned(&pins)?;
        let keys: BTreeSet<ShapeKey> = table.keys().into_iter().chain(table.stats_keys()).collect();
        limits = keys.into_iter().map(|key| LimitView { key, text: limit_text(&key) }).collect();
    }
    Ok((mappings, flows, limits))
}

/// "10.0.0.1:8080/tcp", as `portmap list` writes a host endpoint.
pub fn endpoint_text(e: &plexus_ebpf_common::Endpoint) -> String {
    format!("{}/{}", map_endpoint_text(&e.addr, e.port_be), protocol_text(e.proto))
}

/// "ifindex 7 ingress hook, MAC 0a:58:...".
pub fn limit_text(k: &ShapeKey) -> String {
    let hook = if k.hook == HOOK_INGRESS { "ingress" } else { "egress" };
    let mac = if k.mac == [0; 6] { String::new() } else { format!(", MAC {}", crate::netlink::Mac(k.mac)) };
    format!("ifindex {} {hook} hook{mac}", k.ifindex)
}

type DataplaneRecords =
    (Vec<DataplaneRecordView<plexus_ebpf_common::Endpoint>>, Vec<DataplaneRecordView<ShapeKey>>);

fn dataplane_records(src: &Sources) -> Result<DataplaneRecords, DoctorError> {
    let portmap = PortmapStore::new(&src.state_dir)
        .load_all()?
        .into_iter()
        .map(|r| DataplaneRecordView {
            owner: r.owner(),
            keys: r.entries.iter().map(|e| e.host_endpoint()).collect(),
            container_id: r.container_id,
            ifname: r.ifname,
        })
        .collect();
    let bandwidth = BandwidthStore::new(&src.state_dir)
        .load_all()?
        .into_iter()
        .map(|r| DataplaneRecordView {
            owner: r.owner(),
            keys: r.entries.iter().map(|e| e.key()).collect(),
            container_id: r.container_id,
            ifname: r.ifname,
        })
        .collect();
    Ok((portmap, bandwidth))
}

/// Temporary files of atomic writes anywhere in the state directory (records of every kind,
/// pods' status files), with whether their writer still runs.
fn temp_files(state_dir: &Path) -> Result<Vec<TempFileView>, DoctorError> {
    let mut out = Vec::new();
    walk(state_dir, 3, &mut |path| {
        let Some(pid) = path.file_name().and_then(|n| n.to_str()).and_then(temp_file_pid) else { return };
        out.push(TempFileView { path: path.to_owned(), pid, pid_alive: process_runs(pid) });
    })?;
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Whether a process with this ID runs (in doctor's PID namespace: run doctor where the
/// agent runs, in its container on Kubernetes).
fn process_runs(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Calls `each` on every file below `dir`, `depth` directory levels down at most.
fn walk(dir: &Path, depth: usize, each: &mut dyn FnMut(&Path)) -> Result<(), DoctorError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            if depth > 0 {
                walk(&path, depth - 1, each)?;
            }
        } else if kind.is_file() {
            each(&path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dirs_are_found_at_any_depth_with_the_default_when_unnamed() {
        let list = serde_json::json!({"plugins": [
            {"type": "bridge", "ipam": {"type": "host-local", "dataDir": "/a"}},
            {"type": "macvlan", "ipam": {"type": "host-local"}},
            {"type": "sriov", "ipam": {"type": "static"}},
            {"type": "x", "nested": [{"ipam": {"type": "host-local", "dataDir": "/b"}}]}
        ]});
        let mut dirs = BTreeSet::new();
        host_local_data_dirs(&list, &mut dirs);
        let dirs: Vec<_> = dirs.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(dirs, ["/a", "/b", DEFAULT_IPAM_DIR]);
    }

    #[test]
    fn temp_files_are_found_below_the_state_dir_with_their_writer() {
        let d = tempfile::tempdir().unwrap();
        let deep = d.path().join("pods/default");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(d.path().join("attachments")).unwrap();
        let mine = d.path().join(format!("attachments/.c@eth0.json.{}.tmp", std::process::id()));
        let gone = deep.join(format!(".p.network-status.json.{}.tmp", u32::MAX));
        for f in [&mine, &gone, &d.path().join("attachments/c@eth0.json")] {
            std::fs::write(f, "").unwrap();
        }
        let found = temp_files(d.path()).unwrap();
        assert_eq!(
            found,
            [
                TempFileView { path: mine, pid: std::process::id(), pid_alive: true },
                TempFileView { path: gone, pid: u32::MAX, pid_alive: false },
            ]
        );
        assert_eq!(temp_files(&d.path().join("missing")).unwrap(), []);
    }

    #[test]
    fn limits_and_endpoints_read_as_the_listings_write_them() {
        let key = ShapeKey { ifindex: 7, hook: HOOK_INGRESS, pad: 0, mac: [2, 0, 0, 0, 0, 1] };
        assert_eq!(limit_text(&key), "ifindex 7 ingress hook, MAC 02:00:00:00:00:01");
        assert_eq!(limit_text(&ShapeKey { hook: 1, mac: [0; 6], ..key }), "ifindex 7 egress hook");
        let e = plexus_ebpf_common::Endpoint::new(
            [0, 0, 0xffffu32.to_be(), u32::from_be_bytes([10, 0, 0, 1]).to_be()],
            8080u16.to_be(),
            6,
        );
        assert!(endpoint_text(&e).ends_with(":8080/tcp"), "{}", endpoint_text(&e));
    }
}
