//! The local-files catalog of standalone mode: NAD and pod manifests in directories, the
//! status annotations and events written next to the agent's state. The network
//! directories (`--nad-dir`) hold the KEP-3698 objects too: PodNetwork,
//! PodNetworkAttachment and AttachmentParameters manifests.
//!
//! Editing a manifest takes effect without a restart, as it would on a cluster: each lookup
//! takes in the files changed since the last one ([`ManifestIndex`]), and reads no file when
//! none changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::index::{Lookup, ManifestIndex};
use super::watch::DirWatch;
use super::{names, standalone, Catalog, CatalogError, NadSummary, PodInfo, StatusReport};
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use crate::podnetwork::params_ready;
use crate::spec::resolve::NetworkAttachmentDefinition;
use crate::state::atomic_write_volatile;

#[derive(Debug, Clone)]
pub struct FileCatalog {
    /// NetworkAttachmentDefinition, PodNetwork, PodNetworkAttachment and
    /// AttachmentParameters manifests.
    nads: Arc<ManifestIndex>,
    /// Pod manifests.
    pods: Arc<ManifestIndex>,
    /// Where `<namespace>/<pod>.network-status.json`, `.pod-networks-status.json` and
    /// `.events` are written.
    report_dir: PathBuf,
}

impl FileCatalog {
    pub fn new(nad_dirs: Vec<PathBuf>, pod_dirs: Vec<PathBuf>, report_dir: PathBuf) -> Self {
        FileCatalog {
            nads: Arc::new(ManifestIndex::new(nad_dirs)),
            pods: Arc::new(ManifestIndex::new(pod_dirs)),
            report_dir,
        }
    }

    /// Indexes every manifest now, so the first request does not pay for it.
    pub async fn warm_up(&self) {
        let (nads, pods) = (self.nads.clone(), self.pods.clone());
        let indexed = tokio::task::spawn_blocking(move || {
            nads.nad("", "");
            pods.pod("", "");
        })
        .await;
        if let Err(e) = indexed {
            tracing::warn!("indexing the manifest directories: {e}");
        }
    }

    /// The report file of a pod. The names were checked where they came in (CNI_ARGS,
    /// manifests); checked again here, where they become a path.
    fn report_path(&self, pod: &PodInfo, suffix: &str) -> Result<PathBuf, CatalogError> {
        names::check_namespace("pod namespace", &pod.namespace)
            .and_then(|()| names::check_object_name("pod name", &pod.name))
            .map_err(|e| CatalogError::unavailable("the pod's report file", e))?;
        Ok(self.report_dir.join(&pod.namespace).join(format!("{}.{suffix}", pod.name)))
    }
}

/// A network object no readable file holds does not exist: the engine says so (a permanent
/// error, or a network not ready yet); the files that could not be read were reported when
/// they were indexed.
fn absent_when_unreadable<T>(found: Result<Option<T>, CatalogError>) -> Result<Option<T>, CatalogError> {
    match found {
        Err(CatalogError::NotFoundWithUnreadable { .. }) => Ok(None),
        found => found,
    }
}

/// The PodNetwork `name` with the conditions the controller would give it ([`standalone`]).
fn pod_network_ready(index: &ManifestIndex, name: &str) -> Lookup<PodNetwork> {
    match index.pod_network(name) {
        Lookup::Found(pn) => {
            let check = params_ready::pod_network(&pn, |r| found(index.nad(&r.namespace, &r.name)));
            Lookup::Found(standalone::pod_network_with_conditions(pn, &check))
        }
        other => other,
    }
}

/// The PodNetworkAttachment `namespace/name` with the conditions the controller would give
/// it ([`standalone`]).
fn attachment_ready(index: &ManifestIndex, namespace: &str, name: &str) -> Lookup<PodNetworkAttachment> {
    match index.attachment(namespace, name) {
        Lookup::Found(pna) => {
            let pod_network = found(pod_network_ready(index, &pna.spec.pod_network_name));
            let check = params_ready::attachment(&pna, pod_network.as_ref(), |r| {
                found(index.parameters(&r.namespace, &r.name))
            });
            Lookup::Found(standalone::attachment_with_conditions(pna, pod_network.as_ref(), &check))
        }
        other => other,
    }
}

