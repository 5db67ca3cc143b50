//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
//! it: only the holder of the Lease acts, so the controller's replicas never write the same
//! object twice.
//!
//! - The Lease is created when absent; taken over when it has no holder (released) or when
//!   its record (holder, renewTime) has not changed for `leaseDurationSeconds` as measured by
//!   this process's own clock since it first saw that record (no trust in the holder's clock).
//! - The holder renews every `retry_period`; every write carries the resourceVersion that was
//!   read (a merge patch with `metadata.resourceVersion`), so of two candidates only one wins
//!   (the other gets 409 Conflict).
//! - A holder that could not renew for `renew_deadline` (less than the lease duration, so it
//!   stops before anyone may take over) stops acting.
//! - On shutdown the holder releases the Lease by clearing `holderIdentity`, so another
//!   replica takes over at once instead of after the lease duration.

use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams, PostParams};
use ::kube::Client;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use tokio::time::Instant;

use super::api_code;
use crate::kube::api_error;

/// How the election runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (its pod's name, by default the host name).
    pub identity: String,
    /// `leaseDurationSeconds`: how long others wait for a silent holder.
    pub lease_duration: Duration,
}

impl LeaseConfig {
    /// How long the holder keeps acting without a successful renewal: two thirds of the
    /// lease duration (client-go's 10 s of 15 s).
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// How often the holder renews and the others look: a fifth of the lease duration.
    pub fn retry_period(&self) -> Duration {
        (self.lease_duration / 5).max(Duration::from_millis(100))
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// What to do with the Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is none: create it, holding it.
    Create,
    /// This replica holds it: renew.
    Renew,
    /// Nobody holds it, or its holder stopped renewing: take it over.
    TakeOver,
    /// Another replica holds it.
    Wait { holder: String },
}

/// Decides from the Lease (or its absence) and how long its current record has been seen
/// unchanged by this process.
pub fn decide(lease: Option<&Lease>, identity: &str, unchanged_for: Duration) -> Decision {
    let Some(lease) = lease else { return Decision::Create };
    let spec = lease.spec.as_ref();
    let holder = spec.and_then(|s| s.holder_identity.as_deref()).unwrap_or_default();
    if holder.is_empty() {
        return Decision::TakeOver;
    }
    if holder == identity {
        return Decision::Renew;
    }
    let duration = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0).max(0);
    if unchanged_for >= Duration::from_secs(u64::try_from(duration).unwrap_or(0)) {
        Decision::TakeOver
    } else {
        Decision::Wait { holder: holder.to_owned() }
    }
}

/// The spec to write for a decision to hold the Lease.
pub fn holding_spec(
    previous: Option<&LeaseSpec>,
    decision: &Decision,
    config: &LeaseConfig,
    now: Timestamp,
) -> LeaseSpec {
    let now = MicroTime(now);
    match (decision, previous) {
        (Decision::Renew, Some(previous)) => LeaseSpec {
            renew_time: Some(now),
            lease_duration_seconds: Some(config.duration_seconds()),
            ..previous.clone()
        },
        _ => LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: Some(config.duration_seconds()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(match (decision, previous) {
                (Decision::TakeOver, Some(p)) => p.lease_transitions.unwrap_or(0).saturating_add(1),
                _ => 0,
            }),
            ..LeaseSpec::default()
        },
    }
}

/// Errors of one election round.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("reading Lease {namespace}/{name}: {}", api_error::describe(.source))]
    Read { namespace: String, name: String, source: ::kube::Error },
    #[error("writing Lease {namespace}/{name}: {}", api_error::describe(.source))]
    Write { namespace: String, name: String, source: ::kube::Error },
}

/// The record last read, and since when this process has seen it unchanged.
struct Seen {
    key: (Option<String>, Option<MicroTime>, Option<String>),
    since: Instant,
}

/// One candidate.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    seen: Option<Seen>,
}

