//! The durable record of every attachment, so DEL, CHECK and GC work after the agent
//! restarts or the node reboots.
//!
//! One JSON file per runtime attachment (container ID + interface), written atomically
//! (temporary file, fsync, rename). The first write of a record, the ADD's write-ahead
//! intent (everything the ADD may attempt), is durable before the first plugin runs: the
//! directory is fsynced too ([`Sync::Durable`]). The ADD's and DEL's later writes replace it ([`Sync::Replacing`]):
//! their data is fsynced, so a power loss leaves the old record or the new one, never a torn
//! file; the directory is not, since the old record (a superset, or one without results)
//! is enough for DEL and GC to finish. One durable record before the runtime hears back,
//! three fsyncs per ADD.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cni::{CniCode, ErrorCode};
use crate::phase::{self, Phase};
use crate::spec::delegate_conf::DelegateConfig;
use crate::spec::selection::NetworkSelection;

/// An attachment's use of an IPAMClaim (spec v1.3), as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimUse {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid` of the claim when the attachment was planned.
    pub uid: String,
    /// Whether the claim's status had addresses: if not, the attachment's are written there.
    pub had_ips: bool,
}

/// One attachment of a container: the default network or a selected one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    /// The network-status name.
    pub network: String,
    pub is_default: bool,
    /// CNI_IFNAME it runs with.
    pub ifname: String,
    /// The exact config it was added with: DEL must run the same one.
    pub delegate: DelegateConfig,
    /// The raw result of the ADD (the delegate's own version), the prevResult of DEL/CHECK.
    #[serde(default)]
    pub result: Option<Value>,
    /// Gateways when this attachment holds the pod's default route (spec 4.1.2.1.9, or a
    /// PodNetwork entry's `isDefaultGW`, filled from the attachment's result).
    #[serde(default)]
    pub default_route: Option<Vec<IpAddr>>,
    /// The PodNetwork this attachment is of, when the pod asked for PodNetworks (KEP-3698).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_network: Option<String>,
    /// The device the cluster allocated to this attachment, for a NAD with the
    /// `k8s.v1.cni.cncf.io/resourceName` annotation (a device plugin's, through kubelet's
    /// PodResources API, or a DRA claim's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<AllocatedDevice>,
    /// The attachment's device information (Device Information Specification, section 3): the
    /// network-status `device-info` and the content of its CNI device-info file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_info: Option<Value>,
    /// The IPAMClaim whose addresses the attachment has (NPWG spec 8), when its selection
    /// references one and its IPAM honours it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipam_claim: Option<ClaimUse>,
    /// The NPWG selection this attachment was made for, so a live change of the pod's
    /// selection annotation can tell what changed (`crate::live`). `None` for the default
    /// network, other front-ends, and records written before live attachments existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<NetworkSelection>,
    /// Added by a live change whose ADD has not answered yet: recorded before the ADD runs, so
    /// an agent that dies during it undoes and retries it on start (`crate::live`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub live_pending: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A device of a cluster resource, allocated to one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// The NAD's `k8s.v1.cni.cncf.io/resourceName`.
    pub resource_name: String,
    /// The device's ID as its allocator reports it: a PCI address for SR-IOV VFs.
    pub device_id: String,
}

/// The pod a container belongs to, as CNI_ARGS named it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub uid: Option<String>,
}

/// Where a pod's list of networks came from: one of its annotations, or its runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontEnd {
    /// The NPWG selection annotation (`k8s.v1.cni.cncf.io/networks`), or none.
    #[default]
    Npwg,
    /// The KEP-3698 PodNetwork list (`plexus.dev/pod-networks`).
    PodNetworks,
    /// The runtime's list of the sandbox's networks (`runtimeConfig.podSandboxNetworks`, the
    /// CRI network API proposal): its first network is in the place of the cluster default one.
    Sandbox,
}

impl FrontEnd {
    fn is_npwg(&self) -> bool {
        *self == FrontEnd::Npwg
    }
}

/// Everything plexus did for one runtime attachment (container ID, CNI_IFNAME).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerRecord {
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    #[serde(default)]
    pub cni_args: String,
    #[serde(default)]
    pub pod: Option<PodRef>,
    /// In order of attachment; the default network first.
    pub attachments: Vec<AttachmentRecord>,
    /// False while the ADD is running: everything listed may have been attempted.
    pub complete: bool,
    /// DELs that failed on attachments whose ADD never answered (no result recorded: the
    /// agent died during the ADD). See `engine::UNCONFIRMED_DEL_ATTEMPTS`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unconfirmed_del_failures: u32,
    /// The front-end that planned the attachments (records written before PodNetworks
    /// existed are NPWG's).
    #[serde(default, skip_serializing_if = "FrontEnd::is_npwg")]
    pub front_end: FrontEnd,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How far a record write goes before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// The content and the name in the directory survive a power loss (the file and the
    /// directory fsynced): a new record, or one that must not revert.
    Durable,
    /// A record replacing a durable one whose content is enough for DEL and GC: the content is
    /// fsynced (the file is never torn), the directory not (a power loss may bring the old
    /// record back).
    Replacing,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("state file {path} is corrupt: {source}; move it aside to let the agent start over")]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("state record of container {container_id} cannot be encoded: {source}")]
    Encode { container_id: String, source: serde_json::Error },
    #[error("state I/O task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl CniCode for StateError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::IoFailure
    }
}

