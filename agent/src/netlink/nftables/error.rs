//! A request nf_tables refused, or a socket that failed, naming what was being done.

use nix::errno::Errno;

use crate::cni::{CniCode, ErrorCode};

/// Reads as "creating chain inet plexus masq-1a2b in the agent's network namespace: Operation
/// not supported (os error 95)". Keeps the kernel's errno for callers to branch on.
#[derive(Debug, thiserror::Error)]
#[error("nftables: {action} in the agent's network namespace: {source}")]
pub struct NftError {
    /// What was being done, e.g. "creating chain inet plexus masq-1a2b".
    pub action: String,
    pub errno: Option<Errno>,
    #[source]
    pub source: std::io::Error,
}

impl NftError {
    pub(super) fn errno(action: impl Into<String>, errno: Errno) -> NftError {
        NftError { action: action.into(), errno: Some(errno), source: std::io::Error::from(errno) }
    }

    pub(super) fn io(action: impl Into<String>, source: std::io::Error) -> NftError {
        let errno = source.raw_os_error().map(Errno::from_raw);
        NftError { action: action.into(), errno, source }
    }

    /// An answer the layer could not read.
    pub(super) fn garbled(action: impl Into<String>, what: &str) -> NftError {
        NftError {
            action: action.into(),
            errno: None,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
        }
    }

    pub fn is(&self, errno: Errno) -> bool {
        self.errno == Some(errno)
    }
}

/// A failure of the node rather than of the request: libcni's "internal" code, as for netlink.
impl CniCode for NftError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::Internal
    }
}
