//! IPAMClaims (NPWG spec 4.1.2.1.11 and 8) in the engine: a selection's claim resolved and
//! handed to the attachment's IPAM at plan time; taken for the attachment (one at a time)
//! before its ADD; its status filled with the attachment's addresses after it; let go at its
//! DEL; and the addresses of claims deleted from the cluster given back
//! ([`Engine::collect_ipam_claims`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::catalog::PodInfo;
use crate::cni::result::CniResult;
use crate::cni::{CniCode, CniError};
use crate::ipam::claim::registry::{ClaimEntry, ClaimRegistry, Holder};
use crate::ipam::claim::release::{self, ipam_type};
use crate::ipam::claim::source::{ClaimObject, ClaimSource};
use crate::ipam::claim::{ClaimRequest, HONOURED_BY, RUNTIME_CONFIG_KEY};
use crate::spec::delegate_conf::DelegateConfig;
use crate::spec::plan::PlannedAttachment;
use crate::spec::status::pod_ip_configs;
use crate::state::{AttachmentRecord, ClaimUse, ContainerRecord};

use super::front_end::NotAttachable;
use super::{blocking, Engine};

/// Where claims are read and what this node holds of them.
#[derive(Clone)]
pub struct IpamClaims {
    pub source: Arc<dyn ClaimSource>,
    pub registry: ClaimRegistry,
    /// How long host-local's lock is waited for when a deleted claim's addresses are released.
    pub release_timeout: Duration,
}

impl Engine {
    /// Honours the selections' `ipam-claim-reference` with `claims` (without: such a selection
    /// is refused, naming what is missing).
    pub fn with_ipam_claims(mut self, claims: IpamClaims) -> Self {
        self.ipam_claims = Some(claims);
        self
    }

    /// At plan time: the claim the selection references, checked against the attachment's
    /// network and handed to its IPAM in `runtimeConfig`. `None` when the selection references
    /// none, or when no plugin of the network has IPAM that honours claims (the spec: such a
    /// plugin ignores the request; the pod is told in an event).
    pub(super) async fn claim_for(
        &self,
        pod: &PodInfo,
        planned: &PlannedAttachment,
        delegate: &mut DelegateConfig,
    ) -> Result<Option<ClaimUse>, NotAttachable> {
        let Some(name) = planned.selection.ipam_claim_reference.as_deref() else { return Ok(None) };
        let network = planned.status_name();
        let reference = format!("{}/{name}", pod.namespace);
        let Some(claims) = &self.ipam_claims else {
            return Err(NotAttachable::Refused(CniError::invalid_config(format!(
                "network {network} references IPAMClaim {reference}, but IPAMClaims are Kubernetes objects and this \
                 agent reads none (it runs without --catalog kube); remove \"ipam-claim-reference\""
            ))));
        };
        let claim = match claims.source.get(&pod.namespace, name).await {
            Ok(Some(claim)) => claim,
            Ok(None) => {
                return Err(NotAttachable::Refused(CniError::invalid_config(format!(
                    "network {network} references IPAMClaim {reference}, which does not exist; create it before the \
                     pod (NPWG spec 8), or remove \"ipam-claim-reference\""
                ))))
            }
            Err(e) => return Err(NotAttachable::Failed(CniError::from_error(&e))),
        };
        check_network(&claim, planned, delegate).map_err(NotAttachable::Refused)?;
        if !self.honours_claims(delegate) {
            let note = format!(
                "IPAMClaim {reference} is ignored: no plugin of network {network} has IPAM that honours claims \
                 (plexus's native types with host-local or static IPAM do); the claim's status stays as it is"
            );
            tracing::warn!("{note}");
            self.catalog.record_event(pod, "IPAMClaimIgnored", &note).await;
            return Ok(None);
        }
        let request =
            ClaimRequest { namespace: pod.namespace.clone(), name: name.to_owned(), ips: claim.ips.clone() };
        delegate.runtime_config.insert(RUNTIME_CONFIG_KEY.to_owned(), json!(request));
        Ok(Some(ClaimUse {
            namespace: claim.namespace,
            name: claim.name,
            uid: claim.uid,
            had_ips: !claim.ips.is_empty(),
        }))
    }

    /// Some plugin of the network runs natively, honours the claim key, and has IPAM of a type
    /// that honours claims.
    fn honours_claims(&self, delegate: &DelegateConfig) -> bool {
        delegate.list.plugins.iter().enumerate().any(|(i, plugin)| {
            let native = self.delegator.natives.get(delegate.list.plugin_type(i));
            native.is_some_and(|n| n.capabilities().contains(&RUNTIME_CONFIG_KEY))
                && ipam_type(&Value::Object(plugin.clone())).is_some_and(|t| HONOURED_BY.contains(&t))
        })
    }

