//! The XDP program (`pm_xdp`) on crafted frames: what it translates (every checksum recomputed
//! from scratch), the flow it makes (the one TC makes for the same request, answered by TC),
//! everything it leaves to TC byte for byte, and the ingress limits it enforces with the
//! shaping programs' arithmetic, maps and mark.

use aya::maps::{Array, HashMap, PerCpuHashMap};
use aya::programs::{Program, TestRun, TestRunOptions, Xdp};
use plexus_ebpf_common::flow::FLOW_REPLIED;
use plexus_ebpf_common::shape::{
    admit, ifindex_bit, Shape, ShapeCounters, ShapeKey, Verdict, HOOK_EGRESS, HOOK_INGRESS, MAP_CLOCK,
    MAP_LIMITS, MAP_STATS as MAP_SHAPE_STATS, MAP_UNLIMITED, XDP_CHARGED,
};

use super::*;
use crate::dataplane::maps::per_cpu;
use crate::dataplane::portmap::mapper::XDP;

/// XDP_PASS: the packet goes on to the stack (and TC).
const PASS: u32 = 2;

impl Fixture {
    /// A fixture at [`T0`] with `e` installed.
    fn at_t0_with(e: &Entry) -> Fixture {
        let mut f = Fixture::new();
        f.at(T0);
        f.tables.install(e).unwrap();
        f
    }

    /// Runs `packet` through `pm_xdp` as received on the loopback device (where the test
    /// mappings deliver with [`Hook::Ingress`]).
    fn run_xdp(&self, packet: &[u8]) -> (u32, Vec<u8>) {
        let prog: &Xdp = match self.loaded.ebpf().program(XDP) {
            Some(Program::Xdp(p)) => p,
            _ => panic!("no XDP program {XDP}"),
        };
        // struct xdp_md: data (the metadata's length), data_end (the frame's), data_meta,
        // ingress_ifindex, rx_queue_index, egress_ifindex.
        let md: Vec<u8> =
            [0, packet.len() as u32, 0, LO, 0, 0].iter().flat_map(|w| w.to_ne_bytes()).collect();
        let mut out = vec![0u8; packet.len() + 256];
        let result = prog
            .test_run(TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut out),
                ctx_in: Some(&md),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN of the XDP program");
        out.truncate(result.data_size_out as usize);
        (result.return_value, out)
    }

    fn assert_xdp_untouched(&self, packet: &[u8], why: &str) {
        assert_eq!(self.run_xdp(packet), (PASS, packet.to_vec()), "{why}: passed to TC untouched");
    }
}

/// A mapping delivered up the receive path of the device the test runs on (a macvlan master).
fn on_master(proto: Protocol, host: &str, host_port: u16, pod: &str, container_port: u16) -> Entry {
    entry(proto, host, host_port, pod, container_port, (LO, Hook::Ingress))
}

const FAMILIES: [(&str, &str, &str); 2] =
    [("10.78.0.1", "10.78.0.5", "10.78.0.200"), ("fd00:78::1", "fd00:78::5", "fd00:78::c8")];

