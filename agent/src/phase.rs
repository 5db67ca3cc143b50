//! Where a CNI request's time goes: each phase of an ADD, DEL or CHECK is timed, logged at
//! debug inside the request's span (`phase done phase=catalog elapsed_us=…`) and observed in
//! `plexus_cni_phase_duration_seconds{verb, phase}`, so a slow request shows as a phase, not
//! only as a total (issue #17).
//!
//! The engine's phases follow each other: waiting for the container's lock, the catalog
//! lookups, planning, the state writes, each network's plugins, the default route, publishing
//! the status. Within a network's plugins, the native plugins' entries into the pod's
//! namespace and their address management are timed too ([`Phase::is_nested`]): their time
//! is part of `plugins`.
//!
//! The verb comes from the request's task ([`for_verb`]); a phase timed outside a request
//! (the network API, a live change) is labelled `other`.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures::FutureExt;

use crate::cni::Command;

tokio::task_local! {
    static VERB: Command;
}

/// A phase of a CNI request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Waiting for the container's lock (another request of the same container runs).
    Lock,
    /// Reading the pod, its networks and their configs from the catalog.
    Catalog,
    /// Turning the pod's request into attachments: parsing, validation, resolving configs.
    Plan,
    /// Reading the container's state record.
    StateRead,
    /// Writing or removing the container's state record, with its fsyncs.
    StateWrite,
    /// One network's plugins, native or exec'd.
    Plugins,
    /// Moving the pod's default route to the attachment that asked for it.
    DefaultRoute,
    /// Publishing network-status (and the KEP status) on the pod.
    Status,
    /// Within a native plugin: entering a pod's network namespace (a netlink socket opened
    /// on a thread that joined it).
    Netns,
    /// Within a native plugin: address management (built-in IPAM).
    Ipam,
}

impl Phase {
    pub const ALL: [Phase; 10] = [
        Phase::Lock,
        Phase::Catalog,
        Phase::Plan,
        Phase::StateRead,
        Phase::StateWrite,
        Phase::Plugins,
        Phase::DefaultRoute,
        Phase::Status,
        Phase::Netns,
        Phase::Ipam,
    ];

    /// The metric label and the log field.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Lock => "lock",
            Phase::Catalog => "catalog",
            Phase::Plan => "plan",
            Phase::StateRead => "state_read",
            Phase::StateWrite => "state_write",
            Phase::Plugins => "plugins",
            Phase::DefaultRoute => "default_route",
            Phase::Status => "status",
            Phase::Netns => "netns",
            Phase::Ipam => "ipam",
        }
    }

    /// Timed within another phase (`plugins`), so not to be added to the others.
    pub fn is_nested(self) -> bool {
        matches!(self, Phase::Netns | Phase::Ipam)
    }
}

/// Runs `request` with `verb` as the verb its phases are labelled with.
///
/// Not an `async fn`, which would keep `request` twice in its state (see
/// `netlink::shared::per_request`).
pub fn for_verb<F: Future>(verb: Command, request: F) -> impl Future<Output = F::Output> {
    VERB.scope(verb, request)
}

/// The verb of the request this task serves, if any.
pub(crate) fn current_verb() -> Option<Command> {
    VERB.try_with(|v| *v).ok()
}

/// Times `phase` until dropped.
#[must_use = "the phase is timed until the timer is dropped"]
pub struct Timer {
    phase: Phase,
    verb: Option<Command>,
    started: Instant,
}

/// Starts timing `phase` of the current request.
pub fn start(phase: Phase) -> Timer {
    Timer { phase, verb: current_verb(), started: Instant::now() }
}

/// Times `phase` around `work`.
///
/// The timer starts when this is called (callers await it at once) and stops when `work`
/// ends or is dropped; not an `async fn`, which would keep `work` twice in its state.
pub fn timed<F: Future>(phase: Phase, work: F) -> impl Future<Output = F::Output> {
    let timer = start(phase);
    work.map(move |output| {
        drop(timer);
        output
    })
}

/// Told of the end of every phase once set: the failpoints set it when one is armed, so a
/// test can crash the agent right after any phase of a request (`crate::failpoint`).
static ON_END: OnceLock<fn(Option<Command>, Phase)> = OnceLock::new();

/// Sets what is told of the end of every phase; the first call wins.
pub fn on_end(hook: fn(Option<Command>, Phase)) {
    let _ = ON_END.set(hook);
}

impl Drop for Timer {
    fn drop(&mut self) {
        record(self.verb, self.phase, self.started.elapsed());
        if let Some(hook) = ON_END.get() {
            hook(self.verb, self.phase);
        }
    }
}

fn record(verb: Option<Command>, phase: Phase, elapsed: Duration) {
    tracing::debug!(phase = phase.as_str(), elapsed_us = elapsed.as_micros() as u64, "phase done");
    crate::metrics::metrics().phase(verb, phase.as_str(), elapsed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No wildcard: a new phase fails to compile here until it is placed in [`Phase::ALL`]
    /// (and so gets its metric label and its failpoint).
    fn position(phase: Phase) -> usize {
        match phase {
            Phase::Lock => 0,
            Phase::Catalog => 1,
            Phase::Plan => 2,
            Phase::StateRead => 3,
            Phase::StateWrite => 4,
            Phase::Plugins => 5,
            Phase::DefaultRoute => 6,
            Phase::Status => 7,
            Phase::Netns => 8,
            Phase::Ipam => 9,
        }
    }

    #[test]
    fn every_phase_is_listed_once() {
        for (i, phase) in Phase::ALL.iter().enumerate() {
            assert_eq!(position(*phase), i, "{phase:?}");
        }
    }

    #[test]
    fn every_phase_has_its_own_label() {
        let labels: std::collections::BTreeSet<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(labels.len(), Phase::ALL.len());
        assert_eq!(
            Phase::ALL.iter().filter(|p| p.is_nested()).map(|p| p.as_str()).collect::<Vec<_>>(),
            ["netns", "ipam"]
        );
    }

    #[tokio::test]
    async fn a_phase_is_labelled_with_the_verb_of_the_request_it_belongs_to() {
        let before = |verb: &str| crate::metrics::phase_count(verb, "catalog");
        let (add, other) = (before("ADD"), before("other"));
        for_verb(Command::Add, async {
            let _t = start(Phase::Catalog);
        })
        .await;
        assert_eq!(before("ADD"), add + 1);
        assert_eq!(before("other"), other, "inside a request, not `other`");
        timed(Phase::Catalog, async {}).await;
        assert_eq!(before("other"), other + 1, "outside any request: `other`");
        // A task spawned by the request is another task: its phases are not the request's.
        for_verb(Command::Add, async {
            tokio::spawn(async { drop(start(Phase::Catalog)) }).await.expect("task");
        })
        .await;
        assert_eq!((before("ADD"), before("other")), (add + 1, other + 2));
    }
}