    /// Before the ADD of `record.attachments[i]`: takes its claim for it. Refused (code 7)
    /// while another container that still exists holds the claim; a claim deleted and created
    /// again under its name first gives back what the old one held.
    pub(super) async fn take_claim(&self, record: &ContainerRecord, i: usize) -> Result<(), CniError> {
        let attachment = &record.attachments[i];
        let (Some(claim), Some(claims)) = (&attachment.ipam_claim, &self.ipam_claims) else { return Ok(()) };
        let _taking = claims.registry.lock().await;
        let registry = claims.registry.clone();
        let (ns, name) = (claim.namespace.clone(), claim.name.clone());
        let found =
            blocking(move || registry.load(&ns, &name)).await?.map_err(|e| CniError::from_error(&e))?;
        let mut entry = match found {
            Some(old) if old.uid != claim.uid => {
                self.release_claim(&old, claims).await?;
                None
            }
            found => found,
        }
        .unwrap_or_else(|| ClaimEntry {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            uid: claim.uid.clone(),
            holder: None,
            ipam_configs: Vec::new(),
        });
        if let Some(holder) = entry.holder.as_ref().filter(|h| h.container_id != record.container_id) {
            if self.state.load(&holder.container_id, &holder.runtime_ifname).await?.is_some() {
                return Err(CniError::invalid_config(format!(
                    "IPAMClaim {}/{} is in use by pod {} (container {}, interface {}); a claim's addresses go to one \
                     attachment at a time: delete that pod first, or reference another claim",
                    claim.namespace, claim.name, holder.pod, holder.container_id, holder.ifname
                ))
                .with_details(attachment.network.clone()));
            }
        }
        entry.holder = Some(Holder {
            container_id: record.container_id.clone(),
            runtime_ifname: record.ifname.clone(),
            ifname: attachment.ifname.clone(),
            pod: record.pod.as_ref().map(|p| format!("{}/{}", p.namespace, p.name)).unwrap_or_default(),
        });
        for plugin in &attachment.delegate.list.plugins {
            let mut config = Value::Object(plugin.clone());
            if ipam_type(&config).is_some_and(|t| HONOURED_BY.contains(&t)) {
                config["name"] = json!(attachment.delegate.list.name);
                config["cniVersion"] = json!(attachment.delegate.list.cni_version);
                if !entry.ipam_configs.contains(&config) {
                    entry.ipam_configs.push(config);
                }
            }
        }
        let registry = claims.registry.clone();
        blocking(move || registry.save(&entry)).await?.map_err(|e| CniError::from_error(&e))
    }

    /// After a successful ADD: a claim whose status had no addresses gets the attachment's.
    pub(super) async fn fill_claim(
        &self,
        attachment: &AttachmentRecord,
        result: Option<&CniResult>,
    ) -> Result<(), CniError> {
        let (Some(claim), Some(claims)) = (&attachment.ipam_claim, &self.ipam_claims) else { return Ok(()) };
        if claim.had_ips {
            return Ok(());
        }
        let ips: Vec<String> = result
            .map(|r| pod_ip_configs(r).iter().map(|c| c.address.to_string()).collect())
            .unwrap_or_default();
        claims.source.record_ips(&claim.namespace, &claim.name, &ips).await.map_err(|e| {
            CniError::new(
                e.cni_code(),
                format!(
                    "attachment {}: writing its addresses to the status of IPAMClaim {}/{}: {e}",
                    attachment.network, claim.namespace, claim.name
                ),
            )
        })
    }

    /// After the attachment's DEL: the claim is no longer its (its addresses stay the claim's).
    pub(super) async fn let_go_of_claim(&self, container_id: &str, attachment: &AttachmentRecord) {
        let (Some(claim), Some(claims)) = (&attachment.ipam_claim, &self.ipam_claims) else { return };
        let _taking = claims.registry.lock().await;
        let registry = claims.registry.clone();
        let (ns, name, cid) = (claim.namespace.clone(), claim.name.clone(), container_id.to_owned());
        let done = blocking(move || -> Result<(), crate::ipam::claim::registry::RegistryError> {
            let Some(mut entry) = registry.load(&ns, &name)? else { return Ok(()) };
            if entry.holder.as_ref().is_some_and(|h| h.container_id == cid) {
                entry.holder = None;
                registry.save(&entry)?;
            }
            Ok(())
        })
        .await;
        if let Err(e) = done.map_err(|e| e.msg).and_then(|r| r.map_err(|e| e.to_string())) {
            tracing::warn!(claim = %format!("{}/{}", claim.namespace, claim.name), "letting go of the claim: {e}");
        }
    }

