//! The reference `host-local` disk backend (plugins/ipam/host-local/backend/disk, v1.1.1),
//! byte for byte, so that plexus and the reference plugin can share a dataDir:
//!
//! - `<dataDir>/<network>/` (mode 0755) holds everything of one network;
//! - `<ip>` (Go's text of the address, mode 0644), created exclusively, holds
//!   `<containerID>\r\n<ifname>`;
//! - `last_reserved_ip.<range set index>` holds the text of the set's last reserved address,
//!   no newline;
//! - `lock` (mode 0750, empty) is `flock(LOCK_EX)`ed around every operation (the reference's
//!   go-filemutex). flock belongs to the open file description, so it also orders plexus's own
//!   concurrent operations, each of which opens the file anew.
//!
//! One difference, invisible to a reader: the reference creates `<ip>` and then writes its
//! owner, so a process killed between the two leaves an empty file, an address that no DEL
//! releases because nobody owns it. plexus writes the owner to `.reserving` first and links it
//! to `<ip>` (link(2) fails on an existing name, as the exclusive create does): the address's
//! file appears with its owner or not at all. A `.reserving` left by a kill is removed by the
//! next holder of the lock.
//!
//! Everything here blocks: callers run it in `spawn_blocking`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::allocator::{Allocation, Store};
use crate::ipam::addr::{go_string, parse_ip};

const LAST_IP_PREFIX: &str = "last_reserved_ip.";
const LOCK_FILE: &str = "lock";
/// Where an address's file is written before it is linked to its name; only ever under the lock.
const RESERVING_FILE: &str = ".reserving";

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process held the lock past the deadline.
    #[error("the host-local lock {} is held by another process", .0.display())]
    Busy(PathBuf),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl StoreError {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
        move |source| StoreError::Io { path: path.to_owned(), source }
    }
}

/// A network's allocation directory, locked for as long as this value lives.
#[derive(Debug)]
pub struct DiskStore {
    dir: PathBuf,
    _lock: Flock<File>,
}

impl DiskStore {
    /// Creates the directory if needed and takes the lock, waiting until `deadline`.
    pub fn open(dir: &Path, deadline: Instant) -> Result<DiskStore, StoreError> {
        DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(StoreError::io(dir))?;
        Self::lock(dir, deadline)
    }

    /// Takes the lock of an existing directory; `None` when there is no directory, hence no
    /// allocation (DEL and CHECK must not create state).
    pub fn open_existing(dir: &Path, deadline: Instant) -> Result<Option<DiskStore>, StoreError> {
        match fs::metadata(dir) {
            Ok(m) if m.is_dir() => Self::lock(dir, deadline).map(Some),
            Ok(_) => {
                Err(StoreError::io(dir)(io::Error::new(io::ErrorKind::NotADirectory, "is not a directory")))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(dir)(e)),
        }
    }

