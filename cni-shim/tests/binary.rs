//! Runs the real `plexus` binary the way a container runtime does.

use plexus_cni_shim::{CURRENT_VERSION, SUPPORTED_VERSIONS};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

/// Executes the binary with only the given environment and `stdin` on its stdin.
fn plexus(env: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_plexus"))
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn plexus");
    let mut pipe = child.stdin.take().expect("stdin pipe");
    pipe.write_all(stdin.as_bytes()).expect("write stdin");
    drop(pipe);
    child.wait_with_output().expect("wait for plexus")
}

fn stdout_json(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.ends_with('\n'), "stdout {stdout:?}");
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("stdout {stdout:?} is not JSON: {err}"))
}

#[test]
fn version_is_answered_by_the_binary() {
    let output = plexus(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let answer = stdout_json(&output);
    assert_eq!(answer["cniVersion"], "0.3.1");
    assert_eq!(answer["supportedVersions"], serde_json::json!(SUPPORTED_VERSIONS));
}

#[test]
fn unreachable_agent_exits_1_with_try_again_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("plexus.sock");
    let config =
        serde_json::json!({"cniVersion": "1.0.0", "name": "net", "type": "plexus", "socket": socket});
    let env = [("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "c1"), ("CNI_NETNS", "/proc/1/ns/net")];

    let output = plexus(&env, &config.to_string());

    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let error = stdout_json(&output);
    assert_eq!(error["code"], 11);
    assert_eq!(error["cniVersion"], "1.0.0");
    let msg = error["msg"].as_str().expect("msg is a string");
    assert!(msg.contains(&socket.display().to_string()), "{msg}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("not reachable"), "{output:?}");
}

#[test]
fn missing_command_exits_1_with_invalid_environment() {
    let output = plexus(&[], "");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let error = stdout_json(&output);
    assert_eq!(error["code"], 4);
    assert_eq!(error["cniVersion"], CURRENT_VERSION);
}
