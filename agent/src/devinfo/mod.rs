//! Device information (NPWG Device Information Specification 1.1.0): the `device-info` map
//! that describes the device behind an attachment, and the CNI device-info files that carry it
//! between plexus and the plugins it runs (section 4.2).
//!
//! - [`format`]: the map itself (section 3), built from what is known of a device;
//! - [`file`]: the per-attachment file `<root>/cni/<unique name>`, written, read and removed;
//! - [`attachment`]: that file through an attachment's life, as the engine drives it;
//! - [`dp`]: the device plugin's own file for an allocated device (section 4.1).
//!
//! The engine passes each attachment's file path as the `CNIDeviceInfoFile` runtimeConfig
//! capability (section 5.1), writes the file before the ADD when it already knows the device
//! (a device plugin's file), reads it back after the ADD (section 6.1.1: a plugin may have
//! written or updated it) into the record's `device_info` and the network-status entry's
//! `device-info`, and removes it on DEL (section 4.2.1).

pub mod attachment;
pub mod dp;
pub mod file;
pub mod format;

/// The runtimeConfig capability carrying an attachment's device-info file path (section 5.1).
pub const CAPABILITY: &str = "CNIDeviceInfoFile";
