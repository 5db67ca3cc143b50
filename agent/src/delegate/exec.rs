//! Running one CNI plugin binary.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::cni::result::ResultError;
use crate::cni::{CniCode, Command, ErrorCode};

/// How a delegate plugin failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DelegateError {
    #[error("CNI plugin {plugin:?} was not found in {dirs}; install it there or fix the network's \"type\"")]
    NotFound { plugin: String, dirs: String },
    #[error("CNI plugin type {0:?} is not a plain binary name")]
    BadType(String),
    #[error("starting CNI plugin {}: {source}", path.display())]
    Spawn { path: PathBuf, source: Arc<std::io::Error> },
    #[error("CNI plugin {plugin} {command} did not finish within {timeout:?} and was killed")]
    Timeout { plugin: String, command: Command, timeout: Duration },
    /// An exec'd plugin answered a CNI error (printed it).
    #[error(
        "CNI plugin {plugin} {command} failed with code {}: {msg}{}{}",
        code.code(),
        opt(details),
        opt_stderr(stderr)
    )]
    Failed { plugin: String, command: Command, code: ErrorCode, msg: String, details: String, stderr: String },
    /// A native plugin failed; its own error, which knows its CNI code, is the source (a
    /// [`CniFailure`](super::native::CniFailure) when it is only a code and a message).
    #[error("CNI plugin {plugin} {command} failed with code {}: {source}", source.cni_code().code())]
    Native { plugin: String, command: Command, source: Arc<dyn CniCode + Send + Sync> },
    #[error(
        "CNI plugin {plugin} {command} printed output that is not CNI JSON: {source}{}",
        opt_stderr(stderr)
    )]
    BadOutput { plugin: String, command: Command, source: Arc<OutputError>, stderr: String },
}

/// What is wrong with what a plugin printed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Result(#[from] ResultError),
    #[error("it printed nothing; an IPAM plugin must print its result on ADD")]
    NoResult,
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
    /// A native plugin's failure, keeping its error (and so its code) as the source.
    pub fn native(plugin: &str, command: Command, source: impl CniCode + Send + Sync + 'static) -> Self {
        DelegateError::Native { plugin: plugin.to_owned(), command, source: Arc::new(source) }
    }

    pub fn bad_output(
        plugin: &str,
        command: Command,
        source: impl Into<OutputError>,
        stderr: String,
    ) -> Self {
        DelegateError::BadOutput {
            plugin: plugin.to_owned(),
            command,
            source: Arc::new(source.into()),
            stderr,
        }
    }
}

impl CniCode for DelegateError {
    /// The plugin's own code when it gave one.
    fn cni_code(&self) -> ErrorCode {
        match self {
            DelegateError::Failed { code, .. } => *code,
            DelegateError::Native { source, .. } => source.cni_code(),
            DelegateError::NotFound { .. } | DelegateError::BadType(_) => ErrorCode::InvalidNetworkConfig,
            DelegateError::Spawn { .. } | DelegateError::Timeout { .. } | DelegateError::BadOutput { .. } => {
                ErrorCode::DelegateFailed
            }
        }
    }
}

/// Everything one plugin execution needs.
#[derive(Debug, Clone)]
pub struct Exec<'a> {
    pub plugin: &'a str,
    pub command: Command,
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
        .env("CNI_COMMAND", exec.command.as_str())
        .env("CNI_PATH", cni_path)
        .envs(exec.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = spawn(&mut cmd)
        .await
        .map_err(|e| DelegateError::Spawn { path: path.clone(), source: Arc::new(e) })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin may exit without reading stdin (EPIPE here); its exit status and output,
        // read next, tell what happened, so this write's error adds nothing.
        let _ = stdin.write_all(exec.config.to_string().as_bytes()).await;
    }
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(DelegateError::Spawn { path, source: Arc::new(e) }),
        Err(_) => {
            return Err(DelegateError::Timeout {
                plugin: exec.plugin.to_owned(),
                command: exec.command,
                timeout,
            })
        }
    };
    read_output(exec.plugin, exec.command, output.status, &output.stdout, &output.stderr)
}

/// What a plugin's exit status and output mean: its result JSON (None when it printed
/// nothing, as DEL may), or the CNI error it printed or amounts to. Plugins are untrusted
/// input: anything may come back.
pub fn read_output(
    plugin: &str,
    command: Command,
    status: std::process::ExitStatus,
    stdout: &[u8],
    stderr: &[u8],
) -> Result<Option<Value>, DelegateError> {
    let stdout = String::from_utf8_lossy(stdout);
    let stderr = String::from_utf8_lossy(stderr).into_owned();
    let parsed: Option<Result<Value, _>> =
        if stdout.trim().is_empty() { None } else { Some(serde_json::from_str::<Value>(stdout.trim())) };
    if status.success() {
        return match parsed {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v)),
            Some(Err(e)) => Err(DelegateError::bad_output(plugin, command, e, stderr)),
        };
    }
    let (code, msg, details) = match parsed {
        Some(Ok(v)) if v.get("code").is_some() => (
            plugin_code(&v),
            v.get("msg").and_then(Value::as_str).unwrap_or_default().to_owned(),
            v.get("details").and_then(Value::as_str).unwrap_or_default().to_owned(),
        ),
        _ => (
            ErrorCode::DelegateFailed,
            format!(
                "exited with {}{}",
                status,
                if stdout.trim().is_empty() { "" } else { " and non-JSON output" }
            ),
            stdout.trim().to_owned(),
        ),
    };
    Err(DelegateError::Failed { plugin: plugin.to_owned(), command, code, msg, details, stderr })
}

/// The code of a CNI error a plugin printed; one that is not a number is a plugin failure
/// without a code of its own.
fn plugin_code(error: &Value) -> ErrorCode {
    match error.get("code").and_then(Value::as_u64).map(u32::try_from) {
        Some(Ok(code)) => ErrorCode::Delegate(code),
        _ => ErrorCode::DelegateFailed,
    }
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
        Exec { plugin, command: Command::Add, env: vec![("CNI_IFNAME", "net1".into())], config }
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
        assert!(matches!(err, DelegateError::Failed { code: ErrorCode::Delegate(7), .. }));
        let text = err.to_string();
        assert!(text.contains("bad master") && text.contains("eth9") && text.contains("oops"), "{text}");
        assert_eq!(err.cni_code().code(), 7);
    }

    #[tokio::test]
    async fn crashes_timeouts_and_missing_plugins() {
        let d = tempfile::tempdir().unwrap();
        script(d.path(), "crasher", "echo segfault >&2; exit 139");
        script(d.path(), "sleeper", "sleep 10");
        let dirs = [d.path().to_owned()];
        let conf = serde_json::json!({});
        let err = run(&dirs, exec("crasher", &conf), Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(err.cni_code().code(), 100);
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
