//! The front-ends: how a pod asks for its secondary networks. Each turns the pod's request
//! into the same [`AttachmentRecord`]s, which the one engine attaches, undoes, records and
//! tears down alike.
//!
//! - [`npwg`]: the NPWG selection annotation `k8s.v1.cni.cncf.io/networks` and its NADs;
//! - [`kep`]: the KEP-3698 PodNetwork list `plexus.dev/pod-networks` and its PodNetworks,
//!   PodNetworkAttachments and AttachmentParameters.
//!
//! A pod uses one of them: both annotations together are refused (code 7, "pick one").

mod kep;
mod npwg;

use crate::catalog::PodInfo;
use crate::cni::CniError;
use crate::podnetwork::model::POD_NETWORKS_ANNOTATION;
use crate::podnetwork::request::check_one_front_end;
use crate::spec::NETWORKS_ANNOTATION;
use crate::state::{AttachmentRecord, FrontEnd};

use super::Engine;

/// What a front-end planned for the pod, beyond the cluster default network.
#[derive(Debug, Default)]
pub struct Secondaries {
    pub front_end: FrontEnd,
    /// In attachment order.
    pub attachments: Vec<AttachmentRecord>,
    /// The attachment (index in `attachments`) whose result's gateways become the pod's
    /// default routes once it is added (a PodNetwork entry's `isDefaultGW`).
    pub default_gw: Option<usize>,
    /// The PodNetwork the cluster default network is, when the pod asked for PodNetworks.
    pub default_pod_network: Option<String>,
}

/// The front-end of a pod: the annotation it wrote, or refused when it wrote both.
pub fn choose(pod: &PodInfo) -> Result<FrontEnd, CniError> {
    let npwg = pod.annotations.get(NETWORKS_ANNOTATION).map(String::as_str);
    let kep = pod.annotations.get(POD_NETWORKS_ANNOTATION).map(String::as_str);
    check_one_front_end(npwg, kep).map_err(|e| CniError::from_error(&e))?;
    Ok(match kep {
        Some(text) if !text.trim().is_empty() => FrontEnd::PodNetworks,
        _ => FrontEnd::Npwg,
    })
}

impl Engine {
    /// The pod's secondary attachments, from the front-end it chose.
    pub(super) async fn secondaries(
        &self,
        pod: &PodInfo,
        default_ifname: &str,
    ) -> Result<Secondaries, CniError> {
        let front_end = match choose(pod) {
            Ok(f) => f,
            Err(e) => {
                self.catalog.record_event(pod, "NetworkRefused", &e.msg).await;
                return Err(e.with_details(format!("pod {}/{}", pod.namespace, pod.name)));
            }
        };
        match front_end {
            FrontEnd::Npwg => Ok(Secondaries {
                front_end,
                attachments: self.npwg_attachments(pod, default_ifname).await?,
                ..Secondaries::default()
            }),
            FrontEnd::PodNetworks => {
                let text =
                    pod.annotations.get(POD_NETWORKS_ANNOTATION).map(String::as_str).unwrap_or_default();
                self.pod_network_attachments(pod, default_ifname, text).await
            }
        }
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

    #[test]
    fn the_annotation_written_chooses_and_both_are_refused() {
        assert_eq!(choose(&pod(&[])).unwrap(), FrontEnd::Npwg);
        assert_eq!(choose(&pod(&[(NETWORKS_ANNOTATION, "blue")])).unwrap(), FrontEnd::Npwg);
        assert_eq!(
            choose(&pod(&[(POD_NETWORKS_ANNOTATION, r#"[{"name":"blue"}]"#)])).unwrap(),
            FrontEnd::PodNetworks
        );
        assert_eq!(
            choose(&pod(&[(POD_NETWORKS_ANNOTATION, " "), (NETWORKS_ANNOTATION, "blue")])).unwrap(),
            FrontEnd::Npwg,
            "a blank list asks for nothing"
        );
        let both =
            choose(&pod(&[(NETWORKS_ANNOTATION, "blue"), (POD_NETWORKS_ANNOTATION, r#"[{"name":"blue"}]"#)]))
                .unwrap_err();
        assert_eq!(both.code, ErrorCode::InvalidNetworkConfig);
        assert!(both.msg.contains("pick one"), "{}", both.msg);
    }
}
