//! Makes the calls [`super::plan`] decided. Every write is a JSON merge patch carrying the
//! `metadata.resourceVersion` the decision was made from, so a write based on an old view is
//! refused (409) and decided again from the newer object its watch brings. Conditions go
//! through the status subresource only.

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::Client;
use serde_json::{json, Value};

use super::api_code;
use super::plan::{Action, Target};
use crate::kube::api_error;
use crate::podnetwork::model::{PodNetwork, PodNetworkAttachment, PodNetworkSpec, DEFAULT_POD_NETWORK};

/// The `default` PodNetwork, the KEP's exact object (`spec.enabled: true`).
pub fn default_pod_network() -> PodNetwork {
    PodNetwork {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(DEFAULT_POD_NETWORK.into()),
            ..Default::default()
        },
        spec: PodNetworkSpec { enabled: true, parameters_refs: Vec::new(), provider: None },
        status: None,
    }
}

/// How a round of writes went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub written: usize,
    /// Refused because the object changed meanwhile (its watch brings the new version).
    pub conflicts: usize,
    pub failed: usize,
}

/// Writes through the API server.
#[derive(Clone)]
pub struct Writer {
    client: Client,
}

impl Writer {
    pub fn new(client: Client) -> Self {
        Writer { client }
    }

    fn pod_networks(&self) -> Api<PodNetwork> {
        Api::all(self.client.clone())
    }

    fn attachments(&self, namespace: &str) -> Api<PodNetworkAttachment> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn patch(&self, target: &Target, status: bool, patch: &Value) -> Result<(), ::kube::Error> {
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        match target {
            Target::PodNetwork { name } if status => {
                self.pod_networks().patch_status(name, &params, &patch).await.map(drop)
            }
            Target::PodNetwork { name } => self.pod_networks().patch(name, &params, &patch).await.map(drop),
            Target::Attachment { namespace, name } if status => {
                self.attachments(namespace).patch_status(name, &params, &patch).await.map(drop)
            }
            Target::Attachment { namespace, name } => {
                self.attachments(namespace).patch(name, &params, &patch).await.map(drop)
            }
        }
    }

    /// Makes one write; `Ok(false)` for a conflict.
    async fn write(&self, action: &Action) -> Result<bool, (String, ::kube::Error)> {
        let (what, result) = match action {
            Action::CreateDefault => {
                let created =
                    self.pod_networks().create(&PostParams::default(), &default_pod_network()).await;
                match created {
                    Ok(_) => {
                        tracing::info!("created the default PodNetwork");
                        return Ok(true);
                    }
                    // Created meanwhile (by an earlier round, or the operator).
                    Err(e) if api_code(&e) == Some(409) => return Ok(false),
                    Err(e) => ("creating the default PodNetwork".to_owned(), Err(e)),
                }
            }
            Action::Conditions { target, resource_version, conditions } => {
                let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": {"conditions": conditions}});
                (format!("writing the conditions of {target}"), self.patch(target, true, &patch).await)
            }
            Action::Finalizers { target, resource_version, finalizers } => {
                let patch =
                    json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
                (format!("writing the finalizers of {target}"), self.patch(target, false, &patch).await)
            }
        };
        match result {
            Ok(()) => {
                tracing::debug!("{what}: done");
                Ok(true)
            }
            // Changed meanwhile (409), or deleted meanwhile (404): the watch brings the news.
            Err(e) if matches!(api_code(&e), Some(409 | 404)) => Ok(false),
            Err(e) => Err((what, e)),
        }
    }

    /// Makes every write, each independent of the others' failures.
    pub async fn apply(&self, actions: &[Action]) -> Outcome {
        let mut outcome = Outcome::default();
        for action in actions {
            match self.write(action).await {
                Ok(true) => outcome.written += 1,
                Ok(false) => outcome.conflicts += 1,
                Err((what, e)) => {
                    outcome.failed += 1;
                    tracing::warn!("{what}: {}", api_error::describe(&e));
                }
            }
        }
        outcome
    }
}
