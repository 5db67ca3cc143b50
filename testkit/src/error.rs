//! What can go wrong setting up or tearing down a fixture.

use std::path::PathBuf;

/// A fixture that could not be made (or a command it runs that failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started at all (not installed, not executable).
    #[error("could not run {command} (is it installed?)")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The program ran and failed; its stderr says why.
    #[error("{command} failed: {stderr}")]
    Failed { command: String, stderr: String },
    /// A file system operation on a fixture's path.
    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A system call on a fixture's path (setns, mount).
    #[error("{action} {}", path.display())]
    Sys {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// The error and its causes on one line, for the panics of the infallible wrappers.
pub(crate) fn chain(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The value, or a panic that says what failed and why (fixtures of tests cannot go on).
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T>) -> T {
    result.unwrap_or_else(|e| panic!("{}", chain(&e)))
}
