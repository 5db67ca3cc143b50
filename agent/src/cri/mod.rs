//! A client of the container runtime's CRI (`proto/cri.proto`, gRPC `runtime.v1.RuntimeService`
//! on the runtime's socket, the one the node's kubelet uses): which pod sandboxes the runtime
//! holds. Each call is one connection and one `ListPodSandbox`, within a timeout.
//!
//! For CRI runtimes a sandbox's ID is the container ID of its CNI calls, so a sandbox listed
//! here is a pod whose network the runtime still holds.

use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

/// The code generated from `proto/cri.proto` by `agent/build.rs` (package `runtime.v1`, in its
/// own directory: plexus's network API uses the same package name).
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/cri/runtime.v1.rs"));
}

use proto::runtime_service_client::RuntimeServiceClient;
use proto::ListPodSandboxRequest;

/// containerd's socket, where kubelet usually reaches the runtime.
pub const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("connecting to the runtime at {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("ListPodSandbox on {} failed: {:?}: {}", socket.display(), status.code(), status.message())]
    Call {
        socket: PathBuf,
        #[source]
        status: tonic::Status,
    },
    #[error("ListPodSandbox on {} did not answer within {after:?}", socket.display())]
    Timeout { socket: PathBuf, after: Duration },
}

/// A pod sandbox as the runtime lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    /// `namespace/name` of its pod, when the runtime says.
    pub pod: Option<String>,
    /// SANDBOX_READY (false: NOTREADY, or a state this client does not know).
    pub ready: bool,
}

/// The runtime on `socket`.
#[derive(Debug, Clone)]
pub struct Runtime {
    socket: PathBuf,
    timeout: Duration,
}

impl Runtime {
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Self {
        Runtime { socket: socket.into(), timeout }
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// Every sandbox the runtime holds, in any state.
    pub async fn sandboxes(&self) -> Result<Vec<Sandbox>, CriError> {
        let path = self.socket.clone();
        // The URI is required by the transport and unused: every connection goes to `path`.
        let channel =
            Endpoint::from_static("http://localhost")
                .connect_timeout(self.timeout)
                .timeout(self.timeout)
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await
                .map_err(|source| CriError::Connect { socket: self.socket.clone(), source })?;
        let mut client = RuntimeServiceClient::new(channel);
        let call = client.list_pod_sandbox(ListPodSandboxRequest { filter: None });
        let response = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => response.into_inner(),
            Ok(Err(status)) => return Err(CriError::Call { socket: self.socket.clone(), status }),
            Err(_) => return Err(CriError::Timeout { socket: self.socket.clone(), after: self.timeout }),
        };
        Ok(response
            .items
            .into_iter()
            .map(|s| Sandbox {
                ready: s.state == proto::PodSandboxState::SandboxReady as i32,
                pod: s.metadata.map(|m| format!("{}/{}", m.namespace, m.name)),
                id: s.id,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_is_a_connect_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("containerd.sock");
        let err = Runtime::new(&socket, Duration::from_secs(2)).sandboxes().await.unwrap_err();
        assert!(matches!(err, CriError::Connect { .. }), "{err:?}");
        let text = crate::cni::error::chain(&err);
        assert!(text.contains(&socket.display().to_string()), "{text}");
    }
}
