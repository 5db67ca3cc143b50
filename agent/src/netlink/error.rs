//! The layer's errors: entering a namespace ([`NamespaceError`]) and a netlink request the
//! kernel, or the layer on its behalf, refused ([`LinkError`]).

use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::cni::{CniCode, ErrorCode};

const AGENT_PLACE: &str = "the agent's network namespace";

/// "the agent's network namespace" or "network namespace /run/netns/x", for messages.
pub(super) fn place_of(netns: Option<&Path>) -> String {
    match netns {
        Some(path) => format!("network namespace {}", path.display()),
        None => AGENT_PLACE.to_owned(),
    }
}

/// Entering a network namespace, or opening a netlink socket inside one, failed. Always names
/// the namespace's path.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("cannot use netlink in {}: not called from inside a tokio runtime", netns.display())]
    NoRuntime { netns: PathBuf },

    #[error("cannot open network namespace {}: {source}", netns.display())]
    Open { netns: PathBuf, source: std::io::Error },

    #[error("cannot enter network namespace {} (setns): {source}", netns.display())]
    Enter { netns: PathBuf, source: nix::Error },

    #[error("cannot open a netlink socket in network namespace {}: {source}", netns.display())]
    Socket { netns: PathBuf, source: std::io::Error },

    #[error("cannot start the thread that enters network namespace {}: {source}", netns.display())]
    Thread { netns: PathBuf, source: std::io::Error },

    #[error("the thread working in network namespace {} died before handing back its result", netns.display())]
    ThreadDied { netns: PathBuf },
}

impl NamespaceError {
    /// The namespace it concerns.
    pub fn netns(&self) -> &Path {
        match self {
            NamespaceError::NoRuntime { netns }
            | NamespaceError::Open { netns, .. }
            | NamespaceError::Enter { netns, .. }
            | NamespaceError::Socket { netns, .. }
            | NamespaceError::Thread { netns, .. }
            | NamespaceError::ThreadDied { netns } => netns,
        }
    }
}

/// A failure of the node rather than of the request: libcni's "internal" code.
impl CniCode for NamespaceError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::Internal
    }
}

/// A link operation the kernel (or the namespace) refused. Reads as "renaming plx1a2b3c4d to
/// net1 in network namespace /run/netns/p: File exists (os error 17)".
#[derive(Debug, thiserror::Error)]
#[error("{action} in {place}: {cause}")]
pub struct LinkError {
    /// What was being done, e.g. "renaming plx0a1b2c3d to net1".
    pub action: String,
    /// "the agent's network namespace" or "network namespace /run/netns/x".
    pub place: String,
    /// The kernel's answer, when it was an errno; callers branch on it (EEXIST, ENODEV, ...).
    pub errno: Option<Errno>,
    #[source]
    pub cause: LinkCause,
}

impl LinkError {
    pub fn is(&self, errno: Errno) -> bool {
        self.errno == Some(errno)
    }
}

/// A failure of the node rather than of the request: libcni's "internal" code, what the
/// reference plugins answer for a refused netlink request.
impl CniCode for LinkError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::Internal
    }
}

/// A pod's socket could not be opened.
impl From<NamespaceError> for LinkError {
    fn from(e: NamespaceError) -> LinkError {
        LinkError {
            action: "opening a netlink socket".into(),
            place: place_of(Some(e.netns())),
            errno: None,
            cause: LinkCause::Namespace(e),
        }
    }
}

/// Why a [`LinkError`] happened.
#[derive(Debug, thiserror::Error)]
pub enum LinkCause {
    /// The kernel's answer to a request.
    #[error(transparent)]
    Kernel(KernelError),

    /// The agent's own netlink socket could not be opened.
    #[error("{0}")]
    Socket(#[source] std::io::Error),

    #[error(transparent)]
    Namespace(NamespaceError),

    /// The namespace a link is created in or moved to could not be opened.
    #[error("cannot open the target namespace: {0}")]
    TargetNamespace(#[source] std::io::Error),

    #[error("{key}: {source}")]
    Sysctl { key: String, source: std::io::Error },

    /// Refused by the layer itself, for the reason given.
    #[error("{0}")]
    Refused(String),
}

/// The kernel's answer to a request, as the netlink library reported it: it leaves the layer
/// as a sentence ("File exists (os error 17)") and the errno in [`LinkError::errno`], never as
/// the library's type. Boxed: the library's error carries the whole message.
#[derive(Debug)]
pub struct KernelError(Box<rtnetlink::Error>);

impl KernelError {
    pub(super) fn new(err: rtnetlink::Error) -> KernelError {
        KernelError(Box::new(err))
    }
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// The kernel's errno, when the error is one.
pub(super) fn errno_of(err: &rtnetlink::Error) -> Option<Errno> {
    match err {
        rtnetlink::Error::NetlinkError(message) => message.code.map(|code| Errno::from_raw(-code.get())),
        _ => None,
    }
}

/// "File exists (os error 17)" rather than rtnetlink's dump of the whole message.
pub(super) fn describe(err: &rtnetlink::Error) -> String {
    match errno_of(err) {
        Some(errno) => std::io::Error::from_raw_os_error(errno as i32).to_string(),
        None => err.to_string(),
    }
}
