//! The policy from a file (`--nad-policy FILE`): one or more `NetworkAttachmentPolicy`
//! objects, YAML documents or JSON, the same objects a cluster would hold.
//!
//! Read at start, where an invalid file stops the agent with the error. Re-read when its
//! content changes (checked every [`POLL`]; a rename over it, as a ConfigMap update does, is
//! seen too). An invalid new version, or a missing file, keeps the last good policy in force,
//! logged as a warning and counted in `plexus_network_policy_loads{result="invalid"}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::model::{Policy, PolicyError, PolicySource, GROUP, KIND, VERSION};
use super::{PolicyHandle, PolicyState};
use crate::metrics::metrics;

/// How often the file is checked for a new version.
pub const POLL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    #[error("reading the network attachment policy {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the network attachment policy {path} is not valid YAML or JSON: {detail}")]
    Syntax { path: PathBuf, detail: String },
    #[error(
        "the network attachment policy {path}, document {document}: {detail}; each document is an object with \
         apiVersion: {GROUP}/{VERSION}, kind: {KIND}, metadata.name and spec"
    )]
    Object { path: PathBuf, document: usize, detail: String },
    #[error(
        "the network attachment policy {path} holds no {KIND}; write one (docs/policy.md), or start without \
         --nad-policy to allow every network"
    )]
    Empty { path: PathBuf },
    #[error("the network attachment policy {path}: {source}")]
    Invalid { path: PathBuf, source: Box<PolicyError> },
}

/// The policy objects of a file's text, in file order (the first is the oldest).
pub fn parse(path: &Path, text: &str) -> Result<Vec<PolicySource>, PolicyFileError> {
    let syntax = |detail: String| PolicyFileError::Syntax { path: path.to_owned(), detail };
    let docs: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(text).map_err(|e| syntax(e.to_string()))?]
    } else {
        serde_yaml::Deserializer::from_str(text)
            .enumerate()
            .map(|(i, d)| Value::deserialize(d).map_err(|e| syntax(format!("document {}: {e}", i + 1))))
            .collect::<Result<_, _>>()?
    };
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let object =
            |detail: String| PolicyFileError::Object { path: path.to_owned(), document: i + 1, detail };
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
        if api_version != format!("{GROUP}/{VERSION}") || kind != KIND {
            return Err(object(format!("found apiVersion {api_version:?}, kind {kind:?}")));
        }
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| object("metadata.name is missing".into()))?;
        let source = PolicySource::from_spec(name, doc.get("spec").unwrap_or(&Value::Null))
            .map_err(|source| PolicyFileError::Invalid { path: path.to_owned(), source: Box::new(source) })?;
        out.push(source);
    }
    if out.is_empty() {
        return Err(PolicyFileError::Empty { path: path.to_owned() });
    }
    Ok(out)
}

/// Reads and compiles the file.
pub fn load(path: &Path) -> Result<Policy, PolicyFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| PolicyFileError::Read { path: path.to_owned(), source })?;
    compile(path, &text)
}

fn compile(path: &Path, text: &str) -> Result<Policy, PolicyFileError> {
    let sources = parse(path, text)?;
    let policy = Policy::compile(&sources)
        .map_err(|source| PolicyFileError::Invalid { path: path.to_owned(), source: Box::new(source) })?;
    for c in policy.conflicts() {
        tracing::warn!(file = %path.display(), "network attachment policy: {c}");
    }
    Ok(policy)
}

/// Loads the file into a new handle (or fails), and returns the task that keeps it current.
pub fn start(
    path: PathBuf,
    host: Arc<dyn super::HostLookup>,
) -> Result<(PolicyHandle, impl std::future::Future<Output = ()> + Send + 'static), PolicyFileError> {
    let text = std::fs::read_to_string(&path)
        .map_err(|source| PolicyFileError::Read { path: path.clone(), source })?;
    let policy = compile(&path, &text)?;
    log_loaded(&path, &policy);
    metrics().policy_load("ok");
    let handle = PolicyHandle::new(PolicyState::Active(Arc::new(policy)), host);
    let task = follow(path, handle.clone(), text, POLL);
    Ok((handle, task))
}

fn log_loaded(path: &Path, policy: &Policy) {
    tracing::info!(file = %path.display(), rules = policy.rules().len(), "network attachment policy loaded");
}

/// Re-reads `path` every `every`; a changed, valid version replaces the policy in `handle`.
pub async fn follow(path: PathBuf, handle: PolicyHandle, mut last: String, every: Duration) {
    // The last problem logged, so a file that stays broken is logged once, not every poll.
    let mut reported: Option<String> = None;
    loop {
        tokio::time::sleep(every).await;
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || std::fs::read_to_string(&path)).await
        };
        let text = match read {
            Ok(Ok(text)) => text,
            Ok(Err(source)) => {
                let e = PolicyFileError::Read { path: path.clone(), source };
                report(&mut reported, &e);
                continue;
            }
            Err(_) => continue,
        };
        if text == last {
            continue;
        }
        match compile(&path, &text) {
            Ok(policy) => {
                log_loaded(&path, &policy);
                metrics().policy_load("ok");
                handle.set(PolicyState::Active(Arc::new(policy)));
                reported = None;
            }
            Err(e) => report(&mut reported, &e),
        }
        last = text;
    }
}

