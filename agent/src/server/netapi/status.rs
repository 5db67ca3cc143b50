//! A network's `NetworkStatus`, measured when the list is asked for: `sandbox_management`
//! when an ADD or DEL could run now (a valid config whose every plugin is native or found
//! in the plugin directories), `connectivity` when, in addition, CNI STATUS of its chain
//! succeeds (before CNI 1.1.0 there is no STATUS, which counts as success).

use serde_json::Value;

use crate::cni::config::NetworkConfigList;
use crate::delegate::exec::find_plugin;
use crate::delegate::Delegator;
use crate::netapi::proto;
use crate::spec::delegate_conf::DelegateConfig;

/// Measures networks with the agent's own plugins and plugin directories.
#[derive(Debug, Clone)]
pub struct Prober {
    pub delegator: Delegator,
}

impl Prober {
    /// The status of the network whose configlist is `list` (`None`: its config cannot be
    /// used). STATUS runs within the delegate timeout.
    pub async fn probe(&self, list: Option<&Value>) -> proto::NetworkStatus {
        let down = proto::NetworkStatus { sandbox_management: false, connectivity: false };
        let Some(list) = list.and_then(|l| NetworkConfigList::from_value(l.clone(), None).ok()) else {
            return down;
        };
        let types: Vec<&str> = (0..list.plugins.len()).map(|i| list.plugin_type(i)).collect();
        if !can_run(
            &types,
            |t| self.delegator.natives.get(t).is_some(),
            |t| find_plugin(&self.delegator.bin_dirs, t).is_ok(),
        ) {
            return down;
        }
        let chain = DelegateConfig { list, runtime_config: Default::default() };
        let status = tokio::time::timeout(self.delegator.timeout, self.delegator.status(&chain)).await;
        let connectivity = match status {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::info!(network = %chain.list.name, "CNI STATUS of the network failed: {e}");
                false
            }
            Err(_) => {
                tracing::info!(network = %chain.list.name, "CNI STATUS of the network did not answer in time");
                false
            }
        };
        proto::NetworkStatus { sandbox_management: true, connectivity }
    }
}

/// Whether a chain of these plugin types can run: at least one, each native or installed.
pub fn can_run(types: &[&str], native: impl Fn(&str) -> bool, installed: impl Fn(&str) -> bool) -> bool {
    !types.is_empty() && types.iter().all(|t| !t.is_empty() && (native(t) || installed(t)))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::delegate::NativePlugins;

    #[test]
    fn a_chain_runs_when_every_plugin_is_native_or_installed() {
        let native = |t: &str| t == "macvlan";
        let installed = |t: &str| t == "bridge";
        assert!(can_run(&["macvlan"], native, installed));
        assert!(can_run(&["bridge", "macvlan"], native, installed));
        assert!(!can_run(&["bridge", "tuning"], native, installed));
        assert!(!can_run(&[], native, installed));
        assert!(!can_run(&[""], |_| true, |_| true));
    }

    fn plugin(dir: &std::path::Path, name: &str, script: &str) {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn prober(bin: &std::path::Path) -> Prober {
        Prober {
            delegator: Delegator {
                bin_dirs: vec![bin.to_owned()],
                timeout: Duration::from_secs(5),
                natives: NativePlugins::default(),
            },
        }
    }

    #[tokio::test]
    async fn statuses_are_measured() {
        let d = tempfile::tempdir().unwrap();
        plugin(d.path(), "ready", "exit 0");
        let failing = r#"echo '{"cniVersion":"1.1.0","code":50,"msg":"not ready"}'; exit 1"#;
        plugin(d.path(), "unready", failing);
        let p = prober(d.path());
        let list = |version: &str, types: &[&str]| {
            let plugins: Vec<Value> = types.iter().map(|t| json!({"type": t})).collect();
            json!({"cniVersion": version, "name": "n", "plugins": plugins})
        };
        let status = |s: proto::NetworkStatus| (s.sandbox_management, s.connectivity);
        assert_eq!(status(p.probe(Some(&list("1.1.0", &["ready"]))).await), (true, true));
        assert_eq!(status(p.probe(Some(&list("1.1.0", &["ready", "unready"]))).await), (true, false));
        assert_eq!(
            status(p.probe(Some(&list("1.0.0", &["ready", "unready"]))).await),
            (true, true),
            "no STATUS before 1.1.0"
        );
        assert_eq!(status(p.probe(Some(&list("1.1.0", &["ready", "missing"]))).await), (false, false));
        assert_eq!(status(p.probe(Some(&json!({"name": "no version"}))).await), (false, false));
        assert_eq!(status(p.probe(None).await), (false, false));
    }
}
