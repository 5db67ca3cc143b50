//! Configlist invocation as libcni does it: ADD in order with prevResult chaining, DEL in
//! reverse with the cached result, CHECK with it, STATUS and GC from CNI 1.1.0 on.

use std::cmp::Ordering;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::env::InvocationEnv;
use super::exec::{self, DelegateError, Exec};
use super::native::{NativeCall, NativePlugins};
use crate::cni::result::compare_versions;
use crate::cni::{AttachmentKey, Command};
use crate::metrics::metrics;
use crate::spec::delegate_conf::DelegateConfig;

/// Runs configlists: each plugin natively when the agent implements its type, else by
/// exec'ing the binary from `bin_dirs`.
#[derive(Debug, Clone)]
pub struct Delegator {
    pub bin_dirs: Vec<PathBuf>,
    /// Per plugin execution.
    pub timeout: Duration,
    pub natives: NativePlugins,
}

fn at_least(version: &str, min: &str) -> bool {
    compare_versions(version, min).is_ok_and(|o| o != Ordering::Less)
}

/// A native plugin's config with the runtimeConfig keys of the capabilities it always honours
/// (see [`NativePlugin::capabilities`](super::native::NativePlugin::capabilities)), added to
/// those its config declares.
fn with_native_capabilities(
    mut conf: Value,
    capabilities: &[&str],
    runtime_config: &serde_json::Map<String, Value>,
) -> Value {
    let implied: Vec<(&String, &Value)> =
        runtime_config.iter().filter(|(k, _)| capabilities.contains(&k.as_str())).collect();
    if implied.is_empty() {
        return conf;
    }
    let Some(top) = conf.as_object_mut() else { return conf };
    let rc = top.entry("runtimeConfig").or_insert_with(|| json!({}));
    if let Some(rc) = rc.as_object_mut() {
        for (k, v) in implied {
            rc.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    conf
}

impl Delegator {
    async fn run(
        &self,
        d: &DelegateConfig,
        i: usize,
        command: Command,
        env: &InvocationEnv,
        conf: Value,
    ) -> Result<Option<Value>, DelegateError> {
        let plugin = d.list.plugin_type(i);
        let _timer = crate::phase::start(crate::phase::Phase::Plugins);
        let started = Instant::now();
        let out = if let Some(native) = self.natives.get(plugin) {
            let conf = with_native_capabilities(conf, native.capabilities(), &d.runtime_config);
            native.invoke(NativeCall { command, config: &conf, env, list: Some(&d.list) }).await
        } else {
            let vars = if matches!(command, Command::Status | Command::Gc) { Vec::new() } else { env.vars() };
            exec::run(&self.bin_dirs, Exec { plugin, command, env: vars, config: &conf }, self.timeout).await
        };
        metrics().plugin(plugin, command, started.elapsed());
        out
    }

    /// ADD: every plugin in order, each seeing the previous one's result. Returns the last
    /// result. A failure leaves the earlier plugins' work in place: the caller runs DEL,
    /// which every plugin must tolerate for a partial ADD.
    pub async fn add(&self, d: &DelegateConfig, env: &InvocationEnv) -> Result<Option<Value>, DelegateError> {
        let mut prev: Option<Value> = None;
        for i in 0..d.list.plugins.len() {
            let conf = d.list.plugin_config(i, &d.runtime_config, prev.as_ref());
            let out = self.run(d, i, Command::Add, env, conf).await?;
            // A plugin that prints nothing passes the previous result on.
            if out.is_some() {
                prev = out;
            }
        }
        Ok(prev)
    }

    /// DEL: every plugin in reverse order with the cached ADD result (from CNI 0.4.0 on).
    /// All plugins run even when one fails, so as much as possible is released; the first
    /// failure is returned.
    pub async fn del(
        &self,
        d: &DelegateConfig,
        env: &InvocationEnv,
        cached: Option<&Value>,
    ) -> Result<(), DelegateError> {
        let prev = if at_least(&d.list.cni_version, "0.4.0") { cached } else { None };
        let mut first_error = None;
        for i in (0..d.list.plugins.len()).rev() {
            let conf = d.list.plugin_config(i, &d.runtime_config, prev);
            if let Err(e) = self.run(d, i, Command::Del, env, conf).await {
                tracing::warn!(plugin = d.list.plugin_type(i), "DEL failed: {e}");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// CHECK (CNI 0.4.0 and later, unless the list disables it).
    pub async fn check(
        &self,
        d: &DelegateConfig,
        env: &InvocationEnv,
        cached: Option<&Value>,
    ) -> Result<(), DelegateError> {
        if d.list.disable_check || !at_least(&d.list.cni_version, "0.4.0") {
            return Ok(());
        }
        for i in 0..d.list.plugins.len() {
            let conf = d.list.plugin_config(i, &d.runtime_config, cached);
            self.run(d, i, Command::Check, env, conf).await?;
        }
        Ok(())
    }

    /// STATUS (CNI 1.1.0): every plugin must be ready.
    pub async fn status(&self, d: &DelegateConfig) -> Result<(), DelegateError> {
        if !at_least(&d.list.cni_version, "1.1.0") {
            return Ok(());
        }
        for i in 0..d.list.plugins.len() {
            let conf = d.list.plugin_config(i, &Default::default(), None);
            self.run(d, i, Command::Status, &InvocationEnv::default(), conf).await?;
        }
        Ok(())
    }

    /// GC (CNI 1.1.0): every plugin learns which of its attachments are still valid.
    pub async fn gc(&self, d: &DelegateConfig, valid: &[AttachmentKey]) -> Result<(), DelegateError> {
        if d.list.disable_gc || !at_least(&d.list.cni_version, "1.1.0") {
            return Ok(());
        }
        let mut first_error = None;
        for i in 0..d.list.plugins.len() {
            let mut conf = d.list.plugin_config(i, &Default::default(), None);
            conf["cni.dev/valid-attachments"] = json!(valid);
            if let Err(e) = self.run(d, i, Command::Gc, &InvocationEnv::default(), conf).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::config::NetworkConfigList;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    /// A plugin that logs "<name> <command> <prevResult or ->" and answers a result naming
    /// itself, or fails when the config says so.
    fn recorder(dir: &Path, log: &Path) {
        let p = dir.join("rec");
        let body = format!(
            r#"#!/bin/sh
conf=$(cat)
name=$(echo "$conf" | sed -n 's/.*"tag":"\([^"]*\)".*/\1/p')
prev=$(echo "$conf" | grep -o '"prevResult":{{[^}}]*}}' | sed -n 's/.*"from":"\([^"]*\)".*/\1/p')
echo "$name $CNI_COMMAND ${{prev:--}}" >> {log}
case "$conf" in *'"fail":"'$CNI_COMMAND'"'*) echo '{{"code":11,"msg":"told to fail"}}'; exit 1;; esac
[ "$CNI_COMMAND" = ADD ] && echo '{{"cniVersion":"1.0.0","from":"'$name'"}}'
exit 0
"#,
            log = log.display()
        );
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn setup(plugins: &str, version: &str) -> (tempfile::TempDir, Delegator, DelegateConfig) {
        let d = tempfile::tempdir().unwrap();
        recorder(d.path(), &d.path().join("log"));
        let list = NetworkConfigList::parse(
            &format!(r#"{{"cniVersion":"{version}","name":"n","plugins":{plugins}}}"#),
            None,
        )
        .unwrap();
        let del = Delegator {
            bin_dirs: vec![d.path().to_owned()],
            timeout: Duration::from_secs(5),
            natives: NativePlugins::default(),
        };
        (d, del, DelegateConfig { list, runtime_config: Default::default() })
    }

    fn log(d: &tempfile::TempDir) -> Vec<String> {
        std::fs::read_to_string(d.path().join("log")).unwrap_or_default().lines().map(Into::into).collect()
    }

    const THREE: &str = r#"[{"type":"rec","tag":"a"},{"type":"rec","tag":"b"},{"type":"rec","tag":"c"}]"#;

    #[tokio::test]
    async fn add_chains_prev_result_and_del_runs_in_reverse_with_the_cache() {
        let (d, del, conf) = setup(THREE, "1.0.0");
        let env = InvocationEnv {
            container_id: "c".into(),
            netns: "/x".into(),
            ifname: "net1".into(),
            args: String::new(),
        };
        let result = del.add(&conf, &env).await.unwrap().unwrap();
        assert_eq!(result["from"], "c");
        del.del(&conf, &env, Some(&result)).await.unwrap();
        assert_eq!(log(&d), ["a ADD -", "b ADD a", "c ADD b", "c DEL c", "b DEL c", "a DEL c"]);
        // Every plugin run is timed, by type and command.
        let body = crate::metrics::encode();
        for command in ["ADD", "DEL"] {
            assert!(
                body.contains(&format!(
                    r#"plexus_plugin_duration_seconds_count{{type="rec",command="{command}"}}"#
                )),
                "{body}"
            );
        }
    }

    #[test]
    fn a_native_plugin_gets_the_runtime_config_of_the_capabilities_it_honours() {
        let rc = json!({"CNIDeviceInfoFile": "/d/cni/c-net1-device.json", "mac": "02:00:00:00:00:01"});
        let rc = rc.as_object().unwrap();
        let conf = with_native_capabilities(json!({"type": "sriov"}), &["CNIDeviceInfoFile"], rc);
        assert_eq!(
            conf,
            json!({"type": "sriov", "runtimeConfig": {"CNIDeviceInfoFile": "/d/cni/c-net1-device.json"}})
        );
        let declared = json!({"type": "sriov", "runtimeConfig": {"mac": "02:00:00:00:00:01"}});
        assert_eq!(
            with_native_capabilities(declared, &["CNIDeviceInfoFile"], rc)["runtimeConfig"],
            json!({"mac": "02:00:00:00:00:01", "CNIDeviceInfoFile": "/d/cni/c-net1-device.json"})
        );
        let none = json!({"type": "macvlan"});
        assert_eq!(with_native_capabilities(none.clone(), &[], rc), none);
    }

    #[tokio::test]
    async fn del_goes_on_past_a_failing_plugin_and_reports_it() {
        let plugins =
            r#"[{"type":"rec","tag":"a"},{"type":"rec","tag":"b","fail":"DEL"},{"type":"rec","tag":"c"}]"#;
        let (d, del, conf) = setup(plugins, "0.3.1");
        let err = del.del(&conf, &InvocationEnv::default(), None).await.unwrap_err();
        assert!(err.to_string().contains("told to fail"));
        assert_eq!(log(&d), ["c DEL -", "b DEL -", "a DEL -"]);
    }

    #[tokio::test]
    async fn check_status_and_gc_follow_the_list_version() {
        let (d, del, conf) = setup(THREE, "0.3.1");
        del.check(&conf, &InvocationEnv::default(), None).await.unwrap();
        del.status(&conf).await.unwrap();
        del.gc(&conf, &[]).await.unwrap();
        assert!(log(&d).is_empty(), "0.3.1 has no CHECK, STATUS or GC");
        let (d, del, conf) = setup(THREE, "1.1.0");
        del.check(&conf, &InvocationEnv::default(), Some(&json!({"from":"z"}))).await.unwrap();
        del.status(&conf).await.unwrap();
        del.gc(&conf, &[AttachmentKey { container_id: "c".into(), ifname: "eth0".into() }]).await.unwrap();
        let l = log(&d);
        assert_eq!(&l[..3], ["a CHECK z", "b CHECK z", "c CHECK z"]);
        assert_eq!(l.iter().filter(|x| x.contains("STATUS")).count(), 3);
        assert_eq!(l.iter().filter(|x| x.contains("GC")).count(), 3);
    }
}
