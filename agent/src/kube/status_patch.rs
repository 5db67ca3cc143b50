//! network-status (NPWG spec 5), and the KEP-3698 status of a pod that asked for
//! PodNetworks, onto the pod: one JSON merge patch of the annotations, after the ADD
//! answered.
//!
//! Publishing never fails or delays an ADD. Each publish becomes a background task that
//! retries with backoff on conflicts, throttling, server errors and network errors, within a
//! deadline. Per pod, tasks run one at a time and a newer status supersedes an older one
//! still waiting, so a slow retry can never overwrite a later ADD's status. Bounded: a
//! limited number of patches are sent at once, and beyond a limit of pending ones a publish
//! is refused (the caller logs it). DEL removes nothing: the pod is going away.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::Client;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::events::EventSink;
use crate::catalog::{CatalogError, PodInfo, StatusReport};
use crate::metrics::metrics;
use crate::podnetwork::model::POD_NETWORKS_STATUS_ANNOTATION;
use crate::spec::NETWORK_STATUS_ANNOTATION;

/// Reason of the pod event when network-status could not be published.
pub const FAILED_REASON: &str = "NetworkStatusNotPublished";

/// How hard to try.
#[derive(Debug, Clone)]
pub struct PatchPolicy {
    /// Patches sent to the API server at once, across pods.
    pub concurrency: usize,
    /// Publishes waiting or in progress; beyond this, a publish is refused.
    pub max_pending: usize,
    /// Time limit of one request.
    pub attempt_timeout: Duration,
    /// First backoff; it doubles up to `max_backoff`.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// No attempt starts after this long.
    pub deadline: Duration,
}

impl Default for PatchPolicy {
    fn default() -> Self {
        PatchPolicy {
            concurrency: 8,
            max_pending: 4096,
            attempt_timeout: Duration::from_secs(10),
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            deadline: Duration::from_secs(60),
        }
    }
}

/// The merge patch that sets the annotations and touches nothing else.
pub fn patch_body(report: &StatusReport) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(NETWORK_STATUS_ANNOTATION.into(), report.network_status.clone().into());
    if let Some(kep) = &report.pod_networks_status {
        annotations.insert(POD_NETWORKS_STATUS_ANNOTATION.into(), kep.clone().into());
    }
    json!({"metadata": {"annotations": annotations}})
}

/// What one attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    /// The pod no longer exists: nothing to report.
    PodGone,
    /// Worth another attempt: conflict, throttling, server or network error, expired token.
    Retry,
    /// The server refused for good (forbidden, invalid): report and stop.
    Refused,
}

fn classify(result: &Result<Pod, ::kube::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Done,
        Err(::kube::Error::Api(s)) => match s.code {
            404 => Outcome::PodGone,
            // 401: the token was rotated under us; the next attempt reads the new one.
            401 | 408 | 409 | 429 => Outcome::Retry,
            c if c >= 500 => Outcome::Retry,
            _ => Outcome::Refused,
        },
        Err(_) => Outcome::Retry,
    }
}

struct Slot {
    /// The generation of the newest publish for the pod.
    latest: u64,
    /// Publish tasks of the pod not finished yet. The slot lives until the last one ends:
    /// tasks take their turn in no particular order, and an older one that runs after the
    /// newest must still find the newest's generation here to know it is superseded.
    outstanding: usize,
    /// Held by the task patching the pod: one at a time per pod.
    serial: Arc<tokio::sync::Mutex<()>>,
}

struct Shared {
    client: Client,
    policy: PatchPolicy,
    events: EventSink,
    slots: Mutex<HashMap<String, Slot>>,
    sending: Semaphore,
    pending: AtomicUsize,
}

/// Publishes network-status annotations in the background.
#[derive(Clone)]
pub struct StatusPublisher {
    shared: Arc<Shared>,
}

impl StatusPublisher {
    pub fn new(client: Client, policy: PatchPolicy, events: EventSink) -> Self {
        let sending = Semaphore::new(policy.concurrency.max(1));
        StatusPublisher {
            shared: Arc::new(Shared {
                client,
                policy,
                events,
                slots: Mutex::default(),
                sending,
                pending: AtomicUsize::new(0),
            }),
        }
    }

