//! The KEP-3698 front-end: the pod's list of PodNetworks (`plexus.dev/pod-networks`) as
//! attachments.
//!
//! 1. The list's static rules ([`parse_pod_networks`]): code 7, nothing attached.
//! 2. Active validation, entry by entry: the PodNetwork (or PodNetworkAttachment and its
//!    PodNetwork) must exist and be Ready, else code 11 ("try again") and a pod event
//!    `PodNetworkNotReady`, so the pod stays Pending until it is; a PodNetwork of another
//!    provider is refused (code 7). Then each PodNetwork once ([`check_each_network_once`]).
//! 3. Each entry other than `default` becomes an NPWG selection of the network's config (its
//!    NetworkAttachmentDefinition, or the on-disk config named after the PodNetwork) with the
//!    PodNetworkAttachment's parameters, and goes through the same plan as NAD selections:
//!    interface names, MAC checks, capabilities, policy.
//!
//! The cluster default network (`default`) is attached by the engine on the runtime's
//! interface, first, whether the list names it or not.

use std::collections::BTreeSet;

use crate::catalog::{confdir, CatalogError, PodInfo};
use crate::cni::{CniCode, CniError};
use crate::podnetwork::model::{
    conditions, AttachmentParameters, PodNetwork, PodNetworkAttachment, DEFAULT_POD_NETWORK,
    POD_NETWORKS_ANNOTATION, PROVIDER,
};
use crate::podnetwork::params::{
    attachment_parameters_ref, pod_network_config, selection_from_parameters, NadRef,
};
use crate::podnetwork::request::{
    check_attachment_network, check_each_network_once, parse_pod_networks, PodNetworkRequest,
};
use crate::spec::delegate_conf::secondary_delegate;
use crate::spec::plan::plan_attachments;
use crate::spec::resolve::{resolve_network_config, NetworkAttachmentDefinition, ResolveError};
use crate::state::AttachmentRecord;

use super::super::{blocking, Engine};
use super::{NotAttachable, Secondaries, Selected};

/// Reason of the pod event when a network it asks for is missing or not Ready.
pub const NOT_READY_REASON: &str = "PodNetworkNotReady";
/// Reason of the pod event when its list is refused.
const REFUSED_REASON: &str = "NetworkRefused";

/// One entry of the list, its objects found and usable.
struct Resolved {
    request: PodNetworkRequest,
    pod_network: PodNetwork,
    parameters: Option<AttachmentParameters>,
}

/// Why an entry cannot be attached now.
enum Refusal {
    /// Missing or not Ready: the runtime retries (code 11).
    NotReady(String),
    /// The pod (or an object) must change (code 7, or the error's own code).
    Refused(CniError),
}

impl From<CatalogError> for Refusal {
    fn from(e: CatalogError) -> Self {
        Refusal::Refused(CniError::from_error(&e))
    }
}

impl Engine {
    /// The attachments of the pod's PodNetwork list `text`, beyond the cluster default network.
    pub(in crate::engine) async fn pod_network_attachments(
        &self,
        pod: &PodInfo,
        default_ifname: &str,
        text: &str,
    ) -> Result<Secondaries, CniError> {
        let requests = match parse_pod_networks(text, default_ifname) {
            Ok(r) => r,
            Err(e) => return Err(self.refuse(pod, CniError::from_error(&e)).await),
        };
        let mut resolved = Vec::with_capacity(requests.len());
        for (entry, request) in requests.into_iter().enumerate() {
            match self.resolve_entry(pod, entry, request).await {
                Ok(r) => resolved.push(r),
                Err(Refusal::NotReady(msg)) => {
                    self.catalog.record_event(pod, NOT_READY_REASON, &msg).await;
                    return Err(
                        CniError::try_again(msg).with_details(format!("pod {}/{}", pod.namespace, pod.name))
                    );
                }
                Err(Refusal::Refused(e)) => return Err(self.refuse(pod, e).await),
            }
        }
        let reached: Vec<(usize, &str)> =
            resolved.iter().enumerate().map(|(i, r)| (i, r.pod_network.name())).collect();
        if let Err(e) = check_each_network_once(&reached) {
            return Err(self.refuse(pod, CniError::from_error(&e)).await);
        }
        match self.plan_pod_networks(pod, default_ifname, resolved).await {
            Ok(s) => Ok(s),
            Err(Refusal::NotReady(msg)) => {
                self.catalog.record_event(pod, NOT_READY_REASON, &msg).await;
                Err(CniError::try_again(msg).with_details(format!("pod {}/{}", pod.namespace, pod.name)))
            }
            Err(Refusal::Refused(e)) => Err(self.refuse(pod, e).await),
        }
    }

    /// A refusal, also told on the pod, where its owner looks.
    async fn refuse(&self, pod: &PodInfo, err: CniError) -> CniError {
        self.catalog.record_event(pod, REFUSED_REASON, &err.msg).await;
        err.with_details(format!("pod {}/{}", pod.namespace, pod.name))
    }

