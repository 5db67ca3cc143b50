//! A teardown's failures, kept with their causes so that one error reports every attachment
//! that could not be detached (spec 7.2).

use crate::cni::{CniCode, ErrorCode};
use crate::delegate::DelegateError;

/// One attachment whose DEL failed.
#[derive(Debug, thiserror::Error)]
#[error("{network} ({ifname}): {source}")]
pub struct DetachFailure {
    pub network: String,
    pub ifname: String,
    pub source: DelegateError,
}

/// Every attachment of a container whose DEL failed; they stay recorded for the next DEL.
#[derive(Debug, thiserror::Error)]
#[error("detaching {} attachment(s) failed: {}", failures.len(), joined(failures))]
pub struct DetachError {
    pub container_id: String,
    pub failures: Vec<DetachFailure>,
}

fn joined(failures: &[DetachFailure]) -> String {
    failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl CniCode for DetachError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::DelegateFailed
    }
}
