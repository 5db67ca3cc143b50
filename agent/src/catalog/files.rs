//! The local-files catalog of standalone mode: NAD and pod manifests in directories, the
//! network-status and events written next to the agent's state.
//!
//! Files are read on every lookup: a standalone node has a handful, and editing one must
//! take effect without a restart, as it would on a cluster.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use futures::FutureExt;

use super::manifest::{parse_objects, Objects};
use super::{Catalog, CatalogError, PodInfo};
use crate::spec::resolve::NetworkAttachmentDefinition;
use crate::state::atomic_write;

#[derive(Debug, Clone)]
pub struct FileCatalog {
    /// Directories of NetworkAttachmentDefinition manifests.
    pub nad_dirs: Vec<PathBuf>,
    /// Directories of pod manifests.
    pub pod_dirs: Vec<PathBuf>,
    /// Where `<namespace>/<pod>.network-status.json` and `.events` are written.
    pub report_dir: PathBuf,
}

impl FileCatalog {
    fn load(dirs: Vec<PathBuf>) -> BoxFuture<'static, Result<Objects, CatalogError>> {
        async move {
            tokio::task::spawn_blocking(move || load_dirs(&dirs))
                .await
                .map_err(|e| CatalogError::unavailable("manifest directories", e))
        }
        .boxed()
    }

    fn report_path(&self, pod: &PodInfo, suffix: &str) -> PathBuf {
        self.report_dir.join(&pod.namespace).join(format!("{}.{suffix}", pod.name))
    }
}

fn load_dirs(dirs: &[PathBuf]) -> Objects {
    let mut all = Objects::default();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                // A directory that cannot be read holds no manifests; the warning says why.
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %dir.display(), "skipping manifest directory: {e}");
                }
                continue;
            }
        };
        let mut paths: Vec<PathBuf> =
            entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| is_manifest(p)).collect();
        paths.sort();
        for path in paths {
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) => {
                    tracing::warn!(file = %path.display(), "skipping manifest: {e}");
                    continue;
                }
            };
            match parse_objects(&text) {
                Ok(o) => {
                    all.nads.extend(o.nads);
                    all.pods.extend(o.pods);
                }
                Err(e) => tracing::warn!(file = %path.display(), "skipping manifest: {e}"),
            }
        }
    }
    all
}

fn is_manifest(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

impl Catalog for FileCatalog {
    fn nad<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<NetworkAttachmentDefinition>, CatalogError>> {
        async move {
            let objects = Self::load(self.nad_dirs.clone()).await?;
            Ok(objects.nads.into_iter().find(|n| n.namespace == namespace && n.name == name))
        }
        .boxed()
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, CatalogError>> {
        async move {
            let objects = Self::load(self.pod_dirs.clone()).await?;
            Ok(objects.pods.into_iter().find(|p| p.namespace == namespace && p.name == name))
        }
        .boxed()
    }

    fn publish_network_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        annotation_value: &'a str,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        let path = self.report_path(pod, "network-status.json");
        let body = annotation_value.as_bytes().to_vec();
        async move {
            tokio::task::spawn_blocking(move || atomic_write(&path, &body).map_err(|e| (path, e)))
                .await
                .map_err(|e| CatalogError::unavailable("network-status file", e))?
                .map_err(|(path, e)| CatalogError::unavailable(path.display().to_string(), e))
        }
        .boxed()
    }

    fn record_event<'a>(&'a self, pod: &'a PodInfo, reason: &'a str, message: &'a str) -> BoxFuture<'a, ()> {
        let path = self.report_path(pod, "events");
        let line = format!("Warning\t{reason}\t{message}\n");
        async move {
            let written = tokio::task::spawn_blocking(move || append_line(&path, &line)).await;
            if let Ok(Err(e)) | Err(e) = written.map_err(std::io::Error::other) {
                tracing::warn!("recording pod event: {e}");
            }
        }
        .boxed()
    }
}

fn append_line(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finds_nads_and_pods_and_writes_reports() {
        let d = tempfile::tempdir().unwrap();
        let nads = d.path().join("nads");
        let pods = d.path().join("pods");
        std::fs::create_dir_all(&nads).unwrap();
        std::fs::create_dir_all(&pods).unwrap();
        std::fs::write(
            nads.join("a.yaml"),
            "kind: NetworkAttachmentDefinition\nmetadata: {name: net-a, namespace: ns1}\nspec: {config: '{}'}\n",
        )
        .unwrap();
        std::fs::write(nads.join("broken.yaml"), "kind: Pod\nmetadata: {}\n").unwrap();
        std::fs::write(pods.join("p.json"), r#"{"kind":"Pod","metadata":{"name":"p","namespace":"ns1"}}"#)
            .unwrap();
        let cat =
            FileCatalog { nad_dirs: vec![nads], pod_dirs: vec![pods], report_dir: d.path().join("reports") };
        assert!(cat.nad("ns1", "net-a").await.unwrap().is_some());
        assert!(cat.nad("ns2", "net-a").await.unwrap().is_none());
        let pod = cat.pod("ns1", "p").await.unwrap().unwrap();
        cat.publish_network_status(&pod, "[]").await.unwrap();
        cat.record_event(&pod, "InvalidAnnotation", "bad").await;
        let dir = d.path().join("reports/ns1");
        assert_eq!(std::fs::read_to_string(dir.join("p.network-status.json")).unwrap(), "[]");
        assert!(std::fs::read_to_string(dir.join("p.events")).unwrap().contains("InvalidAnnotation\tbad"));
    }
}
