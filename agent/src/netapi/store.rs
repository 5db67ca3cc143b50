//! The networks set through the API: `<state_dir>/networks/<namespace>/<name>.json`, each
//! the JSON of a [`NetworkConfig`], written atomically ([`atomic_write`]). The files are the
//! truth: every lookup reads them, so they survive restarts and a removed file is gone at
//! once. Blocking: call from a blocking task.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::config::{name_problem, namespace_problem};
use super::generation::{decide, GenerationError, SetDecision};
use super::model::{effective_namespace, NetworkConfig};
use crate::state::atomic_write;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("network store {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("network store file {} is corrupt: {source}; move it aside and set the network again", path.display())]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("network {namespace}/{name} cannot be encoded: {source}")]
    Encode { namespace: String, name: String, source: serde_json::Error },
    #[error(transparent)]
    Generation(#[from] GenerationError),
    #[error("no network {namespace}/{name} was set through the API")]
    NotFound { namespace: String, name: String },
}

/// The directory of networks.
#[derive(Debug)]
pub struct NetworkStore {
    dir: PathBuf,
    /// Held from reading the stored generation to writing the new one, so two sets of one
    /// network cannot both pass the generation check.
    writing: Mutex<()>,
}

impl NetworkStore {
    pub fn new(state_dir: &Path) -> Self {
        NetworkStore { dir: state_dir.join("networks"), writing: Mutex::new(()) }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of a network. The names are checked here too, where they become a path.
    fn path(&self, namespace: &str, name: &str) -> Option<PathBuf> {
        let namespace = effective_namespace(namespace);
        let valid = name_problem(name).is_none() && namespace_problem(namespace).is_none();
        valid.then(|| self.dir.join(namespace).join(format!("{name}.json")))
    }

    /// The network `namespace/name` (empty namespace: `default`), or `None`.
    pub fn get(&self, namespace: &str, name: &str) -> Result<Option<NetworkConfig>, StoreError> {
        match self.path(namespace, name) {
            Some(path) => read(&path),
            None => Ok(None),
        }
    }

    /// Stores a validated config whose namespace is filled in, unless the generation rules
    /// refuse it ([`decide`]). Returns whether it was written.
    pub fn set(&self, config: &NetworkConfig) -> Result<SetDecision, StoreError> {
        let (namespace, name) = (config.namespace(), config.metadata.name.as_str());
        let not_found = || StoreError::NotFound { namespace: namespace.to_owned(), name: name.to_owned() };
        let path = self.path(namespace, name).ok_or_else(not_found)?;
        let _writing = self.writing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let stored = read(&path)?;
        let decision = decide(stored.as_ref(), config)?;
        if decision == SetDecision::Write {
            let body = serde_json::to_vec_pretty(config).map_err(|source| StoreError::Encode {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?;
            atomic_write(&path, &body).map_err(|source| StoreError::Io { path, source })?;
        }
        Ok(decision)
    }

    /// Removes the network `namespace/name`; [`StoreError::NotFound`] when there is none.
    pub fn remove(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        let not_found = || StoreError::NotFound {
            namespace: effective_namespace(namespace).to_owned(),
            name: name.to_owned(),
        };
        let path = self.path(namespace, name).ok_or_else(not_found)?;
        let _writing = self.writing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match std::fs::remove_file(&path) {
            Ok(()) => {
                if let Some(dir) = path.parent() {
                    // Only when empty: another network of the namespace keeps it.
                    let _ = std::fs::remove_dir(dir);
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(not_found()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Whether any network is stored (an unreadable store holds none that can be used).
    pub fn holds_any(&self) -> bool {
        self.list().is_ok_and(|networks| !networks.is_empty())
    }

    /// Every network, by namespace then name.
    pub fn list(&self) -> Result<Vec<NetworkConfig>, StoreError> {
        let mut out = Vec::new();
        for namespace in names_in(&self.dir)? {
            let ns_dir = self.dir.join(&namespace);
            if namespace_problem(&namespace).is_some() || !ns_dir.is_dir() {
                continue;
            }
            for file in names_in(&ns_dir)? {
                // Temporary files of an interrupted write start with a dot.
                let Some(name) = file.strip_suffix(".json").filter(|n| name_problem(n).is_none()) else {
                    continue;
                };
                if let Some(config) = read(&ns_dir.join(format!("{name}.json")))? {
                    out.push(config);
                }
            }
        }
        Ok(out)
    }
}

/// The entry names of a directory, sorted; none when it does not exist.
fn names_in(dir: &Path) -> Result<Vec<String>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(StoreError::Io { path: dir.to_owned(), source }),
    };
    let mut names: Vec<String> =
        entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    Ok(names)
}

fn read(path: &Path) -> Result<Option<NetworkConfig>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| StoreError::Corrupt { path: path.to_owned(), source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io { path: path.to_owned(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netapi::model::PluginConfig;

    fn config(namespace: &str, name: &str, uid: &str, generation: u32, plugin: &str) -> NetworkConfig {
        let mut c = NetworkConfig::default();
        c.metadata.name = name.into();
        c.metadata.namespace = namespace.into();
        c.metadata.uid = uid.into();
        c.metadata.generation = generation;
        c.cniv1_config.cni_version = "1.0.0".into();
        c.cniv1_config.plugins = vec![PluginConfig { plugin_type: plugin.into(), ..Default::default() }];
        c
    }

    #[test]
    fn set_get_list_remove_and_survive_a_new_store() {
        let d = tempfile::tempdir().unwrap();
        let store = NetworkStore::new(d.path());
        assert_eq!(store.list().unwrap(), []);
        assert_eq!(store.get("", "blue").unwrap(), None);
        let blue = config("default", "blue", "u1", 1, "bridge");
        let red = config("team-a", "red", "", 0, "macvlan");
        assert_eq!(store.set(&blue).unwrap(), SetDecision::Write);
        assert_eq!(store.set(&red).unwrap(), SetDecision::Write);
        assert!(d.path().join("networks/default/blue.json").is_file());
        assert!(d.path().join("networks/team-a/red.json").is_file());

        let again = NetworkStore::new(d.path());
        assert_eq!(again.get("", "blue").unwrap().as_ref(), Some(&blue), "empty namespace is default");
        assert_eq!(again.get("default", "blue").unwrap().as_ref(), Some(&blue));
        assert_eq!(again.get("team-a", "blue").unwrap(), None);
        assert_eq!(again.list().unwrap(), [blue.clone(), red.clone()]);

        again.remove("team-a", "red").unwrap();
        assert!(!d.path().join("networks/team-a").exists(), "an emptied namespace directory goes");
        assert!(matches!(
            again.remove("team-a", "red"),
            Err(StoreError::NotFound { namespace, name }) if namespace == "team-a" && name == "red"
        ));
        assert!(
            matches!(again.remove("", "green"), Err(StoreError::NotFound { namespace, .. }) if namespace == "default")
        );
        assert_eq!(store.list().unwrap(), [blue]);
    }

    #[test]
    fn sets_follow_the_generation_rules() {
        let d = tempfile::tempdir().unwrap();
        let store = NetworkStore::new(d.path());
        store.set(&config("default", "blue", "u1", 2, "bridge")).unwrap();
        assert_eq!(store.set(&config("default", "blue", "u1", 2, "bridge")).unwrap(), SetDecision::Unchanged);
        assert!(matches!(
            store.set(&config("default", "blue", "u1", 1, "bridge")),
            Err(StoreError::Generation(GenerationError::Stale { offered: 1, stored: 2 }))
        ));
        assert!(matches!(
            store.set(&config("default", "blue", "u1", 2, "macvlan")),
            Err(StoreError::Generation(GenerationError::ChangedWithoutNewGeneration { generation: 2 }))
        ));
        assert_eq!(store.get("", "blue").unwrap().unwrap().cniv1_config.plugins[0].plugin_type, "bridge");
        assert_eq!(store.set(&config("default", "blue", "u1", 3, "macvlan")).unwrap(), SetDecision::Write);
        assert_eq!(store.set(&config("default", "blue", "u2", 1, "ipvlan")).unwrap(), SetDecision::Write);
        let stored = store.get("", "blue").unwrap().unwrap();
        assert_eq!((stored.metadata.uid.as_str(), stored.metadata.generation), ("u2", 1));
    }

    #[test]
    fn names_that_are_not_network_names_are_never_paths() {
        let d = tempfile::tempdir().unwrap();
        let store = NetworkStore::new(d.path());
        assert_eq!(store.get("..", "blue").unwrap(), None);
        assert_eq!(store.get("default", "../../etc").unwrap(), None);
        assert_eq!(store.get("default", "_fallback").unwrap(), None);
        assert!(matches!(store.remove("default", "a/b"), Err(StoreError::NotFound { .. })));
        assert!(store.set(&config("default", "../x", "", 1, "bridge")).is_err());
        assert!(!d.path().join("networks").exists());
    }

    #[test]
    fn a_corrupt_file_is_reported_and_stray_files_are_ignored() {
        let d = tempfile::tempdir().unwrap();
        let store = NetworkStore::new(d.path());
        store.set(&config("default", "blue", "", 1, "bridge")).unwrap();
        let dir = d.path().join("networks/default");
        std::fs::write(dir.join(".blue.json.123.tmp"), "{").unwrap();
        std::fs::write(dir.join("notes.txt"), "x").unwrap();
        std::fs::write(d.path().join("networks/README"), "x").unwrap();
        assert_eq!(store.list().unwrap().len(), 1);
        std::fs::write(dir.join("red.json"), "{").unwrap();
        let e = store.list().unwrap_err();
        assert!(matches!(&e, StoreError::Corrupt { path, .. } if path.ends_with("red.json")), "{e}");
        assert!(e.to_string().contains("move it aside"), "{e}");
        assert!(matches!(store.get("default", "red"), Err(StoreError::Corrupt { .. })));
    }
}
