//! Reads what the node holds and what the records say into a [`Snapshot`], through the layers
//! that write them (state store, dataplane records and pinned maps, host-local store, VF store,
//! netlink), the runtime's result cache files, and which sandboxes the container runtime holds.
//!
//! The node's side is read before the records that explain it: everything the agent makes has
//! its record written first and removed last (container record, then dataplane or VF record,
//! then map entries; IPAM under the container record), so an ADD or DEL running meanwhile
//! never makes a live entry look unexplained. The runtime is asked last, with the records: a
//! sandbox it lists explains what its container holds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plexus_ebpf_common::shape::{ShapeKey, HOOK_INGRESS};
use serde_json::Value;

use super::find::{
    AllocationView, ContainerView, DataplaneRecordView, FlowsView, LimitView, LinkView, MappingView,
    MultusCacheView, NamespaceView, NftChainView, ResultCacheView, Snapshot, TempFileView, VfView,
};
use super::liveness::RuntimeView;
use super::DoctorError;
use crate::cni::error::chain as error_chain;
use crate::cri::Runtime;
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
use crate::takeover::multus::parse_delegates;
use crate::takeover::MultusCache;

/// host-local's dataDir when a config names none.
pub const DEFAULT_IPAM_DIR: &str = "/var/lib/cni/networks";

/// How long to wait for a host-local network's lock (held for one allocation at a time).
const IPAM_LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long the runtime has to answer ListPodSandbox.
const RUNTIME_TIMEOUT: Duration = Duration::from_secs(5);

/// libcni's cache directory (its result cache is `<dir>/results/`).
pub const DEFAULT_CNI_CACHE_DIR: &str = "/var/lib/cni";

