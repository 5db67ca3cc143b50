//! Names unique across parallel tests and test binaries, that say which process made them.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `PREFIX-PID-N`: this process's id and a counter, so parallel tests and concurrently running
/// binaries never collide, and [`owner`] tells whose a leftover is. For namespaces, directories
/// and cgroups; interface names want [`unique_ifname`].
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A name for an interface (at most 15 characters): `PREFIX`, then this process's id and a
/// counter in hex. Keep the prefix short (5 characters leave room for 16^4 names per process).
pub fn unique_ifname(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}{n:x}", std::process::id() & 0xfffff).chars().take(15).collect()
}

/// The process id a [`unique`] name carries, if it is one.
pub fn owner(name: &str) -> Option<u32> {
    let mut parts = name.rsplitn(3, '-');
    let counter = parts.next()?;
    let pid = parts.next()?;
    parts.next()?;
    counter.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// A [`unique`] name whose process is gone: a killed run's leftover.
pub(crate) fn is_stale(name: &str) -> bool {
    owner(name).is_some_and(|pid| pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ_and_carry_the_process_id() {
        let (a, b) = (unique("pxpod"), unique("pxpod"));
        assert_ne!(a, b);
        assert!(a.starts_with("pxpod-"), "{a}");
        assert_eq!(owner(&a), Some(std::process::id()));
        assert!(!is_stale(&a), "ours is not stale");
    }

    #[test]
    fn owner_needs_a_pid_and_a_counter() {
        assert_eq!(owner("pxb-node-4711-2"), Some(4711));
        assert_eq!(owner("pxdemo-node"), None);
        assert_eq!(owner("4711-2"), None);
        assert_eq!(owner("px-x-2"), None);
    }

    #[test]
    fn a_dead_process_makes_its_names_stale() {
        let mut child = std::process::Command::new("true").spawn().expect("running true");
        child.wait().expect("reaping true");
        assert!(is_stale(&format!("pxtest-{}-0", child.id())));
    }

    #[test]
    fn ifnames_fit_an_interface_name() {
        let (a, b) = (unique_ifname("vf"), unique_ifname("vf"));
        assert_ne!(a, b);
        assert!(a.len() <= 15 && a.starts_with("vf"), "{a}");
    }
}
