//! The front-ends: where a pod's networks are asked for. Each turns the request into the
//! same [`AttachmentRecord`]s, which the one engine attaches, undoes, records and tears down
//! alike.
//!
//! - [`npwg`]: the NPWG selection annotation `k8s.v1.cni.cncf.io/networks` and its NADs;
//! - [`kep`]: the KEP-3698 PodNetwork list `plexus.dev/pod-networks` and its PodNetworks,
//!   PodNetworkAttachments and AttachmentParameters;
//! - [`sandbox`]: the runtime's list of the sandbox's networks, `runtimeConfig.podSandboxNetworks`
//!   (the CRI network API proposal), whose first network takes the place of the cluster
//!   default network.
//!
//! A pod uses one of them: both annotations together are refused (code 7, "pick one"), and so
//! is a runtime's list together with either annotation.

mod kep;
mod npwg;
mod sandbox;

use crate::catalog::{confdir, PodInfo};
use crate::cni::config::NetworkConfigList;
use crate::cni::{CniCode, CniError, ErrorCode};
use crate::devices::inject::inject_device_id;
use crate::devices::pod_devices::PodDevices;
use crate::devinfo::dp::read_dp_device_info;
use crate::podnetwork::model::POD_NETWORKS_ANNOTATION;
use crate::podnetwork::request::check_one_front_end;
use crate::spec::delegate_conf::{default_delegate, secondary_delegate, DelegateConfig};
use crate::spec::plan::PlannedAttachment;
use crate::spec::resolve::{resolve_network_config, OnDiskConfig};
use crate::spec::sandbox_networks::{parse_sandbox_networks, SandboxNetworksError};
use crate::spec::NETWORKS_ANNOTATION;
use crate::state::{AllocatedDevice, AttachmentRecord, FrontEnd};
use serde_json::Value;

use super::request::{CniEnv, PlexusConf};
use super::{blocking, Engine};

/// What a front-end planned for the pod, beyond the cluster default network.
#[derive(Debug, Default)]
pub struct Secondaries {
    /// In attachment order.
    pub attachments: Vec<AttachmentRecord>,
    /// The attachment (index in `attachments`) whose result's gateways become the pod's
    /// default routes once it is added (a PodNetwork entry's `isDefaultGW`).
    pub default_gw: Option<usize>,
    /// The PodNetwork the cluster default network is, when the pod asked for PodNetworks.
    pub default_pod_network: Option<String>,
}

/// Every attachment of a pod, planned, in attachment order.
#[derive(Debug)]
pub struct Planned {
    pub front_end: FrontEnd,
    /// The one on the runtime's interface first (`is_default`): the cluster default network,
    /// or the first network of the runtime's list.
    pub attachments: Vec<AttachmentRecord>,
    /// The attachment (index in `attachments`) whose result's gateways become the pod's
    /// default routes once it is added (a PodNetwork entry's `isDefaultGW`).
    pub default_gw: Option<usize>,
}

/// The front-end of a pod: the runtime's list when it passed a non-empty one, else the
/// annotation the pod wrote. Refused when the pod asks twice (both annotations, or a list and
/// an annotation). `pod` is `None` when CNI_ARGS name no pod.
pub fn choose(pod: Option<&PodInfo>, runtime_list: bool) -> Result<FrontEnd, CniError> {
    let annotation = |key: &str| pod.and_then(|p| p.annotations.get(key)).map(String::as_str);
    let npwg = annotation(NETWORKS_ANNOTATION);
    let kep = annotation(POD_NETWORKS_ANNOTATION);
    let given = |v: Option<&str>| v.is_some_and(|t| !t.trim().is_empty());
    if runtime_list {
        let written = [(NETWORKS_ANNOTATION, npwg), (POD_NETWORKS_ANNOTATION, kep)]
            .into_iter()
            .find_map(|(key, value)| given(value).then_some(key));
        return match written {
            Some(annotation) => {
                Err(CniError::from_error(&SandboxNetworksError::WithAnnotation { annotation }))
            }
            None => Ok(FrontEnd::Sandbox),
        };
    }
    check_one_front_end(npwg, kep).map_err(|e| CniError::from_error(&e))?;
    Ok(if given(kep) { FrontEnd::PodNetworks } else { FrontEnd::Npwg })
}

/// A selected network ready to attach: its delegate and, for a NAD with a resourceName, the
/// device allocated to the attachment and that device's information.
pub(super) struct Selected {
    pub delegate: DelegateConfig,
    pub device: Option<AllocatedDevice>,
    pub device_info: Option<Value>,
}

