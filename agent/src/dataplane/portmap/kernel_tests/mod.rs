//! The TC programs on crafted packets, run by the kernel with BPF_PROG_TEST_RUN: the output
//! bytes are compared field by field and every checksum is verified by recomputing it from
//! scratch (Internet checksums with their pseudo-headers, SCTP's CRC32c), in the packets ICMP
//! errors quote too.
//!
//! - here: translation both ways, hairpin, what is left untouched, two host ports to one
//!   container port, the agent's writes (removal, reconcile);
//! - [`flows`]: the flow table: the entries the programs make, TCP close and reset, timeouts on
//!   a fixed clock, the agent's reaper, LRU eviction;
//! - [`icmp`]: ICMP and ICMPv6 errors about tracked flows;
//! - [`packets`]: building frames and verifying them;
//! - [`xdp`]: the XDP program, with TC answering the flows it begins.
//!
//! Needs root (CAP_BPF), as `cargo xtask test` runs.

mod flows;
mod icmp;
mod packets;
mod xdp;

use aya::programs::Program;
use plexus_ebpf_common::flow::{Flow, FlowKey, FlowStats, Settings, Timeouts, NSEC_PER_SEC};
use plexus_ebpf_common::shape::{Shape, ShapeKey, HOOK_EGRESS};
use plexus_testkit::Netns;

use super::entries::Entry;
use super::mapper::{self, TC_EGRESS, TC_INGRESS};
use super::table::Tables;
use crate::dataplane::attach::Hook;
use crate::dataplane::kernel_tests::run_tc;
use crate::dataplane::loader::Loaded;
use crate::dataplane::maps::addr_words;
use crate::spec::selection::Protocol;
use packets::*;

const NEXT: u32 = u32::MAX; // TC_ACT_UNSPEC (-1): the packet goes on
const REDIRECT: u32 = 7;
const SHOT: u32 = 2;

/// The skb of a test run belongs to the loopback device.
const LO: u32 = 1;
/// The flow table of most tests (the default size would preallocate tens of MiB per test).
const TEST_FLOWS: u32 = 1024;
/// A fixed "now" of tests that set the programs' clock.
const T0: u64 = 1_000 * NSEC_PER_SEC;
const SEC: u64 = NSEC_PER_SEC;

struct Fixture {
    loaded: Loaded,
    tables: Tables,
    settings: Settings,
}

impl Fixture {
    /// The object with a flow table of [`TEST_FLOWS`], on the kernel's clock with the default
    /// timeouts (as the agent starts it).
    fn new() -> Fixture {
        Fixture::with_flows(TEST_FLOWS)
    }

    fn with_flows(max_flows: u32) -> Fixture {
        let mut loaded =
            mapper::load_with(None, max_flows).expect("loading the BPF object (run the tests as root)");
        let tables = Tables::take(loaded.ebpf_mut()).expect("maps");
        let mut f = Fixture { loaded, tables, settings: Settings::default() };
        f.set(Settings { netns_cookie: 0, fixed_now_ns: 0, timeouts: Timeouts::default() });
        f
    }

    fn set(&mut self, settings: Settings) {
        self.settings = settings;
        self.tables.set_settings(&settings).expect("writing the settings");
    }

    /// The programs' clock stops at `now` (nanoseconds).
    fn at(&mut self, now: u64) {
        self.set(Settings { fixed_now_ns: now, ..self.settings });
    }

    fn run(&self, program: &str, packet: &[u8]) -> (u32, Vec<u8>) {
        run_tc(self.loaded.ebpf(), program, packet)
    }

    /// Runs `s` through `pm_tc_in`.
    fn send(&self, s: &Spec) -> (u32, Vec<u8>) {
        self.run(TC_INGRESS, &packet(s))
    }

    /// Asserts that `s` passes `pm_tc_in` byte for byte.
    fn assert_untouched(&self, s: &Spec, why: &str) {
        let p = packet(s);
        assert_eq!(self.run(TC_INGRESS, &p), (NEXT, p), "{why}: untouched");
    }