    fn lock(dir: &Path, deadline: Instant) -> Result<DiskStore, StoreError> {
        let path = dir.join(LOCK_FILE);
        // The reference opens it read-only; std needs write access to create it.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o750)
            .open(&path)
            .map_err(StoreError::io(&path))?;
        // Polled rather than blocking, so a wedged holder costs a timeout, not a thread forever.
        let mut pause = Duration::from_millis(1);
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    let store = DiskStore { dir: dir.to_owned(), _lock: lock };
                    // Written only under the lock: one found now was left by a process killed
                    // while reserving, after (or before) the link that made its address.
                    store.remove_reserving().map_err(StoreError::io(&store.path(RESERVING_FILE)))?;
                    return Ok(store);
                }
                Err((f, Errno::EWOULDBLOCK)) | Err((f, Errno::EINTR)) => file = f,
                Err((_, e)) => return Err(StoreError::io(&path)(io::Error::from(e))),
            }
            if Instant::now() >= deadline {
                return Err(StoreError::Busy(path));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn remove_reserving(&self) -> io::Result<()> {
        match fs::remove_file(self.path(RESERVING_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// `<ip>` holding `record`, or `false` when the address's file exists: written whole
    /// under [`RESERVING_FILE`], then linked to its name.
    fn create_with_owner(&self, name: &str, record: &str) -> io::Result<bool> {
        let reserving = self.path(RESERVING_FILE);
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&reserving)
            .and_then(|mut f| f.write_all(record.as_bytes()))?;
        let linked = fs::hard_link(&reserving, self.path(name));
        // The write's or the link's error is the one to report; the next holder of the lock
        // removes a `.reserving` this fails to.
        if let Err(e) = self.remove_reserving() {
            tracing::warn!(file = %reserving.display(), "host-local: removing the reservation's temporary file: {e}");
        }
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Store for DiskStore {
    fn allocations(&self) -> io::Result<Vec<Allocation>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let Some(ip) = parse_ip(&name) else { continue };
            // As the reference: an entry that cannot be read is skipped, not fatal.
            let mut content = String::new();
            match File::open(entry.path()).and_then(|mut f| f.read_to_string(&mut content)) {
                Ok(_) => out.push(Allocation { ip, file: name, content }),
                Err(e) => tracing::debug!(file = %entry.path().display(), "host-local: skipping: {e}"),
            }
        }
        Ok(out)
    }

    fn last_reserved(&self, range_set: usize) -> Option<IpAddr> {
        // Read as the reference does (net.ParseIP of the whole content); anything unreadable
        // only costs the round robin its position.
        let text = fs::read_to_string(self.path(&format!("{LAST_IP_PREFIX}{range_set}"))).ok()?;
        parse_ip(&text)
    }

    fn reserve(&mut self, ip: IpAddr, record: &str, range_set: usize) -> io::Result<bool> {
        if !self.create_with_owner(&go_string(ip), record)? {
            return Ok(false);
        }
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(self.path(&format!("{LAST_IP_PREFIX}{range_set}")))
            .and_then(|mut f| f.write_all(go_string(ip).as_bytes()))?;
        Ok(true)
    }

    fn release(&mut self, file: &str) -> io::Result<()> {
        match fs::remove_file(self.path(file)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_have_the_reference_names_contents_and_modes() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("net");
        let mut s = DiskStore::open(&dir, soon()).unwrap();
        assert!(s.reserve("10.1.0.2".parse().unwrap(), "c1\r\neth0", 0).unwrap());
        assert!(s.reserve("fd00::a".parse().unwrap(), "c1\r\neth0", 1).unwrap());
        assert!(!s.reserve("10.1.0.2".parse().unwrap(), "c2\r\neth0", 0).unwrap());
        assert_eq!(fs::read(dir.join("10.1.0.2")).unwrap(), b"c1\r\neth0");
        assert_eq!(fs::read(dir.join("fd00::a")).unwrap(), b"c1\r\neth0");
        assert_eq!(fs::read(dir.join("last_reserved_ip.0")).unwrap(), b"10.1.0.2");
        assert_eq!(fs::read(dir.join("last_reserved_ip.1")).unwrap(), b"fd00::a");
        assert_eq!(fs::read(dir.join("lock")).unwrap(), b"");
        // The umask applies as it does to the reference; the interop tests compare modes with it.
        assert_eq!(mode(&dir) & !0o755, 0);
        assert_eq!(mode(&dir.join("10.1.0.2")) & !0o644, 0);
        assert_eq!(mode(&dir.join("lock")) & !0o750, 0);
        assert_eq!(s.last_reserved(0), Some("10.1.0.2".parse().unwrap()));
        assert_eq!(s.last_reserved(7), None);
        let mut all = s.allocations().unwrap();
        all.sort_by(|a, b| a.file.cmp(&b.file));
        assert_eq!(all.iter().map(|a| a.file.as_str()).collect::<Vec<_>>(), ["10.1.0.2", "fd00::a"]);
        s.release("10.1.0.2").unwrap();
        s.release("10.1.0.2").unwrap();
        assert!(!dir.join("10.1.0.2").exists());
    }

    #[test]
    fn an_address_file_appears_with_its_owner_and_a_killed_reservation_is_cleared_by_the_next_lock() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("net");
        let files = || {
            let mut names: Vec<String> =
                fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            names
        };
        {
            let mut s = DiskStore::open(&dir, soon()).unwrap();
            assert!(s.reserve("10.1.0.2".parse().unwrap(), "c1\r\neth0", 0).unwrap());
            // Taken: refused, and the owner's file is left as it was.
            assert!(!s.reserve("10.1.0.2".parse().unwrap(), "c2\r\neth0", 0).unwrap());
            assert_eq!(fs::read(dir.join("10.1.0.2")).unwrap(), b"c1\r\neth0");
            assert_eq!(files(), ["10.1.0.2", "last_reserved_ip.0", "lock"]);
        }
        // A process killed while reserving, before or after the link: its temporary file stays
        // (the address file, if linked, is whole and owned, so its DEL releases it).
        fs::write(dir.join(RESERVING_FILE), "c3\r\neth0").unwrap();
        let s = DiskStore::open_existing(&dir, soon()).unwrap().unwrap();
        assert_eq!(files(), ["10.1.0.2", "last_reserved_ip.0", "lock"]);
        assert_eq!(s.allocations().unwrap().len(), 1);
    }

    #[test]
    fn the_lock_excludes_a_second_opener_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("net");
        let held = DiskStore::open(&dir, soon()).unwrap();
        let err = DiskStore::open(&dir, Instant::now() + Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, StoreError::Busy(_)), "{err}");
        drop(held);
        DiskStore::open(&dir, soon()).unwrap();
    }

    #[test]
    fn open_existing_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        assert!(DiskStore::open_existing(&d.path().join("none"), soon()).unwrap().is_none());
        assert!(!d.path().join("none").exists());
    }
}