    /// Gives back the addresses of every claim this node holds that no longer exists in the
    /// cluster (or exists as another object, with another UID), unless an attachment that still
    /// exists holds it: its addresses go once that attachment's DEL let go of it. Run
    /// periodically in Kubernetes mode.
    pub async fn collect_ipam_claims(&self) {
        let Some(claims) = &self.ipam_claims else { return };
        let registry = claims.registry.clone();
        let entries = match blocking(move || registry.list())
            .await
            .map_err(|e| e.msg)
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            Ok(entries) => entries,
            Err(e) => return tracing::warn!("listing the IPAMClaims held here: {e}"),
        };
        for entry in entries {
            let gone = match claims.source.get(&entry.namespace, &entry.name).await {
                Ok(Some(claim)) => claim.uid != entry.uid,
                Ok(None) => true,
                Err(e) => {
                    tracing::warn!("IPAMClaim {}/{}: {e}", entry.namespace, entry.name);
                    continue;
                }
            };
            if !gone {
                continue;
            }
            let _taking = claims.registry.lock().await;
            // Read again under the lock: an ADD may have taken the claim (or its successor of
            // the same name) since the list.
            let registry = claims.registry.clone();
            let (ns, name) = (entry.namespace.clone(), entry.name.clone());
            let current =
                blocking(move || registry.load(&ns, &name)).await.ok().and_then(Result::ok).flatten();
            if current.as_ref() != Some(&entry) {
                continue;
            }
            if let Some(holder) = &entry.holder {
                if matches!(self.state.load(&holder.container_id, &holder.runtime_ifname).await, Ok(Some(_)))
                {
                    continue;
                }
            }
            match self.release_claim(&entry, claims).await {
                Ok(()) => tracing::info!(
                    claim = %format!("{}/{}", entry.namespace, entry.name),
                    "the IPAMClaim is gone: its addresses are released"
                ),
                Err(e) => tracing::warn!("{}", e.msg),
            }
        }
    }

    /// Releases what `entry` holds and forgets it.
    async fn release_claim(&self, entry: &ClaimEntry, claims: &IpamClaims) -> Result<(), CniError> {
        let errors = release::release(entry, claims.release_timeout).await;
        if let Some(first) = errors.first() {
            return Err(CniError::new(
                first.cni_code(),
                format!("releasing the addresses of IPAMClaim {}/{}: {first}", entry.namespace, entry.name),
            ));
        }
        let registry = claims.registry.clone();
        let (ns, name) = (entry.namespace.clone(), entry.name.clone());
        blocking(move || registry.remove(&ns, &name)).await?.map_err(|e| CniError::from_error(&e))
    }
}

/// The claim must be for the attachment's network: its `spec.network` is the network's CNI
/// name, or the NAD's name (with or without its namespace).
fn check_network(
    claim: &ClaimObject,
    planned: &PlannedAttachment,
    delegate: &DelegateConfig,
) -> Result<(), CniError> {
    let status_name = planned.status_name();
    let accepted = [delegate.list.name.as_str(), planned.name.as_str(), status_name.as_str()];
    if accepted.contains(&claim.network.as_str()) {
        return Ok(());
    }
    Err(CniError::invalid_config(format!(
        "IPAMClaim {}/{} was created for network {:?}, but the selection attaches network {} (CNI network name \
         {:?}); reference a claim of this network",
        claim.namespace,
        claim.name,
        claim.network,
        planned.status_name(),
        delegate.list.name
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::config::NetworkConfigList;
    use crate::cni::ErrorCode;
    use crate::spec::selection::NetworkSelection;

    fn claim(network: &str) -> ClaimObject {
        ClaimObject {
            namespace: "ns1".into(),
            name: "vm-a".into(),
            uid: "u".into(),
            network: network.into(),
            interface: "net1".into(),
            ips: Vec::new(),
        }
    }

    #[test]
    fn a_claim_is_for_the_networks_cni_name_or_its_nad() {
        let planned = PlannedAttachment {
            selection: NetworkSelection { name: "red-nad".into(), ..Default::default() },
            namespace: "ns1".into(),
            name: "red-nad".into(),
            ifname: "net1".into(),
        };
        let list =
            NetworkConfigList::parse(r#"{"cniVersion":"1.0.0","name":"tenantred","type":"macvlan"}"#, None)
                .unwrap();
        let delegate = DelegateConfig { list, runtime_config: Default::default() };
        for network in ["tenantred", "red-nad", "ns1/red-nad"] {
            check_network(&claim(network), &planned, &delegate).unwrap();
        }
        let err = check_network(&claim("tenantblue"), &planned, &delegate).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidNetworkConfig);
        assert_eq!(
            err.msg,
            "IPAMClaim ns1/vm-a was created for network \"tenantblue\", but the selection attaches network \
             ns1/red-nad (CNI network name \"tenantred\"); reference a claim of this network"
        );
    }
}
