//! The kubelet's PodResources API (`proto/podresources.proto`, gRPC `v1.PodResourcesLister` on
//! kubelet's pod-resources socket): which device plugin devices kubelet gave a pod.
//!
//! plexus calls `List`, generally available since Kubernetes 1.20 (`Get` needs a feature gate on
//! most clusters), and keeps the pod's containers' devices, in the order kubelet lists them.

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

use super::{DeviceSource, ResourceDevice, SourceError};
use crate::catalog::PodInfo;
use crate::cni::error::chain;

/// The code generated from `proto/podresources.proto` by `agent/build.rs` (package `v1`).
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod proto {
    tonic::include_proto!("v1");
}

use proto::pod_resources_lister_client::PodResourcesListerClient;
use proto::{ListPodResourcesRequest, ListPodResourcesResponse};

/// kubelet's default pod-resources socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

const SOURCE: &str = "kubelet's PodResources API";

/// The devices of the pod `namespace/name` in a `List` response: every container's, in order.
pub fn devices_of_pod(
    response: &ListPodResourcesResponse,
    namespace: &str,
    name: &str,
) -> Vec<ResourceDevice> {
    response
        .pod_resources
        .iter()
        .filter(|p| p.namespace == namespace && p.name == name)
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.devices)
        .flat_map(|d| {
            d.device_ids
                .iter()
                .map(|id| ResourceDevice { resource_name: d.resource_name.clone(), device_id: id.clone() })
        })
        .collect()
}

/// A client of the API on `socket`; each lookup is one connection and one `List`, within
/// `timeout`.
#[derive(Debug, Clone)]
pub struct PodResources {
    socket: PathBuf,
    timeout: Duration,
}

impl PodResources {
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Self {
        PodResources { socket: socket.into(), timeout }
    }

    async fn list(&self) -> Result<ListPodResourcesResponse, String> {
        let path = self.socket.clone();
        // The URI is required by the transport and unused: every connection goes to `path`.
        let channel = Endpoint::from_static("http://localhost")
            .connect_timeout(self.timeout)
            .timeout(self.timeout)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
            }))
            .await
            .map_err(|e| {
                format!(
                    "connecting to {}: {}; is kubelet running, and is its pod-resources directory mounted into \
                     the agent (--pod-resources-socket)?",
                    self.socket.display(),
                    chain(&e)
                )
            })?;
        let mut client = PodResourcesListerClient::new(channel);
        let call = client.list(ListPodResourcesRequest {});
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(format!(
                "List on {} failed: {:?}: {}",
                self.socket.display(),
                status.code(),
                status.message()
            )),
            Err(_) => {
                Err(format!("List on {} did not answer within {:?}", self.socket.display(), self.timeout))
            }
        }
    }
}

impl DeviceSource for PodResources {
    fn name(&self) -> String {
        format!("{SOURCE} at {}", self.socket.display())
    }

    fn pod_devices<'a>(
        &'a self,
        pod: &'a PodInfo,
    ) -> BoxFuture<'a, Result<Vec<ResourceDevice>, SourceError>> {
        async move {
            let response =
                self.list().await.map_err(|message| SourceError { source_name: SOURCE, message })?;
            Ok(devices_of_pod(&response, &pod.namespace, &pod.name))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::proto::{ContainerDevices, ContainerResources, PodResources as Pod};
    use super::*;

    fn container(devices: &[(&str, &[&str])]) -> ContainerResources {
        ContainerResources {
            name: "c".into(),
            devices: devices
                .iter()
                .map(|(r, ids)| ContainerDevices {
                    resource_name: (*r).into(),
                    device_ids: ids.iter().map(|s| (*s).into()).collect(),
                    topology: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_pods_devices_of_every_container_in_order() {
        let response = ListPodResourcesResponse {
            pod_resources: vec![
                Pod {
                    name: "a".into(),
                    namespace: "ns".into(),
                    containers: vec![
                        container(&[("intel.com/vf", &["0000:81:02.3", "0000:81:02.1"])]),
                        container(&[("gpu", &["g0"]), ("intel.com/vf", &["0000:81:02.5"])]),
                    ],
                },
                // Same name, another namespace; and another pod.
                Pod {
                    name: "a".into(),
                    namespace: "other".into(),
                    containers: vec![container(&[("intel.com/vf", &["x"])])],
                },
                Pod {
                    name: "b".into(),
                    namespace: "ns".into(),
                    containers: vec![container(&[("intel.com/vf", &["y"])])],
                },
            ],
        };
        let ids: Vec<(String, String)> = devices_of_pod(&response, "ns", "a")
            .into_iter()
            .map(|d| (d.resource_name, d.device_id))
            .collect();
        let want = [
            ("intel.com/vf", "0000:81:02.3"),
            ("intel.com/vf", "0000:81:02.1"),
            ("gpu", "g0"),
            ("intel.com/vf", "0000:81:02.5"),
        ];
        assert_eq!(ids, want.map(|(r, d)| (r.to_owned(), d.to_owned())));
        assert!(devices_of_pod(&response, "ns", "c").is_empty());
    }

    #[tokio::test]
    async fn a_missing_socket_is_a_source_error_naming_it_and_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kubelet.sock");
        let source = PodResources::new(&socket, Duration::from_secs(2));
        let pod = PodInfo { namespace: "ns".into(), name: "a".into(), ..Default::default() };
        let err = source.pod_devices(&pod).await.unwrap_err().to_string();
        assert!(err.contains(&socket.display().to_string()), "{err}");
        assert!(err.contains("--pod-resources-socket"), "{err}");
        assert!(err.starts_with("kubelet's PodResources API: "), "{err}");
    }
}
