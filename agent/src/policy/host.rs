//! What the policy learns from the node itself: the PF of an SR-IOV VF, from sysfs.

use std::path::PathBuf;

use super::interfaces::HostLookup;
use crate::native::sriov::sysfs;

/// sysfs under `root` (`/sys` on a node).
#[derive(Debug, Clone)]
pub struct Sysfs {
    pub root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs { root: PathBuf::from("/sys") }
    }
}

impl HostLookup for Sysfs {
    fn sriov_pf(&self, vf_pci: &str) -> Option<String> {
        // A deviceID that is not a plain PCI address could walk out of the devices directory.
        if vf_pci.is_empty() || vf_pci.contains('/') || vf_pci.starts_with('.') {
            return None;
        }
        sysfs::discover(&self.root, vf_pci).ok().map(|vf| vf.pf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::sriov::sysfs::fake;

    #[test]
    fn finds_the_pf_of_a_vf_and_nothing_for_the_rest() {
        let d = tempfile::tempdir().unwrap();
        fake::pf(d.path(), "0000:3b:00.0", "ens1f0");
        fake::vf(d.path(), "0000:3b:00.0", 1, "0000:3b:02.1", "iavf", Some("ens1f0v1"));
        let s = Sysfs { root: d.path().to_owned() };
        assert_eq!(s.sriov_pf("0000:3b:02.1").as_deref(), Some("ens1f0"));
        assert_eq!(s.sriov_pf("0000:3b:00.0"), None, "a PF is not a VF");
        assert_eq!(s.sriov_pf("0000:99:00.0"), None);
        assert_eq!(s.sriov_pf("../../../etc"), None);
        assert_eq!(s.sriov_pf(""), None);
    }
}
