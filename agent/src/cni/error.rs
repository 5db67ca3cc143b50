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

/// An error and its causes as one line, `top: cause: cause`, for messages and logs (a transport
/// or syscall error alone says little; its sources say why). Each text is said once: a cause
/// whose text the line already holds (layers that print their source and also return it, as
/// kube's and hyper's do) is left out, and so is an empty one.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let part = e.to_string();
        if !part.is_empty() && !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        next = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{what}")]
    struct Layer {
        what: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut layer = None;
        for what in texts.iter().rev() {
            layer = Some(Layer { what, source: layer.map(Box::new) });
        }
        layer.expect("at least one layer")
    }

    #[test]
    fn a_chain_names_every_cause_in_order() {
        assert_eq!(
            chain(&layers(&["connecting to /run/x.sock", "transport error", "No such file"])),
            "connecting to /run/x.sock: transport error: No such file"
        );
        assert_eq!(chain(&layers(&["alone"])), "alone");
    }

    #[test]
    fn a_chain_says_a_repeated_or_empty_cause_once() {
        // A layer that prints its source and returns it too: the plain walk said it twice.
        let text = chain(&layers(&["client error (Connect): refused", "refused", "", "os error 111"]));
        assert_eq!(text, "client error (Connect): refused: os error 111");
        assert_eq!(chain(&layers(&["", "the cause"])), "the cause");
    }
}
