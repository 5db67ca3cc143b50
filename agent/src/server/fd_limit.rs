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

/// How many connections may wait for their request with `limit` open files: `max`, or a
/// quarter of the limit if that is less, so that waiting connections never take the
/// descriptors the requests being served need (delegate pipes, state files, netlink).
pub fn pending_bound(limit: u64, max: usize) -> usize {
    usize::try_from(limit / 4).unwrap_or(usize::MAX).clamp(1, max.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_connections_take_at_most_a_quarter_of_the_descriptors() {
        assert_eq!(pending_bound(1 << 20, 256), 256);
        assert_eq!(pending_bound(1024, 256), 256);
        assert_eq!(pending_bound(512, 256), 128);
        assert_eq!(pending_bound(2, 256), 1);
        assert_eq!(pending_bound(u64::MAX, 256), 256);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, after) = raise_to_hard().unwrap();
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: a valid rlimit for the kernel to fill.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
        assert_eq!((after, limit.rlim_cur), (limit.rlim_max, limit.rlim_max));
    }
}
