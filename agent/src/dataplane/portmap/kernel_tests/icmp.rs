//! ICMP and ICMPv6 errors about tracked flows (`pm_icmp`, tail-called by `pm_tc_in`): the
//! outer and the quoted headers translated like the packets they are about, every checksum
//! (outer IPv4 header, ICMP, ICMPv6 with its pseudo-header, quoted IPv4 header, quoted TCP/UDP)
//! recomputed from scratch; errors about anything else untouched.

use plexus_ebpf_common::flow::TCP_SYN;

use super::*;

/// A router on the way between the node and the client.
fn router(host: &str) -> &'static str {
    if ip(host).is_ipv6() {
        "fd00:77::fe"
    } else {
        "10.77.0.254"
    }
}

const MTU: u16 = 1280;

/// A mapping with one tracked flow (the request and the pod's reply went through), and the
/// frames of both as they came out translated.
struct Tracked {
    f: Fixture,
    request_out: Vec<u8>,
    reply_out: Vec<u8>,
}

fn tracked(proto: Protocol, host: &'static str, pod: &'static str, client: &'static str) -> Tracked {
    let mut f = Fixture::new();
    f.tables.install(&entry(proto, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let (verdict, request_out) = f.send(&spec(proto, (client, 40000), (host, 8080)).flags(TCP_SYN));
    assert_eq!(verdict, REDIRECT);
    let (verdict, reply_out) = f.send(&spec(proto, (pod, 80), (client, 40000)));
    assert_eq!(verdict, NEXT);
    assert_eq!(parse_and_verify(&reply_out).src, (ip(host), 8080));
    Tracked { f, request_out, reply_out }
}

/// A router's "fragmentation needed" / "packet too big" about a reply of the pod (as it left
/// the node: from hostIP:hostPort) reaches the pod, about the reply as the pod sent it: path
/// MTU discovery through the mapping.
fn too_big_reaches_the_pod(proto: Protocol, host: &'static str, pod: &'static str, client: &'static str) {
    let t = tracked(proto, host, pod, client);
    let error = too_big(router(host), host, MTU, ip_part(&t.reply_out));
    let (verdict, out) = t.f.run(TC_INGRESS, &error);
    assert_eq!(verdict, REDIRECT, "delivered to the pod like a forward packet");
    assert_eq!(out.len(), error.len());
    let got = parse_and_verify(&out);
    assert_eq!((got.dst_mac, got.src_mac), (POD_MAC, CLIENT_MAC));
    assert_eq!((got.src.0, got.dst.0), (ip(router(host)), ip(pod)), "outer destination: the pod");
    let icmp = got.icmp();
    let [hi, lo] = MTU.to_be_bytes();
    let (kind, code) = if ip(host).is_ipv6() { (2, 0) } else { (3, 4) };
    assert_eq!((icmp.kind, icmp.code, icmp.rest), (kind, code, [0, 0, hi, lo]), "type, code and MTU kept");
    let q = &icmp.quoted;
    assert_eq!(q.proto, proto_number(proto));
    assert_eq!(q.src, (ip(pod), 80), "the quoted reply as the pod sent it");
    assert_eq!(q.dst, (ip(client), 40000));
    assert!(q.payload_intact);
    let s = t.f.flow_stats();
    assert_eq!((s.icmp, s.forward, s.reverse), (1, 1, 1));
}

#[test]
fn fragmentation_needed_about_a_tcp_reply_reaches_the_pod() {
    too_big_reaches_the_pod(Protocol::Tcp, "10.77.0.1", "10.77.0.5", "192.0.2.200");
}

#[test]
fn fragmentation_needed_about_a_udp_reply_reaches_the_pod() {
    too_big_reaches_the_pod(Protocol::Udp, "10.77.0.1", "10.77.0.5", "192.0.2.200");
}

#[test]
fn packet_too_big_about_a_tcp_reply_reaches_the_pod() {
    too_big_reaches_the_pod(Protocol::Tcp, "fd00:77::1", "fd00:77::5", "2001:db8::c8");
}

#[test]
fn packet_too_big_about_a_udp_reply_reaches_the_pod() {
    too_big_reaches_the_pod(Protocol::Udp, "fd00:77::1", "fd00:77::5", "2001:db8::c8");
}

/// The pod's "port unreachable" about a request it received through the mapping reaches the
/// client from the host IP, about the request as the client sent it.
fn unreachable_from_the_pod_reaches_the_client(
    proto: Protocol,
    host: &'static str,
    pod: &'static str,
    client: &'static str,
) {
    let t = tracked(proto, host, pod, client);
    let error = port_unreachable(pod, client, ip_part(&t.request_out));
    let (verdict, out) = t.f.run(TC_INGRESS, &error);
    assert_eq!(verdict, NEXT, "it goes on to the client");
    assert_eq!(out.len(), error.len());
    let got = parse_and_verify(&out);
    assert_eq!((got.dst_mac, got.src_mac), (HOST_MAC, CLIENT_MAC), "MACs untouched");
    assert_eq!((got.src.0, got.dst.0), (ip(host), ip(client)), "outer source: the host IP");
    let icmp = got.icmp();
    let (kind, code) = if ip(host).is_ipv6() { (1, 4) } else { (3, 3) };
    assert_eq!((icmp.kind, icmp.code, icmp.rest), (kind, code, [0; 4]));
    let q = &icmp.quoted;
    assert_eq!(q.src, (ip(client), 40000));
    assert_eq!(q.dst, (ip(host), 8080), "the quoted request as the client sent it");
    assert!(q.payload_intact);
    assert_eq!(t.f.flow_stats().icmp, 1);
}

#[test]
fn port_unreachable_from_the_pod_about_a_udp_request_reaches_the_client() {
    unreachable_from_the_pod_reaches_the_client(Protocol::Udp, "10.77.0.1", "10.77.0.5", "192.0.2.200");
}

#[test]
fn port_unreachable_from_the_pod_about_a_tcp_request_reaches_the_client() {
    unreachable_from_the_pod_reaches_the_client(Protocol::Tcp, "10.77.0.1", "10.77.0.5", "192.0.2.200");
}

#[test]
fn icmpv6_port_unreachable_from_the_pod_about_a_udp_request_reaches_the_client() {
    unreachable_from_the_pod_reaches_the_client(Protocol::Udp, "fd00:77::1", "fd00:77::5", "2001:db8::c8");
}

#[test]
fn icmpv6_port_unreachable_from_the_pod_about_a_tcp_request_reaches_the_client() {
    unreachable_from_the_pod_reaches_the_client(Protocol::Tcp, "fd00:77::1", "fd00:77::5", "2001:db8::c8");
}

/// A router's error about a request the pod received (the outer source is not the pod): the
/// quote is translated back to the client's view, the outer source stays the router's.
#[test]
fn an_error_from_a_router_about_a_request_keeps_its_source() {
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "192.0.2.200");
    let t = tracked(Protocol::Udp, host, pod, client);
    let error = icmp_error("10.77.0.254", client, 11, 0, [0; 4], ip_part(&t.request_out));
    let (verdict, out) = t.f.run(TC_INGRESS, &error);
    assert_eq!(verdict, NEXT);
    let got = parse_and_verify(&out);
    assert_eq!((got.src.0, got.dst.0), (ip("10.77.0.254"), ip(client)));
    assert_eq!(got.icmp().quoted.dst, (ip(host), 8080));
}

/// Errors about anything but a tracked flow of a mapping pass byte for byte.
#[test]
fn errors_about_untracked_flows_pass_untouched() {
    for (host, pod, client, other, peer) in [
        ("10.77.0.1", "10.77.0.5", "192.0.2.200", "192.0.2.201", "192.0.2.10"),
        ("fd00:77::1", "fd00:77::5", "2001:db8::c8", "2001:db8::c9", "2001:db8::10"),
    ] {
        let t = tracked(Protocol::Udp, host, pod, client);
        let untouched = |frame: Vec<u8>, why: &str| {
            assert_eq!(t.f.run(TC_INGRESS, &frame), (NEXT, frame.clone()), "{why}: untouched");
        };
        let quote = |s: Spec| packet(&s)[14..].to_vec();
        // To the host IP, about a "reply" from the host port to a client with no flow.
        let stray_reply = quote(spec(Protocol::Udp, (host, 8080), (other, 40000)));
        untouched(too_big(router(host), host, MTU, &stray_reply), "about a reply to another client");
        // About a reply of the tracked client from another port of the host.
        let other_port = quote(spec(Protocol::Udp, (host, 8081), (client, 40000)));
        untouched(too_big(router(host), host, MTU, &other_port), "about another host port");
        // From the pod, about a request of a client it talks to directly.
        let direct = quote(spec(Protocol::Udp, (other, 40000), (pod, 80)));
        untouched(port_unreachable(pod, other, &direct), "about a direct client's request");
        // From the pod, about a packet of its own connection from its containerPort.
        let own = quote(spec(Protocol::Udp, (pod, 80), (peer, 53)));
        untouched(port_unreachable(peer, pod, &own), "about the pod's own connection");
        // Not an error: an echo request to the host IP.
        let echo = if ip(host).is_ipv6() { (128, 0) } else { (8, 0) };
        untouched(icmp_error(client, host, echo.0, echo.1, [0, 1, 0, 1], b"ping"), "an echo request");
        assert_eq!(t.f.flow_stats().icmp, 0);
    }
}

/// Errors quoting an expired flow are not translated (and do not revive it).
#[test]
fn errors_about_an_expired_flow_pass_untouched() {
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "192.0.2.200");
    let mut f = Fixture::new();
    f.at(T0);
    f.tables.install(&entry(Protocol::Udp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let (_, request_out) = f.send(&spec(Protocol::Udp, (client, 40000), (host, 8080)));
    f.at(T0 + f.settings.timeouts.udp + SEC);
    let error = port_unreachable(pod, client, ip_part(&request_out));
    assert_eq!(f.run(TC_INGRESS, &error), (NEXT, error.clone()));
    assert_eq!(f.flow_stats().icmp, 0);
}

/// Errors about a hairpin flow (its source was rewritten too) are left alone.
#[test]
fn errors_about_a_hairpin_flow_pass_untouched() {
    let (host, pod) = ("10.77.0.1", "10.77.0.5");
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let (verdict, request_out) = f.send(&spec(Protocol::Udp, (pod, 45000), (host, 8080)));
    assert_eq!(verdict, REDIRECT);
    let error = port_unreachable(pod, host, ip_part(&request_out));
    assert_eq!(f.run(TC_INGRESS, &error), (NEXT, error.clone()));
    assert_eq!(f.flow_stats().icmp, 0);
}
