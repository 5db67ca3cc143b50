//! Durable records of the limits installed per attachment, under `<state-dir>/bandwidth/`:
//! what the maps are reconciled with at start, what DEL removes without a prevResult, what
//! CHECK verifies, and what `plexus-agent bandwidth set` updates.

use super::plan::Entry;
use crate::dataplane::records::{self, RecordEntry, RecordStore};

impl RecordEntry for Entry {
    const KIND: &'static str = "bandwidth";
}

/// The limits of one attachment (container ID + pod interface).
pub type Record = records::Record<Entry>;

pub type Store = RecordStore<Entry>;
