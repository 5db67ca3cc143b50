//! The TC programs on crafted packets, run by the kernel with BPF_PROG_TEST_RUN: the output
//! bytes are compared field by field and every checksum is verified by recomputing it from
//! scratch (Internet checksums with their pseudo-headers, SCTP's CRC32c).
//!
//! Needs root (CAP_BPF), as `cargo xtask test` runs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};

use aya::programs::{Program, SchedClassifier, TestRun, TestRunOptions};
use plexus_ebpf_common::crc32c;

use super::entries::Entry;
use super::mapper::{self, TC_EGRESS, TC_INGRESS};
use super::table::Tables;
use crate::dataplane::attach::Hook;
use crate::dataplane::loader::Loaded;
use crate::spec::selection::Protocol;

const NEXT: u32 = u32::MAX; // TC_ACT_UNSPEC (-1): the packet goes on
const REDIRECT: u32 = 7;
const SHOT: u32 = 2;

const CLIENT_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 1];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
const POD_MAC: [u8; 6] = [0x0a, 0x58, 0, 0, 0, 5];
/// The skb of a test run belongs to the loopback device.
const LO: u32 = 1;

struct Fixture {
    loaded: Loaded,
    tables: Tables,
}

impl Fixture {
    fn new() -> Fixture {
        let mut loaded = mapper::load(None).expect("loading the BPF object (run the tests as root)");
        let tables = Tables::take(loaded.ebpf_mut()).expect("maps");
        Fixture { loaded, tables }
    }

    fn run(&self, program: &str, packet: &[u8]) -> (u32, Vec<u8>) {
        let prog: &SchedClassifier = match self.loaded.ebpf().program(program) {
            Some(Program::SchedClassifier(p)) => p,
            _ => panic!("no TC program {program}"),
        };
        let mut out = vec![0u8; packet.len() + 256];
        let result = prog
            .test_run(TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut out),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(result.data_size_out as usize);
        (result.return_value, out)
    }

    fn counters(&self) -> plexus_ebpf_common::Counters {
        self.tables.list().first().map(|(_, _, c)| *c).unwrap_or_default()
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
    }
}

// ---- packet building and checking ----

fn proto_number(p: Protocol) -> u8 {
    super::entries::protocol_number(p)
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn ones_sum(data: &[u8]) -> u32 {
    data.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))).sum()
}

fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend(s.octets());
            p.extend(d.octets());
            p.extend([0, proto]);
            p.extend((len as u16).to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend(s.octets());
            p.extend(d.octets());
            p.extend((len as u32).to_be_bytes());
            p.extend([0, 0, 0, proto]);
        }
        _ => panic!("mixed families"),
    }
    p
}

