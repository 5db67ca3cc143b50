//! Whether anything changed in some directories since the last ask, from inotify: so a
//! lookup in an unchanged directory costs one `read` that finds nothing, however many files
//! the directory holds.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Every change to a directory's entries or to a file's content or metadata, and the
/// directory itself going away.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

#[derive(Debug)]
pub struct DirWatch {
    fd: OwnedFd,
    dirs: Vec<PathBuf>,
    /// Per directory: whether it is watched (a missing one is not, until it appears).
    watched: Vec<bool>,
}

impl DirWatch {
    /// Watches `dirs` (those that exist; the others are looked for at every ask).
    pub fn new(dirs: &[PathBuf]) -> io::Result<DirWatch> {
        // SAFETY: inotify_init1 takes flags only; a non-negative result is a new descriptor
        // that nothing else owns.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: see above.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut watch = DirWatch { fd, dirs: dirs.to_vec(), watched: vec![false; dirs.len()] };
        watch.rewatch();
        Ok(watch)
    }

    /// Whether anything may have changed since the last call: an event was queued, or a
    /// directory that was missing appeared.
    pub fn changed(&mut self) -> bool {
        let mut changed = self.drain();
        if changed {
            // A directory removed or replaced: watch what is at its path now.
            self.rewatch();
        } else {
            for i in 0..self.dirs.len() {
                if !self.watched[i] && self.add(i) {
                    changed = true;
                }
            }
        }
        changed
    }

    /// Reads every queued event; whether there was any (or the queue could not be read).
    fn drain(&self) -> bool {
        let mut buf = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: the buffer is valid for its length; the descriptor is ours.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                n if n > 0 => any = true,
                0 => return any,
                _ => {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return any,
                        io::ErrorKind::Interrupted => {}
                        // Cannot tell: assume a change, which costs one listing.
                        _ => return true,
                    }
                }
            }
        }
    }

    fn rewatch(&mut self) {
        for i in 0..self.dirs.len() {
            self.add(i);
        }
    }

    /// Watches directory `i`; whether it is watched now.
    fn add(&mut self, i: usize) -> bool {
        let Ok(path) = std::ffi::CString::new(self.dirs[i].as_os_str().as_bytes()) else { return false };
        // SAFETY: a valid C string and our descriptor; watching the same inode again only
        // returns its existing watch.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), MASK) };
        self.watched[i] = wd >= 0;
        self.watched[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_changes_once_and_sees_directories_appear_and_go() {
        let d = tempfile::tempdir().unwrap();
        let present = d.path().join("present");
        let later = d.path().join("later");
        std::fs::create_dir(&present).unwrap();
        let mut w = DirWatch::new(&[present.clone(), later.clone()]).unwrap();
        assert!(!w.changed(), "nothing happened yet");

        std::fs::write(present.join("a.yaml"), "x").unwrap();
        assert!(w.changed());
        assert!(!w.changed(), "told once");
        // Content changed in place, metadata, rename, removal: each seen.
        std::fs::read(present.join("a.yaml")).unwrap();
        assert!(!w.changed(), "reading is no change");
        std::fs::write(present.join("a.yaml"), "y").unwrap();
        assert!(w.changed());
        std::fs::rename(present.join("a.yaml"), present.join("b.yaml")).unwrap();
        assert!(w.changed());
        std::fs::remove_file(present.join("b.yaml")).unwrap();
        assert!(w.changed());

        // A directory that appears is a change, and is watched from then on.
        std::fs::create_dir(&later).unwrap();
        assert!(w.changed());
        assert!(!w.changed());
        std::fs::write(later.join("c.yaml"), "z").unwrap();
        assert!(w.changed());
        // One removed and made again is watched again.
        std::fs::remove_file(later.join("c.yaml")).unwrap();
        std::fs::remove_dir(&later).unwrap();
        assert!(w.changed());
        std::fs::create_dir(&later).unwrap();
        assert!(w.changed());
        std::fs::write(later.join("d.yaml"), "z").unwrap();
        assert!(w.changed());
        assert!(!w.changed());
    }
}
