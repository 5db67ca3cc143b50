//! Where IPAMClaim objects are read and their status written: the Kubernetes API
//! (`crate::kube::ipamclaim`), or a test's stand-in.

use futures::future::BoxFuture;

use crate::cni::{CniCode, ErrorCode};

/// An IPAMClaim as the engine needs it (NPWG spec 8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimObject {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.network`: the network the claim was created for.
    pub network: String,
    /// `spec.interface`: the pod interface it was created for.
    pub interface: String,
    /// `status.ips`; empty while nothing was allocated.
    pub ips: Vec<String>,
}

/// Reading a claim or writing its status failed (the API server is unreachable, refuses...).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct ClaimSourceError {
    pub what: String,
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// The API server may answer on the runtime's retry.
impl CniCode for ClaimSourceError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::TryAgainLater
    }
}

pub trait ClaimSource: Send + Sync {
    /// The claim `namespace/name`, `None` when there is no such object.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ClaimObject>, ClaimSourceError>>;

    /// Writes `ips` (CIDR notation) as the claim's `status.ips`.
    fn record_ips<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        ips: &'a [String],
    ) -> BoxFuture<'a, Result<(), ClaimSourceError>>;
}
