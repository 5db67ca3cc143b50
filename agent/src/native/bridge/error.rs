//! How a bridge invocation fails, and the CNI code the runtime gets for it.

use super::config::ConfigError;
use crate::cni::{CniCode, Command, ErrorCode};
use crate::delegate::DelegateError;
use crate::netlink::{LinkError, NamespaceError};

/// A failure of the bridge plugin, before it becomes a [`DelegateError`].
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// A CNI error of the plugin's own.
    #[error("{msg}")]
    Cni { code: ErrorCode, msg: String },

    /// The config or the pod's arguments ask for something impossible (code 7).
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// A link operation failed (libcni's "internal" code).
    #[error(transparent)]
    Link(#[from] LinkError),

    /// CHECK found the attachment other than the ADD made it.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),

    /// Passed through as it came (IPAM's errors, the reference binary's); boxed because it is
    /// large and failures travel through every `?`.
    #[error(transparent)]
    Delegate(Box<DelegateError>),
}

/// A pod's namespace could not be entered to open a socket there.
impl From<NamespaceError> for BridgeError {
    fn from(e: NamespaceError) -> BridgeError {
        BridgeError::Link(e.into())
    }
}

impl CniCode for BridgeError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            BridgeError::Cni { code, .. } => *code,
            BridgeError::Config(e) => e.cni_code(),
            BridgeError::Link(e) => e.cni_code(),
            BridgeError::Mismatch(_) => ErrorCode::Internal,
            BridgeError::Delegate(e) => e.cni_code(),
        }
    }
}

impl BridgeError {
    pub(super) fn new(code: ErrorCode, msg: impl Into<String>) -> BridgeError {
        BridgeError::Cni { code, msg: msg.into() }
    }

    /// The config asks for something impossible: code 7, with what to change.
    pub(super) fn config(msg: impl Into<String>) -> BridgeError {
        BridgeError::new(ErrorCode::InvalidNetworkConfig, msg)
    }

    pub(super) fn delegate(e: DelegateError) -> BridgeError {
        BridgeError::Delegate(Box::new(e))
    }

    pub(super) fn internal_msg(msg: impl Into<String>) -> BridgeError {
        BridgeError::new(ErrorCode::Internal, msg)
    }

    /// The error as the delegate layer reports it, as if the bridge binary had printed it.
    pub(super) fn into_delegate_error(self, plugin: &str, command: Command) -> DelegateError {
        match self {
            BridgeError::Delegate(e) => *e,
            other => DelegateError::native(plugin, command, other),
        }
    }
}

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
