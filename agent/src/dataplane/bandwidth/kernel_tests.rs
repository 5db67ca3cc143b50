//! The shaping programs on crafted packets, run by the kernel with BPF_PROG_TEST_RUN, with the
//! programs' clock fixed through BW_CLOCK: verdicts and counters of the token bucket at rates
//! from 1 Mbit/s to 10 Gbit/s, ECN marks (with the IPv4 checksum recomputed), the EDT departure
//! time in the output context, a clock going backwards and counters wrapping; and the table's
//! bits of the interfaces without a transmit limit.
//!
//! Needs root (CAP_BPF), as `cargo xtask test` runs.

use aya::maps::{Array, MapData};
use aya::programs::{Program, SchedClassifier, TestRun, TestRunOptions};
use plexus_ebpf_common::shape::{
    cost_ns, Shape, ShapeCounters, ShapeKey, EDT_HORIZON_NS, HOOK_EGRESS, HOOK_INGRESS, MAP_CLOCK,
    NSEC_PER_SEC, SHAPE_EDT,
};

use super::plan::{Direction, Entry, Mechanism};
use super::shaper::{BW_EGRESS, BW_INGRESS, OBJECT};
use super::table::Table;
use crate::dataplane::attach::Hook;
use crate::dataplane::loader::Loaded;

const NEXT: u32 = u32::MAX; // TC_ACT_UNSPEC
const SHOT: u32 = 2;
/// The skb of a test run belongs to the loopback device.
const LO: u32 = 1;
const POD_MAC: [u8; 6] = [0x0a, 0x58, 0, 0, 0, 5];
const PEER_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 1];
const MBIT: u64 = 1_000_000;
/// `struct __sk_buff`: its size and the offset of `tstamp`.
const SKB_SIZE: usize = 192;
const SKB_TSTAMP: usize = 152;

struct Fixture {
    loaded: Loaded,
    table: Table,
    clock: Array<MapData, u64>,
}

impl Fixture {
    fn new() -> Fixture {
        let mut loaded =
            Loaded::load_object(&OBJECT, None).expect("loading the BPF object (run the tests as root)");
        let table = Table::take(loaded.ebpf_mut()).expect("maps");
        let clock = loaded.ebpf_mut().take_map(MAP_CLOCK).expect("clock map");
        let clock = Array::try_from(clock).expect("clock array");
        Fixture { loaded, table, clock }
    }

    fn set_clock(&mut self, now: u64) {
        self.clock.set(0, now, 0).expect("setting the clock");
    }

    fn limit(&mut self, key: ShapeKey, rate_bps: u64, burst_ns: u64, flags: u32) {
        self.table.set_shape(key, Shape { rate_bps, burst_ns, flags, pad: 0, tat: 0 }).expect("limit");
        let cpus = aya::util::nr_cpus().expect("cpus");
        self.table.set_counters(key, vec![ShapeCounters::default(); cpus]).expect("counters");
    }

    /// Runs `program` on `packet`; returns the verdict, the packet out and `skb->tstamp` out.
    fn run(&self, program: &str, packet: &[u8]) -> (u32, Vec<u8>, u64) {
        let prog: &SchedClassifier = match self.loaded.ebpf().program(program) {
            Some(Program::SchedClassifier(p)) => p,
            _ => panic!("no TC program {program}"),
        };
        let ctx_in = [0u8; SKB_SIZE];
        let mut ctx_out = [0u8; SKB_SIZE];
        let mut out = vec![0u8; packet.len() + 64];
        let result = prog
            .test_run(TestRunOptions {
                data_in: Some(packet),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx_in),
                ctx_out: Some(&mut ctx_out),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        out.truncate(result.data_size_out as usize);
        let tstamp = u64::from_ne_bytes(ctx_out[SKB_TSTAMP..SKB_TSTAMP + 8].try_into().expect("8 bytes"));
        (result.return_value, out, tstamp)
    }
}

fn device_key(hook: u8) -> ShapeKey {
    ShapeKey { ifindex: LO, hook, pad: 0, mac: [0; 6] }
}

/// An Ethernet + IPv4 packet of `len` bytes (IP header checksum valid) with the given TOS.
fn ipv4(dst: [u8; 6], src: [u8; 6], len: usize, tos: u8) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&src);
    p.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (len - 14) as u16;
    let mut ip = [0x45, tos, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let csum = ip_checksum(&ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    p.extend_from_slice(&ip);
    p.resize(len, 0xab);
    p
}

/// An Ethernet + IPv6 packet of `len` bytes with the given traffic class.
fn ipv6(dst: [u8; 6], src: [u8; 6], len: usize, class: u8) -> Vec<u8> {
    let mut p = Vec::with_capacity(len);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&src);
    p.extend_from_slice(&0x86ddu16.to_be_bytes());
    p.push(0x60 | (class >> 4));
    p.push(class << 4);
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(&((len - 54) as u16).to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&[0xfd; 32]);
    p.resize(len, 0xab);
    p
}

fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[test]
fn the_token_bucket_passes_its_burst_then_the_rate_from_1_mbit_to_10_gbit() {
    let mut f = Fixture::new();
    let packet = ipv4(POD_MAC, PEER_MAC, 1514, 0);
    let cost = |rate| cost_ns(1500, rate);
    for rate in [MBIT, 10 * MBIT, 100 * MBIT, 1000 * MBIT, 10_000 * MBIT] {
        let key = device_key(HOOK_INGRESS);
        // A bucket of exactly 4 packets.
        f.limit(key, rate, 4 * cost(rate), 0);
        let now = 1_000 * NSEC_PER_SEC;
        f.set_clock(now);
        let verdicts: Vec<u32> = (0..6).map(|_| f.run(BW_INGRESS, &packet).0).collect();
        assert_eq!(verdicts, [NEXT, NEXT, NEXT, NEXT, SHOT, SHOT], "rate {rate}");
        // One packet's time later, exactly one more.
        f.set_clock(now + cost(rate));
        assert_eq!(f.run(BW_INGRESS, &packet).0, NEXT, "rate {rate}");
        assert_eq!(f.run(BW_INGRESS, &packet).0, SHOT, "rate {rate}");
        // A second later, the bucket is full again (not a second's worth of packets).
        f.set_clock(now + cost(rate) + NSEC_PER_SEC);
        let verdicts: Vec<u32> = (0..5).map(|_| f.run(BW_INGRESS, &packet).0).collect();
        assert_eq!(verdicts, [NEXT, NEXT, NEXT, NEXT, SHOT], "rate {rate}");
        let c = f.table.counters(&key);
        assert_eq!((c.passed_packets, c.passed_bytes), (9, 9 * 1500), "rate {rate}");
        assert_eq!((c.dropped_packets, c.dropped_bytes), (4, 4 * 1500), "rate {rate}");
        assert_eq!(c.marked_packets, 0);
        // The clock in the map is where admission left it.
        assert_eq!(f.table.shape(&key).expect("shape").tat, now + cost(rate) + NSEC_PER_SEC + 4 * cost(rate));
    }
}

#[test]
fn macvlan_limits_match_the_pods_mac_only() {
    let mut f = Fixture::new();
    let ingress = ShapeKey { ifindex: LO, hook: HOOK_INGRESS, pad: 0, mac: POD_MAC };
    let egress = ShapeKey { ifindex: LO, hook: HOOK_EGRESS, pad: 0, mac: POD_MAC };
    f.limit(ingress, 10 * MBIT, 1, 0);
    f.limit(egress, 10 * MBIT, 1, 0);
    f.set_clock(NSEC_PER_SEC);
    // Towards the pod on the receive path, from the pod on the transmit path: limited (the
    // bucket is smaller than a packet, so everything drops).
    assert_eq!(f.run(BW_INGRESS, &ipv4(POD_MAC, PEER_MAC, 100, 0)).0, SHOT);
    assert_eq!(f.run(BW_EGRESS, &ipv4(PEER_MAC, POD_MAC, 100, 0)).0, SHOT);
    // Other pods' traffic, and the pod's own in the other direction of each hook: untouched.
    assert_eq!(f.run(BW_INGRESS, &ipv4(PEER_MAC, POD_MAC, 100, 0)).0, NEXT);
    assert_eq!(f.run(BW_EGRESS, &ipv4(POD_MAC, PEER_MAC, 100, 0)).0, NEXT);
    assert_eq!(f.table.counters(&ingress).dropped_packets, 1);
    assert_eq!(f.table.counters(&egress).dropped_packets, 1);
}