/// An object that a usable manifest holds.
fn found<T>(lookup: Lookup<T>) -> Option<T> {
    match lookup {
        Lookup::Found(v) => Some(v),
        Lookup::Broken(_) | Lookup::Missing { .. } => None,
    }
}

/// Runs a blocking lookup of the index.
async fn look_up<T: Send + 'static>(
    index: &Arc<ManifestIndex>,
    f: impl FnOnce(&ManifestIndex) -> Lookup<T> + Send + 'static,
) -> Result<Option<T>, CatalogError> {
    let index = index.clone();
    let found = tokio::task::spawn_blocking(move || f(&index))
        .await
        .map_err(|e| CatalogError::unavailable("manifest directories", e))?;
    match found {
        Lookup::Found(v) => Ok(Some(v)),
        Lookup::Broken(b) => {
            Err(CatalogError::BrokenManifest { file: b.file.clone(), reason: b.reason.clone() })
        }
        Lookup::Missing { unreadable } if unreadable.is_empty() => Ok(None),
        Lookup::Missing { unreadable } => Err(CatalogError::NotFoundWithUnreadable {
            files: unreadable.iter().map(|b| format!("{}: {}", b.file.display(), b.reason)).collect(),
        }),
    }
}

impl Catalog for FileCatalog {
    fn nad<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<NetworkAttachmentDefinition>, CatalogError>> {
        let (ns, n) = (namespace.to_owned(), name.to_owned());
        async move { absent_when_unreadable(look_up(&self.nads, move |index| index.nad(&ns, &n)).await) }
            .boxed()
    }

    /// Manifest files carry no uid or generation the agent keeps: both are empty.
    fn networks(&self) -> BoxFuture<'_, Result<Vec<NadSummary>, CatalogError>> {
        let index = self.nads.clone();
        async move {
            let nads = tokio::task::spawn_blocking(move || index.nads())
                .await
                .map_err(|e| CatalogError::unavailable("manifest directories", e))?;
            Ok(nads.into_iter().map(|nad| NadSummary { nad, uid: String::new(), generation: 0 }).collect())
        }
        .boxed()
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, CatalogError>> {
        let (ns, n) = (namespace.to_owned(), name.to_owned());
        async move { look_up(&self.pods, move |index| index.pod(&ns, &n)).await }.boxed()
    }

    fn pod_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<PodNetwork>, CatalogError>> {
        let n = name.to_owned();
        async move { absent_when_unreadable(look_up(&self.nads, move |index| pod_network_ready(index, &n)).await) }
            .boxed()
    }

    fn pod_network_attachment<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodNetworkAttachment>, CatalogError>> {
        let (ns, n) = (namespace.to_owned(), name.to_owned());
        async move {
            absent_when_unreadable(look_up(&self.nads, move |index| attachment_ready(index, &ns, &n)).await)
        }
        .boxed()
    }

    fn attachment_parameters<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentParameters>, CatalogError>> {
        let (ns, n) = (namespace.to_owned(), name.to_owned());
        async move { absent_when_unreadable(look_up(&self.nads, move |index| index.parameters(&ns, &n)).await) }
            .boxed()
    }

