//! `plexus-agent portmap list`: the active mappings, read from the pinned maps (the
//! dataplane's truth, with the programs' per-CPU counters summed, and the flows each one has),
//! with the pod holding each one from the agent's records when the state directory is readable
//! and the path its requests take (XDP in native or generic mode, or TC);
//! and `plexus-agent portmap flows`: the tracked flows and the flow table's figures.

use std::collections::BTreeMap;
use std::path::Path;

use plexus_ebpf_common::{Rewrite, DELIVER_BRIDGE, DELIVER_INGRESS, DELIVER_XDP_REDIRECT};

use serde::Serialize;

use super::entries::{map_endpoint_text, protocol_text};
use super::flows::{counts_by_host, rows, FlowListing, TableSummary};
use super::store::Store;
use super::table::{monotonic_ns, TableError, Tables};
use crate::dataplane::attach::Attach;
use crate::dataplane::maps::columns;
use crate::dataplane::pin::PinDir;
use crate::dataplane::xdp::{pinned_modes, Mode};

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
    /// Flows tracked for the mapping.
    pub flows: usize,
    /// Where its requests are translated: `xdp native`, `xdp generic` (on the interface they
    /// enter, then TC for what XDP leaves; with ` redirect` where XDP redirects them into the
    /// pod's veth), or `tc`.
    pub path: String,
}

/// The path of a mapping's requests: XDP when plexus's XDP program runs where they enter the
/// node and it can deliver them from there (`xdp`: pinned XDP links' interfaces with the
/// kernel's mode): on the interface that delivers them up its receive path (a macvlan master),
/// or on an uplink of the bridge that holds the host IP (`uplinks`: the XDP points of the
/// mapping's record); else TC. On an uplink, ` redirect` says XDP redirects the requests into
/// the pod's veth (`DELIVER_XDP_REDIRECT`, while the pod's ingress is not limited).
pub fn request_path(fwd: &Rewrite, uplinks: &[u32], xdp: &BTreeMap<u32, Mode>) -> String {
    if fwd.flags & DELIVER_INGRESS != 0 {
        if let Some(mode) = xdp.get(&fwd.ifindex) {
            return format!("xdp {}", mode.as_str());
        }
    }
    let bridged: &[u32] = if fwd.flags & DELIVER_BRIDGE != 0 { uplinks } else { &[] };
    match bridged.iter().find_map(|i| xdp.get(i)) {
        Some(mode) if fwd.flags & DELIVER_XDP_REDIRECT != 0 => format!("xdp {} redirect", mode.as_str()),
        Some(mode) => format!("xdp {}", mode.as_str()),
        None => "tc".into(),
    }
}

/// The mappings installed under `pin_dir`, described with the records of `state_dir`.
pub fn mappings(pin_dir: &Path, state_dir: Option<&Path>) -> Result<Vec<Listed>, TableError> {
    let pins = PinDir::open(pin_dir);
    let tables = Tables::open_pinned(&pins)?;
    let xdp = pinned_modes(&pins);
    // Without readable records the listing still shows every mapping, without its pod.
    let records = match state_dir.map(|d| Store::new(d).load_all()) {
        Some(Ok(records)) => records,
        Some(Err(e)) => {
            tracing::warn!("{e}; listing the mappings without their pods");
            Vec::new()
        }
        None => Vec::new(),
    };
    let flows = counts_by_host(&tables.flows());
    Ok(tables
        .list()
        .into_iter()
        .map(|(host, fwd, counters)| {
            let record = records.iter().find(|r| r.entries.iter().any(|e| e.host_endpoint() == host));
            let uplinks: Vec<u32> = record
                .map(|r| r.hooks.iter().filter(|h| h.attach == Attach::Xdp).map(|h| h.ifindex).collect())
                .unwrap_or_default();
            Listed {
                protocol: protocol_text(host.proto),
                host: map_endpoint_text(&host.addr, host.port_be),
                pod_address: map_endpoint_text(&fwd.addr, fwd.port_be),
                pod: record.and_then(|r| r.pod.clone()),
                container_id: record.map(|r| r.container_id.clone()),
                ifname: record.map(|r| r.ifname.clone()),
                packets_in: counters.packets_in,
                bytes_in: counters.bytes_in,
                packets_out: counters.packets_out,
                bytes_out: counters.bytes_out,
                local_translations: counters.local,
                flows: flows.get(&host).copied().unwrap_or(0),
                path: request_path(&fwd, &uplinks, &xdp),
            }
        })
        .collect())
}

/// A table for people.
pub fn render(rows: &[Listed]) -> String {
    let mut lines = vec![[
        "PROTO",
        "HOST",
        "POD ADDRESS",
        "POD",
        "PATH",
        "IN PKTS/BYTES",
        "OUT PKTS/BYTES",
        "LOCAL",
        "FLOWS",
    ]
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
            r.path.clone(),
            format!("{}/{}", r.packets_in, r.bytes_in),
            format!("{}/{}", r.packets_out, r.bytes_out),
            r.local_translations.to_string(),
            r.flows.to_string(),
        ]);
    }
    columns(&lines)
}

#[derive(Debug, thiserror::Error)]
pub enum FlowsError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("reading the monotonic clock: {0}")]
    Clock(#[source] nix::Error),
}

/// The flows tracked under `pin_dir`, with the table's figures.
pub fn flows(pin_dir: &Path) -> Result<FlowListing, FlowsError> {
    let tables = Tables::open_pinned(&PinDir::open(pin_dir))?;
    let flows = tables.flows();
    let now = monotonic_ns().map_err(FlowsError::Clock)?;
    let table =
        TableSummary::new(flows.len() as u64, u64::from(tables.flow_capacity()), &tables.flow_stats());
    Ok(FlowListing { flows: rows(&flows, now), table })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_xdp_only_where_it_delivers_them_up_the_interface() {
        let xdp = BTreeMap::from([(5, Mode::Native), (6, Mode::Generic)]);
        let fwd = |ifindex, flags| Rewrite { ifindex, flags, ..Rewrite::default() };
        assert_eq!(request_path(&fwd(5, DELIVER_INGRESS), &[], &xdp), "xdp native");
        assert_eq!(request_path(&fwd(6, DELIVER_INGRESS), &[], &xdp), "xdp generic");
        // A pod's veth, delivered on its transmit path: TC's, unless an uplink of the bridge
        // holding the host IP runs XDP.
        assert_eq!(request_path(&fwd(5, 0), &[], &xdp), "tc");
        assert_eq!(request_path(&fwd(7, DELIVER_INGRESS), &[], &xdp), "tc");
        assert_eq!(request_path(&fwd(9, DELIVER_BRIDGE), &[8, 6], &xdp), "xdp generic");
        assert_eq!(request_path(&fwd(9, DELIVER_BRIDGE), &[8], &xdp), "tc", "no XDP on the uplink");
        let redirect = DELIVER_BRIDGE | DELIVER_XDP_REDIRECT;
        assert_eq!(request_path(&fwd(9, redirect), &[5], &xdp), "xdp native redirect");
        assert_eq!(
            request_path(&fwd(9, redirect), &[8], &xdp),
            "tc",
            "no XDP on the uplink, nothing to redirect"
        );
        assert_eq!(request_path(&fwd(9, 0), &[6], &xdp), "tc", "another interface holds the host IP");
    }
}
