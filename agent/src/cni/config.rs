//! CNI network configuration: a single config or a configlist, normalised to a list.
//!
//! Every plugin is kept as the raw JSON object the user wrote: plexus must hand delegates
//! their keys untouched, only adding what the CNI spec says the runtime adds (`name`,
//! `cniVersion`, `runtimeConfig`, `prevResult`, `args`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::result::is_supported_version;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the CNI config is not valid JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("the CNI config must be a JSON object")]
    NotObject,
    #[error("the CNI config has no \"cniVersion\"; add one, e.g. \"cniVersion\": \"1.0.0\"")]
    MissingVersion,
    #[error("the CNI config's cniVersion {0:?} is not supported; use one of {1}")]
    UnsupportedVersion(String, String),
    #[error("the CNI config has no \"name\"; add one")]
    MissingName,
    #[error("the CNI configlist has an empty \"plugins\" list; add at least one plugin")]
    NoPlugins,
    #[error("plugin {0} of the CNI config has no \"type\"; say which plugin binary to run")]
    MissingType(usize),
    #[error("plugin {0} of the CNI config is not a JSON object")]
    PluginNotObject(usize),
    #[error("the CNI config key {key:?} must be {expected}")]
    WrongType { key: String, expected: &'static str },
}

/// A configlist, or a single config seen as a list of one (as libcni's `ConfListFromConf`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkConfigList {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "disableCheck", default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_check: bool,
    #[serde(rename = "disableGC", default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_gc: bool,
    pub plugins: Vec<Map<String, Value>>,
}

impl NetworkConfigList {
    /// Parses config text. `default_name` fills a missing `name` (spec 3.4.2: the NAD's
    /// name is injected when `Spec.Config` omits it).
    pub fn parse(text: &str, default_name: Option<&str>) -> Result<Self, ConfigError> {
        let value: Value = serde_json::from_str(text).map_err(ConfigError::NotJson)?;
        Self::from_value(value, default_name)
    }

