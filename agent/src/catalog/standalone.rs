//! The conditions of PodNetworks and PodNetworkAttachments in standalone mode. No controller
//! runs without a cluster, so the local-files catalog decides them when it reads the
//! manifests, with the controller's own rules ([`crate::podnetwork::conditions`], and
//! [`crate::podnetwork::params_ready`] for ParamsReady): a manifest
//! is Ready exactly when the controller would make it so. A `status` written in a manifest
//! is not read.
//!
//! Pure: the caller looks the referenced objects up.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::podnetwork::conditions::{self, ParamsCheck, PodNetworkState};
use crate::podnetwork::model::{ConditionsStatus, PodNetwork, PodNetworkAttachment};

/// The PodNetwork with the conditions the controller would give it.
pub fn pod_network_with_conditions(mut pn: PodNetwork, params: &ParamsCheck) -> PodNetwork {
    let desired = conditions::pod_network(pn.spec.enabled, params);
    pn.status = Some(ConditionsStatus {
        conditions: conditions::merge(&[], &desired, pn.metadata.generation, &now()),
    });
    pn
}

/// The PodNetworkAttachment with the conditions the controller would give it, its
/// PodNetwork (`None`: missing) already with its own.
pub fn attachment_with_conditions(
    mut pna: PodNetworkAttachment,
    pod_network: Option<&PodNetwork>,
    params: &ParamsCheck,
) -> PodNetworkAttachment {
    let state = match pod_network {
        None => PodNetworkState::Missing,
        Some(pn) if pn.is_ready() => PodNetworkState::Ready,
        Some(pn) => {
            let ready =
                pn.status.as_ref().and_then(|s| s.condition(crate::podnetwork::model::conditions::READY));
            PodNetworkState::NotReady {
                reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
                message: ready.map(|c| c.message.clone()).unwrap_or_default(),
            }
        }
    };
    let desired = conditions::attachment(&pna.spec.pod_network_name, &state, params);
    pna.status = Some(ConditionsStatus {
        conditions: conditions::merge(&[], &desired, pna.metadata.generation, &now()),
    });
    pna
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podnetwork::model::conditions::{
        ADMINISTRATIVELY_DISABLED, PARAMS_NOT_READY, POD_NETWORK_NOT_READY,
    };
    use crate::podnetwork::model::AttachmentParameters;
    use crate::podnetwork::params_ready;
    use crate::spec::resolve::NetworkAttachmentDefinition;
    use serde_json::json;

    fn pn(spec: serde_json::Value) -> PodNetwork {
        serde_json::from_value(json!({"metadata": {"name": "blue"}, "spec": spec})).unwrap()
    }

    fn pna(spec: serde_json::Value) -> PodNetworkAttachment {
        serde_json::from_value(json!({"metadata": {"name": "blue-fast", "namespace": "t"}, "spec": spec}))
            .unwrap()
    }

    fn nad_ref_spec() -> serde_json::Value {
        json!({"parametersRefs": [{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition",
                                   "name": "blue", "namespace": "nets"}]})
    }

    fn nad(config: Option<&str>) -> NetworkAttachmentDefinition {
        NetworkAttachmentDefinition {
            namespace: "nets".into(),
            name: "blue".into(),
            config: config.map(Into::into),
            resource_name: None,
        }
    }

    fn ready(pn: &PodNetwork) -> (String, String) {
        let c = pn.status.as_ref().unwrap().condition("Ready").unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn a_pod_network_is_ready_with_a_valid_nad_or_none() {
        let bare = pn(json!({}));
        let check = params_ready::pod_network(&bare, |_| -> Option<NetworkAttachmentDefinition> {
            panic!("no NAD is looked up")
        });
        assert_eq!(check, ParamsCheck::NoParameters);
        assert_eq!(ready(&pod_network_with_conditions(bare, &check)), ("True".into(), "Ready".into()));

        let with_nad = pn(nad_ref_spec());
        let valid = r#"{"cniVersion":"1.0.0","type":"bridge"}"#;
        let check = params_ready::pod_network(&with_nad, |r| {
            assert_eq!((r.namespace.as_str(), r.name.as_str()), ("nets", "blue"));
            Some(nad(Some(valid)))
        });
        assert!(matches!(check, ParamsCheck::Valid { .. }), "{check:?}");
        let ready_pn = pod_network_with_conditions(with_nad.clone(), &check);
        assert!(ready_pn.is_ready());
        assert_eq!(ready_pn.status.unwrap().condition("ParamsReady").unwrap().status, "True");
    }

    #[test]
    fn a_missing_or_invalid_nad_or_a_disabled_network_is_not_ready() {
        let with_nad = pn(nad_ref_spec());
        let missing = params_ready::pod_network(&with_nad, |_| None::<NetworkAttachmentDefinition>);
        assert!(matches!(missing, ParamsCheck::Invalid { reason: conditions::PARAMETERS_NOT_FOUND, .. }));
        assert_eq!(ready(&pod_network_with_conditions(with_nad.clone(), &missing)).1, PARAMS_NOT_READY);
        let invalid = params_ready::pod_network(&with_nad, |_| Some(nad(Some("{not json"))));
        assert!(matches!(invalid, ParamsCheck::Invalid { reason: conditions::INVALID_PARAMETERS, .. }));

        let mut disabled = pn(json!({"enabled": false}));
        disabled.spec.enabled = false;
        assert_eq!(
            ready(&pod_network_with_conditions(disabled, &ParamsCheck::NoParameters)),
            ("False".into(), ADMINISTRATIVELY_DISABLED.into())
        );
    }

    #[test]
    fn an_attachment_follows_its_network_and_its_parameters() {
        let good = pod_network_with_conditions(pn(json!({})), &ParamsCheck::NoParameters);
        let plain = pna(json!({"podNetworkName": "blue"}));
        let check = params_ready::attachment(&plain, None, |_| -> Option<AttachmentParameters> {
            panic!("no parameters are looked up")
        });
        assert!(attachment_with_conditions(plain.clone(), Some(&good), &check).is_ready());
        let orphan = attachment_with_conditions(plain.clone(), None, &check);
        assert!(!orphan.is_ready());
        let reason = orphan.status.unwrap().condition("Ready").unwrap().reason.clone();
        assert_eq!(reason, POD_NETWORK_NOT_READY);

        let with_params = pna(json!({"podNetworkName": "blue", "parametersRefs": [
            {"group": "plexus.dev", "kind": "AttachmentParameters", "name": "fast"}]}));
        let params: AttachmentParameters = serde_json::from_value(json!({
            "metadata": {"name": "fast", "namespace": "t"}, "spec": {"bandwidth": {"egressRate": 1000000}}
        }))
        .unwrap();
        let check = params_ready::attachment(&with_params, Some(&good), |r| {
            assert_eq!((r.namespace.as_str(), r.name.as_str()), ("t", "fast"));
            Some(params.clone())
        });
        assert!(matches!(check, ParamsCheck::Valid { .. }), "{check:?}");
        assert!(attachment_with_conditions(with_params.clone(), Some(&good), &check).is_ready());
        let missing = params_ready::attachment(&with_params, Some(&good), |_| None::<AttachmentParameters>);
        assert!(!attachment_with_conditions(with_params, Some(&good), &missing).is_ready());
    }
}
