//! Live attachments: when a running pod's selection annotation changes, its attachments follow
//! (the added selections attached, the removed ones detached, a bandwidth change in place),
//! through the same engine as ADD ([`crate::engine::live`]). This module decides when: at the
//! start (so a change an earlier agent did not finish converges), whenever the catalog says a
//! pod changed, and at a slow resync. What a change asks for is the engine's pure [`crate::engine::live::diff`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::engine::live::{is_live, LastFailure};
use crate::engine::Engine;

/// A failed change is tried again after this long even if the pod's request stays the same
/// (a network created since, a transient failure), without a second event; at once, with an
/// event if it fails, when the request changes.
pub const RETRY_FAILED_AFTER: Duration = Duration::from_secs(30);

/// Reconciles forever: at once, then on every `changes` notification and every `resync`.
pub async fn run(engine: Arc<Engine>, changes: Option<Arc<Notify>>, resync: Duration) {
    let mut failed = Failed::default();
    loop {
        pass(&engine, &mut failed).await;
        match &changes {
            Some(changes) => {
                tokio::select! {
                    _ = changes.notified() => {}
                    _ = tokio::time::sleep(resync) => {}
                }
            }
            None => tokio::time::sleep(resync).await,
        }
    }
}

/// The pods' requests whose change failed, per container, and when.
#[derive(Debug, Default)]
struct Failed(HashMap<String, (String, Instant)>);

impl Failed {
    /// The container's last failure, and whether it is due to be tried again.
    fn last(&self, container_id: &str, now: Instant) -> Option<LastFailure<'_>> {
        self.0.get(container_id).map(|(request, at)| LastFailure {
            request: request.as_str(),
            due: now.duration_since(*at) >= RETRY_FAILED_AFTER,
        })
    }
}

/// One look at every container with a live-attachable record.
async fn pass(engine: &Engine, failed: &mut Failed) {
    let records = match engine.state().list().await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("live attachments: listing the attachment records: {e}");
            return;
        }
    };
    let now = Instant::now();
    failed.0.retain(|cid, _| records.iter().any(|r| r.container_id == *cid));
    for record in records.iter().filter(|r| is_live(r)) {
        let outcome = engine
            .apply_live(&record.container_id, &record.ifname, failed.last(&record.container_id, now))
            .await;
        match outcome {
            Ok(o) if o.waiting => {}
            Ok(_) => {
                failed.0.remove(&record.container_id);
            }
            Err(f) => {
                failed.0.insert(record.container_id.clone(), (f.request, now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_request_is_due_again_after_the_retry_time() {
        let mut failed = Failed::default();
        let at = Instant::now();
        failed.0.insert("c".into(), ("blue".into(), at));
        let soon = failed.last("c", at + Duration::from_secs(1)).unwrap();
        assert_eq!((soon.request, soon.due), ("blue", false));
        assert!(failed.last("c", at + RETRY_FAILED_AFTER).unwrap().due);
        assert!(failed.last("other", at).is_none());
    }
}
