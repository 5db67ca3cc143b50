//! Native plugin types that serve the dataplane's capabilities themselves: a `macvlan` whose
//! config declares `"capabilities": {"portMappings": true, "bandwidth": true}` gets the pod's
//! port mappings and bandwidth limits installed after its own ADD, exactly as if
//! `plexus-portmap` and `plexus-bandwidth` were chained after it (they run, in-process, on its
//! result), and removed before its own DEL.
//!
//! A capability step that fails undoes the whole attachment (the capability steps done so far,
//! then the plugin's own ADD) and the ADD fails with that step's error, as a failing chained
//! plugin would fail the configlist.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use crate::cni::config::NetworkConfigList;
use crate::cni::Command;
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::DelegateError;

/// A native type with the dataplane's capabilities.
pub struct WithCapabilities {
    inner: Arc<dyn NativePlugin>,
    /// (capability, the plugin serving it), in chain order.
    capabilities: Vec<(&'static str, Arc<dyn NativePlugin>)>,
}

impl WithCapabilities {
    pub fn new(
        inner: Arc<dyn NativePlugin>,
        capabilities: Vec<(&'static str, Arc<dyn NativePlugin>)>,
    ) -> Self {
        WithCapabilities { inner, capabilities }
    }

    /// The capability plugins the config declares.
    fn declared(&self, config: &Value) -> Vec<Arc<dyn NativePlugin>> {
        self.capabilities
            .iter()
            .filter(|(cap, _)| {
                config.get("capabilities").and_then(|c| c.get(*cap)).and_then(Value::as_bool) == Some(true)
            })
            .map(|(_, p)| p.clone())
            .collect()
    }
}

/// A configlist of just this plugin: the capability steps learn from its first plugin what
/// made the interface (this one, whatever else the real list chains).
fn own_list(config: &Value) -> NetworkConfigList {
    let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let plugin: Map<String, Value> = config.as_object().cloned().unwrap_or_default();
    NetworkConfigList {
        cni_version: text("cniVersion"),
        name: text("name"),
        disable_check: false,
        disable_gc: false,
        plugins: vec![plugin],
    }
}

/// A capability step's call: the same environment, this plugin as the list.
fn sub<'b>(
    command: Command,
    config: &'b Value,
    call: &NativeCall<'b>,
    own: &'b NetworkConfigList,
) -> NativeCall<'b> {
    NativeCall { command, config, env: call.env, list: Some(own) }
}

/// `config` with `prevResult` set.
fn chained(config: &Value, prev: &Value) -> Value {
    let mut c = config.clone();
    if let Value::Object(m) = &mut c {
        m.insert("prevResult".into(), prev.clone());
    }
    c
}

