//! Keeps a watch running forever: streaming lists where the server offers them, paginated
//! list + watch otherwise; relists at once when the server says the watch's
//! resourceVersion is too old, backs off only on real failures; says whether the cache is
//! current.
//!
//! A streaming list (Kubernetes 1.27+, `sendInitialEvents`) gets the initial state from the
//! API server's watch cache in one watch, without a separate list. Servers without it refuse
//! the parameters (400/422: the `WatchList` feature gate is off, or the server predates it);
//! a server that ignores them never sends the initial-events-end bookmark. Either way the
//! watch falls back to list + watch, and the list asks for `resourceVersion=0` so it is
//! answered from the watch cache (indexed by `spec.nodeName` for pods), not by a quorum read
//! of every pod in etcd.
//!
//! What happens when the API server goes away (a restart, an upgrade, a network cut):
//! - a watch that breaks mid-stream resumes from its last resourceVersion (kube's watcher);
//! - a watch or list that cannot start is a failure: the cache is no longer known to be
//!   current (`synced` false: `/readyz` answers not ready), one WARN says so, later attempts
//!   log at DEBUG, each after a backoff that grows from [`WatchBackoff::first`] to
//!   [`WatchBackoff::max`]; the next attempt relists, so the cache is current again exactly
//!   when that list is complete, and one INFO says so with the outage's length;
//! - `410 Gone` ("Expired": the resourceVersion is older than the server's history, as after
//!   a restart) is not a failure of the server: the watch relists at once, without backoff,
//!   whether the server said it as an ERROR event in the watch or as the watch's HTTP status.
//!
//! A resource that may be absent (a CRD the cluster need not install, [`Sink::if_not_served`])
//! takes `404 Not Found` as "no objects": the cache is emptied and current, one INFO says so,
//! and the watch checks again, quietly, after the same growing wait.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use ::kube::runtime::watcher::{self, Event};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::api_error::{describe_watch, watch_code};
use crate::metrics::metrics;

/// How long a streaming list may take before the server is taken to ignore it (the default
/// of [`Settings::streaming_init_limit`]). The caches hold one node's pods and the NADs,
/// which a server streams in well under this.
pub const STREAMING_INIT_LIMIT: Duration = Duration::from_secs(30);

/// The wait before retrying a failed watch: it doubles from `first` up to `max` while the
/// failures go on, and starts again from `first` once the watch works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchBackoff {
    pub first: Duration,
    pub max: Duration,
}

impl Default for WatchBackoff {
    /// client-go's first wait; a lower ceiling than its 30 s, because a node agent's caches
    /// decide which networks a pod gets: after an outage the caches are current again at
    /// most 10 s after the API server is.
    fn default() -> Self {
        WatchBackoff { first: Duration::from_millis(800), max: Duration::from_secs(10) }
    }
}

/// How a watch runs.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// A streaming list not complete within this is given up for list + watch.
    pub streaming_init_limit: Duration,
    pub backoff: WatchBackoff,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { streaming_init_limit: STREAMING_INIT_LIMIT, backoff: WatchBackoff::default() }
    }
}

/// Whether a watch error means the server does not do streaming lists.
fn refuses_streaming(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchStartFailed(_)
        | watcher::Error::WatchFailed(_)
        | watcher::Error::WatchError(_) => {
            matches!(watch_code(e), Some(400 | 422))
        }
        _ => false,
    }
}

/// What one error of the watch stream calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reaction {
    /// 404 for a resource that may be absent: it has no objects. Check again later.
    NotServed,
    /// The server does not do streaming lists: list + watch from now on.
    NoStreaming,
    /// 410 Gone: the resourceVersion is older than the server's history. Relist now.
    Relist,
    /// A watch that was running broke: kube's watcher resumes it from its resourceVersion.
    Resume,
    /// The watch or list could not start, or the server reported an error: the cache is no
    /// longer known to be current. Back off, then relist.
    Fail,
}