    /// The counters of the mapping whose host endpoint `e` has.
    fn counters(&self, e: &Entry) -> plexus_ebpf_common::Counters {
        let row = self.tables.list().into_iter().find(|(host, _, _)| *host == e.host_endpoint());
        row.map(|(_, _, c)| c).unwrap_or_default()
    }

    fn flow_stats(&self) -> FlowStats {
        self.tables.flow_stats()
    }

    fn flows(&self) -> Vec<(FlowKey, Flow)> {
        self.tables.flows()
    }

    fn flow(&self, key: &FlowKey) -> Option<Flow> {
        self.flows().into_iter().find(|(k, _)| k == key).map(|(_, f)| f)
    }
}

fn entry(
    protocol: Protocol,
    host: &str,
    host_port: u16,
    pod: &str,
    container_port: u16,
    deliver: (u32, Hook),
) -> Entry {
    Entry {
        protocol,
        host_ip: host.parse().unwrap(),
        host_port,
        pod_ip: pod.parse().unwrap(),
        container_port,
        pod_mac: crate::netlink::Mac(POD_MAC).to_string(),
        host_mac: crate::netlink::Mac(HOST_MAC).to_string(),
        deliver_ifindex: deliver.0,
        deliver: deliver.1,
        via_bridge: false,
        xdp_redirect: false,
    }
}

/// The key of the flow whose replies go from `pod` to `peer`.
fn flow_key(proto: Protocol, pod: (&str, u16), peer: (&str, u16)) -> FlowKey {
    FlowKey::new(
        addr_words(ip(pod.0)),
        pod.1.to_be(),
        addr_words(ip(peer.0)),
        peer.1.to_be(),
        proto_number(proto),
    )
}

// ---- the tests ----

