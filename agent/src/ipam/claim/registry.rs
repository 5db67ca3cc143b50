//! What this node holds for each IPAMClaim: one file per claim under
//! `<state-dir>/ipam-claims/`, written before the attachment's ADD and kept after the pod's
//! DEL, for as long as the claim's addresses are held here.
//!
//! An entry names the claim (with its UID: a claim deleted and created again under its name is
//! another claim), the host-local configs that allocated for it (to release there once the
//! claim is gone) and the attachment using it now, if any: a claim gives its addresses to one
//! attachment at a time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cni::{CniCode, ErrorCode};
use crate::state::atomic_write;

/// The attachment a claim's addresses are given to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub container_id: String,
    /// The runtime's CNI_IFNAME of the container (its record's key).
    pub runtime_ifname: String,
    /// The attachment's interface in the pod.
    pub ifname: String,
    /// `namespace/name` of the pod.
    pub pod: String,
}

/// One claim this node holds addresses of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimEntry {
    pub namespace: String,
    pub name: String,
    /// `metadata.uid` of the claim.
    pub uid: String,
    #[serde(default)]
    pub holder: Option<Holder>,
    /// The plugin configs (with their `ipam`) that allocated for the claim, one per network.
    #[serde(default)]
    pub ipam_configs: Vec<Value>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("IPAMClaim record {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("IPAMClaim record {path} is corrupt: {source}; move it aside (the claim's addresses stay held until then)")]
    Corrupt { path: PathBuf, source: serde_json::Error },
}

impl CniCode for RegistryError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::IoFailure
    }
}

/// The directory of entries, with the lock that makes check-and-take of a claim atomic
/// within the agent.
#[derive(Debug, Clone)]
pub struct ClaimRegistry {
    dir: PathBuf,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl ClaimRegistry {
    pub fn new(state_dir: &Path) -> Self {
        ClaimRegistry { dir: state_dir.join("ipam-claims"), lock: Arc::default() }
    }

    /// Held while an entry is read, decided on and written.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }

    fn path(&self, namespace: &str, name: &str) -> PathBuf {
        // Both are DNS-1123 names: no '_' and no '/'.
        self.dir.join(format!("{namespace}_{name}.json"))
    }

    pub fn load(&self, namespace: &str, name: &str) -> Result<Option<ClaimEntry>, RegistryError> {
        read(&self.path(namespace, name))
    }

    pub fn save(&self, entry: &ClaimEntry) -> Result<(), RegistryError> {
        let path = self.path(&entry.namespace, &entry.name);
        let io = |source| RegistryError::Io { path: path.clone(), source };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let bytes = serde_json::to_vec_pretty(entry).map_err(|e| io(std::io::Error::other(e)))?;
        atomic_write(&path, &bytes).map_err(io)
    }

    pub fn remove(&self, namespace: &str, name: &str) -> Result<(), RegistryError> {
        let path = self.path(namespace, name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RegistryError::Io { path, source: e }),
            _ => Ok(()),
        }
    }

    /// Every entry; unreadable ones are reported and skipped.
    pub fn list(&self) -> Result<Vec<ClaimEntry>, RegistryError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(RegistryError::Io { path: self.dir.clone(), source }),
        };
        let mut out = Vec::new();
        for entry in entries {
            let path = entry.map_err(|source| RegistryError::Io { path: self.dir.clone(), source })?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            match read(&path) {
                Ok(Some(e)) => out.push(e),
                Ok(None) => {}
                Err(e) => tracing::warn!("{e}"),
            }
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(out)
    }
}

fn read(path: &Path) -> Result<Option<ClaimEntry>, RegistryError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(RegistryError::Io { path: path.to_owned(), source }),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| RegistryError::Corrupt { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_saved_listed_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let registry = ClaimRegistry::new(dir.path());
        assert_eq!(registry.list().unwrap(), Vec::new());
        let entry = ClaimEntry {
            namespace: "ns1".into(),
            name: "vm-a.tenantred".into(),
            uid: "u1".into(),
            holder: Some(Holder {
                container_id: "c1".into(),
                runtime_ifname: "eth0".into(),
                ifname: "net1".into(),
                pod: "ns1/virt-launcher-a".into(),
            }),
            ipam_configs: vec![serde_json::json!({"name": "tenantred", "ipam": {"type": "host-local"}})],
        };
        registry.save(&entry).unwrap();
        assert_eq!(registry.load("ns1", "vm-a.tenantred").unwrap(), Some(entry.clone()));
        assert_eq!(registry.list().unwrap(), vec![entry]);
        registry.remove("ns1", "vm-a.tenantred").unwrap();
        registry.remove("ns1", "vm-a.tenantred").unwrap();
        assert_eq!(registry.load("ns1", "vm-a.tenantred").unwrap(), None);
        std::fs::write(dir.path().join("ipam-claims/ns1_x.json"), "{").unwrap();
        assert!(matches!(registry.load("ns1", "x"), Err(RegistryError::Corrupt { .. })));
        assert_eq!(registry.list().unwrap(), Vec::new(), "a corrupt entry is reported, not listed");
    }
}
