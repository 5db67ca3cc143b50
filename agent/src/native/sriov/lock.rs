//! One operation at a time per VF, within this agent and across agents.
//!
//! The VF's record (see [`super::state`]) is the claim; this lock makes "look at the claim, then
//! take it" atomic. Two layers, because each covers what the other cannot:
//! - an in-process async mutex per VF, so concurrent requests in this agent queue up without
//!   blocking a runtime thread;
//! - `flock` on `<state_dir>/sriov/<pci>.lock`, so a second agent on the node (a rolling update
//!   overlapping the old one) waits too. The kernel drops the lock when its holder dies, so a
//!   crashed agent never leaves the VF locked.
//!
//! Lock files are never deleted: deleting one while another process waits on it would let two
//! holders lock two different files.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::OwnedMutexGuard;

use super::error::{SriovError, StateCause};

/// Held for the duration of one ADD, DEL, CHECK or GC of a VF.
#[derive(Debug)]
pub struct VfGuard {
    _file: Flock<File>,
    _local: OwnedMutexGuard<()>,
}

#[derive(Debug)]
pub struct VfLocks {
    dir: PathBuf,
    timeout: Duration,
    local: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// How often to retry a `flock` another process holds.
const POLL: Duration = Duration::from_millis(20);

impl VfLocks {
    /// Locks live in `dir`; waiting longer than `timeout` fails with "try again later".
    pub fn new(dir: &Path, timeout: Duration) -> VfLocks {
        VfLocks { dir: dir.to_path_buf(), timeout, local: Mutex::default() }
    }

    pub fn path(&self, pci: &str) -> PathBuf {
        self.dir.join(format!("{pci}.lock"))
    }

    pub async fn lock(&self, pci: &str) -> Result<VfGuard, SriovError> {
        let deadline = Instant::now() + self.timeout;
        let timeout =
            || SriovError::LockTimeout { pci: pci.to_owned(), lock: self.path(pci).display().to_string() };
        let mutex = {
            // A poisoned map only means another request panicked while inserting; the map is intact.
            let mut local = self.local.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(local.entry(pci.to_owned()).or_default())
        };
        let local = tokio::time::timeout(self.timeout, mutex.lock_owned()).await.map_err(|_| timeout())?;
        let path = self.path(pci);
        std::fs::create_dir_all(&self.dir).map_err(|e| lock_error(&self.dir, e))?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| lock_error(&path, e))?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return Ok(VfGuard { _file: locked, _local: local }),
                Err((returned, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = returned;
                    tokio::time::sleep(POLL).await;
                }
                Err((_, Errno::EWOULDBLOCK)) => return Err(timeout()),
                Err((_, errno)) => return Err(lock_error(&path, errno.into())),
            }
        }
    }
}

fn lock_error(path: &Path, e: std::io::Error) -> SriovError {
    SriovError::State { path: path.display().to_string(), cause: StateCause::Lock(e) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_per_vf_in_process_and_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let locks = VfLocks::new(dir.path(), Duration::from_millis(200));
        let held = locks.lock("0000:03:02.0").await.unwrap();
        // Another VF is independent.
        let _other = locks.lock("0000:03:02.1").await.unwrap();
        let err = locks.lock("0000:03:02.0").await.unwrap_err();
        assert!(matches!(err, SriovError::LockTimeout { .. }), "{err}");
        // A second agent has its own in-process locks but meets the same flock.
        let agent2 = VfLocks::new(dir.path(), Duration::from_millis(200));
        let err = agent2.lock("0000:03:02.0").await.unwrap_err();
        assert!(err.to_string().contains("0000:03:02.0.lock"), "{err}");
        drop(held);
        agent2.lock("0000:03:02.0").await.unwrap();
    }

    #[tokio::test]
    async fn waiters_get_the_lock_when_it_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let locks = Arc::new(VfLocks::new(dir.path(), Duration::from_secs(5)));
        let held = locks.lock("0000:03:02.0").await.unwrap();
        let waiter = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { locks.lock("0000:03:02.0").await.map(|_| ()) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(held);
        waiter.await.unwrap().unwrap();
    }
}
