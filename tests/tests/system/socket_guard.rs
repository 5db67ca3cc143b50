//! The agent's socket against its own callers: who may connect (the peer's credentials, not
//! only the file mode), and clients that never finish a request, send far too much, or pile
//! up idle connections, while the runtime's ADD through the real shim is still answered at
//! once.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use plexus_tests::world::{bin, run_cni};
use plexus_tests::{CniOutput, Netns, World, REFERENCE_PLUGINS};
use serde_json::Value;

const NS: &str = "default";
/// A group no account of the machine has: membership comes only from setpriv.
const GROUP: u32 = 47_113;
const NOBODY: &str = "65534";

/// The agent's read deadline (its default) and request size limit.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const LIMIT_TEXT: &str = "4 MiB";
/// The flooding client's request.
const FLOOD: usize = 100 << 20;

/// Lets any user reach the world's socket: the world directory is private to root, and a
/// socket's own mode is widened where a test needs a peer the agent itself must refuse.
fn open_path_to_socket(w: &World) {
    std::fs::set_permissions(w.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The real shim, run by `setpriv` with the given user and groups, asking for STATUS.
fn status_as(w: &World, setpriv: &[&str]) -> CniOutput {
    let mut cmd = Command::new("setpriv");
    cmd.args(setpriv)
        .arg(bin("plexus"))
        .env_clear()
        .env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", REFERENCE_PLUGINS);
    run_cni(&mut cmd, &w.plexus_config("1.1.0"))
}

fn as_nobody(groups: &str) -> Vec<String> {
    let mut args = vec![format!("--reuid={NOBODY}"), format!("--regid={NOBODY}")];
    if groups.is_empty() {
        args.push("--clear-groups".into());
    } else {
        args.push(format!("--groups={groups}"));
    }
    args
}

#[track_caller]
fn assert_refused(out: &CniOutput, needles: &[&str]) {
    assert_eq!(out.code(), Some(101), "expected the agent's refusal: {} {}", out.stdout, out.stderr);
    let v = out.json();
    let text = format!("{} {}", out.msg(), v["details"].as_str().unwrap_or_default());
    for needle in needles {
        assert!(text.contains(needle), "refusal does not mention {needle:?}: {text}");
    }
}

#[test]
fn kernel_a_peer_that_is_not_root_is_refused_by_its_credentials() {
    let mut w = World::new();
    w.start_agent();
    open_path_to_socket(&w);
    let socket = w.socket();
    assert_eq!(std::fs::metadata(&socket).unwrap().mode() & 0o777, 0o600);

    // A socket made world-writable by mistake still does not let another user in.
    chmod(&socket, 0o666);
    let out = status_as(&w, &as_nobody("").iter().map(String::as_str).collect::<Vec<_>>());
    assert_refused(&out, &["uid 65534", "only root", "--socket-group"]);

    // Root is served as before.
    let out = w.shim(&[("CNI_COMMAND", "STATUS")], &w.plexus_config("1.1.0"));
    assert!(out.ok(), "root's STATUS: {} {}", out.stdout, out.stderr);
    assert!(w.agent_log().contains("refused"), "the refusal is logged:\n{}", w.agent_log());
}

#[test]
fn kernel_members_of_the_socket_group_are_served_and_others_refused() {
    let mut w = World::new();
    w.agent_args.extend(["--socket-group".into(), GROUP.to_string()]);
    w.start_agent();
    open_path_to_socket(&w);
    let socket = w.socket();
    let meta = std::fs::metadata(&socket).unwrap();
    assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, GROUP), "the socket's mode and group");

    // The group as a supplementary group, or as the primary one: served.
    let supplementary = as_nobody(&GROUP.to_string());
    let primary = [format!("--reuid={NOBODY}"), format!("--regid={GROUP}"), "--clear-groups".into()];
    for setpriv in [&supplementary[..], &primary[..]] {
        let out = status_as(&w, &setpriv.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.ok(), "{setpriv:?}: {} {}", out.stdout, out.stderr);
    }

    // Not in the group: the file mode already keeps it out (the kernel refuses the connect);
    // with the mode widened, the agent refuses it itself, naming who may connect.
    let outsider = as_nobody("");
    let outsider: Vec<&str> = outsider.iter().map(String::as_str).collect();
    let out = status_as(&w, &outsider);
    assert!(!out.ok(), "an outsider got through the file mode: {}", out.stdout);
    chmod(&socket, 0o666);
    let out = status_as(&w, &outsider);
    assert_refused(&out, &["uid 65534", "root", &format!("group {GROUP}")]);
}

/// Everything one connection got back before the agent closed it, and when that was.
struct Answer {
    bytes: Vec<u8>,
    closed_after: Duration,
}

impl Answer {
    fn cni_error(&self) -> Value {
        let response: Value = serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|e| panic!("not a response ({e}): {:?}", String::from_utf8_lossy(&self.bytes)));
        assert_eq!(response["exit_code"], 1, "{response}");
        serde_json::from_str(response["stdout"].as_str().expect("stdout")).expect("a CNI error")
    }
}

/// Reads until the agent closes the connection; `opened` is when the connection was made.
fn read_answer(stream: &mut UnixStream, opened: Instant, wait: Duration) -> Answer {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the agent kept the connection open for {:?}", opened.elapsed())
            }
            // The agent closed with our bytes unread: what it wrote before still counts.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the agent's answer: {e}"),
        }
    }
    Answer { bytes, closed_after: opened.elapsed() }
}