/// For each protocol and family: the forward DNAT, the reverse SNAT of the tracked reply,
/// checksums, counters.
fn forward_and_reverse(proto: Protocol, host: &'static str, pod: &'static str, client: &'static str) {
    let mut f = Fixture::new();
    let e = entry(proto, host, 8080, pod, 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();

    let request = packet(&spec(proto, (client, 40000), (host, 8080)));
    let (verdict, out) = f.run(TC_INGRESS, &request);
    assert_eq!(verdict, REDIRECT, "delivered to the pod's veth");
    assert_eq!(out.len(), request.len());
    let got = parse_and_verify(&out);
    assert_eq!(got.dst, (ip(pod), 80));
    assert_eq!(got.src, (ip(client), 40000), "the client stays visible to the pod");
    assert_eq!(got.dst_mac, POD_MAC);
    assert_eq!(got.src_mac, CLIENT_MAC);
    assert!(got.payload_intact);

    let reply = packet(&spec(proto, (pod, 80), (client, 40000)));
    let (verdict, out) = f.run(TC_INGRESS, &reply);
    assert_eq!(verdict, NEXT, "replies go on to the client");
    let got = parse_and_verify(&out);
    assert_eq!(got.src, (ip(host), 8080));
    assert_eq!(got.dst, (ip(client), 40000));
    assert_eq!((got.dst_mac, got.src_mac), (HOST_MAC, CLIENT_MAC), "MACs of a reply are routing's");
    assert!(got.payload_intact);

    let c = f.counters(&e);
    assert_eq!((c.packets_in, c.packets_out), (1, 1));
    assert_eq!((c.bytes_in, c.bytes_out), (request.len() as u64, reply.len() as u64));
    let s = f.flow_stats();
    assert_eq!((s.created, s.forward, s.reverse, s.removed, s.icmp), (1, 1, 1, 0, 0));
    assert_eq!(f.flows().len(), 1);
}

#[test]
fn tcp_ipv4() {
    forward_and_reverse(Protocol::Tcp, "10.77.0.1", "10.77.0.5", "10.77.0.200");
}

#[test]
fn udp_ipv4() {
    forward_and_reverse(Protocol::Udp, "10.77.0.1", "10.77.0.5", "10.77.0.200");
}

#[test]
fn sctp_ipv4() {
    forward_and_reverse(Protocol::Sctp, "10.77.0.1", "10.77.0.5", "10.77.0.200");
}

#[test]
fn tcp_ipv6() {
    forward_and_reverse(Protocol::Tcp, "fd00:77::1", "fd00:77::5", "fd00:77::c8");
}

#[test]
fn udp_ipv6() {
    forward_and_reverse(Protocol::Udp, "fd00:77::1", "fd00:77::5", "fd00:77::c8");
}

#[test]
fn sctp_ipv6() {
    forward_and_reverse(Protocol::Sctp, "fd00:77::1", "fd00:77::5", "fd00:77::c8");
}

/// IP options between the addresses and the ports: the header is written in parts. And a
/// mapping that keeps the port: only the addresses change the L4 checksum.
#[test]
fn ipv4_with_options_and_unchanged_ports_are_translated_both_ways() {
    for proto in [Protocol::Tcp, Protocol::Udp] {
        for (host_port, pod_port) in [(8080, 80), (80, 80)] {
            let mut f = Fixture::new();
            f.tables
                .install(&entry(proto, "10.77.0.1", host_port, "10.77.0.5", pod_port, (7, Hook::Egress)))
                .unwrap();
            let request =
                with_ipv4_options(&packet(&spec(proto, ("10.77.0.200", 40000), ("10.77.0.1", host_port))));
            let (verdict, out) = f.run(TC_INGRESS, &request);
            assert_eq!(verdict, REDIRECT, "{proto:?} {host_port}");
            let got = parse_and_verify(&out);
            assert_eq!((got.src, got.dst), ((ip("10.77.0.200"), 40000), (ip("10.77.0.5"), pod_port)));
            assert!(got.payload_intact);
            assert_eq!(out[34..38], [1, 1, 1, 1], "the options are untouched");

            let reply =
                with_ipv4_options(&packet(&spec(proto, ("10.77.0.5", pod_port), ("10.77.0.200", 40000))));
            let (verdict, out) = f.run(TC_INGRESS, &reply);
            assert_eq!(verdict, NEXT);
            let got = parse_and_verify(&out);
            assert_eq!((got.src, got.dst), ((ip("10.77.0.1"), host_port), (ip("10.77.0.200"), 40000)));
            assert!(got.payload_intact);
        }
    }
}

#[test]
fn udp_ipv4_without_checksum_keeps_none() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, "10.77.0.1", 53, "10.77.0.5", 5353, (7, Hook::Egress))).unwrap();
    let s = Spec { udp_no_csum: true, ..spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 53)) };
    let (_, out) = f.send(&s);
    assert_eq!(out[34 + 6..34 + 8], [0, 0], "a UDP checksum of 0 (none) stays 0");
    assert_eq!(parse_and_verify(&out).dst, (ip("10.77.0.5"), 5353));
    let reply =
        Spec { udp_no_csum: true, ..spec(Protocol::Udp, ("10.77.0.5", 5353), ("10.77.0.200", 40000)) };
    let (_, out) = f.send(&reply);
    assert_eq!(out[34 + 6..34 + 8], [0, 0], "in the reply too");
    assert_eq!(parse_and_verify(&out).src, (ip("10.77.0.1"), 53));
}

#[test]
fn macvlan_delivery_passes_on_the_masters_receive_path_and_redirects_elsewhere() {
    let mut f = Fixture::new();
    // Deliver on the receive path of the skb's own device (lo in a test run): just go on.
    f.tables.install(&entry(Protocol::Tcp, "10.78.0.1", 8080, "10.78.0.5", 80, (LO, Hook::Ingress))).unwrap();
    let request = packet(&spec(Protocol::Tcp, ("10.78.0.200", 40000), ("10.78.0.1", 8080)));
    let (verdict, out) = f.run(TC_INGRESS, &request);
    assert_eq!(verdict, NEXT, "macvlan's rx_handler delivers by the rewritten MAC");
    assert_eq!(parse_and_verify(&out).dst_mac, POD_MAC);
    // On the transmit path (a hairpin through the master), the packet is turned around.
    let (verdict, _) = f.run(TC_EGRESS, &request);
    assert_eq!(verdict, REDIRECT);
}

