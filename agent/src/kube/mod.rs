//! The Kubernetes catalog: NADs and this node's pods from the API server, network-status
//! and events back onto pods.
//!
//! Built so that the failure modes Multus users know cannot happen:
//! - only the agent talks to the API server, with its own service account; the token file is
//!   re-read as soon as kubelet rotates it ([`client`]), the shim never holds a credential;
//! - pods are watched for this node only (`spec.nodeName` field selector, metadata only,
//!   trimmed to the annotations plexus reads) so memory follows the node, not the cluster
//!   ([`pods`]);
//! - the ADD path reads caches; only a miss for a pod or NAD created a moment ago costs one
//!   GET, with a short time limit ([`catalog`]);
//! - lists are streamed where the server offers it, and otherwise served from the API
//!   server's watch cache (`resourceVersion=0`), never a quorum read of every pod
//!   ([`watch`]);
//! - network-status is patched after the ADD answered, retried with backoff, never failing
//!   the ADD ([`status_patch`]); events are best effort and bounded ([`events`]).

pub mod api_error;
pub mod catalog;
pub mod client;
pub mod dra;
pub mod events;
pub mod ipamclaim;
pub mod nad;
pub mod podnetwork;
pub mod pods;
pub mod policy;
pub mod resource;
pub mod status_patch;
pub mod watch;

pub use catalog::{KubeCatalog, KubeCatalogConfig};
pub use client::{build_client, ClientSource};

/// Log targets of kube's crates silenced by default: the client's request tracing logs
/// every failed request at ERROR (one line per reconnect attempt in an outage), the client
/// logs a broken watch and the watcher a 403 at WARN with a debug dump. The watches log each
/// failure themselves, rendered and once ([`watch`]). The client's TLS module keeps its
/// warnings (a CA bundle that could not be reloaded). `RUST_LOG` overrides this.
pub const QUIET_LOG_TARGETS: &str =
    "kube_client::client=off,kube_client::client::tls=info,kube_runtime::watcher=off";

/// One kind of access the agent needs: every API call of this module is covered by one of
/// these, and `deploy/rbac.yaml` grants exactly these (a test checks both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiAccess {
    /// The API group ("" for the core group).
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// Everything the agent does with the API server.
pub const API_ACCESS: &[ApiAccess] = &[
    // The reflector lists and watches; a cache miss for a NAD created a moment ago GETs it.
    ApiAccess { group: nad::GROUP, resource: nad::PLURAL, verbs: &["get", "list", "watch"] },
    // This node's pods: watched, GET on a cache miss (and for a pod's DRA claims),
    // network-status merge-patched.
    ApiAccess { group: "", resource: "pods", verbs: &["get", "list", "watch", "patch"] },
    // kube's event recorder creates an event, and patches it into a series when it repeats.
    ApiAccess { group: "events.k8s.io", resource: "events", verbs: &["create", "patch"] },
    // The network attachment policy objects (plexus's own group), listed and watched.
    ApiAccess { group: crate::policy::model::GROUP, resource: policy::PLURAL, verbs: &["list", "watch"] },
    // The KEP-3698 objects a pod asks for: reflectors list and watch, a cache miss GETs.
    ApiAccess {
        group: crate::podnetwork::model::GROUP,
        resource: crate::podnetwork::model::POD_NETWORK_PLURAL,
        verbs: &["get", "list", "watch"],
    },
    ApiAccess {
        group: crate::podnetwork::model::GROUP,
        resource: crate::podnetwork::model::ATTACHMENT_PLURAL,
        verbs: &["get", "list", "watch"],
    },
    ApiAccess {
        group: crate::podnetwork::model::GROUP,
        resource: crate::podnetwork::model::PARAMETERS_PLURAL,
        verbs: &["get", "list", "watch"],
    },
    // DRA: a pod's ResourceClaims, and the ResourceSlices describing their devices
    // (`crate::devices`), read for a NAD with a resourceName.
    ApiAccess { group: dra::GROUP, resource: dra::CLAIMS, verbs: &["get"] },
    ApiAccess { group: dra::GROUP, resource: dra::SLICES, verbs: &["list"] },
    // IPAMClaims (NPWG spec 8): the one a selection references is read, as are those this
    // node holds addresses of (to release them once deleted); the agent's IPAM writes the
    // status, as the spec's RBAC split intends (read the spec, write the status).
    ApiAccess { group: ipamclaim::GROUP, resource: ipamclaim::PLURAL, verbs: &["get"] },
    ApiAccess { group: ipamclaim::GROUP, resource: ipamclaim::STATUS, verbs: &["patch"] },
];

/// Errors of the Kubernetes catalog, with what was being done.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig { path: std::path::PathBuf, source: ::kube::config::KubeconfigError },
    #[error(
        "loading the in-cluster config (service account token, CA, KUBERNETES_SERVICE_HOST): {0}; outside a \
         cluster, pass --kubeconfig"
    )]
    InCluster(#[source] ::kube::config::InClusterError),
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] ::kube::Error),
    /// A request failed; what was asked is said by the caller, once.
    #[error("{}", api_error::describe(.0))]
    Api(#[source] ::kube::Error),
    #[error("the API server did not answer within {0:?}")]
    Timeout(std::time::Duration),
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_quiet_log_targets_are_valid_directives() {
        let filter = format!("info,{}", super::QUIET_LOG_TARGETS);
        assert!(tracing_subscriber::EnvFilter::try_new(&filter).is_ok(), "{filter}");
    }
}
