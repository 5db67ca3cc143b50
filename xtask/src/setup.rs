//! Machine setup: the system packages the demo and the tests use, and the toolchain that
//! builds the BPF programs. Idempotent and quick when everything is present.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use crate::util::{self, is_root, output};

/// (file that proves the package is installed, Debian package).
const PACKAGES: &[(&str, &str)] = &[
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/usr/sbin/ip", "iproute2"),
    ("/usr/bin/ping", "iputils-ping"),
    // The tests' recording CNI plugin is a shell script built on jq.
    ("/usr/bin/jq", "jq"),
    // The port mapping tests: checksum offload off on senders, and traffic from scripts.
    ("/usr/sbin/ethtool", "ethtool"),
    ("/usr/bin/python3", "python3"),
    // The network API's tests: a gRPC client generated from proto/network.proto at test time.
    ("/usr/lib/python3/dist-packages/grpc/__init__.py", "python3-grpcio"),
    ("/usr/lib/python3/dist-packages/grpc_tools/protoc.py", "python3-grpc-tools"),
    // `cargo xtask bench`: throughput, and the reference portmap's iptables.
    ("/usr/bin/iperf3", "iperf3"),
    ("/usr/sbin/iptables", "iptables"),
    // The native bridge's tests: the nftables state a test leaves, and the reference bridge's
    // `macspoofchk`, which runs nft.
    ("/usr/sbin/nft", "nftables"),
];

/// The bpf-linker release the BPF build is known to work with.
const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn run() -> anyhow::Result<()> {
    packages()?;
    bpf_toolchain()
}

fn packages() -> anyhow::Result<()> {
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

/// The BPF programs (ebpf/programs) build with the nightly toolchain's rust-src
/// (`-Z build-std=core`, bpfel-unknown-none is tier 3) and link with bpf-linker, which must use
/// the same LLVM major version as that rustc. Debian has no matching LLVM, but the nightly
/// ships its own as a shared library exporting the whole LLVM-C API, so bpf-linker is built
/// against it (`no-llvm-linking` + the library on the link line, found at run time by rpath).
fn bpf_toolchain() -> anyhow::Result<()> {
    let rustup = rustup();
    let nightly_ready = Command::new(&rustup)
        .args(["run", "nightly", "rustc", "--version"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .is_ok_and(|o| o.status.success());
    if !nightly_ready {
        eprintln!("installing the nightly Rust toolchain (for the BPF programs)");
        util::run(Command::new(&rustup).args(["toolchain", "install", "nightly", "--profile", "minimal"]))?;
    }
    let sysroot = PathBuf::from(
        output(
            Command::new(&rustup)
                .args(["run", "nightly", "rustc", "--print", "sysroot"])
                .env_remove("RUSTUP_TOOLCHAIN"),
        )?
        .trim(),
    );
    if !sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        util::run(Command::new(&rustup).args(["component", "add", "rust-src", "--toolchain", "nightly"]))?;
    }
    if bpf_linker_works() {
        return Ok(());
    }
    let (lib, major) = llvm_library(&sysroot)?;
    eprintln!("building bpf-linker {BPF_LINKER_VERSION} against the nightly's LLVM {major} ({lib}); about 2 minutes");
    let lib_dir = sysroot.join("lib");
    let rustflags =
        format!("-L native={dir} -l dylib={lib} -C link-arg=-Wl,-rpath,{dir}", dir = lib_dir.display());
    let mut install = Command::new(&rustup);
    install
        .args([
            "run",
            "nightly",
            "cargo",
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--locked",
        ])
        .args(["--no-default-features", "--features", &format!("llvm-{major},no-llvm-linking")])
        .env("RUSTFLAGS", rustflags);
    // The outer `cargo xtask` exported settings for this workspace; bpf-linker is not in it.
    for var in ["RUSTUP_TOOLCHAIN", "CARGO_TARGET_DIR", "CARGO_ENCODED_RUSTFLAGS", "RUSTC", "RUSTC_WRAPPER"] {
        install.env_remove(var);
    }
    util::run(&mut install)?;
    if !bpf_linker_works() {
        bail!("bpf-linker was installed but `bpf-linker --version` still fails; is ~/.cargo/bin in PATH?");
    }
    Ok(())
}

pub(crate) fn rustup() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    home.map(|h| h.join("bin/rustup")).filter(|p| p.exists()).unwrap_or_else(|| PathBuf::from("rustup"))
}

fn bpf_linker_works() -> bool {
    Command::new("bpf-linker").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// The nightly's LLVM shared library (`libLLVM-22-rust-1.97.0-nightly.so` → its link name
/// `LLVM-22-rust-1.97.0-nightly` and major version `22`).
fn llvm_library(sysroot: &Path) -> anyhow::Result<(String, String)> {
    let lib_dir = sysroot.join("lib");
    let mut names: Vec<String> = std::fs::read_dir(&lib_dir)
        .with_context(|| format!("reading {}", lib_dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.starts_with("libLLVM-") && n.contains("-rust-") && n.ends_with(".so"))
        .collect();
    names.sort();
    let Some(file) = names.first() else {
        bail!(
            "the nightly toolchain in {} ships no libLLVM-*-rust-*.so to build bpf-linker against",
            lib_dir.display()
        )
    };
    let lib = file.trim_start_matches("lib").trim_end_matches(".so").to_owned();
    let major = lib
        .strip_prefix("LLVM-")
        .and_then(|rest| rest.split('-').next())
        .filter(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))
        .with_context(|| format!("cannot read the LLVM version from {file}"))?
        .to_owned();
    Ok((lib, major))
}
