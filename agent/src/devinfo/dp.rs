//! The device plugin's device information file (Device Information Specification 4.1):
//! `<device_info_dir>/dp/<resourceName with '/' replaced by '-'>-<deviceID>-device.json`. When
//! the plugin wrote one for the allocated device, its content is the attachment's device
//! information (4.2.1: the NPWG implementation copies it into the CNI device-info file).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cni::{CniCode, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum DeviceInfoError {
    #[error("reading the device plugin's device-info file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "the device plugin's device-info file {} is not a JSON object ({reason}); the device plugin wrote it: \
         fix or restart the device plugin",
        path.display()
    )]
    Invalid { path: PathBuf, reason: String },
}

impl CniCode for DeviceInfoError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            DeviceInfoError::Read { .. } => ErrorCode::IoFailure,
            DeviceInfoError::Invalid { .. } => ErrorCode::DecodeFailure,
        }
    }
}

/// The file's path, or `None` when the device ID cannot be part of a file name (a '/' or NUL in
/// it would leave the directory).
pub fn dp_file(device_info_dir: &Path, resource_name: &str, device_id: &str) -> Option<PathBuf> {
    if device_id.is_empty() || device_id.contains(['/', '\0']) || resource_name.contains('\0') {
        return None;
    }
    let resource = resource_name.replace('/', "-");
    Some(device_info_dir.join("dp").join(format!("{resource}-{device_id}-device.json")))
}

/// The device plugin's device information of the device, `None` when it wrote none.
pub fn read_dp_device_info(
    device_info_dir: &Path,
    resource_name: &str,
    device_id: &str,
) -> Result<Option<Value>, DeviceInfoError> {
    let Some(path) = dp_file(device_info_dir, resource_name, device_id) else { return Ok(None) };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(DeviceInfoError::Read { path, source }),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(other) => Err(DeviceInfoError::Invalid { path, reason: format!("found {other}") }),
        Err(e) => Err(DeviceInfoError::Invalid { path, reason: e.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_file_name_is_the_specs() {
        let dir = Path::new("/var/run/k8s.cni.cncf.io/devinfo");
        assert_eq!(
            dp_file(dir, "intel.com/sriov_netdevice", "0000:81:02.3").unwrap(),
            Path::new(
                "/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-sriov_netdevice-0000:81:02.3-device.json"
            )
        );
        assert_eq!(dp_file(dir, "a/b/c", "x").unwrap().file_name().unwrap(), "a-b-c-x-device.json");
        assert_eq!(dp_file(dir, "vf", "../../etc"), None, "a device ID cannot leave the directory");
        assert_eq!(dp_file(dir, "vf", ""), None);
    }

    #[test]
    fn reads_the_plugins_file_and_tells_absent_from_broken() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_dp_device_info(dir.path(), "intel.com/vf", "0000:81:02.3").unwrap().is_none());
        std::fs::create_dir_all(dir.path().join("dp")).unwrap();
        let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:81:02.3"}});
        let path = dir.path().join("dp/intel.com-vf-0000:81:02.3-device.json");
        std::fs::write(&path, info.to_string()).unwrap();
        assert_eq!(read_dp_device_info(dir.path(), "intel.com/vf", "0000:81:02.3").unwrap(), Some(info));
        std::fs::write(&path, "[1]").unwrap();
        let err = read_dp_device_info(dir.path(), "intel.com/vf", "0000:81:02.3").unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::DecodeFailure);
        assert!(err.to_string().contains("device plugin"), "{err}");
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            read_dp_device_info(dir.path(), "intel.com/vf", "0000:81:02.3").unwrap_err(),
            DeviceInfoError::Invalid { .. }
        ));
    }
}
