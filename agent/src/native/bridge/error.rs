//! How a bridge invocation fails, and the CNI code the runtime gets for it.

use super::config::ConfigError;
use crate::native::error::{native_error_from, NativeError};

/// A failure of the bridge plugin, before it becomes a
/// [`DelegateError`](crate::delegate::DelegateError): the variants every native type has, with
/// the bridge config's errors and CHECK's mismatches.
pub type BridgeError = NativeError<ConfigError, Mismatch>;

native_error_from!(ConfigError, Mismatch);

/// How the attachment CHECK looked at differs from what the ADD made, in the reference's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("Interface name {0} not found")]
    Missing(String),

    #[error("Interface {0} does not have link type of bridge")]
    NotBridge(String),

    #[error("Bridge interface {name} Mac doesn't match: {wanted}")]
    BridgeMac { name: String, wanted: String },

    #[error("Bridge interface {name} configured Promisc Mode {wanted} doesn't match current state: {found}")]
    Promisc { name: String, wanted: bool, found: bool },

    #[error("Sandbox in prevResult {found} doesn't match configured netns: {wanted}")]
    Sandbox { found: String, wanted: String },

    #[error("Error: Container interface {0} not of type veth")]
    NotVeth(String),

    #[error("Interface {name} Mac {wanted} doesn't match container Mac: {found}")]
    PodMac { name: String, wanted: String, found: String },

    #[error("Interface {name} Mac doesn't match: {wanted} not found")]
    HostMac { name: String, wanted: String },

    #[error("CNI created bridge {0} in host namespace was not found")]
    NoBridge(String),

    #[error("CNI veth created for bridge {0} was not found")]
    NoHostVeth(String),
}
