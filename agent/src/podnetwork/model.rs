//! The KEP-3698 objects as plexus serves them: custom resources of plexus's own API group
//! (`plexus.dev`, version `v1alpha1`), with the KEP's kinds, fields and meanings. The KEP's
//! objects were never merged into the core API, so an implementation serves them as CRDs
//! (`deploy/podnetwork-crds.yaml` is their schema).
//!
//! - `PodNetwork` (cluster-scoped): a network the cluster operator defines.
//! - `PodNetworkAttachment` (namespaced): a per-pod parameterisation of one PodNetwork.
//! - `AttachmentParameters` (namespaced, plexus's own): the per-attachment requests of the
//!   NPWG selection (`ips`, `mac`, `portMappings`, `bandwidth`, `cni-args`), referenced from a
//!   PodNetworkAttachment's `parametersRefs`.
//!
//! Plain data: reading and writing them is the kube client's job ([`crate::kube`]), deciding
//! about them the pure modules' next to this one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// plexus's API group (shared with the NetworkAttachmentPolicy objects).
pub const GROUP: &str = crate::policy::model::GROUP;
pub const VERSION: &str = "v1alpha1";

pub const POD_NETWORK_KIND: &str = "PodNetwork";
pub const POD_NETWORK_PLURAL: &str = "podnetworks";
pub const ATTACHMENT_KIND: &str = "PodNetworkAttachment";
pub const ATTACHMENT_PLURAL: &str = "podnetworkattachments";
pub const PARAMETERS_KIND: &str = "AttachmentParameters";
pub const PARAMETERS_PLURAL: &str = "attachmentparameters";

/// The `spec.provider` plexus serves. A PodNetwork without a provider is served too (the
/// KEP's `default` PodNetwork has none); one naming another provider is left alone.
pub const PROVIDER: &str = "plexus.dev/plexus";

/// The Cluster Default PodNetwork: the network the runtime's interface is attached to.
pub const DEFAULT_POD_NETWORK: &str = "default";

/// Held by the controller on a PodNetwork or PodNetworkAttachment while it is in use (KEP:
/// InUse).
pub const IN_USE_FINALIZER: &str = "plexus.dev/in-use";

/// The pod's list of PodNetworks (the KEP's `pod.spec.networks`, which no released API server
/// has): a JSON list of `{"name"|"attachmentName", "interfaceName", "isDefaultGW"}`.
pub const POD_NETWORKS_ANNOTATION: &str = "plexus.dev/pod-networks";
/// The KEP's per-pod status (`pod.status.networks`), published by the agent.
pub const POD_NETWORKS_STATUS_ANNOTATION: &str = "plexus.dev/pod-networks-status";

/// Condition types and reasons of the KEP, and plexus's own reasons where the KEP leaves them
/// to the implementation.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub const PARAMS_READY: &str = "ParamsReady";

    /// Ready=False: ParamsReady is absent or False (only with `parametersRefs`).
    pub const PARAMS_NOT_READY: &str = "ParamsNotReady";
    /// Ready=False: `spec.enabled` is false (PodNetwork).
    pub const ADMINISTRATIVELY_DISABLED: &str = "AdministrativelyDisabled";
    /// Ready=False: the referenced PodNetwork is not Ready (PodNetworkAttachment).
    pub const POD_NETWORK_NOT_READY: &str = "PodNetworkNotReady";
}

/// A reference to an object carrying implementation parameters (KEP `ParametersRef`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParametersRef {
    pub group: String,
    /// The KEP names resources here (`network-attachment-definitions`); a kind
    /// (`NetworkAttachmentDefinition`) is accepted too.
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `status` of both KEP objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ConditionsStatus {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

fn enabled_by_default() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNetworkSpec {
    /// Administratively enabled; `false` makes Ready False (AdministrativelyDisabled) and
    /// keeps new pods from attaching. Defaults to true.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters_refs: Vec<ParametersRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

impl Default for PodNetworkSpec {
    fn default() -> Self {
        PodNetworkSpec { enabled: true, parameters_refs: Vec::new(), provider: None }
    }
}

/// Serialized with its `apiVersion` and `kind` (see [`crate::kube::resource`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PodNetwork {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodNetworkSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionsStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNetworkAttachmentSpec {
    pub pod_network_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters_refs: Vec<ParametersRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PodNetworkAttachment {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodNetworkAttachmentSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionsStatus>,
}

/// plexus's parameters object. `spec` holds the keys of an NPWG selection element and is
/// validated as the annotation's keys are; read as any JSON so that a malformed object is an
/// error naming it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AttachmentParameters {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

impl PodNetwork {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Whether plexus serves this PodNetwork: its provider is plexus's, or it names none.
    pub fn served_by_plexus(&self) -> bool {
        self.spec.provider.as_deref().is_none_or(|p| p.is_empty() || p == PROVIDER)
    }

    /// Whether its Ready condition is True.
    pub fn is_ready(&self) -> bool {
        is_true(self.status.as_ref(), conditions::READY)
    }
}

impl PodNetworkAttachment {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn is_ready(&self) -> bool {
        is_true(self.status.as_ref(), conditions::READY)
    }
}

fn is_true(status: Option<&ConditionsStatus>, type_: &str) -> bool {
    status.and_then(|s| s.condition(type_)).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_keps_example_objects_decode() {
        let pn: PodNetwork = serde_json::from_value(json!({
            "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": "dataplane"},
            "spec": {"provider": "plexus.dev/plexus", "parametersRefs": [
                {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions",
                 "name": "parametersA", "namespace": "default"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": "2022-11-17T18:38:01Z"}]}
        }))
        .unwrap();
        assert!(pn.spec.enabled, "enabled defaults to true");
        assert!(pn.served_by_plexus() && pn.is_ready());
        assert_eq!(pn.spec.parameters_refs[0].namespace.as_deref(), Some("default"));

        let pna: PodNetworkAttachment = serde_json::from_value(json!({
            "metadata": {"name": "pod1", "namespace": "default"},
            "spec": {"podNetworkName": "dataplane"}
        }))
        .unwrap();
        assert_eq!(pna.spec.pod_network_name, "dataplane");
        assert!(!pna.is_ready(), "no conditions: not Ready (KEP: Created)");
    }

    #[test]
    fn a_pod_network_is_written_with_its_api_version_and_kind_and_reads_back() {
        let pn = PodNetwork {
            metadata: ObjectMeta { name: Some("default".into()), ..Default::default() },
            ..Default::default()
        };
        let written = serde_json::to_value(&pn).unwrap();
        assert_eq!(
            written,
            json!({"apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork",
                   "metadata": {"name": "default"}, "spec": {"enabled": true}}),
            "no status key without a status"
        );
        assert_eq!(serde_json::from_value::<PodNetwork>(written).unwrap(), pn);
    }

    #[test]
    fn another_providers_network_is_not_plexuss() {
        let mut pn = PodNetwork::default();
        assert!(pn.served_by_plexus(), "no provider (the default PodNetwork)");
        pn.spec.provider = Some("acme.io/foo".into());
        assert!(!pn.served_by_plexus());
    }
}
