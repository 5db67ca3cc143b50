//! Tracked flows for people (pure): `plexus-agent portmap flows` rows, the names of flow
//! states, the table's summary, and the flow count of each mapping for `portmap list`.

use std::collections::BTreeMap;

use plexus_ebpf_common::flow::{
    Flow, FlowKey, FlowStats, FLOW_FIN_CLIENT, FLOW_FIN_POD, FLOW_REPLIED, FLOW_RST, FLOW_SNAT, NSEC_PER_SEC,
};
use plexus_ebpf_common::{Addr, Endpoint, PROTO_SCTP, PROTO_TCP, PROTO_UDP};
use serde::Serialize;

use super::entries::{map_endpoint_text, protocol_text};
use crate::dataplane::maps::columns;
use crate::dataplane::maps::words_addr;

/// The name of a flow's state: TCP `syn` (no reply yet), `established`, `closing` (a FIN from
/// one side), `closed` (FINs from both), `reset`; UDP `udp` (no reply yet), `udp-replied`;
/// `sctp` (not followed chunk by chunk).
pub fn state_name(proto: u8, state: u8) -> &'static str {
    match proto {
        PROTO_TCP if state & FLOW_RST != 0 => "reset",
        PROTO_TCP if state & (FLOW_FIN_CLIENT | FLOW_FIN_POD) == FLOW_FIN_CLIENT | FLOW_FIN_POD => "closed",
        PROTO_TCP if state & (FLOW_FIN_CLIENT | FLOW_FIN_POD) != 0 => "closing",
        PROTO_TCP if state & FLOW_REPLIED != 0 => "established",
        PROTO_TCP => "syn",
        PROTO_UDP if state & FLOW_REPLIED != 0 => "udp-replied",
        PROTO_UDP => "udp",
        PROTO_SCTP => "sctp",
        _ => "unknown",
    }
}

/// One tracked flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowRow {
    pub protocol: String,
    /// The client as it sent the request.
    pub client: String,
    /// The host endpoint it reached (which of the mappings).
    pub host: String,
    /// The pod endpoint it was translated to.
    pub pod: String,
    /// The client as the pod sees it: the client, or the host IP for a pod reaching a host
    /// port of its own (hairpin, `snat`).
    pub peer: String,
    pub state: &'static str,
    /// Seconds since the flow was made, and since its last packet.
    pub age_secs: u64,
    pub idle_secs: u64,
    pub snat: bool,
}

/// The row of a flow, at `now_ns` (the monotonic clock of its times).
pub fn row(key: &FlowKey, flow: &Flow, now_ns: u64) -> FlowRow {
    FlowRow {
        protocol: protocol_text(flow.host.proto),
        client: map_endpoint_text(&flow.client, flow.client_port),
        host: map_endpoint_text(&flow.host.addr, flow.host.port_be),
        pod: map_endpoint_text(&key.pod, key.pod_port),
        peer: map_endpoint_text(&key.peer, key.peer_port),
        state: state_name(flow.host.proto, flow.state),
        age_secs: now_ns.saturating_sub(flow.created_ns) / NSEC_PER_SEC,
        idle_secs: now_ns.saturating_sub(flow.seen_ns) / NSEC_PER_SEC,
        snat: flow.state & FLOW_SNAT != 0,
    }
}

/// Rows of `flows`, ordered by host endpoint, pod endpoint and client.
pub fn rows(flows: &[(FlowKey, Flow)], now_ns: u64) -> Vec<FlowRow> {
    let ep = |addr: &Addr, port_be: u16| (words_addr(addr), u16::from_be(port_be));
    let mut sorted: Vec<&(FlowKey, Flow)> = flows.iter().collect();
    sorted.sort_by_key(|(k, f)| {
        (ep(&f.host.addr, f.host.port_be), f.host.proto, ep(&k.pod, k.pod_port), ep(&f.client, f.client_port))
    });
    sorted.into_iter().map(|(k, f)| row(k, f, now_ns)).collect()
}

