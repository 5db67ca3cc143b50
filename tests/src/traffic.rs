//! The small pieces the traffic tests set up the same way: the container IDs they give pods,
//! namespaces without IPv6 duplicate address detection (addresses usable at once), interfaces
//! without TX checksum offload (packets leave with complete checksums), and the agent's log
//! without its colours; the system python the traffic scripts run with.

use std::path::Path;

use plexus_testkit::Netns;

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
