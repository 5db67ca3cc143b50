//! A bpffs of a test's own: pins made there go when it is unmounted.

use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::error::{or_panic, Error, Result};
use crate::name::unique;

/// A bpffs mounted on a fresh directory; on drop it is unmounted (which releases every pin:
/// maps, programs, TC and cgroup links) and the directory removed.
#[derive(Debug)]
pub struct Bpffs {
    path: PathBuf,
}

impl Bpffs {
    /// A bpffs on a fresh directory [`unique`]`(prefix)` in the temporary directory.
    #[track_caller]
    pub fn new(prefix: &str) -> Bpffs {
        or_panic(Bpffs::try_mount(std::env::temp_dir().join(unique(prefix))))
    }

    /// A bpffs on `path`, a directory that must not exist yet (its parents may not either).
    #[track_caller]
    pub fn mount(path: PathBuf) -> Bpffs {
        or_panic(Bpffs::try_mount(path))
    }

    /// [`Bpffs::mount`], failing instead of panicking.
    pub fn try_mount(path: PathBuf) -> Result<Bpffs> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                action: "creating",
                path: parent.into(),
                source,
            })?;
        }
        std::fs::create_dir(&path).map_err(|source| Error::Io {
            action: "creating",
            path: path.clone(),
            source,
        })?;
        if let Err(source) = mount(Some("bpf"), &path, Some("bpf"), MsFlags::empty(), None::<&str>) {
            if let Err(e) = std::fs::remove_dir(&path) {
                eprintln!("could not remove {} after a failed mount: {e}", path.display());
            }
            return Err(Error::Sys { action: "mounting a bpffs on", path, source });
        }
        Ok(Bpffs { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        // Detached: a process that still holds a pin's fd does not keep the mount point busy.
        if let Err(e) = umount2(&self.path, MntFlags::MNT_DETACH) {
            eprintln!("could not unmount the test bpffs {}: {e}", self.path.display());
            return;
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("could not remove the test bpffs directory {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod kernel {
    use super::*;

    fn mounted(path: &Path) -> bool {
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
        mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(path.to_str().expect("a UTF-8 path")))
    }

    #[test]
    fn a_bpffs_is_mounted_until_its_guard_drops_then_its_directory_goes() {
        let bpffs = Bpffs::new("pxkitbpf");
        let path = bpffs.path().to_owned();
        assert!(mounted(&path), "{} is mounted", path.display());
        std::fs::create_dir(path.join("plexus")).expect("a directory on the bpffs");
        drop(bpffs);
        assert!(!mounted(&path), "{} is unmounted", path.display());
        assert!(!path.exists(), "{} is removed", path.display());
    }

    #[test]
    fn a_directory_in_use_is_refused() {
        let bpffs = Bpffs::new("pxkitbpf");
        let again = Bpffs::try_mount(bpffs.path().to_owned());
        assert!(matches!(again, Err(Error::Io { .. })), "{again:?}");
        assert!(mounted(bpffs.path()), "the first mount is untouched");
    }
}
