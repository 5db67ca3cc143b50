//! Which device of a cluster resource each attachment of a pod gets.
//!
//! A NetworkAttachmentDefinition with the `k8s.v1.cni.cncf.io/resourceName` annotation names a
//! resource whose devices the cluster hands out to pods (SR-IOV VFs, typically): the NAD's config
//! names no device, so one NAD serves every device of the pool. The cluster allocated the pod its
//! devices before the sandbox exists; the agent learns which from
//!
//! - the kubelet's PodResources API ([`podresources`]), for device plugins: the devices of each
//!   resource kubelet gave the pod's containers;
//! - DRA ([`dra`], read through [`crate::kube::dra`]): the devices allocated to the pod's
//!   ResourceClaims, each named by its `k8s.cni.cncf.io/deviceID` attribute in its
//!   ResourceSlice, and of the resource its `k8s.cni.cncf.io/resourceName` attribute names (else
//!   `<pod claim name>/<request name>`).
//!
//! Sources are asked in that order, each at most once per ADD and only when an attachment needs
//! a resource the earlier ones did not have. Several attachments of one resource get distinct
//! devices, in attachment order ([`assign`]). The device's ID becomes the delegate's `deviceID`
//! ([`inject`], as Multus does), and the device plugin's device-info file, when it wrote one, the
//! attachment's device information ([`crate::devinfo::dp`], Device Information Specification 4.2.1).

pub mod assign;
pub mod dra;
pub mod inject;
pub mod pod_devices;
pub mod podresources;

use futures::future::BoxFuture;

use crate::catalog::PodInfo;

/// One device the cluster allocated to a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDevice {
    /// The resource it is of, as a NAD's `k8s.v1.cni.cncf.io/resourceName` names it.
    pub resource_name: String,
    /// Its ID: a PCI address for SR-IOV VFs.
    pub device_id: String,
}

/// Why a source could not say which devices a pod has: the failure as displayed, with what was
/// asked.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct SourceError {
    /// "kubelet's PodResources API", "DRA".
    pub source_name: &'static str,
    pub message: String,
}

/// Where a pod's allocated devices are learnt.
pub trait DeviceSource: Send + Sync {
    /// What the source is, in messages ("kubelet's PodResources API at <socket>").
    fn name(&self) -> String;

    /// Every device of the pod, in the source's order.
    fn pod_devices<'a>(&'a self, pod: &'a PodInfo)
        -> BoxFuture<'a, Result<Vec<ResourceDevice>, SourceError>>;
}