    pub fn from_value(value: Value, default_name: Option<&str>) -> Result<Self, ConfigError> {
        let Value::Object(mut top) = value else { return Err(ConfigError::NotObject) };
        let cni_version = match top.get("cniVersion") {
            Some(Value::String(v)) if !v.is_empty() => v.clone(),
            Some(Value::String(_)) | None => return Err(ConfigError::MissingVersion),
            Some(_) => return Err(wrong_type("cniVersion", "a string")),
        };
        if !is_supported_version(&cni_version) {
            return Err(ConfigError::UnsupportedVersion(
                cni_version,
                crate::cni::SUPPORTED_VERSIONS.join(", "),
            ));
        }
        let name = match top.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            Some(Value::String(_)) | None => {
                default_name.map(str::to_owned).ok_or(ConfigError::MissingName)?
            }
            Some(_) => return Err(wrong_type("name", "a string")),
        };
        let disable_check = bool_key(&top, "disableCheck")?;
        let disable_gc = bool_key(&top, "disableGC")?;
        let plugins = match top.remove("plugins") {
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(ConfigError::NoPlugins);
                }
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, p)| match p {
                        Value::Object(m) => Ok(m),
                        _ => Err(ConfigError::PluginNotObject(i)),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(_) => return Err(wrong_type("plugins", "a list of plugin objects")),
            // A single config is its own only plugin, keeping every key.
            None => vec![top],
        };
        for (i, p) in plugins.iter().enumerate() {
            match p.get("type") {
                Some(Value::String(t)) if !t.is_empty() => {}
                _ => return Err(ConfigError::MissingType(i)),
            }
        }
        Ok(NetworkConfigList { cni_version, name, disable_check, disable_gc, plugins })
    }

    pub fn plugin_type(&self, index: usize) -> &str {
        self.plugins.get(index).and_then(|p| p.get("type")).and_then(Value::as_str).unwrap_or("")
    }

    /// True when some plugin declares `capabilities.<capability>: true`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.plugins.iter().any(|p| plugin_has_capability(p, capability))
    }

    /// The configuration plugin `index` receives, as libcni builds it: the list's `name` and
    /// `cniVersion` injected (spec 7.1), `runtimeConfig` reduced to the capabilities the
    /// plugin declares (CNI CONVENTIONS), and the previous result for chaining.
    pub fn plugin_config(
        &self,
        index: usize,
        runtime_config: &Map<String, Value>,
        prev_result: Option<&Value>,
    ) -> Value {
        let mut conf = self.plugins.get(index).cloned().unwrap_or_default();
        conf.insert("name".into(), Value::String(self.name.clone()));
        conf.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        let declared: Map<String, Value> = runtime_config
            .iter()
            .filter(|(k, _)| plugin_has_capability(&conf, k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if declared.is_empty() {
            conf.remove("runtimeConfig");
        } else {
            conf.insert("runtimeConfig".into(), Value::Object(declared));
        }
        match prev_result {
            Some(prev) => conf.insert("prevResult".into(), prev.clone()),
            None => conf.remove("prevResult"),
        };
        Value::Object(conf)
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn plugin_has_capability(plugin: &Map<String, Value>, capability: &str) -> bool {
    plugin.get("capabilities").and_then(|c| c.get(capability)).and_then(Value::as_bool).unwrap_or(false)
}

fn bool_key(top: &Map<String, Value>, key: &str) -> Result<bool, ConfigError> {
    match top.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(wrong_type(key, "true or false")),
    }
}

fn wrong_type(key: &str, expected: &'static str) -> ConfigError {
    ConfigError::WrongType { key: key.to_owned(), expected }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn single_config_becomes_a_list_of_one_keeping_every_key() {
        let l = NetworkConfigList::parse(
            r#"{"cniVersion":"0.3.1","name":"n","type":"bridge","bridge":"br0","ipam":{"type":"host-local"}}"#,
            None,
        )
        .unwrap();
        assert_eq!(l.plugins.len(), 1);
        assert_eq!(l.plugin_type(0), "bridge");
        assert_eq!(l.plugins[0]["bridge"], "br0");
    }

    #[test]
    fn configlist_keeps_plugin_order() {
        let l = NetworkConfigList::parse(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"tuning"}]}"#,
            None,
        )
        .unwrap();
        assert_eq!((l.plugin_type(0), l.plugin_type(1)), ("bridge", "tuning"));
    }

    #[test]
    fn missing_name_is_filled_from_default() {
        let l = NetworkConfigList::parse(r#"{"cniVersion":"0.3.0","type":"x"}"#, Some("nad")).unwrap();
        assert_eq!(l.name, "nad");
        assert!(matches!(
            NetworkConfigList::parse(r#"{"cniVersion":"0.3.0","type":"x"}"#, None),
            Err(ConfigError::MissingName)
        ));
    }

    #[test]
    fn invalid_configs_say_what_to_fix() {
        let cases = [
            ("{", "not valid JSON"),
            ("[]", "must be a JSON object"),
            (r#"{"name":"n","type":"x"}"#, "no \"cniVersion\""),
            (r#"{"cniVersion":"9.9.9","name":"n","type":"x"}"#, "not supported"),
            (r#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#, "empty \"plugins\""),
            (r#"{"cniVersion":"1.0.0","name":"n","plugins":[{}]}"#, "no \"type\""),
            (r#"{"cniVersion":"1.0.0","name":"n","plugins":[3]}"#, "not a JSON object"),
            (r#"{"cniVersion":"1.0.0","name":"n"}"#, "no \"type\""),
            (r#"{"cniVersion":"1.0.0","name":"n","type":"x","disableCheck":"yes"}"#, "disableCheck"),
        ];
        for (text, want) in cases {
            let err = NetworkConfigList::parse(text, None).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn plugin_config_injects_name_version_filtered_runtime_config_and_prev_result() {
        let l = NetworkConfigList::parse(
            r#"{"cniVersion":"1.0.0","name":"net","plugins":[
                {"type":"bridge","name":"ignored","cniVersion":"0.1.0"},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
            None,
        )
        .unwrap();
        let rc = json!({"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"tcp"}],"mac":"x"});
        let rc = rc.as_object().unwrap();
        let first = l.plugin_config(0, rc, None);
        assert_eq!(first["name"], "net");
        assert_eq!(first["cniVersion"], "1.0.0");
        assert!(first.get("runtimeConfig").is_none());
        let prev = json!({"cniVersion":"1.0.0"});
        let second = l.plugin_config(1, rc, Some(&prev));
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"tcp"}]})
        );
        assert_eq!(second["prevResult"], prev);
    }

    #[test]
    fn capabilities_are_found_on_any_plugin() {
        let l = NetworkConfigList::parse(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"a"},{"type":"b","capabilities":{"mac":true,"ips":false}}]}"#,
            None,
        )
        .unwrap();
        assert!(l.has_capability("mac"));
        assert!(!l.has_capability("ips"));
        assert!(!l.has_capability("bandwidth"));
    }
}
