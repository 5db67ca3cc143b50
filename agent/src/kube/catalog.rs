//! [`Catalog`] over the API server: lookups from the caches, reports to the pod.

use std::future::Future;
use std::time::Duration;

use ::kube::api::Api;
use ::kube::core::PartialObjectMeta;
use ::kube::Client;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::events::EventSink;
use super::nad::{NadCache, NetworkAttachmentDefinition};
use super::podnetwork::PodNetworkCaches;
use super::pods::{pod_info, PodCache};
use super::status_patch::{PatchPolicy, StatusPublisher};
use super::watch::{Settings, WatchBackoff};
use super::KubeError;
use crate::catalog::{Catalog, CatalogError, NadSummary, PodInfo, StatusReport};
use crate::metrics::metrics;
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use crate::spec::resolve;

/// What the operator decides about the Kubernetes catalog.
#[derive(Debug, Clone)]
pub struct KubeCatalogConfig {
    /// This node's name, as kubelet registered it (`spec.nodeName` of its pods).
    pub node_name: String,
    /// Time limit of the one GET made when a pod or NAD is not cached yet.
    pub get_timeout: Duration,
    /// A streaming list not complete within this is given up for list + watch.
    pub streaming_init_limit: Duration,
    /// The waits between failed attempts of a watch (a 410 Gone relists without waiting).
    pub watch_backoff: WatchBackoff,
    pub status: PatchPolicy,
}

impl KubeCatalogConfig {
    pub fn new(node_name: impl Into<String>) -> Self {
        KubeCatalogConfig {
            node_name: node_name.into(),
            get_timeout: Duration::from_secs(2),
            streaming_init_limit: super::watch::STREAMING_INIT_LIMIT,
            watch_backoff: WatchBackoff::default(),
            status: PatchPolicy::default(),
        }
    }
}

/// NADs, PodNetworks (with their attachments and parameters) and this node's pods from the
/// API server. Its tasks stop when it is dropped.
pub struct KubeCatalog {
    client: Client,
    config: KubeCatalogConfig,
    nads: NadCache,
    pod_networks: PodNetworkCaches,
    pods: std::sync::Arc<PodCache>,
    status: StatusPublisher,
    events: EventSink,
    nads_synced: watch::Receiver<bool>,
    pods_synced: watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl KubeCatalog {
    /// Starts the watches and the event publisher on the current runtime.
    pub fn start(client: Client, config: KubeCatalogConfig) -> Self {
        let (nads_tx, nads_synced) = watch::channel(false);
        let (pods_tx, pods_synced) = watch::channel(false);
        let settings =
            Settings { streaming_init_limit: config.streaming_init_limit, backoff: config.watch_backoff };
        let (nads, nad_task) = NadCache::start(client.clone(), settings, nads_tx);
        let (pods, pod_task) = PodCache::start(client.clone(), &config.node_name, settings, pods_tx);
        let (events, event_task) = EventSink::start(client.clone(), &config.node_name);
        let status = StatusPublisher::new(client.clone(), config.status.clone(), events.clone());
        let (pod_networks, pn_tasks) = PodNetworkCaches::start(client.clone(), settings);
        let mut tasks = vec![tokio::spawn(nad_task), tokio::spawn(pod_task), tokio::spawn(event_task)];
        tasks.extend(pn_tasks.into_iter().map(tokio::spawn));
        tracing::info!(
            node = %config.node_name,
            "Kubernetes catalog: watching NetworkAttachmentDefinitions, PodNetworks (with their attachments and \
             parameters) and this node's pods"
        );
        KubeCatalog {
            client,
            config,
            nads,
            pod_networks,
            pods,
            status,
            events,
            nads_synced,
            pods_synced,
            tasks,
        }
    }

    /// True while every cache holds the server's current state: false until their initial
    /// lists are complete, and again while one relists or cannot reach the API server. A
    /// kind whose CRD is not installed is current with no objects.
    pub fn is_synced(&self) -> bool {
        *self.nads_synced.borrow() && *self.pods_synced.borrow() && self.pod_networks.is_synced()
    }

    /// Waits until [`Self::is_synced`], at most `timeout`; returns whether it is.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut watches = vec![self.nads_synced.clone(), self.pods_synced.clone()];
        watches.extend(self.pod_networks.synced.iter().cloned());
        // An error means the watcher ended before its cache synced: it never will.
        let all = async {
            for w in &mut watches {
                if w.wait_for(|s| *s).await.is_err() {
                    return false;
                }
            }
            true
        };
        matches!(tokio::time::timeout(timeout, all).await, Ok(true))
    }

