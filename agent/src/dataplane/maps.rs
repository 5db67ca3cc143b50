//! What the dataplane's map wrappers share: their errors, and removals that tolerate what is
//! gone already.

use std::path::PathBuf;

use aya::maps::MapError;

use super::loader::chain;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("the BPF object has no map {0}")]
    Missing(&'static str),
    #[error("BPF map {map}: {action}: {cause}")]
    Map { map: &'static str, action: String, cause: String },
    #[error("opening the pinned map {path}: {cause} (is the agent running with this --bpf-pin-dir?)")]
    Open { path: PathBuf, cause: String },
    #[error("{0}")]
    Cpus(String),
}

pub fn map_error(map: &'static str, action: impl Into<String>) -> impl FnOnce(MapError) -> TableError {
    let action = action.into();
    move |e| TableError::Map { map, action, cause: chain(&e) }
}

/// A removal of a key that is not there is not a failure: DEL and reconcile are idempotent.
pub fn ignore_missing(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

/// The number of possible CPUs, for per-CPU values.
pub fn cpus() -> Result<usize, TableError> {
    aya::util::nr_cpus().map_err(|(what, e)| TableError::Cpus(format!("{what}: {e}")))
}

/// Rows as aligned columns for people (the listings of `plexus-agent portmap/bandwidth`).
pub fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let rows =
            vec![vec!["A".to_owned(), "BB".into(), "C".into()], vec!["long".into(), "x".into(), "".into()]];
        assert_eq!(columns(&rows), "A     BB  C\nlong  x");
    }
}