/// The directory of records.
#[derive(Debug, Clone)]
pub struct StateStore {
    dir: PathBuf,
}

impl StateStore {
    pub fn new(state_dir: &Path) -> Self {
        StateStore { dir: state_dir.join("attachments") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Container IDs are restricted to `[A-Za-z0-9_.-]` by the CNI spec and interface names
    /// cannot hold '/' or '@', so the file name is unambiguous and stays in the directory.
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}@{ifname}.json"))
    }

    pub async fn save(&self, record: &ContainerRecord, sync: Sync) -> Result<(), StateError> {
        let _timer = phase::start(Phase::StateWrite);
        let path = self.path(&record.container_id, &record.ifname);
        let body = serde_json::to_vec_pretty(record)
            .map_err(|source| StateError::Encode { container_id: record.container_id.clone(), source })?;
        let syncs = match sync {
            Sync::Durable => Syncs::FileAndDirectory,
            Sync::Replacing => Syncs::File,
        };
        blocking(move || replace(&path, &body, syncs).map_err(|source| StateError::Io { path, source })).await
    }

    pub async fn load(
        &self,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<ContainerRecord>, StateError> {
        let _timer = phase::start(Phase::StateRead);
        // Read in place rather than on the blocking pool: one small file this process wrote,
        // in the page cache, takes microseconds, where handing it to another thread and back
        // cost 50 to 100 us of every request (two wake-ups), the shim's round trip included.
        read_record(&self.path(container_id, ifname))
    }

    pub async fn remove(&self, container_id: &str, ifname: &str) -> Result<(), StateError> {
        let _timer = phase::start(Phase::StateWrite);
        let path = self.path(container_id, ifname);
        blocking(move || match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(path.parent().unwrap_or(Path::new(".")))
                .map_err(|source| StateError::Io { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io { path, source }),
        })
        .await
    }

    /// Every record; a corrupt file is reported, not skipped silently.
    pub async fn list(&self) -> Result<Vec<ContainerRecord>, StateError> {
        let dir = self.dir.clone();
        blocking(move || {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(source) => return Err(StateError::Io { path: dir, source }),
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            paths.sort();
            let mut out = Vec::with_capacity(paths.len());
            for p in paths {
                if let Some(r) = read_record(&p)? {
                    out.push(r);
                }
            }
            Ok(out)
        })
        .await
    }
}

fn read_record(path: &Path) -> Result<Option<ContainerRecord>, StateError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StateError::Corrupt { path: path.to_owned(), source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StateError::Io { path: path.to_owned(), source }),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StateError> + Send + 'static,
) -> Result<T, StateError> {
    tokio::task::spawn_blocking(f).await?
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content,
/// never a torn file, and the new content survives a power loss once this returns.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, Syncs::FileAndDirectory)
}

/// [`atomic_write`] without the fsyncs: the new content survives the process (the page cache
/// has it), not a power loss. For records of state that does not survive a reboot either.
pub fn atomic_write_volatile(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, Syncs::None)
}

/// What a replacement fsyncs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Syncs {
    None,
    /// The new content, before the rename: after a power loss the name holds the old content
    /// or the new one, never a torn file.
    File,
    /// The new content, and the directory after the rename: the new content survives.
    FileAndDirectory,
}

fn replace(path: &Path, bytes: &[u8], syncs: Syncs) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile_in(dir, path)?;
    let result = (|| {
        tmp.1.write_all(bytes)?;
        if syncs != Syncs::None {
            tmp.1.sync_all()?;
        }
        std::fs::rename(&tmp.0, path)?;
        if syncs == Syncs::FileAndDirectory {
            sync_dir(dir)?;
        }
        Ok(())
    })();
    if result.is_err() {
        // The write's error is the one to report; a leftover temporary file is ignored by
        // `list` (not .json) and the warning names it.
        if let Err(e) = std::fs::remove_file(&tmp.0) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %tmp.0.display(), "removing a temporary state file: {e}");
            }
        }
    }
    result
}

