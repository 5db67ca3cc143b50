//! Is the pod of an ADD the pod the catalog knows under its name? A pod deleted and
//! re-created under the same name (a StatefulSet's) has a new UID; a sandbox of the old one
//! must get neither networks nor write network-status onto the new one.

use crate::catalog::PodInfo;
use crate::cni::{CniCode, ErrorCode};

/// The annotation kubelet sets on the API server's mirror of a static pod. Its UID there
/// differs from the one kubelet passes in `K8S_POD_UID`, so (as in Multus) mirror pods are
/// not compared.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "pod {namespace}/{name} has UID {known} in the agent's catalog but the runtime's request is for UID \
     {requested}: the sandbox belongs to another pod of the same name (deleted and re-created); retry once \
     the catalog has caught up, or remove the stale sandbox"
)]
pub struct PodUidMismatch {
    pub namespace: String,
    pub name: String,
    pub known: String,
    pub requested: String,
}

/// Try again later (11): the agent's catalog follows the API server with a delay, so the
/// pod it holds under this name may be the one just deleted while the request is for its
/// successor; the runtime's retry then finds the new UID. A request that really is for the
/// old pod's sandbox stops being retried once the runtime removes that sandbox.
impl CniCode for PodUidMismatch {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::TryAgainLater
    }
}

/// Refuses a request whose `K8S_POD_UID` is not the catalog's UID of the pod. Nothing is
/// compared when either side has no UID, or for a mirror pod.
pub fn check(pod: &PodInfo, requested: Option<&str>) -> Result<(), PodUidMismatch> {
    let (Some(known), Some(requested)) = (pod.uid.as_deref(), requested) else { return Ok(()) };
    if known == requested || pod.annotations.contains_key(MIRROR_POD_ANNOTATION) {
        return Ok(());
    }
    Err(PodUidMismatch {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        known: known.to_owned(),
        requested: requested.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: Option<&str>, mirror: bool) -> PodInfo {
        let mut p = PodInfo {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: uid.map(str::to_owned),
            ..Default::default()
        };
        if mirror {
            p.annotations.insert(MIRROR_POD_ANNOTATION.into(), "5e1f...".into());
        }
        p
    }

    #[test]
    fn the_same_uid_passes_and_another_is_refused_with_try_again() {
        assert_eq!(check(&pod(Some("u-new"), false), Some("u-new")), Ok(()));
        let err = check(&pod(Some("u-new"), false), Some("u-old")).unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::TryAgainLater);
        let text = err.to_string();
        for needle in ["ns/web-0", "UID u-new", "UID u-old", "re-created"] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
    }

    #[test]
    fn mirror_pods_are_exempt() {
        assert_eq!(check(&pod(Some("mirror-uid"), true), Some("static-uid")), Ok(()));
    }

    #[test]
    fn nothing_to_compare_passes() {
        assert_eq!(check(&pod(None, false), Some("u")), Ok(()));
        assert_eq!(check(&pod(Some("u"), false), None), Ok(()));
    }
}