/// The L4 segment (header + payload) with a correct checksum.
fn segment(
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    payload: &[u8],
    udp_no_csum: bool,
) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend(sport.to_be_bytes());
    s.extend(dport.to_be_bytes());
    match proto {
        6 => {
            s.extend(1000u32.to_be_bytes()); // seq
            s.extend(0u32.to_be_bytes()); // ack
            s.extend([0x50, 0x18]); // data offset 5, PSH|ACK
            s.extend(64240u16.to_be_bytes());
            s.extend([0, 0, 0, 0]); // checksum, urgent
            s.extend(payload);
            let c = !fold(ones_sum(&pseudo_header(src, dst, 6, s.len())) + ones_sum(&s));
            s[16..18].copy_from_slice(&c.to_be_bytes());
        }
        17 => {
            s.extend(((8 + payload.len()) as u16).to_be_bytes());
            s.extend([0, 0]);
            s.extend(payload);
            if !udp_no_csum {
                let mut c = !fold(ones_sum(&pseudo_header(src, dst, 17, s.len())) + ones_sum(&s));
                if c == 0 {
                    c = 0xffff;
                }
                s[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        132 => {
            s.extend(0x1234_5678u32.to_be_bytes()); // verification tag
            s.extend([0, 0, 0, 0]); // checksum
                                    // A DATA chunk: type 0, flags 3, length, TSN, stream, seq, PPID, payload.
            let len = 16 + payload.len();
            s.extend([0, 3]);
            s.extend((len as u16).to_be_bytes());
            s.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
            s.extend(payload);
            while s.len() % 4 != 0 {
                s.push(0);
            }
            let c = crc32c::checksum(&s);
            s[8..12].copy_from_slice(&c.to_le_bytes());
        }
        _ => panic!("protocol {proto}"),
    }
    s
}

struct Spec {
    proto: Protocol,
    src: (&'static str, u16),
    dst: (&'static str, u16),
    udp_no_csum: bool,
    fragment: bool,
}

fn spec(proto: Protocol, src: (&'static str, u16), dst: (&'static str, u16)) -> Spec {
    Spec { proto, src, dst, udp_no_csum: false, fragment: false }
}

fn packet(s: &Spec) -> Vec<u8> {
    let (src, dst): (IpAddr, IpAddr) = (s.src.0.parse().unwrap(), s.dst.0.parse().unwrap());
    let proto = proto_number(s.proto);
    let l4 = segment(proto, src, dst, s.src.1, s.dst.1, b"plexus portmap test payload", s.udp_no_csum);
    let mut p = Vec::new();
    p.extend(HOST_MAC);
    p.extend(CLIENT_MAC);
    match (src, dst) {
        (IpAddr::V4(sa), IpAddr::V4(da)) => {
            p.extend(0x0800u16.to_be_bytes());
            let mut ip = vec![0x45, 0];
            ip.extend(((20 + l4.len()) as u16).to_be_bytes());
            ip.extend([0x12, 0x34]);
            ip.extend(if s.fragment { [0x20, 0x00] } else { [0x40, 0x00] }); // MF / DF
            ip.extend([64, proto, 0, 0]);
            ip.extend(sa.octets());
            ip.extend(da.octets());
            let c = !fold(ones_sum(&ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            p.extend(ip);
        }
        (IpAddr::V6(sa), IpAddr::V6(da)) => {
            p.extend(0x86DDu16.to_be_bytes());
            p.extend([0x60, 0, 0, 0]);
            p.extend((l4.len() as u16).to_be_bytes());
            p.extend([proto, 64]);
            p.extend(sa.octets());
            p.extend(da.octets());
        }
        _ => panic!("mixed families"),
    }
    p.extend(l4);
    p
}

/// What a packet says, with every checksum verified.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: (IpAddr, u16),
    dst: (IpAddr, u16),
    payload_intact: bool,
}

fn parse_and_verify(p: &[u8]) -> Parsed {
    let mac = |o: usize| -> [u8; 6] { p[o..o + 6].try_into().unwrap() };
    let ethertype = u16::from_be_bytes([p[12], p[13]]);
    let (src, dst, proto, l4) = if ethertype == 0x0800 {
        let ip = &p[14..34];
        assert_eq!(fold(ones_sum(ip)), 0xffff, "IPv4 header checksum");
        let s: [u8; 4] = ip[12..16].try_into().unwrap();
        let d: [u8; 4] = ip[16..20].try_into().unwrap();
        (IpAddr::from(Ipv4Addr::from(s)), IpAddr::from(Ipv4Addr::from(d)), ip[9], &p[34..])
    } else {
        let s: [u8; 16] = p[22..38].try_into().unwrap();
        let d: [u8; 16] = p[38..54].try_into().unwrap();
        (IpAddr::from(Ipv6Addr::from(s)), IpAddr::from(Ipv6Addr::from(d)), p[20], &p[54..])
    };
    match proto {
        6 => assert_eq!(
            fold(ones_sum(&pseudo_header(src, dst, 6, l4.len())) + ones_sum(l4)),
            0xffff,
            "TCP checksum"
        ),
        17 if l4[6..8] == [0, 0] => assert!(src.is_ipv4(), "an IPv6 UDP checksum cannot be 0"),
        17 => assert_eq!(
            fold(ones_sum(&pseudo_header(src, dst, 17, l4.len())) + ones_sum(l4)),
            0xffff,
            "UDP checksum"
        ),
        132 => {
            let mut copy = l4.to_vec();
            copy[8..12].copy_from_slice(&[0; 4]);
            assert_eq!(crc32c::checksum(&copy).to_le_bytes(), l4[8..12], "SCTP CRC32c");
        }
        _ => panic!("protocol {proto}"),
    }
    let port = |o: usize| u16::from_be_bytes([l4[o], l4[o + 1]]);
    Parsed {
        dst_mac: mac(0),
        src_mac: mac(6),
        src: (src, port(0)),
        dst: (dst, port(2)),
        payload_intact: p.windows(27).any(|w| w == b"plexus portmap test payload"),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

// ---- the tests ----

/// For each protocol and family: the forward DNAT, the reverse SNAT, checksums, counters.
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
    assert!(got.payload_intact);

    let c = f.counters();
    assert_eq!((c.packets_in, c.packets_out), (1, 1));
    assert_eq!((c.bytes_in, c.bytes_out), (request.len() as u64, reply.len() as u64));
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

#[test]
fn udp_ipv4_without_checksum_keeps_none() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, "10.77.0.1", 53, "10.77.0.5", 5353, (7, Hook::Egress))).unwrap();
    let mut s = spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 53));
    s.udp_no_csum = true;
    let (_, out) = f.run(TC_INGRESS, &packet(&s));
    assert_eq!(out[34 + 6..34 + 8], [0, 0], "a UDP checksum of 0 (none) stays 0");
    assert_eq!(parse_and_verify(&out).dst, (ip("10.77.0.5"), 5353));
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
    let (verdict, out) =
        f.run(TC_INGRESS, &packet(&spec(Protocol::Tcp, ("10.77.0.5", 45000), ("10.77.0.1", 8080))));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("10.77.0.1"), 45000), (ip("10.77.0.5"), 80)));
    assert_eq!((got.src_mac, got.dst_mac), (HOST_MAC, POD_MAC));

    // Its reply to the host IP goes back to it, from hostIP:hostPort.
    let (verdict, out) =
        f.run(TC_INGRESS, &packet(&spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.1", 45000))));
    assert_eq!(verdict, REDIRECT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src, got.dst), ((ip("10.77.0.1"), 8080), (ip("10.77.0.5"), 45000)));
    assert_eq!((got.src_mac, got.dst_mac), (HOST_MAC, POD_MAC));
}

