//! CNI protocol types: errors, network configuration, results of every version.

pub mod attachment;
pub mod command;
pub mod config;
pub mod error;
pub mod json;
pub mod result;

pub use attachment::AttachmentKey;
pub use command::Command;
pub use error::{CniCode, CniError, ErrorCode};
pub use plexus_cni_shim::{CURRENT_VERSION, SUPPORTED_VERSIONS};
