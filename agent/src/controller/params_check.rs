//! ParamsReady in the controller: [`crate::podnetwork::params_ready`] over the controller's
//! view of the cluster.

use super::view::View;
use crate::podnetwork::conditions::ParamsCheck;
use crate::podnetwork::model::{PodNetwork, PodNetworkAttachment};
use crate::podnetwork::params_ready;

/// ParamsReady of a PodNetwork.
pub fn pod_network(pn: &PodNetwork, view: &View) -> ParamsCheck {
    params_ready::pod_network(pn, |r| view.nads.get(&r.namespace, &r.name))
}

/// ParamsReady of a PodNetworkAttachment.
pub fn attachment(pna: &PodNetworkAttachment, view: &View) -> ParamsCheck {
    let pod_network = view.pod_networks.get("", &pna.spec.pod_network_name);
    params_ready::attachment(pna, pod_network, |r| view.parameters.get(&r.namespace, &r.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podnetwork::conditions::{INVALID_PARAMETERS, PARAMETERS_NOT_FOUND, UNSUPPORTED_PARAMETERS};
    use crate::podnetwork::model::AttachmentParameters;
    use crate::spec::resolve::NetworkAttachmentDefinition;
    use serde_json::json;

    fn pn(refs: serde_json::Value) -> PodNetwork {
        serde_json::from_value(json!({"metadata": {"name": "blue"}, "spec": {"parametersRefs": refs}}))
            .unwrap()
    }

    fn pna(refs: serde_json::Value) -> PodNetworkAttachment {
        serde_json::from_value(json!({"metadata": {"name": "blue-1", "namespace": "ns"},
            "spec": {"podNetworkName": "blue", "parametersRefs": refs}}))
        .unwrap()
    }

    fn reason(c: &ParamsCheck) -> Option<&'static str> {
        match c {
            ParamsCheck::Invalid { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn nad(view: &mut View, config: Option<&str>) {
        view.nads.insert(
            "ns",
            "blue-nad",
            NetworkAttachmentDefinition {
                namespace: "ns".into(),
                name: "blue-nad".into(),
                config: config.map(Into::into),
                resource_name: None,
            },
        );
    }

    #[test]
    fn a_pod_networks_nad_must_exist_and_hold_valid_cni() {
        let nad_ref = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "blue-nad", "namespace": "ns"}]);
        let mut view = View::default();
        assert_eq!(pod_network(&pn(json!([])), &view), ParamsCheck::NoParameters);
        assert_eq!(reason(&pod_network(&pn(nad_ref.clone()), &view)), Some(PARAMETERS_NOT_FOUND));
        nad(&mut view, Some("{not json"));
        assert_eq!(reason(&pod_network(&pn(nad_ref.clone()), &view)), Some(INVALID_PARAMETERS));
        nad(&mut view, Some(r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#));
        assert!(matches!(pod_network(&pn(nad_ref.clone()), &view), ParamsCheck::Valid { .. }));
        nad(&mut view, None);
        let ParamsCheck::Valid { message } = pod_network(&pn(nad_ref), &view) else {
            panic!("config-less NAD")
        };
        assert!(message.contains("blue-nad.conflist"), "{message}");
        let other = json!([{"group": "example.com", "kind": "Thing", "name": "x", "namespace": "ns"}]);
        assert_eq!(reason(&pod_network(&pn(other), &view)), Some(UNSUPPORTED_PARAMETERS));
    }

    #[test]
    fn an_attachments_parameters_must_exist_and_hold_valid_keys() {
        let params_ref = json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "bw"}]);
        let mut view = View::default();
        assert_eq!(reason(&attachment(&pna(params_ref.clone()), &view)), Some(PARAMETERS_NOT_FOUND));
        let params = |spec| -> AttachmentParameters {
            serde_json::from_value(json!({"metadata": {"name": "bw", "namespace": "ns"}, "spec": spec}))
                .unwrap()
        };
        view.parameters.insert("ns", "bw", params(json!({"bandwidth": "fast"})));
        assert_eq!(reason(&attachment(&pna(params_ref.clone()), &view)), Some(INVALID_PARAMETERS));
        view.parameters.insert(
            "ns",
            "bw",
            params(json!({"bandwidth": {"ingressRate": 1000, "ingressBurst": 100}})),
        );
        assert!(matches!(attachment(&pna(params_ref), &view), ParamsCheck::Valid { .. }));
        let foreign = json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "bw", "namespace": "other"}]);
        assert_eq!(reason(&attachment(&pna(foreign), &view)), Some(INVALID_PARAMETERS));
    }
}
