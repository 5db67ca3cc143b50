//! Readiness (spec 6.1): plexus's own CNI config appears in the runtime's config directory
//! only once the cluster default network's config exists, and stays there when the agent
//! stops, so pods started during an agent restart get "try again" from the shim instead of
//! silently fewer networks. With the CRI network API served, no network at all is ready too
//! (the proposal's backwards compatibility): the config is written without a default network,
//! and a pod that names no networks then fails its ADD saying the default network is missing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::catalog::confdir;
use crate::netapi::store::NetworkStore;
use crate::spec::sandbox_networks;
use crate::state::atomic_write;

#[derive(Debug, Clone)]
pub struct Readiness {
    pub default_network_dir: PathBuf,
    pub runtime_conf_path: PathBuf,
    pub socket: PathBuf,
    pub cni_version: String,
    /// The CRI network API's networks, when it is served: while it holds one, a sandbox that
    /// names it needs no default network.
    pub api_networks: Option<Arc<NetworkStore>>,
}

impl Readiness {
    /// The config plexus would write now, or None while the default network is missing (spec
    /// 6.1) and the CRI network API, if served, holds no network either. It declares the capabilities the default network
    /// declares, so kubelet's runtimeConfig reaches it (and only it, spec 7.5), and
    /// `podSandboxNetworks`, the runtime's list of the sandbox's networks (the CRI network API
    /// proposal).
    pub fn desired_config(&self) -> Option<Value> {
        let default = match confdir::default_network(&self.default_network_dir) {
            Ok((_, list)) => Some(list),
            Err(_) if self.api_networks.as_ref().is_some_and(|store| store.holds_any()) => None,
            Err(_) => return None,
        };
        let mut caps = Map::new();
        for plugin in default.iter().flat_map(|d| &d.plugins) {
            if let Some(Value::Object(c)) = plugin.get("capabilities") {
                for (k, v) in c {
                    if v.as_bool() == Some(true) {
                        caps.insert(k.clone(), Value::Bool(true));
                    }
                }
            }
        }
        // A runtime implementing the CRI network API passes the sandbox's networks (see
        // `spec::sandbox_networks`).
        caps.insert(sandbox_networks::RUNTIME_CONFIG_KEY.to_owned(), Value::Bool(true));
        let plugin = json!({"type": confdir::PLEXUS_TYPE, "socket": self.socket, "capabilities": caps});
        Some(json!({"cniVersion": self.cni_version, "name": "plexus", "plugins": [plugin]}))
    }

    /// Writes the config when it is due and differs from what is on disk. Returns whether
    /// plexus is ready.
    pub fn sync(&self) -> std::io::Result<bool> {
        let Some(desired) = self.desired_config() else { return Ok(false) };
        let body = serde_json::to_vec_pretty(&desired).unwrap_or_default();
        if std::fs::read(&self.runtime_conf_path).ok().as_deref() != Some(body.as_slice()) {
            atomic_write(&self.runtime_conf_path, &body)?;
            tracing::info!(path = %self.runtime_conf_path.display(), "wrote plexus CNI config: ready");
        }
        Ok(true)
    }

    /// A config the runtime picks before plexus's: the first valid one of plexus's directory,
    /// when it is not plexus's (Multus's left behind on a node taken over from it, say).
    pub fn shadowed_by(&self) -> Option<PathBuf> {
        let dir = self.runtime_conf_path.parent()?;
        let first = confdir::read_dir(dir).into_iter().find(|f| f.parsed.is_ok())?;
        (first.path != self.runtime_conf_path).then_some(first.path)
    }

