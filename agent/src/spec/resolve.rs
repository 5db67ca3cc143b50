//! Which CNI config runs for a NetworkAttachmentDefinition (spec 3.4.1, 3.4.2).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cni::config::{ConfigError, NetworkConfigList};
use crate::cni::{CniCode, ErrorCode};

/// The parts of a NetworkAttachmentDefinition object plexus reads (spec 3.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinition {
    pub namespace: String,
    pub name: String,
    /// `spec.config`: a CNI config or configlist as JSON text.
    pub config: Option<String>,
    /// The `k8s.v1.cni.cncf.io/resourceName` annotation: the resource whose devices the cluster
    /// allocates to the pods of this network (`crate::devices`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
}

/// A CNI config file found in a configuration directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnDiskConfig {
    pub path: PathBuf,
    /// `.conflist` (a list) as opposed to `.conf`/`.json` (a single config).
    pub is_list: bool,
    /// Its JSON `name`.
    pub name: String,
    pub text: String,
}

/// Where the config of an attachment came from, for logs and errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigOrigin {
    SpecConfig,
    OnDisk(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("NetworkAttachmentDefinition {nad}: spec.config is invalid: {source}")]
    InvalidSpecConfig { nad: String, source: ConfigError },
    #[error("NetworkAttachmentDefinition {nad}: the CNI config file {path} is invalid: {source}")]
    InvalidOnDisk { nad: String, path: PathBuf, source: ConfigError },
    #[error(
        "NetworkAttachmentDefinition {nad} has no spec.config and no CNI config file named {name:?} exists \
         in the CNI config directories; add spec.config or a .conflist/.conf with that \"name\""
    )]
    NotFound { nad: String, name: String },
}

/// A network without a usable config is a config the user must fix.
impl CniCode for ResolveError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

impl NetworkAttachmentDefinition {
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Applies the rules of spec 3.4.1 in order: `spec.config`, then an on-disk configlist,
/// then an on-disk config whose `name` is the NAD's name; otherwise the request fails.
/// `on_disk` is in directory order; the first match of each rule wins.
pub fn resolve_network_config(
    nad: &NetworkAttachmentDefinition,
    on_disk: &[OnDiskConfig],
) -> Result<(NetworkConfigList, ConfigOrigin), ResolveError> {
    // Go's `omitempty` makes an empty config indistinguishable from an absent one.
    if let Some(config) = nad.config.as_deref().filter(|c| !c.trim().is_empty()) {
        let list = NetworkConfigList::parse(config, Some(&nad.name))
            .map_err(|source| ResolveError::InvalidSpecConfig { nad: nad.reference(), source })?;
        return Ok((list, ConfigOrigin::SpecConfig));
    }
    let by_kind = |is_list: bool| on_disk.iter().find(|c| c.is_list == is_list && c.name == nad.name);
    let found = by_kind(true).or_else(|| by_kind(false));
    match found {
        Some(c) => {
            let list = NetworkConfigList::parse(&c.text, None).map_err(|source| {
                ResolveError::InvalidOnDisk { nad: nad.reference(), path: c.path.clone(), source }
            })?;
            Ok((list, ConfigOrigin::OnDisk(c.path.clone())))
        }
        None => Err(ResolveError::NotFound { nad: nad.reference(), name: nad.name.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nad(config: Option<&str>) -> NetworkAttachmentDefinition {
        NetworkAttachmentDefinition {
            namespace: "ns".into(),
            name: "net-a".into(),
            config: config.map(Into::into),
            resource_name: None,
        }
    }

    fn disk(name: &str, is_list: bool, text: &str) -> OnDiskConfig {
        OnDiskConfig {
            path: PathBuf::from(format!(
                "/etc/cni/net.d/{name}.{}",
                if is_list { "conflist" } else { "conf" }
            )),
            is_list,
            name: name.into(),
            text: text.into(),
        }
    }

    const DISK_LIST: &str = r#"{"cniVersion":"1.0.0","name":"net-a","plugins":[{"type":"from-list"}]}"#;
    const DISK_CONF: &str = r#"{"cniVersion":"1.0.0","name":"net-a","type":"from-conf"}"#;

    #[test]
    fn spec_config_wins_over_disk() {
        let (l, origin) = resolve_network_config(
            &nad(Some(r#"{"cniVersion":"0.3.0","type":"from-spec"}"#)),
            &[disk("net-a", true, DISK_LIST)],
        )
        .unwrap();
        assert_eq!(l.plugin_type(0), "from-spec");
        assert_eq!(l.name, "net-a", "name injected (3.4.2)");
        assert_eq!(origin, ConfigOrigin::SpecConfig);
    }

    #[test]
    fn conflist_on_disk_wins_over_conf() {
        let (l, _) = resolve_network_config(
            &nad(None),
            &[disk("net-a", false, DISK_CONF), disk("net-a", true, DISK_LIST)],
        )
        .unwrap();
        assert_eq!(l.plugin_type(0), "from-list");
    }

    #[test]
    fn conf_on_disk_is_the_last_resort_and_empty_config_counts_as_absent() {
        let (l, origin) = resolve_network_config(
            &nad(Some("  ")),
            &[disk("other", true, DISK_LIST), disk("net-a", false, DISK_CONF)],
        )
        .unwrap();
        assert_eq!(l.plugin_type(0), "from-conf");
        assert!(matches!(origin, ConfigOrigin::OnDisk(_)));
    }

    #[test]
    fn nothing_found_fails_and_says_what_to_add() {
        let err = resolve_network_config(&nad(None), &[disk("other", true, DISK_LIST)]).unwrap_err();
        assert!(err.to_string().contains("add spec.config"), "{err}");
    }

    #[test]
    fn invalid_spec_config_fails_without_falling_back_to_disk() {
        let err =
            resolve_network_config(&nad(Some("{not json")), &[disk("net-a", true, DISK_LIST)]).unwrap_err();
        assert!(matches!(err, ResolveError::InvalidSpecConfig { .. }));
    }
}
