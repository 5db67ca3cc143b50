//! Durable records of the limits installed per attachment, under `<state-dir>/bandwidth/`:
//! what the maps are reconciled with at start, what DEL removes without a prevResult, and what
//! `plexus-agent bandwidth set` updates.

use serde::{Deserialize, Serialize};

use super::plan::Entry;
use crate::dataplane::portmap::topology::AttachPoint;
pub use crate::dataplane::records::StoreError;
use crate::dataplane::records::{self, RecordStore};

/// The limits of one attachment (container ID + pod interface).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    /// `namespace/name`, when the runtime said (CNI_ARGS).
    #[serde(default)]
    pub pod: Option<String>,
    pub entries: Vec<Entry>,
    /// The TC hooks the entries need.
    pub hooks: Vec<AttachPoint>,
}

impl Record {
    pub fn owner(&self) -> String {
        records::owner(self.pod.as_deref(), &self.container_id, &self.ifname, &self.network)
    }
}

impl records::Record for Record {
    const KIND: &'static str = "bandwidth";
    fn container_id(&self) -> &str {
        &self.container_id
    }
    fn ifname(&self) -> &str {
        &self.ifname
    }
}

pub type Store = RecordStore<Record>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::new(d.path());
        assert!(store.load_all().unwrap().is_empty());
        assert_eq!(store.load("c1", "net1").unwrap(), None);
        let r = Record {
            container_id: "c1".into(),
            ifname: "net1".into(),
            network: "n".into(),
            pod: Some("ns/p".into()),
            entries: Vec::new(),
            hooks: Vec::new(),
        };
        store.save(&r).unwrap();
        assert_eq!(store.load_all().unwrap(), std::slice::from_ref(&r));
        assert_eq!(store.load("c1", "net1").unwrap(), Some(r.clone()));
        assert_eq!(r.owner(), "pod ns/p (container c1, interface net1, network n)");
        store.remove("c1", "net1").unwrap();
        store.remove("c1", "net1").unwrap();
        assert!(store.load_all().unwrap().is_empty());
    }
}
