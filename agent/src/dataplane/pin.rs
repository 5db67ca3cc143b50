//! Where the dataplane's BPF objects live: a directory on bpffs, and the filesystems the loader
//! needs (bpffs for pins, cgroup2 for the socket hooks) made available even when the agent's
//! mount namespace hides them.
//!
//! Pins are what make the dataplane outlive the agent: maps keep their entries and TCX/cgroup
//! links keep the programs attached while the agent restarts or is upgraded. So the pin
//! directory must be on a bpffs that outlives the agent too: `/sys/fs/bpf` of the host. `ip
//! netns exec` (and some container runtimes) give the agent a fresh /sys without it; the agent
//! then mounts bpffs itself, which works but only lives as long as that mount namespace, which
//! the log says. Tests pass `--bpf-pin-dir` on a bpffs they mounted themselves.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sys::statfs::{statfs, BPF_FS_MAGIC, CGROUP2_SUPER_MAGIC};

/// The default pin directory.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/plexus";
/// The standard bpffs mount point.
const BPFFS: &str = "/sys/fs/bpf";

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("{action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("mounting {fs} on {path}: {source}")]
    Mount { fs: &'static str, path: PathBuf, source: nix::Error },
    #[error("{path} is not on bpffs and bpffs cannot be mounted there: {reason}")]
    NotBpffs { path: PathBuf, reason: String },
    #[error("mounting {fs} where only the agent sees it: {source}")]
    DetachedMount { fs: &'static str, source: std::io::Error },
    #[error("reading the network namespace cookie (SO_NETNS_COOKIE, Linux 5.14+): {0}")]
    NetnsCookie(std::io::Error),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PinError {
    let path = path.to_owned();
    move |source| PinError::Io { action, path, source }
}

/// The layout of the pin directory.
#[derive(Debug, Clone)]
pub struct PinDir {
    root: PathBuf,
}

impl PinDir {
    /// Makes sure `root` is a directory on bpffs (mounting bpffs if needed) with its
    /// subdirectories.
    pub fn prepare(root: &Path) -> Result<PinDir, PinError> {
        // The port mapping and shaping objects load in parallel: one mount of bpffs, not two
        // stacked ones hiding each other's pins.
        static MOUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = MOUNTING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        ensure_bpffs(root)?;
        drop(guard);
        let dir = PinDir { root: root.to_owned() };
        for sub in [dir.maps(), dir.progs(), dir.links()] {
            std::fs::create_dir_all(&sub).map_err(io("creating", &sub))?;
        }
        Ok(dir)
    }

    /// An existing pin directory, for readers (`plexus-agent portmap list`): nothing is created.
    pub fn open(root: &Path) -> PinDir {
        PinDir { root: root.to_owned() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn maps(&self) -> PathBuf {
        self.root.join("maps")
    }

    pub fn map(&self, name: &str) -> PathBuf {
        self.maps().join(name)
    }

    pub fn progs(&self) -> PathBuf {
        self.root.join("progs")
    }

    pub fn prog(&self, name: &str) -> PathBuf {
        self.progs().join(name)
    }

    pub fn links(&self) -> PathBuf {
        self.root.join("links")
    }

    pub fn link(&self, name: &str) -> PathBuf {
        self.links().join(name)
    }

    /// Names of the pinned links.
    pub fn link_names(&self) -> Result<Vec<String>, PinError> {
        let dir = self.links();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("reading", &dir)(e)),
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }
}

fn on_fs(path: &Path, magic: nix::sys::statfs::FsType) -> bool {
    statfs(path).is_ok_and(|s| s.filesystem_type() == magic)
}

fn ensure_bpffs(root: &Path) -> Result<(), PinError> {
    if on_fs(root, BPF_FS_MAGIC) {
        return Ok(());
    }
    // The deepest existing ancestor decides: inside a bpffs, directories are just created.
    let existing = root.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
    if existing != root && on_fs(existing, BPF_FS_MAGIC) {
        return std::fs::create_dir_all(root).map_err(io("creating", root));
    }
    // Under /sys/fs/bpf, mount the standard bpffs (sysfs refuses new directories).
    let standard = Path::new(BPFFS);
    let target = if root.starts_with(standard) && standard.is_dir() { standard } else { root };
    if target == root {
        std::fs::create_dir_all(root).map_err(io("creating", root))?;
    }
    tracing::warn!(
        "{} is not on bpffs: mounting bpffs on {}. If this mount namespace is private to the agent (ip \
         netns exec, a container without the host's /sys/fs/bpf), the pins live only as long as it does; \
         mount the host's bpffs there to keep mappings across agent restarts",
        root.display(),
        target.display()
    );
    mount(Some("bpf"), target, Some("bpf"), MsFlags::empty(), None::<&str>)
        .map_err(|source| PinError::Mount { fs: "bpffs", path: target.to_owned(), source })?;
    if target != root {
        std::fs::create_dir_all(root).map_err(io("creating", root))?;
    }
    if !on_fs(root, BPF_FS_MAGIC) {
        return Err(PinError::NotBpffs {
            path: root.to_owned(),
            reason: "still not bpffs after mounting".into(),
        });
    }
    Ok(())
}

/// An open directory of the root cgroup (cgroup v2), where the socket hooks attach. When
/// `path` is not a cgroup2 mount (hidden by the agent's mount namespace), a new cgroup2 mount
/// that is attached nowhere is made and its root opened (fsopen/fsmount, Linux 5.2): no
/// directory is created for it, so nothing is left behind, even by an agent killed meanwhile,
/// and the mount goes away with the descriptor.
pub fn open_cgroup_root(path: &Path) -> Result<OwnedFd, PinError> {
    if on_fs(path, CGROUP2_SUPER_MAGIC) {
        return open_dir(path);
    }
    detached_cgroup2_root().map_err(|source| PinError::DetachedMount { fs: "cgroup2", source })
}

/// The root directory of a new cgroup2 mount that is attached nowhere.
fn detached_cgroup2_root() -> std::io::Result<OwnedFd> {
    // From linux/mount.h.
    const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
    const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
    const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
    // SAFETY: fsopen reads a NUL-terminated name and returns a new descriptor or -1.
    let context = owned(unsafe { libc::syscall(libc::SYS_fsopen, c"cgroup2".as_ptr(), FSOPEN_CLOEXEC) })?;
    // SAFETY: FSCONFIG_CMD_CREATE takes no key, value or aux; `context` is open.
    let created = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            context.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if created < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `context` is an open filesystem context; fsmount returns a new descriptor or -1.
    let mount = owned(unsafe { libc::syscall(libc::SYS_fsmount, context.as_raw_fd(), FSMOUNT_CLOEXEC, 0) })?;
    // fsmount's descriptor is O_PATH; the socket hooks need an ordinary open directory.
    // SAFETY: openat reads a NUL-terminated path relative to the open `mount`.
    owned(libc::c_long::from(unsafe {
        libc::openat(mount.as_raw_fd(), c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC)
    }))
}

/// A syscall's new descriptor, or its errno.
fn owned(rc: libc::c_long) -> std::io::Result<OwnedFd> {
    let fd =
        std::os::fd::RawFd::try_from(rc).map_err(|_| std::io::Error::other("descriptor out of range"))?;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn open_dir(path: &Path) -> Result<OwnedFd, PinError> {
    std::fs::File::open(path).map(OwnedFd::from).map_err(io("opening", path))
}

/// The cookie of the agent's network namespace, which the socket hooks compare with their
/// socket's to act on the agent's namespace only.
pub fn netns_cookie() -> Result<u64, PinError> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").map_err(PinError::NetnsCookie)?;
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(PinError::NetnsCookie(std::io::Error::last_os_error()));
    }
    Ok(cookie)
}
