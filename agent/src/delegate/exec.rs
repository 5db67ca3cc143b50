//! Running one CNI plugin binary.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::cni::{CniError, ErrorCode};

/// How a delegate plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DelegateError {
    #[error("CNI plugin {plugin:?} was not found in {dirs}; install it there or fix the network's \"type\"")]
    NotFound { plugin: String, dirs: String },
    #[error("CNI plugin type {0:?} is not a plain binary name")]
    BadType(String),
    #[error("starting CNI plugin {path}: {detail}")]
    Spawn { path: String, detail: String },
    #[error("CNI plugin {plugin} {command} did not finish within {timeout:?} and was killed")]
    Timeout { plugin: String, command: String, timeout: Duration },
    #[error(
        "CNI plugin {plugin} {command} failed with code {code}: {msg}{}{}",
        opt(details),
        opt_stderr(stderr)
    )]
    Failed { plugin: String, command: String, code: u32, msg: String, details: String, stderr: String },
    #[error(
        "CNI plugin {plugin} {command} printed output that is not CNI JSON: {detail}{}",
        opt_stderr(stderr)
    )]
    BadOutput { plugin: String, command: String, detail: String, stderr: String },
}

fn opt(details: &str) -> String {
    if details.is_empty() {
        String::new()
    } else {
        format!(" ({details})")
    }
}

fn opt_stderr(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!("; stderr: {s}")
    }
}

impl DelegateError {
    /// The code the runtime sees: the plugin's own when it gave one.
    pub fn code(&self) -> ErrorCode {
        match self {
            DelegateError::Failed { code, .. } => ErrorCode::Delegate(*code),
            DelegateError::NotFound { .. } | DelegateError::BadType(_) => ErrorCode::InvalidNetworkConfig,
            _ => ErrorCode::DelegateFailed,
        }
    }

    pub fn to_cni_error(&self, attachment: &str) -> CniError {
        CniError::new(self.code(), format!("attachment {attachment}: {self}"))
            .with_details(attachment.to_owned())
    }
}

/// Everything one plugin execution needs.
#[derive(Debug, Clone)]
pub struct Exec<'a> {
    pub plugin: &'a str,
    pub command: &'a str,
    /// CNI_* variables, in addition to CNI_COMMAND and CNI_PATH.
    pub env: Vec<(&'static str, String)>,
    pub config: &'a Value,
}

/// Finds `plugin` in the first directory that has it.
pub fn find_plugin(dirs: &[PathBuf], plugin: &str) -> Result<PathBuf, DelegateError> {
    if plugin.is_empty() || plugin.contains('/') || plugin == "." || plugin == ".." {
        return Err(DelegateError::BadType(plugin.to_owned()));
    }
    dirs.iter().map(|d| d.join(plugin)).find(|p| is_executable(p)).ok_or_else(|| DelegateError::NotFound {
        plugin: plugin.to_owned(),
        dirs: dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":"),
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Spawns, riding out ETXTBSY: while a plugin binary is being written (installed, upgraded),
/// any process forked meanwhile holds it open for writing until it execs, and the kernel
/// refuses to execute it for that instant.
async fn spawn(cmd: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let mut delay = Duration::from_millis(5);
    for _ in 0..6 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            other => return other,
        }
    }
    cmd.spawn()
}

