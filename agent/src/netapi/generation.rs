//! Pure: whether a set may replace the stored network of the same namespace and name, by
//! the rules of Kubernetes' `metadata.generation` (docs/network-api.md).

use super::model::NetworkConfig;

/// What a set does to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetDecision {
    /// Nothing stored, a higher generation, or another object (a different uid).
    Write,
    /// The same generation of the same object, identical: nothing to write.
    Unchanged,
}

/// Why a set is refused (gRPC FailedPrecondition).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenerationError {
    #[error(
        "stale generation {offered}, the stored one is {stored}; send the object's current generation, or a higher one"
    )]
    Stale { offered: u32, stored: u32 },
    #[error("generation {generation} is stored with a different config: a change needs a higher generation")]
    ChangedWithoutNewGeneration { generation: u32 },
}

/// The decision for `offered` given what is `stored` under its name. A different uid is
/// another object (deleted and created again): it replaces whatever generation. Empty uids
/// compare equal.
pub fn decide(
    stored: Option<&NetworkConfig>,
    offered: &NetworkConfig,
) -> Result<SetDecision, GenerationError> {
    let Some(stored) = stored else { return Ok(SetDecision::Write) };
    if stored.metadata.uid != offered.metadata.uid {
        return Ok(SetDecision::Write);
    }
    let (old, new) = (stored.metadata.generation, offered.metadata.generation);
    match new.cmp(&old) {
        std::cmp::Ordering::Greater => Ok(SetDecision::Write),
        std::cmp::Ordering::Less => Err(GenerationError::Stale { offered: new, stored: old }),
        std::cmp::Ordering::Equal if stored == offered => Ok(SetDecision::Unchanged),
        std::cmp::Ordering::Equal => Err(GenerationError::ChangedWithoutNewGeneration { generation: new }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(uid: &str, generation: u32, plugin: &str) -> NetworkConfig {
        let mut c = NetworkConfig::default();
        c.metadata.name = "blue".into();
        c.metadata.uid = uid.into();
        c.metadata.generation = generation;
        c.cniv1_config.cni_version = "1.0.0".into();
        c.cniv1_config.plugins =
            vec![crate::netapi::model::PluginConfig { plugin_type: plugin.into(), ..Default::default() }];
        c
    }

    #[test]
    fn nothing_stored_is_written() {
        assert_eq!(decide(None, &config("u", 0, "bridge")), Ok(SetDecision::Write));
    }

    #[test]
    fn the_same_object_needs_a_higher_generation_to_change() {
        let stored = config("u", 3, "bridge");
        assert_eq!(decide(Some(&stored), &config("u", 4, "bridge")), Ok(SetDecision::Write));
        assert_eq!(decide(Some(&stored), &config("u", 4, "macvlan")), Ok(SetDecision::Write));
        assert_eq!(decide(Some(&stored), &config("u", 3, "bridge")), Ok(SetDecision::Unchanged));
        assert_eq!(
            decide(Some(&stored), &config("u", 3, "macvlan")),
            Err(GenerationError::ChangedWithoutNewGeneration { generation: 3 })
        );
        assert_eq!(
            decide(Some(&stored), &config("u", 2, "bridge")),
            Err(GenerationError::Stale { offered: 2, stored: 3 })
        );
        assert_eq!(
            decide(Some(&stored), &config("u", 0, "bridge")),
            Err(GenerationError::Stale { offered: 0, stored: 3 })
        );
    }

    #[test]
    fn another_uid_is_another_object_and_replaces_any_generation() {
        let stored = config("u1", 7, "bridge");
        assert_eq!(decide(Some(&stored), &config("u2", 1, "bridge")), Ok(SetDecision::Write));
        assert_eq!(decide(Some(&stored), &config("", 1, "bridge")), Ok(SetDecision::Write));
        assert_eq!(
            decide(Some(&config("", 7, "bridge")), &config("u1", 0, "macvlan")),
            Ok(SetDecision::Write)
        );
    }

    #[test]
    fn empty_uids_are_the_same_object() {
        let stored = config("", 2, "bridge");
        assert_eq!(
            decide(Some(&stored), &config("", 1, "bridge")),
            Err(GenerationError::Stale { offered: 1, stored: 2 })
        );
        assert_eq!(decide(Some(&stored), &config("", 2, "bridge")), Ok(SetDecision::Unchanged));
        assert_eq!(decide(Some(&stored), &config("", 3, "bridge")), Ok(SetDecision::Write));
    }

    #[test]
    fn messages_say_what_to_do() {
        let stale = GenerationError::Stale { offered: 1, stored: 2 }.to_string();
        assert!(stale.starts_with("stale generation 1, the stored one is 2"), "{stale}");
        let same = GenerationError::ChangedWithoutNewGeneration { generation: 2 }.to_string();
        assert!(same.contains("a change needs a higher generation"), "{same}");
    }
}
