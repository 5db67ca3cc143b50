//! The durable record of each claimed VF: who holds it and what it looked like before, so DEL
//! can restore it after an agent restart or a crash in the middle of an ADD.
//!
//! One file per VF, `<state_dir>/sriov/<pci>.json`, written with [`atomic_write`] before the
//! first change to the VF. Its existence is the claim: a second attachment asking for the VF
//! finds it and is refused (under the VF's lock, see [`super::lock`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::cni_arg;
use super::error::{SriovError, StateCause};
use super::sysfs::VfDevice;
use super::vf_netlink::{SettingKind, VfAdmin};
use crate::delegate::InvocationEnv;
use crate::netlink::Mac;
use crate::state::atomic_write;

/// The attachment holding a VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// CNI_ARGS, for IPAM calls made on the owner's behalf (GC) and to name the pod.
    #[serde(default)]
    pub args: String,
}

impl Owner {
    pub fn of(env: &InvocationEnv) -> Owner {
        Owner {
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            args: env.args.clone(),
        }
    }

    /// The same runtime attachment (CNI identifies one by container ID and interface name).
    pub fn is(&self, env: &InvocationEnv) -> bool {
        self.container_id == env.container_id && self.ifname == env.ifname
    }

    pub fn env(&self) -> InvocationEnv {
        InvocationEnv {
            container_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: self.ifname.clone(),
            args: self.args.clone(),
        }
    }
}

/// "pod ns/name (container c, interface net1)", or without the pod when CNI_ARGS did not name it.
impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pod = (cni_arg(&self.args, "K8S_POD_NAMESPACE"), cni_arg(&self.args, "K8S_POD_NAME"));
        if let (Some(namespace), Some(name)) = pod {
            write!(f, "pod {namespace}/{name} (")?;
        } else {
            f.write_str("(")?;
        }
        write!(f, "container {}, interface {})", self.container_id, self.ifname)
    }
}

/// The VF's netdev as it was in the agent's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetdevState {
    pub name: String,
    pub mac: Mac,
    pub mtu: u32,
    pub ifindex: u32,
    /// The device behind the netdev (IFLA_PARENT_DEV_NAME): the VF's PCI address for a real VF.
    #[serde(default)]
    pub parent: Option<String>,
}

/// Everything DEL needs to give a VF back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VfRecord {
    pub owner: Owner,
    pub device: VfDevice,
    /// The PF-side settings before the ADD.
    pub original: VfAdmin,
    /// The netdev before the ADD; `None` for a VF bound to a userspace driver.
    pub netdev: Option<NetdevState>,
    /// What the ADD set out to change on the PF side; after a crash, any of it may be applied.
    pub planned: Vec<SettingKind>,
    /// What the ADD is known to have changed.
    pub applied: Vec<SettingKind>,
    /// The netdev's index in the pod once it is there (the kernel keeps it across namespaces
    /// unless the pod already uses it).
    #[serde(default)]
    pub pod_ifindex: Option<u32>,
    /// The ADD's config, for releasing IPAM when GC collects the attachment.
    pub config: Value,
    /// Set once the ADD succeeded.
    pub complete: bool,
}

/// The records, one file per VF.
#[derive(Debug, Clone)]
pub struct VfStore {
    dir: PathBuf,
}

impl VfStore {
    pub fn new(state_dir: &Path) -> VfStore {
        VfStore { dir: state_dir.join("sriov") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// PCI addresses are validated (`DDDD:BB:DD.F`), so the name stays in the directory.
    pub fn path(&self, pci: &str) -> PathBuf {
        self.dir.join(format!("{pci}.json"))
    }

    pub async fn load(&self, pci: &str) -> Result<Option<VfRecord>, SriovError> {
        let path = self.path(pci);
        blocking(move || read(&path)).await
    }

    pub async fn save(&self, record: &VfRecord) -> Result<(), SriovError> {
        let path = self.path(&record.device.pci);
        let body =
            serde_json::to_vec_pretty(record).map_err(|e| state_error(&path, StateCause::Encode(e)))?;
        blocking(move || atomic_write(&path, &body).map_err(|e| state_error(&path, StateCause::Io(e)))).await
    }

    pub async fn remove(&self, pci: &str) -> Result<(), SriovError> {
        let path = self.path(pci);
        blocking(move || match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(state_error(&path, StateCause::Io(e))),
        })
        .await
    }

    /// Every record; a corrupt one is an error, never skipped silently.
    pub async fn list(&self) -> Result<Vec<VfRecord>, SriovError> {
        let dir = self.dir.clone();
        blocking(move || {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(state_error(&dir, StateCause::Io(e))),
            };
            let mut paths: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
                .collect();
            paths.sort();
            let mut records = Vec::new();
            for path in paths {
                records.extend(read(&path)?);
            }
            Ok(records)
        })
        .await
    }
}