/// Runs the plugin and returns its stdout JSON (None when it printed nothing, as DEL may).
pub async fn run(
    dirs: &[PathBuf],
    exec: Exec<'_>,
    timeout: Duration,
) -> Result<Option<Value>, DelegateError> {
    let path = find_plugin(dirs, exec.plugin)?;
    let cni_path = std::env::join_paths(dirs).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&path);
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into()))
        .env("CNI_COMMAND", exec.command)
        .env("CNI_PATH", cni_path)
        .envs(exec.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = spawn(&mut cmd)
        .await
        .map_err(|e| DelegateError::Spawn { path: path.display().to_string(), detail: e.to_string() })?;
    let stdin_bytes = serde_json::to_vec(exec.config).unwrap_or_default();
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading stdin; its exit status tells what happened.
        let _ = stdin.write_all(&stdin_bytes).await;
    }
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            return Err(DelegateError::Spawn { path: path.display().to_string(), detail: e.to_string() })
        }
        Err(_) => {
            return Err(DelegateError::Timeout {
                plugin: exec.plugin.to_owned(),
                command: exec.command.to_owned(),
                timeout,
            })
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let parsed: Option<Result<Value, _>> =
        if stdout.trim().is_empty() { None } else { Some(serde_json::from_str::<Value>(stdout.trim())) };
    if output.status.success() {
        return match parsed {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v)),
            Some(Err(e)) => Err(DelegateError::BadOutput {
                plugin: exec.plugin.to_owned(),
                command: exec.command.to_owned(),
                detail: e.to_string(),
                stderr,
            }),
        };
    }
    let (code, msg, details) = match parsed {
        Some(Ok(v)) if v.get("code").is_some() => (
            v.get("code").and_then(Value::as_u64).unwrap_or(100) as u32,
            v.get("msg").and_then(Value::as_str).unwrap_or_default().to_owned(),
            v.get("details").and_then(Value::as_str).unwrap_or_default().to_owned(),
        ),
        _ => (
            ErrorCode::DelegateFailed.code(),
            format!(
                "exited with {}{}",
                output.status,
                if stdout.trim().is_empty() { "" } else { " and non-JSON output" }
            ),
            stdout.trim().to_owned(),
        ),
    };
    Err(DelegateError::Failed {
        plugin: exec.plugin.to_owned(),
        command: exec.command.to_owned(),
        code,
        msg,
        details,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn exec<'a>(plugin: &'a str, config: &'a Value) -> Exec<'a> {
        Exec { plugin, command: "ADD", env: vec![("CNI_IFNAME", "net1".into())], config }
    }

    #[tokio::test]
    async fn passes_env_and_stdin_and_reads_the_result() {
        let d = tempfile::tempdir().unwrap();
        script(
            d.path(),
            "echoer",
            r#"read conf; echo "{\"cmd\":\"$CNI_COMMAND\",\"if\":\"$CNI_IFNAME\",\"conf\":$conf}""#,
        );
        let conf = serde_json::json!({"a": 1});
        let out = run(&[d.path().to_owned()], exec("echoer", &conf), Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(out, serde_json::json!({"cmd":"ADD","if":"net1","conf":{"a":1}}));
    }

    #[tokio::test]
    async fn cni_errors_keep_their_code_and_stderr() {
        let d = tempfile::tempdir().unwrap();
        script(
            d.path(),
            "failer",
            r#"echo '{"code":7,"msg":"bad master","details":"eth9"}'; echo oops >&2; exit 1"#,
        );
        let conf = serde_json::json!({});
        let err =
            run(&[d.path().to_owned()], exec("failer", &conf), Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(err, DelegateError::Failed { code: 7, .. }));
        let text = err.to_string();
        assert!(text.contains("bad master") && text.contains("eth9") && text.contains("oops"), "{text}");
        assert_eq!(err.code().code(), 7);
    }

    #[tokio::test]
    async fn crashes_timeouts_and_missing_plugins() {
        let d = tempfile::tempdir().unwrap();
        script(d.path(), "crasher", "echo segfault >&2; exit 139");
        script(d.path(), "sleeper", "sleep 10");
        let dirs = [d.path().to_owned()];
        let conf = serde_json::json!({});
        let err = run(&dirs, exec("crasher", &conf), Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(err.code().code(), 100);
        assert!(err.to_string().contains("segfault"));
        let err = run(&dirs, exec("sleeper", &conf), Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(err, DelegateError::Timeout { .. }));
        let err = run(&dirs, exec("nope", &conf), Duration::from_secs(1)).await.unwrap_err();
        assert!(err.to_string().contains("was not found"));
        assert!(matches!(
            run(&dirs, exec("../x", &conf), Duration::from_secs(1)).await,
            Err(DelegateError::BadType(_))
        ));
    }
}
