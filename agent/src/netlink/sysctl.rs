//! Sysctls of the calling thread's network namespace: run them through
//! [`super::run_in`] to reach a pod's (/proc/sys/net shows the namespace of the thread that
//! opens it).

use std::path::PathBuf;

/// /proc/sys/<key...>; the key comes in parts because interface names may contain dots.
fn sysctl_path(key: &[&str]) -> PathBuf {
    key.iter().fold(PathBuf::from("/proc/sys"), |path, part| path.join(part))
}

/// Reads a sysctl of the calling thread's namespace, trimmed.
pub fn read_sysctl(key: &[&str]) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(sysctl_path(key))?.trim().to_owned())
}

/// Writes a sysctl of the calling thread's namespace.
pub fn write_sysctl(key: &[&str], value: &str) -> std::io::Result<()> {
    std::fs::write(sysctl_path(key), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_keep_dots_in_interface_names() {
        assert_eq!(
            sysctl_path(&["net", "ipv4", "conf", "eth0.100", "arp_notify"]),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/arp_notify")
        );
    }
}
