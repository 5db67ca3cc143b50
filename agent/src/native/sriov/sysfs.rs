//! Finding a VF's PF, VF index, driver and netdev from its PCI address, through sysfs.
//!
//! Only symlinks and directory listings under `<root>/bus/pci/devices` are read, so a test can
//! build the same layout in a temporary directory:
//!
//! ```text
//! <root>/bus/pci/devices/<vf>/physfn        -> ../<pf>          (only VFs have it)
//! <root>/bus/pci/devices/<vf>/driver        -> .../drivers/<name>
//! <root>/bus/pci/devices/<vf>/net/<ifname>/                       (kernel drivers only)
//! <root>/bus/pci/devices/<pf>/net/<ifname>/
//! <root>/bus/pci/devices/<pf>/virtfn<N>     -> ../<vf>
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::SriovError;

/// Drivers that hand the VF to userspace (DPDK and the like): the VF has no netdev, so only its
/// PF-side settings apply. sriov-cni's list.
pub const USERSPACE_DRIVERS: [&str; 3] = ["vfio-pci", "uio_pci_generic", "igb_uio"];

/// What sysfs says about a VF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfDevice {
    /// The VF's PCI address.
    pub pci: String,
    /// The PF's PCI address.
    pub pf_pci: String,
    /// The PF's netdev, through which the VF is configured.
    pub pf: String,
    /// The VF's index on its PF (the N of `ip link set dev PF vf N`).
    pub vf: u32,
    /// `None` when no driver is bound.
    pub driver: Option<String>,
}

impl VfDevice {
    pub fn is_userspace(&self) -> bool {
        self.driver.as_deref().is_some_and(|driver| USERSPACE_DRIVERS.contains(&driver))
    }

    /// The VF as the Device Information Specification describes it: a PCI device with its PF's
    /// address, and the userspace driver that holds it, when one does.
    pub fn device_info(&self) -> serde_json::Value {
        let userspace = self.driver.as_deref().filter(|_| self.is_userspace());
        crate::devinfo::format::pci(&self.pci, Some(&self.pf_pci), userspace)
    }
}

fn devices(root: &Path) -> PathBuf {
    root.join("bus/pci/devices")
}

/// Reads everything about the VF at PCI address `pci` except its netdev (see [`netdev_of`]).
pub fn discover(root: &Path, pci: &str) -> Result<VfDevice, SriovError> {
    let error = |detail: String| SriovError::Device { pci: pci.to_owned(), detail };
    let dir = devices(root).join(pci);
    if !dir.exists() {
        return Err(error(format!(
            "no such PCI device ({} does not exist); check \"deviceID\"",
            dir.display()
        )));
    }
    let pf_pci = link_basename(&dir.join("physfn")).ok_or_else(|| {
        error(format!(
            "not an SR-IOV VF ({} is missing); \"deviceID\" must name a VF, not a PF",
            dir.join("physfn").display()
        ))
    })?;
    let pf_dir = devices(root).join(&pf_pci);
    let pf = first_entry(&pf_dir.join("net"))
        .map_err(|e| error(format!("reading the netdev of its PF {pf_pci}: {e}")))?
        .ok_or_else(|| {
            error(format!(
                "its PF {pf_pci} has no network interface (no entry in {})",
                pf_dir.join("net").display()
            ))
        })?;
    let vf = vf_index(&pf_dir, pci)
        .map_err(|e| error(format!("listing the VFs of its PF {pf_pci}: {e}")))?
        .ok_or_else(|| error(format!("its PF {pf_pci} ({pf}) has no virtfnN link to it")))?;
    Ok(VfDevice { pci: pci.to_owned(), pf_pci, pf, vf, driver: link_basename(&dir.join("driver")) })
}

/// The VF's netdev in the network namespace whose sysfs is mounted at `root` (the agent's): none
/// while a pod has it, or when a userspace driver holds the VF.
pub fn netdev_of(root: &Path, pci: &str) -> Result<Option<String>, SriovError> {
    first_entry(&devices(root).join(pci).join("net"))
        .map_err(|e| SriovError::Device { pci: pci.to_owned(), detail: format!("reading its netdev: {e}") })
}

/// The last component of a symlink's target.
fn link_basename(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    target.file_name().map(|name| name.to_string_lossy().into_owned())
}

/// The first name (in order) of a directory, `None` when it is missing or empty.
fn first_entry(dir: &Path) -> std::io::Result<Option<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut names = entries
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names.into_iter().next())
}

