//! The binaries under test, built as they ship: the agent, and the `plexus` shim linked
//! statically (the runtime execs it for every CNI call, and a dynamically linked binary pays
//! the loader's relocations on each of them). Also the trivial static binary the shim's round
//! trip is compared with (issue #17: at most 0.3 ms more than its exec).

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use crate::util::{self, root};

/// How the shim is built for release: `cargo rustc` passes the flag to the final link only,
/// so build scripts and proc-macros stay dynamic (a static proc-macro cannot be loaded).
pub const STATIC_SHIM_ARGS: &[&str] = &[
    "rustc",
    "--release",
    "-p",
    "plexus-cni-shim",
    "--bin",
    "plexus",
    "--",
    "-C",
    "target-feature=+crt-static",
];

/// The binaries under test.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bins {
    pub shim: PathBuf,
    pub agent: PathBuf,
    /// `release`, or the directory given with --bin-dir.
    pub origin: String,
    /// The agent has `--exec-plugin` (native plugin types can be handed back to binaries).
    pub exec_plugin_option: bool,
    /// The shim has no program interpreter (no dynamic loader runs when it is exec'd).
    pub shim_static: bool,
}

/// Builds the release binaries (or takes them from --bin-dir) and asks the agent what it
/// supports.
pub fn binaries(bin_dir: Option<&PathBuf>) -> anyhow::Result<Bins> {
    let (dir, origin) = match bin_dir {
        Some(d) => (d.clone(), d.display().to_string()),
        None => {
            eprintln!("[bench build] cargo build --release -p plexus-agent");
            util::cargo(&["build", "--release", "-p", "plexus-agent"])?;
            eprintln!("[bench build] cargo {}", STATIC_SHIM_ARGS.join(" "));
            util::cargo(STATIC_SHIM_ARGS)?;
            (root().join("target/release"), "release".to_owned())
        }
    };
    let shim = dir.join("plexus");
    let agent = dir.join("plexus-agent");
    for b in [&shim, &agent] {
        if !b.exists() {
            bail!("{} is missing (build it, or pass another --bin-dir)", b.display());
        }
    }
    let shim_static = !has_interpreter(&shim).with_context(|| format!("reading {}", shim.display()))?;
    let help = util::output(Command::new(&agent).args(["run", "--help"])).unwrap_or_default();
    Ok(Bins { shim, agent, origin, exec_plugin_option: help.contains("--exec-plugin"), shim_static })
}

/// Compiles `fn main() {}` with the toolchain that builds plexus, linked statically, into
/// `dir`: the floor of an exec, which the shim's round trip is compared with.
pub fn trivial_static(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (src, out) = (dir.join("trivial.rs"), dir.join("trivial-static"));
    std::fs::write(&src, "fn main() {}\n").with_context(|| format!("writing {}", src.display()))?;
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    util::run(
        Command::new(rustc).args(["-O", "-C", "target-feature=+crt-static", "-o"]).arg(&out).arg(&src),
    )?;
    if has_interpreter(&out)? {
        bail!("{} came out dynamically linked: this toolchain cannot link statically", out.display());
    }
    Ok(out)
}

/// Whether the ELF file at `path` names a program interpreter (`PT_INTERP`): a dynamically
/// linked executable does, a static one does not.
pub fn has_interpreter(path: &Path) -> io::Result<bool> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(1 << 20).read_to_end(&mut bytes)?;
    elf_has_interpreter(&bytes)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a 64-bit little-endian ELF file"))
}

const PT_INTERP: u32 = 3;

/// `PT_INTERP` among the program headers of a 64-bit little-endian ELF image; `None` when
/// `elf` is not one (or its headers lie outside it).
fn elf_has_interpreter(elf: &[u8]) -> Option<bool> {
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |o: usize| elf.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let phoff = usize::try_from(u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?)).ok()?;
    let (entsize, count) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    if entsize < 4 {
        return None;
    }
    for i in 0..count {
        let at = phoff.checked_add(i.checked_mul(entsize)?)?;
        let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        if kind == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF header with `types` as its program headers (56 bytes each, right after it).
    fn elf(types: &[u32]) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[..6].copy_from_slice(b"\x7fELF\x02\x01");
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
        for t in types {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            e.extend(ph);
        }
        e
    }

    #[test]
    fn an_interpreter_header_makes_a_dynamic_executable() {
        assert_eq!(elf_has_interpreter(&elf(&[6, PT_INTERP, 1])), Some(true));
        assert_eq!(elf_has_interpreter(&elf(&[6, 1, 2])), Some(false));
        assert_eq!(elf_has_interpreter(&elf(&[])), Some(false));
    }

    #[test]
    fn what_is_not_an_elf_image_is_said() {
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\n"), None);
        let mut cut = elf(&[1, PT_INTERP]);
        cut.truncate(64 + 56 + 2);
        assert_eq!(elf_has_interpreter(&cut), None, "a header cut short");
        let mut big_endian = elf(&[PT_INTERP]);
        big_endian[5] = 2;
        assert_eq!(elf_has_interpreter(&big_endian), None);
    }

    #[test]
    fn the_systems_own_binaries_are_told_apart() {
        // Debian's coreutils are dynamically linked; the test needs nothing else.
        assert!(has_interpreter(Path::new("/bin/true")).expect("/bin/true"));
    }
}
