//! Durable records of what the dataplane installed per attachment: one JSON file per
//! attachment (container ID + pod interface) under `<state-dir>/<kind>/`. They are the truth the
//! maps are reconciled with when the agent starts, and what DEL removes (no prevResult needed).
//!
//! Written atomically (a temporary file renamed over the old one) but not fsynced: what they
//! describe lives in bpffs and on network devices, which a power loss or reboot wipes as well,
//! and an agent that crashes finds them in the page cache. That saves two fsyncs per ADD
//! (milliseconds on a busy disk, the larger part of a plexus-portmap ADD).

use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::state::atomic_write_volatile;

/// A record kind: its directory under the state directory, and the attachment it belongs to.
pub trait Record: Serialize + DeserializeOwned {
    /// The directory name, also the word for it in messages.
    const KIND: &'static str;
    fn container_id(&self) -> &str;
    fn ifname(&self) -> &str;
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} record {path}: {source}")]
    Io { kind: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{kind} record {path} is corrupt: {source}; move it aside and restart the agent")]
    Corrupt { kind: &'static str, path: PathBuf, source: serde_json::Error },
}

/// The records of one kind.
pub struct RecordStore<T> {
    dir: PathBuf,
    kind: PhantomData<T>,
}

impl<T> std::fmt::Debug for RecordStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStore").field("dir", &self.dir).finish()
    }
}

impl<T> Clone for RecordStore<T> {
    fn clone(&self) -> Self {
        RecordStore { dir: self.dir.clone(), kind: PhantomData }
    }
}

impl<T: Record> RecordStore<T> {
    pub fn new(state_dir: &Path) -> Self {
        RecordStore { dir: state_dir.join(T::KIND), kind: PhantomData }
    }

    /// Container IDs are `[A-Za-z0-9_.-]` (CNI spec) and interface names have no '/' or '@'.
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}@{ifname}.json"))
    }

    fn io(path: PathBuf) -> impl FnOnce(std::io::Error) -> StoreError {
        move |source| StoreError::Io { kind: T::KIND, path, source }
    }

    pub fn save(&self, record: &T) -> Result<(), StoreError> {
        let path = self.path(record.container_id(), record.ifname());
        let body = serde_json::to_vec_pretty(record)
            .map_err(|e| Self::io(path.clone())(std::io::Error::other(e)))?;
        atomic_write_volatile(&path, &body).map_err(Self::io(path))
    }

    pub fn load(&self, container_id: &str, ifname: &str) -> Result<Option<T>, StoreError> {
        let path = self.path(container_id, ifname);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|source| StoreError::Corrupt {
                kind: T::KIND,
                path,
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Self::io(path)(source)),
        }
    }

    /// Removing a record that is not there is fine: DEL is idempotent.
    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<(), StoreError> {
        let path = self.path(container_id, ifname);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Self::io(path)(source)),
        }
    }

    /// Every record, in file name order.
    pub fn load_all(&self) -> Result<Vec<T>, StoreError> {
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
                    kind: T::KIND,
                    path,
                    source,
                })
            })
            .collect()
    }
}

/// Who holds an attachment, for messages: `pod ns/name (container C, interface I, network N)`.
pub fn owner(pod: Option<&str>, container_id: &str, ifname: &str, network: &str) -> String {
    let pod = pod.map_or_else(|| "a container".to_owned(), |p| format!("pod {p}"));
    format!("{pod} (container {container_id}, interface {ifname}, network {network})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Note {
        container_id: String,
        ifname: String,
        text: String,
    }

    impl Record for Note {
        const KIND: &'static str = "notes";
        fn container_id(&self) -> &str {
            &self.container_id
        }
        fn ifname(&self) -> &str {
            &self.ifname
        }
    }

    #[test]
    fn records_round_trip_and_say_what_is_wrong() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::<Note>::new(d.path());
        assert!(store.load_all().unwrap().is_empty());
        assert_eq!(store.load("c1", "net1").unwrap(), None);
        let n = Note { container_id: "c1".into(), ifname: "net1".into(), text: "x".into() };
        store.save(&n).unwrap();
        assert_eq!(store.load_all().unwrap(), std::slice::from_ref(&n));
        assert_eq!(store.load("c1", "net1").unwrap(), Some(n.clone()));
        store.remove("c1", "net1").unwrap();
        store.remove("c1", "net1").unwrap();
        assert!(store.load_all().unwrap().is_empty());

        std::fs::write(d.path().join("notes/c2@net1.json"), "{").unwrap();
        let err = store.load_all().unwrap_err().to_string();
        assert!(err.starts_with("notes record ") && err.contains("is corrupt"), "{err}");
        assert_eq!(
            owner(Some("ns/p"), "c1", "net1", "n"),
            "pod ns/p (container c1, interface net1, network n)"
        );
        assert_eq!(owner(None, "c1", "net1", "n"), "a container (container c1, interface net1, network n)");
    }
}
