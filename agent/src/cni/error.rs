//! The CNI error result returned to the runtime.

use std::fmt;

pub use plexus_cni_shim::ErrorCode;

/// An error that knows which CNI error code the runtime gets for it. Every layer's error type
/// implements it, so the code is decided where the failure is understood, once.
pub trait CniCode: std::error::Error {
    fn cni_code(&self) -> ErrorCode;
}

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

    /// The CNI error of a layer's error: its code, and its message as displayed.
    pub fn from_error<E: CniCode + ?Sized>(err: &E) -> Self {
        CniError::new(err.cni_code(), err.to_string())
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