#[test]
fn hairpin_is_translated_both_ways() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress))).unwrap();

    // The pod connects to its own hostPort: from the host IP, or its kernel drops it.
    let (verdict, out) = f.send(&spec(Protocol::Tcp, ("10.77.0.5", 45000), ("10.77.0.1", 8080)));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("10.77.0.1"), 45000), (ip("10.77.0.5"), 80)));
    assert_eq!((got.src_mac, got.dst_mac), (HOST_MAC, POD_MAC));

    // Its reply to the host IP goes back to it, from hostIP:hostPort.
    let (verdict, out) = f.send(&spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.1", 45000)));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("10.77.0.1"), 8080), (ip("10.77.0.5"), 45000)));
    assert_eq!((got.src_mac, got.dst_mac), (HOST_MAC, POD_MAC));

    // Another source port of the pod never reached the host port: its packet to the host IP
    // is not a reply of anything.
    f.assert_untouched(&spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.1", 45001)), "an untracked reply");
}

#[test]
fn hairpin_ipv6_is_translated_both_ways() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, "fd00:77::1", 5353, "fd00:77::5", 53, (7, Hook::Egress))).unwrap();
    let (verdict, out) = f.send(&spec(Protocol::Udp, ("fd00:77::5", 45000), ("fd00:77::1", 5353)));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("fd00:77::1"), 45000), (ip("fd00:77::5"), 53)));
    let (verdict, out) = f.send(&spec(Protocol::Udp, ("fd00:77::5", 53), ("fd00:77::1", 45000)));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("fd00:77::1"), 5353), (ip("fd00:77::5"), 45000)));
    assert_eq!((got.src_mac, got.dst_mac), (HOST_MAC, POD_MAC));
}

/// Replies are translated only for flows that came through the mapping: a peer talking to
/// podIP:containerPort directly, the pod's own connections from its containerPort and
/// node-local clients (sent to the pod directly by the socket hooks) see the pod's address.
#[test]
fn untracked_packets_from_the_pod_are_left_alone() {
    for (host, pod, mapped, direct, peer) in [
        ("10.77.0.1", "10.77.0.5", "10.77.0.200", "10.77.0.201", "192.0.2.10"),
        ("fd00:77::1", "fd00:77::5", "fd00:77::c8", "fd00:77::c9", "2001:db8::10"),
    ] {
        for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            let mut f = Fixture::new();
            let e = entry(proto, host, 8080, pod, 80, (7, Hook::Egress));
            f.tables.install(&e).unwrap();
            // A reply to a client that never came through the mapping, with no flow at all.
            f.assert_untouched(&spec(proto, (pod, 80), (direct, 40000)), "a reply to a direct client");
            // With a tracked flow of another client (and of the same client port).
            assert_eq!(f.send(&spec(proto, (mapped, 40000), (host, 8080))).0, REDIRECT);
            f.assert_untouched(&spec(proto, (pod, 80), (direct, 40000)), "a reply to a direct client");
            f.assert_untouched(&spec(proto, (pod, 80), (mapped, 40001)), "another port of the client");
            // The pod's own connection from its containerPort, and the answer to it.
            f.assert_untouched(&spec(proto, (pod, 80), (peer, 443)).flags(0x02), "the pod's own connection");
            f.assert_untouched(&spec(proto, (peer, 443), (pod, 80)), "the answer to the pod's connection");
            // A node-local client (the socket hooks sent it to podIP:80 from the host IP).
            f.assert_untouched(&spec(proto, (pod, 80), (host, 50000)), "a reply to a node-local client");

            let c = f.counters(&e);
            assert_eq!((c.packets_in, c.packets_out), (1, 0), "{proto:?} {host}");
            let s = f.flow_stats();
            assert_eq!((s.created, s.forward, s.reverse), (1, 1, 0), "{proto:?} {host}");
            assert_eq!(f.flows().len(), 1, "no packet above made a flow");
            // The tracked client's reply is still translated.
            let (_, out) = f.send(&spec(proto, (pod, 80), (mapped, 40000)));
            assert_eq!(parse_and_verify(&out).src, (ip(host), 8080));
        }
    }
}