    /// Finds the objects of one entry and checks that they can be used now.
    async fn resolve_entry(
        &self,
        pod: &PodInfo,
        entry: usize,
        request: PodNetworkRequest,
    ) -> Result<Resolved, Refusal> {
        let Some(attachment_name) = request.attachment_name.clone() else {
            let name = request.name.clone().unwrap_or_default();
            let pod_network = self.usable_pod_network(&name, &format!("entry {entry}")).await?;
            return Ok(Resolved { request, pod_network, parameters: None });
        };
        let pna = self
            .catalog
            .pod_network_attachment(&pod.namespace, &attachment_name)
            .await?
            .ok_or_else(|| {
                Refusal::NotReady(format!(
                    "entry {entry}: PodNetworkAttachment {}/{attachment_name} does not exist; the pod waits until it \
                     is created and Ready (or fix the pod's {POD_NETWORKS_ANNOTATION} annotation)",
                    pod.namespace
                ))
            })?;
        let network_name = pna.spec.pod_network_name.clone();
        check_attachment_network(entry, &attachment_name, &network_name)
            .map_err(|e| Refusal::Refused(CniError::from_error(&e)))?;
        let what = format!("entry {entry} (PodNetworkAttachment {}/{attachment_name})", pod.namespace);
        let pod_network = self.usable_pod_network(&network_name, &what).await?;
        if !pna.is_ready() {
            return Err(Refusal::NotReady(format!(
                "{what} is not Ready{}; the pod waits until it is",
                ready_condition(pna.status.as_ref())
            )));
        }
        let parameters = self.attachment_parameters(&pna, &what).await?;
        Ok(Resolved { request, pod_network, parameters })
    }

    /// The PodNetwork `name`, if plexus serves it and it is Ready.
    async fn usable_pod_network(&self, name: &str, what: &str) -> Result<PodNetwork, Refusal> {
        let pn = self.catalog.pod_network(name).await?.ok_or_else(|| {
            Refusal::NotReady(format!(
                "{what}: PodNetwork {name:?} does not exist; the pod waits until it is created and Ready (or fix \
                 the pod's {POD_NETWORKS_ANNOTATION} annotation)"
            ))
        })?;
        if !pn.served_by_plexus() {
            return Err(Refusal::Refused(CniError::invalid_config(format!(
                "{what}: PodNetwork {name:?} is served by provider {:?}, not by plexus ({PROVIDER:?}); attach it \
                 through its own provider, or use a PodNetwork whose spec.provider is {PROVIDER:?} or empty",
                pn.spec.provider.as_deref().unwrap_or_default()
            ))));
        }
        if !pn.is_ready() {
            return Err(Refusal::NotReady(format!(
                "{what}: PodNetwork {name:?} is not Ready{}; the pod waits until it is",
                ready_condition(pn.status.as_ref())
            )));
        }
        Ok(pn)
    }

    /// The AttachmentParameters a PodNetworkAttachment references, if any.
    async fn attachment_parameters(
        &self,
        pna: &PodNetworkAttachment,
        what: &str,
    ) -> Result<Option<AttachmentParameters>, Refusal> {
        let reference = attachment_parameters_ref(pna)
            .map_err(|e| Refusal::Refused(CniError::new(e.cni_code(), format!("{what}: {e}"))))?;
        let Some(r) = reference else { return Ok(None) };
        let found = self.catalog.attachment_parameters(&r.namespace, &r.name).await?;
        found.map(Some).ok_or_else(|| {
            Refusal::NotReady(format!(
                "{what}: its AttachmentParameters {}/{} do not exist; the pod waits until they are created",
                r.namespace, r.name
            ))
        })
    }