fn react(e: &watcher::Error, streaming: bool, optional: bool) -> Reaction {
    if streaming && refuses_streaming(e) {
        return Reaction::NoStreaming;
    }
    match watch_code(e) {
        Some(410) => return Reaction::Relist,
        Some(404) if optional => return Reaction::NotServed,
        _ => {}
    }
    match e {
        watcher::Error::WatchFailed(_) => Reaction::Resume,
        _ => Reaction::Fail,
    }
}

/// What an event of the stream is to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A list (or relist) begins. In list + watch mode kube's watcher says so before it
    /// sends the list request, so it is no sign the server answered (and resets no backoff).
    Start,
    /// A list (or relist) in progress.
    Listing,
    /// The list is complete.
    Listed,
    /// A change seen by a running watch.
    Change,
}

fn step_of<K>(event: &Event<K>) -> Step {
    match event {
        Event::Init => Step::Start,
        Event::InitApply(_) => Step::Listing,
        Event::InitDone => Step::Listed,
        Event::Apply(_) | Event::Delete(_) => Step::Change,
    }
}

/// The waits between failed attempts.
struct Backoff {
    policy: WatchBackoff,
    next: Duration,
    last_failure: Option<Instant>,
}

impl Backoff {
    fn new(policy: WatchBackoff) -> Self {
        Backoff { policy, next: policy.first, last_failure: None }
    }

    fn reset(&mut self) {
        self.next = self.policy.first;
    }

    /// The wait after one more failure: between half and all of the current step (spread,
    /// so the agents of every node do not retry in step), never more than `max`.
    fn failure(&mut self) -> Duration {
        let now = Instant::now();
        // A watch that resumed without error and without events since (nothing changed)
        // worked: a failure long after the last one starts over.
        if self.last_failure.is_some_and(|t| now.duration_since(t) > self.policy.max * 2) {
            self.reset();
        }
        self.last_failure = Some(now);
        let step = self.next.min(self.policy.max);
        self.next = (step * 2).min(self.policy.max);
        let spread = std::collections::hash_map::RandomState::new().build_hasher().finish() % 1000;
        step / 2 + step / 2 * u32::try_from(spread).unwrap_or(0) / 1000
    }
}

/// Whether the cache is current, and the log lines and metrics of its changes.
struct Health {
    what: &'static str,
    synced: tokio::sync::watch::Sender<bool>,
    /// Failures since the API server last answered, and when the first was.
    outage: Option<(Instant, u32)>,
    /// When a relist began after the watch expired.
    expired_at: Option<Instant>,
    /// Whether the cache ever held the server's state.
    ever_synced: bool,
    /// Whether the server last said the resource is not served (and the cache is empty).
    not_served: bool,
}

impl Health {
    fn set_synced(&self, synced: bool) {
        metrics().kube_cache_synced(self.what, synced);
        self.synced.send_replace(synced);
    }

    /// A list (or relist) begins: the cache is not known to be current until it completes,
    /// except that a resource not served stays without objects until the server serves it.
    fn listing(&self) {
        if !self.not_served {
            self.set_synced(false);
        }
    }

    /// The server says the resource is not served, and it may be absent: no objects is its
    /// current state (the cache is empty).
    fn absent(&mut self, e: &watcher::Error, hint: &str, retry_within: Duration) {
        // News, or the answer that ends an outage (whose WARN wants an end).
        let news = !self.not_served || self.outage.is_some();
        self.not_served = true;
        self.ever_synced = true;
        self.outage = None;
        self.expired_at = None;
        self.set_synced(true);
        if news {
            tracing::info!(
                "{}: {}; the resource is not served (its CRD is not installed), so there are none; {hint}; \
                 checking again every {retry_within:?} at most",
                self.what,
                describe_watch(e)
            );
        } else {
            tracing::debug!("{}: still not served", self.what);
        }
    }