#[test]
fn ect_packets_are_ce_marked_past_half_the_bucket_with_a_valid_checksum() {
    let mut f = Fixture::new();
    let key = device_key(HOOK_EGRESS);
    let rate = 100 * MBIT;
    f.limit(key, rate, 4 * cost_ns(986, rate), 0);
    f.set_clock(NSEC_PER_SEC);
    for (ect, expected_tos) in [(0b10u8, 0b11u8), (0b01, 0b11)] {
        f.limit(key, rate, 4 * cost_ns(986, rate), 0);
        let packet = ipv4(POD_MAC, PEER_MAC, 1000, 0xb8 | ect);
        let runs: Vec<(u32, Vec<u8>, u64)> = (0..5).map(|_| f.run(BW_EGRESS, &packet)).collect();
        // The first two within half the bucket: as they were.
        assert_eq!(runs[0].1, packet);
        assert_eq!(runs[1].1, packet);
        // The next two: passed with CE, the header checksum still valid.
        for (verdict, out, _) in &runs[2..4] {
            assert_eq!(*verdict, NEXT);
            assert_eq!(out[15], 0xb8 | expected_tos);
            assert_eq!(ip_checksum(&out[14..34]), 0, "IPv4 header checksum after marking");
            assert_eq!(out[16..24], packet[16..24], "only the TOS byte and the checksum change");
            assert_eq!(out[26..], packet[26..], "only the TOS byte and the checksum change");
        }
        // Past the bucket: dropped, even ECN-capable.
        assert_eq!(runs[4].0, SHOT);
        let c = f.table.counters(&key);
        assert_eq!((c.passed_packets, c.marked_packets, c.dropped_packets), (4, 2, 1));
        f.set_clock(2 * NSEC_PER_SEC);
    }
    // IPv6: the ECN bits sit across the first two bytes.
    f.limit(key, rate, 4 * cost_ns(986, rate), 0);
    f.set_clock(3 * NSEC_PER_SEC);
    let packet = ipv6(POD_MAC, PEER_MAC, 1000, 0x02);
    let outs: Vec<Vec<u8>> = (0..3).map(|_| f.run(BW_EGRESS, &packet).1).collect();
    assert_eq!(outs[1], packet);
    assert_eq!(outs[2][15], (0x02 | 0x03) << 4, "CE in IPv6's traffic class");
    assert_eq!(outs[2][14], packet[14]);
    // Not ECN-capable: never marked, only dropped.
    f.limit(key, rate, 4 * cost_ns(986, rate), 0);
    let plain = ipv4(POD_MAC, PEER_MAC, 1000, 0xb8);
    let verdicts: Vec<(u32, Vec<u8>)> =
        (0..5).map(|_| f.run(BW_EGRESS, &plain)).map(|(v, o, _)| (v, o)).collect();
    assert!(verdicts[..4].iter().all(|(v, o)| *v == NEXT && *o == plain));
    assert_eq!(verdicts[4].0, SHOT);
}

