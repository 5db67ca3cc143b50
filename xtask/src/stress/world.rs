//! The storm's world on top of the bench's lab: the agent on a small state tmpfs, its
//! networks, pods as namespaces with manifests, and the tools of the faults (a ballast that
//! fills the state directory, a held IPAM lock).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use plexus_testkit::Netns;
use serde_json::{json, Value};

use crate::bench::topology::{self, Agent, Lab, MASTER, PM_BRIDGE};

/// The networks pods pick from (namespace `default`).
pub const BRIDGE_NET: &str = "st-br";
pub const MACVLAN_NET: &str = "st-mv";
pub const STATIC_NET: &str = "st-static";
/// A real plugin (`vlan`) given a master that does not exist: its ADD fails.
pub const REJECTED_NET: &str = "st-bad";
/// bridge + host-local on a data directory whose lock the storm may hold: the ADD waits
/// past the agent's delegate timeout.
pub const SLOW_NET: &str = "st-slow";

/// The agent's delegate timeout in the storm, in seconds.
pub const DELEGATE_TIMEOUT_SECS: u64 = 2;
/// Size of the state directory's tmpfs.
const STATE_TMPFS: &str = "size=4m";
const AGENT_NAME: &str = "storm";

/// A tmpfs mounted on a directory, unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, options: &str) -> anyhow::Result<Tmpfs> {
        std::fs::create_dir_all(dir)?;
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir).status()?;
        if !status.success() {
            bail!("mounting a tmpfs on {}: {status}", dir.display());
        }
        Ok(Tmpfs(dir.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// The agent's tree (`<lab>/storm`): state on a tmpfs, IPAM data directories.
pub struct Tree {
    pub root: PathBuf,
}

impl Tree {
    pub fn new(lab: &Lab) -> Tree {
        Tree { root: lab.path(AGENT_NAME) }
    }

    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }

    pub fn ipam(&self) -> PathBuf {
        self.root.join("ipam")
    }

    pub fn slow_ipam(&self) -> PathBuf {
        self.root.join("ipam-slow")
    }

    /// Mounts the state tmpfs (before the agent starts, so it only ever sees the tmpfs).
    pub fn mount_state(&self) -> anyhow::Result<Tmpfs> {
        Tmpfs::mount(&self.state(), STATE_TMPFS)
    }

    /// Starts the agent on this tree.
    pub fn start_agent(&self, lab: &Lab, bins: &crate::bench::Bins) -> anyhow::Result<Agent> {
        let timeout = DELEGATE_TIMEOUT_SECS.to_string();
        Agent::start(
            lab,
            bins,
            AGENT_NAME,
            crate::bench::Side::Plexus,
            &["--delegate-timeout-secs", &timeout],
        )
    }

    /// The networks, as NAD manifests of the agent's catalog.
    pub fn write_networks(&self, agent: &Agent) -> anyhow::Result<()> {
        for net in networks(&self.ipam(), &self.slow_ipam()) {
            let name = net["name"].as_str().context("network without name")?.to_owned();
            agent.write_nad(&name, &net)?;
        }
        Ok(())
    }

    fn pod_manifest(&self, pod: &str) -> PathBuf {
        self.root.join(format!("pods/default_{pod}.json"))
    }

    /// The pod's manifest, as the catalog reads it (the API server's view of the pod).
    pub fn write_pod(&self, pod: &str, uid: &str, selections: &[Value]) -> anyhow::Result<()> {
        let manifest = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "uid": uid,
                         "annotations": {"k8s.v1.cni.cncf.io/networks": Value::Array(selections.to_vec()).to_string()}},
        });
        std::fs::write(self.pod_manifest(pod), manifest.to_string())?;
        Ok(())
    }

    pub fn remove_pod(&self, pod: &str) {
        let _ = std::fs::remove_file(self.pod_manifest(pod));
    }

    fn ballast(&self) -> PathBuf {
        self.state().join("storm-ballast")
    }

    /// Fills the state tmpfs to the last byte.
    pub fn fill_state(&self) -> anyhow::Result<()> {
        use std::io::Write;
        let mut f = File::create(self.ballast())?;
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(e).context("filling the state directory"),
            }
        }
        // Smaller writes take the last partial page.
        let _ = f.write_all(&[0u8; 512]);
        Ok(())
    }

    pub fn empty_state_ballast(&self) {
        let _ = std::fs::remove_file(self.ballast());
    }

    /// Takes the slow network's host-local lock, as another allocation in progress would.
    pub fn hold_slow_lock(&self) -> anyhow::Result<HeldLock> {
        let dir = self.slow_ipam().join(SLOW_NET);
        std::fs::create_dir_all(&dir)?;
        let file = File::create(dir.join("lock"))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).context("locking the slow network's IPAM");
        }
        Ok(HeldLock(file))
    }
}

/// A held flock, released on drop (when the file closes).
pub struct HeldLock(#[allow(dead_code)] File);

/// The storm's networks.
fn networks(ipam: &Path, slow_ipam: &Path) -> Vec<Value> {
    let range = |subnet: &str, start: &str, end: &str| json!([[{"subnet": subnet, "rangeStart": start, "rangeEnd": end}]]);
    vec![
        json!({
            "cniVersion": "1.0.0", "name": BRIDGE_NET,
            "plugins": [
                {"type": "bridge", "bridge": PM_BRIDGE, "isGateway": true,
                 "ipam": {"type": "host-local", "ranges": range("10.77.0.0/16", "10.77.1.1", "10.77.39.254"), "dataDir": ipam}},
                {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
                {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}},
            ]
        }),
        json!({
            "cniVersion": "1.0.0", "name": MACVLAN_NET,
            "plugins": [{"type": "macvlan", "master": MASTER, "mode": "bridge",
                         "ipam": {"type": "host-local", "ranges": range("10.61.0.0/16", "10.61.1.1", "10.61.39.254"), "dataDir": ipam}}]
        }),
        json!({
            "cniVersion": "1.0.0", "name": STATIC_NET,
            "plugins": [{"type": "macvlan", "master": MASTER, "mode": "bridge",
                         "capabilities": {"ips": true}, "ipam": {"type": "static"}}]
        }),
        json!({
            "cniVersion": "1.0.0", "name": REJECTED_NET,
            "plugins": [{"type": "vlan", "master": "pxnone0", "vlanId": 7,
                         "ipam": {"type": "host-local", "ranges": range("10.62.0.0/16", "10.62.1.1", "10.62.1.254"), "dataDir": ipam}}]
        }),
        json!({
            "cniVersion": "1.0.0", "name": SLOW_NET,
            "plugins": [{"type": "bridge", "bridge": PM_BRIDGE,
                         "ipam": {"type": "host-local", "ranges": range("10.77.0.0/16", "10.77.200.1", "10.77.210.254"), "dataDir": slow_ipam}}]
        }),
    ]
}

/// A pod of the storm: a namespace, its ids and what it selects.
pub struct Pod {
    pub name: String,
    pub uid: String,
    pub cid: String,
    /// None once the namespace was deleted (the pod's end, or a fault).
    pub netns: Option<Netns>,
    /// The path the runtime knew, kept after the namespace is gone.
    pub netns_path: String,
    pub selections: Vec<Value>,
}

impl Pod {
    pub fn new(name: String, uid: String, cid: String, selections: Vec<Value>) -> anyhow::Result<Pod> {
        let netns = topology::netns("pod")?;
        let netns_path = netns.path_str();
        Ok(Pod { name, uid, cid, netns: Some(netns), netns_path, selections })
    }

    pub fn cni_args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            self.name, self.cid, self.uid
        )
    }
}