/// Sets this process's soft limit of open files (`prlimit` on our own pid).
fn set_own_file_limit(soft: &str) {
    let pid = std::process::id().to_string();
    let ok = Command::new("prlimit").args(["--pid", &pid, &format!("--nofile={soft}:")]).status().unwrap();
    assert!(ok.success(), "prlimit --nofile={soft}:");
}

/// (soft, hard) limit of open files of a process, from /proc.
fn file_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("Max open files");
    let fields: Vec<&str> = line.split_whitespace().collect();
    (fields[3].to_owned(), fields[4].to_owned())
}

#[test]
fn kernel_hostile_clients_do_not_hold_up_the_runtimes_add() {
    let mut w = World::new();
    w.write_pod(NS, "p1", None);
    // The agent starts with the usual soft limit of 1,024 open files and raises it itself.
    let hard = file_limits(std::process::id()).1;
    set_own_file_limit("1024");
    w.start_agent();
    set_own_file_limit(&hard);
    let agent = w.agent.as_ref().expect("agent").pid();
    assert_eq!(file_limits(agent), (hard.clone(), hard), "the agent's open file limit");
    let socket = w.socket();
    let pod = Netns::new("pxpod");

    // 1,000 connections that never send a byte, then one more, watched on its own.
    let idle: Vec<(UnixStream, Instant)> =
        (0..1000).map(|_| (UnixStream::connect(&socket).expect("connect"), Instant::now())).collect();
    let mut silent = UnixStream::connect(&socket).unwrap();
    let silent_opened = Instant::now();

    // 100 MB of request, written by one thread while another reads what the agent says.
    let mut flood = UnixStream::connect(&socket).unwrap();
    let flood_opened = Instant::now();
    let mut writer = flood.try_clone().unwrap();
    let flood_writer = thread::spawn(move || {
        let chunk = vec![b' '; 1 << 20];
        let mut sent = 0usize;
        while sent < FLOOD {
            match writer.write_all(&chunk) {
                Ok(()) => sent += chunk.len(),
                // The agent stopped reading once it was over the limit: expected.
                Err(_) => break,
            }
        }
        let _ = writer.shutdown(Shutdown::Write);
        sent
    });

    // The runtime's ADD, through the shim, meanwhile.
    let started = Instant::now();
    let out = w.add("c1", &pod, (NS, "p1"));
    let took = started.elapsed();
    out.expect_ok();
    assert!(took < Duration::from_secs(5), "the ADD took {took:?} next to the hostile clients");

    // The flood is answered with the limit, not read whole.
    let answer = read_answer(&mut flood, flood_opened, READ_TIMEOUT * 2);
    let sent = flood_writer.join().unwrap();
    assert!(sent < FLOOD, "the agent took all {sent} bytes in");
    let error = answer.cni_error();
    assert_eq!(error["code"], 7, "{error}");
    assert!(error["msg"].as_str().unwrap().contains(LIMIT_TEXT), "{error}");

    // The silent one is answered when its time is up, and told why.
    let answer = read_answer(&mut silent, silent_opened, READ_TIMEOUT * 2);
    assert!(answer.closed_after >= READ_TIMEOUT - Duration::from_millis(100), "{:?}", answer.closed_after);
    assert!(answer.closed_after < READ_TIMEOUT + Duration::from_secs(3), "{:?}", answer.closed_after);
    let error = answer.cni_error();
    assert_eq!(error["code"], 11, "{error}");
    assert!(error["msg"].as_str().unwrap().contains("5 s"), "{error}");

    // Every idle connection is closed too, each with an answer: the oldest as soon as too many
    // wait, the others when their time is up.
    let mut evicted = 0;
    for (mut stream, opened) in idle {
        let answer = read_answer(&mut stream, opened, READ_TIMEOUT * 2);
        let error = answer.cni_error();
        assert_eq!(error["code"], 11, "{error}");
        assert!(answer.closed_after < READ_TIMEOUT + Duration::from_secs(3), "{:?}", answer.closed_after);
        evicted += usize::from(error["msg"].as_str().unwrap().contains("were waiting"));
    }
    assert!(evicted >= 1000 - 256, "only {evicted} idle connections were evicted");

    // And the agent still serves: DEL, then nothing is left.
    w.del("c1", &pod, (NS, "p1")).expect_ok();
    w.assert_nothing_left(&[&pod]);

    // A flood is summed up in the log, not logged a line per connection: the first eviction at
    // once, the others counted in one line within the next 10 s.
    let deadline = Instant::now() + Duration::from_secs(15);
    while logged_evictions(&w.agent_log()) != evicted {
        assert!(Instant::now() < deadline, "{evicted} evictions, log:\n{}", w.agent_log());
        thread::sleep(Duration::from_millis(200));
    }
    let log = w.agent_log();
    let warnings = log.lines().filter(|l| l.contains("WARN") && l.contains("plexus_agent::server")).count();
    assert!(warnings <= 10, "{warnings} warnings about the socket:\n{log}");
}

/// The evictions the agent's log reports ("closed N connection(s) that had sent no complete
/// request ..."), summed.
fn logged_evictions(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("that had sent no complete request"))
        .filter_map(|l| l.split("closed ").nth(1)?.split(' ').next()?.parse::<usize>().ok())
        .sum()
}
