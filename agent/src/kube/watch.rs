//! Keeps a watch running forever: streaming lists where the server offers them, paginated
//! list + watch otherwise, backoff on errors.
//!
//! A streaming list (Kubernetes 1.27+, `sendInitialEvents`) gets the initial state from the
//! API server's watch cache in one watch, without a separate list. Servers without it refuse
//! the parameters (400/422: the `WatchList` feature gate is off, or the server predates it);
//! a server that ignores them never sends the initial-events-end bookmark. Either way the
//! watch falls back to list + watch, and the list asks for `resourceVersion=0` so it is
//! answered from the watch cache (indexed by `spec.nodeName` for pods), not by a quorum read
//! of every pod in etcd.

use std::time::Duration;

use ::kube::runtime::watcher::{self, Event};
use ::kube::runtime::WatchStreamExt;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::metrics::metrics;

/// How long a streaming list may take before the server is taken to ignore it (the default
/// of [`super::KubeCatalogConfig::streaming_init_limit`]). The caches hold one node's pods and
/// the NADs, which a server streams in well under this.
pub const STREAMING_INIT_LIMIT: Duration = Duration::from_secs(30);

/// Whether a watch error means the server does not do streaming lists.
fn refuses_streaming(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::WatchStartFailed(::kube::Error::Api(s))
        | watcher::Error::WatchFailed(::kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

/// Runs the watch `start` builds for each attempt, handing every event to `apply`, and
/// sets `synced` once the initial state is complete. A streaming list not complete within
/// `init_limit` is given up for list + watch. Never returns.
pub async fn run<K, S>(
    what: &'static str,
    base: watcher::Config,
    init_limit: Duration,
    start: impl Fn(watcher::Config) -> S,
    mut apply: impl FnMut(Event<K>),
    synced: tokio::sync::watch::Sender<bool>,
) where
    S: Stream<Item = watcher::Result<Event<K>>> + Send,
{
    let mut streaming = true;
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
        let stream = start(config).default_backoff();
        futures::pin_mut!(stream);
        // Set while a streaming list is in progress: its deadline.
        let mut init_deadline: Option<Instant> = None;
        loop {
            let next = match init_deadline {
                Some(deadline) if streaming => match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        tracing::warn!(
                            "{what}: the API server started a streaming list but did not finish it within \
                             {init_limit:?} (it ignores sendInitialEvents?); using list + watch"
                        );
                        streaming = false;
                        break;
                    }
                },
                _ => stream.next().await,
            };
            match next {
                Some(Ok(event)) => {
                    let done = matches!(event, Event::InitDone);
                    if matches!(event, Event::Init) {
                        init_deadline = Some(Instant::now() + init_limit);
                    }
                    // Applied before `synced` is set: whoever waits for it finds the state.
                    apply(event);
                    if done {
                        init_deadline = None;
                        if !*synced.borrow() {
                            tracing::info!(
                                "{what}: initial state complete ({})",
                                if streaming { "streaming list" } else { "list + watch" }
                            );
                        }
                        synced.send_replace(true);
                    }
                }
                Some(Err(e)) if streaming && refuses_streaming(&e) => {
                    tracing::info!(
                        "{what}: the API server refuses streaming lists ({e}); using list + watch"
                    );
                    streaming = false;
                    break;
                }
                Some(Err(e)) => {
                    metrics().watch_errors(what);
                    tracing::warn!("{what}: watch failed, retrying with backoff: {e}");
                }
                // A watcher stream does not end; if it ever does, start over.
                None => break,
            }
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
}
