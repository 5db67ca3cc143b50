//! Pod events (events.k8s.io/v1) through kube's recorder, off the ADD path.
//!
//! The engine records an event and goes on: events wait in a bounded queue for one task
//! that publishes them. When a burst fills the queue, further events are dropped (and
//! counted) rather than holding memory or ADDs; the warning is in the agent's log either way.

use std::future::Future;
use std::time::Duration;

use ::kube::runtime::events::{Event, EventType, Recorder, Reporter};
use ::kube::Client;
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::mpsc;

use crate::catalog::PodInfo;
use crate::metrics::metrics;

/// Events waiting to be published; beyond this they are dropped.
pub const QUEUE_LEN: usize = 256;

/// The API server rejects a note longer than 1 kB.
const MAX_NOTE_BYTES: usize = 1024;

/// Time limit of publishing one event.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);

/// The `reportingController` of plexus's events.
pub const CONTROLLER: &str = "plexus";

struct PendingEvent {
    pod: ObjectReference,
    reason: String,
    note: String,
}

/// Where the catalog sends events.
#[derive(Clone)]
pub struct EventSink {
    queue: mpsc::Sender<PendingEvent>,
}

impl EventSink {
    /// The sink and the task that publishes (run it on the runtime; it ends when every sink
    /// is dropped).
    pub fn start(client: Client, node_name: &str) -> (EventSink, impl Future<Output = ()> + Send + 'static) {
        let (queue, mut rx) = mpsc::channel::<PendingEvent>(QUEUE_LEN);
        let reporter =
            Reporter { controller: CONTROLLER.into(), instance: Some(format!("plexus-agent-{node_name}")) };
        let recorder = Recorder::new(client, reporter);
        let task = async move {
            while let Some(ev) = rx.recv().await {
                let event = Event {
                    type_: EventType::Warning,
                    reason: ev.reason.clone(),
                    note: Some(ev.note),
                    action: "AttachNetworks".into(),
                    secondary: None,
                };
                let pod = format!(
                    "{}/{}",
                    ev.pod.namespace.as_deref().unwrap_or_default(),
                    ev.pod.name.as_deref().unwrap_or_default()
                );
                match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, &ev.pod)).await {
                    Ok(Ok(())) => metrics().event("published"),
                    Ok(Err(e)) => {
                        metrics().event("failed");
                        tracing::warn!(%pod, reason = %ev.reason, "recording a pod event: {}", super::api_error::describe(&e));
                    }
                    Err(_) => {
                        metrics().event("failed");
                        tracing::warn!(%pod, reason = %ev.reason, "recording a pod event: no answer within {PUBLISH_TIMEOUT:?}");
                    }
                }
            }
        };
        (EventSink { queue }, task)
    }

    /// Queues a warning event on the pod; never waits.
    pub fn record(&self, pod: &PodInfo, reason: &str, message: &str) {
        let ev = PendingEvent { pod: pod_reference(pod), reason: reason.to_owned(), note: truncate(message) };
        if self.queue.try_send(ev).is_err() {
            metrics().event("dropped");
            tracing::debug!(pod = %format!("{}/{}", pod.namespace, pod.name), %reason, "event queue full: event dropped");
        }
    }
}

pub fn pod_reference(pod: &PodInfo) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: pod.uid.clone(),
        ..Default::default()
    }
}

/// At most [`MAX_NOTE_BYTES`], cut on a character boundary.
fn truncate(message: &str) -> String {
    if message.len() <= MAX_NOTE_BYTES {
        return message.to_owned();
    }
    let mut end = MAX_NOTE_BYTES - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_the_api_limit() {
        assert_eq!(truncate("short"), "short");
        let long = "é".repeat(1000);
        let t = truncate(&long);
        assert!(t.len() <= MAX_NOTE_BYTES && t.ends_with("..."));
    }
}
