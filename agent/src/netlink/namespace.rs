//! The one way into a network namespace: a thread of its own that entered it with setns. It
//! serves both netlink (a socket opened there stays there, whichever thread uses it later) and
//! blocking work that sees the namespace of the calling thread (sysctls under /proc/sys/net,
//! raw sockets). The agent's own threads never change namespace, so nothing here can leak a
//! pod's view of the network into the rest of the agent.
//!
//! The threads are kept: after the work, a thread goes back to the namespace it was born in
//! (the agent's) and waits for the next entry, so an ADD does not spawn a thread per entry. A
//! thread that cannot get back ends instead, taking the pod's namespace with it.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;

use futures::channel::oneshot;
use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};
use rtnetlink::Handle;

use super::NamespaceError;

/// One entry into a namespace, run on a namespace thread: true when the thread is back in its
/// own namespace afterwards (and so may serve another).
type Entry = Box<dyn FnOnce() -> bool + Send>;

/// Namespace threads waiting for an entry; at most [`MAX_WAITING`] (more end after their work).
static WAITING: Mutex<Vec<mpsc::Sender<Entry>>> = Mutex::new(Vec::new());
const MAX_WAITING: usize = 4;

/// Runs `work` on a thread that entered the network namespace at `netns` (a path such as
/// /var/run/netns/x or /proc/PID/ns/net), and returns what it returned. Err says why the
/// namespace could not be entered.
///
/// A thread of its own, because setns changes the namespace of the calling thread: on a tokio
/// worker (or a blocking-pool thread) it would silently move unrelated tasks into the pod.
pub async fn run_in<T, F>(netns: &Path, work: F) -> Result<T, NamespaceError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let path = netns.to_path_buf();
    let entry: Entry = Box::new(move || {
        let home = match File::open("/proc/thread-self/ns/net") {
            Ok(home) => home,
            Err(source) => {
                let _ =
                    tx.send(Err(NamespaceError::Open { netns: "/proc/thread-self/ns/net".into(), source }));
                return true;
            }
        };
        match enter(&path) {
            // Never left.
            Err(e) => {
                let _ = tx.send(Err(e));
                true
            }
            Ok(()) => {
                let result = work();
                let back = setns(home.as_fd(), CloneFlags::CLONE_NEWNET).is_ok();
                // The receiver only disappears if the caller gave up; nobody is left to tell.
                let _ = tx.send(Ok(result));
                back
            }
        }
    });
    hand_over(entry).map_err(|source| NamespaceError::Thread { netns: netns.to_path_buf(), source })?;
    rx.await.map_err(|_| NamespaceError::ThreadDied { netns: netns.to_path_buf() })?
}

/// Gives `entry` to a waiting namespace thread, or to a new one.
fn hand_over(mut entry: Entry) -> std::io::Result<()> {
    loop {
        let waiting = WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let Some(thread) = waiting else { break };
        // A thread that ended (it panicked in its work) hands the entry back.
        match thread.send(entry) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => entry = back,
        }
    }
    let (tx, rx) = mpsc::channel::<Entry>();
    tx.send(entry).map_err(|_| std::io::Error::other("a new channel refused its first entry"))?;
    thread::Builder::new().name("plexus-netns".to_owned()).spawn(move || {
        while let Ok(entry) = rx.recv() {
            if !entry() {
                return;
            }
            let mut waiting = WAITING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if waiting.len() >= MAX_WAITING {
                return;
            }
            waiting.push(tx.clone());
        }
    })?;
    Ok(())
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

    /// The namespace a thread is in, as (device, inode) of its nsfs file.
    fn namespace_of_this_thread() -> (u64, u64) {
        let meta = std::fs::metadata("/proc/thread-self/ns/net").unwrap();
        (std::os::unix::fs::MetadataExt::dev(&meta), std::os::unix::fs::MetadataExt::ino(&meta))
    }

    /// Root only: makes a namespace with `unshare` on a thread of its own (the test's threads
    /// never change namespace either) and pins it at a path.
    #[tokio::test]
    async fn kernel_threads_are_reused_and_go_back_home_between_entries() {
        let dir = tempfile::tempdir().unwrap();
        let pinned = dir.path().join("ns");
        std::fs::write(&pinned, "").unwrap();
        let target = pinned.clone();
        std::thread::spawn(move || {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            nix::mount::mount(
                Some("/proc/thread-self/ns/net"),
                &target,
                None::<&str>,
                nix::mount::MsFlags::MS_BIND,
                None::<&str>,
            )
            .unwrap();
        })
        .join()
        .unwrap();
        let home = namespace_of_this_thread();
        let inside = || (namespace_of_this_thread(), thread::current().id());
        let mut threads = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let (ns, thread) = run_in(&pinned, inside).await.unwrap();
            assert_ne!(ns, home, "the work runs in the pod's namespace");
            // Entering the namespace the thread is in: where a reused thread waited.
            let (back, _) = run_in(Path::new("/proc/thread-self/ns/net"), inside).await.unwrap();
            assert_eq!(back, home, "a thread goes home after an entry");
            threads.insert(format!("{thread:?}"));
        }
        nix::mount::umount(&pinned).unwrap();
        // Other tests enter namespaces meanwhile and may take a waiting thread; not all 20.
        assert!(threads.len() < 10, "{} threads for 20 entries: not reused", threads.len());
    }

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
