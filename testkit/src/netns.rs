//! Named network namespaces (`ip netns add`), deleted on drop, and entering one on the
//! current thread.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sched::{setns, CloneFlags};
use serde_json::Value;

use crate::command::{output, try_ip, Words};
use crate::error::{or_panic, Error, Result};
use crate::name::{is_stale, unique};

/// Where `ip netns` keeps its named namespaces.
const NETNS_DIR: &str = "/run/netns";

/// A named network namespace, deleted on drop (also when a test panics).
#[derive(Debug)]
pub struct Netns {
    /// The name `ip netns` knows it by.
    pub name: String,
}

impl Netns {
    /// A new namespace named [`unique`]`(prefix)`, with `lo` up.
    #[track_caller]
    pub fn new(prefix: &str) -> Netns {
        or_panic(Netns::try_new(prefix))
    }

    /// [`Netns::new`], failing instead of panicking.
    pub fn try_new(prefix: &str) -> Result<Netns> {
        Netns::try_named(&unique(prefix))
    }

    /// A new namespace named [`unique`]`(prefix)`, as the kernel makes it (`lo` down).
    #[track_caller]
    pub fn empty(prefix: &str) -> Netns {
        or_panic(Netns::add(unique(prefix)))
    }

    /// A namespace under a fixed name (one people type, as in the demo), with `lo` up.
    pub fn try_named(name: &str) -> Result<Netns> {
        let ns = Netns::add(name.to_owned())?;
        ns.try_ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn add(name: String) -> Result<Netns> {
        try_ip(&["netns", "add", &name])?;
        Ok(Netns { name })
    }

    /// Deletes the namespaces named `prefix...` by [`unique`] whose process is gone: what a
    /// killed run left behind. Returns the names it could not delete, with why.
    pub fn sweep_stale(prefix: &str) -> Vec<String> {
        let mut failed = Vec::new();
        for name in crate::leftovers::files_in(Path::new(NETNS_DIR)) {
            if name.starts_with(prefix) && is_stale(&name) {
                if let Err(e) = try_ip(&["netns", "del", &name]) {
                    failed.push(format!("{name}: {e}"));
                }
            }
        }
        failed
    }

    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    pub fn path_str(&self) -> String {
        self.path().display().to_string()
    }

    /// `ip -n NAME ARGS`, panicking with its stderr on failure; returns stdout.
    #[track_caller]
    pub fn ip(&self, args: impl Words) -> String {
        or_panic(self.try_ip(args))
    }

    /// `ip -n NAME ARGS`.
    pub fn try_ip(&self, args: impl Words) -> Result<String> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend(args.words());
        try_ip(full)
    }

    /// A command that runs inside the namespace (`ip netns exec`, which also gives it the
    /// namespace's view of /sys).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `argv` inside the namespace; its stdout.
    pub fn try_exec(&self, argv: impl Words) -> Result<String> {
        let argv = argv.words();
        let (program, args) = argv.split_first().expect("a command line names its program");
        output(self.command(program).args(args))
    }

