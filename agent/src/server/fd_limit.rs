//! The agent's limit of open files. Each connection, delegate pipe, netlink socket and BPF
//! object takes a descriptor; the usual soft limit of 1,024 is soon reached by a few hundred
//! idle connections, and then nothing else can open a file (a state record, a BPF map).

use std::io;

/// Raises the soft limit of open files to the hard limit. Returns (before, after).
pub fn raise_to_hard() -> io::Result<(u64, u64)> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `limit` is a valid rlimit; raising the soft limit up to the hard one needs
        // no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}