/// Why a selected network cannot be attached.
pub(super) enum NotAttachable {
    /// The pod's (or the runtime's) request must change: told on the pod too.
    Refused(CniError),
    /// The agent could not look it up (the catalog failed).
    Failed(CniError),
}

impl Engine {
    /// Every attachment of the pod, from the front-end it chose. A refusal is told on the pod.
    pub(super) async fn plan_networks(
        &self,
        pod: Option<&PodInfo>,
        env: &CniEnv,
        conf: &PlexusConf,
    ) -> Result<Planned, CniError> {
        let chosen = parse_sandbox_networks(conf.pod_sandbox_networks.as_ref())
            .map_err(|e| CniError::from_error(&e))
            .and_then(|listed| Ok((choose(pod, !listed.is_empty())?, listed)));
        let (front_end, listed) = match chosen {
            Ok(c) => c,
            Err(e) => return Err(self.refused(pod, e).await),
        };
        if front_end == FrontEnd::Sandbox {
            let attachments = self.sandbox_attachments(pod, env, conf, &listed).await?;
            return Ok(Planned { front_end, attachments, default_gw: None });
        }
        let default_list = self.default_network().await?;
        let mut default = AttachmentRecord {
            network: default_list.name.clone(),
            is_default: true,
            ifname: env.ifname.clone(),
            delegate: default_delegate(default_list, &conf.runtime_config),
            result: None,
            default_route: None,
            pod_network: None,
            device: None,
            device_info: None,
            ipam_claim: None,
            selection: None,
            live_pending: false,
        };
        let secondaries = match pod {
            None => Secondaries::default(),
            Some(pod) if front_end == FrontEnd::PodNetworks => {
                let text =
                    pod.annotations.get(POD_NETWORKS_ANNOTATION).map(String::as_str).unwrap_or_default();
                self.pod_network_attachments(pod, &env.ifname, text).await?
            }
            Some(pod) => Secondaries {
                attachments: self.npwg_attachments(pod, &env.ifname).await?,
                ..Secondaries::default()
            },
        };
        default.pod_network = secondaries.default_pod_network;
        let mut attachments = vec![default];
        attachments.extend(secondaries.attachments);
        // Index in the record: the default network comes first.
        Ok(Planned { front_end, attachments, default_gw: secondaries.default_gw.map(|i| i + 1) })
    }

    /// The cluster default network: the on-disk default config (spec 6).
    async fn default_network(&self) -> Result<NetworkConfigList, CniError> {
        let dir = self.config.default_network_dir.clone();
        let (_, list) =
            blocking(move || confdir::default_network(&dir)).await?.map_err(|e| CniError::from_error(&e))?;
        Ok(list)
    }

    /// A refusal of the pod's request, also told on the pod (when CNI_ARGS name one), where its
    /// owner looks.
    pub(super) async fn refused(&self, pod: Option<&PodInfo>, err: CniError) -> CniError {
        let Some(pod) = pod else { return err };
        self.catalog.record_event(pod, "NetworkRefused", &err.msg).await;
        err.with_details(format!("pod {}/{}", pod.namespace, pod.name))
    }

    /// The devices of `pod` for one ADD: asked of the engine's sources when an attachment
    /// needs one.
    pub(super) fn pod_devices<'a>(&'a self, pod: Option<&'a PodInfo>) -> PodDevices<'a> {
        PodDevices::new(pod, &self.device_sources)
    }

    /// The delegate of a planned attachment of a selected network: its config from the
    /// catalog, resolved (spec 3.4.1), with the selection's per-attachment keys, allowed by the
    /// policy, and, when the NAD names a resource, the next device of it allocated to the pod
    /// (`devices`) as its `deviceID`. `fix` ends the message when the network does not exist:
    /// what to change instead of creating it.
    pub(super) async fn selected_delegate(
        &self,
        planned: &PlannedAttachment,
        on_disk: &[OnDiskConfig],
        fix: &str,
        devices: &mut PodDevices<'_>,
    ) -> Result<Selected, NotAttachable> {
        let network = planned.status_name();
        let nad = match self.catalog.nad(&planned.namespace, &planned.name).await {
            Ok(Some(nad)) => nad,
            Ok(None) => {
                return Err(NotAttachable::Refused(CniError::invalid_config(format!(
                    "network {network} does not exist: no NetworkAttachmentDefinition {network}; create it or {fix}"
                ))))
            }
            Err(e) => return Err(NotAttachable::Failed(CniError::from_error(&e))),
        };
        let (list, _origin) = resolve_network_config(&nad, on_disk)
            .map_err(|e| NotAttachable::Refused(CniError::from_error(&e)))?;
        let delegate = secondary_delegate(&network, list, &planned.selection)
            .map_err(|e| NotAttachable::Refused(CniError::from_error(&e)))?;
        self.policy
            .check(&planned.namespace, &network, &delegate.list.to_value())
            .map_err(|e| NotAttachable::Refused(CniError::from_error(&e)))?;
        match nad.resource_name.as_deref() {
            Some(resource) => self.with_allocated_device(&network, resource, delegate, devices).await,
            None => Ok(Selected { delegate, device: None, device_info: None }),
        }
    }

