use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::thread;

use futures::channel::oneshot;
use netlink_packet_route::RouteNetlinkMessage;
use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, NSFS_MAGIC};
use rtnetlink::proto::Connection;
use rtnetlink::Handle;

use super::NetnsError;

/// A netlink handle whose socket lives in the network namespace at `netns` (a path such as
/// /var/run/netns/x or /proc/PID/ns/net).
///
/// The socket's connection runs as a task on the caller's tokio runtime and ends once the
/// handle and all its clones are dropped.
pub async fn netlink_in(netns: &Path) -> Result<Handle, NetnsError> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| NetnsError::NoRuntime { netns: netns.to_path_buf() })?;
    let (tx, rx) = oneshot::channel();
    let path = netns.to_path_buf();
    // A dedicated thread, because setns changes the namespace of the calling thread for good: on
    // a tokio worker (or a reused blocking-pool thread) it would silently move unrelated tasks
    // into the pod. The thread ends right after, taking the pod's namespace with it.
    thread::Builder::new()
        .name("plexus-netns".to_owned())
        .spawn(move || {
            // The receiver only disappears if the caller gave up; nobody is left to tell.
            let _ = tx.send(connect_in(&path, &runtime));
        })
        .map_err(|source| NetnsError::Thread { netns: netns.to_path_buf(), source })?;
    let (connection, handle) =
        rx.await.map_err(|_| NetnsError::ThreadDied { netns: netns.to_path_buf() })??;
    tokio::spawn(connection);
    Ok(handle)
}

/// Enters `netns` on the current thread and opens a netlink socket there; the kernel ties the
/// socket to the namespace it was created in, whichever thread uses it afterwards.
fn connect_in(
    netns: &Path,
    runtime: &tokio::runtime::Handle,
) -> Result<(Connection<RouteNetlinkMessage>, Handle), NetnsError> {
    let ns = File::open(netns).map_err(|source| NetnsError::Open { netns: netns.to_path_buf(), source })?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|source| NetnsError::Enter { netns: netns.to_path_buf(), source })?;
    // The socket registers with the reactor of the current runtime context, so this thread has to
    // enter the caller's runtime even though it never runs a task.
    let _context = runtime.enter();
    // Unsolicited messages (multicast) are never subscribed to; dropping their receiver lets the
    // connection task end as soon as the handle goes away.
    let (connection, handle, _unsolicited) = rtnetlink::new_connection()
        .map_err(|source| NetnsError::Socket { netns: netns.to_path_buf(), source })?;
    Ok((connection, handle))
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