#[test]
fn two_host_ports_to_one_container_port_restore_each_their_own() {
    for (host, pod, a, b) in [
        ("10.77.0.1", "10.77.0.5", "10.77.0.200", "10.77.0.201"),
        ("fd00:77::1", "fd00:77::5", "fd00:77::c8", "fd00:77::c9"),
    ] {
        let mut f = Fixture::new();
        let e1 = entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress));
        let e2 = entry(Protocol::Tcp, host, 8081, pod, 80, (7, Hook::Egress));
        f.tables.install(&e1).unwrap();
        f.tables.install(&e2).unwrap();
        assert_eq!((f.tables.verify(&e1), f.tables.verify(&e2)), (None, None));

        // a through 8080, b through 8081, and a again through 8081 from another port.
        for (client, host_port) in [((a, 40000), 8080), ((b, 40000), 8081), ((a, 40001), 8081)] {
            let (verdict, out) = f.send(&spec(Protocol::Tcp, client, (host, host_port)));
            assert_eq!(verdict, REDIRECT);
            assert_eq!(parse_and_verify(&out).dst, (ip(pod), 80));
        }
        for (client, host_port) in [((b, 40000), 8081), ((a, 40000), 8080), ((a, 40001), 8081)] {
            let (verdict, out) = f.send(&spec(Protocol::Tcp, (pod, 80), client));
            assert_eq!(verdict, NEXT);
            let got = parse_and_verify(&out);
            assert_eq!(got.src, (ip(host), host_port), "the reply to {client:?} comes from the port it used");
            assert_eq!(got.dst, (ip(client.0), client.1));
        }
        let (c1, c2) = (f.counters(&e1), f.counters(&e2));
        assert_eq!((c1.packets_in, c1.packets_out, c2.packets_in, c2.packets_out), (1, 1, 2, 2));

        // Removing one mapping removes its flows only.
        f.tables.remove(&e1).unwrap();
        assert!(f.flows().iter().all(|(_, fl)| fl.host == e2.host_endpoint()));
        assert_eq!(f.flows().len(), 2);
        f.assert_untouched(&spec(Protocol::Tcp, (pod, 80), (a, 40000)), "a reply of a removed mapping");
        let (_, out) = f.send(&spec(Protocol::Tcp, (pod, 80), (b, 40000)));
        assert_eq!(parse_and_verify(&out).src, (ip(host), 8081));
    }
}

#[test]
fn unmatched_packets_are_untouched() {
    let mut f = Fixture::new();
    let e = entry(Protocol::Udp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    for s in [
        spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 8081)),
        spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)),
        spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.2", 8080)),
    ] {
        f.assert_untouched(&s, "an unmatched packet");
    }
    // Not IP at all (ARP).
    let mut arp = vec![0xff; 6];
    arp.extend(CLIENT_MAC);
    arp.extend([0x08, 0x06]);
    arp.extend([0u8; 28]);
    assert_eq!(f.run(TC_EGRESS, &arp), (NEXT, arp));
    assert_eq!(f.counters(&e).packets_in, 0);
    assert!(f.flows().is_empty());
    assert_eq!(f.flow_stats(), FlowStats::default());
}

/// The programs skip the forward lookup for a port the unmapped ports say no mapping has: a
/// bit set wrongly hides the mapping (what `verify` reports and reconcile mends), and the
/// replies of its flows, found in the flow table, are still translated.
#[test]
fn a_port_marked_unmapped_is_not_looked_up() {
    let mut f = Fixture::new();
    let e = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    let request = spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080));
    assert_eq!(f.send(&request).0, REDIRECT);
    f.tables.mark_unmapped(8080);
    f.assert_untouched(&request, "a request to a port marked unmapped");
    let (verdict, out) = f.send(&spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.200", 40000)));
    assert_eq!((verdict, parse_and_verify(&out).src), (NEXT, (ip("10.77.0.1"), 8080)), "the tracked reply");
    assert!(f.tables.verify(&e).is_some());
    f.tables.reconcile(std::slice::from_ref(&e)).unwrap();
    assert_eq!(f.send(&request).0, REDIRECT);
    assert_eq!(f.counters(&e).packets_in, 2);
}