    /// `delegate` of an attachment of `network`, whose NAD names `resource`, with the next device
    /// of it allocated to the pod (`devices`) as its `deviceID`, and that device's information
    /// from its device plugin's file.
    async fn with_allocated_device(
        &self,
        network: &str,
        resource: &str,
        mut delegate: DelegateConfig,
        devices: &mut PodDevices<'_>,
    ) -> Result<Selected, NotAttachable> {
        let device = devices.take(network, resource).await.map_err(|e| match e.cni_code() {
            ErrorCode::TryAgainLater => NotAttachable::Failed(CniError::from_error(&e)),
            _ => NotAttachable::Refused(CniError::from_error(&e)),
        })?;
        tracing::info!(%network, resource, device = %device.device_id, "the pod's allocated device");
        inject_device_id(&mut delegate, &device.device_id);
        let (dir, allocated) = (self.config.device_info_dir.clone(), device.clone());
        let device_info =
            blocking(move || read_dp_device_info(&dir, &allocated.resource_name, &allocated.device_id))
                .await
                .map_err(NotAttachable::Failed)?
                .map_err(|e| NotAttachable::Failed(CniError::from_error(&e).with_details(network)))?;
        Ok(Selected { delegate, device: Some(device), device_info })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::ErrorCode;

    fn pod(annotations: &[(&str, &str)]) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: "p".into(),
            uid: None,
            annotations: annotations.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        }
    }

    fn annotated(annotations: &[(&str, &str)]) -> Result<FrontEnd, CniError> {
        choose(Some(&pod(annotations)), false)
    }

    #[test]
    fn the_annotation_written_chooses_and_both_are_refused() {
        assert_eq!(annotated(&[]).unwrap(), FrontEnd::Npwg);
        assert_eq!(choose(None, false).unwrap(), FrontEnd::Npwg, "no pod: the default network alone");
        assert_eq!(annotated(&[(NETWORKS_ANNOTATION, "blue")]).unwrap(), FrontEnd::Npwg);
        assert_eq!(
            annotated(&[(POD_NETWORKS_ANNOTATION, r#"[{"name":"blue"}]"#)]).unwrap(),
            FrontEnd::PodNetworks
        );
        assert_eq!(
            annotated(&[(POD_NETWORKS_ANNOTATION, " "), (NETWORKS_ANNOTATION, "blue")]).unwrap(),
            FrontEnd::Npwg,
            "a blank list asks for nothing"
        );
        let both =
            annotated(&[(NETWORKS_ANNOTATION, "blue"), (POD_NETWORKS_ANNOTATION, r#"[{"name":"blue"}]"#)])
                .unwrap_err();
        assert_eq!(both.code, ErrorCode::InvalidNetworkConfig);
        assert!(both.msg.contains("pick one"), "{}", both.msg);
    }

    #[test]
    fn the_runtimes_list_chooses_and_is_refused_beside_either_annotation() {
        assert_eq!(choose(None, true).unwrap(), FrontEnd::Sandbox);
        assert_eq!(choose(Some(&pod(&[])), true).unwrap(), FrontEnd::Sandbox);
        assert_eq!(
            choose(Some(&pod(&[(NETWORKS_ANNOTATION, " "), (POD_NETWORKS_ANNOTATION, "")])), true).unwrap(),
            FrontEnd::Sandbox,
            "blank annotations ask for nothing"
        );
        for annotation in [NETWORKS_ANNOTATION, POD_NETWORKS_ANNOTATION] {
            let err = choose(Some(&pod(&[(annotation, "blue")])), true).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidNetworkConfig);
            assert!(err.msg.contains(&format!("the pod has the {annotation} annotation")), "{}", err.msg);
            assert!(err.msg.contains("pick one"), "{}", err.msg);
        }
    }
}
