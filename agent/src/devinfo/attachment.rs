//! An attachment's CNI device-info file (section 4.2), as the engine uses it: offered to its
//! plugins, written before the ADD when the device is known already, read back after it into
//! the record, and removed with the attachment.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::file::DeviceInfoFileError;
use crate::cni::{CniCode, CniError};
use crate::devinfo;
use crate::state::AttachmentRecord;

/// The file of the container's attachment on `ifname` under the device-info root.
pub fn file_of(root: &Path, container_id: &str, ifname: &str) -> PathBuf {
    devinfo::file::cni_file(root, container_id, ifname)
}

/// Sets the `CNIDeviceInfoFile` runtimeConfig of the attachment to its file (section 5.1.1):
/// each plugin that declares the capability (or honours it natively) gets it.
pub fn offer(attachment: &mut AttachmentRecord, file: &Path) {
    attachment
        .delegate
        .runtime_config
        .insert(devinfo::CAPABILITY.to_owned(), json!(file.display().to_string()));
}

/// Before the attachment's ADD: the device information known already (a device plugin's) is
/// written to its file, for the plugins to read (section 4.2.1).
pub async fn before_add(attachment: &AttachmentRecord, file: &Path) -> Result<(), CniError> {
    let Some(info) = attachment.device_info.clone() else { return Ok(()) };
    let path = file.to_owned();
    blocking(move || devinfo::file::write(&path, &info)).await.map_err(|e| {
        CniError::new(e.cni_code(), format!("attachment {}: {e}", attachment.network))
            .with_details(attachment.network.clone())
    })
}

/// After a successful ADD: what the file holds is the attachment's device information
/// (section 6.1.1), whether a plugin wrote it, updated it, or left the engine's copy. A file
/// that is not device information is reported and left out of the status.
pub async fn after_add(attachment: &mut AttachmentRecord, file: &Path) {
    let path = file.to_owned();
    match blocking(move || devinfo::file::read(&path)).await {
        Ok(Some(info)) => attachment.device_info = Some(info),
        Ok(None) => {}
        Err(e) => tracing::warn!(network = %attachment.network, "ignoring the device information: {e}"),
    }
}

/// Once the attachment is gone: its file goes too (section 4.2.1). A file that cannot be
/// removed is reported; it is the attachment's alone and harms nothing else.
pub async fn remove(attachment: &AttachmentRecord, file: &Path) {
    let path = file.to_owned();
    if let Err(e) = blocking(move || devinfo::file::remove(&path)).await {
        tracing::warn!(network = %attachment.network, "removing the device-info file: {e}");
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DeviceInfoFileError> + Send + 'static,
) -> Result<T, DeviceInfoFileError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(e) => Err(DeviceInfoFileError::Io { path: PathBuf::new(), source: std::io::Error::other(e) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::config::NetworkConfigList;
    use crate::spec::delegate_conf::DelegateConfig;

    fn attachment(network: &str, ifname: &str) -> AttachmentRecord {
        let list = NetworkConfigList::parse(
            &json!({"cniVersion": "1.0.0", "name": network, "type": "sriov"}).to_string(),
            None,
        )
        .unwrap();
        AttachmentRecord {
            network: network.into(),
            is_default: false,
            ifname: ifname.into(),
            delegate: DelegateConfig { list, runtime_config: Default::default() },
            result: None,
            default_route: None,
            pod_network: None,
            device: None,
            device_info: None,
            ipam_claim: None,
            selection: None,
            live_pending: false,
        }
    }

    /// Device information known before the ADD (a device plugin's) reaches the file first, what
    /// the file holds after the ADD is the record's, and the file goes with the attachment.
    #[tokio::test]
    async fn known_information_is_written_first_read_back_after_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let file = file_of(dir.path(), "c1", "net1");
        let mut a = attachment("ns/sriov", "net1");
        offer(&mut a, &file);
        assert_eq!(a.delegate.runtime_config[devinfo::CAPABILITY], json!(file.display().to_string()));

        before_add(&a, &file).await.unwrap();
        assert!(!file.exists(), "nothing known: no file");
        let known = devinfo::format::pci("0000:18:02.5", Some("0000:18:00.0"), None);
        a.device_info = Some(known.clone());
        before_add(&a, &file).await.unwrap();
        assert_eq!(devinfo::file::read(&file).unwrap(), Some(known));

        // A plugin updated it during the ADD: the update is the attachment's.
        let updated = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:02.5", "rdma-device": "mlx5_3"}});
        devinfo::file::write(&file, &updated).unwrap();
        after_add(&mut a, &file).await;
        assert_eq!(a.device_info, Some(updated.clone()));
        // A file that is not device information is left out; the last known stays.
        std::fs::write(&file, r#"{"pci": {}}"#).unwrap();
        after_add(&mut a, &file).await;
        assert_eq!(a.device_info, Some(updated));

        remove(&a, &file).await;
        assert!(!file.exists());
        remove(&a, &file).await;
    }
}
