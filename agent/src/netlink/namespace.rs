//! The one way into a network namespace: a thread of its own that entered it with setns. It
//! serves both netlink (a socket opened there stays there, whichever thread uses it later) and
//! blocking work that sees the namespace of the calling thread (sysctls under /proc/sys/net,
//! raw sockets). The agent's own threads never change namespace, so nothing here can leak a
//! pod's view of the network into the rest of the agent.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::thread;

use futures::channel::oneshot;
use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};
use rtnetlink::Handle;

use super::NamespaceError;

/// Runs `work` on a new thread that entered the network namespace at `netns` (a path such as
/// /var/run/netns/x or /proc/PID/ns/net), and returns what it returned. Err says why the
/// namespace could not be entered.
///
/// A dedicated thread, because setns changes the namespace of the calling thread for good: on
/// a tokio worker (or a reused blocking-pool thread) it would silently move unrelated tasks
/// into the pod. The thread ends with `work`, taking the pod's namespace with it.
pub async fn run_in<T, F>(netns: &Path, work: F) -> Result<T, NamespaceError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let path = netns.to_path_buf();
    thread::Builder::new()
        .name("plexus-netns".to_owned())
        .spawn(move || {
            // The receiver only disappears if the caller gave up; nobody is left to tell.
            let _ = tx.send(enter(&path).map(|()| work()));
        })
        .map_err(|source| NamespaceError::Thread { netns: netns.to_path_buf(), source })?;
    rx.await.map_err(|_| NamespaceError::ThreadDied { netns: netns.to_path_buf() })?
}

fn enter(netns: &Path) -> Result<(), NamespaceError> {
    let ns =
        File::open(netns).map_err(|source| NamespaceError::Open { netns: netns.to_path_buf(), source })?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|source| NamespaceError::Enter { netns: netns.to_path_buf(), source })
}

/// An rtnetlink handle whose socket lives in the network namespace at `netns`: the kernel ties
/// a netlink socket to the namespace it was created in. Its connection runs as a task on the
/// caller's tokio runtime and ends once the handle and all its clones are dropped.
pub(super) async fn socket_in(netns: &Path) -> Result<Handle, NamespaceError> {
    let _timer = crate::phase::start(crate::phase::Phase::Netns);
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| NamespaceError::NoRuntime { netns: netns.to_path_buf() })?;
    let opened = run_in(netns, move || {
        // The socket registers with the reactor of the current runtime context, so the thread
        // has to enter the caller's runtime even though it never runs a task.
        let _context = runtime.enter();
        rtnetlink::new_connection()
    })
    .await?;
    // Unsolicited messages (multicast) are never subscribed to; dropping their receiver lets the
    // connection task end as soon as the handle goes away.
    let (connection, handle, _unsolicited) =
        opened.map_err(|source| NamespaceError::Socket { netns: netns.to_path_buf(), source })?;
    tokio::spawn(connection);
    Ok(handle)
}

/// True when the netns path exists and is a network namespace (used to answer DEL on a vanished
/// netns gracefully).
pub fn netns_exists(netns: &Path) -> bool {
    // A deleted named netns can leave its mount point behind as an ordinary empty file, so
    // existence of the path alone proves nothing.
    let Ok(file) = File::open(netns) else {
        return false;
    };
    is_nsfs(&file) && namespace_type(&file) == Some(CloneFlags::CLONE_NEWNET.bits())
}

fn is_nsfs(file: &File) -> bool {
    fstatfs(file).is_ok_and(|fs| fs.filesystem_type() == NSFS_MAGIC)
}

/// The CLONE_NEW* flag of the namespace `file` refers to (ioctl NS_GET_NSTYPE, Linux 4.11+).
fn namespace_type(file: &File) -> Option<i32> {
    // SAFETY: NS_GET_NSTYPE takes no argument and only reads the open descriptor, which `file`
    // keeps alive for the duration of the call.
    let kind = unsafe { nix::libc::ioctl(file.as_raw_fd(), nix::libc::NS_GET_NSTYPE) };
    (kind >= 0).then_some(kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::Netlink;

    #[tokio::test]
    async fn a_missing_namespace_is_reported_by_path() {
        let err = run_in(Path::new("/nonexistent/netns"), || ()).await.unwrap_err();
        assert!(matches!(err, NamespaceError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("/nonexistent/netns"), "{err}");
    }

    #[tokio::test]
    async fn a_pods_socket_names_a_missing_netns() {
        let missing = Path::new("/var/run/netns/plx-nt-does-not-exist");
        let err = Netlink::pod(missing).await.expect_err("no such netns");
        assert!(matches!(err, NamespaceError::Open { .. }), "{err:?}");
        assert!(err.to_string().contains("/var/run/netns/plx-nt-does-not-exist"), "{err}");
    }

    #[tokio::test]
    async fn a_pods_socket_refuses_a_namespace_of_another_kind() {
        let err = Netlink::pod(Path::new("/proc/self/ns/uts")).await.expect_err("not a network namespace");
        assert!(matches!(err, NamespaceError::Enter { .. }), "{err:?}");
    }
}
