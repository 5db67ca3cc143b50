//! DRA (`resource.k8s.io/v1`): the devices allocated to a pod's ResourceClaims, as network
//! devices. Pure: [`crate::kube::dra`] reads the objects.
//!
//! A pod's claims are its `spec.resourceClaims`, in order: each names its ResourceClaim directly
//! (`resourceClaimName`) or through a template, whose generated claim's name is in the pod's
//! `status.resourceClaimStatuses`. Each allocation result of a claim
//! (`status.allocation.devices.results`) names a device by driver, pool and name; the device's
//! entry in its pool's ResourceSlice says what it is:
//!
//! - its `k8s.cni.cncf.io/deviceID` attribute is the device ID (a VF's PCI address); a device
//!   without it is not a network device (a GPU of the same claim) and is left out;
//! - its `k8s.cni.cncf.io/resourceName` attribute is the resource it is of, as a NAD's
//!   `k8s.v1.cni.cncf.io/resourceName` names it; without it, `<pod claim name>/<request name>`
//!   (the name Multus 4.2 gave DRA devices).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodResourceClaim, PodResourceClaimStatus};
use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim, ResourceSlice};
use serde::Deserialize;

use super::ResourceDevice;

pub const DEVICE_ID_ATTRIBUTE: &str = "k8s.cni.cncf.io/deviceID";
pub const RESOURCE_NAME_ATTRIBUTE: &str = "k8s.cni.cncf.io/resourceName";

/// The parts of a pod DRA needs (a GET of the pod decodes into it; everything else is ignored).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodClaims {
    #[serde(default)]
    pub spec: PodClaimsSpec,
    #[serde(default)]
    pub status: PodClaimsStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodClaimsSpec {
    #[serde(default)]
    pub resource_claims: Vec<PodResourceClaim>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodClaimsStatus {
    #[serde(default)]
    pub resource_claim_statuses: Vec<PodResourceClaimStatus>,
}

/// One claim of the pod: its name in the pod and the ResourceClaim object's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    pub pod_claim: String,
    pub claim: String,
}

/// The pod's ResourceClaims, in `spec.resourceClaims` order. A template's claim not generated
/// yet (no status entry, or one without a name: none is needed) is left out.
pub fn claims_of_pod(pod: &PodClaims) -> Vec<ClaimRef> {
    pod.spec
        .resource_claims
        .iter()
        .filter_map(|c| {
            let claim = match &c.resource_claim_name {
                Some(name) => Some(name.clone()),
                None => pod
                    .status
                    .resource_claim_statuses
                    .iter()
                    .find(|s| s.name == c.name)
                    .and_then(|s| s.resource_claim_name.clone()),
            }?;
            Some(ClaimRef { pod_claim: c.name.clone(), claim })
        })
        .collect()
}

/// The allocation results of a claim, empty while it is not allocated.
pub fn allocation_results(claim: &ResourceClaim) -> &[DeviceRequestAllocationResult] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_deref())
        .unwrap_or_default()
}

/// The drivers whose ResourceSlices describe the claim's devices.
pub fn drivers_of(claim: &ResourceClaim) -> BTreeSet<String> {
    allocation_results(claim).iter().map(|r| r.driver.clone()).collect()
}

