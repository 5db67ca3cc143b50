//! Which attachment a request or a record is about: a container and its interface, the pair
//! CNI identifies an attachment by (and `cni.dev/valid-attachments` lists for GC).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A container ID and the name of its interface in the container.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttachmentKey {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl AttachmentKey {
    pub fn new(container_id: impl Into<String>, ifname: impl Into<String>) -> Self {
        AttachmentKey { container_id: container_id.into(), ifname: ifname.into() }
    }
}

/// GC's `cni.dev/valid-attachments` as a delegate plugin reads it from its config: entries
/// without both keys are skipped (the engine validated the list it was given).
pub fn valid_attachments(config: &Value) -> Vec<AttachmentKey> {
    config
        .get("cni.dev/valid-attachments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| Some(AttachmentKey::new(a.get("containerID")?.as_str()?, a.get("ifname")?.as_str()?)))
        .collect()
}

impl fmt::Display for AttachmentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "container {} interface {}", self.container_id, self.ifname)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_and_write_the_gc_list_form() {
        let key: AttachmentKey = serde_json::from_str(r#"{"containerID":"c1","ifname":"net1"}"#).unwrap();
        assert_eq!(key, AttachmentKey::new("c1", "net1"));
        assert_eq!(serde_json::to_string(&key).unwrap(), r#"{"containerID":"c1","ifname":"net1"}"#);
        assert_eq!(key.to_string(), "container c1 interface net1");
    }

    #[test]
    fn valid_attachments_skip_incomplete_entries() {
        let config = serde_json::json!({"cni.dev/valid-attachments": [
            {"containerID": "a", "ifname": "net1"}, {"containerID": "b"}, {"ifname": "x"}]});
        assert_eq!(valid_attachments(&config), [AttachmentKey::new("a", "net1")]);
        assert!(valid_attachments(&serde_json::json!({})).is_empty());
    }
}
