//! Uniquely named network namespaces, deleted on drop even when a test panics, and a recorder
//! standing in for the PF.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::Value;

use crate::native::sriov::error::SriovError;
use crate::native::sriov::vf_netlink::{PfControl, SettingKind, VfAdmin, VfSetting};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name unique across tests and concurrently running test binaries, at most 15 characters so
/// it also works as an interface name.
pub fn unique(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}{n:x}", std::process::id() & 0xffff).chars().take(15).collect()
}

/// Runs a command, panicking with its stderr on failure; returns stdout.
pub fn run(argv: &[&str]) -> String {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(out.status.success(), "{argv:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct TestNetns {
    pub name: String,
}

impl TestNetns {
    pub fn new(prefix: &str) -> TestNetns {
        let name = unique(prefix);
        run(&["ip", "netns", "add", &name]);
        let ns = TestNetns { name };
        ns.ip("link set lo up");
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    pub fn path_str(&self) -> String {
        self.path().display().to_string()
    }

    /// `ip -n NAME ARGS` (ARGS split on whitespace).
    pub fn ip(&self, args: &str) -> String {
        let mut argv = vec!["ip", "-n", &self.name];
        argv.extend(args.split_whitespace());
        run(&argv)
    }

    /// `ip -j link show dev IFNAME`, or None when there is no such interface.
    pub fn link(&self, ifname: &str) -> Option<Value> {
        let out =
            Command::new("ip").args(["-n", &self.name, "-j", "link", "show", "dev", ifname]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let links: Vec<Value> = serde_json::from_slice(&out.stdout).ok()?;
        links.into_iter().next()
    }

    pub fn link_names(&self) -> Vec<String> {
        let links: Vec<Value> = serde_json::from_str(&self.ip("-j link show")).unwrap_or_default();
        links.iter().filter_map(|l| l["ifname"].as_str().map(str::to_owned)).collect()
    }

    /// Global IPv4 and IPv6 addresses of one interface, with prefix.
    pub fn addresses(&self, ifname: &str) -> Vec<String> {
        let links: Vec<Value> =
            serde_json::from_str(&self.ip(&format!("-j addr show dev {ifname}"))).unwrap_or_default();
        links
            .iter()
            .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["scope"] == "global")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or_default(), a["prefixlen"]))
            .collect()
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let deleted = Command::new("ip").args(["netns", "del", &self.name]).status();
        if !deleted.is_ok_and(|status| status.success()) {
            eprintln!("could not delete test netns {}", self.name);
        }
    }
}

/// A PF with VFs, in memory: what the kernel would hold for a real NIC. `apply` records every
/// setting it is sent, in order, and can be told to refuse one kind of setting, as a driver
/// that does not support it would.
#[derive(Default)]
pub struct FakePf {
    pub vfs: Mutex<HashMap<(String, u32), VfAdmin>>,
    pub log: Mutex<Vec<(String, u32, VfSetting)>>,
    pub refuse: Mutex<Option<SettingKind>>,
}

impl FakePf {
    pub fn with_vf(pf: &str, vf: u32, admin: VfAdmin) -> Arc<FakePf> {
        let fake = FakePf::default();
        fake.vfs.lock().unwrap().insert((pf.to_owned(), vf), admin);
        Arc::new(fake)
    }

    pub fn admin(&self, pf: &str, vf: u32) -> VfAdmin {
        self.vfs.lock().unwrap()[&(pf.to_owned(), vf)]
    }

    /// The settings sent so far, as `ip` arguments.
    pub fn sent(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|(pf, vf, s)| format!("{pf} vf {vf} {s}")).collect()
    }
}

impl PfControl for FakePf {
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>> {
        Box::pin(async move {
            self.vfs.lock().unwrap().get(&(pf.to_owned(), vf)).copied().ok_or_else(|| SriovError::Netlink {
                what: format!("reading VF {vf} of PF {pf}"),
                detail: "no such VF".into(),
            })
        })
    }

    fn apply<'a>(
        &'a self,
        pf: &'a str,
        vf: u32,
        setting: VfSetting,
    ) -> BoxFuture<'a, Result<(), SriovError>> {
        Box::pin(async move {
            if *self.refuse.lock().unwrap() == Some(setting.kind()) {
                return Err(SriovError::Netlink {
                    what: format!("ip link set dev {pf} vf {vf} {setting}"),
                    detail: "Operation not supported (os error 95)".into(),
                });
            }
            self.log.lock().unwrap().push((pf.to_owned(), vf, setting));
            match self.vfs.lock().unwrap().get_mut(&(pf.to_owned(), vf)) {
                Some(admin) => {
                    admin.apply(&setting);
                    Ok(())
                }
                None => {
                    Err(SriovError::Netlink { what: format!("VF {vf} of {pf}"), detail: "no such VF".into() })
                }
            }
        })
    }
}