/// The request translated in XDP, every checksum right; the flow it made is the one TC makes
/// for the same request; the reply, through the master's transmit path (TC), is translated back.
#[test]
fn mapped_requests_are_translated_in_xdp_and_answered_through_tc() {
    for (host, pod, client) in FAMILIES {
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let e = on_master(proto, host, 8080, pod, 80);
            let f = Fixture::at_t0_with(&e);
            let request = packet(&spec(proto, (client, 40000), (host, 8080)).flags(0x02));
            let (verdict, out) = f.run_xdp(&request);
            assert_eq!(verdict, PASS, "{proto:?} {host}: up to macvlan's rx_handler");
            assert_eq!(out.len(), request.len());
            let got = parse_and_verify(&out);
            assert_eq!(got.dst, (ip(pod), 80), "{proto:?} {host}");
            assert_eq!(got.src, (ip(client), 40000), "the client stays visible to the pod");
            assert_eq!((got.dst_mac, got.src_mac), (POD_MAC, CLIENT_MAC));
            assert!(got.payload_intact);

            // The same flow TC makes for the same request.
            let key = flow_key(proto, (pod, 80), (client, 40000));
            let made = f.flow(&key).expect("XDP made the flow");
            let tc = Fixture::at_t0_with(&e);
            assert_eq!(tc.run(TC_INGRESS, &request).0, NEXT);
            assert_eq!(tc.flow(&key), Some(made), "{proto:?} {host}: the flow TC makes");
            assert_eq!(tc.run(TC_INGRESS, &request).1, out, "{proto:?} {host}: TC's translation");

            // What XDP translated, TC leaves alone on the same receive path.
            assert_eq!(f.run(TC_INGRESS, &out), (NEXT, out.clone()), "translated once");

            // The pod's reply leaves through the master's transmit path.
            let (verdict, back) = f.run(TC_EGRESS, &packet(&spec(proto, (pod, 80), (client, 40000))));
            assert_eq!(verdict, NEXT);
            let got = parse_and_verify(&back);
            assert_eq!((got.src, got.dst), ((ip(host), 8080), (ip(client), 40000)), "{proto:?} {host}");
            assert!(got.payload_intact);
            assert_ne!(f.flow(&key).unwrap().state & FLOW_REPLIED, 0, "the reply was seen");

            let c = f.counters(&e);
            assert_eq!((c.packets_in, c.packets_out), (1, 1));
            assert_eq!(c.bytes_in, request.len() as u64);
            let s = f.flow_stats();
            assert_eq!((s.created, s.forward, s.reverse), (1, 1, 1));
        }
    }
}

/// A bridge pod's mapping, on one of the bridge's uplinks: a request addressed to the bridge
/// (the MAC of the interface holding the host IP) is translated exactly as TC on the bridge
/// translates it, with the same flow, and passed on with the pod's MAC for the bridge to
/// forward to the pod's port; the reply, through the pod's veth (TC), is translated back. The
/// same request addressed to another MAC, or to a host IP another interface than the bridge
/// holds, is the stack's and TC's, untouched.
#[test]
fn bridge_requests_on_an_uplink_are_translated_for_the_bridge_to_forward() {
    for (host, pod, client) in FAMILIES {
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let e = Entry { via_bridge: true, ..entry(proto, host, 8080, pod, 80, (7, Hook::Egress)) };
            let mut f = Fixture::at_t0_with(&e);
            let request = packet(&spec(proto, (client, 40000), (host, 8080)).flags(0x02));
            let (verdict, out) = f.run_xdp(&request);
            assert_eq!(verdict, PASS, "{proto:?} {host}: on to the bridge's forwarding");
            let got = parse_and_verify(&out);
            assert_eq!(got.dst, (ip(pod), 80), "{proto:?} {host}");
            assert_eq!(got.src, (ip(client), 40000), "the client stays visible to the pod");
            assert_eq!(
                (got.dst_mac, got.src_mac),
                (POD_MAC, CLIENT_MAC),
                "the bridge forwards by the pod's MAC"
            );
            assert!(got.payload_intact);

            // TC on the bridge makes the same flow and the same bytes (it redirects instead).
            let key = flow_key(proto, (pod, 80), (client, 40000));
            let made = f.flow(&key).expect("XDP made the flow");
            let tc = Fixture::at_t0_with(&e);
            let (verdict, by_tc) = tc.run(TC_INGRESS, &request);
            assert_eq!((verdict, &by_tc), (REDIRECT, &out), "{proto:?} {host}: TC's translation");
            assert_eq!(tc.flow(&key), Some(made), "{proto:?} {host}: the flow TC makes");

            // The reply enters the pod's veth, where TC translates it back.
            let (verdict, back) = f.run(TC_INGRESS, &packet(&spec(proto, (pod, 80), (client, 40000))));
            assert_eq!(verdict, NEXT);
            let got = parse_and_verify(&back);
            assert_eq!((got.src, got.dst), ((ip(host), 8080), (ip(client), 40000)), "{proto:?} {host}");
            assert_ne!(f.flow(&key).unwrap().state & FLOW_REPLIED, 0);
            let c = f.counters(&e);
            assert_eq!((c.packets_in, c.packets_out), (1, 1));

            // Addressed to another MAC than the bridge's: not a request to the bridge.
            let mut elsewhere = request.clone();
            elsewhere[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
            f.assert_xdp_untouched(&elsewhere, "another MAC");
            // Another interface holds the host IP (hostInterface): its own ingress is TC's.
            let other = Entry { via_bridge: false, host_port: 9090, ..e.clone() };
            f.tables.install(&other).unwrap();
            f.assert_xdp_untouched(
                &packet(&spec(proto, (client, 40000), (host, 9090))),
                "not the bridge's IP",
            );
            assert_eq!(f.flows().len(), 1, "{proto:?} {host}: no other flow");
        }
    }
}

