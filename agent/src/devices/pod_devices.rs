//! One ADD's view of the pod's devices: the sources are asked lazily, in order, only when an
//! attachment needs a resource the earlier ones did not have, and each at most once.

use std::sync::Arc;

use super::assign::{DevicePool, Take};
use super::DeviceSource;
use crate::catalog::PodInfo;
use crate::cni::{CniCode, ErrorCode};
use crate::state::AllocatedDevice;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "network {network} needs a device of resource {resource} (its NetworkAttachmentDefinition's \
         k8s.v1.cni.cncf.io/resourceName), which the cluster allocates to pods, and CNI_ARGS name no pod; run the \
         container as a pod, or select a network without a resourceName"
    )]
    NoPod { network: String, resource: String },
    #[error("{}", no_device_message(.network, .resource, *.allocated, .resources, .unavailable))]
    NoDevice {
        network: String,
        resource: String,
        /// Devices of the resource the pod has (all taken by its earlier attachments).
        allocated: usize,
        /// The resources the pod has devices of.
        resources: Vec<String>,
        /// The sources that could not be asked, and why.
        unavailable: Vec<String>,
    },
}

fn no_device_message(
    network: &str,
    resource: &str,
    allocated: usize,
    resources: &[String],
    unavailable: &[String],
) -> String {
    let mut text = format!(
        "network {network} needs a device of resource {resource} (its NetworkAttachmentDefinition's \
         k8s.v1.cni.cncf.io/resourceName), and "
    );
    if allocated == 0 {
        text.push_str("the pod was allocated none");
        if !resources.is_empty() {
            text.push_str(&format!(" (it has devices of {})", resources.join(", ")));
        }
        text.push_str(&format!(
            ": request one device of {resource} per attachment of the network, in a container's resources \
             (limits: {resource}: 1) or through a DRA ResourceClaim whose devices have the \
             k8s.cni.cncf.io/deviceID attribute"
        ));
    } else {
        text.push_str(&format!(
            "the pod's {allocated} device(s) of it are taken by its earlier attachments of that resource: request \
             one device of {resource} per attachment of the network"
        ));
    }
    if !unavailable.is_empty() {
        text.push_str(&format!("; the agent could not ask everywhere: {}", unavailable.join("; ")));
    }
    text
}

/// kubelet allocates device plugin devices at admission and DRA allocates claims before the pod
/// is scheduled, both before the sandbox exists: a pod without the device at ADD never gets one,
/// so retrying cannot help, and the fix is in the pod's request, which the project answers with
/// code 7 as for every other refusal of a pod's request. Only when a source could not be asked
/// may the device exist: code 11, the runtime retries once kubelet or the API server answers.
impl CniCode for DeviceError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            DeviceError::NoDevice { unavailable, .. } if !unavailable.is_empty() => ErrorCode::TryAgainLater,
            DeviceError::NoPod { .. } | DeviceError::NoDevice { .. } => ErrorCode::InvalidNetworkConfig,
        }
    }
}

/// The devices of one pod for one ADD (or one change of a running pod's attachments).
pub struct PodDevices<'a> {
    pod: Option<&'a PodInfo>,
    sources: &'a [Arc<dyn DeviceSource>],
    /// How many of `sources` were asked.
    asked: usize,
    pool: DevicePool,
    unavailable: Vec<String>,
}

impl<'a> PodDevices<'a> {
    pub fn new(pod: Option<&'a PodInfo>, sources: &'a [Arc<dyn DeviceSource>]) -> Self {
        PodDevices { pod, sources, asked: 0, pool: DevicePool::default(), unavailable: Vec::new() }
    }

