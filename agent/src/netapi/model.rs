//! Our own form of the API's `NetworkConfig`: what the store keeps (serde JSON, not protobuf
//! bytes) and what the CLI reads from a file. Its JSON is the proto's JSON mapping
//! (lowerCamelCase keys; the proto's own field names are accepted too), and conversions
//! from and to the generated messages are here.
//!
//! Converting from the wire checks only what the wire cannot say by itself (a message that
//! is absent, an enum value outside the proto); [`super::config::validate`] checks the rest.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::invalid::InvalidField;
use super::proto;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkConfig {
    #[serde(default)]
    pub metadata: NetworkMetadata,
    #[serde(default, alias = "ip_ranges", skip_serializing_if = "Vec::is_empty")]
    pub ip_ranges: Vec<IpRange>,
    #[serde(default, alias = "network_type")]
    pub network_type: NetworkType,
    #[serde(default, alias = "cniv1_config")]
    pub cniv1_config: Cniv1Config,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkMetadata {
    #[serde(default)]
    pub name: String,
    /// Empty means `default`.
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpRange {
    pub cidr: String,
}

/// The proto's `NetworkType`: CNIv1 is the only one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NetworkType {
    #[default]
    Cniv1,
}

/// The proto's JSON mapping writes an enum as its name and reads the name or the number.
impl Serialize for NetworkType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NetworkType::Cniv1 => s.serialize_str("CNIv1"),
        }
    }
}