impl Elector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Elector { api: Api::namespaced(client, &config.namespace), config, seen: None }
    }

    fn read_error(&self, source: ::kube::Error) -> LeaseError {
        LeaseError::Read { namespace: self.config.namespace.clone(), name: self.config.name.clone(), source }
    }

    fn write_error(&self, source: ::kube::Error) -> LeaseError {
        LeaseError::Write { namespace: self.config.namespace.clone(), name: self.config.name.clone(), source }
    }

    /// One round: reads the Lease, holds it when it may. Answers whether this replica holds it
    /// now; a conflict (another candidate wrote first) is "no".
    pub async fn round(&mut self) -> Result<bool, LeaseError> {
        let lease = self.api.get_opt(&self.config.name).await.map_err(|e| self.read_error(e))?;
        let key = lease.as_ref().map(|l| {
            let spec = l.spec.clone().unwrap_or_default();
            (spec.holder_identity, spec.renew_time, l.metadata.resource_version.clone())
        });
        let now = Instant::now();
        let unchanged_for = match (&self.seen, &key) {
            (Some(seen), Some(key)) if seen.key == *key => now.duration_since(seen.since),
            _ => {
                self.seen = key.map(|key| Seen { key, since: now });
                Duration::ZERO
            }
        };
        let decision = decide(lease.as_ref(), &self.config.identity, unchanged_for);
        let previous = lease.as_ref().and_then(|l| l.spec.as_ref());
        let spec = holding_spec(previous, &decision, &self.config, Timestamp::now());
        let written = match &decision {
            Decision::Wait { .. } => return Ok(false),
            Decision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Decision::Renew | Decision::TakeOver => {
                let rv = lease.as_ref().and_then(|l| l.metadata.resource_version.clone());
                let patch = json!({"metadata": {"resourceVersion": rv}, "spec": spec});
                self.api.patch(&self.config.name, &PatchParams::default(), &Patch::Merge(&patch)).await
            }
        };
        match written {
            Ok(lease) => {
                if decision == Decision::TakeOver {
                    tracing::info!(lease = %self.config.name, "took over the Lease: leading");
                }
                self.seen = None;
                Ok(lease.spec.and_then(|s| s.holder_identity).as_deref()
                    == Some(self.config.identity.as_str()))
            }
            // Another candidate wrote first (409), or created it first.
            Err(e) if api_code(&e) == Some(409) => Ok(false),
            Err(e) => Err(self.write_error(e)),
        }
    }

    /// Gives the Lease up (on shutdown) when this replica holds it: clears the holder, so
    /// another replica takes over at its next round.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(lease) = self.api.get_opt(&self.config.name).await.map_err(|e| self.read_error(e))? else {
            return Ok(());
        };
        if lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref())
            != Some(self.config.identity.as_str())
        {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": {"holderIdentity": null}
        });
        match self.api.patch(&self.config.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(409) => Ok(()),
            Err(e) => Err(self.write_error(e)),
        }
    }

    /// Runs the election until `stop` says so, keeping `leading` true exactly while this
    /// replica may act; releases the Lease at the end.
    pub async fn run(
        mut self,
        leading: tokio::sync::watch::Sender<bool>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let retry = self.config.retry_period();
        let deadline = self.config.renew_deadline();
        let mut last_held: Option<Instant> = None;
        let mut failing = false;
        while !*stop.borrow() {
            let outcome = tokio::time::timeout(retry, self.round()).await;
            match outcome {
                Ok(Ok(held)) => {
                    if failing {
                        tracing::info!(lease = %self.config.name, "the Lease can be read and written again");
                        failing = false;
                    }
                    last_held = held.then(Instant::now);
                    set_leading(&leading, held, &self.config);
                }
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!("{e}; retrying every {retry:?}");
                        failing = true;
                    }
                }
                Err(_) => {
                    if !failing {
                        tracing::warn!(lease = %self.config.name, "the API server did not answer within {retry:?}; retrying");
                        failing = true;
                    }
                }
            }
            if last_held.is_some_and(|t| t.elapsed() > deadline) {
                last_held = None;
                set_leading(&leading, false, &self.config);
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = stop.changed() => {}
            }
        }
        let was_leading = *leading.borrow();
        leading.send_replace(false);
        if was_leading {
            match self.release().await {
                Ok(()) => tracing::info!(lease = %self.config.name, "released the Lease"),
                Err(e) => tracing::warn!("{e}; the next leader takes over once the lease expires"),
            }
        }
    }
}

fn set_leading(leading: &tokio::sync::watch::Sender<bool>, now: bool, config: &LeaseConfig) {
    let before = leading.send_replace(now);
    if before != now {
        if now {
            tracing::info!(lease = %format!("{}/{}", config.namespace, config.name), identity = %config.identity, "leading: this replica reconciles");
        } else {
            tracing::warn!(lease = %format!("{}/{}", config.namespace, config.name), "no longer leading: stopped reconciling");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, duration: i32) -> Lease {
        Lease {
            metadata: ObjectMeta { resource_version: Some("5".into()), ..ObjectMeta::default() },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(Into::into),
                lease_duration_seconds: Some(duration),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    fn config() -> LeaseConfig {
        LeaseConfig {
            namespace: "plexus".into(),
            name: "plexus-controller".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn the_lease_is_created_renewed_taken_over_or_waited_for() {
        let s = Duration::from_secs;
        assert_eq!(decide(None, "me", s(0)), Decision::Create);
        assert_eq!(decide(Some(&lease(Some("me"), 15)), "me", s(100)), Decision::Renew);
        assert_eq!(decide(Some(&lease(None, 15)), "me", s(0)), Decision::TakeOver);
        assert_eq!(decide(Some(&lease(Some(""), 15)), "me", s(0)), Decision::TakeOver);
        assert_eq!(
            decide(Some(&lease(Some("other"), 15)), "me", s(14)),
            Decision::Wait { holder: "other".into() }
        );
        assert_eq!(decide(Some(&lease(Some("other"), 15)), "me", s(15)), Decision::TakeOver);
        assert_eq!(decide(Some(&Lease::default()), "me", s(0)), Decision::TakeOver, "no spec: no holder");
    }

    #[test]
    fn holding_sets_the_record_and_counts_transitions() {
        let c = config();
        let t = Timestamp::from_second(1000).unwrap();
        let created = holding_spec(None, &Decision::Create, &c, t);
        assert_eq!(created.holder_identity.as_deref(), Some("me"));
        assert_eq!(created.lease_duration_seconds, Some(15));
        assert_eq!(
            (created.acquire_time.clone(), created.renew_time.clone()),
            (Some(MicroTime(t)), Some(MicroTime(t)))
        );
        assert_eq!(created.lease_transitions, Some(0));

        let theirs = lease(Some("other"), 15).spec.unwrap();
        let taken = holding_spec(Some(&theirs), &Decision::TakeOver, &c, t);
        assert_eq!((taken.holder_identity.as_deref(), taken.lease_transitions), (Some("me"), Some(4)));

        let later = Timestamp::from_second(1010).unwrap();
        let renewed = holding_spec(Some(&created), &Decision::Renew, &c, later);
        assert_eq!(renewed.acquire_time, Some(MicroTime(t)), "renewal keeps the acquire time");
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        assert_eq!(renewed.lease_transitions, Some(0));
    }

    #[test]
    fn the_holder_stops_before_anyone_may_take_over() {
        let c = config();
        assert!(c.renew_deadline() < c.lease_duration);
        assert!(c.retry_period() * 3 <= c.renew_deadline(), "several renewals fit in the deadline");
    }
}
