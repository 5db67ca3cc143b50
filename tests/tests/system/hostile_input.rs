//! Hostile input through the real `plexus` shim and agent: names that climb out of the state
//! directory, stdin that is not JSON, manifests that are not UTF-8, and what a crash leaves
//! behind (a temporary state file, a metrics port). Each test checks that nothing is written
//! where it must not be and that nothing is left behind.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_tests::world::bin;
use plexus_tests::{CniOutput, Netns, World, REFERENCE_PLUGINS};
use serde_json::{json, Value};

#[track_caller]
fn assert_cni_error(out: &CniOutput, code: u64, needles: &[&str]) {
    assert_eq!(out.code(), Some(code), "stdout: {} stderr: {}", out.stdout, out.stderr);
    let msg = out.msg();
    for needle in needles {
        assert!(msg.contains(needle), "error {code} does not mention {needle:?}: {msg}");
    }
}

/// Every file below `dir`, relative to it.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_owned());
            }
        }
    }
    out
}

/// The report files (network-status, events) anywhere in the world, or next to it.
fn report_files(w: &World) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = files_below(w.dir.path())
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".network-status.json") || name.ends_with(".events")
        })
        .collect();
    // One level above the world: where a name with one more "../" would land.
    let parent = w.dir.path().parent().unwrap();
    for name in ["escape.network-status.json", "escape.events"] {
        if parent.join(name).exists() {
            found.push(parent.join(name));
        }
    }
    found
}

fn cni_args(namespace: &str, name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}")
}

fn call(w: &World, command: &str, cid: &str, pod: &Netns, args: &str) -> CniOutput {
    let netns = pod.path_str();
    w.shim(
        &[
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
        ],
        &w.plexus_config("1.0.0"),
    )
}

fn write_manifest(w: &World, file: &str, body: &[u8]) {
    std::fs::write(w.path("pods").join(file), body).expect("writing a pod manifest");
}

fn pod_manifest(namespace: &str, name: &str) -> Vec<u8> {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}})
        .to_string()
        .into_bytes()
}