/// XDP_REDIRECT.
const XDP_REDIRECTED: u32 = 4;

/// A bridge pod whose veth takes XDP frames: the request on an uplink is translated as for the
/// bridge and redirected straight into the pod's veth; while the pod's ingress is limited on
/// that veth's transmit path (which a redirect would skip), it goes through the bridge instead.
/// The limit is looked up only while the veth's bit in `BW_UNLIMITED` is clear: set wrongly,
/// the request is redirected as if unlimited.
#[test]
fn bridge_requests_are_redirected_into_a_veth_that_takes_xdp_frames_unless_its_ingress_is_limited() {
    for (host, pod, client) in FAMILIES {
        for proto in [Protocol::Tcp, Protocol::Udp] {
            let through_bridge =
                Entry { via_bridge: true, ..entry(proto, host, 8080, pod, 80, (7, Hook::Egress)) };
            let f = Fixture::at_t0_with(&through_bridge);
            let request = packet(&spec(proto, (client, 40000), (host, 8080)).flags(0x02));
            let (verdict, for_bridge) = f.run_xdp(&request);
            assert_eq!(verdict, PASS);

            let e = Entry { xdp_redirect: true, ..through_bridge.clone() };
            let mut f = Fixture::at_t0_with(&e);
            let (verdict, out) = f.run_xdp(&request);
            assert_eq!(verdict, XDP_REDIRECTED, "{proto:?} {host}: into the pod's veth");
            assert_eq!(out, for_bridge, "{proto:?} {host}: the same translation");
            assert!(f.flow(&flow_key(proto, (pod, 80), (client, 40000))).is_some(), "the same flow");
            assert_eq!(f.counters(&e).packets_in, 1);

            // No limit on the veth, as the agent marks it.
            f.set_unlimited_bit(7, true);
            assert_eq!(f.run_xdp(&request).0, XDP_REDIRECTED, "{proto:?} {host}: marked unlimited");

            let veth_limit = ShapeKey { ifindex: 7, hook: HOOK_EGRESS, pad: 0, mac: [0; 6] };
            f.limit(veth_limit, Shape { rate_bps: 8_000_000, burst_ns: 1_000_000, flags: 0, pad: 0, tat: 0 });
            let (verdict, out) = f.run_xdp(&request);
            assert_eq!(
                (verdict, out),
                (PASS, for_bridge.clone()),
                "{proto:?} {host}: limited, through the bridge"
            );
            assert_eq!(f.limit_counters(&veth_limit).passed_packets, 0, "the veth's limit is TC's to charge");

            f.set_unlimited_bit(7, true);
            let (verdict, out) = f.run_xdp(&request);
            assert_eq!(
                verdict, XDP_REDIRECTED,
                "{proto:?} {host}: limited but marked unlimited: not looked up"
            );
            assert_eq!(out, for_bridge);
        }
    }
}