/// Each mapping counts at a counters index of its own, which a reinstall keeps; a removed
/// mapping's counters are zeroed and its index goes to the next new mapping, which starts
/// from zero. A forward entry naming no counters is what `verify` reports and reconcile mends.
#[test]
fn each_mapping_counts_at_an_index_of_its_own() {
    let mut f = Fixture::new();
    let tcp = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    let udp = entry(Protocol::Udp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    let other = entry(Protocol::Tcp, "10.77.0.1", 9090, "10.77.0.6", 80, (8, Hook::Egress));
    f.tables.install(&tcp).unwrap();
    f.tables.install(&udp).unwrap();
    let index = |f: &Fixture, e: &Entry| f.tables.installed(e).expect("installed").counters;
    assert_eq!((index(&f, &tcp), index(&f, &udp)), (1, 2));
    let to_tcp = spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080));
    let to_udp = spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 8080));
    for s in [&to_tcp, &to_tcp, &to_udp] {
        assert_eq!(f.send(s).0, REDIRECT);
    }
    assert_eq!((f.counters(&tcp).packets_in, f.counters(&udp).packets_in), (2, 1));

    let moved = Entry { deliver_ifindex: 9, ..tcp.clone() };
    f.tables.install(&moved).unwrap();
    assert_eq!(index(&f, &moved), 1, "a reinstall keeps the index");
    assert_eq!(f.counters(&moved).packets_in, 2, "and the counts");

    f.tables.remove(&moved).unwrap();
    assert!(f.tables.stray_counters().is_empty(), "the removed mapping's counters are zeroed");
    f.tables.install(&other).unwrap();
    assert_eq!(index(&f, &other), 1, "the lowest free index");
    assert_eq!(f.counters(&other), plexus_ebpf_common::Counters::default());
    assert_eq!(f.send(&spec(Protocol::Tcp, ("10.77.0.200", 40001), ("10.77.0.1", 9090))).0, REDIRECT);
    assert_eq!((f.counters(&other).packets_in, f.counters(&udp).packets_in), (1, 1));

    f.tables.set_installed(&udp, udp.forward());
    assert_eq!(f.tables.verify(&udp), Some(format!("the forward entry of {udp} names no counters")));
    assert_eq!(f.send(&to_udp).0, REDIRECT, "translated all the same");
    assert_eq!(f.counters(&udp).packets_in, 0, "counted nowhere");
    f.tables.reconcile(&[udp.clone(), other.clone()]).unwrap();
    assert_eq!(f.tables.verify(&udp), None);
    assert_eq!(index(&f, &udp), 2);
    assert_eq!(f.send(&to_udp).0, REDIRECT);
    assert_eq!(f.counters(&udp).packets_in, 1);
}