#[test]
fn replies_to_a_node_local_socket_are_left_alone() {
    // A connected socket of this namespace stands for a node-local client the cgroup hooks
    // sent straight to the pod: its replies must keep the pod's address.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = listener.local_addr().unwrap();
    let client = TcpStream::connect(server).unwrap();
    let local = client.local_addr().unwrap();
    let mut f = Fixture::new();
    f.tables
        .install(&entry(Protocol::Tcp, "127.0.0.1", 9, "127.0.0.1", server.port(), (7, Hook::Egress)))
        .unwrap();
    let reply = packet(&Spec {
        proto: Protocol::Tcp,
        src: ("127.0.0.1", server.port()),
        dst: ("127.0.0.1", local.port()),
        udp_no_csum: false,
        fragment: false,
    });
    let (verdict, out) = f.run(TC_INGRESS, &reply);
    assert_eq!(verdict, NEXT);
    assert_eq!(out, reply, "untouched");
    drop(client);
}

#[test]
fn unmatched_and_fragmented_packets_are_untouched() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress))).unwrap();
    for s in [
        spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 8081)),
        spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)),
        spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.2", 8080)),
        Spec { fragment: true, ..spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)) },
    ] {
        let p = packet(&s);
        let (verdict, out) = f.run(TC_INGRESS, &p);
        assert_eq!((verdict, out), (NEXT, p));
    }
    // Not IP at all (ARP).
    let mut arp = vec![0xff; 6];
    arp.extend(CLIENT_MAC);
    arp.extend([0x08, 0x06]);
    arp.extend([0u8; 28]);
    assert_eq!(f.run(TC_EGRESS, &arp), (NEXT, arp));
    assert_eq!(f.counters().packets_in, 0);
}

#[test]
fn removed_entries_stop_matching() {
    let mut f = Fixture::new();
    let e = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    assert_eq!(f.tables.verify(&e), None);
    f.tables.remove(&e).unwrap();
    f.tables.remove(&e).unwrap();
    assert!(f.tables.list().is_empty() && f.tables.flows().is_empty() && f.tables.stats_keys().is_empty());
    let p = packet(&spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)));
    assert_eq!(f.run(TC_INGRESS, &p), (NEXT, p));
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
    let done = f.tables.reconcile(&[keep.clone(), missing.clone()]).unwrap();
    assert_eq!((done.removed, done.restored), (1, 1));
    assert_eq!(f.tables.verify(&keep), None);
    assert_eq!(f.tables.verify(&missing), None);
    assert!(f.tables.verify(&stale).is_some());
    assert_eq!(f.tables.list().len(), 2);
}