fn report(reported: &mut Option<String>, e: &PolicyFileError) {
    let msg = e.to_string();
    if reported.as_deref() != Some(msg.as_str()) {
        metrics().policy_load("invalid");
        tracing::warn!("{msg}; the last valid version stays in force until the file is fixed");
        *reported = Some(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GOOD: &str = r#"
apiVersion: plexus.dev/v1alpha1
kind: NetworkAttachmentPolicy
metadata: {name: base}
spec:
  rules:
    - {name: all, namespaces: ["*"], plugins: [bridge], interfaces: {bridges: [br-t]}}
---
apiVersion: plexus.dev/v1alpha1
kind: NetworkAttachmentPolicy
metadata: {name: nfv}
spec:
  rules:
    - {namespaces: [nfv, "*"], plugins: [macvlan], interfaces: {macvlanMasters: [eth1]}}
"#;

    fn p() -> &'static Path {
        Path::new("/etc/plexus/policy.yaml")
    }

    #[test]
    fn several_documents_in_file_order_the_first_wins_a_namespace() {
        let sources = parse(p(), GOOD).unwrap();
        assert_eq!(sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["base", "nfv"]);
        let policy = compile(p(), GOOD).unwrap();
        assert_eq!(policy.rule_for("x").unwrap().name, "all");
        assert_eq!(policy.rule_for("nfv").unwrap().policy, "nfv");
        assert_eq!(policy.conflicts().len(), 1);
        let json = json!({"apiVersion": "plexus.dev/v1alpha1", "kind": "NetworkAttachmentPolicy",
                          "metadata": {"name": "j"}, "spec": {"rules": [{"namespaces": ["a"]}]}});
        assert_eq!(parse(p(), &json.to_string()).unwrap()[0].name, "j");
    }

    #[test]
    fn invalid_files_say_what_and_where() {
        let cases = [
            ("", "holds no NetworkAttachmentPolicy"),
            ("rules: [\n", "not valid YAML or JSON"),
            ("{\"x\": ", "not valid YAML or JSON"),
            ("kind: Pod\napiVersion: v1\nmetadata: {name: p}\n", "document 1: found apiVersion \"v1\", kind \"Pod\""),
            ("apiVersion: plexus.dev/v1alpha1\nkind: NetworkAttachmentPolicy\nspec: {}\n", "metadata.name is missing"),
            (
                "apiVersion: plexus.dev/v1alpha1\nkind: NetworkAttachmentPolicy\nmetadata: {name: x}\nspec: {rules: [{namespaces: [a], plugin: [b]}]}\n",
                "NetworkAttachmentPolicy \"x\": spec: unknown field `plugin`",
            ),
            (
                "apiVersion: plexus.dev/v1alpha1\nkind: NetworkAttachmentPolicy\nmetadata: {name: x}\nspec: {rules: [{namespaces: []}]}\n",
                "lists no namespaces",
            ),
        ];
        for (text, needle) in cases {
            let err = compile(p(), text).unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains("/etc/plexus/policy.yaml"), "{text:?}: {err}");
        }
    }

    #[tokio::test]
    async fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_last_good() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("policy.yaml");
        std::fs::write(&path, GOOD).unwrap();
        struct NoPfs;
        impl super::super::HostLookup for NoPfs {
            fn sriov_pf(&self, _: &str) -> Option<String> {
                None
            }
        }
        let (handle, task) = start(path.clone(), Arc::new(NoPfs)).unwrap();
        drop(task);
        let task = tokio::spawn(follow(path.clone(), handle.clone(), GOOD.into(), Duration::from_millis(10)));
        let bridge = json!({"type": "bridge", "bridge": "br-t"});
        handle.check("x", "x/n", &bridge).unwrap();

        let wait = |want_ok: bool| {
            let handle = handle.clone();
            let bridge = bridge.clone();
            async move {
                for _ in 0..500 {
                    if handle.check("x", "x/n", &bridge).is_ok() == want_ok {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!("the policy did not change to ok={want_ok}");
            }
        };
        // A new valid version: replaced (written by rename, as a ConfigMap update does).
        let narrower = GOOD.replace("bridges: [br-t]", "bridges: [br-other]");
        std::fs::write(d.path().join("tmp"), &narrower).unwrap();
        std::fs::rename(d.path().join("tmp"), &path).unwrap();
        wait(false).await;
        // Broken, then removed: the last good version stays.
        std::fs::write(&path, "rules: [").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(handle.check("x", "x/n", &bridge).is_err());
        std::fs::remove_file(&path).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(handle.check("x", "x/n", &bridge).is_err());
        assert!(matches!(handle.state(), PolicyState::Active(_)));
        // Fixed: taken.
        std::fs::write(&path, GOOD).unwrap();
        wait(true).await;
        task.abort();
    }

    #[test]
    fn a_missing_file_at_start_is_an_error() {
        struct NoPfs;
        impl super::super::HostLookup for NoPfs {
            fn sriov_pf(&self, _: &str) -> Option<String> {
                None
            }
        }
        let err =
            start(PathBuf::from("/nonexistent/policy.yaml"), Arc::new(NoPfs)).err().unwrap().to_string();
        assert!(err.contains("reading the network attachment policy /nonexistent/policy.yaml"), "{err}");
    }
}