fn read(path: &Path) -> Result<Option<VfRecord>, SriovError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|e| state_error(path, StateCause::Corrupt(e)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(state_error(path, StateCause::Io(e))),
    }
}

fn state_error(path: &Path, cause: StateCause) -> SriovError {
    SriovError::State { path: path.display().to_string(), cause }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SriovError> + Send + 'static,
) -> Result<T, SriovError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SriovError::State { path: "(state I/O task)".into(), cause: StateCause::Task(e) })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::sriov::vf_netlink::VlanProto;

    fn record(args: &str) -> VfRecord {
        VfRecord {
            owner: Owner {
                container_id: "c1".into(),
                ifname: "net1".into(),
                netns: "/run/netns/p".into(),
                args: args.into(),
            },
            device: VfDevice {
                pci: "0000:03:02.3".into(),
                pf_pci: "0000:03:00.0".into(),
                pf: "ens1f0".into(),
                vf: 3,
                driver: Some("iavf".into()),
            },
            original: VfAdmin { vlan: 5, proto: VlanProto::Dot1Ad, ..VfAdmin::default() },
            netdev: Some(NetdevState {
                name: "ens1f0v3".into(),
                mac: Mac([2, 0, 0, 0, 0, 3]),
                mtu: 1500,
                ifindex: 12,
                parent: Some("0000:03:02.3".into()),
            }),
            planned: vec![SettingKind::Vlan, SettingKind::Trust],
            applied: vec![SettingKind::Vlan],
            pod_ifindex: Some(12),
            config: serde_json::json!({"deviceID": "0000:03:02.3"}),
            complete: false,
        }
    }

    #[tokio::test]
    async fn records_survive_a_round_trip_through_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = VfStore::new(dir.path());
        assert_eq!(store.load("0000:03:02.3").await.unwrap(), None);
        let rec = record("");
        store.save(&rec).await.unwrap();
        assert_eq!(store.path("0000:03:02.3"), dir.path().join("sriov/0000:03:02.3.json"));
        let text = std::fs::read_to_string(store.path("0000:03:02.3")).unwrap();
        assert!(text.contains("\"02:00:00:00:00:03\""), "MACs are written as text: {text}");
        assert_eq!(store.load("0000:03:02.3").await.unwrap(), Some(rec.clone()));
        assert_eq!(store.list().await.unwrap(), [rec]);
        store.remove("0000:03:02.3").await.unwrap();
        store.remove("0000:03:02.3").await.unwrap();
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_corrupt_record_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = VfStore::new(dir.path());
        std::fs::create_dir_all(store.dir()).unwrap();
        std::fs::write(store.path("0000:03:02.3"), "{not json").unwrap();
        let err = store.load("0000:03:02.3").await.unwrap_err().to_string();
        assert!(err.contains("0000:03:02.3.json") && err.contains("original settings are unknown"), "{err}");
        assert!(store.list().await.is_err());
    }

    #[test]
    fn owners_are_named_by_pod_when_cni_args_say_which() {
        let owner = record("IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=web-0").owner;
        assert_eq!(owner.to_string(), "pod team/web-0 (container c1, interface net1)");
        assert_eq!(record("").owner.to_string(), "(container c1, interface net1)");
        let env = owner.env();
        assert!(owner.is(&env));
        assert!(!owner.is(&InvocationEnv { ifname: "net2".into(), ..env }));
    }
}
