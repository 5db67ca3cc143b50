//! DRA's objects as a [`DeviceSource`]: the pod (GET: its `spec.resourceClaims` and
//! `status.resourceClaimStatuses`, which the metadata-only pod cache does not hold), its
//! ResourceClaims (GET) and the ResourceSlices of their devices' drivers (LIST with a
//! `spec.driver` field selector), `resource.k8s.io/v1`. What they mean is [`crate::devices::dra`].
//!
//! Asked only for a pod with an attachment whose resource kubelet's PodResources API did not
//! have (see [`crate::devices::pod_devices`]); a pod without claims costs the one GET.

use std::time::Duration;

use ::kube::api::{Api, ApiResource, DynamicObject, ListParams};
use ::kube::Client;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

use super::KubeError;
use crate::catalog::PodInfo;
use crate::devices::dra::{allocated_devices, claims_of_pod, drivers_of, PodClaims};
use crate::devices::{DeviceSource, ResourceDevice, SourceError};

pub const GROUP: &str = "resource.k8s.io";
pub const CLAIMS: &str = "resourceclaims";
pub const SLICES: &str = "resourceslices";

const SOURCE: &str = "DRA";

/// Reads DRA's objects with `client`, each request within `timeout`.
#[derive(Clone)]
pub struct DraDevices {
    client: Client,
    timeout: Duration,
}

impl DraDevices {
    pub fn new(client: Client, timeout: Duration) -> Self {
        DraDevices { client, timeout }
    }

    async fn call<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = Result<T, ::kube::Error>>,
    ) -> Result<T, SourceError> {
        let result = match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => KubeError::Api(e),
            Err(_) => KubeError::Timeout(self.timeout),
        };
        Err(SourceError { source_name: SOURCE, message: format!("reading {what}: {result}") })
    }

    async fn devices(&self, pod: &PodInfo) -> Result<Vec<ResourceDevice>, SourceError> {
        let (namespace, name) = (pod.namespace.as_str(), pod.name.as_str());
        let pods: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &ApiResource::erase::<Pod>(&()));
        let object = self.call(&format!("pod {namespace}/{name}"), pods.get(name)).await?;
        let claims: PodClaims = serde_json::from_value(object.data).map_err(|e| SourceError {
            source_name: SOURCE,
            message: format!("pod {namespace}/{name}: its resourceClaims cannot be read: {e}"),
        })?;
        let claim_api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let slice_api: Api<ResourceSlice> = Api::all(self.client.clone());
        let mut devices = Vec::new();
        // Each driver's slices are listed once for all the pod's claims.
        let mut slices: Vec<ResourceSlice> = Vec::new();
        let mut listed: Vec<String> = Vec::new();
        for claim_ref in claims_of_pod(&claims) {
            let claim = self
                .call(
                    &format!("ResourceClaim {namespace}/{} of the pod", claim_ref.claim),
                    claim_api.get(&claim_ref.claim),
                )
                .await?;
            for driver in drivers_of(&claim) {
                if listed.contains(&driver) {
                    continue;
                }
                let params = ListParams::default().fields(&format!("spec.driver={driver}"));
                let found = self
                    .call(&format!("the ResourceSlices of driver {driver}"), slice_api.list(&params))
                    .await?;
                slices.extend(found.items);
                listed.push(driver);
            }
            devices.extend(allocated_devices(&claim_ref, &claim, &slices));
        }
        Ok(devices)
    }
}

impl DeviceSource for DraDevices {
    fn name(&self) -> String {
        "DRA (the pod's ResourceClaims and their ResourceSlices)".into()
    }

    fn pod_devices<'a>(
        &'a self,
        pod: &'a PodInfo,
    ) -> BoxFuture<'a, Result<Vec<ResourceDevice>, SourceError>> {
        self.devices(pod).boxed()
    }
}
