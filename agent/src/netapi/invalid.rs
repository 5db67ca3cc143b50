//! The error of a `NetworkConfig` field, shared by its decoding (`model`) and its
//! validation (`config`).

/// A field of a `NetworkConfig` that cannot be accepted, named as in the proto
/// (`config.cniv1_config.plugins[1].type`), and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidField {
    pub field: String,
    pub problem: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        InvalidField { field: field.into(), problem: problem.into() }
    }
}
