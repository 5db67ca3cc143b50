//! Durable records of the limits installed per attachment, under `<state-dir>/bandwidth/`:
//! what the maps are reconciled with at start, what DEL removes without a prevResult, and what
//! `plexus-agent bandwidth set` updates.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::Entry;
use crate::dataplane::portmap::topology::AttachPoint;
use crate::state::atomic_write;

/// The limits of one attachment (container ID + pod interface).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    /// `namespace/name`, when the runtime said (CNI_ARGS).
    #[serde(default)]
    pub pod: Option<String>,
    pub entries: Vec<Entry>,
    /// The TC hooks the entries need.
    pub hooks: Vec<AttachPoint>,
}

impl Record {
    pub fn owner(&self) -> String {
        let pod = self.pod.as_deref().map_or_else(|| "a container".to_owned(), |p| format!("pod {p}"));
        format!(
            "{pod} (container {}, interface {}, network {})",
            self.container_id, self.ifname, self.network
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bandwidth record {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("bandwidth record {path} is corrupt: {source}; move it aside and restart the agent")]
    Corrupt { path: PathBuf, source: serde_json::Error },
}

#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn new(state_dir: &Path) -> Store {
        Store { dir: state_dir.join("bandwidth") }
    }

    /// Container IDs are `[A-Za-z0-9_.-]` (CNI spec) and interface names have no '/' or '@'.
    fn path(&self, container_id: &str, ifname: &str) -> PathBuf {
        self.dir.join(format!("{container_id}@{ifname}.json"))
    }

    pub fn save(&self, record: &Record) -> Result<(), StoreError> {
        let path = self.path(&record.container_id, &record.ifname);
        let body = serde_json::to_vec_pretty(record)
            .map_err(|e| StoreError::Io { path: path.clone(), source: std::io::Error::other(e) })?;
        atomic_write(&path, &body).map_err(|source| StoreError::Io { path, source })
    }

    pub fn load(&self, container_id: &str, ifname: &str) -> Result<Option<Record>, StoreError> {
        let path = self.path(container_id, ifname);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| StoreError::Corrupt { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    pub fn remove(&self, container_id: &str, ifname: &str) -> Result<(), StoreError> {
        let path = self.path(container_id, ifname);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    pub fn load_all(&self) -> Result<Vec<Record>, StoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::Io { path: self.dir.clone(), source }),
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
                let bytes =
                    std::fs::read(&path).map_err(|source| StoreError::Io { path: path.clone(), source })?;
                serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt { path, source })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::new(d.path());
        assert!(store.load_all().unwrap().is_empty());
        assert_eq!(store.load("c1", "net1").unwrap(), None);
        let r = Record {
            container_id: "c1".into(),
            ifname: "net1".into(),
            network: "n".into(),
            pod: Some("ns/p".into()),
            entries: Vec::new(),
            hooks: Vec::new(),
        };
        store.save(&r).unwrap();
        assert_eq!(store.load_all().unwrap(), std::slice::from_ref(&r));
        assert_eq!(store.load("c1", "net1").unwrap(), Some(r.clone()));
        assert_eq!(r.owner(), "pod ns/p (container c1, interface net1, network n)");
        store.remove("c1", "net1").unwrap();
        store.remove("c1", "net1").unwrap();
        assert!(store.load_all().unwrap().is_empty());
    }
}