    /// Publishes waiting or in progress.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::SeqCst)
    }

    /// Starts publishing `report` on the pod and returns at once.
    pub fn publish(&self, pod: &PodInfo, report: &StatusReport) -> Result<(), CatalogError> {
        let shared = &self.shared;
        if shared.pending.fetch_add(1, Ordering::SeqCst) >= shared.policy.max_pending {
            shared.pending.fetch_sub(1, Ordering::SeqCst);
            metrics().status_patch("dropped");
            return Err(CatalogError::Backlog { max_pending: shared.policy.max_pending });
        }
        let key = format!("{}/{}", pod.namespace, pod.name);
        let (generation, serial) = {
            let mut slots = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                latest: 0,
                outstanding: 0,
                serial: Arc::default(),
            });
            slot.latest += 1;
            slot.outstanding += 1;
            (slot.latest, slot.serial.clone())
        };
        let shared = self.shared.clone();
        let pod = pod.clone();
        let body = patch_body(report);
        tokio::spawn(async move {
            {
                let _turn = serial.lock().await;
                shared.run(&key, generation, &pod, &body).await;
            }
            let mut slots = shared.slots.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = slots.get_mut(&key) {
                slot.outstanding -= 1;
                if slot.outstanding == 0 {
                    slots.remove(&key);
                }
            }
            drop(slots);
            shared.pending.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(())
    }
}

impl Shared {
    fn superseded(&self, key: &str, generation: u64) -> bool {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(key).is_some_and(|s| s.latest != generation)
    }

    async fn run(&self, key: &str, generation: u64, pod: &PodInfo, body: &serde_json::Value) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let deadline = Instant::now() + self.policy.deadline;
        let mut backoff = self.policy.first_backoff;
        let mut attempts = 0u32;
        loop {
            if self.superseded(key, generation) {
                metrics().status_patch("superseded");
                return;
            }
            attempts += 1;
            let result = {
                let _sending = self.sending.acquire().await;
                tokio::time::timeout(
                    self.policy.attempt_timeout,
                    api.patch(&pod.name, &PatchParams::default(), &Patch::Merge(body)),
                )
                .await
            };
            let (outcome, error) = match result {
                Ok(r) => (classify(&r), r.err().map(|e| super::api_error::describe(&e))),
                Err(_) => (
                    Outcome::Retry,
                    Some(format!("the API server did not answer within {:?}", self.policy.attempt_timeout)),
                ),
            };
            let error = error.unwrap_or_default();
            match outcome {
                Outcome::Done => {
                    metrics().status_patch("ok");
                    tracing::debug!(pod = %key, attempts, "network-status published");
                    return;
                }
                Outcome::PodGone => {
                    metrics().status_patch("pod_gone");
                    tracing::debug!(pod = %key, "network-status not published: the pod is gone");
                    return;
                }
                Outcome::Retry if Instant::now() + backoff < deadline => {
                    metrics().status_patch("retried");
                    tracing::debug!(pod = %key, attempts, "network-status patch failed, retrying in {backoff:?}: {error}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.policy.max_backoff);
                }
                Outcome::Retry | Outcome::Refused => {
                    let label = if outcome == Outcome::Refused { "refused" } else { "gave_up" };
                    metrics().status_patch(label);
                    let message = format!(
                        "the {NETWORK_STATUS_ANNOTATION} annotation could not be written after {attempts} attempt(s): \
                         {error}"
                    );
                    tracing::warn!(pod = %key, "{message}");
                    self.events.record(pod, FAILED_REASON, &message);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::Status;

    fn api(code: u16) -> Result<Pod, ::kube::Error> {
        Err(::kube::Error::Api(Box::new(Status { code, ..Default::default() })))
    }

    #[test]
    fn conflicts_and_server_errors_are_retried_forbidden_is_not() {
        assert_eq!(classify(&Ok(Pod::default())), Outcome::Done);
        assert_eq!(classify(&api(409)), Outcome::Retry);
        assert_eq!(classify(&api(429)), Outcome::Retry);
        assert_eq!(classify(&api(503)), Outcome::Retry);
        assert_eq!(classify(&api(401)), Outcome::Retry);
        assert_eq!(classify(&api(403)), Outcome::Refused);
        assert_eq!(classify(&api(422)), Outcome::Refused);
        assert_eq!(classify(&api(404)), Outcome::PodGone);
    }

    #[test]
    fn the_patch_sets_only_the_annotations() {
        let npwg = StatusReport { network_status: "[]".into(), pod_networks_status: None };
        assert_eq!(
            patch_body(&npwg),
            json!({"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": "[]"}}})
        );
        let both = StatusReport { pod_networks_status: Some("[1]".into()), ..npwg };
        assert_eq!(
            patch_body(&both),
            json!({"metadata": {"annotations": {
                "k8s.v1.cni.cncf.io/network-status": "[]", "plexus.dev/pod-networks-status": "[1]"}}})
        );
    }
}
