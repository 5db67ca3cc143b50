//! One netlink socket per namespace for the whole of a request: the plugins of an ADD that
//! all work in the pod's namespace (the default network's, each secondary's, the default
//! route) share the socket the first of them opened, instead of each entering the pod again
//! on a new thread for a socket of its own; so do their sockets in the agent's namespace.
//!
//! The sockets live as long as the request ([`per_request`]): a socket in a pod's namespace
//! holds the namespace, which must go when the runtime deletes it. Outside a request (a task
//! the request spawned, a live change, the dataplane, the doctor) every
//! [`Netlink`](super::Netlink) opens its own, as before.

use std::cell::RefCell;
use std::future::Future;
use std::path::{Path, PathBuf};

use rtnetlink::Handle;

/// The sockets of one request: the namespace's path (None: the agent's) and the handle.
type Sockets = RefCell<Vec<(Option<PathBuf>, Handle)>>;

tokio::task_local! {
    static SOCKETS: Sockets;
}

/// Runs `request` with its own set of shared sockets, closed when it ends.
///
/// A plain function returning the scope, not an `async fn`: an `async fn` awaiting a future
/// it was given keeps that future twice in its state, and the request's future is large.
pub fn per_request<F: Future>(request: F) -> impl Future<Output = F::Output> {
    SOCKETS.scope(RefCell::new(Vec::new()), request)
}

/// The request's socket in `netns`, if it opened one.
pub(super) fn find(netns: Option<&Path>) -> Option<Handle> {
    SOCKETS
        .try_with(|sockets| {
            sockets.borrow().iter().find(|(ns, _)| ns.as_deref() == netns).map(|(_, handle)| handle.clone())
        })
        .ok()
        .flatten()
}

/// Keeps `handle` as the request's socket in `netns` (nothing outside a request).
pub(super) fn keep(netns: Option<&Path>, handle: &Handle) {
    let _ =
        SOCKETS.try_with(|sockets| sockets.borrow_mut().push((netns.map(Path::to_path_buf), handle.clone())));
}
