//! The policy programs against the decision: every probe of the truth table
//! (`crate::network_policy::tests`), as a crafted packet the kernel runs through the programs
//! with BPF_PROG_TEST_RUN, after the maps were written from the compiled tables by
//! [`super::entries`]. A probe is allowed when the source's program (its egress) and the
//! destination's (its ingress) both let its first packet through; the reply of an allowed
//! probe must then pass both ways, whatever the rules say of its direction (the flow).
//!
//! A test run's skb is on the loopback device of the test's network namespace: both pods of a
//! probe are endpoints (the source 1, the destination 2), and the loopback is the host end of
//! the one whose program runs, in turn.
//!
//! Needs root (CAP_BPF), as `cargo xtask test` runs. Real traffic: [`traffic`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::entries::{entries, Entries, Hooked};
use super::object::{HOST_IN, HOST_OUT, OBJECT};
use super::table::Table;
use crate::dataplane::kernel_tests::run_tc;
use crate::dataplane::loader::Loaded;
use crate::network_policy::compile::compile;
use crate::network_policy::decide::{decide, Probe, ProbeProtocol};
use crate::network_policy::tests::{cases, cluster, probe};
use crate::network_policy::{NetworkName, Protocol};

mod traffic;

const NEXT: u32 = u32::MAX; // TC_ACT_UNSPEC
const SHOT: u32 = 2;
/// The skb of a test run belongs to the loopback device.
const LO: u32 = 1;
const CLIENT_PORT: u16 = 40_000;

struct Fixture {
    loaded: Loaded,
    table: Table,
    /// What the maps hold.
    current: Vec<Entries>,
}

impl Fixture {
    fn new() -> Fixture {
        let mut loaded = Loaded::load_object(&OBJECT, None).expect("loading plexus-policy (run as root)");
        let table = Table::take(loaded.ebpf_mut()).expect("the maps");
        Fixture { loaded, table, current: Vec::new() }
    }

    /// The maps as `networks` (each network's entries) make them.
    fn write(&mut self, networks: Vec<Entries>) {
        self.table.apply(&self.current, &networks).expect("writing the maps");
        self.current = networks;
    }

    fn forget_flows(&mut self) {
        self.table.remove_flows_of(&BTreeSet::from([1, 2])).expect("removing the flows");
        assert!(self.table.flows().expect("the flows").is_empty());
    }

    fn run(&self, program: &str, packet: &[u8]) -> u32 {
        let (verdict, _) = run_tc(self.loaded.ebpf(), program, packet);
        assert!(verdict == NEXT || verdict == SHOT, "{program}: verdict {verdict}");
        verdict
    }
}

/// An Ethernet frame of `probe`'s first packet (or its reply): IPv4 or IPv6, then TCP (a SYN),
/// UDP or SCTP from [`CLIENT_PORT`] to the probe's port, or an ICMP echo request (reply).
fn frame(probe: &Probe, reply: bool) -> Vec<u8> {
    let (src, dst) =
        if reply { (probe.destination, probe.source) } else { (probe.source, probe.destination) };
    let port = probe.port.unwrap_or(0);
    let (sport, dport) = if reply { (port, CLIENT_PORT) } else { (CLIENT_PORT, port) };
    let (proto, l4): (u8, Vec<u8>) = match probe.protocol {
        ProbeProtocol::Known(p) => {
            let mut l4 = [sport.to_be_bytes(), dport.to_be_bytes()].concat();
            match p {
                Protocol::Tcp => {
                    // Sequence, acknowledgement, offset 5 words, SYN (or SYN+ACK), window.
                    l4.extend_from_slice(&[
                        0,
                        0,
                        0,
                        1,
                        0,
                        0,
                        0,
                        0,
                        0x50,
                        if reply { 0x12 } else { 0x02 },
                        0xff,
                        0xff,
                    ]);
                    l4.extend_from_slice(&[0; 4]);
                }
                Protocol::Udp => l4.extend_from_slice(&[0, 12, 0, 0, b'p', b'x', b'p', b'x']),
                Protocol::Sctp => l4.extend_from_slice(&[0; 8]),
            }
            (p.number(), l4)
        }
        ProbeProtocol::Other(_) => {
            let v6 = src.is_ipv6();
            let kind = match (v6, reply) {
                (false, false) => 8,
                (false, true) => 0,
                (true, false) => 128,
                (true, true) => 129,
            };
            (if v6 { 58 } else { 1 }, vec![kind, 0, 0, 0, 0x12, 0x34, 0, 1])
        }
    };
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            let total = (20 + l4.len()) as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("a probe between families: {probe:?}"),
    }
    f.extend_from_slice(&l4);
    f
}

#[test]
fn kernel_the_programs_agree_with_the_decision_on_the_truth_table() {
    let mut f = Fixture::new();
    let c = cluster();
    let (mut probes, mut wrong) = (0, Vec::new());
    for case in cases() {
        let tables = compile(&case.policies, &c);
        // Network ids: their order in the compiled tables, from 1.
        let ids: BTreeMap<&NetworkName, u32> = tables.keys().zip(1..).collect();
        for (net, text, _) in &case.probes {
            let p = probe(&c, net, text);
            let decided = decide(&case.policies, &c, &p);
            // Both pods hooked, the loopback the host end of the source (1) or the destination
            // (2).
            let side = |running: u32| -> Vec<Entries> {
                let mut hooked: BTreeMap<String, Hooked> = BTreeMap::new();
                for (address, id) in [(p.source, 1), (p.destination, 2)] {
                    if let Some(pod) = c.pod_at(&p.network, address) {
                        let host_end = (id == running).then_some(LO);
                        hooked.insert(format!("{}/{}", pod.namespace, pod.name), Hooked { id, host_end });
                    }
                }
                let nothing = BTreeMap::new();
                tables
                    .iter()
                    .map(|(n, t)| entries(ids[n], t, if *n == p.network { &hooked } else { &nothing }))
                    .collect()
            };
            let (source, destination) = (side(1), side(2));
            f.forget_flows();
            f.write(source.clone());
            let egress = f.run(HOST_IN, &frame(&p, false));
            f.write(destination);
            let ingress = f.run(HOST_OUT, &frame(&p, false));
            let allowed = egress == NEXT && ingress == NEXT;
            probes += 1;
            if allowed != decided.allowed() {
                wrong.push(format!(
                    "{}: {net} {text}: egress {}, ingress {}; the decision says {decided}",
                    case.name,
                    if egress == NEXT { "passes" } else { "drops" },
                    if ingress == NEXT { "passes" } else { "drops" },
                ));
                continue;
            }
            if allowed {
                // The reply: out of the destination, into the source, on the flows the first
                // packet made.
                let out = f.run(HOST_IN, &frame(&p, true));
                f.write(source);
                let back = f.run(HOST_OUT, &frame(&p, true));
                if out != NEXT || back != NEXT {
                    wrong.push(format!("{}: {net} {text}: allowed, but its reply is dropped", case.name));
                }
            }
        }
    }
    assert!(probes >= 150, "{probes} probes");
    assert!(wrong.is_empty(), "{} of {probes} probes wrong:\n{}", wrong.len(), wrong.join("\n"));
}