/// A flow begun by TC (a first fragment, say) goes on in XDP: the same entry, refreshed.
#[test]
fn xdp_continues_a_flow_tc_began() {
    let e = on_master(Protocol::Tcp, "10.78.0.1", 8080, "10.78.0.5", 80);
    let mut f = Fixture::at_t0_with(&e);
    let syn = packet(&spec(Protocol::Tcp, ("10.78.0.200", 40000), ("10.78.0.1", 8080)).flags(0x02));
    assert_eq!(f.run(TC_INGRESS, &syn).0, NEXT);
    let key = flow_key(Protocol::Tcp, ("10.78.0.5", 80), ("10.78.0.200", 40000));
    let began = f.flow(&key).unwrap();
    f.at(T0 + 5 * SEC);
    let (verdict, out) =
        f.run_xdp(&packet(&spec(Protocol::Tcp, ("10.78.0.200", 40000), ("10.78.0.1", 8080))));
    assert_eq!(verdict, PASS);
    assert_eq!(parse_and_verify(&out).dst, (ip("10.78.0.5"), 80));
    let now = f.flow(&key).unwrap();
    assert_eq!((now.created_ns, now.seen_ns), (began.created_ns, T0 + 5 * SEC), "one flow, refreshed");
    assert_eq!(f.flows().len(), 1);
}

#[test]
fn udp_ipv4_without_checksum_keeps_none_in_xdp() {
    let mut f = Fixture::new();
    f.tables.install(&on_master(Protocol::Udp, "10.78.0.1", 53, "10.78.0.5", 5353)).unwrap();
    let s = Spec { udp_no_csum: true, ..spec(Protocol::Udp, ("10.78.0.200", 40000), ("10.78.0.1", 53)) };
    let (verdict, out) = f.run_xdp(&packet(&s));
    assert_eq!(verdict, PASS);
    assert_eq!(out[34 + 6..34 + 8], [0, 0], "a UDP checksum of 0 (none) stays 0");
    assert_eq!(parse_and_verify(&out).dst, (ip("10.78.0.5"), 5353));
}

/// Everything XDP does not take goes to TC byte for byte, and makes no flow.
#[test]
fn what_xdp_does_not_take_passes_untouched() {
    for (host, pod, client) in FAMILIES {
        let mut f = Fixture::new();
        for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            f.tables.install(&on_master(proto, host, 8080, pod, 80)).unwrap();
        }
        // Delivered to a pod's veth, with a host IP that is not the bridge's: TC redirects it.
        f.tables.install(&entry(Protocol::Udp, host, 9090, pod, 90, (7, Hook::Egress))).unwrap();
        let request = |proto| packet(&spec(proto, (client, 40000), (host, 8080)));

        f.assert_xdp_untouched(&packet(&spec(Protocol::Tcp, (client, 40000), (host, 8081))), "unmapped port");
        f.assert_xdp_untouched(
            &packet(&spec(Protocol::Udp, (client, 40000), (pod, 80))),
            "direct pod access",
        );
        f.assert_xdp_untouched(&packet(&spec(Protocol::Tcp, (pod, 80), (client, 40000))), "a reply");
        f.assert_xdp_untouched(&request(Protocol::Sctp), "SCTP (its CRC is TC's)");
        f.assert_xdp_untouched(&packet(&spec(Protocol::Udp, (client, 40000), (host, 9090))), "veth delivery");
        f.assert_xdp_untouched(&packet(&spec(Protocol::Tcp, (pod, 40000), (host, 8080))), "hairpin");
        // Delivered up another interface's receive path than the one it arrived on.
        f.tables.install(&entry(Protocol::Udp, host, 9191, pod, 91, (99, Hook::Ingress))).unwrap();
        f.assert_xdp_untouched(
            &packet(&spec(Protocol::Udp, (client, 40000), (host, 9191))),
            "another master",
        );
        for frag in fragments(&spec(Protocol::Udp, (client, 40000), (host, 8080)), 0x1234) {
            f.assert_xdp_untouched(&frag, "a fragment");
        }
        if host.contains('.') {
            f.assert_xdp_untouched(&with_ipv4_options(&request(Protocol::Udp)), "IPv4 options");
            let first =
                packet(&Spec { fragment: true, ..spec(Protocol::Udp, (client, 40000), (host, 8080)) });
            f.assert_xdp_untouched(&first, "a first fragment (MF)");
        }
        f.assert_xdp_untouched(&request(Protocol::Tcp)[..40], "a truncated frame");
        assert!(f.flows().is_empty(), "{host}: no flow");
        assert_eq!(f.flow_stats(), FlowStats::default());
    }
    // Not IP.
    let f = Fixture::new();
    let mut arp = vec![0xff; 6];
    arp.extend(CLIENT_MAC);
    arp.extend([0x08, 0x06]);
    arp.extend([0u8; 28]);
    f.assert_xdp_untouched(&arp, "ARP");
}