    fn failed(&mut self, e: &watcher::Error) {
        metrics().watch_errors(self.what);
        self.set_synced(false);
        match &mut self.outage {
            Some((_, failures)) => {
                *failures += 1;
                tracing::debug!("{}: still failing: {}", self.what, describe_watch(e));
            }
            None => {
                self.outage = Some((Instant::now(), 1));
                metrics().kube_outage(self.what);
                tracing::warn!(
                    "{}: {}; serving the cached state and retrying with backoff (not ready until the cache is \
                     current again)",
                    self.what,
                    describe_watch(e)
                );
            }
        }
    }

    fn expired(&mut self, e: &watcher::Error) {
        metrics().kube_relist(self.what, "expired");
        self.set_synced(false);
        self.expired_at.get_or_insert_with(Instant::now);
        tracing::info!("{}: {}; relisting now", self.what, describe_watch(e));
    }

    /// The initial state, or a relist, is complete.
    fn current(&mut self, objects: usize, mode: &str) {
        let first = !self.ever_synced;
        self.ever_synced = true;
        let outage = self.outage.take();
        let expired = self.expired_at.take();
        if outage.is_some() {
            metrics().kube_relist(self.what, "outage");
        }
        if std::mem::take(&mut self.not_served) {
            tracing::info!("{}: served now ({objects} objects, {mode})", self.what);
            self.set_synced(true);
            return;
        }
        match (first, outage, expired) {
            (true, None, _) => tracing::info!("{}: initial state complete ({objects} objects, {mode})", self.what),
            (_, Some((since, failures)), _) => tracing::info!(
                "cache of {} is current again ({objects} objects): the API server answered after {:.1} s ({failures} \
                 failed attempts)",
                self.what,
                since.elapsed().as_secs_f64()
            ),
            (false, None, Some(at)) => tracing::info!(
                "cache of {} is current again ({objects} objects), {:.1} s after its watch expired",
                self.what,
                at.elapsed().as_secs_f64()
            ),
            (false, None, None) => {
                tracing::info!("cache of {} is current again ({objects} objects)", self.what)
            }
        }
        // Said before it is current: whoever waits for it finds the line in the log.
        self.set_synced(true);
    }

    /// An event of a watch that resumed: the server answers again.
    fn answered(&mut self) {
        if let Some((since, failures)) = self.outage.take() {
            self.set_synced(true);
            tracing::info!(
                "{}: the watch resumed after {:.1} s ({failures} failed attempts)",
                self.what,
                since.elapsed().as_secs_f64()
            );
        }
    }
}

/// Where a watch's events go: a cache, and what it needs to know of the watch's failures.
pub trait Sink<K> {
    /// Applies an event to the cache; answers how many objects it holds.
    fn apply(&mut self, event: Event<K>) -> usize;

    /// A watch or list could not start (`why`: the server's answer, or why it could not be
    /// reached, as a person reads it); the cache is no longer known to be current.
    fn failed(&mut self, _why: &str) {}

    /// For a resource that may be absent (a CRD the cluster need not install): what to do to
    /// serve it. Then `404 Not Found` means no objects rather than a failure.
    fn if_not_served(&self) -> Option<&'static str> {
        None
    }
}

/// A cache that is only a function of the events.
struct ApplyFn<F>(F);

impl<K, F: FnMut(Event<K>) -> usize> Sink<K> for ApplyFn<F> {
    fn apply(&mut self, event: Event<K>) -> usize {
        (self.0)(event)
    }
}

/// Runs the watch `start` builds for each attempt, handing every event to `apply` (which
/// answers how many objects the cache holds), and keeps `synced` true exactly while the
/// cache holds the server's current state. Never returns.
pub async fn run<K, S>(
    what: &'static str,
    base: watcher::Config,
    settings: Settings,
    start: impl Fn(watcher::Config) -> S,
    apply: impl FnMut(Event<K>) -> usize,
    synced: tokio::sync::watch::Sender<bool>,
) where
    S: Stream<Item = watcher::Result<Event<K>>> + Send,
{
    run_into(what, base, settings, start, ApplyFn(apply), synced).await
}

