//! The engine's side of the Device Information Specification: each attachment's CNI
//! device-info file (section 4.2) offered to its plugins, written before the ADD when the
//! device is known already, read back after it into the record, and removed with the
//! attachment.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cni::{CniCode, CniError};
use crate::devinfo::{self, file::DeviceInfoFileError};
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
