//! How a native type's invocation fails, and the CNI code the runtime gets for it: the
//! variants every type has, with the type's own config error (`C`) and the way its CHECK finds
//! an attachment changed (`M`) plugged in.

use crate::cni::{CniCode, ErrorCode};
use crate::delegate::native::CniFailure;
use crate::delegate::DelegateError;
use crate::native::invocation::NativeFailure;
use crate::netlink::{LinkError, NamespaceError};

/// A failure of a native type, before it becomes a [`DelegateError`].
#[derive(Debug, thiserror::Error)]
pub enum NativeError<C, M> {
    /// A CNI error of the plugin's own.
    #[error(transparent)]
    Cni(#[from] CniFailure),

    /// The config or the pod's arguments ask for something impossible (code 7).
    #[error(transparent)]
    Config(C),

    /// A link operation failed (libcni's "internal" code).
    #[error(transparent)]
    Link(#[from] LinkError),

    /// CHECK found the attachment other than the ADD made it.
    #[error(transparent)]
    Mismatch(M),

    /// Passed through as it came (IPAM's errors keep their plugin, code and details; the
    /// reference binary's); boxed because it is large and failures travel through every `?`.
    #[error(transparent)]
    Delegate(Box<DelegateError>),
}

/// A pod's namespace could not be entered to open a socket there.
impl<C, M> From<NamespaceError> for NativeError<C, M> {
    fn from(e: NamespaceError) -> NativeError<C, M> {
        NativeError::Link(e.into())
    }
}

impl<C, M> CniCode for NativeError<C, M>
where
    C: std::error::Error + 'static,
    M: std::error::Error + 'static,
{
    fn cni_code(&self) -> ErrorCode {
        match self {
            NativeError::Cni(e) => e.cni_code(),
            NativeError::Config(_) => ErrorCode::InvalidNetworkConfig,
            NativeError::Link(e) => e.cni_code(),
            NativeError::Mismatch(_) => ErrorCode::Internal,
            NativeError::Delegate(e) => e.cni_code(),
        }
    }
}

impl<C, M> NativeFailure for NativeError<C, M>
where
    C: std::error::Error + Send + Sync + 'static,
    M: std::error::Error + Send + Sync + 'static,
{
    fn passed_through(self) -> Result<DelegateError, Self> {
        match self {
            NativeError::Delegate(e) => Ok(*e),
            other => Err(other),
        }
    }
}

impl<C, M> NativeError<C, M> {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> NativeError<C, M> {
        NativeError::Cni(CniFailure::new(code, msg))
    }

    /// The config asks for something impossible: code 7, with what to change.
    pub fn config(msg: impl Into<String>) -> NativeError<C, M> {
        NativeError::new(ErrorCode::InvalidNetworkConfig, msg)
    }

    pub fn delegate(e: DelegateError) -> NativeError<C, M> {
        NativeError::Delegate(Box::new(e))
    }

    pub fn internal_msg(msg: impl Into<String>) -> NativeError<C, M> {
        NativeError::new(ErrorCode::Internal, msg)
    }
}

/// Lets `?` turn a type's config error and CHECK mismatch into its [`NativeError`] (the
/// impls cannot be generic: `C` could be any of the other variants' types).
macro_rules! native_error_from {
    ($config:ty, $mismatch:ty) => {
        impl From<$config> for $crate::native::error::NativeError<$config, $mismatch> {
            fn from(e: $config) -> Self {
                $crate::native::error::NativeError::Config(e)
            }
        }

        impl From<$mismatch> for $crate::native::error::NativeError<$config, $mismatch> {
            fn from(e: $mismatch) -> Self {
                $crate::native::error::NativeError::Mismatch(e)
            }
        }
    };
}
pub(crate) use native_error_from;
