//! What native IPAM reports, and the CNI code each failure reaches the runtime with: 7 for a
//! config that must be fixed (the message says how), 4 for bad CNI variables (CNI_ARGS
//! included), 1 for a cniVersion results cannot be written in, 5 for I/O, 11 when
//! host-local's lock stays held, and 999, the reference plugins' own code, with the
//! reference's message, for what the reference allocator refuses (range exhausted, address
//! taken, duplicate ADD).

use std::io;
use std::time::Duration;

use super::cni_args::ArgsError;
use super::host_local::allocator::AllocError;
use super::host_local::config::InvalidRange;
use super::host_local::store::StoreError;
use crate::cni::{CniCode, ErrorCode};

/// A native IPAM failure, before the parent plugin reports it as its own.
#[derive(Debug, thiserror::Error)]
pub enum IpamError {
    /// The config asks for something impossible; the message says what to change.
    #[error("{0}")]
    Config(String),
    /// A CNI variable is missing or malformed.
    #[error("{0}")]
    Environment(String),
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error("invalid range set {set}: {source}")]
    Range { set: usize, source: InvalidRange },
    /// The config's cniVersion is one plexus cannot write results in.
    #[error("{0}")]
    Version(String),
    /// What the reference plugin refuses, with its message.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Another process held host-local's lock past the timeout.
    #[error("host-local: {source} for more than {timeout:?}; try again")]
    Locked { source: StoreError, timeout: Duration },
    #[error("host-local: {0}")]
    Store(#[source] StoreError),
    #[error("host-local: the file worker failed: {0}")]
    Worker(#[from] tokio::task::JoinError),
}

impl IpamError {
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        IpamError::Config(msg.into())
    }

    pub fn invalid_env(msg: impl Into<String>) -> Self {
        IpamError::Environment(msg.into())
    }

    /// What the reference plugin refuses, with its message.
    pub fn reference(msg: impl Into<String>) -> Self {
        IpamError::Refused(msg.into())
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        IpamError::Io { context: context.into(), source }
    }
}

impl CniCode for IpamError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            IpamError::Config(_) | IpamError::Range { .. } => ErrorCode::InvalidNetworkConfig,
            IpamError::Environment(_) | IpamError::Args(_) => ErrorCode::InvalidEnvironment,
            IpamError::Version(_) => ErrorCode::IncompatibleVersion,
            // The code the reference plugins give every error they raise themselves
            // (libcni's ErrInternal), kept so callers see what the reference plugin answers.
            IpamError::Refused(_) => ErrorCode::Internal,
            IpamError::Alloc(e) => e.cni_code(),
            IpamError::Io { .. } | IpamError::Store(_) | IpamError::Worker(_) => ErrorCode::IoFailure,
            IpamError::Locked { .. } => ErrorCode::TryAgainLater,
        }
    }
}
