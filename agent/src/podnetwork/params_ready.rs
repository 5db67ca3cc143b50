//! ParamsReady: whether the objects an object's `parametersRefs` name exist and parse, with
//! the node's own rules ([`super::params`]). One decision for the controller (which looks the
//! objects up in its view) and for standalone mode (which reads them from manifests).
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
//!
//! Pure: the caller looks the referenced objects up.

use std::borrow::Borrow;

use super::conditions::ParamsCheck;
use super::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use super::params::{
    attachment_parameters_ref, pod_network_config, selection_from_parameters, NadRef, ParamsError, ParamsRef,
};
use crate::spec::resolve::NetworkAttachmentDefinition;

fn invalid(e: &ParamsError) -> ParamsCheck {
    ParamsCheck::Invalid { reason: e.reason(), message: e.to_string() }
}

/// ParamsReady of a PodNetwork whose NetworkAttachmentDefinition `nad` finds.
pub fn pod_network<N: Borrow<NetworkAttachmentDefinition>>(
    pn: &PodNetwork,
    nad: impl FnOnce(&NadRef) -> Option<N>,
) -> ParamsCheck {
    let nad_ref = match pod_network_config(pn) {
        Ok(Some(nad_ref)) => nad_ref,
        Ok(None) => return ParamsCheck::NoParameters,
        Err(e) => return invalid(&e),
    };
    let Some(found) = nad(&nad_ref) else {
        return invalid(&nad_ref.not_found());
    };
    let config = found.borrow().config.as_deref();
    let reference = format!("NetworkAttachmentDefinition {}", nad_ref.reference());
    if let Err(e) = nad_ref.check_config(config) {
        return invalid(&e);
    }
    if config.is_none_or(|c| c.trim().is_empty()) {
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

/// ParamsReady of a PodNetworkAttachment (of `pod_network`, when it exists) whose
/// AttachmentParameters `params` finds.
pub fn attachment<P: Borrow<AttachmentParameters>>(
    pna: &PodNetworkAttachment,
    pod_network: Option<&PodNetwork>,
    params: impl FnOnce(&ParamsRef) -> Option<P>,
) -> ParamsCheck {
    let params_ref = match attachment_parameters_ref(pna) {
        Ok(Some(r)) => r,
        Ok(None) => return ParamsCheck::NoParameters,
        Err(e) => return invalid(&e),
    };
    let Some(found) = params(&params_ref) else {
        return invalid(&params_ref.not_found());
    };
    // The keys are checked as a selection of the attachment's network would be; which config
    // the network has does not matter to them.
    let network = pod_network.and_then(|pn| pod_network_config(pn).ok().flatten()).unwrap_or_else(|| {
        NadRef { namespace: pna.namespace().to_owned(), name: pna.spec.pod_network_name.clone() }
    });
    match selection_from_parameters(&network, Some(found.borrow()), None) {
        Ok(_) => ParamsCheck::Valid {
            message: format!("AttachmentParameters {} is valid", params_ref.reference()),
        },
        Err(e) => invalid(&e),
    }
}