/// [`run`], handing the events to `sink`, and telling it of failures.
pub async fn run_into<K, S>(
    what: &'static str,
    base: watcher::Config,
    settings: Settings,
    start: impl Fn(watcher::Config) -> S,
    mut sink: impl Sink<K>,
    synced: tokio::sync::watch::Sender<bool>,
) where
    S: Stream<Item = watcher::Result<Event<K>>> + Send,
{
    let init_limit = settings.streaming_init_limit;
    let not_served_hint = sink.if_not_served();
    let mut streaming = true;
    let mut backoff = Backoff::new(settings.backoff);
    let mut health =
        Health { what, synced, outage: None, expired_at: None, ever_synced: false, not_served: false };
    health.set_synced(false);
    loop {
        let config = if streaming {
            base.clone().streaming_lists()
        } else {
            // resourceVersion=0 is served from the watch cache, but kube only sends it for an
            // unpaginated list (the watch cache ignores limits): one page of this node's pods
            // or of the NADs is the cheap request, a paginated quorum read the costly one.
            let mut c = base.clone().any_semantic();
            c.page_size = None;
            c
        };
        let mode = if streaming { "streaming list" } else { "list + watch" };
        let stream = start(config);
        futures::pin_mut!(stream);
        // Set while a streaming list is in progress: its deadline.
        let mut init_deadline: Option<Instant> = None;
        // Set when this stream is given up: the wait before the next one.
        let wait = loop {
            let next = match init_deadline {
                Some(deadline) if streaming => match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        tracing::warn!(
                            "{what}: the API server started a streaming list but did not finish it within \
                             {init_limit:?} (it ignores sendInitialEvents?); using list + watch"
                        );
                        streaming = false;
                        break None;
                    }
                },
                _ => stream.next().await,
            };
            match next {
                Some(Ok(event)) => {
                    let step = step_of(&event);
                    if step != Step::Start {
                        backoff.reset();
                    }
                    if step == Step::Start {
                        init_deadline = Some(Instant::now() + init_limit);
                        health.listing();
                    }
                    // Applied before `synced` is set: whoever waits for it finds the state.
                    let objects = sink.apply(event);
                    match step {
                        Step::Start | Step::Listing => {}
                        Step::Listed => {
                            init_deadline = None;
                            health.current(objects, mode);
                        }
                        Step::Change => health.answered(),
                    }
                }
                Some(Err(e)) => match react(&e, streaming, not_served_hint.is_some()) {
                    Reaction::NoStreaming => {
                        tracing::info!(
                            "{what}: the API server refuses streaming lists ({}); using list + watch",
                            describe_watch(&e)
                        );
                        streaming = false;
                        break None;
                    }
                    Reaction::Relist => {
                        // A second 410 before the relist completed: not the usual restart,
                        // so not at full speed.
                        let again = health.expired_at.is_some();
                        health.expired(&e);
                        break again.then(|| backoff.failure());
                    }
                    Reaction::Resume => {
                        metrics().watch_errors(what);
                        let wait = backoff.failure();
                        tracing::debug!("{what}: {}; resuming in {wait:?}", describe_watch(&e));
                        tokio::time::sleep(wait).await;
                    }
                    Reaction::NotServed => {
                        if !health.not_served {
                            // An empty list: the cache holds what the server has, nothing.
                            sink.apply(Event::Init);
                            sink.apply(Event::InitDone);
                        }
                        health.absent(&e, not_served_hint.unwrap_or_default(), settings.backoff.max);
                        break Some(backoff.failure());
                    }
                    Reaction::Fail => {
                        health.failed(&e);
                        sink.failed(&describe_watch(&e));
                        break Some(backoff.failure());
                    }
                },
                // A watcher stream does not end; if it ever does, start over.
                None => break None,
            }
        };
        if let Some(wait) = wait {
            tracing::debug!("{what}: next attempt in {wait:?}");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::core::Status;

    fn api(code: u16) -> ::kube::Error {
        ::kube::Error::Api(Box::new(Status { code, ..Default::default() }))
    }

    #[test]
    fn only_bad_request_and_invalid_mean_no_streaming_lists() {
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(api(422))));
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(api(400))));
        assert!(refuses_streaming(&watcher::Error::WatchError(Box::new(Status {
            code: 422,
            ..Default::default()
        }))));
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(api(403))));
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(api(401))));
        assert!(!refuses_streaming(&watcher::Error::InitialListFailed(api(422))));
    }

    #[test]
    fn gone_relists_at_once_in_either_form_and_only_failures_to_start_back_off() {
        let gone_event = watcher::Error::WatchError(Box::new(Status { code: 410, ..Default::default() }));
        assert_eq!(react(&gone_event, false, false), Reaction::Relist);
        assert_eq!(react(&watcher::Error::WatchStartFailed(api(410)), true, false), Reaction::Relist);
        assert_eq!(react(&watcher::Error::InitialListFailed(api(410)), false, false), Reaction::Relist);
        assert_eq!(react(&watcher::Error::WatchStartFailed(api(503)), false, false), Reaction::Fail);
        assert_eq!(react(&watcher::Error::InitialListFailed(api(403)), false, false), Reaction::Fail);
        assert_eq!(react(&watcher::Error::WatchFailed(api(500)), false, false), Reaction::Resume);
        assert_eq!(react(&watcher::Error::WatchStartFailed(api(422)), true, false), Reaction::NoStreaming);
    }

    #[test]
    fn not_found_means_no_objects_only_for_a_resource_that_may_be_absent() {
        for e in [watcher::Error::WatchStartFailed(api(404)), watcher::Error::InitialListFailed(api(404))] {
            assert_eq!(react(&e, true, true), Reaction::NotServed);
            assert_eq!(react(&e, false, false), Reaction::Fail);
        }
        assert_eq!(react(&watcher::Error::WatchStartFailed(api(403)), true, true), Reaction::Fail);
        assert_eq!(react(&watcher::Error::WatchStartFailed(api(410)), true, true), Reaction::Relist);
    }

    #[test]
    fn only_events_that_the_server_sent_reset_the_backoff() {
        // list + watch: kube's watcher emits Init before its list request, which may fail.
        assert_eq!(step_of::<()>(&Event::Init), Step::Start);
        assert_eq!(step_of(&Event::InitApply(())), Step::Listing);
        assert_eq!(step_of::<()>(&Event::InitDone), Step::Listed);
        assert_eq!(step_of(&Event::Apply(())), Step::Change);
        assert_eq!(step_of(&Event::Delete(())), Step::Change);
    }

    #[test]
    fn the_backoff_grows_to_its_ceiling_and_starts_over_after_success() {
        let policy = WatchBackoff { first: Duration::from_millis(800), max: Duration::from_secs(10) };
        let mut b = Backoff::new(policy);
        let waits: Vec<Duration> = (0..8).map(|_| b.failure()).collect();
        for (w, step) in waits.iter().zip([800u64, 1600, 3200, 6400, 10_000, 10_000, 10_000, 10_000]) {
            let step = Duration::from_millis(step);
            assert!(*w >= step / 2 && *w <= step, "{w:?} for a step of {step:?}");
        }
        b.reset();
        assert!(b.failure() <= policy.first);
        // Failures far apart: the watch worked in between.
        for _ in 0..5 {
            b.failure();
        }
        b.last_failure = Instant::now().checked_sub(policy.max * 3);
        assert!(b.failure() <= policy.first);
    }
}
