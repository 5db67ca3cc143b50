//! Generates the gRPC code of the CRI network API (`proto/network.proto`), of the kubelet's
//! PodResources API (`proto/podresources.proto`) and of the runtime's CRI calls doctor makes
//! (`proto/cri.proto`) ([`compile_proto`]), and builds plexus's BPF
//! object (`ebpf/programs`) so the agent can embed it (`aya::include_bytes_aligned!`) and ship
//! as one binary.
//!
//! The object builds for `bpfel-unknown-none`, a tier-3 target: it needs the nightly toolchain
//! with `rust-src` (`-Z build-std=core`) and `bpf-linker` as the linker. `cargo xtask setup`
//! installs both. The nested cargo runs in a clean environment (the outer build's RUSTFLAGS,
//! RUSTC, wrappers and target directory are for the host and would break or redirect it) and in
//! its own target directory, `target/bpf`, so its lock never waits on the outer build's.
//!
//! Three objects come out: `plexus-ebpf` (port mappings), `plexus-bandwidth` (shaping) and
//! `plexus-policy` (network policy), loaded independently. `PLEXUS_BPF_DIR=/path/to/dir` skips the nested build and embeds prebuilt
//! objects of those names from that directory.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const SETUP_HINT: &str = "run `cargo xtask setup` to install the BPF toolchain (nightly with rust-src, \
                          bpf-linker), or set PLEXUS_BPF_DIR to a directory of prebuilt objects";

/// The binaries of ebpf/programs: one BPF object each.
const OBJECTS: [&str; 3] = ["plexus-ebpf", "plexus-bandwidth", "plexus-policy"];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("the agent crate sits in the workspace root").to_owned();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    compile_proto(&root, &out, "network.proto", true);
    compile_proto(&root, &out, "podresources.proto", true);
    // The same package as network.proto (`runtime.v1`): its own directory, a client only.
    let cri = out.join("cri");
    std::fs::create_dir_all(&cri).unwrap_or_else(|e| panic!("creating {}: {e}", cri.display()));
    compile_proto(&root, &cri, "cri.proto", false);
    build_bpf(&root, &out);
}

/// The messages, clients (and with `server`, servers) of `proto/<name>`, into
/// `<out>/<package>.rs` (`runtime.v1.rs`, `v1.rs`). The descriptors come from protox, a protobuf
/// compiler in Rust, so no system `protoc` is needed.
fn compile_proto(root: &Path, out: &Path, name: &str, server: bool) {
    let dir = root.join("proto");
    let file = dir.join(name);
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors =
        protox::compile([&file], [&dir]).unwrap_or_else(|e| panic!("compiling {}: {e:?}", file.display()));
    tonic_prost_build::configure()
        .build_server(server)
        .out_dir(out)
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("generating the gRPC code of {}: {e}", file.display()));
}

fn build_bpf(root: &Path, out: &Path) {
    println!("cargo:rerun-if-env-changed=PLEXUS_BPF_DIR");
    if let Some(prebuilt) = env::var_os("PLEXUS_BPF_DIR") {
        for object in OBJECTS {
            let from = Path::new(&prebuilt).join(object);
            println!("cargo:rerun-if-changed={}", from.display());
            copy(&from, &out.join(format!("{object}.o")));
        }
        return;
    }
    for source in [
        "ebpf/programs/src",
        "ebpf/programs/Cargo.toml",
        "ebpf/programs/Cargo.lock",
        "ebpf/programs/.cargo/config.toml",
        "ebpf/common/src",
        "ebpf/common/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(source).display());
    }

    let rustup = find_rustup();
    check_toolchain(&rustup);
    let target_dir = root.join("target").join("bpf");
    let mut cmd = Command::new(&rustup);
    cmd.args(["run", "nightly", "cargo", "build", "--release", "--target", "bpfel-unknown-none"])
        .args(["-Z", "build-std=core", "--target-dir"])
        .arg(&target_dir)
        .current_dir(root.join("ebpf").join("programs"));
    clean_env(&mut cmd);
    let status = cmd.status().unwrap_or_else(|e| panic!("running {cmd:?}: {e}; {SETUP_HINT}"));
    if !status.success() {
        panic!(
            "building the BPF programs (ebpf/programs) failed ({status}); see the errors above. {SETUP_HINT}"
        );
    }
    for object in OBJECTS {
        copy(
            &target_dir.join("bpfel-unknown-none").join("release").join(object),
            &out.join(format!("{object}.o")),
        );
    }
}

fn copy(from: &Path, to: &Path) {
    if let Err(e) = std::fs::copy(from, to) {
        panic!("copying the BPF object {} to {}: {e}", from.display(), to.display());
    }
}

/// rustup itself: the outer build may run with the toolchain's own bin directory first in
/// PATH, where `cargo` is not the rustup proxy and `+nightly` would not work.
fn find_rustup() -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(home) = env::var_os("CARGO_HOME") {
        candidates.push(Path::new(&home).join("bin").join("rustup"));
    }
    if let Some(home) = env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cargo").join("bin").join("rustup"));
    }
    candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| PathBuf::from("rustup"))
}

fn check_toolchain(rustup: &Path) {
    let sysroot = Command::new(rustup)
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output();
    let sysroot = match sysroot {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        Ok(o) => panic!(
            "the nightly Rust toolchain is missing ({}); {SETUP_HINT}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!("running {}: {e}; {SETUP_HINT}", rustup.display()),
    };
    if !sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        panic!("the nightly toolchain lacks the rust-src component (needed for -Z build-std); {SETUP_HINT}");
    }
    let linker = Command::new("bpf-linker").arg("--version").env("PATH", search_path()).output();
    if !linker.is_ok_and(|o| o.status.success()) {
        panic!("bpf-linker is not installed or does not run; {SETUP_HINT}");
    }
}

/// PATH with cargo's bin directory (where `cargo install` put bpf-linker) added.
fn search_path() -> OsString {
    let mut dirs: Vec<PathBuf> =
        env::var_os("PATH").map(|p| env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(home) = env::var_os("CARGO_HOME") {
        dirs.push(Path::new(&home).join("bin"));
    }
    if let Some(home) = env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".cargo").join("bin"));
    }
    env::join_paths(dirs).unwrap_or_default()
}

/// Removes what the outer cargo set for the host build: flags, compilers, wrappers, target
/// directory, profile and jobserver settings, and the build-script variables.
fn clean_env(cmd: &mut Command) {
    const KEEP: [&str; 2] = ["CARGO_HOME", "RUSTUP_HOME"];
    const BUILD_SCRIPT: [&str; 8] =
        ["TARGET", "HOST", "OUT_DIR", "OPT_LEVEL", "PROFILE", "DEBUG", "NUM_JOBS", "RUSTC_LINKER"];
    for (key, _) in env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let host_setting = key.starts_with("CARGO") || key.starts_with("RUST") || key.starts_with("__CARGO");
        if (host_setting && !KEEP.contains(&key)) || BUILD_SCRIPT.contains(&key) {
            cmd.env_remove(key);
        }
    }
    cmd.env("PATH", search_path());
}
