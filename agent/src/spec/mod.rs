//! The NPWG multi-network spec v1.1, as pure functions: values in, values out.
//!
//! Nothing here touches the network, the disk or the clock, so every MUST of the spec
//! can be unit-tested with real annotation text and real CNI configs.

pub mod delegate_conf;
pub mod plan;
pub mod resolve;
pub mod sandbox_networks;
pub mod selection;
pub mod status;
pub mod validate;

/// The selection annotation (spec 4.1).
pub const NETWORKS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/networks";
/// The status annotation (spec 5).
pub const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// The NAD annotation naming the device plugin resource that backs the network (the Device
/// Information Specification).
pub const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";
