//! Network namespaces and helpers around iproute2 (fixtures may shell out; the agent never
//! does).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// A short name unique across concurrently running tests and test binaries, at most 15
/// characters so it also fits interface names.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let id = format!("{prefix}{:x}{n:x}", std::process::id() & 0xfffff);
    id.chars().take(15).collect()
}

/// Runs `ip ARGS`, panicking with its stderr on failure; returns stdout.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("running ip (install iproute2)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}", self.name))
    }

    pub fn path_str(&self) -> String {
        self.path().display().to_string()
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// Runs a command inside the namespace; returns (success, stdout+stderr).
    pub fn exec(&self, cmd: &[&str]) -> (bool, String) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(cmd)
            .output()
            .expect("running ip netns exec");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    }

    /// `ip -j link` of the namespace.
    pub fn links(&self) -> Vec<Value> {
        serde_json::from_str(&self.ip(&["-j", "link", "show"])).unwrap_or_default()
    }

    pub fn link_names(&self) -> Vec<String> {
        self.links().iter().filter_map(|l| l["ifname"].as_str().map(str::to_owned)).collect()
    }

    /// IPv4 and IPv6 addresses (with prefix) of one interface, link-local ones left out.
    pub fn addresses(&self, ifname: &str) -> Vec<String> {
        let v: Vec<Value> =
            serde_json::from_str(&self.ip(&["-j", "addr", "show", "dev", ifname])).unwrap_or_default();
        v.iter()
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["scope"] != "link")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
            .collect()
    }

    /// Default routes as "dev gateway" strings, IPv4 then IPv6.
    pub fn default_routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for family in ["-4", "-6"] {
            let v: Vec<Value> = serde_json::from_str(&self.ip(&["-j", family, "route", "show", "default"]))
                .unwrap_or_default();
            out.extend(v.iter().map(|r| {
                format!("{} {}", r["dev"].as_str().unwrap_or(""), r["gateway"].as_str().unwrap_or("-"))
            }));
        }
        out
    }

    /// True when `ping` from this namespace reaches `addr`.
    pub fn ping(&self, addr: &str) -> bool {
        self.exec(&["ping", "-c", "1", "-W", "2", addr]).0
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// A bpffs mounted for one test world (the agent runs under `ip netns exec`, which hides
/// /sys/fs/bpf), unmounted on drop, which releases every pin: maps, programs, TC and cgroup
/// links.
pub struct Bpffs {
    pub path: PathBuf,
}

impl Bpffs {
    pub fn mount(path: PathBuf) -> Bpffs {
        std::fs::create_dir_all(&path).expect("bpffs dir");
        let ok =
            Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&path).status().is_ok_and(|s| s.success());
        assert!(ok, "mounting bpffs on {}", path.display());
        Bpffs { path }
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A process killed on drop (servers, background clients).
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