    /// Keeps the config in step with the default network, forever.
    pub async fn watch(self, every: Duration) {
        let mut was_ready = None;
        let mut was_shadowed = None;
        loop {
            let me = self.clone();
            let ready = tokio::task::spawn_blocking(move || me.sync().map(|r| (r, me.shadowed_by()))).await;
            match ready {
                Ok(Ok((r, shadowed))) => {
                    if r && shadowed.is_some() && was_shadowed != Some(shadowed.clone()) {
                        tracing::warn!(
                            config = %shadowed.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
                            plexus = %self.runtime_conf_path.display(),
                            "the runtime uses this config, which sorts before plexus's: pods do not reach plexus \
                             until it is removed (Multus's, after a takeover: docs/migrating-from-multus.md)"
                        );
                    }
                    was_shadowed = Some(shadowed);
                    if was_ready != Some(r) && !r {
                        tracing::warn!(dir = %self.default_network_dir.display(), "default network not ready yet");
                    }
                    was_ready = Some(r);
                }
                Ok(Err(e)) => {
                    tracing::warn!(path = %self.runtime_conf_path.display(), "writing plexus CNI config: {e}")
                }
                Err(e) => tracing::warn!("readiness task: {e}"),
            }
            tokio::time::sleep(every).await;
        }
    }
}

pub fn runtime_conf_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readiness whose default network and own config share `dir`, as on a node.
    fn in_dir(dir: &Path) -> Readiness {
        Readiness {
            default_network_dir: dir.to_owned(),
            runtime_conf_path: dir.join("00-plexus.conflist"),
            socket: "/run/plexus/plexus.sock".into(),
            cni_version: "1.0.0".into(),
            api_networks: None,
        }
    }

    #[test]
    fn writes_only_once_the_default_network_exists_and_copies_its_capabilities() {
        let d = tempfile::tempdir().unwrap();
        let r = in_dir(d.path());
        assert!(!r.sync().unwrap());
        assert!(!r.runtime_conf_path.exists());
        std::fs::write(
            d.path().join("10-default.conflist"),
            r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"},
                {"type":"portmap","capabilities":{"portMappings":true,"ips":false}}]}"#,
        )
        .unwrap();
        assert!(r.sync().unwrap());
        let written: Value = serde_json::from_slice(&std::fs::read(&r.runtime_conf_path).unwrap()).unwrap();
        assert_eq!(written["plugins"][0]["type"], "plexus");
        assert_eq!(
            written["plugins"][0]["capabilities"],
            json!({"portMappings": true, "podSandboxNetworks": true})
        );
        assert!(r.sync().unwrap(), "its own config in the same directory is not the default network");
    }

    #[test]
    fn a_config_the_runtime_picks_before_plexuss_is_named() {
        let d = tempfile::tempdir().unwrap();
        let r = in_dir(d.path());
        std::fs::write(
            d.path().join("10-default.conf"),
            r#"{"cniVersion":"1.0.0","name":"c","type":"bridge"}"#,
        )
        .unwrap();
        assert!(r.sync().unwrap());
        assert_eq!(r.shadowed_by(), None);
        // Multus's, left behind: the runtime still calls Multus; it is no default network.
        let multus = d.path().join("00-multus.conf");
        std::fs::write(&multus, r#"{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus"}"#)
            .unwrap();
        assert!(r.sync().unwrap());
        assert_eq!(r.shadowed_by(), Some(multus));
    }

    #[test]
    fn with_the_network_api_a_stored_network_stands_for_the_default_network() {
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(NetworkStore::new(&d.path().join("state")));
        let r = Readiness {
            default_network_dir: d.path().join("net.d"),
            runtime_conf_path: d.path().join("00-plexus.conflist"),
            socket: "/run/plexus/plexus.sock".into(),
            cni_version: "1.0.0".into(),
            api_networks: Some(store.clone()),
        };
        assert!(!r.sync().unwrap(), "no network at all: not ready (spec 6.1)");
        assert!(!r.runtime_conf_path.exists());
        let network: crate::netapi::model::NetworkConfig = serde_json::from_value(json!({
            "metadata": {"name": "blue", "namespace": "default", "uid": "u1", "generation": 1},
            "networkType": "CNIv1",
            "cniv1Config": {"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}
        }))
        .unwrap();
        store.set(&network).unwrap();
        assert!(r.sync().unwrap(), "a network a sandbox can name");
        let written: Value = serde_json::from_slice(&std::fs::read(&r.runtime_conf_path).unwrap()).unwrap();
        assert_eq!(written["plugins"][0]["type"], "plexus");
        assert_eq!(
            written["plugins"][0]["capabilities"],
            json!({"podSandboxNetworks": true}),
            "no default network, no capabilities to copy; the sandbox's list is still declared"
        );
    }
}