/// Sends `frame` as it is out of interface `ifindex` of the thread's network namespace.
fn send_frame(ifindex: u32, frame: &[u8]) {
    // SAFETY: a plain system call; the fd is owned at once.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "a packet socket: {}", std::io::Error::last_os_error());
    // SAFETY: a new fd of this process, owned by nothing else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; all zeroes is a valid value.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as libc::c_ushort;
    to.sll_ifindex = ifindex as i32;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: the frame and the address are valid for the duration of the call.
    let sent = unsafe {
        libc::sendto(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&to as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    assert_eq!(sent, frame.len() as isize, "sending a frame: {}", std::io::Error::last_os_error());
}

/// (received, transmitted) packets of interface `dev` of `ns`.
fn link_packets(ns: &Netns, dev: &str) -> (u64, u64) {
    let text = ns.ip(["-s", "-j", "link", "show", "dev", dev].as_slice());
    let links: Vec<serde_json::Value> = serde_json::from_str(&text).expect("ip -j");
    let stats = &links[0]["stats64"];
    (
        stats["rx"]["packets"].as_u64().expect("rx packets"),
        stats["tx"]["packets"].as_u64().expect("tx packets"),
    )
}

/// A request to a bridge pod, delivered from a receive path, goes straight into the pod
/// (`bpf_redirect_peer`: the host end of the pod's veth never transmits it) unless the pod's
/// ingress is limited on that veth's transmit path, which it then crosses. A test run cannot
/// tell the two apart (both are TC_ACT_REDIRECT), so this one sends a frame through real veths
/// and counts what the host end transmitted. The limit is looked up only while the veth's bit
/// in `BW_UNLIMITED` is clear: set wrongly, the request goes straight in as if unlimited.
#[test]
fn kernel_requests_cross_a_limited_veths_transmit_path_and_go_straight_into_the_pod_otherwise() {
    let node = Netns::empty("pxdn");
    let pod = Netns::empty("pxdp");
    for ns in [&node, &pod] {
        // No IPv6: the stack's own packets (duplicate address detection, router solicitations)
        // would cross the veth too.
        ns.try_exec("sysctl -qw net.ipv6.conf.default.disable_ipv6=1").expect("sysctl");
    }
    // Frames written on c1 arrive on c0's receive path (the bridge's, in the agent); h0 is the
    // host end of the pod's veth.
    node.ip("link add c0 type veth peer name c1");
    node.ip(
        ["link", "add", "h0", "type", "veth", "peer", "name", "p0", "netns", pod.name.as_str()].as_slice()
    );
    for dev in ["c0", "c1", "h0"] {
        node.ip(["link", "set", dev, "up"].as_slice());
    }
    pod.ip("link set p0 up");

    let mut f = Fixture::new();
    let _inside = node.enter();
    // SAFETY: NUL-terminated names.
    let (c1, h0) = unsafe { (libc::if_nametoindex(c"c1".as_ptr()), libc::if_nametoindex(c"h0".as_ptr())) };
    assert!(c1 != 0 && h0 != 0, "c1 and h0 in the namespace");
    match f.loaded.ebpf_mut().program_mut(TC_INGRESS) {
        Some(Program::SchedClassifier(p)) => {
            p.attach("c0", aya::programs::TcAttachType::Ingress).expect("attaching pm_tc_in to c0");
        }
        _ => panic!("no TC program {TC_INGRESS}"),
    }
    let e = entry(Protocol::Udp, "10.77.0.1", 8080, "10.77.0.5", 80, (h0, Hook::Egress));
    f.tables.install(&e).unwrap();
    let request = packet(&spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)));

    // Whether the request crossed h0's transmit path on its way into the pod.
    let transmitted = || {
        let ((received, _), (_, sent)) = (link_packets(&pod, "p0"), link_packets(&node, "h0"));
        send_frame(c1, &request);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while link_packets(&pod, "p0").0 == received {
            assert!(std::time::Instant::now() < deadline, "the request never reached the pod");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        link_packets(&node, "h0").1 - sent
    };
    assert_eq!(transmitted(), 0, "unlimited, looked up: straight into the pod");
    f.set_unlimited_bit(h0, true);
    assert_eq!(transmitted(), 0, "marked unlimited: straight into the pod");
    let limit = ShapeKey { ifindex: h0, hook: HOOK_EGRESS, pad: 0, mac: [0; 6] };
    f.limit(limit, Shape { rate_bps: 8_000_000, burst_ns: 1_000_000, ..Default::default() });
    assert_eq!(transmitted(), 1, "limited: through the veth's transmit path");
    f.set_unlimited_bit(h0, true);
    assert_eq!(transmitted(), 0, "limited but marked unlimited: not looked up");
    assert_eq!(f.counters(&e).packets_in, 4, "every request translated");
}

/// A fragmented datagram: the first fragment (with the ports) is translated and tracked, the
/// later ones follow it; the receiver reassembles a datagram whose checksum is right.
#[test]
fn fragments_follow_their_first_fragment() {
    for (host, pod, client) in
        [("10.77.0.1", "10.77.0.5", "10.77.0.200"), ("fd00:77::1", "fd00:77::5", "fd00:77::c8")]
    {
        let mut f = Fixture::new();
        let e = entry(Protocol::Udp, host, 5353, pod, 53, (7, Hook::Egress));
        f.tables.install(&e).unwrap();
        let request = spec(Protocol::Udp, (client, 40000), (host, 5353));

        // A later fragment whose first one never came passes as it is.
        let [_, orphan] = fragments(&request, 0x0bad);
        assert_eq!(f.run(TC_INGRESS, &orphan), (NEXT, orphan.clone()), "an orphan fragment: untouched");

        let mut out = Vec::new();
        for frag in fragments(&request, 0x1234) {
            let (verdict, o) = f.run(TC_INGRESS, &frag);
            assert_eq!(verdict, REDIRECT, "every fragment is delivered to the pod");
            out.push(o);
        }
        let got = reassemble(&out);
        assert_eq!((got.src, got.dst), ((ip(client), 40000), (ip(pod), 53)));
        assert_eq!(got.dst_mac, POD_MAC);
        assert!(got.payload_intact);
        assert_eq!(f.flows().len(), 1, "the first fragment made the flow");

        let mut out = Vec::new();
        for frag in fragments(&spec(Protocol::Udp, (pod, 53), (client, 40000)), 0x4321) {
            let (verdict, o) = f.run(TC_INGRESS, &frag);
            assert_eq!(verdict, NEXT);
            out.push(o);
        }
        let got = reassemble(&out);
        assert_eq!((got.src, got.dst), ((ip(host), 5353), (ip(client), 40000)), "the reply, translated");
        assert!(got.payload_intact);
        let c = f.counters(&e);
        assert_eq!((c.packets_in, c.packets_out), (2, 2), "every fragment counted");
        let s = f.flow_stats();
        assert_eq!((s.created, s.forward, s.reverse), (1, 1, 1), "the first fragments only are tracked");
    }
}

/// SCTP splits its own messages into chunks: IP fragments of it are not translated (the CRC
/// fixup needs the whole packet).
#[test]
fn sctp_fragments_are_untouched() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Sctp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress))).unwrap();
    let s = Spec { fragment: true, ..spec(Protocol::Sctp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)) };
    f.assert_untouched(&s, "a first fragment of an SCTP packet");
}

