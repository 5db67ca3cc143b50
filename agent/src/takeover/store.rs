//! Multus's cache directory on the node: the files [`super::multus`] reads, found and removed.

use std::path::{Path, PathBuf};

use super::multus::{parse_cached_run, CachedRun};

/// Where Multus keeps its cache unless its config's `cniDir` says otherwise.
pub const DEFAULT_DIR: &str = "/var/lib/cni/multus";

#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct CacheIoError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl crate::cni::CniCode for CacheIoError {
    fn cni_code(&self) -> crate::cni::ErrorCode {
        crate::cni::ErrorCode::IoFailure
    }
}

/// Multus's `cniDir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultusCache {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CacheIoError + '_ {
    move |source| CacheIoError { path: path.to_owned(), source }
}

impl MultusCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MultusCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The delegates file of a container (its ID is checked by the request's parser: no `/`).
    pub fn delegates_file(&self, container_id: &str) -> PathBuf {
        self.dir.join(container_id)
    }

    fn results_dir(&self) -> PathBuf {
        self.dir.join("results")
    }

    /// The delegates file's bytes; None when Multus left none for the container.
    pub fn delegates(&self, container_id: &str) -> Result<Option<Vec<u8>>, CacheIoError> {
        read_if_there(&self.delegates_file(container_id))
    }

    /// What the result cache file `name` records; None when it is missing or not libcni's.
    pub fn run(&self, name: &str) -> Result<Option<CachedRun>, CacheIoError> {
        Ok(read_if_there(&self.results_dir().join(name))?.and_then(|t| parse_cached_run(&t)))
    }

    /// The container IDs that have a delegates file (the results directory and temporary files
    /// are not theirs).
    pub fn containers(&self) -> Result<Vec<String>, CacheIoError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&self.dir))?;
            let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_file && !name.starts_with('.') {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every libcni result cache file of the container, by file name.
    pub fn runs_of(&self, container_id: &str) -> Result<Vec<(String, CachedRun)>, CacheIoError> {
        let dir = self.results_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let needle = format!("-{container_id}-");
        let mut out = Vec::new();
        for entry in entries {
            let name = entry.map_err(io(&dir))?.file_name().to_string_lossy().into_owned();
            if !name.contains(&needle) {
                continue;
            }
            if let Some(run) = self.run(&name)?.filter(|r| r.container_id == container_id) {
                out.push((name, run));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The runtime's call that made the container's attachments, as far as Multus's runs tell:
    /// the interface and `CNI_ARGS` of the run of its default network (`default_network`, the
    /// name of the first delegate's config); `eth0` and no arguments without one.
    pub fn runtime_call(
        &self,
        container_id: &str,
        default_network: Option<&str>,
    ) -> Result<(String, String), CacheIoError> {
        let run = self
            .runs_of(container_id)?
            .into_iter()
            .map(|(_, r)| r)
            .find(|r| Some(r.network.as_str()) == default_network);
        Ok(run.map(|r| (r.ifname, r.cni_args)).unwrap_or_else(|| ("eth0".into(), String::new())))
    }

    /// Removes the result cache file `name`; what is gone already is fine.
    pub fn forget_run(&self, name: &str) -> Result<(), CacheIoError> {
        remove_if_there(&self.results_dir().join(name))
    }

    /// Removes the container's delegates file, last, as Multus does once its DELs are done.
    pub fn forget(&self, container_id: &str) -> Result<(), CacheIoError> {
        remove_if_there(&self.delegates_file(container_id))
    }
}

fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, CacheIoError> {
    match std::fs::read(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

fn remove_if_there(path: &Path) -> Result<(), CacheIoError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(path)(e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_runs_and_forgetting() {
        let d = tempfile::tempdir().unwrap();
        let cache = MultusCache::new(d.path());
        assert!(cache.containers().unwrap().is_empty());
        assert!(cache.delegates("c1").unwrap().is_none());
        std::fs::create_dir_all(d.path().join("results")).unwrap();
        std::fs::write(d.path().join("c1"), b"[]").unwrap();
        std::fs::write(d.path().join(".c2.tmp"), b"[]").unwrap();
        let run = |cid: &str, ifname: &str| {
            serde_json::json!({"kind":"cniCacheV1","containerId":cid,"ifName":ifname,"networkName":"n"})
                .to_string()
        };
        std::fs::write(d.path().join("results/n-c1-eth0"), run("c1", "eth0")).unwrap();
        std::fs::write(d.path().join("results/n-c1-net1"), run("c1", "net1")).unwrap();
        // A name that contains the ID but records another container.
        std::fs::write(d.path().join("results/n-x-c1-eth0"), run("x-c1", "eth0")).unwrap();
        assert_eq!(cache.containers().unwrap(), ["c1"]);
        assert_eq!(cache.delegates("c1").unwrap().as_deref(), Some(&b"[]"[..]));
        let runs: Vec<String> = cache.runs_of("c1").unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(runs, ["n-c1-eth0", "n-c1-net1"]);
        assert_eq!(cache.runtime_call("c1", Some("n")).unwrap().0, "eth0");
        assert_eq!(cache.runtime_call("c1", Some("other")).unwrap(), ("eth0".into(), String::new()));
        cache.forget_run("n-c1-eth0").unwrap();
        cache.forget_run("n-c1-eth0").unwrap();
        cache.forget("c1").unwrap();
        cache.forget("c1").unwrap();
        assert!(cache.containers().unwrap().is_empty());
        assert_eq!(cache.runs_of("c1").unwrap().len(), 1);
    }
}