fn tempfile_in(dir: &Path, target: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let base = target.file_name().and_then(|n| n.to_str()).unwrap_or("state");
    let tmp = dir.join(format!(".{base}.{}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
    Ok((tmp, file))
}

/// The target's name and the writer's process ID when `name` is a temporary file of
/// [`atomic_write`] or [`atomic_write_volatile`] (`.<target>.<pid>.tmp`).
fn temp_file_parts(name: &str) -> Option<(&str, u32)> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (target, pid) = inner.rsplit_once('.')?;
    if target.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((target, pid.parse().ok()?))
}

/// The writer's process ID when `name` is a temporary file of an atomic write; one whose
/// process is gone is a leftover of a crash mid-write (`plexus-agent doctor` lists and
/// removes them).
pub fn temp_file_pid(name: &str) -> Option<u32> {
    temp_file_parts(name).map(|(_, pid)| pid)
}

/// Whether `name` is a temporary file of an atomic write (`.<target>.<pid>.tmp`), of any
/// target or, with `target`, of that one.
pub fn is_temp_file_name(name: &str, target: Option<&str>) -> bool {
    temp_file_parts(name).is_some_and(|(base, _)| target.is_none_or(|t| t == base))
}

/// Removes the temporary files that writes interrupted by a crash left in `dir` (and its
/// subdirectories, `depth` levels down; symbolic links are not followed), and returns them.
/// Run at start, before anything writes: such a file is otherwise there for good. With
/// `target`, only the temporary files of that file name are removed.
pub fn sweep_temp_files(dir: &Path, depth: usize, target: Option<&str>) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), "looking for interrupted writes: {e}");
            }
            return removed;
        }
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            if depth > 0 {
                removed.extend(sweep_temp_files(&path, depth - 1, target));
            }
            continue;
        }
        let ours = kind.is_file() && entry.file_name().to_str().is_some_and(|n| is_temp_file_name(n, target));
        if !ours {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(file = %path.display(), "removed the temporary file of a write interrupted by a crash");
                removed.push(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), "removing the temporary file of an interrupted write: {e}")
            }
        }
    }
    removed
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::config::NetworkConfigList;

    fn record(cid: &str) -> ContainerRecord {
        let list =
            NetworkConfigList::parse(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#, None).unwrap();
        ContainerRecord {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            cni_args: String::new(),
            pod: Some(PodRef { namespace: "ns".into(), name: "p".into(), uid: None }),
            unconfirmed_del_failures: 0,
            front_end: FrontEnd::Npwg,
            attachments: vec![AttachmentRecord {
                network: "n".into(),
                is_default: true,
                ifname: "eth0".into(),
                delegate: DelegateConfig { list, runtime_config: Default::default() },
                result: Some(serde_json::json!({"cniVersion":"1.0.0"})),
                default_route: None,
                pod_network: None,
                device: None,
                device_info: None,
                ipam_claim: None,
                selection: None,
                live_pending: false,
            }],
            complete: true,
        }
    }

    #[tokio::test]
    async fn save_load_list_remove() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        assert!(store.list().await.unwrap().is_empty());
        store.save(&record("c1"), Sync::Durable).await.unwrap();
        store.save(&record("c2"), Sync::Durable).await.unwrap();
        assert_eq!(store.load("c1", "eth0").await.unwrap(), Some(record("c1")));
        assert_eq!(store.list().await.unwrap().len(), 2);
        store.remove("c1", "eth0").await.unwrap();
        store.remove("c1", "eth0").await.unwrap();
        assert_eq!(store.load("c1", "eth0").await.unwrap(), None);
        let leftovers: Vec<_> = std::fs::read_dir(store.dir()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary files stay behind");
    }

    /// A record as written before PodNetworks existed (no `front_end`, no `pod_network`).
    const OLD_RECORD: &str = r#"{
      "container_id": "c0", "ifname": "eth0", "netns": "/var/run/netns/x", "cni_args": "",
      "pod": {"namespace": "ns", "name": "p", "uid": null},
      "attachments": [{"network": "n", "is_default": true, "ifname": "eth0",
        "delegate": {"list": {"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}]}},
        "result": {"cniVersion": "1.0.0"}, "default_route": null}],
      "complete": true
    }"#;

    #[tokio::test]
    async fn records_written_before_pod_networks_still_load_as_npwg_ones() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        std::fs::create_dir_all(store.dir()).unwrap();
        std::fs::write(store.dir().join("c0@eth0.json"), OLD_RECORD).unwrap();
        let loaded = store.load("c0", "eth0").await.unwrap().expect("the old record loads");
        assert_eq!(loaded.front_end, FrontEnd::Npwg);
        assert_eq!(loaded.attachments[0].pod_network, None);
        assert_eq!(loaded.attachments[0].delegate.list.name, "n");
    }

    #[tokio::test]
    async fn the_pod_network_fields_round_trip_and_npwg_records_do_not_grow() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        let mut kep = record("c1");
        kep.front_end = FrontEnd::PodNetworks;
        kep.attachments[0].pod_network = Some("default".into());
        store.save(&kep, Sync::Durable).await.unwrap();
        assert_eq!(store.load("c1", "eth0").await.unwrap(), Some(kep));
        let text = std::fs::read_to_string(store.dir().join("c1@eth0.json")).unwrap();
        assert!(text.contains("\"pod-networks\"") && text.contains("\"pod_network\": \"default\""), "{text}");
        store.save(&record("c2"), Sync::Durable).await.unwrap();
        let text = std::fs::read_to_string(store.dir().join("c2@eth0.json")).unwrap();
        assert!(!text.contains("front_end") && !text.contains("pod_network"), "{text}");
    }

    #[tokio::test]
    async fn a_sandbox_record_round_trips_and_names_its_front_end() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        let mut sandbox = record("c1");
        sandbox.front_end = FrontEnd::Sandbox;
        store.save(&sandbox, Sync::Replacing).await.unwrap();
        assert_eq!(store.load("c1", "eth0").await.unwrap(), Some(sandbox));
        let text = std::fs::read_to_string(store.dir().join("c1@eth0.json")).unwrap();
        assert!(text.contains("\"front_end\": \"sandbox\""), "{text}");
    }

    #[test]
    fn temporary_file_names_give_their_writer() {
        let d = tempfile::tempdir().unwrap();
        let (path, _file) = tempfile_in(d.path(), &d.path().join("c1@eth0.json")).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(temp_file_pid(name), Some(std::process::id()));
        assert_eq!(temp_file_pid(".c1@eth0.json.42.tmp"), Some(42));
        for not_one in [
            "c1@eth0.json",
            ".c1@eth0.json.tmp",
            "..42.tmp",
            ".x.4a.tmp",
            "x.42.tmp",
            ".x.42.tmp.1",
            ".x..tmp",
        ] {
            assert_eq!(temp_file_pid(not_one), None, "{not_one}");
        }
    }

    #[test]
    fn temp_file_names() {
        for name in [".c1@eth0.json.123.tmp", ".00-plexus.conflist.1.tmp", ".a.b.c.42.tmp"] {
            assert!(is_temp_file_name(name, None), "{name}");
        }
        for name in [
            "c1@eth0.json",
            "c1@eth0.json.123.tmp",
            ".c1@eth0.json.tmp",
            ".c1@eth0.json.12a.tmp",
            "..123.tmp",
            ".123.tmp",
            ".x.123.tmp~",
            ".x.123.TMP",
        ] {
            assert!(!is_temp_file_name(name, None), "{name}");
        }
        assert!(is_temp_file_name(".00-plexus.conflist.9.tmp", Some("00-plexus.conflist")));
        assert!(!is_temp_file_name(".10-other.conflist.9.tmp", Some("00-plexus.conflist")));
    }

    #[tokio::test]
    async fn temporary_files_of_interrupted_writes_are_swept() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        store.save(&record("c1"), Sync::Durable).await.unwrap();
        // What a crash between creating and renaming leaves, here and in a deeper directory.
        let left = store.dir().join(".c2@eth0.json.4242.tmp");
        std::fs::write(&left, "{").unwrap();
        let deep = d.path().join("pods/ns1");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join(".p.network-status.json.7.tmp"), "[").unwrap();
        // Not ours: kept.
        let keep =
            [d.path().join("notes.tmp"), store.dir().join(".hidden"), deep.join("p.network-status.json")];
        for k in &keep {
            std::fs::write(k, "x").unwrap();
        }
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join(".x.1.tmp"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("link")).unwrap();

        let mut removed = sweep_temp_files(d.path(), 3, None);
        removed.sort();
        assert_eq!(
            removed,
            [store.dir().join(".c2@eth0.json.4242.tmp"), deep.join(".p.network-status.json.7.tmp")]
        );
        assert!(!left.exists());
        assert!(keep.iter().all(|k| k.exists()));
        assert!(outside.path().join(".x.1.tmp").exists(), "symbolic links are not followed");
        assert_eq!(store.list().await.unwrap(), [record("c1")]);
        assert!(sweep_temp_files(&d.path().join("missing"), 3, None).is_empty());
    }

    #[tokio::test]
    async fn corrupt_records_are_reported() {
        let d = tempfile::tempdir().unwrap();
        let store = StateStore::new(d.path());
        std::fs::create_dir_all(store.dir()).unwrap();
        std::fs::write(store.dir().join("bad@eth0.json"), "{").unwrap();
        assert!(matches!(store.list().await, Err(StateError::Corrupt { .. })));
    }
}
