//! Where networks and pods come from: NetworkAttachmentDefinitions, PodNetworks and their
//! attachments and parameters (KEP-3698), pod annotations and the on-disk CNI config
//! directories. One interface, several sources: local files ([`files`]) or the API server
//! ([`crate::kube`]); the engine cannot tell them apart.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::cni::{CniCode, ErrorCode};
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use crate::spec::resolve::NetworkAttachmentDefinition;

pub mod api_networks;
pub mod confdir;
pub mod files;
pub mod index;
pub mod manifest;
pub mod names;
pub mod standalone;
pub mod watch;

/// The pod fields plexus reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// The source could not be read (or written): `what` names the object once, `source`
    /// says why (and does not repeat what).
    #[error("reading {what}: {source}")]
    Unavailable { what: String, source: Box<dyn std::error::Error + Send + Sync> },
    /// The object is in a manifest file that cannot be used (standalone).
    #[error("its manifest {} cannot be used: {reason}; fix or remove the file", file.display())]
    BrokenManifest { file: std::path::PathBuf, reason: String },
    /// No manifest holds the object, and some could not be read (standalone): one of them
    /// may be meant to.
    #[error(
        "no manifest the agent can read holds it; these cannot be read: {}; fix them, or retry once \
         the manifest is written",
        files.join("; ")
    )]
    NotFoundWithUnreadable { files: Vec<String> },
    /// Too many network-status publications are waiting already.
    #[error("network-status not published: {max_pending} patches are already waiting")]
    Backlog { max_pending: usize },
}

impl CatalogError {
    pub fn unavailable(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CatalogError::Unavailable { what: what.into(), source: Box::new(source) }
    }
}

/// A catalog that cannot answer now may answer on the runtime's retry; a manifest that
/// cannot be decoded stays so until someone fixes it.
impl CniCode for CatalogError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            CatalogError::BrokenManifest { .. } => ErrorCode::DecodeFailure,
            CatalogError::Unavailable { .. }
            | CatalogError::NotFoundWithUnreadable { .. }
            | CatalogError::Backlog { .. } => ErrorCode::TryAgainLater,
        }
    }
}

/// A NAD with the metadata the network API lists (`ListPodNetwork`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NadSummary {
    pub nad: NetworkAttachmentDefinition,
    /// `metadata.uid`; empty when the object has none (a manifest file without one).
    pub uid: String,
    /// `metadata.generation`; 0 when the object has none.
    pub generation: i64,
}

/// What plexus reports on a pod after its ADD: published together (one patch on
/// Kubernetes), so a reader never sees one without the other.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusReport {
    /// The NPWG network-status annotation value (`k8s.v1.cni.cncf.io/network-status`).
    pub network_status: String,
    /// The KEP status annotation value (`plexus.dev/pod-networks-status`), when the pod asked
    /// for PodNetworks.
    pub pod_networks_status: Option<String>,
}

/// A source of NADs, PodNetworks and pods, and the sink for what plexus reports on pods.
pub trait Catalog: Send + Sync {
    /// The NAD `namespace/name`, or `None` when no such object exists.
    fn nad<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<NetworkAttachmentDefinition>, CatalogError>>;

    /// Every NAD the catalog knows now, by namespace then name.
    fn networks(&self) -> BoxFuture<'_, Result<Vec<NadSummary>, CatalogError>>;

    /// The pod `namespace/name`, or `None` when no such pod exists.
    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, CatalogError>>;

    /// The PodNetwork `name` (cluster-scoped), or `None` when no such object exists.
    fn pod_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<PodNetwork>, CatalogError>>;

    /// The PodNetworkAttachment `namespace/name`, or `None` when no such object exists.
    fn pod_network_attachment<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodNetworkAttachment>, CatalogError>>;

    /// The AttachmentParameters `namespace/name`, or `None` when no such object exists.
    fn attachment_parameters<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentParameters>, CatalogError>>;

    /// Publishes the status annotations on the pod, all at once. Best effort: the caller logs
    /// a failure and never fails an ADD that succeeded because of it.
    fn publish_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        report: StatusReport,
    ) -> BoxFuture<'a, Result<(), CatalogError>>;

    /// Publishes the network-status annotation value alone (a pod without PodNetworks).
    fn publish_network_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        annotation_value: &'a str,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        self.publish_status(
            pod,
            StatusReport { network_status: annotation_value.to_owned(), pod_networks_status: None },
        )
    }

    /// Records an event on the pod (a warning the user should see next to the pod).
    fn record_event<'a>(&'a self, pod: &'a PodInfo, reason: &'a str, message: &'a str) -> BoxFuture<'a, ()>;

    /// Notified when a pod of this node may have changed, for live attachments (`crate::live`);
    /// `None` when the catalog cannot tell (the caller resyncs on a timer alone). Called once,
    /// inside the agent's runtime.
    fn pod_changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }

    /// Forgets what was reported on pods that are gone: called by GC with the pods that
    /// records still name (`namespace`, `name`). A catalog whose reports live on the pod
    /// objects (Kubernetes: they go with the pod) has nothing to do.
    fn collect_reports<'a>(&'a self, _live: &'a [(String, String)]) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}