impl NativePlugin for WithCapabilities {
    /// The wrapped plugin's.
    fn capabilities(&self) -> &'static [&'static str] {
        self.inner.capabilities()
    }

    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        Box::pin(async move {
            let steps = self.declared(call.config);
            if steps.is_empty() {
                return self.inner.invoke(call).await;
            }
            let own = own_list(call.config);
            match call.command {
                Command::Add => {
                    let Some(mut result) = self.inner.invoke(call).await? else { return Ok(None) };
                    for (done, step) in steps.iter().enumerate() {
                        let config = chained(call.config, &result);
                        match step.invoke(sub(Command::Add, &config, &call, &own)).await {
                            Ok(Some(r)) => result = r,
                            Ok(None) => {}
                            Err(e) => {
                                for undo in steps[..done].iter().rev() {
                                    if let Err(u) =
                                        undo.invoke(sub(Command::Del, call.config, &call, &own)).await
                                    {
                                        tracing::warn!("undoing a capability of a failed ADD: {u}");
                                    }
                                }
                                if let Err(u) =
                                    self.inner.invoke(NativeCall { command: Command::Del, ..call }).await
                                {
                                    tracing::warn!("undoing a failed ADD: {u}");
                                }
                                return Err(e);
                            }
                        }
                    }
                    Ok(Some(result))
                }
                Command::Del => {
                    // Every step runs even when one fails, so a retry has as little left to do.
                    let mut first_error = None;
                    for step in steps.iter().rev() {
                        if let Err(e) = step.invoke(sub(Command::Del, call.config, &call, &own)).await {
                            first_error.get_or_insert(e);
                        }
                    }
                    let own_del = self.inner.invoke(call).await;
                    match first_error {
                        Some(e) => Err(e),
                        None => own_del,
                    }
                }
                Command::Check => {
                    self.inner.invoke(call).await?;
                    for step in &steps {
                        step.invoke(sub(Command::Check, call.config, &call, &own)).await?;
                    }
                    Ok(None)
                }
                // STATUS and GC: the plugin's own, then each capability's (GC drops the limits
                // and mappings of attachments no longer valid).
                command @ (Command::Status | Command::Gc | Command::Version) => {
                    let answer = self.inner.invoke(call).await?;
                    for step in &steps {
                        step.invoke(sub(command, call.config, &call, &own)).await?;
                    }
                    Ok(answer)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::ErrorCode;
    use crate::delegate::InvocationEnv;
    use serde_json::json;
    use std::sync::Mutex;

    /// Records its calls (command, whether prevResult was given); fails the commands in `fail`.
    struct Recording {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        fail: &'static [&'static str],
    }

    impl NativePlugin for Recording {
        fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
            Box::pin(async move {
                let prev = call.config.get("prevResult").map_or("-".to_owned(), |p| p["tag"].to_string());
                let first = call.list.and_then(|l| l.plugins.first()).and_then(|p| p.get("type")).cloned();
                self.log
                    .lock()
                    .unwrap()
                    .push(format!("{} {} prev={prev} first={first:?}", self.name, call.command));
                if self.fail.contains(&call.command.as_str()) {
                    return Err(crate::delegate::native::native_error(
                        self.name,
                        call.command,
                        ErrorCode::InvalidNetworkConfig,
                        "refused",
                    ));
                }
                Ok((call.command == Command::Add).then(|| json!({"cniVersion": "1.0.0", "tag": self.name})))
            })
        }
    }

    fn plugin(
        name: &'static str,
        log: &Arc<Mutex<Vec<String>>>,
        fail: &'static [&'static str],
    ) -> Arc<dyn NativePlugin> {
        Arc::new(Recording { name, log: log.clone(), fail })
    }

    fn env() -> InvocationEnv {
        InvocationEnv {
            container_id: "c".into(),
            netns: "/run/netns/x".into(),
            ifname: "net1".into(),
            args: String::new(),
        }
    }

    async fn run(
        w: &WithCapabilities,
        command: &str,
        config: &Value,
    ) -> Result<Option<Value>, DelegateError> {
        let env = env();
        let command = Command::parse(command).expect("a CNI verb");
        w.invoke(NativeCall { command, config, env: &env, list: None }).await
    }

    #[tokio::test]
    async fn declared_capabilities_run_on_the_result_and_undo_in_reverse() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let w = WithCapabilities::new(
            plugin("macvlan", &log, &[]),
            vec![("portMappings", plugin("pm", &log, &[])), ("bandwidth", plugin("bw", &log, &[]))],
        );
        let config = json!({"type": "macvlan", "name": "n", "capabilities": {"portMappings": true, "bandwidth": true}});
        let out = run(&w, "ADD", &config).await.unwrap().unwrap();
        assert_eq!(out["tag"], "bw");
        run(&w, "DEL", &config).await.unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "macvlan ADD prev=- first=None",
                "pm ADD prev=\"macvlan\" first=Some(String(\"macvlan\"))",
                "bw ADD prev=\"pm\" first=Some(String(\"macvlan\"))",
                "bw DEL prev=- first=Some(String(\"macvlan\"))",
                "pm DEL prev=- first=Some(String(\"macvlan\"))",
                "macvlan DEL prev=- first=None",
            ]
        );

        // Not declared: the plugin alone.
        log.lock().unwrap().clear();
        run(&w, "ADD", &json!({"type": "macvlan", "capabilities": {"bandwidth": false}})).await.unwrap();
        assert_eq!(*log.lock().unwrap(), ["macvlan ADD prev=- first=None"]);
    }

    #[tokio::test]
    async fn a_failing_capability_undoes_the_attachment_and_fails_the_add() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let w = WithCapabilities::new(
            plugin("macvlan", &log, &[]),
            vec![("portMappings", plugin("pm", &log, &[])), ("bandwidth", plugin("bw", &log, &["ADD"]))],
        );
        let config = json!({"type": "macvlan", "capabilities": {"portMappings": true, "bandwidth": true}});
        let err = run(&w, "ADD", &config).await.unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
        let calls: Vec<String> =
            log.lock().unwrap().iter().map(|l| l.split(" prev").next().unwrap().to_owned()).collect();
        assert_eq!(calls, ["macvlan ADD", "pm ADD", "bw ADD", "pm DEL", "macvlan DEL"]);
    }
}
