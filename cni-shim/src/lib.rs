//! The wire between the `plexus` CNI binary (the shim) and the agent.
//!
//! The shim is deliberately thin: it packs the CNI environment and stdin into one
//! [`Request`], writes it as JSON on the agent's Unix socket, half-closes the write
//! side, and reads one [`Response`] until EOF. All CNI logic lives in the agent; the
//! shim only answers `VERSION` itself, refuses stdin that is not a JSON object (it names
//! no agent to ask) and reports an unreachable agent.

use serde::{Deserialize, Serialize};

pub mod shim;

/// Where the agent listens unless a CNI config overrides it with a `"socket"` key.
pub const DEFAULT_SOCKET: &str = "/run/plexus/plexus.sock";

/// CNI spec versions plexus speaks, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest CNI version plexus implements.
pub const CURRENT_VERSION: &str = "1.1.0";

/// One CNI invocation as the runtime made it, forwarded verbatim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// CNI_COMMAND
    pub command: String,
    /// CNI_CONTAINERID
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// CNI_NETNS
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
    /// CNI_IFNAME
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// CNI_ARGS
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// CNI_PATH
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The network configuration the runtime wrote on stdin, as it was written.
    pub config: String,
}

/// The agent's answer: what the shim prints on stdout and its exit status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub exit_code: i32,
    #[serde(default)]
    pub stdout: String,
}

/// Error codes of the CNI 1.1.0 specification, plus plexus's own (100 and up, as the spec
/// reserves for plugins). Defined once, here, so the shim and the agent agree on every number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    IncompatibleVersion,
    UnsupportedField,
    ContainerUnknown,
    InvalidEnvironment,
    IoFailure,
    DecodeFailure,
    InvalidNetworkConfig,
    TryAgainLater,
    PluginNotAvailable,
    /// A delegate plugin failed without a CNI error of its own (crash, timeout, garbage).
    DelegateFailed,
    /// The caller may not use the agent's socket (its credentials: not root, not in the
    /// agent's `--socket-group`).
    PermissionDenied,
    /// libcni's ErrInternal (999): a failure of the node rather than of the request, which the
    /// reference plugins answer when an error has no code of its own.
    Internal,
    /// A delegate plugin answered with this CNI error code.
    Delegate(u32),
}

impl ErrorCode {
    /// The number on the wire.
    pub fn code(self) -> u32 {
        match self {
            ErrorCode::IncompatibleVersion => 1,
            ErrorCode::UnsupportedField => 2,
            ErrorCode::ContainerUnknown => 3,
            ErrorCode::InvalidEnvironment => 4,
            ErrorCode::IoFailure => 5,
            ErrorCode::DecodeFailure => 6,
            ErrorCode::InvalidNetworkConfig => 7,
            ErrorCode::TryAgainLater => 11,
            ErrorCode::PluginNotAvailable => 50,
            ErrorCode::DelegateFailed => 100,
            ErrorCode::PermissionDenied => 101,
            ErrorCode::Internal => 999,
            ErrorCode::Delegate(c) => c,
        }
    }
}

/// A CNI error result, as printed on stdout by whoever fails: the agent, or the shim when
/// it cannot reach the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    pub code: u32,
    pub msg: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub details: String,
}
