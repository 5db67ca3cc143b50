//! crr_rate_100k_flows: how full each side's flow table is around the CRR run, and whether
//! the fill's flows were all there.
//!
//! - plexus: the agent's `plexus_portmap_flows` (live entries), with its counters of flows made
//!   (`plexus_portmap_flows_created_total`) and evicted (`plexus_portmap_flow_evictions_total`):
//!   the flows the fill made, less every eviction since, are flows of the fill still present;
//! - reference: the node namespace's `nf_conntrack_count`, and the entries of the fill's
//!   mapping (UDP to hostIP:hostPort) counted in its `/proc/net/nf_conntrack`;
//! - baseline: no table.

use std::io::{BufRead, BufReader};

use anyhow::Context;
use plexus_testkit::Netns;
use serde_json::{json, Value};

use crate::bench::topology::{in_netns, read_sysctl, Agent};

/// Where a side keeps its flows.
#[derive(Clone, Copy)]
pub enum FlowTable<'a> {
    /// The agent's flow table, read from its metrics.
    Agent(&'a Agent),
    /// Conntrack in the node namespace; the fill's entries are UDP to `dst`:`dport`.
    Conntrack { node: &'a Netns, dst: &'a str, dport: u16 },
    /// No table (no NAT).
    None,
}

/// One reading of a side's table.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Occupancy {
    /// Every entry: `plexus_portmap_flows`, or `nf_conntrack_count`.
    pub table: f64,
    /// Conntrack entries of the fill's mapping, when /proc/net/nf_conntrack could be read.
    pub mapping: Option<f64>,
    /// plexus: flows made so far.
    pub created: Option<f64>,
    /// plexus: flows evicted so far (a full table dropping its least recently used entry).
    pub evicted: Option<f64>,
}

impl Occupancy {
    pub fn to_json(self) -> Value {
        json!({"table": self.table, "mapping": self.mapping, "created": self.created, "evicted": self.evicted})
    }
}

impl FlowTable<'_> {
    /// How full the table is now; `None` for a side without one.
    pub fn read(&self) -> anyhow::Result<Option<Occupancy>> {
        match *self {
            FlowTable::Agent(a) => {
                let table = a
                    .metric("plexus_portmap_flows", &[])?
                    .context("the agent's metrics have no plexus_portmap_flows")?;
                Ok(Some(Occupancy {
                    table,
                    mapping: None,
                    created: a.metric("plexus_portmap_flows_created_total", &[])?,
                    evicted: a.metric("plexus_portmap_flow_evictions_total", &[])?,
                }))
            }
            FlowTable::Conntrack { node, dst, dport } => {
                let count = read_sysctl(node, "net.netfilter.nf_conntrack_count")?;
                let table: f64 = count.parse().with_context(|| format!("nf_conntrack_count is {count:?}"))?;
                let (dst, path) = (dst.to_owned(), "/proc/thread-self/net/nf_conntrack");
                // Absent when the kernel has no conntrack procfs: then the total must do.
                let mapping = in_netns(&node.path_str(), move || {
                    let file = std::fs::File::open(path)?;
                    Ok(conntrack_entries(BufReader::new(file), "udp", &dst, dport))
                })
                .ok()
                .map(|n| n as f64);
                Ok(Some(Occupancy { table, mapping, created: None, evicted: None }))
            }
            FlowTable::None => Ok(None),
        }
    }

    pub fn what(&self) -> &'static str {
        match self {
            FlowTable::Agent(_) => "plexus_portmap_flows (agent metrics)",
            FlowTable::Conntrack { .. } => "nf_conntrack_count of the node namespace",
            FlowTable::None => "none",
        }
    }
}

/// Conntrack entries (lines of /proc/net/nf_conntrack) of `proto` whose original direction
/// goes to `dst`:`dport`.
pub fn conntrack_entries(text: impl BufRead, proto: &str, dst: &str, dport: u16) -> u64 {
    let (dst, dport) = (format!("dst={dst}"), format!("dport={dport}"));
    let matches = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.get(2) == Some(&proto)
            && words.iter().find(|w| w.starts_with("dst=")) == Some(&dst.as_str())
            && words.iter().find(|w| w.starts_with("dport=")) == Some(&dport.as_str())
    };
    text.lines().map_while(Result::ok).filter(|l| matches(l)).count() as u64
}

/// Flows of the fill present in the table at `now` (the fill ran between the readings
/// `before_fill` and `before_crr`), as far as the table tells them apart: conntrack's entries
/// of the mapping; for plexus, the flows made during the fill less every flow evicted since it
/// began (any eviction might have been one of them); otherwise every entry of the table.
pub fn fill_present(before_fill: &Occupancy, before_crr: &Occupancy, now: &Occupancy) -> f64 {
    if let Some(m) = now.mapping {
        return m;
    }
    match (before_fill.created, before_crr.created) {
        (Some(c0), Some(c1)) => {
            let evicted = match (before_fill.evicted, now.evicted) {
                (Some(e0), Some(e1)) => e1 - e0,
                _ => 0.0,
            };
            (c1 - c0 - evicted).min(now.table)
        }
        _ => now.table,
    }
}