/// The flow table as a whole.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TableSummary {
    /// Flows in the table, and its size.
    pub live: u64,
    pub capacity: u64,
    /// Flows made, removed (expired or of deleted mappings) and evicted (the table was full).
    pub created: u64,
    pub removed: u64,
    pub evicted: u64,
    /// Packets translated: requests to the pod, replies, ICMP errors.
    pub forward: u64,
    pub reverse: u64,
    pub icmp: u64,
}

impl TableSummary {
    pub fn new(live: u64, capacity: u64, s: &FlowStats) -> TableSummary {
        TableSummary {
            live,
            capacity,
            created: s.created,
            removed: s.removed,
            evicted: s.evicted(live),
            forward: s.forward,
            reverse: s.reverse,
            icmp: s.icmp,
        }
    }

    /// One line for people.
    pub fn line(&self) -> String {
        format!(
            "flows {}/{}, created {}, removed {}, evicted {}; translations: forward {}, reverse {}, icmp {}",
            self.live,
            self.capacity,
            self.created,
            self.removed,
            self.evicted,
            self.forward,
            self.reverse,
            self.icmp
        )
    }
}

/// `plexus-agent portmap flows --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowListing {
    pub flows: Vec<FlowRow>,
    pub table: TableSummary,
}

/// A table of flows for people, then the summary line.
pub fn render(listing: &FlowListing) -> String {
    let mut lines =
        vec![["PROTO", "CLIENT", "HOST", "POD", "STATE", "AGE", "IDLE"].map(str::to_owned).to_vec()];
    for r in &listing.flows {
        lines.push(vec![
            r.protocol.clone(),
            r.client.clone(),
            r.host.clone(),
            r.pod.clone(),
            if r.snat { format!("{} (hairpin)", r.state) } else { r.state.to_owned() },
            format!("{}s", r.age_secs),
            format!("{}s", r.idle_secs),
        ]);
    }
    format!("{}\n{}", columns(&lines), listing.table.line())
}

