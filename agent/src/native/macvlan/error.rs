//! How a macvlan invocation fails, and the CNI code the runtime gets for it.

use super::config::ConfigError;
use crate::cni::{CniCode, Command, ErrorCode};
use crate::delegate::DelegateError;
use crate::netlink::{LinkError, NamespaceError};

/// A failure of the macvlan plugin, before it becomes a [`DelegateError`].
#[derive(Debug, thiserror::Error)]
pub enum MacvlanError {
    /// A CNI error of the plugin's own.
    #[error("{msg}")]
    Cni { code: ErrorCode, msg: String },

    /// The config or the pod's arguments ask for something impossible (code 7).
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// A link operation failed (libcni's "internal" code).
    #[error(transparent)]
    Link(#[from] LinkError),

    /// CHECK found the link other than the ADD made it.
    #[error(transparent)]
    Mismatch(#[from] LinkMismatch),

    /// Passed through as it came (IPAM's errors keep their plugin, code and details); boxed
    /// because it is large and failures travel through every `?`.
    #[error(transparent)]
    Delegate(Box<DelegateError>),
}

/// A pod's namespace could not be entered to open a socket there.
impl From<NamespaceError> for MacvlanError {
    fn from(e: NamespaceError) -> MacvlanError {
        MacvlanError::Link(e.into())
    }
}

impl CniCode for MacvlanError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            MacvlanError::Cni { code, .. } => *code,
            MacvlanError::Config(e) => e.cni_code(),
            MacvlanError::Link(e) => e.cni_code(),
            MacvlanError::Mismatch(_) => ErrorCode::Internal,
            MacvlanError::Delegate(e) => e.cni_code(),
        }
    }
}

impl MacvlanError {
    pub(super) fn new(code: ErrorCode, msg: impl Into<String>) -> MacvlanError {
        MacvlanError::Cni { code, msg: msg.into() }
    }

    /// The config asks for something impossible: code 7, with what to change.
    pub(super) fn config(msg: impl Into<String>) -> MacvlanError {
        MacvlanError::new(ErrorCode::InvalidNetworkConfig, msg)
    }

    pub(super) fn delegate(e: DelegateError) -> MacvlanError {
        MacvlanError::Delegate(Box::new(e))
    }

    pub(super) fn internal_msg(msg: impl Into<String>) -> MacvlanError {
        MacvlanError::new(ErrorCode::Internal, msg)
    }

    /// The error as the delegate layer reports it, as if the macvlan binary had printed it.
    pub(super) fn into_delegate_error(self, plugin: &str, command: Command) -> DelegateError {
        match self {
            MacvlanError::Delegate(e) => *e,
            other => DelegateError::native(plugin, command, other),
        }
    }
}

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
