//! CNI protocol types: errors, network configuration, results of every version.

pub mod config;
pub mod error;
pub mod result;

pub use error::{CniError, ErrorCode};
pub use plexus_cni_shim::{CURRENT_VERSION, SUPPORTED_VERSIONS};
