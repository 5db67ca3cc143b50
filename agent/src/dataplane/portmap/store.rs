//! Durable records of the mappings installed per attachment, under `<state-dir>/portmap/`.
//! They are the truth the maps are reconciled with when the agent starts, what DEL removes
//! (no prevResult needed), what CHECK verifies, and what names the pod holding a host port in a
//! conflict.

use super::entries::Entry;
use crate::dataplane::records::{self, RecordEntry, RecordStore};

impl RecordEntry for Entry {
    const KIND: &'static str = "portmap";
}

/// The mappings of one attachment (container ID + pod interface).
pub type Record = records::Record<Entry>;

pub type Store = RecordStore<Entry>;
