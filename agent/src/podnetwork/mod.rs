//! KEP-3698 multi-network, the second front-end: `PodNetwork` and `PodNetworkAttachment`
//! objects, the pod's list of networks, the KEP's conditions and per-pod status. Like
//! [`crate::spec`] for the NPWG annotations, it turns objects into the engine's attachment
//! plan and results into status; the engine behind both is one.

pub mod conditions;
pub mod model;
pub mod params;
pub mod params_ready;
pub mod request;
pub mod status;