    fn publish_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        report: StatusReport,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        let files = [
            (NETWORK_STATUS_SUFFIX, Some(report.network_status)),
            (POD_NETWORKS_STATUS_SUFFIX, report.pod_networks_status),
        ];
        let writes: Vec<_> = files
            .into_iter()
            .filter_map(|(suffix, value)| Some((self.report_path(pod, suffix), value?.into_bytes())))
            .collect();
        async move {
            for (path, body) in writes {
                let path = path?;
                // A report, rewritten by every ADD of the pod: never torn, but not worth an
                // fsync on every ADD (a power loss takes the pod's sandbox with it anyway).
                tokio::task::spawn_blocking(move || {
                    atomic_write_volatile(&path, &body).map_err(|e| (path, e))
                })
                .await
                .map_err(|e| CatalogError::unavailable("status file", e))?
                .map_err(|(path, e)| CatalogError::unavailable(path.display().to_string(), e))?;
            }
            Ok(())
        }
        .boxed()
    }

    fn collect_reports<'a>(&'a self, live: &'a [(String, String)]) -> BoxFuture<'a, ()> {
        let (dir, pods, live) = (self.report_dir.clone(), self.pods.clone(), live.to_vec());
        async move {
            match tokio::task::spawn_blocking(move || collect_reports(&dir, &pods, &live)).await {
                Ok(removed) => {
                    for f in removed {
                        tracing::info!(file = %f.display(), "removed the report of a deleted pod");
                    }
                }
                Err(e) => tracing::warn!("removing the reports of deleted pods: {e}"),
            }
        }
        .boxed()
    }

    fn record_event<'a>(&'a self, pod: &'a PodInfo, reason: &'a str, message: &'a str) -> BoxFuture<'a, ()> {
        let path = self.report_path(pod, EVENTS_SUFFIX);
        let line = format!("Warning\t{reason}\t{message}\n");
        async move {
            let path = match path {
                Ok(p) => p,
                Err(e) => return tracing::warn!("recording pod event: {e}"),
            };
            let written = tokio::task::spawn_blocking(move || append_line(&path, &line)).await;
            if let Ok(Err(e)) | Err(e) = written.map_err(std::io::Error::other) {
                tracing::warn!("recording pod event: {e}");
            }
        }
        .boxed()
    }

    /// The pod directories, watched with inotify (asked every [`POD_CHANGE_POLL`]).
    fn pod_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        let mut watch = match DirWatch::new(self.pods.dirs()) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(
                    "watching the pod directories for live attachments: {e}; resyncing on a timer only"
                );
                return None;
            }
        };
        let changes = Arc::new(tokio::sync::Notify::new());
        let notify = changes.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POD_CHANGE_POLL).await;
                if watch.changed() {
                    notify.notify_one();
                }
            }
        });
        Some(changes)
    }
}

/// How often the pod directories' inotify queue is read for live attachments: one `read`
/// that finds nothing, while nothing changes.
pub const POD_CHANGE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// The report files (`<dir>/<namespace>/<pod>.network-status.json`, `.events`) of pods that
/// have no manifest any more and that no record names, removed (with a namespace directory
/// left empty). Returns what was removed.
fn collect_reports(dir: &Path, pods: &ManifestIndex, live: &[(String, String)]) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for ns in read_names(dir) {
        let ns_dir = dir.join(&ns);
        for file in read_names(&ns_dir) {
            let Some(name) = REPORT_SUFFIXES.iter().find_map(|s| file.strip_suffix(s)) else { continue };
            let named = live.iter().any(|(n, p)| *n == ns && p == name);
            let exists = !matches!(pods.pod(&ns, name), Lookup::Missing { .. });
            if named || exists {
                continue;
            }
            let path = ns_dir.join(&file);
            match std::fs::remove_file(&path) {
                Ok(()) => removed.push(path),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(file = %path.display(), "removing the report of a deleted pod: {e}"),
            }
        }
        // Only when empty: a report written meanwhile keeps it.
        let _ = std::fs::remove_dir(&ns_dir);
    }
    removed
}

const EVENTS_SUFFIX: &str = "events";
const NETWORK_STATUS_SUFFIX: &str = "network-status.json";
const POD_NETWORKS_STATUS_SUFFIX: &str = "pod-networks-status.json";

/// What follows a pod's name in its report files.
const REPORT_SUFFIXES: [&str; 3] = [".pod-networks-status.json", ".network-status.json", ".events"];

