//! Crafted frames and their verification: TCP, UDP and SCTP over IPv4 and IPv6, ICMP and
//! ICMPv6 errors quoting such a packet, and a parser that recomputes every checksum from
//! scratch (the IPv4 header's, TCP/UDP/ICMPv6 with their pseudo-headers, ICMP's, SCTP's CRC32c),
//! in the quoted packet too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use plexus_ebpf_common::crc32c;
use plexus_ebpf_common::flow::TCP_ACK;

use crate::spec::selection::Protocol;

pub const CLIENT_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 1];
pub const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
pub const POD_MAC: [u8; 6] = [0x0a, 0x58, 0, 0, 0, 5];

/// The payload of every crafted segment, found again in the output to tell it is intact.
pub const PAYLOAD: &[u8] = b"plexus portmap test payload";
/// TCP flags of a segment of an established connection.
pub const PSH_ACK: u8 = 0x08 | TCP_ACK;

const PROTO_ICMP: u8 = 1;
const PROTO_ICMPV6: u8 = 58;

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn proto_number(p: Protocol) -> u8 {
    super::super::entries::protocol_number(p)
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

/// The Internet checksum of `parts` from scratch, as it is stored.
fn checksum(parts: &[&[u8]]) -> u16 {
    !fold(parts.iter().map(|p| ones_sum(p)).sum())
}

/// True when data holding its own Internet checksum sums to all ones.
fn sums_to_ones(parts: &[&[u8]]) -> bool {
    fold(parts.iter().map(|p| ones_sum(p)).sum()) == 0xffff
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

/// What a crafted TCP/UDP/SCTP packet is.
#[derive(Clone, Copy)]
pub struct Spec {
    pub proto: Protocol,
    pub src: (&'static str, u16),
    pub dst: (&'static str, u16),
    pub udp_no_csum: bool,
    pub fragment: bool,
    pub tcp_flags: u8,
}

pub fn spec(proto: Protocol, src: (&'static str, u16), dst: (&'static str, u16)) -> Spec {
    Spec { proto, src, dst, udp_no_csum: false, fragment: false, tcp_flags: PSH_ACK }
}

impl Spec {
    pub fn flags(self, tcp_flags: u8) -> Spec {
        Spec { tcp_flags, ..self }
    }
}

/// The L4 segment (header + payload) with a correct checksum.
fn segment(s: &Spec, src: IpAddr, dst: IpAddr) -> Vec<u8> {
    let mut seg = Vec::new();
    seg.extend(s.src.1.to_be_bytes());
    seg.extend(s.dst.1.to_be_bytes());
    match s.proto {
        Protocol::Tcp => {
            seg.extend(1000u32.to_be_bytes()); // seq
            seg.extend(0u32.to_be_bytes()); // ack
            seg.extend([0x50, s.tcp_flags]); // data offset 5
            seg.extend(64240u16.to_be_bytes());
            seg.extend([0, 0, 0, 0]); // checksum, urgent
            seg.extend(PAYLOAD);
            let c = checksum(&[&pseudo_header(src, dst, 6, seg.len()), &seg]);
            seg[16..18].copy_from_slice(&c.to_be_bytes());
        }
        Protocol::Udp => {
            seg.extend(((8 + PAYLOAD.len()) as u16).to_be_bytes());
            seg.extend([0, 0]);
            seg.extend(PAYLOAD);
            if !s.udp_no_csum {
                let mut c = checksum(&[&pseudo_header(src, dst, 17, seg.len()), &seg]);
                if c == 0 {
                    c = 0xffff;
                }
                seg[6..8].copy_from_slice(&c.to_be_bytes());
            }
        }
        Protocol::Sctp => {
            seg.extend(0x1234_5678u32.to_be_bytes()); // verification tag
            seg.extend([0, 0, 0, 0]); // checksum
                                      // A DATA chunk: type 0, flags 3, length, TSN, stream, seq, PPID, payload.
            let len = 16 + PAYLOAD.len();
            seg.extend([0, 3]);
            seg.extend((len as u16).to_be_bytes());
            seg.extend([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
            seg.extend(PAYLOAD);
            while seg.len() % 4 != 0 {
                seg.push(0);
            }
            let c = crc32c::checksum(&seg);
            seg[8..12].copy_from_slice(&c.to_le_bytes());
        }
    }
    seg
}

/// An IP header for `l4` (IPv4 with its checksum; IPv6 without extension headers).
fn ip_header(src: IpAddr, dst: IpAddr, proto: u8, l4_len: usize, fragment: bool) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(sa), IpAddr::V4(da)) => {
            let mut h = vec![0x45, 0];
            h.extend(((20 + l4_len) as u16).to_be_bytes());
            h.extend([0x12, 0x34]);
            h.extend(if fragment { [0x20, 0x00] } else { [0x40, 0x00] }); // MF / DF
            h.extend([64, proto, 0, 0]);
            h.extend(sa.octets());
            h.extend(da.octets());
            let c = checksum(&[&h]);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        }
        (IpAddr::V6(sa), IpAddr::V6(da)) => {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend((l4_len as u16).to_be_bytes());
            h.extend([proto, 64]);
            h.extend(sa.octets());
            h.extend(da.octets());
            h
        }
        _ => panic!("mixed families"),
    }
}

fn frame(dst_mac: [u8; 6], src_mac: [u8; 6], ipv6: bool, ip_packet: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend(dst_mac);
    p.extend(src_mac);
    p.extend(if ipv6 { 0x86DDu16 } else { 0x0800u16 }.to_be_bytes());
    p.extend(ip_packet);
    p
}

/// The frame of `s`, from the client's MAC to the host's.
pub fn packet(s: &Spec) -> Vec<u8> {
    let (src, dst) = (ip(s.src.0), ip(s.dst.0));
    let l4 = segment(s, src, dst);
    let mut ip_packet = ip_header(src, dst, proto_number(s.proto), l4.len(), s.fragment);
    ip_packet.extend(l4);
    frame(HOST_MAC, CLIENT_MAC, src.is_ipv6(), &ip_packet)
}

/// An IPv4 frame (from [`packet`]) with 4 bytes of IP options (NOPs) in its header, the
/// lengths and the header checksum made right.
pub fn with_ipv4_options(frame: &[u8]) -> Vec<u8> {
    assert_eq!(frame[14], 0x45, "an IPv4 frame without options");
    let mut p = frame[..34].to_vec();
    p.extend([1, 1, 1, 1]);
    p.extend(&frame[34..]);
    p[14] = 0x46;
    let total = u16::from_be_bytes([p[16], p[17]]) + 4;
    p[16..18].copy_from_slice(&total.to_be_bytes());
    p[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&[&p[14..38]]);
    p[24..26].copy_from_slice(&c.to_be_bytes());
    p
}

/// An IPv4 frame with its TOS byte set to `tos` (the ECN bits are its low two), the header
/// checksum made right.
pub fn with_tos(frame: &[u8], tos: u8) -> Vec<u8> {
    let mut p = frame.to_vec();
    p[15] = tos;
    p[24..26].copy_from_slice(&[0, 0]);
    let ihl = usize::from(p[14] & 0x0f) * 4;
    let c = checksum(&[&p[14..14 + ihl]]);
    p[24..26].copy_from_slice(&c.to_be_bytes());
    p
}

/// An ICMP (IPv4) or ICMPv6 (IPv6) message of `kind`/`code` with the 4 bytes after its
/// checksum (`rest`: unused + next-hop MTU, or the MTU of "packet too big") and `quote` (an IP
/// packet), from `src` to `dst`, with a correct checksum.
pub fn icmp_error(src: &str, dst: &str, kind: u8, code: u8, rest: [u8; 4], quote: &[u8]) -> Vec<u8> {
    let (src, dst) = (ip(src), ip(dst));
    let proto = if src.is_ipv6() { PROTO_ICMPV6 } else { PROTO_ICMP };
    let mut msg = vec![kind, code, 0, 0];
    msg.extend(rest);
    msg.extend(quote);
    let c = if src.is_ipv6() {
        checksum(&[&pseudo_header(src, dst, proto, msg.len()), &msg])
    } else {
        checksum(&[&msg])
    };
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip_packet = ip_header(src, dst, proto, msg.len(), false);
    ip_packet.extend(msg);
    frame(HOST_MAC, CLIENT_MAC, src.is_ipv6(), &ip_packet)
}

/// ICMP "fragmentation needed" (type 3 code 4) with next-hop MTU `mtu`, or ICMPv6 "packet too
/// big" (type 2) with MTU `mtu`: what a router sends back when `quote` is too large for the
/// next link.
pub fn too_big(src: &str, dst: &str, mtu: u16, quote: &[u8]) -> Vec<u8> {
    let [hi, lo] = mtu.to_be_bytes();
    if ip(src).is_ipv6() {
        icmp_error(src, dst, 2, 0, [0, 0, hi, lo], quote)
    } else {
        icmp_error(src, dst, 3, 4, [0, 0, hi, lo], quote)
    }
}

/// ICMP (type 3) or ICMPv6 (type 1) "port unreachable" (code 3, ICMPv6 code 4).
pub fn port_unreachable(src: &str, dst: &str, quote: &[u8]) -> Vec<u8> {
    if ip(src).is_ipv6() {
        icmp_error(src, dst, 1, 4, [0; 4], quote)
    } else {
        icmp_error(src, dst, 3, 3, [0; 4], quote)
    }
}

/// The IP packet of a frame (what an ICMP error quotes).
pub fn ip_part(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

/// What an IP packet says, every checksum verified.
#[derive(Debug, PartialEq, Eq)]
pub struct Ip {
    pub src: (IpAddr, u16),
    pub dst: (IpAddr, u16),
    pub proto: u8,
    pub payload_intact: bool,
    pub icmp: Option<Box<Icmp>>,
}

/// An ICMP or ICMPv6 message and the packet it quotes (verified as completely as `Ip`).
#[derive(Debug, PartialEq, Eq)]
pub struct Icmp {
    pub kind: u8,
    pub code: u8,
    pub rest: [u8; 4],
    pub quoted: Ip,
}

/// What a frame says, every checksum verified.
#[derive(Debug, PartialEq, Eq)]
pub struct Parsed {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ip: Ip,
}

impl std::ops::Deref for Parsed {
    type Target = Ip;
    fn deref(&self) -> &Ip {
        &self.ip
    }
}

impl Parsed {
    pub fn icmp(&self) -> &Icmp {
        self.ip.icmp.as_deref().expect("an ICMP message")
    }
}

pub fn parse_and_verify(p: &[u8]) -> Parsed {
    let mac = |o: usize| -> [u8; 6] { p[o..o + 6].try_into().unwrap() };
    let ethertype = u16::from_be_bytes([p[12], p[13]]);
    let ip = verify_ip(&p[14..]);
    assert_eq!(ethertype == 0x86DD, ip.src.0.is_ipv6(), "ethertype {ethertype:#x}");
    Parsed { dst_mac: mac(0), src_mac: mac(6), ip }
}

/// Verifies an IP packet (the whole of `p`, as its header's length says) and what it carries.
pub fn verify_ip(p: &[u8]) -> Ip {
    let (src, dst, proto, l4) = match p[0] >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            assert_eq!(total, p.len(), "IPv4 total length");
            assert!(sums_to_ones(&[&p[..ihl]]), "IPv4 header checksum of {:02x?}", &p[..ihl]);
            let s: [u8; 4] = p[12..16].try_into().unwrap();
            let d: [u8; 4] = p[16..20].try_into().unwrap();
            (IpAddr::from(Ipv4Addr::from(s)), IpAddr::from(Ipv4Addr::from(d)), p[9], &p[ihl..])
        }
        6 => {
            let payload = usize::from(u16::from_be_bytes([p[4], p[5]]));
            assert_eq!(40 + payload, p.len(), "IPv6 payload length");
            let s: [u8; 16] = p[8..24].try_into().unwrap();
            let d: [u8; 16] = p[24..40].try_into().unwrap();
            (IpAddr::from(Ipv6Addr::from(s)), IpAddr::from(Ipv6Addr::from(d)), p[6], &p[40..])
        }
        v => panic!("IP version {v}"),
    };
    let pseudo = |proto| pseudo_header(src, dst, proto, l4.len());
    let port = |o: usize| u16::from_be_bytes([l4[o], l4[o + 1]]);
    let mut icmp = None;
    let (sport, dport) = match proto {
        6 => {
            assert!(sums_to_ones(&[&pseudo(6), l4]), "TCP checksum");
            (port(0), port(2))
        }
        17 if l4[6..8] == [0, 0] => {
            assert!(src.is_ipv4(), "an IPv6 UDP checksum cannot be 0");
            (port(0), port(2))
        }
        17 => {
            assert!(sums_to_ones(&[&pseudo(17), l4]), "UDP checksum");
            (port(0), port(2))
        }
        132 => {
            let mut copy = l4.to_vec();
            copy[8..12].copy_from_slice(&[0; 4]);
            assert_eq!(crc32c::checksum(&copy).to_le_bytes(), l4[8..12], "SCTP CRC32c");
            (port(0), port(2))
        }
        PROTO_ICMP => {
            assert!(src.is_ipv4(), "ICMP over IPv6");
            assert!(sums_to_ones(&[l4]), "ICMP checksum");
            icmp = Some(Box::new(icmp_message(l4)));
            (0, 0)
        }
        PROTO_ICMPV6 => {
            assert!(src.is_ipv6(), "ICMPv6 over IPv4");
            assert!(sums_to_ones(&[&pseudo(PROTO_ICMPV6), l4]), "ICMPv6 checksum (with its pseudo-header)");
            icmp = Some(Box::new(icmp_message(l4)));
            (0, 0)
        }
        _ => panic!("protocol {proto}"),
    };
    Ip {
        src: (src, sport),
        dst: (dst, dport),
        proto,
        payload_intact: l4.windows(PAYLOAD.len()).any(|w| w == PAYLOAD),
        icmp,
    }
}

fn icmp_message(m: &[u8]) -> Icmp {
    Icmp { kind: m[0], code: m[1], rest: m[4..8].try_into().unwrap(), quoted: verify_ip(&m[8..]) }
}

/// The UDP datagram of `s` (a UDP spec) as two IP fragments of identification `id`: the first
/// holds the UDP header and 16 bytes of payload, the second the rest (IPv6: each with a
/// fragment header).
pub fn fragments(s: &Spec, id: u32) -> [Vec<u8>; 2] {
    assert!(matches!(s.proto, Protocol::Udp), "UDP only");
    let (src, dst) = (ip(s.src.0), ip(s.dst.0));
    let datagram = segment(s, src, dst);
    let (first, rest) = datagram.split_at(24);
    [fragment(src, dst, id, 0, true, first), fragment(src, dst, id, first.len(), false, rest)]
}

fn fragment(src: IpAddr, dst: IpAddr, id: u32, offset: usize, more: bool, data: &[u8]) -> Vec<u8> {
    assert_eq!(offset % 8, 0);
    let units = (offset / 8) as u16;
    let ip_packet = if src.is_ipv4() {
        let mut h = ip_header(src, dst, 17, data.len(), false);
        h[4..6].copy_from_slice(&(id as u16).to_be_bytes());
        let flags = units | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&flags.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(&[&h]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend(data);
        h
    } else {
        let mut h = ip_header(src, dst, 44, 8 + data.len(), false);
        h.extend([17, 0]);
        h.extend(((units << 3) | u16::from(more)).to_be_bytes());
        h.extend(id.to_be_bytes());
        h.extend(data);
        h
    };
    frame(HOST_MAC, CLIENT_MAC, src.is_ipv6(), &ip_packet)
}

/// The datagram the fragment frames carry, reassembled by offset and verified like any packet
/// (each fragment's IPv4 header checksum too); the frames' MACs must agree.
pub fn reassemble(frames: &[Vec<u8>]) -> Parsed {
    let mut data: Vec<(usize, Vec<u8>)> = Vec::new();
    let mut header: Option<(IpAddr, IpAddr)> = None;
    for f in frames {
        assert_eq!(f[..12], frames[0][..12], "the fragments' MACs");
        let p = &f[14..];
        let (src, dst, offset, payload) = if p[0] >> 4 == 4 {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            assert!(sums_to_ones(&[&p[..ihl]]), "IPv4 header checksum of a fragment");
            assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
            let s: [u8; 4] = p[12..16].try_into().unwrap();
            let d: [u8; 4] = p[16..20].try_into().unwrap();
            let offset = usize::from(u16::from_be_bytes([p[6], p[7]]) & 0x1fff) * 8;
            (IpAddr::from(s), IpAddr::from(d), offset, p[ihl..].to_vec())
        } else {
            assert_eq!(p[6], 44, "a fragment header");
            let s: [u8; 16] = p[8..24].try_into().unwrap();
            let d: [u8; 16] = p[24..40].try_into().unwrap();
            let offset = usize::from(u16::from_be_bytes([p[42], p[43]]) & 0xfff8);
            (IpAddr::from(s), IpAddr::from(d), offset, p[48..].to_vec())
        };
        match header {
            None => header = Some((src, dst)),
            Some(h) => assert_eq!(h, (src, dst), "the fragments' addresses agree"),
        }
        data.push((offset, payload));
    }
    data.sort();
    let mut datagram = Vec::new();
    for (offset, d) in data {
        assert_eq!(offset, datagram.len(), "contiguous fragments");
        datagram.extend(d);
    }
    let (src, dst) = header.expect("fragments");
    let mut ip_packet = ip_header(src, dst, 17, datagram.len(), false);
    ip_packet.extend(datagram);
    let mac = |o: usize| -> [u8; 6] { frames[0][o..o + 6].try_into().unwrap() };
    Parsed { dst_mac: mac(0), src_mac: mac(6), ip: verify_ip(&ip_packet) }
}

/// The verifier itself: a wrong checksum anywhere in a quote is caught, not only in the
/// outer headers.
#[test]
fn the_verifier_catches_wrong_checksums_in_a_quote() {
    let quoted = |corrupt: fn(&mut Vec<u8>)| {
        let s = spec(Protocol::Udp, ("10.77.0.1", 8080), ("192.0.2.200", 40000));
        let mut quote = ip_part(&packet(&s)).to_vec();
        corrupt(&mut quote);
        // The ICMP checksum is computed over the corrupted quote: only the quote is wrong.
        too_big("10.77.0.254", "10.77.0.1", 1400, &quote)
    };
    let fails = |frame: Vec<u8>| std::panic::catch_unwind(|| parse_and_verify(&frame)).is_err();
    assert!(!fails(quoted(|_| {})));
    assert!(fails(quoted(|q| q[10] ^= 1)), "the quoted IPv4 header checksum");
    assert!(fails(quoted(|q| q[20 + 7] ^= 1)), "the quoted UDP checksum");
    assert!(fails(quoted(|q| q[12] ^= 1)), "a quoted address the checksums cover");
    let mut frame = quoted(|_| {});
    frame[14 + 20 + 2] ^= 1;
    assert!(fails(frame), "the ICMP checksum");
}
