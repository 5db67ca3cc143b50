//! ParamsReady: whether the objects an object's `parametersRefs` name exist and parse, checked
//! against the controller's view with the node's own rules ([`crate::podnetwork::params`]).
//!
//! - A PodNetwork's NetworkAttachmentDefinition must exist and its `spec.config` must be valid
//!   CNI (parsed as a NAD selection's is, NPWG 3.4.1 rule 1). A NAD without `spec.config`
//!   names a config file on each node (rules 2 and 3), which the controller cannot see: as for
//!   Multus, such a NAD is valid (ParamsReady True, the message says the nodes' files are not
//!   checked here); a node without the file fails the pod's ADD naming it.
//! - A PodNetworkAttachment's AttachmentParameters must exist and its `spec` must hold valid
//!   NPWG selection keys (the annotation's parser).
//! - References plexus does not take (another kind, several, `default` with parameters):
//!   `UnsupportedParameters`; malformed ones (no namespace, another namespace's parameters):
//!   `InvalidParameters`.

use super::view::View;
use crate::podnetwork::conditions::ParamsCheck;
use crate::podnetwork::model::{PodNetwork, PodNetworkAttachment};
use crate::podnetwork::params::{
    attachment_parameters_ref, pod_network_config, selection_from_parameters, NadRef, ParamsError,
};

fn invalid(e: &ParamsError) -> ParamsCheck {
    ParamsCheck::Invalid { reason: e.reason(), message: e.to_string() }
}

/// ParamsReady of a PodNetwork.
pub fn pod_network(pn: &PodNetwork, view: &View) -> ParamsCheck {
    let nad_ref = match pod_network_config(pn) {
        Ok(Some(nad_ref)) => nad_ref,
        Ok(None) => return ParamsCheck::NoParameters,
        Err(e) => return invalid(&e),
    };
    let Some(nad) = view.nads.get(&nad_ref.namespace, &nad_ref.name) else {
        return invalid(&nad_ref.not_found());
    };
    let reference = format!("NetworkAttachmentDefinition {}", nad_ref.reference());
    if let Err(e) = nad_ref.check_config(nad.config.as_deref()) {
        return invalid(&e);
    }
    if nad.config.as_deref().is_none_or(|c| c.trim().is_empty()) {
        return ParamsCheck::Valid {
            message: format!(
                "{reference} has no spec.config: each node reads {name}.conflist or {name}.conf from its CNI config \
                 directory, which the controller does not check",
                name = nad_ref.name
            ),
        };
    }
    ParamsCheck::Valid { message: format!("{reference}: spec.config is a valid CNI config") }
}

/// ParamsReady of a PodNetworkAttachment.
pub fn attachment(pna: &PodNetworkAttachment, view: &View) -> ParamsCheck {
    let params_ref = match attachment_parameters_ref(pna) {
        Ok(Some(r)) => r,
        Ok(None) => return ParamsCheck::NoParameters,
        Err(e) => return invalid(&e),
    };
    let Some(params) = view.parameters.get(&params_ref.namespace, &params_ref.name) else {
        return invalid(&params_ref.not_found());
    };
    // The keys are checked as a selection of the attachment's network would be; which config
    // the network has does not matter to them.
    let network = view
        .pod_networks
        .get("", &pna.spec.pod_network_name)
        .and_then(|pn| pod_network_config(pn).ok().flatten())
        .unwrap_or_else(|| NadRef {
            namespace: pna.namespace().to_owned(),
            name: pna.spec.pod_network_name.clone(),
        });
    match selection_from_parameters(&network, Some(params), None) {
        Ok(_) => ParamsCheck::Valid {
            message: format!("AttachmentParameters {} is valid", params_ref.reference()),
        },
        Err(e) => invalid(&e),
    }
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