#[test]
fn edt_stamps_departure_times_spaced_by_the_packets_cost() {
    let mut f = Fixture::new();
    let key = device_key(HOOK_EGRESS);
    for rate in [MBIT, 100 * MBIT, 10_000 * MBIT] {
        let cost = cost_ns(1500, rate);
        f.limit(key, rate, 2 * cost, SHAPE_EDT);
        let now = 50 * NSEC_PER_SEC;
        f.set_clock(now);
        let packet = ipv4(PEER_MAC, POD_MAC, 1514, 0);
        let horizon = EDT_HORIZON_NS / cost;
        let mut stamps = Vec::new();
        for _ in 0..(horizon + 2).min(40) {
            let (verdict, _, tstamp) = f.run(BW_EGRESS, &packet);
            stamps.push((verdict, tstamp));
        }
        // Within the burst: now; then one cost apart.
        assert_eq!(stamps[0], (NEXT, now), "rate {rate}");
        assert_eq!(stamps[1], (NEXT, now), "rate {rate}");
        for (i, (verdict, tstamp)) in stamps.iter().enumerate().skip(2) {
            let expected = now + (i as u64 - 1) * cost;
            if expected - now <= EDT_HORIZON_NS {
                assert_eq!((*verdict, *tstamp), (NEXT, expected), "rate {rate}, packet {i}");
            } else {
                assert_eq!(*verdict, SHOT, "rate {rate}, packet {i}: beyond the horizon");
            }
        }
    }
}

#[test]
fn a_clock_gone_backwards_restarts_the_bucket_a_lagging_now_does_not() {
    let mut f = Fixture::new();
    let key = device_key(HOOK_INGRESS);
    let rate = 10 * MBIT;
    let cost = cost_ns(1500, rate);
    f.limit(key, rate, 2 * cost, 0);
    let packet = ipv4(POD_MAC, PEER_MAC, 1514, 0);
    let now = 500 * NSEC_PER_SEC;
    f.set_clock(now);
    assert_eq!(f.run(BW_INGRESS, &packet).0, NEXT);
    assert_eq!(f.run(BW_INGRESS, &packet).0, NEXT);
    assert_eq!(f.run(BW_INGRESS, &packet).0, SHOT);
    // A millisecond back (this CPU read its now before another CPU filled the bucket): still
    // over the limit, the clock untouched, not a fresh bucket.
    let full = f.table.shape(&key).expect("shape").tat;
    f.set_clock(now - 1_000_000);
    assert_eq!(f.run(BW_INGRESS, &packet).0, SHOT);
    assert_eq!(f.table.shape(&key).expect("shape").tat, full);
    // Ten seconds back: the clock in the map is far ahead of "now"; a fresh bucket.
    f.set_clock(now - 10 * NSEC_PER_SEC);
    assert_eq!(f.run(BW_INGRESS, &packet).0, NEXT);
    assert_eq!(f.table.shape(&key).expect("shape").tat, now - 10 * NSEC_PER_SEC + cost);
    // A clock state near the end of u64 (wrapped arithmetic would make it look idle or
    // hopelessly far): restarts too, and nothing overflows.
    let mut s = f.table.shape(&key).expect("shape");
    s.tat = u64::MAX - 10;
    f.table.set_shape(key, s).expect("shape");
    assert_eq!(f.run(BW_INGRESS, &packet).0, NEXT);
    assert_eq!(f.table.shape(&key).expect("shape").tat, now - 10 * NSEC_PER_SEC + cost);
}

#[test]
fn counters_wrap_like_the_agent_sums_them() {
    let mut f = Fixture::new();
    let key = device_key(HOOK_INGRESS);
    f.limit(key, 10_000 * MBIT, NSEC_PER_SEC, 0);
    let cpus = aya::util::nr_cpus().expect("cpus");
    let near =
        ShapeCounters { passed_packets: u64::MAX, passed_bytes: u64::MAX - 100, ..ShapeCounters::default() };
    f.table.set_counters(key, vec![near; cpus]).expect("counters");
    f.set_clock(NSEC_PER_SEC);
    assert_eq!(f.run(BW_INGRESS, &ipv4(POD_MAC, PEER_MAC, 214, 0)).0, NEXT);
    let c = f.table.counters(&key);
    // Every CPU holds MAX (one of them wrapped past it by the packet): the sum wraps as well.
    let cpus = cpus as u64;
    assert_eq!(c.passed_packets, u64::MAX.wrapping_mul(cpus).wrapping_add(1));
    assert_eq!(c.passed_bytes, (u64::MAX - 100).wrapping_mul(cpus).wrapping_add(200));
}

