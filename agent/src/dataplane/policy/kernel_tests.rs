//! The policy programs against the decision: every probe of the truth table
//! (`crate::network_policy::tests`), as a crafted packet the kernel runs through the programs
//! with BPF_PROG_TEST_RUN, after the maps were written from the compiled tables by
//! [`super::entries`]. A probe is allowed when the source's program (its egress) and the
//! destination's (its ingress) both let its first packet through; the reply of an allowed
//! probe must then pass both ways, whatever the rules say of its direction (the flow).
//!
//! A test run's skb is on the loopback device of the test's network namespace: the endpoint
//! under test is written at that (namespace cookie, ifindex), one side at a time.
//!
//! Needs root (CAP_BPF), as `cargo xtask test` runs.

use std::collections::BTreeMap;
use std::net::IpAddr;

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{HashMap, MapData};
use aya::programs::SchedClassifier;
use aya::{Ebpf, EbpfLoader};
use plexus_ebpf_common::policy::{
    Endpoint, EndpointKey, IdentityKey, PolicyFlow, PolicyFlowKey, RuleKey, MAP_ENDPOINTS, MAP_FLOWS,
    MAP_IDENTITIES, MAP_RULES,
};

use super::entries::{entries, Entries, Hooked};
use super::{BYTES, FROM_POD, TO_POD};
use crate::dataplane::kernel_tests::run_tc;
use crate::dataplane::pin::netns_cookie;
use crate::network_policy::compile::compile;
use crate::network_policy::decide::{decide, Cluster, Probe, ProbeProtocol};
use crate::network_policy::tests::{cases, cluster, probe};
use crate::network_policy::{NetworkName, Protocol};

const NEXT: u32 = u32::MAX; // TC_ACT_UNSPEC
const SHOT: u32 = 2;
/// The skb of a test run belongs to the loopback device.
const LO: u32 = 1;
const CLIENT_PORT: u16 = 40_000;

struct Fixture {
    ebpf: Ebpf,
    endpoints: HashMap<MapData, EndpointKey, Endpoint>,
    identities: LpmTrie<MapData, IdentityKey, u32>,
    rules: LpmTrie<MapData, RuleKey, u8>,
    flows: HashMap<MapData, PolicyFlowKey, PolicyFlow>,
    here: EndpointKey,
}

impl Fixture {
    fn new() -> Fixture {
        let mut ebpf = EbpfLoader::new().btf(None).load(BYTES).expect("loading plexus-policy (run as root)");
        for name in [FROM_POD, TO_POD] {
            let prog: &mut SchedClassifier =
                ebpf.program_mut(name).and_then(|p| p.try_into().ok()).expect("a TC program");
            prog.load().expect("the verifier accepts the program");
        }
        let mut take = |name: &str| ebpf.take_map(name).unwrap_or_else(|| panic!("no map {name}"));
        let endpoints = HashMap::try_from(take(MAP_ENDPOINTS)).expect("endpoints");
        let identities = LpmTrie::try_from(take(MAP_IDENTITIES)).expect("identities");
        let rules = LpmTrie::try_from(take(MAP_RULES)).expect("rules");
        let flows = HashMap::try_from(take(MAP_FLOWS)).expect("flows");
        let here = EndpointKey { netns_cookie: netns_cookie().expect("netns cookie"), ifindex: LO, pad: 0 };
        Fixture { ebpf, endpoints, identities, rules, flows, here }
    }

    /// The maps as `networks` (each network's entries) make them, with the endpoint of this
    /// side only.
    fn write(&mut self, networks: &[Entries], endpoint: Option<Endpoint>) {
        let keys: Vec<EndpointKey> = self.endpoints.keys().map(|k| k.expect("key")).collect();
        for k in keys {
            self.endpoints.remove(&k).expect("removing an endpoint");
        }
        if let Some(endpoint) = endpoint {
            self.endpoints.insert(self.here, endpoint, 0).expect("writing the endpoint");
        }
        let keys: Vec<Key<IdentityKey>> = self.identities.keys().map(|k| k.expect("key")).collect();
        for k in keys {
            self.identities.remove(&k).expect("removing an identity");
        }
        let keys: Vec<Key<RuleKey>> = self.rules.keys().map(|k| k.expect("key")).collect();
        for k in keys {
            self.rules.remove(&k).expect("removing a rule");
        }
        for e in networks {
            for ((len, key), identity) in &e.identities {
                self.identities.insert(&Key::new(*len, *key), identity, 0).expect("writing an identity");
            }
            for (len, key) in &e.rules {
                self.rules.insert(&Key::new(*len, *key), 1, 0).expect("writing a rule");
            }
        }
    }

    fn forget_flows(&mut self) {
        let keys: Vec<PolicyFlowKey> = self.flows.keys().map(|k| k.expect("key")).collect();
        for k in keys {
            self.flows.remove(&k).expect("removing a flow");
        }
    }

    fn run(&self, program: &str, packet: &[u8]) -> u32 {
        let (verdict, _) = run_tc(&self.ebpf, program, packet);
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

/// The pod (`namespace/name`) that has `address` on `network`.
fn pod_of(cluster: &Cluster, network: &NetworkName, address: IpAddr) -> Option<String> {
    cluster
        .pods
        .iter()
        .find(|p| p.addresses.get(network).is_some_and(|a| a.contains(&address)))
        .map(|p| format!("{}/{}", p.namespace, p.name))
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
            // The source's program as endpoint 1, the destination's as endpoint 2 (each hooked
            // at this namespace's loopback in turn).
            let side = |address: IpAddr, id: u32| -> (Vec<Entries>, Option<Endpoint>) {
                let hooked: BTreeMap<String, Hooked> = pod_of(&c, &p.network, address)
                    .map(|pod| (pod, Hooked { key: f.here, id }))
                    .into_iter()
                    .collect();
                let nothing = BTreeMap::new();
                let all: Vec<Entries> = tables
                    .iter()
                    .map(|(n, t)| entries(ids[n], t, if *n == p.network { &hooked } else { &nothing }))
                    .collect();
                let endpoint = all.iter().flat_map(|e| e.endpoints.iter()).map(|(_, e)| *e).next();
                (all, endpoint)
            };
            let (source, destination) = (side(p.source, 1), side(p.destination, 2));
            f.forget_flows();
            f.write(&source.0, source.1);
            let egress = f.run(FROM_POD, &frame(&p, false));
            f.write(&destination.0, destination.1);
            let ingress = f.run(TO_POD, &frame(&p, false));
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
                let out = f.run(FROM_POD, &frame(&p, true));
                f.write(&source.0, source.1);
                let back = f.run(TO_POD, &frame(&p, true));
                if out != NEXT || back != NEXT {
                    wrong.push(format!("{}: {net} {text}: allowed, but its reply is dropped", case.name));
                }
            }
        }
    }
    assert!(probes >= 150, "{probes} probes");
    assert!(wrong.is_empty(), "{} of {probes} probes wrong:\n{}", wrong.len(), wrong.join("\n"));
}