// ---- ingress limits ----

/// XDP_DROP.
const XDP_DROPPED: u32 = 1;

impl Fixture {
    /// Installs a limit (and its counters) in the object's own copies of the shaping maps (in
    /// the agent they are the shaping object's pinned ones), as the agent's table does: a
    /// transmit limit clears its interface's bit in `BW_UNLIMITED` first.
    pub(super) fn limit(&mut self, key: ShapeKey, shape: Shape) {
        if key.hook == HOOK_EGRESS {
            self.set_unlimited_bit(key.ifindex, false);
        }
        let ebpf = self.loaded.ebpf_mut();
        let mut stats: PerCpuHashMap<_, ShapeKey, ShapeCounters> =
            PerCpuHashMap::try_from(ebpf.map_mut(MAP_SHAPE_STATS).expect("BW_STATS")).unwrap();
        stats.insert(key, per_cpu(ShapeCounters::default()).unwrap(), 0).unwrap();
        let mut limits: HashMap<_, ShapeKey, Shape> =
            HashMap::try_from(ebpf.map_mut(MAP_LIMITS).expect("BW_LIMITS")).unwrap();
        limits.insert(key, shape, 0).unwrap();
    }

    /// Sets (`unlimited`) or clears interface `ifindex`'s bit in the object's own copy of
    /// `BW_UNLIMITED`, whatever the limits say.
    pub(super) fn set_unlimited_bit(&mut self, ifindex: u32, unlimited: bool) {
        let mut words: Array<_, u64> =
            Array::try_from(self.loaded.ebpf_mut().map_mut(MAP_UNLIMITED).expect("BW_UNLIMITED")).unwrap();
        let (index, bit) = ifindex_bit(ifindex);
        let word = words.get(&index, 0).expect("a word of BW_UNLIMITED");
        words.set(index, if unlimited { word | bit } else { word & !bit }, 0).expect("writing BW_UNLIMITED");
    }

    /// The shaping programs' clock stops at `now`.
    fn bw_clock(&mut self, now: u64) {
        let mut clock: Array<_, u64> =
            Array::try_from(self.loaded.ebpf_mut().map_mut(MAP_CLOCK).expect("BW_CLOCK")).unwrap();
        clock.set(0, now, 0).unwrap();
    }

    fn shape(&self, key: &ShapeKey) -> Shape {
        let limits: HashMap<_, ShapeKey, Shape> =
            HashMap::try_from(self.loaded.ebpf().map(MAP_LIMITS).unwrap()).unwrap();
        limits.get(key, 0).expect("the limit")
    }

    fn limit_counters(&self, key: &ShapeKey) -> ShapeCounters {
        let stats: PerCpuHashMap<_, ShapeKey, ShapeCounters> =
            PerCpuHashMap::try_from(self.loaded.ebpf().map(MAP_SHAPE_STATS).unwrap()).unwrap();
        stats.get(key, 0).expect("the counters").iter().fold(ShapeCounters::default(), |a, c| ShapeCounters {
            passed_packets: a.passed_packets + c.passed_packets,
            passed_bytes: a.passed_bytes + c.passed_bytes,
            dropped_packets: a.dropped_packets + c.dropped_packets,
            dropped_bytes: a.dropped_bytes + c.dropped_bytes,
            marked_packets: a.marked_packets + c.marked_packets,
        })
    }
}

