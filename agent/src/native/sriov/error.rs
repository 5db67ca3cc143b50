//! What can go wrong, and the CNI error code each failure reaches the runtime with.

use crate::cni::{CniCode, Command, ErrorCode};
use crate::delegate::native::native_error;
use crate::delegate::DelegateError;
use crate::native::link::LinkError;

/// A failure of the sriov type. Every message names the VF (PCI address) or the setting involved.
#[derive(Debug, thiserror::Error)]
pub enum SriovError {
    /// The network config is wrong; the message says which key and what it accepts.
    #[error("invalid sriov config: {0}")]
    Config(String),

    /// A CNI variable the command needs is missing.
    #[error("{0}")]
    Environment(String),

    /// The VF cannot be found or understood in sysfs.
    #[error("SR-IOV device {pci}: {detail}")]
    Device { pci: String, detail: String },

    /// Another attachment holds the VF.
    #[error("VF {pci} is in use by {holder}; each VF can be attached to one pod at a time")]
    Busy { pci: String, holder: String },

    /// Another agent (or a hung request) held the VF's lock for too long.
    #[error("VF {pci} is locked by another operation (lock file {lock}); try again later")]
    LockTimeout { pci: String, lock: String },

    /// The VF's record under the state directory cannot be read or written.
    #[error("sriov state {path}: {detail}")]
    State { path: String, detail: String },

    /// The kernel refused a netlink request, or the socket failed.
    #[error("{what}: {detail}")]
    Netlink { what: String, detail: String },

    /// IPAM failed; its own error (and code) is passed through. Boxed: it is by far the largest.
    #[error(transparent)]
    Ipam(Box<DelegateError>),

    /// Undoing an attachment (partly) failed. While the VF is not restored its record stays,
    /// so a DEL retry can finish the job.
    #[error("{context}; undoing the attachment of VF {pci} failed: {}", errors.join("; "))]
    Restore { pci: String, context: String, errors: Vec<String> },
}

impl SriovError {
    pub fn ipam(e: DelegateError) -> SriovError {
        SriovError::Ipam(Box::new(e))
    }

    /// The CNI error code, following the reference plugins: 7 for configs, 4 for the environment,
    /// 5 for local files, 11 when retrying later can succeed, and 999 (libcni's "internal", what
    /// sriov-cni's binary answers) for everything the kernel refused.
    pub fn code(&self) -> u32 {
        match self {
            SriovError::Config(_) | SriovError::Device { .. } => ErrorCode::InvalidNetworkConfig.code(),
            SriovError::Environment(_) => ErrorCode::InvalidEnvironment.code(),
            SriovError::Busy { .. } | SriovError::LockTimeout { .. } => ErrorCode::TryAgainLater.code(),
            SriovError::State { .. } => ErrorCode::IoFailure.code(),
            SriovError::Ipam(e) => e.cni_code().code(),
            SriovError::Netlink { .. } | SriovError::Restore { .. } => 999,
        }
    }

    /// The error as the delegate layer reports it, as if the sriov binary had printed it.
    pub fn into_delegate(self, command: Command) -> DelegateError {
        match self {
            SriovError::Ipam(e) => *e,
            other => native_error("sriov", command, ErrorCode::Delegate(other.code()), other.to_string()),
        }
    }
}

impl From<LinkError> for SriovError {
    fn from(e: LinkError) -> Self {
        SriovError::Netlink { what: format!("{} in {}", e.action, e.place), detail: e.cause }
    }
}
