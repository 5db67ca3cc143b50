//! Machine setup: the system packages the demo and the tests use. Idempotent and quick when
//! everything is present.

use std::path::Path;
use std::process::Command;

use anyhow::bail;

use crate::util::{self, is_root};

/// (file that proves the package is installed, Debian package).
const PACKAGES: &[(&str, &str)] = &[
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/usr/sbin/ip", "iproute2"),
    ("/usr/bin/ping", "iputils-ping"),
    // The tests' recording CNI plugin is a shell script built on jq.
    ("/usr/bin/jq", "jq"),
];

pub fn run() -> anyhow::Result<()> {
    let missing: Vec<&str> =
        PACKAGES.iter().filter(|(f, _)| !Path::new(f).exists()).map(|(_, p)| *p).collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!("plexus needs these Debian packages: {}; run as root to install them", missing.join(" "));
    }
    eprintln!("installing {}", missing.join(" "));
    util::run(Command::new("apt-get").args(["update", "-qq"]))?;
    util::run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}
