//! The runtime's front-end: a sandbox that names its networks (the CRI network API
//! proposal's `PodSandboxConfig.networks`, passed as `runtimeConfig.podSandboxNetworks`, read by
//! [`crate::spec::sandbox_networks`]). The pod gets exactly the listed networks, in order:
//!
//! - the first takes the place of the cluster default network: on the runtime's interface
//!   (CNI_IFNAME, which it must name), `is_default`, with kubelet's runtimeConfig (spec 7.5);
//! - `_fallback` is the on-disk default network, whose delegate is built as the cluster default
//!   network's;
//! - any other name is selected as an NPWG selection of the pod's namespace is (the network
//!   API's network, else the NetworkAttachmentDefinition; the namespace rule and the policy
//!   apply), with the entry's parameters as the selection's per-attachment keys.

use crate::catalog::{confdir, PodInfo};
use crate::cni::CniError;
use crate::spec::delegate_conf::{secondary_delegate, with_kubelet_runtime_config};
use crate::spec::plan::plan_sandbox_attachments;
use crate::spec::sandbox_networks::{
    check_first_interface, SandboxNetwork, SandboxNetworkName, RUNTIME_CONFIG_KEY,
};
use crate::spec::selection::NetworkSelection;
use crate::state::AttachmentRecord;

use super::super::request::{CniEnv, PlexusConf};
use super::super::{blocking, Engine};
use super::{NotAttachable, Selected};

/// The namespace of the networks a sandbox names without one when CNI_ARGS name no pod (a
/// network's namespace is `default` when empty, as for a namespaced Kubernetes object).
const NAMESPACE_WITHOUT_POD: &str = "default";

impl Engine {
    /// Every attachment of the runtime's list `listed` (not empty), in its order.
    pub(in crate::engine) async fn sandbox_attachments(
        &self,
        pod: Option<&PodInfo>,
        env: &CniEnv,
        conf: &PlexusConf,
        listed: &[SandboxNetwork],
    ) -> Result<Vec<AttachmentRecord>, CniError> {
        if let Err(e) = check_first_interface(listed, &env.ifname) {
            return Err(self.refused(pod, CniError::from_error(&e)).await);
        }
        let pod_namespace = pod.map_or(NAMESPACE_WITHOUT_POD, |p| p.namespace.as_str());
        let selections: Vec<NetworkSelection> = listed.iter().map(|e| e.selection.clone()).collect();
        let planned =
            match plan_sandbox_attachments(pod_namespace, &selections, &self.config.allowed_namespaces) {
                Ok(p) => p,
                Err(e) => return Err(self.refused(pod, CniError::from_error(&e)).await),
            };
        let selects = listed.iter().any(|e| matches!(e.network, SandboxNetworkName::Selected { .. }));
        let on_disk = if selects {
            let dirs = self.config.network_conf_dirs.clone();
            blocking(move || confdir::on_disk_configs(&dirs)).await?
        } else {
            Vec::new()
        };
        let fix = format!("fix the runtime's runtimeConfig.{RUNTIME_CONFIG_KEY}");
        let mut out = Vec::with_capacity(planned.len());
        let mut devices = self.pod_devices(pod);
        for (index, (p, entry)) in planned.into_iter().zip(listed).enumerate() {
            // Each refusal says which entry of the runtime's list to change.
            let at_entry = |e: CniError| CniError {
                msg: format!("runtimeConfig.{RUNTIME_CONFIG_KEY}[{index}] ({}): {}", p.selection.name, e.msg),
                ..e
            };
            let (network, selected) = match entry.network {
                SandboxNetworkName::Fallback => {
                    let list = self.default_network().await.map_err(at_entry)?;
                    let network = list.name.clone();
                    match secondary_delegate(&network, list, &p.selection) {
                        Ok(delegate) => (network, Selected { delegate, device: None, device_info: None }),
                        Err(e) => return Err(self.refused(pod, at_entry(CniError::from_error(&e))).await),
                    }
                }
                SandboxNetworkName::Selected { .. } => {
                    match self.selected_delegate(&p, &on_disk, &fix, &mut devices).await {
                        Ok(s) => (p.status_name(), s),
                        Err(NotAttachable::Refused(e)) => return Err(self.refused(pod, at_entry(e)).await),
                        Err(NotAttachable::Failed(e)) => return Err(e),
                    }
                }
            };
            let is_default = index == 0;
            let delegate = if is_default {
                with_kubelet_runtime_config(selected.delegate, &conf.runtime_config)
            } else {
                selected.delegate
            };
            out.push(AttachmentRecord {
                network,
                is_default,
                ifname: p.ifname,
                delegate,
                result: None,
                default_route: p.selection.default_route.clone(),
                pod_network: None,
                device: selected.device,
                device_info: selected.device_info,
                ipam_claim: None,
                selection: None,
                live_pending: false,
            });
        }
        Ok(out)
    }
}
