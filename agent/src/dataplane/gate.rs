//! A service's state behind one lock: its object, loaded in the background while the agent
//! already serves CNI requests (or why it is not there), and the records of its attachments.
//! Every operation waits for the load to be published.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::loader::ObjectError;
use super::records::{Record, StoreError};
use crate::cni::AttachmentKey;

/// How long an operation waits for the object to load before failing with "unavailable".
const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a service has no object: cheap to clone into every error that reports it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unloaded {
    #[error("the dataplane is still loading")]
    Loading,
    #[error("the loading task failed: {0}")]
    Task(#[source] Arc<tokio::task::JoinError>),
    #[error(transparent)]
    Records(Arc<StoreError>),
    #[error("{0} (the agent loads it again, waiting longer after each failure; its log has every attempt)")]
    Object(Arc<ObjectError>),
}

/// The records of a service, by attachment.
pub type Records<E> = BTreeMap<AttachmentKey, Record<E>>;

/// A service's state once loaded: its object (or why it is not there) and its records.
pub struct State<D, E> {
    ready: bool,
    pub object: Result<D, Unloaded>,
    pub records: Records<E>,
}

impl<D, E> State<D, E> {
    /// A loaded state, not yet published (see [`Gate::publish`]).
    pub fn loaded(object: Result<D, Unloaded>, records: Records<E>) -> Self {
        State { ready: true, object, records }
    }
}

/// The state behind a lock, published once by the background load.
pub struct Gate<D, E> {
    state: Mutex<State<D, E>>,
    published: Condvar,
}

impl<D, E> Default for Gate<D, E> {
    fn default() -> Self {
        Gate {
            state: Mutex::new(State {
                ready: false,
                object: Err(Unloaded::Loading),
                records: BTreeMap::new(),
            }),
            published: Condvar::new(),
        }
    }
}

impl<D, E> Gate<D, E> {
    /// Publishes the loaded state and wakes the operations waiting for it.
    pub fn publish(&self, state: State<D, E>) {
        let mut guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *guard = state;
        self.published.notify_all();
    }

    /// The state, once published (or after [`LOAD_TIMEOUT`], still "loading"). A panic while
    /// holding the lock leaves maps and records as consistent as any crash, so a poisoned lock
    /// is taken over.
    pub fn lock(&self) -> MutexGuard<'_, State<D, E>> {
        let guard = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.published.wait_timeout_while(guard, LOAD_TIMEOUT, |s| !s.ready) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}
