//! `plexus-agent portmap list`: the active mappings, read from the pinned maps (the
//! dataplane's truth, with the programs' per-CPU counters summed), with the pod holding each
//! one from the agent's records when the state directory is readable.

use std::path::Path;

use serde::Serialize;

use super::entries::{endpoint_text, protocol_from_number, words_addr};
use super::store::Store;
use super::table::{TableError, Tables};
use crate::dataplane::maps::columns;
use crate::dataplane::pin::PinDir;

/// One row of the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub protocol: String,
    pub host: String,
    pub pod_address: String,
    pub pod: Option<String>,
    pub container_id: Option<String>,
    pub ifname: Option<String>,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub local_translations: u64,
}

/// The mappings installed under `pin_dir`, described with the records of `state_dir`.
pub fn mappings(pin_dir: &Path, state_dir: Option<&Path>) -> Result<Vec<Listed>, TableError> {
    let tables = Tables::open_pinned(&PinDir::open(pin_dir))?;
    // Without readable records the listing still shows every mapping, without its pod.
    let records = match state_dir.map(|d| Store::new(d).load_all()) {
        Some(Ok(records)) => records,
        Some(Err(e)) => {
            tracing::warn!("{e}; listing the mappings without their pods");
            Vec::new()
        }
        None => Vec::new(),
    };
    Ok(tables
        .list()
        .into_iter()
        .map(|(host, fwd, counters)| {
            let protocol = protocol_from_number(host.proto)
                .map_or_else(|| host.proto.to_string(), |p| p.as_str().into());
            let record = records.iter().find(|r| r.entries.iter().any(|e| e.host_endpoint() == host));
            Listed {
                protocol,
                host: endpoint_text(words_addr(&host.addr), u16::from_be(host.port_be)),
                pod_address: endpoint_text(words_addr(&fwd.addr), u16::from_be(fwd.port_be)),
                pod: record.and_then(|r| r.pod.clone()),
                container_id: record.map(|r| r.container_id.clone()),
                ifname: record.map(|r| r.ifname.clone()),
                packets_in: counters.packets_in,
                bytes_in: counters.bytes_in,
                packets_out: counters.packets_out,
                bytes_out: counters.bytes_out,
                local_translations: counters.local,
            }
        })
        .collect())
}

/// A table for people.
pub fn render(rows: &[Listed]) -> String {
    let mut lines = vec![["PROTO", "HOST", "POD ADDRESS", "POD", "IN PKTS/BYTES", "OUT PKTS/BYTES", "LOCAL"]
        .map(str::to_owned)
        .to_vec()];
    for r in rows {
        lines.push(vec![
            r.protocol.clone(),
            r.host.clone(),
            r.pod_address.clone(),
            match (&r.pod, &r.ifname) {
                (Some(p), Some(i)) => format!("{p} ({i})"),
                (None, Some(i)) => format!("{} ({i})", r.container_id.as_deref().unwrap_or("?")),
                _ => "-".into(),
            },
            format!("{}/{}", r.packets_in, r.bytes_in),
            format!("{}/{}", r.packets_out, r.bytes_out),
            r.local_translations.to_string(),
        ]);
    }
    columns(&lines)
}