    /// Devices the pod's existing attachments hold: never handed out again.
    pub fn holding<'d>(mut self, held: impl IntoIterator<Item = &'d AllocatedDevice>) -> Self {
        for d in held {
            self.pool.mark_taken(&d.resource_name, &d.device_id);
        }
        self
    }

    /// The next free device of `resource` for an attachment of `network`.
    pub async fn take(&mut self, network: &str, resource: &str) -> Result<AllocatedDevice, DeviceError> {
        let Some(pod) = self.pod else {
            return Err(DeviceError::NoPod { network: network.to_owned(), resource: resource.to_owned() });
        };
        loop {
            let taken = self.pool.take(resource);
            if let Take::Device(device_id) = taken {
                return Ok(AllocatedDevice { resource_name: resource.to_owned(), device_id });
            }
            let Some(source) = self.sources.get(self.asked) else {
                let allocated = match taken {
                    Take::AllTaken { allocated } => allocated,
                    _ => 0,
                };
                return Err(DeviceError::NoDevice {
                    network: network.to_owned(),
                    resource: resource.to_owned(),
                    allocated,
                    resources: self.pool.resources().into_iter().map(str::to_owned).collect(),
                    unavailable: self.unavailable.clone(),
                });
            };
            self.asked += 1;
            match source.pod_devices(pod).await {
                Ok(devices) => {
                    tracing::debug!(source = %source.name(), ?devices, "the pod's allocated devices");
                    self.pool.add(devices);
                }
                Err(e) => {
                    tracing::warn!(source = %source.name(), "reading the pod's allocated devices: {e}");
                    self.unavailable.push(e.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;
    use futures::FutureExt;

    use super::super::{ResourceDevice, SourceError};
    use super::*;

    /// Answers `devices` (or fails) and counts the calls.
    struct Fixed {
        devices: Result<Vec<(&'static str, &'static str)>, &'static str>,
        calls: AtomicUsize,
    }

    fn fixed(devices: Result<Vec<(&'static str, &'static str)>, &'static str>) -> Arc<Fixed> {
        Arc::new(Fixed { devices, calls: AtomicUsize::new(0) })
    }

    impl DeviceSource for Fixed {
        fn name(&self) -> String {
            "fixed".into()
        }

        fn pod_devices<'a>(
            &'a self,
            _: &'a PodInfo,
        ) -> BoxFuture<'a, Result<Vec<ResourceDevice>, SourceError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = match &self.devices {
                Ok(d) => Ok(d
                    .iter()
                    .map(|(r, id)| ResourceDevice { resource_name: (*r).into(), device_id: (*id).into() })
                    .collect()),
                Err(message) => Err(SourceError { source_name: "fixed", message: (*message).into() }),
            };
            async move { answer }.boxed()
        }
    }

    fn pod() -> PodInfo {
        PodInfo { namespace: "ns".into(), name: "p".into(), ..Default::default() }
    }

    fn sources(list: &[Arc<Fixed>]) -> Vec<Arc<dyn DeviceSource>> {
        list.iter().map(|s| s.clone() as Arc<dyn DeviceSource>).collect()
    }

    #[tokio::test]
    async fn later_sources_are_asked_only_for_what_earlier_ones_lack() {
        let kubelet = fixed(Ok(vec![("intel.com/vf", "0000:81:02.3"), ("intel.com/vf", "0000:81:02.1")]));
        let dra = fixed(Ok(vec![("nic/vf", "0000:82:02.0")]));
        let all = sources(&[kubelet.clone(), dra.clone()]);
        let pod = pod();
        let mut devices = PodDevices::new(Some(&pod), &all);
        assert_eq!(devices.take("ns/a", "intel.com/vf").await.unwrap().device_id, "0000:81:02.3");
        assert_eq!(devices.take("ns/a", "intel.com/vf").await.unwrap().device_id, "0000:81:02.1");
        assert_eq!(dra.calls.load(Ordering::SeqCst), 0, "DRA is not asked while kubelet has the devices");
        let d = devices.take("ns/b", "nic/vf").await.unwrap();
        assert_eq!(d, AllocatedDevice { resource_name: "nic/vf".into(), device_id: "0000:82:02.0".into() });
        let err = devices.take("ns/a", "intel.com/vf").await.unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(err.to_string().contains("the pod's 2 device(s) of it are taken"), "{err}");
        assert_eq!((kubelet.calls.load(Ordering::SeqCst), dra.calls.load(Ordering::SeqCst)), (1, 1));
    }

    #[tokio::test]
    async fn no_device_names_the_resource_and_what_to_request() {
        let kubelet = fixed(Ok(vec![("gpu", "g0")]));
        let all = sources(&[kubelet]);
        let pod = pod();
        let err = PodDevices::new(Some(&pod), &all).take("ns/vfs", "intel.com/vf").await.unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        let text = err.to_string();
        for needle in [
            "network ns/vfs",
            "resource intel.com/vf",
            "allocated none",
            "(it has devices of gpu)",
            "limits: intel.com/vf: 1",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }

    #[tokio::test]
    async fn a_source_that_cannot_be_asked_makes_it_try_again_later() {
        let kubelet = fixed(Err("connecting to /x.sock: no such file"));
        let dra = fixed(Ok(vec![]));
        let all = sources(&[kubelet, dra]);
        let pod = pod();
        let err = PodDevices::new(Some(&pod), &all).take("ns/vfs", "intel.com/vf").await.unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::TryAgainLater);
        assert!(err.to_string().contains("could not ask everywhere: fixed: connecting to /x.sock"), "{err}");
        // ... but a source failing does not matter when another has the device.
        let kubelet = fixed(Err("down"));
        let dra = fixed(Ok(vec![("intel.com/vf", "v")]));
        let all = sources(&[kubelet, dra]);
        assert_eq!(PodDevices::new(Some(&pod), &all).take("n", "intel.com/vf").await.unwrap().device_id, "v");
    }

    #[tokio::test]
    async fn held_devices_are_skipped_and_no_pod_is_refused() {
        let kubelet = fixed(Ok(vec![("vf", "a"), ("vf", "b")]));
        let all = sources(std::slice::from_ref(&kubelet));
        let pod = pod();
        let held = [AllocatedDevice { resource_name: "vf".into(), device_id: "a".into() }];
        let mut devices = PodDevices::new(Some(&pod), &all).holding(&held);
        assert_eq!(devices.take("n", "vf").await.unwrap().device_id, "b");
        let err = PodDevices::new(None, &all).take("ns/vfs", "vf").await.unwrap_err();
        assert!(matches!(err, DeviceError::NoPod { .. }));
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert_eq!(kubelet.calls.load(Ordering::SeqCst), 1, "without a pod nothing is asked");
    }
}
