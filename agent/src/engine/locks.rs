//! One operation at a time per container (spec 7.3), any number across containers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

#[derive(Debug, Default)]
pub struct ContainerLocks {
    locks: Mutex<HashMap<String, Weak<AsyncMutex<()>>>>,
}

impl ContainerLocks {
    /// Waits until no other operation holds `container_id`, then holds it until the guard
    /// is dropped.
    pub async fn lock(&self, container_id: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(container_id).and_then(Weak::upgrade) {
                Some(l) => l,
                None => {
                    // Entries of finished containers are dropped as new ones arrive, so the
                    // map stays as large as the set of containers in flight.
                    map.retain(|_, w| w.strong_count() > 0);
                    let l = Arc::new(AsyncMutex::new(()));
                    map.insert(container_id.to_owned(), Arc::downgrade(&l));
                    l
                }
            }
        };
        crate::phase::timed(crate::phase::Phase::Lock, lock.lock_owned()).await
    }

    pub fn in_flight(&self) -> usize {
        self.locks.lock().map(|m| m.values().filter(|w| w.strong_count() > 0).count()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn same_container_is_serialized_and_different_ones_run_in_parallel() {
        let locks = Arc::new(ContainerLocks::default());
        let running = Arc::new(AtomicUsize::new(0));
        let max_same = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (locks, running, max_same) = (locks.clone(), running.clone(), max_same.clone());
            tasks.push(tokio::spawn(async move {
                let _g = locks.lock("same").await;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                max_same.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(max_same.load(Ordering::SeqCst), 1);
        let a = locks.lock("a").await;
        let b = tokio::time::timeout(Duration::from_secs(1), locks.lock("b")).await;
        assert!(b.is_ok(), "another container is not blocked");
        drop((a, b));
        assert_eq!(locks.in_flight(), 0);
    }
}