/// N such that `<pf_dir>/virtfnN` points at `vf_pci`.
fn vf_index(pf_dir: &Path, vf_pci: &str) -> std::io::Result<Option<u32>> {
    for entry in std::fs::read_dir(pf_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(index) = name.strip_prefix("virtfn").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if link_basename(&entry.path()).as_deref() == Some(vf_pci) {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// Builds fake sysfs trees for tests.
#[cfg(test)]
pub mod fake {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    /// Adds a PF at `pf_pci` with netdev `pf_ifname`.
    pub fn pf(root: &Path, pf_pci: &str, pf_ifname: &str) {
        let dir = root.join("bus/pci/devices").join(pf_pci);
        std::fs::create_dir_all(dir.join("net").join(pf_ifname)).expect("fake PF dir");
    }

    /// Adds VF number `index` of the PF at `pf_pci`, bound to `driver`, with netdev `ifname`.
    pub fn vf(root: &Path, pf_pci: &str, index: u32, vf_pci: &str, driver: &str, ifname: Option<&str>) {
        let devices = root.join("bus/pci/devices");
        let dir = devices.join(vf_pci);
        std::fs::create_dir_all(&dir).expect("fake VF dir");
        symlink(format!("../{pf_pci}"), dir.join("physfn")).expect("physfn link");
        symlink(format!("../../../bus/pci/drivers/{driver}"), dir.join("driver")).expect("driver link");
        if let Some(ifname) = ifname {
            std::fs::create_dir_all(dir.join("net").join(ifname)).expect("fake VF netdev dir");
        }
        symlink(format!("../{vf_pci}"), devices.join(pf_pci).join(format!("virtfn{index}")))
            .expect("virtfn link");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        fake::pf(root.path(), "0000:03:00.0", "ens1f0");
        fake::vf(root.path(), "0000:03:00.0", 0, "0000:03:02.0", "iavf", Some("ens1f0v0"));
        fake::vf(root.path(), "0000:03:00.0", 1, "0000:03:02.1", "vfio-pci", None);
        fake::vf(root.path(), "0000:03:00.0", 12, "0000:03:03.4", "iavf", Some("ens1f0v12"));
        root
    }

    #[test]
    fn finds_pf_index_driver_and_netdev() {
        let root = tree();
        let vf = discover(root.path(), "0000:03:03.4").unwrap();
        assert_eq!(
            vf,
            VfDevice {
                pci: "0000:03:03.4".into(),
                pf_pci: "0000:03:00.0".into(),
                pf: "ens1f0".into(),
                vf: 12,
                driver: Some("iavf".into()),
            }
        );
        assert!(!vf.is_userspace());
        assert_eq!(netdev_of(root.path(), "0000:03:03.4").unwrap().as_deref(), Some("ens1f0v12"));
    }

    #[test]
    fn userspace_drivers_have_no_netdev() {
        let root = tree();
        let vf = discover(root.path(), "0000:03:02.1").unwrap();
        assert_eq!((vf.vf, vf.driver.as_deref()), (1, Some("vfio-pci")));
        assert!(vf.is_userspace());
        assert_eq!(netdev_of(root.path(), "0000:03:02.1").unwrap(), None);
    }

    #[test]
    fn device_information_names_the_pf_and_only_a_userspace_driver() {
        let root = tree();
        assert_eq!(
            discover(root.path(), "0000:03:02.1").unwrap().device_info(),
            serde_json::json!({"type": "pci", "version": "1.1.0", "pci": {
                "pci-address": "0000:03:02.1", "pf-pci-address": "0000:03:00.0",
                "plexus.dev/userspace-driver": "vfio-pci"}})
        );
        assert_eq!(
            discover(root.path(), "0000:03:03.4").unwrap().device_info(),
            serde_json::json!({"type": "pci", "version": "1.1.0", "pci": {
                "pci-address": "0000:03:03.4", "pf-pci-address": "0000:03:00.0"}})
        );
    }

    #[test]
    fn explains_what_is_missing() {
        let root = tree();
        let text = |pci: &str| discover(root.path(), pci).unwrap_err().to_string();
        assert!(text("0000:09:00.0").contains("no such PCI device"), "{}", text("0000:09:00.0"));
        assert!(text("0000:03:00.0").contains("not an SR-IOV VF"), "{}", text("0000:03:00.0"));
        // A VF whose PF lost its netdev, and one the PF does not list.
        std::fs::remove_dir_all(root.path().join("bus/pci/devices/0000:03:00.0/net")).unwrap();
        assert!(text("0000:03:02.0").contains("has no network interface"), "{}", text("0000:03:02.0"));
        fake::pf(root.path(), "0000:04:00.0", "ens2f0");
        let orphan = root.path().join("bus/pci/devices/0000:04:02.0");
        std::fs::create_dir_all(&orphan).unwrap();
        std::os::unix::fs::symlink("../0000:04:00.0", orphan.join("physfn")).unwrap();
        assert!(text("0000:04:02.0").contains("no virtfnN link"), "{}", text("0000:04:02.0"));
    }
}
