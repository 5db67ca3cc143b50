//! The small pieces the traffic tests set up the same way: the container IDs they give pods,
//! namespaces without IPv6 duplicate address detection (addresses usable at once), interfaces
//! without TX checksum offload (packets leave with complete checksums), and the agent's log
//! without its colours; the system python the traffic scripts run with, client namespaces,
//! the scripts' servers and clients.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_testkit::{Netns, Proc};

/// The container ID the tests give the pod `pod`.
pub fn cid(pod: &str) -> String {
    format!("c-{pod}")
}

/// Turns off IPv6 duplicate address detection in `ns`.
pub fn no_dad(ns: &Netns) {
    let (ok, out) =
        ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]);
    assert!(ok, "sysctl: {out}");
}

/// Turns off TX checksum offload of `ifname` in `ns`.
pub fn tx_off(ns: &Netns, ifname: &str) {
    let (ok, out) = ns.exec(&["ethtool", "-K", ifname, "tx", "off"]);
    assert!(ok, "ethtool -K {ifname} tx off in {}: {out}", ns.name);
}

/// A log without its ANSI colours.
pub fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for e in chars.by_ref() {
                if e == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The system python (Debian's, when there), which runs the traffic scripts.
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A client namespace (named after `prefix`) whose `eth0` is the peer of `node_end`, created
/// in `node` and up, with `addrs` on `eth0` (no DAD) and TX checksum offload off.
pub fn client_namespace(node: &Netns, prefix: &str, node_end: &str, addrs: &[&str]) -> Netns {
    let ns = Netns::new(prefix);
    no_dad(&ns);
    node.ip(&["link", "add", node_end, "type", "veth", "peer", "name", "eth0", "netns", &ns.name]);
    node.ip(&["link", "set", node_end, "up"]);
    ns.ip(&["link", "set", "eth0", "up"]);
    for a in addrs {
        ns.ip(&["addr", "add", a, "dev", "eth0", "nodad"]);
    }
    tx_off(&ns, "eth0");
    ns
}

/// Starts the traffic script `script` in `ns` as a server (`args`: its mode and arguments)
/// and waits until it says it is listening.
pub fn start_server(ns: &Netns, script: &Path, args: &[&str]) -> Proc {
    let child = ns
        .command(python())
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a server");
    let mut server = Proc(child);
    let mut ready = String::new();
    let stdout = server.0.stdout.take().expect("server stdout");
    BufReader::new(stdout).read_line(&mut ready).expect("server readiness");
    assert_eq!(ready.trim(), "ready", "server {args:?} in {}", ns.name);
    server
}

/// Runs the traffic script `script` in the namespace named `ns` until it succeeds (servers and
/// neighbours may need a moment), for up to 10 s: its output words, or its last error.
pub fn run_until_ok(ns: &str, script: &Path, args: &[&str]) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, python()])
            .arg(script)
            .args(args)
            .output()
            .expect("running the traffic script");
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect());
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

/// Lets processes of `ns` reach the API server at `url` (on the host's loopback) at the same
/// address: a listener on that port of the namespace's loopback, each connection relayed to
/// the host's. The listener is made inside the namespace; the relaying threads connect from
/// the test's.
pub fn forward_into(ns: &Netns, url: &str) {
    let addr =
        url.trim_start_matches("http://").trim_start_matches("https://").trim_end_matches('/').to_owned();
    ns.ip(&["link", "set", "lo", "up"]);
    let listener = {
        let _inside = ns.enter();
        std::net::TcpListener::bind(&addr).expect("listening in the node namespace")
    };
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(inbound) = inbound else { return };
            let Ok(outbound) = std::net::TcpStream::connect(&addr) else { continue };
            let (Ok(in2), Ok(out2)) = (inbound.try_clone(), outbound.try_clone()) else { continue };
            std::thread::spawn(move || relay(inbound, outbound));
            std::thread::spawn(move || relay(out2, in2));
        }
    });
}

fn relay(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// GET `path` from an HTTP/1.1 server at `addr` (the agent's metrics endpoint): the whole
/// response, status line first, or None when it cannot be reached.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