/// The network devices allocated to the claim, in allocation order, described by `slices`. A
/// pool's slices of an older generation than its newest are stale and not read.
pub fn allocated_devices(
    claim_ref: &ClaimRef,
    claim: &ResourceClaim,
    slices: &[ResourceSlice],
) -> Vec<ResourceDevice> {
    let mut newest: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for s in slices {
        let g = newest
            .entry((s.spec.driver.as_str(), s.spec.pool.name.as_str()))
            .or_insert(s.spec.pool.generation);
        *g = (*g).max(s.spec.pool.generation);
    }
    let current = |s: &&ResourceSlice| {
        newest.get(&(s.spec.driver.as_str(), s.spec.pool.name.as_str())) == Some(&s.spec.pool.generation)
    };
    allocation_results(claim)
        .iter()
        .filter_map(|result| {
            let device = slices
                .iter()
                .filter(current)
                .filter(|s| s.spec.driver == result.driver && s.spec.pool.name == result.pool)
                .flat_map(|s| s.spec.devices.iter().flatten())
                .find(|d| d.name == result.device)?;
            let attribute = |key: &str| {
                device.attributes.as_ref().and_then(|a| a.get(key)).and_then(|a| a.string.clone())
            };
            let device_id = attribute(DEVICE_ID_ATTRIBUTE).filter(|id| !id.is_empty())?;
            let resource_name = attribute(RESOURCE_NAME_ATTRIBUTE)
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| format!("{}/{}", claim_ref.pod_claim, result.request));
            Some(ResourceDevice { resource_name, device_id })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn pod(value: Value) -> PodClaims {
        serde_json::from_value(value).unwrap()
    }

    fn claim(results: Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "vf", "exactly": {"deviceClassName": "vfs"}}]}},
            "status": {"allocation": {"devices": {"results": results}}}
        }))
        .unwrap()
    }

    fn slice(driver: &str, pool: &str, generation: i64, devices: Value) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{driver}-{pool}-{generation}")},
            "spec": {"driver": driver, "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                     "nodeName": "node-1", "devices": devices}
        }))
        .unwrap()
    }

    fn result(request: &str, driver: &str, pool: &str, device: &str) -> Value {
        json!({"request": request, "driver": driver, "pool": pool, "device": device})
    }

    fn device(name: &str, attributes: Value) -> Value {
        json!({"name": name, "attributes": attributes})
    }

    fn ids(devices: &[ResourceDevice]) -> Vec<(&str, &str)> {
        devices.iter().map(|d| (d.resource_name.as_str(), d.device_id.as_str())).collect()
    }

    #[test]
    fn claims_by_name_or_through_their_template_in_spec_order() {
        let p = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [
                {"name": "nic", "resourceClaimTemplateName": "vf-template"},
                {"name": "shared", "resourceClaimName": "shared-vfs"},
                {"name": "pending", "resourceClaimTemplateName": "t"},
                {"name": "unneeded", "resourceClaimTemplateName": "t"}
            ]},
            "status": {"resourceClaimStatuses": [
                {"name": "unneeded"},
                {"name": "nic", "resourceClaimName": "p-nic-x7k2q"}
            ]}
        }));
        assert_eq!(
            claims_of_pod(&p),
            [
                ClaimRef { pod_claim: "nic".into(), claim: "p-nic-x7k2q".into() },
                ClaimRef { pod_claim: "shared".into(), claim: "shared-vfs".into() },
            ]
        );
        assert!(claims_of_pod(&PodClaims::default()).is_empty());
    }

    #[test]
    fn devices_carry_the_attributes_ids_and_resource_names() {
        let c = claim(json!([
            result("vf", "sriov.example.com", "node-1", "vf-3"),
            result("vf", "sriov.example.com", "node-1", "vf-1"),
            result("gpu", "gpu.example.com", "node-1", "gpu-0"),
            result("vf", "sriov.example.com", "node-1", "vf-named"),
            result("vf", "sriov.example.com", "gone", "vf-9"),
        ]));
        let slices = [
            slice(
                "sriov.example.com",
                "node-1",
                1,
                json!([
                    device("vf-1", json!({DEVICE_ID_ATTRIBUTE: {"string": "0000:81:02.1"}})),
                    device(
                        "vf-3",
                        json!({DEVICE_ID_ATTRIBUTE: {"string": "0000:81:02.3"}, "vfID": {"int": 3}})
                    ),
                    device(
                        "vf-named",
                        json!({DEVICE_ID_ATTRIBUTE: {"string": "0000:81:02.4"},
                                          RESOURCE_NAME_ATTRIBUTE: {"string": "intel.com/vf"}})
                    ),
                ]),
            ),
            // No deviceID attribute: not a network device.
            slice(
                "gpu.example.com",
                "node-1",
                1,
                json!([device("gpu-0", json!({"model": {"string": "x"}}))]),
            ),
        ];
        let claim_ref = ClaimRef { pod_claim: "nic".into(), claim: "c".into() };
        assert_eq!(
            ids(&allocated_devices(&claim_ref, &c, &slices)),
            [("nic/vf", "0000:81:02.3"), ("nic/vf", "0000:81:02.1"), ("intel.com/vf", "0000:81:02.4")]
        );
        assert_eq!(
            drivers_of(&c),
            BTreeSet::from(["gpu.example.com".to_owned(), "sriov.example.com".to_owned()])
        );
    }

    #[test]
    fn a_pools_stale_slices_are_not_read() {
        let c = claim(json!([result("vf", "d", "p", "vf-0")]));
        let slices = [
            slice("d", "p", 1, json!([device("vf-0", json!({DEVICE_ID_ATTRIBUTE: {"string": "old"}}))])),
            slice("d", "p", 2, json!([device("vf-0", json!({DEVICE_ID_ATTRIBUTE: {"string": "new"}}))])),
        ];
        let claim_ref = ClaimRef { pod_claim: "nic".into(), claim: "c".into() };
        assert_eq!(ids(&allocated_devices(&claim_ref, &c, &slices)), [("nic/vf", "new")]);
    }

    #[test]
    fn an_unallocated_claim_has_no_devices() {
        let c: ResourceClaim =
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {}})).unwrap();
        let claim_ref = ClaimRef { pod_claim: "nic".into(), claim: "c".into() };
        assert!(allocated_devices(&claim_ref, &c, &[]).is_empty());
        assert!(drivers_of(&c).is_empty());
    }
}
