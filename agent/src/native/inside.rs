//! Blocking work that has to happen inside a pod's network namespace rather than through a
//! netlink socket: sysctls under /proc/sys/net (which shows the namespace of the thread that
//! opens it) and packets on raw sockets (which belong to the namespace they are created in).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::thread;

use futures::channel::oneshot;
use nix::sched::{setns, CloneFlags};

/// Runs `work` on a new thread that entered the network namespace at `netns`, and returns what
/// it returned. Err says why the namespace could not be entered.
///
/// A dedicated thread, because setns changes the namespace of the calling thread for good: on
/// a tokio worker it would silently move unrelated tasks into the pod. The thread ends with
/// `work`, taking the pod's namespace with it.
pub async fn run<T, F>(netns: &Path, work: F) -> Result<T, String>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let path = netns.to_path_buf();
    thread::Builder::new()
        .name("plexus-netns-work".to_owned())
        .spawn(move || {
            // The receiver only disappears if the caller gave up; nobody is left to tell.
            let _ = tx.send(enter(&path).map(|()| work()));
        })
        .map_err(|e| format!("cannot start a thread for network namespace {}: {e}", netns.display()))?;
    rx.await.map_err(|_| format!("the thread working in network namespace {} died", netns.display()))?
}

fn enter(netns: &Path) -> Result<(), String> {
    let ns =
        File::open(netns).map_err(|e| format!("cannot open network namespace {}: {e}", netns.display()))?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot enter network namespace {}: {e}", netns.display()))
}

/// /proc/sys/<key...>; the key comes in parts because interface names may contain dots.
fn sysctl_path(key: &[&str]) -> PathBuf {
    key.iter().fold(PathBuf::from("/proc/sys"), |path, part| path.join(part))
}

/// Reads a sysctl of the calling thread's namespace, trimmed.
pub fn read_sysctl(key: &[&str]) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(sysctl_path(key))?.trim().to_owned())
}

/// Writes a sysctl of the calling thread's namespace.
pub fn write_sysctl(key: &[&str], value: &str) -> std::io::Result<()> {
    std::fs::write(sysctl_path(key), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_keep_dots_in_interface_names() {
        assert_eq!(
            sysctl_path(&["net", "ipv4", "conf", "eth0.100", "arp_notify"]),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/arp_notify")
        );
    }

    #[tokio::test]
    async fn a_missing_namespace_is_reported_by_path() {
        let err = run(Path::new("/nonexistent/netns"), || ()).await.unwrap_err();
        assert!(err.contains("/nonexistent/netns"), "{err}");
    }
}