#[test]
fn removed_entries_stop_matching_and_take_their_flows() {
    let mut f = Fixture::new();
    let e = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    assert_eq!(f.tables.verify(&e), None);
    assert_eq!(f.send(&spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080))).0, REDIRECT);
    assert_eq!(f.flows().len(), 1);
    f.tables.remove(&e).unwrap();
    f.tables.remove(&e).unwrap();
    assert!(f.tables.list().is_empty() && f.tables.stray_counters().is_empty() && f.flows().is_empty());
    let s = f.flow_stats();
    assert_eq!((s.created, s.removed, s.evicted(0)), (1, 1, 0), "the agent counts the flows it removes");
    f.assert_untouched(&spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)), "a request");
    f.assert_untouched(&spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.200", 40000)), "its reply");
    assert_ne!(SHOT, NEXT);
}

#[test]
fn reconcile_removes_stale_and_restores_missing_entries() {
    let mut f = Fixture::new();
    let keep = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    let stale = entry(Protocol::Udp, "10.77.0.1", 53, "10.77.0.6", 53, (8, Hook::Egress));
    let missing = entry(Protocol::Tcp, "fd00::1", 8080, "fd00::5", 80, (7, Hook::Egress));
    f.tables.install(&keep).unwrap();
    f.tables.install(&stale).unwrap();
    assert_eq!(f.send(&spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080))).0, REDIRECT);
    assert_eq!(f.send(&spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 53))).0, REDIRECT);
    let done = f.tables.reconcile(&[keep.clone(), missing.clone()]).unwrap();
    assert_eq!((done.removed, done.restored, done.flows_removed), (1, 1, 1));
    assert_eq!(f.tables.verify(&keep), None);
    assert_eq!(f.tables.verify(&missing), None);
    assert!(f.tables.verify(&stale).is_some());
    assert_eq!(f.tables.list().len(), 2);
    let flows = f.flows();
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].1.host, keep.host_endpoint(), "the kept mapping's flow stays");
}