/// How many flows each mapping (host endpoint) has.
pub fn counts_by_host(flows: &[(FlowKey, Flow)]) -> BTreeMap<Endpoint, usize> {
    let mut counts = BTreeMap::new();
    for (_, f) in flows {
        *counts.entry(f.host).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::maps::addr_words;
    use plexus_ebpf_common::Rewrite;

    fn a(ip: &str) -> Addr {
        addr_words(ip.parse().unwrap())
    }

    fn flow(proto: u8, host: (&str, u16), client: (&str, u16), state: u8) -> Flow {
        Flow {
            host: Endpoint::new(a(host.0), host.1.to_be(), proto),
            client: a(client.0),
            client_port: client.1.to_be(),
            state,
            rewrite: Rewrite::default(),
            created_ns: 5 * NSEC_PER_SEC,
            seen_ns: 65 * NSEC_PER_SEC + 1,
            ..Flow::default()
        }
    }

    fn key(pod: (&str, u16), peer: (&str, u16), proto: u8) -> FlowKey {
        FlowKey::new(a(pod.0), pod.1.to_be(), a(peer.0), peer.1.to_be(), proto)
    }

    #[test]
    fn states_are_named_by_protocol() {
        let names: Vec<&str> = [
            (PROTO_TCP, 0),
            (PROTO_TCP, FLOW_REPLIED),
            (PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT),
            (PROTO_TCP, FLOW_REPLIED | FLOW_FIN_POD),
            (PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD),
            (PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_RST),
            (PROTO_TCP, FLOW_SNAT),
            (PROTO_UDP, FLOW_SNAT),
            (PROTO_UDP, FLOW_REPLIED),
            (PROTO_SCTP, FLOW_REPLIED),
            (1, 0),
        ]
        .iter()
        .map(|&(p, s)| state_name(p, s))
        .collect();
        assert_eq!(
            names,
            [
                "syn",
                "established",
                "closing",
                "closing",
                "closed",
                "reset",
                "syn",
                "udp",
                "udp-replied",
                "sctp",
                "unknown"
            ]
        );
    }

    #[test]
    fn a_row_shows_every_endpoint_in_host_byte_order_and_whole_seconds() {
        let f = flow(PROTO_TCP, ("10.77.0.1", 8080), ("10.77.0.200", 40000), FLOW_REPLIED);
        let k = key(("10.77.0.5", 80), ("10.77.0.200", 40000), PROTO_TCP);
        let r = row(&k, &f, 70 * NSEC_PER_SEC);
        assert_eq!(
            r,
            FlowRow {
                protocol: "tcp".into(),
                client: "10.77.0.200:40000".into(),
                host: "10.77.0.1:8080".into(),
                pod: "10.77.0.5:80".into(),
                peer: "10.77.0.200:40000".into(),
                state: "established",
                age_secs: 65,
                idle_secs: 4,
                snat: false,
            }
        );
        // A clock behind the flow's times (another boot's pins cannot be, but be safe): 0.
        assert_eq!(row(&k, &f, 0).age_secs, 0);
        let json = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["age_secs", "client", "host", "idle_secs", "peer", "pod", "protocol", "snat", "state"]
        );
    }

    #[test]
    fn hairpin_flows_show_the_host_ip_as_the_pods_peer() {
        let f = flow(PROTO_UDP, ("fd00:77::1", 53), ("fd00:77::5", 45000), FLOW_SNAT);
        let k = key(("fd00:77::5", 5353), ("fd00:77::1", 45000), PROTO_UDP);
        let listing = FlowListing {
            flows: rows(&[(k, f)], 70 * NSEC_PER_SEC),
            table: TableSummary::new(
                1,
                1024,
                &FlowStats { created: 3, removed: 1, forward: 9, reverse: 8, icmp: 0 },
            ),
        };
        let r = &listing.flows[0];
        assert_eq!(
            (r.client.as_str(), r.peer.as_str(), r.snat),
            ("[fd00:77::5]:45000", "[fd00:77::1]:45000", true)
        );
        let text = render(&listing);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("PROTO  CLIENT"), "{text}");
        assert!(lines[1].contains("udp (hairpin)"), "{text}");
        assert_eq!(
            lines[2],
            "flows 1/1024, created 3, removed 1, evicted 1; translations: forward 9, reverse 8, icmp 0"
        );
        let json = serde_json::to_value(&listing).unwrap();
        assert_eq!(json["table"]["evicted"], 1);
        assert_eq!(json["flows"][0]["state"], "udp");
    }

    #[test]
    fn flows_are_counted_per_host_endpoint_and_sorted_by_it() {
        let h1 = ("10.77.0.1", 8080);
        let h2 = ("10.77.0.1", 8081);
        let flows = vec![
            (key(("10.77.0.5", 80), ("10.0.0.9", 1), PROTO_TCP), flow(PROTO_TCP, h2, ("10.0.0.9", 1), 0)),
            (key(("10.77.0.5", 80), ("10.0.0.9", 2), PROTO_TCP), flow(PROTO_TCP, h1, ("10.0.0.9", 2), 0)),
            (key(("10.77.0.5", 80), ("10.0.0.8", 3), PROTO_TCP), flow(PROTO_TCP, h1, ("10.0.0.8", 3), 0)),
        ];
        let counts = counts_by_host(&flows);
        let ep = |h: (&str, u16)| Endpoint::new(a(h.0), h.1.to_be(), PROTO_TCP);
        assert_eq!(counts.get(&ep(h1)), Some(&2));
        assert_eq!(counts.get(&ep(h2)), Some(&1));
        assert_eq!(counts.len(), 2);
        let clients: Vec<String> =
            rows(&flows, 0).into_iter().map(|r| format!("{} {}", r.host, r.client)).collect();
        assert_eq!(
            clients,
            ["10.77.0.1:8080 10.0.0.8:3", "10.77.0.1:8080 10.0.0.9:2", "10.77.0.1:8081 10.0.0.9:1"]
        );
    }
}
