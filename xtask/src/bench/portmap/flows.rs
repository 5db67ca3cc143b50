//! crr_rate_100k_flows: how full each side's flow table is around the CRR run, and whether
//! the fill's flows were all there.
//!
//! - plexus: `plexus-agent portmap list --json` counts the flows of each mapping in the pinned
//!   table right now (the table's entries are the sum, the fill's those of its UDP mapping);
//!   the agent's `plexus_portmap_flows` is recorded too, but its reaper publishes it once a
//!   pass (every 5 s with the default timeouts), so it may lag a fill of a second or two;
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
    /// The agent's flow table; the fill's flows are those of its UDP mapping of host `port`.
    Agent { agent: &'a Agent, port: u16 },
    /// Conntrack in the node namespace; the fill's entries are UDP to `dst`:`dport`.
    Conntrack { node: &'a Netns, dst: &'a str, dport: u16 },
    /// No table (no NAT).
    None,
}

/// One reading of a side's table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Occupancy {
    /// Every entry: the flows of every mapping, or `nf_conntrack_count`.
    pub table: f64,
    /// Entries of the fill's mapping, when they can be told apart.
    pub mapping: Option<f64>,
    /// plexus: `plexus_portmap_flows` as the agent last published it.
    pub published: Option<f64>,
    /// plexus: the mappings `portmap list` shows (`udp 10.77.0.1:17001`), to tell a mapping
    /// that is missing from one without flows.
    pub listed: Option<Vec<String>>,
}

impl Occupancy {
    pub fn to_json(&self) -> Value {
        json!({"table": self.table, "mapping": self.mapping, "plexus_portmap_flows": self.published,
               "mappings": self.listed})
    }
}

impl FlowTable<'_> {
    /// How full the table is now; `None` for a side without one.
    pub fn read(&self) -> anyhow::Result<Option<Occupancy>> {
        match *self {
            FlowTable::Agent { agent, port } => {
                let rows = agent.portmap_list()?;
                let (table, mapping) = mapping_flows(&rows, "udp", port);
                let published = agent.metric("plexus_portmap_flows", &[])?;
                let listed = rows
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {}",
                            r["protocol"].as_str().unwrap_or("?"),
                            r["host"].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                Ok(Some(Occupancy { table, mapping: Some(mapping), published, listed: Some(listed) }))
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
                Ok(Some(Occupancy { table, mapping, published: None, listed: None }))
            }
            FlowTable::None => Ok(None),
        }
    }

    pub fn what(&self) -> &'static str {
        match self {
            FlowTable::Agent { .. } => {
                "flows per mapping from plexus-agent portmap list --json; plexus_portmap_flows as last published"
            }
            FlowTable::Conntrack { .. } => {
                "nf_conntrack_count and /proc/net/nf_conntrack of the node namespace"
            }
            FlowTable::None => "none",
        }
    }
}

/// (flows of every mapping, flows of the `protocol` mapping of host port `port`) from the rows
/// of `plexus-agent portmap list --json`.
pub fn mapping_flows(rows: &[Value], protocol: &str, port: u16) -> (f64, f64) {
    let flows = |r: &Value| r["flows"].as_f64().unwrap_or(0.0);
    let suffix = format!(":{port}");
    let ours = |r: &&Value| {
        r["protocol"].as_str().is_some_and(|p| p.eq_ignore_ascii_case(protocol))
            && r["host"].as_str().is_some_and(|h| h.ends_with(&suffix))
    };
    (rows.iter().map(flows).sum(), rows.iter().filter(ours).map(flows).sum())
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

/// Flows of the fill present in the table: the entries of its mapping where the table tells
/// them apart, otherwise every entry.
pub fn fill_present(now: &Occupancy) -> f64 {
    now.mapping.unwrap_or(now.table)
}

/// Why the table did not hold the fill's `flows` flows before and after the CRR, if it did not.
pub fn shortfall(flows: u32, before_crr: &Occupancy, after_crr: &Occupancy) -> Option<String> {
    let want = f64::from(flows);
    let check = |when: &str, now: &Occupancy| {
        let present = fill_present(now);
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

    #[test]
    fn plexus_counts_the_flows_of_the_fill_mapping() {
        let rows = vec![
            json!({"protocol": "tcp", "host": "10.77.0.1:17000", "flows": 25_000}),
            json!({"protocol": "udp", "host": "10.77.0.1:17001", "flows": 100_000}),
            json!({"protocol": "tcp", "host": "10.77.0.1:17001", "flows": 3}),
            json!({"protocol": "udp", "host": "[fd00::1]:17001", "flows": 2}),
            json!({"protocol": "udp", "host": "10.77.0.1:170010", "flows": 7}),
        ];
        assert_eq!(mapping_flows(&rows, "udp", 17001), (125_012.0, 100_002.0));
        assert_eq!(mapping_flows(&rows, "sctp", 17001), (125_012.0, 0.0));
        assert_eq!(mapping_flows(&[], "udp", 17001), (0.0, 0.0));
    }

    #[test]
    fn the_mapping_decides_where_there_is_one() {
        let full =
            Occupancy { table: 130_000.0, mapping: Some(100_000.0), published: Some(20_000.0), listed: None };
        assert_eq!(shortfall(100_000, &full, &full), None);
        let leftovers = Occupancy { table: 130_000.0, mapping: Some(90_000.0), ..Default::default() };
        let why = shortfall(100_000, &leftovers, &full).expect("short before");
        assert!(why.contains("90000 of the fill's 100000") && why.contains("before the CRR"), "{why}");
        let why = shortfall(100_000, &full, &leftovers).expect("short after");
        assert!(why.contains("after the CRR"), "{why}");
        let blind = Occupancy { table: 99_999.0, ..Default::default() };
        assert!(shortfall(100_000, &blind, &blind).is_some());
        let blind = Occupancy { table: 100_000.0, ..Default::default() };
        assert_eq!(shortfall(100_000, &blind, &blind), None);
    }
}