#[test]
fn unlimited_devices_and_non_ip_frames_pass_untouched() {
    let mut f = Fixture::new();
    f.set_clock(NSEC_PER_SEC);
    let packet = ipv4(POD_MAC, PEER_MAC, 600, 0);
    assert_eq!(f.run(BW_INGRESS, &packet), (NEXT, packet.clone(), 0));
    assert_eq!(f.run(BW_EGRESS, &packet), (NEXT, packet, 0));
    // An ARP frame through a limit: charged like any frame, never marked.
    let key = device_key(HOOK_INGRESS);
    f.limit(key, 10 * MBIT, NSEC_PER_SEC, 0);
    let mut arp = ipv4(POD_MAC, PEER_MAC, 60, 0);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(f.run(BW_INGRESS, &arp), (NEXT, arp.clone(), 0));
    assert_eq!(f.table.counters(&key).passed_packets, 1);
}

fn entry(ifindex: u32, hook: Hook, mac: Option<[u8; 6]>) -> Entry {
    Entry {
        direction: if hook == Hook::Egress { Direction::Ingress } else { Direction::Egress },
        ifindex,
        ifname: format!("if{ifindex}"),
        hook,
        mac,
        rate_bps: 10 * MBIT,
        burst_bits: None,
        burst_ns: NSEC_PER_SEC,
        mechanism: Mechanism::TokenBucket,
    }
}

/// The bits of the interfaces without a transmit limit (which the port mapping programs read
/// instead of looking every delivery up in the limits) follow the limits: all set when the
/// table is taken from an object with none, cleared by a transmit limit (of a whole device or
/// of one MAC) and not by a receive limit, kept clear while an interface with the same low
/// index bits is still limited. A bit wrongly set under a limit is what `verify` reports and
/// reconcile mends.
#[test]
fn the_bits_of_interfaces_without_a_transmit_limit_follow_the_limits() {
    let mut f = Fixture::new();
    let t = &mut f.table;
    let unlimited = |t: &Table| [7, 0x1_0007, 8, 9, 65535].map(|ifindex| t.marked_unlimited(ifindex));
    assert_eq!(unlimited(t), [true; 5], "written at take: the object's map was all clear");

    let veth = entry(7, Hook::Egress, None);
    let same_low_bits = entry(0x1_0007, Hook::Egress, None);
    let receive = entry(8, Hook::Ingress, None);
    let master = entry(9, Hook::Egress, Some(POD_MAC));
    t.install(&receive).expect("install");
    assert_eq!(unlimited(t), [true; 5], "a receive limit is not the programs' concern");
    t.install(&veth).expect("install");
    assert_eq!(unlimited(t), [false, false, true, true, true], "7 and 65543 share a bit");
    t.install(&same_low_bits).expect("install");
    t.install(&master).expect("install");
    assert_eq!(unlimited(t), [false, false, true, false, true]);
    for e in [&veth, &same_low_bits, &receive, &master] {
        assert_eq!(t.verify(e), None);
    }

    t.remove(&veth).expect("remove");
    assert_eq!(unlimited(t), [false, false, true, false, true], "65543 still limited");
    t.remove_key(&same_low_bits.key(), "65543").expect("remove");
    assert_eq!(unlimited(t), [true, true, true, false, true]);
    t.remove(&master).expect("remove");
    t.remove(&receive).expect("remove");
    assert_eq!(unlimited(t), [true; 5]);

    t.install(&veth).expect("install");
    t.mark_unlimited(7).expect("marking");
    assert!(t.verify(&veth).is_some_and(|problem| problem.contains("marked unlimited")));
    assert_eq!(t.reconcile(&[veth.clone(), master.clone()]).expect("reconcile"), (0, 2));
    assert_eq!(unlimited(t), [false, false, true, false, true]);
    assert_eq!(t.verify(&veth), None);
    assert_eq!(t.reconcile(std::slice::from_ref(&master)).expect("reconcile"), (1, 0));
    assert_eq!(unlimited(t), [true, true, true, false, true], "a stale limit's bit is set again");
}
