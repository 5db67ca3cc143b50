//! How a macvlan invocation fails, and the CNI code the runtime gets for it.

use super::config::ConfigError;
use crate::native::error::{native_error_from, NativeError};

/// A failure of the macvlan plugin, before it becomes a
/// [`DelegateError`](crate::delegate::DelegateError): the variants every native type has, with
/// the macvlan config's errors and CHECK's mismatches.
pub type MacvlanError = NativeError<ConfigError, LinkMismatch>;

native_error_from!(ConfigError, LinkMismatch);

/// How the link CHECK looked at differs from what the ADD made, in the reference's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkMismatch {
    #[error("container interface {name} is not of type macvlan but {kind}")]
    NotMacvlan { name: String, kind: String },

    #[error("container macvlan mode {found} does not match expected value: {wanted}")]
    Mode { found: String, wanted: String },

    #[error("container macvlan {name} is not on master {master}")]
    Master { name: String, master: String },

    #[error("container macvlan {name} has MTU {found} instead of the configured {wanted}")]
    Mtu { name: String, found: String, wanted: u32 },

    #[error("interface {name} Mac {wanted} doesn't match container Mac: {found}")]
    Mac { name: String, wanted: String, found: String },
}
