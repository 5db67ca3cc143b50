//! The NPWG front-end: the pod's `k8s.v1.cni.cncf.io/networks` selections (spec 4.1) as
//! attachments, their NADs resolved (spec 3.4.1).

use crate::catalog::confdir;
use crate::catalog::PodInfo;
use crate::cni::CniError;
use crate::spec::plan::plan_attachments;
use crate::spec::selection::{parse_selection, NetworkSelection};
use crate::spec::NETWORKS_ANNOTATION;
use crate::state::AttachmentRecord;

use super::super::{blocking, Engine};
use super::NotAttachable;

impl Engine {
    /// The secondary attachments the pod's selection annotation asks for, in its order.
    pub(in crate::engine) async fn npwg_attachments(
        &self,
        pod: &PodInfo,
        default_ifname: &str,
    ) -> Result<Vec<AttachmentRecord>, CniError> {
        let selections = self.selections(pod).await?;
        self.secondary_attachments(pod, default_ifname, &selections).await
    }

    /// The pod's selections. An invalid annotation is ignored as the spec requires, but
    /// loudly: a warning and a pod event with the reason (or a failure in strict mode).
    async fn selections(&self, pod: &PodInfo) -> Result<Vec<NetworkSelection>, CniError> {
        let Some(text) = pod.annotations.get(NETWORKS_ANNOTATION) else { return Ok(Vec::new()) };
        match parse_selection(text) {
            Ok(s) => Ok(s),
            Err(e) if self.config.strict_annotations => Err(CniError::from_error(&e)
                .with_details(format!("pod {}/{} (strict annotations)", pod.namespace, pod.name))),
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name),
                    "ignoring the pod's networks annotation, attaching the default network only: {e}");
                self.catalog.record_event(pod, "InvalidNetworksAnnotation", &format!("ignored: {e}")).await;
                Ok(Vec::new())
            }
        }
    }

    async fn secondary_attachments(
        &self,
        pod: &PodInfo,
        default_ifname: &str,
        selections: &[NetworkSelection],
    ) -> Result<Vec<AttachmentRecord>, CniError> {
        if selections.is_empty() {
            return Ok(Vec::new());
        }
        // A refusal is also told on the pod, where its owner looks.
        let refuse = |err: CniError| self.refused(Some(pod), err);
        let planned = match plan_attachments(
            &pod.namespace,
            default_ifname,
            selections,
            &self.config.allowed_namespaces,
        ) {
            Ok(p) => p,
            Err(e) => return Err(refuse(CniError::from_error(&e)).await),
        };
        let dirs = self.config.network_conf_dirs.clone();
        let on_disk = blocking(move || confdir::on_disk_configs(&dirs)).await?;
        let fix = format!("fix the pod's {NETWORKS_ANNOTATION} annotation");
        let mut out = Vec::with_capacity(planned.len());
        let mut devices = self.pod_devices(Some(pod));
        for p in planned {
            let mut selected = match self.selected_delegate(&p, &on_disk, &fix, &mut devices).await {
                Ok(s) => s,
                Err(NotAttachable::Refused(e)) => return Err(refuse(e).await),
                Err(NotAttachable::Failed(e)) => return Err(e),
            };
            let ipam_claim = match self.claim_for(pod, &p, &mut selected.delegate).await {
                Ok(claim) => claim,
                Err(NotAttachable::Refused(e)) => return Err(refuse(e).await),
                Err(NotAttachable::Failed(e)) => return Err(e),
            };
            out.push(AttachmentRecord {
                network: p.status_name(),
                is_default: false,
                ifname: p.ifname,
                delegate: selected.delegate,
                result: None,
                default_route: p.selection.default_route.clone(),
                pod_network: None,
                device: selected.device,
                device_info: selected.device_info,
                ipam_claim,
                selection: Some(p.selection.clone()),
                live_pending: false,
            });
        }
        Ok(out)
    }
}