/// Why the table did not hold the fill's `flows` flows before and after the CRR, if it did not.
pub fn shortfall(
    flows: u32,
    before_fill: &Occupancy,
    before_crr: &Occupancy,
    after_crr: &Occupancy,
) -> Option<String> {
    let want = f64::from(flows);
    let check = |when: &str, now: &Occupancy| {
        let present = fill_present(before_fill, before_crr, now);
        (present < want).then(|| {
            format!(
                "{present} of the fill's {flows} flows were in the table {when} (table: {} entries)",
                now.table
            )
        })
    };
    check("before the CRR", before_crr).or_else(|| check("after the CRR", after_crr))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONNTRACK: &str = "\
ipv4     2 udp      17 28 src=10.77.255.250 dst=10.77.0.1 sport=10000 dport=27001 [UNREPLIED] src=10.77.40.2 dst=10.77.255.250 sport=7001 dport=10000 mark=0 zone=0 use=2
ipv4     2 udp      17 28 src=10.77.255.249 dst=10.77.0.1 sport=10000 dport=27001 [UNREPLIED] src=10.77.40.2 dst=10.77.255.249 sport=7001 dport=10000 mark=0 zone=0 use=2
ipv4     2 udp      17 28 src=10.77.255.250 dst=10.77.0.1 sport=10001 dport=27002 [UNREPLIED] src=10.77.40.2 dst=10.77.255.250 sport=7001 dport=10001 mark=0 zone=0 use=2
ipv4     2 udp      17 28 src=10.77.255.250 dst=10.77.40.2 sport=10002 dport=27001 [UNREPLIED] src=10.77.40.2 dst=10.77.255.250 sport=27001 dport=10002 mark=0 zone=0 use=2
ipv4     2 tcp      6 118 TIME_WAIT src=10.77.255.250 dst=10.77.0.1 sport=40000 dport=27001 src=10.77.40.2 dst=10.77.255.250 sport=7000 dport=40000 [ASSURED] mark=0 zone=0 use=2
ipv4     2 udp      17 28 src=10.77.255.250 dst=10.77.0.1 sport=10003 dport=27001 src=10.77.40.2 dst=10.77.255.250 sport=7001 dport=10003 mark=0 zone=0 use=2
";

    #[test]
    fn conntrack_entries_of_one_mapping() {
        assert_eq!(conntrack_entries(CONNTRACK.as_bytes(), "udp", "10.77.0.1", 27001), 3);
        assert_eq!(conntrack_entries(CONNTRACK.as_bytes(), "tcp", "10.77.0.1", 27001), 1);
        assert_eq!(conntrack_entries(CONNTRACK.as_bytes(), "udp", "10.77.0.1", 2700), 0, "whole words");
        assert_eq!(conntrack_entries("".as_bytes(), "udp", "10.77.0.1", 27001), 0);
    }

    fn agent(table: f64, created: f64, evicted: f64) -> Occupancy {
        Occupancy { table, mapping: None, created: Some(created), evicted: Some(evicted) }
    }

    #[test]
    fn plexus_counts_what_the_fill_made_less_evictions() {
        let before = agent(20_000.0, 50_000.0, 0.0);
        let full = agent(120_000.0, 150_000.0, 0.0);
        assert_eq!(fill_present(&before, &full, &full), 100_000.0);
        // The CRR's own flows are not the fill's.
        assert_eq!(fill_present(&before, &full, &agent(145_000.0, 175_000.0, 0.0)), 100_000.0);
        assert_eq!(shortfall(100_000, &before, &full, &agent(145_000.0, 175_000.0, 0.0)), None);
        // Leftover flows do not stand in for missing ones.
        let short = agent(119_000.0, 149_000.0, 0.0);
        let why = shortfall(100_000, &before, &short, &short).expect("short");
        assert!(why.contains("99000 of the fill's 100000") && why.contains("before the CRR"), "{why}");
        // An eviction during the CRR may have taken one of them.
        let evicted = agent(131_072.0, 175_000.0, 3.0);
        let why = shortfall(100_000, &before, &full, &evicted).expect("evicted");
        assert!(why.contains("after the CRR"), "{why}");
    }

    #[test]
    fn conntrack_counts_the_mapping_or_else_the_table() {
        let before = Occupancy { table: 30_000.0, mapping: Some(0.0), ..Default::default() };
        let full = Occupancy { table: 130_000.0, mapping: Some(100_000.0), ..Default::default() };
        assert_eq!(shortfall(100_000, &before, &full, &full), None);
        let leftovers = Occupancy { table: 130_000.0, mapping: Some(90_000.0), ..Default::default() };
        assert!(shortfall(100_000, &before, &leftovers, &full).is_some(), "the mapping's entries decide");
        let blind = Occupancy { table: 99_999.0, ..Default::default() };
        assert!(shortfall(100_000, &Occupancy::default(), &blind, &blind).is_some());
        let blind = Occupancy { table: 100_000.0, ..Default::default() };
        assert_eq!(shortfall(100_000, &Occupancy::default(), &blind, &blind), None);
    }
}