fn read_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default()
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
        let cat = FileCatalog::new(vec![nads], vec![pods], d.path().join("reports"));
        assert!(cat.nad("ns1", "net-a").await.unwrap().is_some());
        assert!(cat.nad("ns2", "net-a").await.unwrap().is_none());
        let listed = cat.networks().await.unwrap();
        assert_eq!(listed.len(), 1, "the broken file holds no NAD");
        assert_eq!((listed[0].nad.namespace.as_str(), listed[0].nad.name.as_str()), ("ns1", "net-a"));
        let pod = cat.pod("ns1", "p").await.unwrap().unwrap();
        cat.publish_network_status(&pod, "[]").await.unwrap();
        cat.record_event(&pod, "InvalidAnnotation", "bad").await;
        let dir = d.path().join("reports/ns1");
        assert_eq!(std::fs::read_to_string(dir.join("p.network-status.json")).unwrap(), "[]");
        assert!(std::fs::read_to_string(dir.join("p.events")).unwrap().contains("InvalidAnnotation\tbad"));
        assert!(!dir.join("p.pod-networks-status.json").exists(), "no PodNetworks, no KEP status");
        let report = StatusReport { network_status: "[1]".into(), pod_networks_status: Some("[2]".into()) };
        cat.publish_status(&pod, report).await.unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("p.network-status.json")).unwrap(), "[1]");
        assert_eq!(std::fs::read_to_string(dir.join("p.pod-networks-status.json")).unwrap(), "[2]");
    }

    #[tokio::test]
    async fn pod_networks_in_the_network_directories_get_the_controllers_conditions() {
        let d = tempfile::tempdir().unwrap();
        let nets = d.path().join("nads");
        std::fs::create_dir_all(&nets).unwrap();
        std::fs::write(
            nets.join("blue.yaml"),
            r#"
kind: NetworkAttachmentDefinition
metadata: {name: blue, namespace: nets}
spec: {config: '{"cniVersion":"1.0.0","type":"bridge"}'}
---
kind: PodNetwork
metadata: {name: blue}
spec:
  parametersRefs: [{group: k8s.cni.cncf.io, kind: NetworkAttachmentDefinition, name: blue, namespace: nets}]
---
kind: PodNetwork
metadata: {name: red}
spec:
  parametersRefs: [{group: k8s.cni.cncf.io, kind: NetworkAttachmentDefinition, name: red, namespace: nets}]
---
kind: PodNetworkAttachment
metadata: {name: blue-fast, namespace: t}
spec:
  podNetworkName: blue
  parametersRefs: [{group: plexus.dev, kind: AttachmentParameters, name: fast}]
---
kind: AttachmentParameters
metadata: {name: fast, namespace: t}
spec: {bandwidth: {egressRate: 1000000}}
---
kind: PodNetworkAttachment
metadata: {name: red-any, namespace: t}
spec: {podNetworkName: red}
"#,
        )
        .unwrap();
        let cat = FileCatalog::new(vec![nets], Vec::new(), d.path().join("reports"));
        assert!(cat.pod_network("blue").await.unwrap().unwrap().is_ready());
        let red = cat.pod_network("red").await.unwrap().unwrap();
        assert!(!red.is_ready(), "its NAD does not exist");
        assert!(cat.pod_network("green").await.unwrap().is_none());
        let pna = cat.pod_network_attachment("t", "blue-fast").await.unwrap().unwrap();
        assert!(pna.is_ready(), "{:?}", pna.status);
        assert!(!cat.pod_network_attachment("t", "red-any").await.unwrap().unwrap().is_ready());
        assert!(cat.pod_network_attachment("u", "blue-fast").await.unwrap().is_none());
        let params = cat.attachment_parameters("t", "fast").await.unwrap().unwrap();
        assert_eq!(params.spec["bandwidth"]["egressRate"], 1000000);
    }

    #[tokio::test]
    async fn gc_collects_the_reports_of_pods_without_manifest_nor_record() {
        let d = tempfile::tempdir().unwrap();
        let pods = d.path().join("pods");
        std::fs::create_dir_all(&pods).unwrap();
        let manifest =
            |name: &str| format!(r#"{{"kind":"Pod","metadata":{{"name":"{name}","namespace":"ns1"}}}}"#);
        for name in ["alive", "recorded", "gone"] {
            std::fs::write(pods.join(format!("{name}.json")), manifest(name)).unwrap();
        }
        let cat = FileCatalog::new(Vec::new(), vec![pods.clone()], d.path().join("reports"));
        for name in ["alive", "recorded", "gone"] {
            let pod = cat.pod("ns1", name).await.unwrap().unwrap();
            cat.publish_network_status(&pod, "[]").await.unwrap();
            cat.record_event(&pod, "Reason", "message").await;
        }
        // Two pods deleted; a record still names one of them.
        std::fs::remove_file(pods.join("recorded.json")).unwrap();
        std::fs::remove_file(pods.join("gone.json")).unwrap();
        cat.collect_reports(&[("ns1".to_owned(), "recorded".to_owned())]).await;
        let mut left = read_names(&d.path().join("reports/ns1"));
        left.sort();
        assert_eq!(
            left,
            ["alive.events", "alive.network-status.json", "recorded.events", "recorded.network-status.json"]
        );
        std::fs::remove_file(pods.join("alive.json")).unwrap();
        cat.collect_reports(&[]).await;
        assert!(!d.path().join("reports/ns1").exists(), "an emptied namespace directory goes too");
    }
}
