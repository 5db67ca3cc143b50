//! What the port mapping and bandwidth services share: an object loaded in the background
//! while the agent already serves CNI requests, the records of its attachments, and the wait
//! of every operation for both.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::records::{Record, RecordStore, StoreError};

/// An attachment: (container ID, pod interface).
pub type Key = (String, String);

/// How long an operation waits for the object to load before failing with "unavailable".
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// A service's state once loaded: its object (or why it is not there) and its records.
pub struct State<D, R> {
    pub ready: bool,
    pub dataplane: Result<D, String>,
    pub records: BTreeMap<Key, R>,
}

impl<D, R> State<D, R> {
    /// A loaded state, not yet published (see [`Gate::publish`]).
    pub fn loaded(dataplane: Result<D, String>, records: BTreeMap<Key, R>) -> Self {
        State { ready: true, dataplane, records }
    }
}

/// The state behind a lock, published once by the background load.
pub struct Gate<D, R> {
    state: Mutex<State<D, R>>,
    published: Condvar,
}

impl<D, R> Default for Gate<D, R> {
    fn default() -> Self {
        Gate {
            state: Mutex::new(State {
                ready: false,
                dataplane: Err("the dataplane is still loading".into()),
                records: BTreeMap::new(),
            }),
            published: Condvar::new(),
        }
    }
}

impl<D, R> Gate<D, R> {
    /// Publishes the loaded state and wakes the operations waiting for it.
    pub fn publish(&self, state: State<D, R>) {
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = state;
        self.published.notify_all();
    }

    /// The state, once published (or after [`LOAD_TIMEOUT`], still "loading"). A panic while
    /// holding the lock leaves maps and records as consistent as any crash, so a poisoned lock
    /// is taken over.
    pub fn lock(&self) -> MutexGuard<'_, State<D, R>> {
        let guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.published.wait_timeout_while(guard, LOAD_TIMEOUT, |s| !s.ready) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}

/// Every record of the store, by attachment.
pub fn load_records<R: Record>(store: &RecordStore<R>) -> Result<BTreeMap<Key, R>, StoreError> {
    Ok(store
        .load_all()?
        .into_iter()
        .map(|r| ((r.container_id().to_owned(), r.ifname().to_owned()), r))
        .collect())
}

/// GC: the attachments of `network` that are not in `valid`.
pub fn stale<R>(
    records: &BTreeMap<Key, R>,
    network: &str,
    valid: &[Key],
    network_of: impl Fn(&R) -> &str,
) -> Vec<Key> {
    records
        .iter()
        .filter(|(k, r)| network_of(r) == network && !valid.contains(k))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The node's interfaces (index, name), so that reconciling leaves hooks of vanished ones
/// alone; None when netlink cannot say.
pub async fn node_interfaces() -> Option<BTreeSet<(u32, String)>> {
    super::portmap::netdev::snapshot()
        .await
        .ok()
        .map(|(node, _)| node.into_iter().map(|i| (i.index, i.name)).collect())
}