/// The mark XDP leaves in the metadata of a packet it charged and passed, as it sits before
/// the frame in the test run's output.
fn charged_mark() -> Vec<u8> {
    [XDP_CHARGED, LO].iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// The pod's ingress limit on the master, keyed by its MAC as `bw_tc_in` keys it.
const POD_LIMIT: ShapeKey = ShapeKey { ifindex: LO, hook: HOOK_INGRESS, pad: 0, mac: POD_MAC };

/// A flood over the limit: XDP passes the bucket's worth (marked for TC) and drops the rest,
/// exactly as the shaping arithmetic says, advancing the limit's clock and counters as
/// `bw_tc_in` would; an idle bucket refills.
#[test]
fn over_limit_packets_are_dropped_in_xdp_with_the_shaping_arithmetic() {
    for (host, pod, client) in FAMILIES {
        let mut f = Fixture::new();
        f.tables.install(&on_master(Protocol::Udp, host, 5353, pod, 53)).unwrap();
        let request = packet(&spec(Protocol::Udp, (client, 40000), (host, 5353)));
        let ip_len = (request.len() - 14) as u64;
        // 8 Mbit/s: a byte costs 1 µs; a bucket of 5 packets.
        let shape = Shape { rate_bps: 8_000_000, burst_ns: 5 * ip_len * 1000, flags: 0, pad: 0, tat: 0 };
        f.limit(POD_LIMIT, shape);
        f.bw_clock(T0);
        let mut model = shape;
        let mut verdicts = Vec::new();
        for _ in 0..10 {
            let expected = admit(&mut model, ip_len, T0, false);
            let (verdict, out) = f.run_xdp(&request);
            match expected {
                Verdict::Pass => {
                    assert_eq!(verdict, PASS, "{host}");
                    assert_eq!(out[..8], charged_mark(), "{host}: marked for TC");
                    let got = parse_and_verify(&out[8..]);
                    assert_eq!((got.dst, got.dst_mac), ((ip(pod), 53), POD_MAC), "translated, then charged");
                }
                Verdict::Drop => assert_eq!(verdict, XDP_DROPPED, "{host}"),
                other => panic!("{other:?}"),
            }
            verdicts.push(expected);
        }
        assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Pass).count(), 5, "{verdicts:?}");
        assert_eq!(f.shape(&POD_LIMIT).tat, model.tat, "{host}: the clock the arithmetic leaves");
        let c = f.limit_counters(&POD_LIMIT);
        assert_eq!(
            (c.passed_packets, c.passed_bytes, c.dropped_packets, c.dropped_bytes),
            (5, 5 * ip_len, 5, 5 * ip_len),
            "{host}"
        );
        // A second later the bucket is full again.
        f.bw_clock(T0 + SEC);
        assert_eq!(f.run_xdp(&request).0, PASS, "{host}");
    }
}

/// ECN-capable packets (TC may CE-mark them), frames that are not IP, and frames for other
/// MACs are left to TC, uncharged and unmarked.
#[test]
fn what_the_limit_leaves_to_tc_is_uncharged_and_unmarked() {
    let mut f = Fixture::new();
    // A bucket that is always empty: anything XDP charged would be dropped.
    f.limit(POD_LIMIT, Shape { rate_bps: 8_000, burst_ns: 0, flags: 0, pad: 0, tat: 0 });
    f.bw_clock(T0);
    let mut to_pod = packet(&spec(Protocol::Udp, ("10.78.0.200", 40000), ("10.78.0.5", 53)));
    to_pod[..6].copy_from_slice(&POD_MAC);
    assert_eq!(f.run_xdp(&to_pod).0, XDP_DROPPED, "the bucket is empty");
    for (frame, why) in [(with_tos(&to_pod, 0x02), "ECT(0)"), (with_tos(&to_pod, 0x01), "ECT(1)")] {
        f.assert_xdp_untouched(&frame, why);
    }
    let mut arp = POD_MAC.to_vec();
    arp.extend(CLIENT_MAC);
    arp.extend([0x08, 0x06]);
    arp.extend([0u8; 28]);
    f.assert_xdp_untouched(&arp, "ARP");
    let mut other = to_pod.clone();
    other[..6].copy_from_slice(&HOST_MAC);
    f.assert_xdp_untouched(&other, "another MAC");
    let c = f.limit_counters(&POD_LIMIT);
    assert_eq!((c.passed_packets, c.dropped_packets), (0, 1));
}