/// Where doctor looks.
#[derive(Debug, Clone)]
pub struct Sources {
    pub state_dir: PathBuf,
    pub pin_dir: PathBuf,
    /// host-local dataDirs to look in besides those of the recorded secondary attachments.
    pub ipam_dirs: Vec<PathBuf>,
    /// The CRI socket of the runtime the node's kubelet uses.
    pub runtime_socket: PathBuf,
    /// libcni's cache directory, of the runtime's result cache files.
    pub cni_cache_dir: PathBuf,
    /// Multus's cache directory: its delegates files, and its libcni result cache files.
    pub multus_cache_dir: PathBuf,
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
    let results = src.cni_cache_dir.join("results");
    s.result_caches = blocking(move || result_caches(&results)).await?;
    // Multus's runs name the namespaces of the containers it attached, as the runtime's do.
    let multus = MultusCache::new(&src.multus_cache_dir);
    let multus_results = src.multus_cache_dir.join("results");
    s.result_caches.extend(blocking(move || result_caches(&multus_results)).await?);
    s.multus_caches = blocking(move || multus_caches(&multus)).await?;
    s.runtime = runtime(&src.runtime_socket).await;
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

/// The sandboxes of the runtime, or why it could not be asked.
async fn runtime(socket: &Path) -> RuntimeView {
    let socket_text = socket.display().to_string();
    match Runtime::new(socket, RUNTIME_TIMEOUT).sandboxes().await {
        Ok(list) => {
            RuntimeView::Listed { socket: socket_text, sandboxes: list.into_iter().map(|s| s.id).collect() }
        }
        Err(e) => RuntimeView::Unreachable { socket: socket_text, why: error_chain(&e) },
    }
}

/// The result cache files of `dir` (libcni's `<cache-dir>/results`) that parse, with the
/// network namespaces they name. A file that does not parse (being written, or not libcni's)
/// is left out: its container cannot be known.
fn result_caches(dir: &Path) -> Result<Vec<ResultCacheView>, DoctorError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(io(dir))?.path();
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            // Removed meanwhile (a DEL), or a directory.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EISDIR)) => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        let Some(mut view) = parse_result_cache(&path, &text) else { continue };
        for n in &mut view.namespaces {
            n.alive = namespace_may_exist(Path::new(&n.path));
        }
        out.push(view);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Multus's cache of each container it attached: its networks, and the runtime's DEL of it
/// as far as Multus's runs tell (the interface and `CNI_ARGS` of its default network's run).
fn multus_caches(cache: &MultusCache) -> Result<Vec<MultusCacheView>, DoctorError> {
    let io = |e: crate::takeover::store::CacheIoError| DoctorError::Io { path: e.path, source: e.source };
    let mut out = Vec::new();
    for container_id in cache.containers().map_err(io)? {
        // Removed meanwhile (a DEL).
        let Some(text) = cache.delegates(&container_id).map_err(io)? else { continue };
        let (networks, unreadable, default_network) =
            match parse_delegates(&text, crate::cni::CURRENT_VERSION) {
                Ok(d) => (d.iter().map(|d| d.name.clone()).collect(), None, Some(d[0].list.name.clone())),
                Err(e) => (Vec::new(), Some(e.to_string()), None),
            };
        let (ifname, cni_args) = cache.runtime_call(&container_id, default_network.as_deref()).map_err(io)?;
        out.push(MultusCacheView {
            path: cache.delegates_file(&container_id),
            container_id,
            networks,
            unreadable,
            ifname,
            cni_args,
        });
    }
    Ok(out)
}

/// A libcni result cache file: `{"kind": "cniCacheV1", "containerId", "ifName", "networkName",
/// "netns"?, "result"?: {"interfaces": [{"sandbox"?}]}}`. The namespaces are not looked at yet.
pub fn parse_result_cache(path: &Path, text: &[u8]) -> Option<ResultCacheView> {
    let v: Value = serde_json::from_slice(text).ok()?;
    let field = |name: &str| v[name].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let container_id = field("containerId")?;
    let mut paths = BTreeSet::new();
    paths.extend(field("netns"));
    if let Some(interfaces) = v["result"]["interfaces"].as_array() {
        paths.extend(
            interfaces
                .iter()
                .filter_map(|i| i["sandbox"].as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
    }
    Some(ResultCacheView {
        path: path.to_owned(),
        container_id,
        ifname: field("ifName").unwrap_or_default(),
        network: field("networkName").unwrap_or_default(),
        namespaces: paths.into_iter().map(|path| NamespaceView { path, alive: false }).collect(),
    })
}

/// Whether the network namespace at `path` may exist: false only when it certainly does not
/// (no such path, or what is there is not a network namespace, as a deleted named namespace's
/// mount point); a path that cannot be looked at (permissions, descriptors) counts as alive,
/// so nothing of it is freed.
fn namespace_may_exist(path: &Path) -> bool {
    match std::fs::File::open(path) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => false,
        Err(_) => true,
        Ok(_) => netns_exists(path),
    }
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
    fn result_caches_name_their_container_and_namespaces_from_their_content() {
        // As libcni writes it; the network's name has dashes, so the file name says nothing sure.
        let text = serde_json::json!({
            "kind": "cniCacheV1",
            "containerId": "abc-123",
            "config": "e30=",
            "ifName": "eth0",
            "networkName": "my-net-1",
            "netns": "/var/run/netns/cni-1",
            "cniArgs": [["K8S_POD_NAME", "p"]],
            "result": {"cniVersion": "1.0.0", "interfaces": [
                {"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/var/run/netns/cni-1"},
                {"name": "net2", "sandbox": "/proc/42/ns/net"}
            ]}
        });
        let path = Path::new("/c/results/my-net-1-abc-123-eth0");
        let view = parse_result_cache(path, text.to_string().as_bytes()).unwrap();
        assert_eq!(
            (view.container_id.as_str(), view.ifname.as_str(), view.network.as_str()),
            ("abc-123", "eth0", "my-net-1")
        );
        let paths: Vec<_> = view.namespaces.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["/proc/42/ns/net", "/var/run/netns/cni-1"]);
        // Older libcni: no netns field, no sandboxes: no namespace; no container: not a cache file.
        let old = serde_json::json!({"kind": "cniCacheV1", "containerId": "x", "ifName": "eth0", "networkName": "n"});
        assert_eq!(parse_result_cache(path, old.to_string().as_bytes()).unwrap().namespaces, []);
        for bad in [&b"{"[..], b"[]", br#"{"containerId": ""}"#, br#"{"containerId": 7}"#] {
            assert_eq!(parse_result_cache(path, bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn result_caches_are_read_with_whether_their_namespaces_exist() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(result_caches(&d.path().join("missing")).unwrap(), []);
        let gone = d.path().join("gone-netns");
        std::fs::write(&gone, "").unwrap(); // a deleted namespace's mount point: an empty file
        for (name, netns) in
            [("n-a-eth0", "/proc/self/ns/net".to_owned()), ("n-b-eth0", gone.display().to_string())]
        {
            let cid = &name[2..3];
            let body =
                serde_json::json!({"containerId": cid, "ifName": "eth0", "networkName": "n", "netns": netns});
            std::fs::write(d.path().join(name), body.to_string()).unwrap();
        }
        std::fs::write(d.path().join("n-c-eth0"), "{\"contain").unwrap();
        std::fs::create_dir(d.path().join("subdir")).unwrap();
        let found = result_caches(d.path()).unwrap();
        let seen: Vec<_> = found.iter().map(|c| (c.container_id.as_str(), c.namespaces[0].alive)).collect();
        assert_eq!(seen, [("a", true), ("b", false)]);
        assert!(!namespace_may_exist(&d.path().join("none")));
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