    pub fn cached_pods(&self) -> usize {
        self.pods.len()
    }

    pub fn cached_nads(&self) -> usize {
        self.nads.len()
    }

    /// network-status patches waiting or in progress.
    pub fn pending_status_patches(&self) -> usize {
        self.status.pending()
    }

    async fn get<T>(
        &self,
        what: String,
        request: impl Future<Output = Result<Option<T>, ::kube::Error>>,
    ) -> Result<Option<T>, CatalogError> {
        let timeout = self.config.get_timeout;
        let result = match tokio::time::timeout(timeout, request).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(source)) => Err(KubeError::Api(source)),
            Err(_) => Err(KubeError::Timeout(timeout)),
        };
        result.map_err(|e| CatalogError::unavailable(what, e))
    }
}

impl Drop for KubeCatalog {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Catalog for KubeCatalog {
    fn nad<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<resolve::NetworkAttachmentDefinition>, CatalogError>> {
        async move {
            if let Some(nad) = self.nads.get(namespace, name) {
                metrics().lookup("nad", "cache");
                return Ok(Some(nad));
            }
            // Not cached: created a moment ago (the watch is behind), or absent.
            metrics().lookup("nad", "api");
            let api: Api<NetworkAttachmentDefinition> = Api::namespaced(self.client.clone(), namespace);
            let found = self
                .get(format!("NetworkAttachmentDefinition {namespace}/{name}"), api.get_opt(name))
                .await?;
            Ok(found.map(|n| n.to_spec()))
        }
        .boxed()
    }

    /// The watch's cache: until it has synced, the NADs seen so far.
    fn networks(&self) -> BoxFuture<'_, Result<Vec<NadSummary>, CatalogError>> {
        let listed = self.nads.list();
        async move { Ok(listed) }.boxed()
    }

    /// The pod watch's: a pod of this node added or its annotations changed.
    fn pod_changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        Some(self.pods.changes())
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, CatalogError>> {
        async move {
            if let Some(pod) = self.pods.get(namespace, name) {
                metrics().lookup("pod", "cache");
                return Ok(Some(pod));
            }
            // A pod the runtime starts is bound to this node, so the watch delivers it; a
            // miss means it was bound a moment ago. One GET, metadata only.
            metrics().lookup("pod", "api");
            let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(self.client.clone(), namespace);
            let found = self.get(format!("pod {namespace}/{name}"), api.get_opt(name)).await?;
            Ok(found.and_then(|p| pod_info(&p.metadata)))
        }
        .boxed()
    }

    fn pod_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<PodNetwork>, CatalogError>> {
        async move {
            if let Some(pn) = self.pod_networks.pod_networks.get("", name) {
                metrics().lookup("podnetwork", "cache");
                return Ok(Some(pn));
            }
            metrics().lookup("podnetwork", "api");
            let api: Api<PodNetwork> = Api::all(self.client.clone());
            self.get(format!("PodNetwork {name}"), api.get_opt(name)).await
        }
        .boxed()
    }

    fn pod_network_attachment<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodNetworkAttachment>, CatalogError>> {
        async move {
            if let Some(pna) = self.pod_networks.attachments.get(namespace, name) {
                metrics().lookup("podnetworkattachment", "cache");
                return Ok(Some(pna));
            }
            metrics().lookup("podnetworkattachment", "api");
            let api: Api<PodNetworkAttachment> = Api::namespaced(self.client.clone(), namespace);
            self.get(format!("PodNetworkAttachment {namespace}/{name}"), api.get_opt(name)).await
        }
        .boxed()
    }

    fn attachment_parameters<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentParameters>, CatalogError>> {
        async move {
            if let Some(p) = self.pod_networks.parameters.get(namespace, name) {
                metrics().lookup("attachmentparameters", "cache");
                return Ok(Some(p));
            }
            metrics().lookup("attachmentparameters", "api");
            let api: Api<AttachmentParameters> = Api::namespaced(self.client.clone(), namespace);
            self.get(format!("AttachmentParameters {namespace}/{name}"), api.get_opt(name)).await
        }
        .boxed()
    }

    fn publish_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        report: StatusReport,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        let queued = self.status.publish(pod, &report);
        async move { queued }.boxed()
    }

    fn record_event<'a>(&'a self, pod: &'a PodInfo, reason: &'a str, message: &'a str) -> BoxFuture<'a, ()> {
        self.events.record(pod, reason, message);
        async {}.boxed()
    }
}
