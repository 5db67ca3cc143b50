//! The CNI device-info files (Device Information Specification, section 4.2): one per
//! attachment, `<root>/cni/<container ID>-<CNI_IFNAME>-device.json`, unique because the
//! runtime's container ID and the interface name identify the attachment (CNI's own key for
//! it). The `cni/` directory is created when missing (section 4.2.1).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::format::{check, NotDeviceInfo};
use crate::cni::{CniCode, ErrorCode};

/// Why a device-info file cannot be written, read or removed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceInfoFileError {
    #[error("device-info file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("device-info file {path} is not device information: {reason}")]
    Invalid { path: PathBuf, reason: NotDeviceInfo },
    #[error("device-info file {path} is not JSON: {source}")]
    NotJson { path: PathBuf, source: serde_json::Error },
}

impl CniCode for DeviceInfoFileError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::IoFailure
    }
}

/// The file of the attachment (`container_id`, `ifname`) under the device-info root. Both
/// are validated before they get here (a container ID and a kernel interface name contain no
/// '/'); a '/' that slipped through would only make the name longer, never leave `cni/`.
pub fn cni_file(root: &Path, container_id: &str, ifname: &str) -> PathBuf {
    let safe = |s: &str| s.replace('/', "_");
    root.join("cni").join(format!("{}-{}-device.json", safe(container_id), safe(ifname)))
}

/// Writes `info` to `path` atomically (a temporary file renamed over it), creating the
/// directory when missing.
pub fn write(path: &Path, info: &Value) -> Result<(), DeviceInfoFileError> {
    let io = |source| DeviceInfoFileError::Io { path: path.to_owned(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(info).map_err(|e| io(std::io::Error::other(e)))?;
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The device information in `path`; `None` when there is no file.
pub fn read(path: &Path) -> Result<Option<Value>, DeviceInfoFileError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(DeviceInfoFileError::Io { path: path.to_owned(), source }),
    };
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|source| DeviceInfoFileError::NotJson { path: path.to_owned(), source })?;
    check(&value).map_err(|reason| DeviceInfoFileError::Invalid { path: path.to_owned(), reason })?;
    Ok(Some(value))
}

/// Removes the file; one already gone is fine.
pub fn remove(path: &Path) -> Result<(), DeviceInfoFileError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(DeviceInfoFileError::Io { path: path.to_owned(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devinfo::format::pci;

    #[test]
    fn the_name_is_unique_per_attachment_and_stays_in_cni() {
        let root = Path::new("/var/run/k8s.cni.cncf.io/devinfo");
        assert_eq!(
            cni_file(root, "0123abcd", "net1"),
            Path::new("/var/run/k8s.cni.cncf.io/devinfo/cni/0123abcd-net1-device.json")
        );
        assert_ne!(cni_file(root, "0123abcd", "net1"), cni_file(root, "0123abcd", "net2"));
        assert_ne!(cni_file(root, "0123abcd", "net1"), cni_file(root, "0123abce", "net1"));
        assert_eq!(cni_file(root, "../x", "a/b").parent(), Some(root.join("cni").as_path()));
    }

    #[test]
    fn written_read_back_and_removed_with_the_directory_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = cni_file(dir.path(), "c1", "net1");
        assert_eq!(read(&path).unwrap(), None, "no file yet");
        let info = pci("0000:01:02.2", Some("0000:01:02.0"), None);
        write(&path, &info).unwrap();
        assert_eq!(read(&path).unwrap(), Some(info));
        assert_eq!(std::fs::read_dir(dir.path().join("cni")).unwrap().count(), 1, "no temporary left");
        remove(&path).unwrap();
        assert!(!path.exists());
        remove(&path).unwrap();
    }

    #[test]
    fn a_file_that_is_not_device_information_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, "{").unwrap();
        let err = read(&path).unwrap_err();
        assert!(matches!(err, DeviceInfoFileError::NotJson { .. }), "{err}");
        std::fs::write(&path, r#"{"type":"pci"}"#).unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()) && err.contains("no \"version\""), "{err}");
    }
}
