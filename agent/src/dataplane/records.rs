//! Durable records of what the dataplane installed per attachment: one JSON file per
//! attachment (container ID + pod interface) under `<state-dir>/<kind>/`. They are the truth the
//! maps are reconciled with when the agent starts, what DEL removes (no prevResult needed) and
//! what CHECK verifies (`plexus-agent bandwidth set`, another process, rewrites them).
//!
//! Written atomically (a temporary file renamed over the old one) but not fsynced: what they
//! describe lives in bpffs and on network devices, which a power loss or reboot wipes as well,
//! and an agent that crashes finds them in the page cache. That saves two fsyncs per ADD
//! (milliseconds on a busy disk, the larger part of a plexus-portmap ADD).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::attach::AttachPoint;
use crate::cni::AttachmentKey;
use crate::state::atomic_write_volatile;

/// What a service records per attachment: its entries, and the kind of record they make (the
/// directory name under the state directory, also the word for it in messages).
pub trait RecordEntry: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    const KIND: &'static str;
}

/// What one attachment (container ID + pod interface) has installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record<E> {
    pub container_id: String,
    pub ifname: String,
    /// The network (configlist name).
    pub network: String,
    /// `namespace/name`, when the runtime said (CNI_ARGS).
    #[serde(default)]
    pub pod: Option<String>,
    pub entries: Vec<E>,
    /// The TC hooks the entries need.
    pub hooks: Vec<AttachPoint>,
}

impl<E> Record<E> {
    pub fn key(&self) -> AttachmentKey {
        AttachmentKey::new(&self.container_id, &self.ifname)
    }

    /// Who holds the attachment, for messages.
    pub fn owner(&self) -> String {
        owner(self.pod.as_deref(), &self.container_id, &self.ifname, &self.network)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} record {path}: {source}")]
    Io { kind: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{kind} record {path} is corrupt: {source}; move it aside and restart the agent")]
    Corrupt { kind: &'static str, path: PathBuf, source: serde_json::Error },
}

/// The records of one kind.
pub struct RecordStore<E> {
    dir: PathBuf,
    kind: PhantomData<E>,
}

impl<E> std::fmt::Debug for RecordStore<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStore").field("dir", &self.dir).finish()
    }
}

impl<E> Clone for RecordStore<E> {
    fn clone(&self) -> Self {
        RecordStore { dir: self.dir.clone(), kind: PhantomData }
    }
}

impl<E: RecordEntry> RecordStore<E> {
    pub fn new(state_dir: &Path) -> Self {
        RecordStore { dir: state_dir.join(E::KIND), kind: PhantomData }
    }

    /// Container IDs are `[A-Za-z0-9_.-]` (CNI spec) and interface names have no '/' or '@'.
    fn path(&self, key: &AttachmentKey) -> PathBuf {
        self.dir.join(format!("{}@{}.json", key.container_id, key.ifname))
    }

    fn io(path: PathBuf) -> impl FnOnce(std::io::Error) -> StoreError {
        move |source| StoreError::Io { kind: E::KIND, path, source }
    }

    pub fn save(&self, record: &Record<E>) -> Result<(), StoreError> {
        let path = self.path(&record.key());
        let body = serde_json::to_vec_pretty(record)
            .map_err(|e| Self::io(path.clone())(std::io::Error::other(e)))?;
        atomic_write_volatile(&path, &body).map_err(Self::io(path))
    }

    pub fn load(&self, key: &AttachmentKey) -> Result<Option<Record<E>>, StoreError> {
        let path = self.path(key);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|source| StoreError::Corrupt {
                kind: E::KIND,
                path,
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Self::io(path)(source)),
        }
    }

    /// Removing a record that is not there is fine: DEL is idempotent.
    pub fn remove(&self, key: &AttachmentKey) -> Result<(), StoreError> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Self::io(path)(source)),
        }
    }

    /// Every record, in file name order.
    pub fn load_all(&self) -> Result<Vec<Record<E>>, StoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(Self::io(self.dir.clone())(source)),
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path).map_err(Self::io(path.clone()))?;
                serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                    kind: E::KIND,
                    path,
                    source,
                })
            })
            .collect()
    }
}

/// Who holds an attachment, for messages: `pod ns/name (container C, interface I, network N)`.
fn owner(pod: Option<&str>, container_id: &str, ifname: &str, network: &str) -> String {
    let pod = pod.map_or_else(|| "a container".to_owned(), |p| format!("pod {p}"));
    format!("{pod} (container {container_id}, interface {ifname}, network {network})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Note(String);

    impl RecordEntry for Note {
        const KIND: &'static str = "notes";
    }

    fn record(pod: Option<&str>) -> Record<Note> {
        Record {
            container_id: "c1".into(),
            ifname: "net1".into(),
            network: "n".into(),
            pod: pod.map(str::to_owned),
            entries: vec![Note("x".into())],
            hooks: Vec::new(),
        }
    }

    #[test]
    fn records_round_trip_and_say_what_is_wrong() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::<Note>::new(d.path());
        let key = AttachmentKey::new("c1", "net1");
        assert!(store.load_all().unwrap().is_empty());
        assert_eq!(store.load(&key).unwrap(), None);
        let n = record(Some("ns/p"));
        store.save(&n).unwrap();
        assert_eq!(n.key(), key);
        assert_eq!(store.load_all().unwrap(), std::slice::from_ref(&n));
        assert_eq!(store.load(&key).unwrap(), Some(n.clone()));
        store.remove(&key).unwrap();
        store.remove(&key).unwrap();
        assert!(store.load_all().unwrap().is_empty());

        std::fs::write(d.path().join("notes/c2@net1.json"), "{").unwrap();
        let err = store.load_all().unwrap_err().to_string();
        assert!(err.starts_with("notes record ") && err.contains("is corrupt"), "{err}");
        assert_eq!(n.owner(), "pod ns/p (container c1, interface net1, network n)");
        assert_eq!(record(None).owner(), "a container (container c1, interface net1, network n)");
    }

    #[test]
    fn records_without_a_pod_or_attach_modes_still_read() {
        let old = r#"{"container_id": "c1", "ifname": "net1", "network": "n", "entries": [],
            "hooks": [{"ifindex": 3, "ifname": "br0", "hook": "ingress"}]}"#;
        let r: Record<Note> = serde_json::from_str(old).unwrap();
        assert_eq!(r.pod, None);
        assert_eq!(r.hooks[0].attach, crate::dataplane::attach::Attach::Tcx);
    }
}