    /// The attachments of the resolved entries, through the NPWG plan.
    async fn plan_pod_networks(
        &self,
        pod: &PodInfo,
        default_ifname: &str,
        resolved: Vec<Resolved>,
    ) -> Result<Secondaries, Refusal> {
        let mut secondaries = Secondaries {
            default_pod_network: Some(DEFAULT_POD_NETWORK.to_owned()),
            ..Secondaries::default()
        };
        // The cluster default network is the engine's; the others become selections.
        let entries: Vec<Resolved> =
            resolved.into_iter().filter(|r| !r.request.is_default_network()).collect();
        let mut selections = Vec::with_capacity(entries.len());
        let mut configs = Vec::with_capacity(entries.len());
        for r in &entries {
            let pn_name = r.pod_network.name();
            let nad_ref = pod_network_config(&r.pod_network)
                .map_err(|e| refused(e.cni_code(), format!("PodNetwork {pn_name:?}: {e}")))?;
            // Without a NAD, the config is the on-disk one named after the PodNetwork.
            let selection_ref = nad_ref
                .clone()
                .unwrap_or_else(|| NadRef { namespace: pod.namespace.clone(), name: pn_name.to_owned() });
            let selection = selection_from_parameters(
                &selection_ref,
                r.parameters.as_ref(),
                r.request.interface_name.as_deref(),
            )
            .map_err(|e| refused(e.cni_code(), format!("PodNetwork {pn_name:?}: {e}")))?;
            selections.push(selection);
            configs.push(nad_ref);
        }
        // A PodNetwork's NAD is the operator's choice, in whatever namespace: the pod's
        // namespace rule (spec 7.4) is for NADs a pod names itself.
        let namespaces: Vec<String> = selections
            .iter()
            .map(|s| s.namespace_or(&pod.namespace).to_owned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let planned = plan_attachments(&pod.namespace, default_ifname, &selections, &namespaces)
            .map_err(|e| refused(e.cni_code(), e.to_string()))?;
        let dirs = self.config.network_conf_dirs.clone();
        let on_disk = blocking(move || confdir::on_disk_configs(&dirs)).await.map_err(Refusal::Refused)?;
        let mut devices = self.pod_devices(Some(pod));
        for ((p, r), nad_ref) in planned.into_iter().zip(&entries).zip(configs) {
            let pn_name = r.pod_network.name().to_owned();
            let (network, list, resource_name) = match nad_ref {
                Some(nad_ref) => {
                    let nad = self.catalog.nad(&nad_ref.namespace, &nad_ref.name).await?.ok_or_else(|| {
                        Refusal::NotReady(format!(
                            "PodNetwork {pn_name:?}: its NetworkAttachmentDefinition {}/{} does not exist; the pod \
                             waits until it is created",
                            nad_ref.namespace, nad_ref.name
                        ))
                    })?;
                    let (list, _) = resolve_network_config(&nad, &on_disk)
                        .map_err(|e| refused(e.cni_code(), format!("PodNetwork {pn_name:?}: {e}")))?;
                    (nad.reference(), list, nad.resource_name)
                }
                None => {
                    (pn_name.clone(), on_disk_config(&pn_name, &on_disk).map_err(Refusal::Refused)?, None)
                }
            };
            let delegate = secondary_delegate(&network, list, &p.selection)
                .map_err(|e| refused(e.cni_code(), format!("PodNetwork {pn_name:?}: {e}")))?;
            self.policy
                .check(&pod.namespace, &network, &delegate.list.to_value())
                .map_err(|e| refused(e.cni_code(), e.to_string()))?;
            let selected = match resource_name {
                Some(resource) => self
                    .with_allocated_device(&network, &resource, delegate, &mut devices)
                    .await
                    .map_err(|(NotAttachable::Refused(e) | NotAttachable::Failed(e))| {
                        Refusal::Refused(CniError { msg: format!("PodNetwork {pn_name:?}: {}", e.msg), ..e })
                    })?,
                None => Selected { delegate, device: None, device_info: None },
            };
            if r.request.is_default_gw {
                secondaries.default_gw = Some(secondaries.attachments.len());
            }
            secondaries.attachments.push(AttachmentRecord {
                network,
                is_default: false,
                ifname: p.ifname,
                delegate: selected.delegate,
                result: None,
                default_route: None,
                pod_network: Some(pn_name),
                device: selected.device,
                device_info: selected.device_info,
                ipam_claim: None,
                selection: None,
                live_pending: false,
            });
        }
        Ok(secondaries)
    }
}

/// The config of a PodNetwork without a NetworkAttachmentDefinition: the on-disk one named
/// after it (spec 3.4.1 rules 2 and 3, with the PodNetwork's name).
fn on_disk_config(
    pod_network: &str,
    on_disk: &[crate::spec::resolve::OnDiskConfig],
) -> Result<crate::cni::config::NetworkConfigList, CniError> {
    let named = NetworkAttachmentDefinition {
        namespace: String::new(),
        name: pod_network.to_owned(),
        config: None,
        resource_name: None,
    };
    resolve_network_config(&named, on_disk).map(|(list, _)| list).map_err(|e| match e {
        ResolveError::NotFound { .. } => CniError::new(
            e.cni_code(),
            format!(
                "PodNetwork {pod_network:?} references no NetworkAttachmentDefinition and no CNI config file named \
                 {pod_network:?} exists in the CNI config directories of this node; add a .conflist/.conf with that \
                 \"name\", or a NetworkAttachmentDefinition to the PodNetwork's spec.parametersRefs"
            ),
        ),
        other => CniError::new(other.cni_code(), format!("PodNetwork {pod_network:?}: {other}")),
    })
}

/// ": <reason>: <message>" of a Ready condition, or that there is none yet.
fn ready_condition(status: Option<&crate::podnetwork::model::ConditionsStatus>) -> String {
    match status.and_then(|s| s.condition(conditions::READY)) {
        None => " (no Ready condition yet: is the PodNetwork controller running?)".to_owned(),
        Some(c) if c.message.is_empty() => format!(" ({})", c.reason),
        Some(c) => format!(" ({}: {})", c.reason, c.message),
    }
}

/// A refusal with the code of its cause.
fn refused(code: crate::cni::ErrorCode, msg: String) -> Refusal {
    Refusal::Refused(CniError::new(code, msg))
}
