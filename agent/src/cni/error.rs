//! The CNI error result returned to the runtime.

use std::fmt;

/// Error codes of the CNI 1.1.0 specification, plus plexus's own (100 and up, as the
/// spec reserves for plugins).
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
    /// A delegate plugin answered with this CNI error code.
    Delegate(u32),
}

impl ErrorCode {
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
            ErrorCode::Delegate(c) => c,
        }
    }
}

/// libcni's ErrInternal: the code for failures of the node rather than of the request, which
/// the reference plugins answer when an error has no code of its own.
pub const INTERNAL: u32 = 999;

/// A CNI error: `{"cniVersion", "code", "msg", "details"}` on stdout, non-zero exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: ErrorCode,
    /// What went wrong and what to fix, in one sentence.
    pub msg: String,
    /// Which attachment, plugin or file it concerns.
    pub details: String,
}

impl CniError {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> Self {
        CniError { code, msg: msg.into(), details: String::new() }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    pub fn invalid_config(msg: impl Into<String>) -> Self {
        CniError::new(ErrorCode::InvalidNetworkConfig, msg)
    }

    pub fn try_again(msg: impl Into<String>) -> Self {
        CniError::new(ErrorCode::TryAgainLater, msg)
    }

    pub fn io(msg: impl Into<String>) -> Self {
        CniError::new(ErrorCode::IoFailure, msg)
    }

    /// The JSON object the runtime reads, in the request's CNI version.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        let wire = plexus_cni_shim::ErrorResult {
            cni_version: cni_version.to_owned(),
            code: self.code.code(),
            msg: self.msg.clone(),
            details: self.details.clone(),
        };
        serde_json::to_value(wire)
            .unwrap_or_else(|_| serde_json::json!({"code": self.code.code(), "msg": self.msg}))
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code.code(), self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}
