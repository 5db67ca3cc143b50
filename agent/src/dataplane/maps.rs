//! What the dataplane's map wrappers share: their errors, taking or opening their maps,
//! per-CPU values, removals that tolerate what is gone already, and addresses as the maps
//! key them.

use std::net::IpAddr;
use std::path::PathBuf;

use aya::maps::{Map, MapData, MapError};
use aya::Ebpf;
use plexus_ebpf_common::{v4_mapped, Addr};

use super::pin::PinDir;
use crate::cni::error::chain;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("the BPF object has no map {0}")]
    Missing(&'static str),
    #[error("BPF map {map}: {action}: {}", chain(.source))]
    Map {
        map: &'static str,
        action: String,
        #[source]
        source: MapError,
    },
    #[error(
        "opening the pinned map {}: {} (is the agent running with this --bpf-pin-dir?)",
        .path.display(),
        chain(.source)
    )]
    Open {
        path: PathBuf,
        #[source]
        source: MapError,
    },
    #[error("BPF map {map}: {action}: {source}")]
    Batch {
        map: &'static str,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("BPF map {map} is full: {what}")]
    Full { map: &'static str, what: String },
    #[error("counting the possible CPUs ({what}): {source}")]
    Cpus {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

pub fn map_error(map: &'static str, action: impl Into<String>) -> impl FnOnce(MapError) -> TableError {
    let action = action.into();
    move |source| TableError::Map { map, action, source }
}

/// Takes map `name` out of a freshly loaded object.
pub fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<Map, TableError> {
    ebpf.take_map(name).ok_or(TableError::Missing(name))
}

/// Opens map `name` of a running agent through its pin.
pub fn open_pinned_map(pins: &PinDir, name: &'static str) -> Result<Map, TableError> {
    let path = pins.map(name);
    MapData::from_pin(&path).and_then(Map::from_map_data).map_err(|source| TableError::Open { path, source })
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
    aya::util::nr_cpus().map_err(|(what, source)| TableError::Cpus { what, source })
}

/// `value` once per possible CPU, for a per-CPU map entry.
pub fn per_cpu<T: aya::Pod>(value: T) -> Result<aya::maps::PerCpuValues<T>, TableError> {
    let n = cpus()?;
    aya::maps::PerCpuValues::try_from(vec![value; n])
        .map_err(|source| TableError::Cpus { what: "the per-CPU values", source })
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

/// An address as the maps key it (IPv4 as IPv4-mapped, words in network byte order).
pub fn addr_words(ip: IpAddr) -> Addr {
    match ip {
        IpAddr::V4(v4) => v4_mapped(u32::from_ne_bytes(v4.octets())),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

/// The inverse of [`addr_words`].
pub fn words_addr(words: &Addr) -> IpAddr {
    let mut o = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        o[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
    }
    let v6 = std::net::Ipv6Addr::from(o);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
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
