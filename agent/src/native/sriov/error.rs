//! What can go wrong, and the CNI error code each failure reaches the runtime with.

use crate::cni::{CniCode, ErrorCode};
use crate::delegate::DelegateError;
use crate::native::invocation::NativeFailure;
use crate::netlink::{LinkError, MacError, NamespaceError};

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

    /// The VF's record (or its lock) under the state directory cannot be read or written.
    #[error("sriov state {path}: {cause}")]
    State { path: String, cause: StateCause },

    /// A netlink request found nothing to work on ("no such interface"), or several failed.
    #[error("{what}: {detail}")]
    Netlink { what: String, detail: String },

    /// A link operation failed, in the words of the netlink layer.
    #[error(transparent)]
    Link(#[from] LinkError),

    /// The kernel refused a request on the PF (`what` is the `ip link` command that would do
    /// the same); the netlink layer's error carries the kernel's errno and answer.
    #[error("{what}: {}", source.cause)]
    Pf { what: String, source: LinkError },

    /// The kernel reported a hardware address that is not a MAC.
    #[error("{what}: {source}")]
    Mac { what: String, source: MacError },

    /// IPAM failed; its own error (and code) is passed through. Boxed: it is by far the largest.
    #[error(transparent)]
    Ipam(Box<DelegateError>),

    /// The attachment's device-info file (`runtimeConfig.CNIDeviceInfoFile`) cannot be written.
    #[error(transparent)]
    DeviceInfo(#[from] crate::devinfo::file::DeviceInfoFileError),

    /// Undoing an attachment (partly) failed. While the VF is not restored its record stays,
    /// so a DEL retry can finish the job.
    #[error("{context}; undoing the attachment of VF {pci} failed: {}", errors.join("; "))]
    Restore { pci: String, context: String, errors: Vec<String> },
}

/// Why a VF's record or lock could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateCause {
    #[error("{0}")]
    Io(#[source] std::io::Error),

    #[error("locking: {0}")]
    Lock(#[source] std::io::Error),

    #[error("{0}")]
    Encode(#[source] serde_json::Error),

    #[error("{0}; the VF's original settings are unknown; reset the VF by hand, then move the file aside")]
    Corrupt(#[source] serde_json::Error),

    /// The blocking task doing the file work died.
    #[error("{0}")]
    Task(#[source] tokio::task::JoinError),
}

impl SriovError {
    pub fn ipam(e: DelegateError) -> SriovError {
        SriovError::Ipam(Box::new(e))
    }
}

/// IPAM's error reaches the runtime as it came; the rest as the sriov binary would print it.
impl NativeFailure for SriovError {
    fn passed_through(self) -> Result<DelegateError, SriovError> {
        match self {
            SriovError::Ipam(e) => Ok(*e),
            other => Err(other),
        }
    }
}

impl CniCode for SriovError {
    /// The CNI error code, following the reference plugins: 7 for configs, 4 for the environment,
    /// 5 for local files, 11 when retrying later can succeed, and 999 (libcni's "internal", what
    /// sriov-cni's binary answers) for everything the kernel refused.
    fn cni_code(&self) -> ErrorCode {
        match self {
            SriovError::Config(_) | SriovError::Device { .. } => ErrorCode::InvalidNetworkConfig,
            SriovError::Environment(_) => ErrorCode::InvalidEnvironment,
            SriovError::Busy { .. } | SriovError::LockTimeout { .. } => ErrorCode::TryAgainLater,
            SriovError::State { .. } => ErrorCode::IoFailure,
            SriovError::DeviceInfo(e) => e.cni_code(),
            SriovError::Ipam(e) => e.cni_code(),
            SriovError::Link(e) => e.cni_code(),
            SriovError::Netlink { .. }
            | SriovError::Pf { .. }
            | SriovError::Mac { .. }
            | SriovError::Restore { .. } => ErrorCode::Internal,
        }
    }
}

/// A pod's (or the test node's) namespace could not be entered to open a socket there.
impl From<NamespaceError> for SriovError {
    fn from(e: NamespaceError) -> Self {
        SriovError::Link(e.into())
    }
}
