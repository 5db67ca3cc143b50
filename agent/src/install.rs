//! `plexus-agent install-shim`: puts the `plexus` CNI binary into the node's CNI bin
//! directory, as the DaemonSet's init container does.
//!
//! The runtime may be executing the old binary at that moment. Writing over it in place
//! would fail (ETXTBSY) or hand a half-written file to the next exec, so the new binary is
//! written to a temporary file in the same directory, synced, made executable, and renamed
//! over the old name: each exec sees either the whole old file or the whole new one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("reading the shim {path}: {source}")]
    Source { path: PathBuf, source: std::io::Error },
    #[error("the shim {0} is not a regular file")]
    NotAFile(PathBuf),
    #[error("installing into {path}: {source}")]
    Target { path: PathBuf, source: std::io::Error },
}

/// What [`install_shim`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// The binary at the path was written (new or replaced).
    Written(PathBuf),
    /// The binary at the path already had the same content: left alone.
    Unchanged(PathBuf),
}

/// Installs `from` as `<to_dir>/<name>` atomically (see the module docs).
pub fn install_shim(from: &Path, to_dir: &Path, name: &str) -> Result<Installed, InstallError> {
    let source_err = |source| InstallError::Source { path: from.to_owned(), source };
    let meta = std::fs::metadata(from).map_err(source_err)?;
    if !meta.is_file() {
        return Err(InstallError::NotAFile(from.to_owned()));
    }
    let content = std::fs::read(from).map_err(source_err)?;
    let target = to_dir.join(name);
    let target_err = |path: &Path, source| InstallError::Target { path: path.to_owned(), source };
    std::fs::create_dir_all(to_dir).map_err(|e| target_err(to_dir, e))?;
    if std::fs::read(&target).is_ok_and(|old| old == content) {
        let mode = std::fs::metadata(&target).map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o111 != 0 {
            return Ok(Installed::Unchanged(target));
        }
    }
    // Dot-prefixed so no runtime takes it for a plugin; the pid keeps two installers apart.
    let tmp = to_dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = write_synced(&tmp, &content).and_then(|()| std::fs::rename(&tmp, &target));
    if let Err(e) = written {
        // The write's error is the one to report; a leftover is dot-prefixed, so no runtime
        // runs it, and the warning names it.
        if let Err(r) = std::fs::remove_file(&tmp) {
            if r.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %tmp.display(), "removing the unfinished copy: {r}");
            }
        }
        return Err(target_err(&target, e));
    }
    // The rename is durable once the directory is synced.
    File::open(to_dir).and_then(|d| d.sync_all()).map_err(|e| target_err(to_dir, e))?;
    Ok(Installed::Written(target))
}

fn write_synced(path: &Path, content: &[u8]) -> std::io::Result<()> {
    // A leftover of an earlier run with the same pid; usually there is none (NotFound), and
    // any other failure to remove it makes the exclusive create below fail and say why.
    let _ = std::fs::remove_file(path);
    let mut f = OpenOptions::new().write(true).create_new(true).mode(0o755).open(path)?;
    f.write_all(content)?;
    // The mode given at creation is filtered by the umask; the shim must be executable.
    f.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn installs_executable_and_replaces_by_rename() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("plexus-new");
        let bin = d.path().join("bin");
        std::fs::write(&src, b"old binary").unwrap();
        assert_eq!(install_shim(&src, &bin, "plexus").unwrap(), Installed::Written(bin.join("plexus")));
        let installed = bin.join("plexus");
        assert_eq!(std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777, 0o755);

        // The runtime has the old binary open (as an exec would): it must keep reading the
        // whole old file, never a mix, so the new one must be a new inode.
        let mut running = File::open(&installed).unwrap();
        let old_ino = std::fs::metadata(&installed).unwrap().ino();
        std::fs::write(&src, b"new binary, longer than the old one").unwrap();
        assert!(matches!(install_shim(&src, &bin, "plexus").unwrap(), Installed::Written(_)));
        assert_ne!(std::fs::metadata(&installed).unwrap().ino(), old_ino);
        let mut seen = String::new();
        running.read_to_string(&mut seen).unwrap();
        assert_eq!(seen, "old binary");
        assert_eq!(std::fs::read(&installed).unwrap(), b"new binary, longer than the old one");
        assert_eq!(names(&bin), ["plexus"], "no temporary file is left behind");
    }

    #[test]
    fn the_same_binary_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("plexus");
        std::fs::write(&src, b"bin").unwrap();
        let bin = d.path().join("bin");
        install_shim(&src, &bin, "plexus").unwrap();
        let ino = std::fs::metadata(bin.join("plexus")).unwrap().ino();
        assert_eq!(install_shim(&src, &bin, "plexus").unwrap(), Installed::Unchanged(bin.join("plexus")));
        assert_eq!(std::fs::metadata(bin.join("plexus")).unwrap().ino(), ino);
    }

    #[test]
    fn errors_name_the_path() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("missing");
        let e = install_shim(&missing, d.path(), "plexus").unwrap_err();
        assert!(e.to_string().contains(&missing.display().to_string()), "{e}");
        assert!(matches!(install_shim(d.path(), d.path(), "plexus"), Err(InstallError::NotAFile(_))));
        // A target directory that cannot exist (a file is in the way).
        let file = d.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        std::fs::write(d.path().join("src"), b"x").unwrap();
        let e = install_shim(&d.path().join("src"), &file.join("bin"), "plexus").unwrap_err();
        assert!(matches!(e, InstallError::Target { .. }), "{e}");
    }
}
