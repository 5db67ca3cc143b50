//! `plexus-agent bandwidth list` and `plexus-agent bandwidth set`: the installed limits with the
//! programs' counters, read from the pinned maps and the agent's records; and limits changed in
//! place, through the same pins, while the agent runs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::config::Limits;
use super::plan::Entry;
use super::shaper::PIN_SUBDIR;
use super::store::{Record, Store};
use super::table::Table;
use super::{update_in_place, BandwidthError};
use crate::cni::AttachmentKey;
use crate::dataplane::attach::Hook;
use crate::dataplane::maps::columns;
use crate::dataplane::pin::PinDir;
use crate::dataplane::xdp::{pinned_modes, Mode};
use crate::netlink::Mac;

/// One row: one limited direction of one attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub pod: Option<String>,
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    pub direction: String,
    pub device: String,
    pub hook: String,
    pub mac: Option<String>,
    pub mechanism: String,
    pub rate_bps: u64,
    pub burst_bits: u64,
    /// Whether the map holds this limit (false: the dataplane lost it; the agent restores it at
    /// start).
    pub installed: bool,
    pub passed_packets: u64,
    pub passed_bytes: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    pub marked_packets: u64,
    /// `native` or `generic` when an XDP program on the device enforces this limit first (an
    /// ingress limit on a macvlan master: the shaping object's `bw_xdp`, or the port mapping
    /// object's `pm_xdp` where the master has port mappings too), else none.
    pub xdp: Option<String>,
}

/// `xdp`: the interfaces running plexus's XDP programs (the port mapping object's or the
/// shaping object's), with their mode.
pub fn rows<'a>(
    table: &Table,
    records: impl IntoIterator<Item = &'a Record>,
    xdp: &BTreeMap<u32, Mode>,
) -> Vec<Listed> {
    let mut out = Vec::new();
    for r in records {
        for e in &r.entries {
            let key = e.key();
            let c = table.counters(&key);
            out.push(Listed {
                pod: r.pod.clone(),
                container_id: r.container_id.clone(),
                ifname: r.ifname.clone(),
                network: r.network.clone(),
                direction: e.direction.as_str().into(),
                device: e.ifname.clone(),
                hook: format!("{:?}", e.hook).to_lowercase(),
                mac: e.mac.map(|m| Mac(m).to_string()),
                mechanism: e.mechanism.as_str().into(),
                rate_bps: e.rate_bps,
                burst_bits: e.effective_burst_bits(),
                installed: table.verify(e).is_none(),
                passed_packets: c.passed_packets,
                passed_bytes: c.passed_bytes,
                dropped_packets: c.dropped_packets,
                dropped_bytes: c.dropped_bytes,
                marked_packets: c.marked_packets,
                xdp: xdp_mode(e, xdp).map(|m| m.as_str().to_owned()),
            });
        }
    }
    out
}

/// The mode of the XDP program enforcing `e` first, if one does: an ingress limit keyed by MAC
/// (a macvlan master's receive path) where the XDP program runs.
pub fn xdp_mode(e: &Entry, xdp: &BTreeMap<u32, Mode>) -> Option<Mode> {
    if e.hook != Hook::Ingress || e.mac.is_none() {
        return None;
    }
    xdp.get(&e.ifindex).copied()
}

/// The limits installed under `pin_dir` (the agent's `--bpf-pin-dir`) for the records of
/// `state_dir`.
pub fn limits(pin_dir: &Path, state_dir: &Path) -> Result<Vec<Listed>, BandwidthError> {
    let table = Table::open_pinned(&PinDir::open(&pin_dir.join(PIN_SUBDIR)))?;
    let records = Store::new(state_dir).load_all()?;
    let mut xdp = pinned_modes(&PinDir::open(pin_dir));
    xdp.extend(pinned_modes(&PinDir::open(&pin_dir.join(PIN_SUBDIR))));
    Ok(rows(&table, &records, &xdp))
}

/// Changes the limits of an attachment's existing directions in place.
pub fn set(
    pin_dir: &Path,
    state_dir: &Path,
    container_id: &str,
    ifname: &str,
    limits: &Limits,
) -> Result<Record, BandwidthError> {
    let mut table = Table::open_pinned(&PinDir::open(&pin_dir.join(PIN_SUBDIR)))?;
    update_in_place(&mut table, &Store::new(state_dir), &AttachmentKey::new(container_id, ifname), limits)
}

/// A table for people.
pub fn render(rows: &[Listed]) -> String {
    let header = [
        "POD",
        "INTERFACE",
        "DIRECTION",
        "DEVICE",
        "MECHANISM",
        "RATE",
        "BURST",
        "PASSED",
        "DROPPED",
        "MARKED",
    ];
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| (*s).to_owned()).collect()];
    for r in rows {
        let device = match &r.mac {
            Some(mac) => format!("{} {} ({mac})", r.device, r.hook),
            None => format!("{} {}", r.device, r.hook),
        };
        lines.push(vec![
            r.pod.clone().unwrap_or_else(|| r.container_id.chars().take(12).collect()),
            r.ifname.clone(),
            r.direction.clone(),
            device,
            match (r.installed, &r.xdp) {
                (false, _) => format!("{} (NOT INSTALLED)", r.mechanism),
                (true, Some(mode)) => format!("{} (xdp {mode})", r.mechanism),
                (true, None) => r.mechanism.clone(),
            },
            format!("{}bit/s", si(r.rate_bps)),
            format!("{}bit", si(r.burst_bits)),
            format!("{} pkts / {}B", r.passed_packets, si(r.passed_bytes)),
            format!("{} pkts / {}B", r.dropped_packets, si(r.dropped_bytes)),
            r.marked_packets.to_string(),
        ]);
    }
    columns(&lines)
}

/// 1500000 → "1.5M".
fn si(v: u64) -> String {
    let (value, unit) = match v {
        v if v >= 1_000_000_000 => (v as f64 / 1e9, "G"),
        v if v >= 1_000_000 => (v as f64 / 1e6, "M"),
        v if v >= 1_000 => (v as f64 / 1e3, "k"),
        v => return v.to_string(),
    };
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ingress_limits_of_a_master_running_xdp_are_xdps() {
        use super::super::config::{Limit, Limits};
        use super::super::plan::{entries, Place};
        let limit = Some(Limit { rate_bps: 1_000_000, burst_bits: None });
        let limits = Limits { ingress: limit, egress: limit };
        let master =
            entries(&Place::Master { ifindex: 5, ifname: "m".into(), pod_mac: [2; 6] }, &limits, false);
        let veth = entries(&Place::HostVeth { ifindex: 5, ifname: "v".into() }, &limits, false);
        let xdp = BTreeMap::from([(5, Mode::Generic)]);
        let modes = |es: &[Entry]| es.iter().map(|e| xdp_mode(e, &xdp)).collect::<Vec<_>>();
        assert_eq!(modes(&master), [Some(Mode::Generic), None], "ingress, egress");
        assert_eq!(modes(&veth), [None, None], "a veth's limits are TC's");
        assert_eq!(xdp_mode(&master[0], &BTreeMap::new()), None, "no XDP on the master");
    }

    #[test]
    fn si_units_are_short_and_exact_enough() {
        assert_eq!(si(999), "999");
        assert_eq!(si(1_500_000), "1.5M");
        assert_eq!(si(100_000_000), "100M");
        assert_eq!(si(2_147_483_647), "2.15G");
    }
}