impl<'de> Deserialize<'de> for NetworkType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum NameOrNumber {
            Name(String),
            Number(i64),
        }
        match NameOrNumber::deserialize(d)? {
            NameOrNumber::Name(n) if n == "CNIv1" => Ok(NetworkType::Cniv1),
            NameOrNumber::Number(0) => Ok(NetworkType::Cniv1),
            NameOrNumber::Name(n) => Err(serde::de::Error::custom(format!(
                "unknown network type {n:?}; the only one is \"CNIv1\""
            ))),
            NameOrNumber::Number(n) => Err(serde::de::Error::custom(format!(
                "unknown network type {n}; the only one is \"CNIv1\" (0)"
            ))),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cniv1Config {
    #[serde(default, alias = "cni_version")]
    pub cni_version: String,
    /// Empty means the metadata's name.
    #[serde(default, alias = "network_name")]
    pub network_name: String,
    #[serde(default, alias = "disable_check")]
    pub disable_check: bool,
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

impl NetworkConfig {
    /// The namespace, `default` when empty.
    pub fn namespace(&self) -> &str {
        effective_namespace(&self.metadata.namespace)
    }

    /// The CNI network name: the config's own, or the metadata's name.
    pub fn network_name(&self) -> &str {
        if self.cniv1_config.network_name.is_empty() {
            &self.metadata.name
        } else {
            &self.cniv1_config.network_name
        }
    }
}

/// A request's namespace, `default` when empty.
pub fn effective_namespace(namespace: &str) -> &str {
    if namespace.is_empty() {
        super::DEFAULT_NAMESPACE
    } else {
        namespace
    }
}

impl TryFrom<proto::NetworkConfig> for NetworkConfig {
    type Error = InvalidField;

    fn try_from(c: proto::NetworkConfig) -> Result<Self, InvalidField> {
        let metadata = c.metadata.ok_or_else(|| InvalidField::new("config.metadata", "it is missing"))?;
        let network_type = match proto::NetworkType::try_from(c.network_type) {
            Ok(proto::NetworkType::CnIv1) => NetworkType::Cniv1,
            Err(_) => {
                return Err(InvalidField::new(
                    "config.network_type",
                    format!("{} is not a network type; the only one is CNIv1 (0)", c.network_type),
                ))
            }
        };
        let cni = c.cniv1_config.ok_or_else(|| {
            InvalidField::new("config.cniv1_config", "it is missing; a CNIv1 network needs one")
        })?;
        Ok(NetworkConfig {
            metadata: NetworkMetadata {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                generation: metadata.generation,
            },
            ip_ranges: c.ip_ranges.into_iter().map(|r| IpRange { cidr: r.cidr }).collect(),
            network_type,
            cniv1_config: Cniv1Config {
                cni_version: cni.cni_version,
                network_name: cni.network_name,
                disable_check: cni.disable_check,
                plugins: cni
                    .plugins
                    .into_iter()
                    .map(|p| PluginConfig {
                        plugin_type: p.r#type,
                        capabilities: p.capabilities,
                        parameters: p.parameters.into_iter().collect(),
                    })
                    .collect(),
            },
        })
    }
}

impl From<NetworkConfig> for proto::NetworkConfig {
    fn from(c: NetworkConfig) -> Self {
        proto::NetworkConfig {
            metadata: Some(proto::NetworkMetadata {
                name: c.metadata.name,
                namespace: c.metadata.namespace,
                uid: c.metadata.uid,
                generation: c.metadata.generation,
            }),
            ip_ranges: c.ip_ranges.into_iter().map(|r| proto::IpRange { cidr: r.cidr }).collect(),
            network_type: match c.network_type {
                NetworkType::Cniv1 => proto::NetworkType::CnIv1 as i32,
            },
            cniv1_config: Some(proto::CnIv1Config {
                cni_version: c.cniv1_config.cni_version,
                network_name: c.cniv1_config.network_name,
                disable_check: c.cniv1_config.disable_check,
                plugins: c
                    .cniv1_config
                    .plugins
                    .into_iter()
                    .map(|p| proto::CnIv1PluginConfig {
                        r#type: p.plugin_type,
                        capabilities: p.capabilities,
                        parameters: p.parameters.into_iter().collect(),
                    })
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample() -> NetworkConfig {
        NetworkConfig {
            metadata: NetworkMetadata {
                name: "blue".into(),
                namespace: "team".into(),
                uid: "u1".into(),
                generation: 4,
            },
            ip_ranges: vec![IpRange { cidr: "10.1.0.0/24".into() }],
            network_type: NetworkType::Cniv1,
            cniv1_config: Cniv1Config {
                cni_version: "1.0.0".into(),
                network_name: "blue-net".into(),
                disable_check: true,
                plugins: vec![PluginConfig {
                    plugin_type: "bridge".into(),
                    capabilities: vec!["ips".into()],
                    parameters: [("mtu".to_owned(), "1400".to_owned())].into_iter().collect(),
                }],
            },
        }
    }

    #[test]
    fn json_is_the_protos_json_mapping() {
        let text = serde_json::to_value(sample()).unwrap();
        assert_eq!(
            text,
            json!({
                "metadata": {"name": "blue", "namespace": "team", "uid": "u1", "generation": 4},
                "ipRanges": [{"cidr": "10.1.0.0/24"}],
                "networkType": "CNIv1",
                "cniv1Config": {
                    "cniVersion": "1.0.0", "networkName": "blue-net", "disableCheck": true,
                    "plugins": [{"type": "bridge", "capabilities": ["ips"], "parameters": {"mtu": "1400"}}]
                }
            })
        );
        assert_eq!(serde_json::from_value::<NetworkConfig>(text).unwrap(), sample());
    }

    #[test]
    fn the_protos_field_names_and_enum_numbers_are_read_too() {
        let read: NetworkConfig = serde_json::from_value(json!({
            "metadata": {"name": "blue", "namespace": "team", "uid": "u1", "generation": 4},
            "ip_ranges": [{"cidr": "10.1.0.0/24"}],
            "network_type": 0,
            "cniv1_config": {
                "cni_version": "1.0.0", "network_name": "blue-net", "disable_check": true,
                "plugins": [{"type": "bridge", "capabilities": ["ips"], "parameters": {"mtu": "1400"}}]
            }
        }))
        .unwrap();
        assert_eq!(read, sample());
        let yaml: NetworkConfig = serde_yaml::from_str(
            "metadata: {name: blue}\ncniv1Config:\n  cniVersion: 1.0.0\n  plugins:\n  - type: bridge\n",
        )
        .unwrap();
        assert_eq!((yaml.metadata.name.as_str(), yaml.network_type), ("blue", NetworkType::Cniv1));
        assert_eq!(yaml.cniv1_config.plugins[0].plugin_type, "bridge");
    }

    #[test]
    fn unknown_fields_and_network_types_are_refused() {
        for bad in [
            json!({"metadata": {"name": "blue", "generaton": 1}}),
            json!({"cniv1Config": {"plugin": []}}),
            json!({"networkType": "CNIv2"}),
            json!({"networkType": 1}),
            json!({"extra": true}),
        ] {
            assert!(serde_json::from_value::<NetworkConfig>(bad.clone()).is_err(), "{bad}");
        }
        let e = serde_json::from_value::<NetworkConfig>(json!({"networkType": "CNIv2"})).unwrap_err();
        assert!(e.to_string().contains("the only one is \"CNIv1\""), "{e}");
    }

    #[test]
    fn conversions_from_and_to_the_wire_keep_every_field() {
        let wire: proto::NetworkConfig = sample().into();
        assert_eq!(wire.cniv1_config.as_ref().unwrap().plugins[0].parameters["mtu"], "1400");
        assert_eq!(NetworkConfig::try_from(wire).unwrap(), sample());
    }

    #[test]
    fn absent_messages_and_unknown_enum_values_name_their_field() {
        let mut wire: proto::NetworkConfig = sample().into();
        wire.metadata = None;
        assert_eq!(NetworkConfig::try_from(wire).unwrap_err().field, "config.metadata");
        let mut wire: proto::NetworkConfig = sample().into();
        wire.cniv1_config = None;
        assert_eq!(NetworkConfig::try_from(wire).unwrap_err().field, "config.cniv1_config");
        let mut wire: proto::NetworkConfig = sample().into();
        wire.network_type = 3;
        assert_eq!(NetworkConfig::try_from(wire).unwrap_err().field, "config.network_type");
    }

    #[test]
    fn an_empty_namespace_is_default_and_an_empty_network_name_is_the_metadatas() {
        let mut c = sample();
        assert_eq!((c.namespace(), c.network_name()), ("team", "blue-net"));
        c.metadata.namespace.clear();
        c.cniv1_config.network_name.clear();
        assert_eq!((c.namespace(), c.network_name()), ("default", "blue"));
    }
}
