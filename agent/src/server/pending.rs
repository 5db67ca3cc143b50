//! Connections that have not delivered their request yet. The shim writes its request as
//! soon as it connects, so a connection stays here for microseconds; the ones that linger are
//! slow, stuck or hostile. Their number is bounded: past the bound, the oldest is told to
//! give up, so a pile of idle connections never keeps the runtime's fresh one waiting, and
//! neither file descriptors nor buffers grow with them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// The registry; one per listener.
#[derive(Debug)]
pub struct Pending {
    max: usize,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: u64,
    /// By arrival: the first entry is the oldest.
    open: BTreeMap<u64, Arc<Notify>>,
}

impl Pending {
    /// At most `max` (at least 1) connections wait for their request at once.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Pending { max: max.max(1), inner: Mutex::new(Inner::default()) })
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Registers a new connection; if that makes one too many, the oldest is evicted (its
    /// [`Ticket::evicted`] fires). Returns the ticket and how many were evicted.
    pub fn register(self: &Arc<Self>) -> (Ticket, usize) {
        let evict = Arc::new(Notify::new());
        let mut inner = self.lock();
        let id = inner.next;
        inner.next += 1;
        inner.open.insert(id, evict.clone());
        let mut evicted = 0;
        while inner.open.len() > self.max {
            if let Some((_, oldest)) = inner.open.pop_first() {
                // Stores a permit if the connection is not waiting yet: it sees it next.
                oldest.notify_one();
                evicted += 1;
            }
        }
        (Ticket { pending: self.clone(), id, evict }, evicted)
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.lock().open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The critical sections cannot panic; a poisoned lock still holds a consistent map.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A connection's place in the registry; leaving it (drop) frees the place.
#[derive(Debug)]
pub struct Ticket {
    pending: Arc<Pending>,
    id: u64,
    evict: Arc<Notify>,
}

impl Ticket {
    /// How many connections may wait at once.
    pub fn bound(&self) -> usize {
        self.pending.max
    }

    /// Completes when newer connections pushed this one out.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.pending.lock().open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn fired(t: &Ticket) -> bool {
        tokio::time::timeout(Duration::from_millis(20), t.evicted()).await.is_ok()
    }

    #[tokio::test]
    async fn the_oldest_waiting_connection_is_evicted_past_the_bound() {
        let pending = Pending::new(2);
        let (a, e1) = pending.register();
        let (b, e2) = pending.register();
        assert_eq!((e1, e2, pending.len()), (0, 0, 2));
        let (c, e3) = pending.register();
        assert_eq!((e3, pending.len()), (1, 2));
        assert!(fired(&a).await, "the oldest is told to go");
        assert!(!fired(&b).await && !fired(&c).await, "the newer ones stay");
        drop(a);
        assert_eq!(pending.len(), 2, "an evicted ticket's place is already gone");
    }

    #[tokio::test]
    async fn a_connection_that_delivered_frees_its_place() {
        let pending = Pending::new(2);
        let (a, _) = pending.register();
        let (b, _) = pending.register();
        drop(a);
        let (c, evicted) = pending.register();
        assert_eq!((evicted, pending.len()), (0, 2));
        assert!(!fired(&b).await && !fired(&c).await);
        drop((b, c));
        assert!(pending.is_empty());
    }
}