    /// Runs `argv` inside the namespace; returns (success, stdout+stderr).
    #[track_caller]
    pub fn exec(&self, argv: impl Words) -> (bool, String) {
        let argv = argv.words();
        let (program, args) = argv.split_first().expect("a command line names its program");
        let out = self.command(program).args(args).output().expect("running ip netns exec");
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

    /// `ip -j link show dev IFNAME`, or None when there is no such interface.
    pub fn link(&self, ifname: &str) -> Option<Value> {
        let text = self.try_ip(&["-j", "link", "show", "dev", ifname]).ok()?;
        let links: Vec<Value> = serde_json::from_str(&text).ok()?;
        links.into_iter().next()
    }

    pub fn has_link(&self, ifname: &str) -> bool {
        self.link(ifname).is_some()
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

    /// Moves the current thread into this namespace until the guard drops.
    #[track_caller]
    pub fn enter(&self) -> Entered {
        or_panic(Entered::new(&self.path()))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = try_ip(&["netns", "del", &self.name]) {
            eprintln!("could not delete the test netns {}: {e}", self.name);
        }
    }
}

/// The current thread moved into a network namespace; dropping it moves the thread back where
/// it was (as aya's test helpers' `NetNsGuard`). Only this thread moves: sockets it opens
/// meanwhile stay in the namespace wherever they are used afterwards.
#[derive(Debug)]
pub struct Entered {
    /// The namespace the thread was in.
    previous: File,
    /// Not `Send`: it must drop on the thread it moved.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Entered {
    /// Moves the current thread into the network namespace at `path` (a file of /run/netns,
    /// or /proc/PID/ns/net).
    pub fn new(path: &Path) -> Result<Entered> {
        let here = Path::new("/proc/thread-self/ns/net");
        let previous =
            File::open(here).map_err(|source| Error::Io { action: "opening", path: here.into(), source })?;
        let target =
            File::open(path).map_err(|source| Error::Io { action: "opening", path: path.into(), source })?;
        setns(&target, CloneFlags::CLONE_NEWNET).map_err(|source| Error::Sys {
            action: "entering the network namespace",
            path: path.into(),
            source,
        })?;
        Ok(Entered { previous, _thread: std::marker::PhantomData })
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        // A thread left in the wrong namespace would run the rest of the test there.
        if let Err(e) = setns(&self.previous, CloneFlags::CLONE_NEWNET) {
            panic!("could not return the thread to its network namespace: {e}");
        }
    }
}

#[cfg(test)]
mod kernel {
    use super::*;

    fn current() -> std::fs::Metadata {
        std::fs::metadata("/proc/thread-self/ns/net").expect("this thread's netns")
    }

    fn same(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
        use std::os::unix::fs::MetadataExt;
        (a.dev(), a.ino()) == (b.dev(), b.ino())
    }

    #[test]
    fn a_namespace_is_there_until_its_guard_drops_also_after_a_panic() {
        let ns = Netns::new("pxkit");
        let path = ns.path();
        assert!(path.exists(), "{}", path.display());
        assert_eq!(ns.link_names(), ["lo"]);
        assert!(ns.ip("link show lo").contains("UP"), "lo is up");
        drop(ns);
        assert!(!path.exists(), "{} outlived its guard", path.display());

        let name = std::thread::spawn(|| {
            let ns = Netns::empty("pxkit");
            std::panic::panic_any(ns.name.clone());
        })
        .join()
        .expect_err("the thread panicked");
        let name = name.downcast::<String>().expect("the name");
        assert!(!Path::new(NETNS_DIR).join(name.as_str()).exists(), "{name} outlived a panic");
    }

    #[test]
    fn commands_run_inside_and_links_are_seen_there() {
        let ns = Netns::new("pxkit");
        ns.ip(&["link", "add", "k0", "type", "veth", "peer", "name", "k1"]);
        ns.ip("addr add 10.99.0.1/24 dev k0");
        assert!(ns.has_link("k0") && !ns.has_link("k9"));
        assert_eq!(ns.addresses("k0"), ["10.99.0.1/24"]);
        let (ok, out) = ns.exec(&["ip", "-br", "link"]);
        assert!(ok && out.contains("k1"), "{out}");
        assert!(ns.try_exec(&["false"]).is_err());
        assert!(ns.try_ip("link show nosuch0").is_err());
    }

    #[test]
    fn entering_moves_this_thread_and_dropping_moves_it_back() {
        let ns = Netns::new("pxkit");
        ns.ip("link add k0 type veth peer name k1");
        let before = current();
        {
            let _inside = ns.enter();
            assert!(!same(&before, &current()), "the thread moved");
            // SAFETY: a NUL-terminated name.
            assert_ne!(unsafe { nix::libc::if_nametoindex(c"k0".as_ptr()) }, 0, "k0 is seen inside");
        }
        assert!(same(&before, &current()), "the thread is back");
    }

    #[test]
    fn stale_namespaces_are_swept_and_live_ones_kept() {
        let mut child = Command::new("true").spawn().expect("running true");
        child.wait().expect("reaping true");
        let dead = format!("pxkitsw-{}-0", child.id());
        try_ip(&["netns", "add", &dead]).expect("a netns of a dead process");
        let live = Netns::new("pxkitsw");
        assert_eq!(Netns::sweep_stale("pxkitsw"), Vec::<String>::new());
        assert!(!Path::new(NETNS_DIR).join(&dead).exists(), "{dead} was swept");
        assert!(live.path().exists(), "a live namespace is kept");
    }
}