#[test]
fn kernel_pod_names_that_climb_out_of_the_state_dir_are_refused() {
    let mut w = World::new();
    // Manifests an attacker could write: with names no API server accepts, which joined to
    // <state-dir>/pods/<namespace>/<name> land in the world's directory or above it.
    write_manifest(&w, "evil-name.json", &pod_manifest("default", "../../../escape"));
    write_manifest(&w, "evil-namespace.json", &pod_manifest("../../..", "escape"));
    write_manifest(&w, "good.json", &pod_manifest("default", "good"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    for (args, arg, rule) in [
        (cni_args("default", "../../../escape"), "K8S_POD_NAME", "DNS-1123 subdomain"),
        (cni_args("../../..", "escape"), "K8S_POD_NAMESPACE", "DNS-1123 label"),
        (cni_args("default", "../../../../escape"), "K8S_POD_NAME", "DNS-1123 subdomain"),
    ] {
        for command in ["ADD", "CHECK", "DEL"] {
            let out = call(&w, command, "c-evil", &pod, &args);
            assert_cni_error(&out, 4, &["CNI_ARGS", arg, rule]);
        }
    }
    assert_eq!(report_files(&w), Vec::<PathBuf>::new(), "no report file written anywhere");
    w.assert_nothing_left(&[&pod]);

    // The manifests with such names are reported, naming the file; the others keep serving.
    call(&w, "ADD", "c-good", &pod, &cni_args("default", "good")).expect_ok();
    let log = w.agent_log();
    for file in ["evil-name.json", "evil-namespace.json"] {
        assert!(
            log.lines().any(|l| l.contains(file) && l.contains("DNS-1123")),
            "{file} not reported:\n{log}"
        );
    }
    assert_eq!(
        report_files(&w),
        [PathBuf::from("state/pods/default/good.network-status.json")],
        "the one report is where it belongs"
    );
    call(&w, "DEL", "c-good", &pod, &cni_args("default", "good")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_a_pod_manifest_that_is_not_utf8_is_named_and_fails_for_good() {
    let mut w = World::new();
    // A Latin-1 "é" in an annotation: the file is otherwise a fine manifest.
    let mut latin1 = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: latin\n  namespace: default\n".to_vec();
    latin1.extend_from_slice(b"  annotations: {owner: \"Ren\xe9\"}\n");
    write_manifest(&w, "latin.yaml", &latin1);
    write_manifest(&w, "good.json", &pod_manifest("default", "good"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let file = w.path("pods").join("latin.yaml").display().to_string();
    let out = call(&w, "ADD", "c-latin", &pod, &cni_args("default", "latin"));
    assert_cni_error(&out, 6, &["pod default/latin", &file, "not valid UTF-8", "fix or remove the file"]);
    w.assert_nothing_left(&[&pod]);
    assert!(w.agent_log().contains(&file), "the file is reported when indexed");

    // The other files keep serving; fixing the file in place makes the pod known.
    call(&w, "ADD", "c-good", &pod, &cni_args("default", "good")).expect_ok();
    call(&w, "DEL", "c-good", &pod, &cni_args("default", "good")).expect_ok();
    write_manifest(&w, "latin.yaml", &pod_manifest("default", "latin"));
    call(&w, "ADD", "c-latin", &pod, &cni_args("default", "latin")).expect_ok();
    call(&w, "DEL", "c-latin", &pod, &cni_args("default", "latin")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Runs the shim with raw bytes on stdin.
fn shim_with_bytes(env: &[(&str, &str)], stdin: &[u8]) -> CniOutput {
    let mut child = Command::new(bin("plexus"))
        .env_clear()
        .envs(env.iter().copied())
        .env("CNI_PATH", REFERENCE_PLUGINS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running plexus");
    child.stdin.take().unwrap().write_all(stdin).expect("writing stdin");
    let out = child.wait_with_output().expect("waiting for plexus");
    CniOutput {
        exit_code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn stdin_that_is_not_json_is_a_decode_failure_without_asking_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    // An agent socket that accepts: a request sent to it would be seen here.
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let s = socket.display().to_string();
    let mut deep = format!(r#"{{"cniVersion":"1.0.0","socket":"{s}","x":"#).into_bytes();
    deep.extend(std::iter::repeat_n(b'[', 1000));
    deep.extend(std::iter::repeat_n(b']', 1000));
    deep.push(b'}');
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("NUL bytes", format!("{{\"cniVersion\":\"1.0.0\",\"socket\":\"{s}\"}}\0").into_bytes()),
        ("NUL inside", format!("{{\"cniVersion\":\"1.0.0\",\0\"socket\":\"{s}\"}}").into_bytes()),
        (
            "invalid UTF-8 in a string",
            [format!(r#"{{"socket":"{s}","name":"a"#).as_bytes(), b"\xc3\x28\"}"].concat(),
        ),
        ("nesting past the parser's limit", deep),
        ("truncated", format!(r#"{{"socket":"{s}","#).into_bytes()),
    ];
    for (what, stdin) in cases {
        let started = Instant::now();
        let out = shim_with_bytes(
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_NETNS", "/proc/self/ns/net"),
                ("CNI_IFNAME", "eth0"),
            ],
            &stdin,
        );
        let elapsed = started.elapsed();
        assert_cni_error(&out, 6, &["the network configuration on stdin is not"]);
        assert!(out.stderr.contains("plexus: the network configuration"), "{what}: {}", out.stderr);
        assert_eq!(
            listener.accept().map(|_| ()).unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock,
            "{what}: the shim connected to an agent"
        );
        // The shim's retries take 1.5 s; an answer without them is much faster.
        assert!(elapsed < Duration::from_millis(1400), "{what}: took {elapsed:?}");
    }
}

/// Sends one raw request to the agent and returns its CNI error code and message.
fn raw_request(w: &World, body: &[u8]) -> (u64, String) {
    let mut stream = UnixStream::connect(w.socket()).expect("connecting to the agent");
    stream.write_all(body).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let response: Value = serde_json::from_slice(&answer).expect("response JSON");
    let stdout: Value = serde_json::from_str(response["stdout"].as_str().unwrap()).expect("CNI output");
    (stdout["code"].as_u64().unwrap_or(0), stdout["msg"].as_str().unwrap_or_default().to_owned())
}

#[test]
fn kernel_the_agent_refuses_a_config_that_is_not_utf8() {
    let mut w = World::new();
    w.start_agent();
    let pod = Netns::new("pxpod");
    let head = format!(
        r#"{{"command":"ADD","container_id":"c1","netns":"{}","ifname":"eth0","config":""#,
        pod.path_str()
    );
    // Raw invalid UTF-8 inside the config string (a client other than the shim).
    let raw = [head.as_bytes(), br#"{\"cniVersion\":\"1.0.0\",\"name\":\"n"#, b"\xff", br#"\"}"}"#].concat();
    let (code, msg) = raw_request(&w, &raw);
    assert_eq!(code, 6, "{msg}");
    // An escaped lone surrogate in a string of the config: no character at all.
    let surrogate = [head.as_bytes(), br#"{\"cniVersion\":\"1.0.0\",\"name\":\"\\udc80\"}"}"#].concat();
    let (code, msg) = raw_request(&w, &surrogate);
    assert_eq!(code, 6, "{msg}");
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_temporary_files_of_a_crashed_write_are_swept_at_start() {
    let mut w = World::new();
    let records = w.path("state").join("attachments");
    std::fs::create_dir_all(&records).unwrap();
    let left = records.join(".c1@eth0.json.4242.tmp");
    std::fs::write(&left, "{\"container_id\":").unwrap();
    let report = w.path("state").join("pods/default");
    std::fs::create_dir_all(&report).unwrap();
    std::fs::write(report.join(".p.network-status.json.4242.tmp"), "[").unwrap();
    let runtime_conf = w.path("runtime").join(".00-plexus.conflist.4242.tmp");
    std::fs::write(&runtime_conf, "{").unwrap();
    // Files of the same shape that are not the agent's stay.
    let foreign = w.path("runtime").join(".10-other.conflist.4242.tmp");
    std::fs::write(&foreign, "{").unwrap();

    w.start_agent();
    assert!(!left.exists(), "{} stays", left.display());
    assert!(!report.join(".p.network-status.json.4242.tmp").exists());
    assert!(!runtime_conf.exists());
    assert!(foreign.exists(), "another program's temporary file is not ours to remove");
    let log = w.agent_log();
    assert!(log.contains(".c1@eth0.json.4242.tmp") && log.contains("interrupted"), "not logged:\n{log}");
    w.assert_nothing_left(&[]);
}

/// GET /healthz on the agent's metrics address (its default, in the node namespace).
fn healthz(node: &Netns, keep: &mut Vec<std::net::TcpStream>) -> Option<String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let _inside = node.enter();
            let mut stream = std::net::TcpStream::connect("127.0.0.1:9465").ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n").ok()?;
            let mut buf = [0u8; 512];
            let n = stream.read(&mut buf).ok()?;
            keep.push(stream);
            Some(String::from_utf8_lossy(&buf[..n]).into_owned())
        })
        .join()
        .expect("metrics client")
    })
}

#[test]
fn kernel_an_agent_restarted_right_after_sigkill_binds_its_metrics_address() {
    let mut w = World::new();
    w.start_agent();
    let mut clients = Vec::new();
    let first = healthz(&w.node, &mut clients).expect("the first agent serves /healthz");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    for round in 0..3 {
        // SIGKILL without waiting, a client still connected, and a new agent at once.
        let pid = w.agent.as_ref().unwrap().pid().to_string();
        assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
        w.start_agent();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(r) = healthz(&w.node, &mut clients) {
                assert!(r.starts_with("HTTP/1.1 200"), "{r}");
                break;
            }
            assert!(Instant::now() < deadline, "round {round}: no agent serves /healthz:\n{}", w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
        let pid = w.agent.as_ref().unwrap().pid();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(
            !state.is_empty() && !state.contains(") Z "),
            "round {round}: the restarted agent exited:\n{}",
            w.agent_log()
        );
    }
    assert!(!w.agent_log().contains("binding the metrics address"), "{}", w.agent_log());
}

/// The first ADD after a start competed with the eBPF dataplane's load (120 ms where later ones
/// took 40 to 60): the runtime is told plexus is ready (its CNI config written) only once the
/// agent is warm, so the runtime's first ADD finds it so.
#[test]
fn kernel_the_runtime_is_told_plexus_is_ready_only_once_the_agent_is_warm() {
    let mut w = World::new();
    w.start_agent();
    let conf = w.path("runtime").join("00-plexus.conflist");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !conf.exists() {
        assert!(Instant::now() < deadline, "no CNI config written; log:\n{}", w.agent_log());
        std::thread::sleep(Duration::from_millis(5));
    }
    let log = w.agent_log();
    assert!(
        log.contains("warmed up") || log.contains("still loading after"),
        "the CNI config was written before the warm-up ended; log:\n{log}"
    );
}
