//! The flow table as the programs keep it: the entry a request makes, the state TCP and UDP
//! flows go through, expiry on the programs' fixed clock (`Settings::fixed_now_ns`), the
//! agent's reaper, and LRU eviction.

use std::collections::BTreeSet;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use plexus_ebpf_common::flow::{
    Flow, Settings, Timeouts, FLOW_FIN_CLIENT, FLOW_FIN_POD, FLOW_REPLIED, FLOW_RST, FLOW_SNAT, TCP_ACK,
    TCP_FIN, TCP_RST, TCP_SYN,
};

use super::*;
use crate::dataplane::portmap::table::monotonic_ns;

/// Timeouts short and all different, so a test can tell which one applied.
const SHORT: Timeouts = Timeouts {
    tcp_syn: 60 * SEC,
    tcp_established: 300 * SEC,
    tcp_closed: 30 * SEC,
    tcp_reset: 5 * SEC,
    udp: 10 * SEC,
    udp_stream: 40 * SEC,
    sctp: 50 * SEC,
};

const SYN_ACK: u8 = TCP_SYN | TCP_ACK;
const FIN_ACK: u8 = TCP_FIN | TCP_ACK;

impl Fixture {
    /// The programs' clock stopped at [`T0`], with the [`SHORT`] timeouts.
    fn short_clock(&mut self) {
        self.set(Settings { netns_cookie: 0, fixed_now_ns: T0, timeouts: SHORT });
    }

    /// Sends a request through the mapping: it must be delivered to the pod.
    fn request(&self, s: &Spec) {
        let (verdict, out) = self.send(s);
        assert_eq!(verdict, REDIRECT, "the request {:?} -> {:?} is delivered to the pod", s.src, s.dst);
        assert!(parse_and_verify(&out).payload_intact);
    }

    /// Sends a reply of the pod: it must come out from hostIP:`host_port`.
    fn reply(&self, s: &Spec, host: &str, host_port: u16) {
        assert_ne!((ip(s.src.0), s.src.1), (ip(host), host_port), "a reply as the pod sends it");
        let (verdict, out) = self.send(s);
        assert_eq!(verdict, NEXT);
        let got = parse_and_verify(&out);
        assert_eq!(got.src, (ip(host), host_port), "the reply {:?} -> {:?} is translated", s.src, s.dst);
        assert_eq!(got.dst, (ip(s.dst.0), s.dst.1));
    }

    fn state(&self, key: &FlowKey) -> u8 {
        self.flow(key).expect("the flow is tracked").state
    }

    fn timeout(&self, key: &FlowKey) -> u64 {
        let flow = self.flow(key).expect("the flow is tracked");
        self.settings.timeouts.of(flow.host.proto, flow.state)
    }
}

#[test]
fn a_request_makes_a_flow_keyed_by_its_reply() {
    for (proto, host, pod, client) in [
        (Protocol::Udp, "10.77.0.1", "10.77.0.5", "10.77.0.200"),
        (Protocol::Tcp, "fd00:77::1", "fd00:77::5", "fd00:77::c8"),
        (Protocol::Sctp, "10.77.0.1", "10.77.0.5", "10.77.0.200"),
    ] {
        let mut f = Fixture::new();
        f.at(T0);
        let e = entry(proto, host, 8080, pod, 80, (7, Hook::Egress));
        f.tables.install(&e).unwrap();
        let request = spec(proto, (client, 40000), (host, 8080)).flags(TCP_SYN);
        f.request(&request);

        let key = flow_key(proto, (pod, 80), (client, 40000));
        let made = Flow {
            host: e.host_endpoint(),
            client: addr_words(ip(client)),
            client_port: 40000u16.to_be(),
            state: 0,
            pad: 0,
            rewrite: f.tables.installed(&e).expect("installed"),
            created_ns: T0,
            seen_ns: T0,
        };
        assert_eq!(f.flows(), vec![(key, made)], "{proto:?}");
        let s = f.flow_stats();
        assert_eq!((s.created, s.forward, s.reverse, s.removed), (1, 1, 0, 0));

        // The reply two seconds later: replied, seen then.
        f.at(T0 + 2 * SEC);
        f.reply(&spec(proto, (pod, 80), (client, 40000)).flags(SYN_ACK), host, 8080);
        let replied = Flow { state: FLOW_REPLIED, seen_ns: T0 + 2 * SEC, ..made };
        assert_eq!(f.flows(), vec![(key, replied)]);

        // Within a second of the last write, a packet that changes nothing writes nothing
        // (SEEN_GRANULARITY_NS); after it, the time seen moves on.
        f.at(T0 + 2 * SEC + SEC / 2);
        f.request(&request.flags(TCP_ACK));
        assert_eq!(f.flow(&key), Some(replied));
        f.at(T0 + 3 * SEC + 1);
        f.request(&request.flags(TCP_ACK));
        assert_eq!(f.flow(&key), Some(Flow { seen_ns: T0 + 3 * SEC + 1, ..replied }));
        let s = f.flow_stats();
        assert_eq!((s.created, s.forward, s.reverse, s.removed), (1, 3, 1, 0), "one flow, refreshed");
    }
}

/// The flows an earlier version made have no counters index (zero padding where it sits now):
/// their replies are translated as before and counted nowhere; a flow the programs make
/// names its mapping's counters, and its replies count there.
#[test]
fn replies_count_at_their_flows_counters_index() {
    let mut f = Fixture::new();
    f.at(T0);
    let e = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    let key = flow_key(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.200", 40000));
    let earlier = Flow {
        host: e.host_endpoint(),
        client: addr_words(ip("10.77.0.200")),
        client_port: 40000u16.to_be(),
        state: FLOW_REPLIED,
        pad: 0,
        rewrite: e.forward(),
        created_ns: T0,
        seen_ns: T0,
    };
    assert_eq!(earlier.rewrite.counters, plexus_ebpf_common::NO_COUNTERS);
    f.tables.insert_flow(key, earlier).unwrap();
    let reply = spec(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.200", 40000)).flags(TCP_ACK);
    f.reply(&reply, "10.77.0.1", 8080);
    assert_eq!(f.counters(&e).packets_out, 0, "a flow without counters counts nowhere");
    assert_eq!(f.flow_stats().reverse, 1, "but is translated");

    f.tables.remove_flows_of(&e.host_endpoint()).unwrap();
    f.request(&spec(Protocol::Tcp, ("10.77.0.200", 40000), ("10.77.0.1", 8080)).flags(TCP_SYN));
    assert_eq!(f.flow(&key).map(|fl| fl.rewrite.counters), Some(1), "the mapping's index");
    f.reply(&reply, "10.77.0.1", 8080);
    let c = f.counters(&e);
    assert_eq!((c.packets_in, c.packets_out), (1, 1));
}

#[test]
fn a_hairpin_flow_is_keyed_by_the_host_ip_and_remembers_the_pod_as_client() {
    let mut f = Fixture::new();
    f.at(T0);
    let e = entry(Protocol::Tcp, "10.77.0.1", 8080, "10.77.0.5", 80, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    assert_eq!(
        f.send(&spec(Protocol::Tcp, ("10.77.0.5", 45000), ("10.77.0.1", 8080)).flags(TCP_SYN)).0,
        REDIRECT
    );
    let key = flow_key(Protocol::Tcp, ("10.77.0.5", 80), ("10.77.0.1", 45000));
    let flow = Flow {
        host: e.host_endpoint(),
        client: addr_words(ip("10.77.0.5")),
        client_port: 45000u16.to_be(),
        state: FLOW_SNAT,
        pad: 0,
        rewrite: f.tables.installed(&e).expect("installed"),
        created_ns: T0,
        seen_ns: T0,
    };
    assert_eq!(f.flows(), vec![(key, flow)]);
}

#[test]
fn flows_are_stamped_with_the_monotonic_clock_unless_it_is_fixed() {
    let mut f = Fixture::new();
    f.tables.install(&entry(Protocol::Udp, "10.77.0.1", 53, "10.77.0.5", 53, (7, Hook::Egress))).unwrap();
    let before = monotonic_ns().unwrap();
    f.request(&spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 53)));
    let after = monotonic_ns().unwrap();
    let flows = f.flows();
    assert_eq!(flows.len(), 1);
    let flow = flows[0].1;
    assert!((before..=after).contains(&flow.created_ns), "{before} <= {} <= {after}", flow.created_ns);
    assert_eq!(flow.seen_ns, flow.created_ns);
}

#[test]
fn tcp_fin_from_both_sides_closes_the_flow_with_the_short_timeout() {
    for (host, pod, client) in
        [("10.77.0.1", "10.77.0.5", "10.77.0.200"), ("fd00:77::1", "fd00:77::5", "fd00:77::c8")]
    {
        let mut f = Fixture::new();
        f.short_clock();
        let e = entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress));
        f.tables.install(&e).unwrap();
        let request = spec(Protocol::Tcp, (client, 40000), (host, 8080));
        let reply = spec(Protocol::Tcp, (pod, 80), (client, 40000));
        let key = flow_key(Protocol::Tcp, (pod, 80), (client, 40000));

        f.request(&request.flags(TCP_SYN));
        assert_eq!((f.state(&key), f.timeout(&key)), (0, SHORT.tcp_syn));
        f.reply(&reply.flags(SYN_ACK), host, 8080);
        f.at(T0 + SEC);
        f.request(&request.flags(TCP_ACK));
        assert_eq!((f.state(&key), f.timeout(&key)), (FLOW_REPLIED, SHORT.tcp_established));

        // The client closes first: half closed, still established.
        f.at(T0 + 2 * SEC);
        f.request(&request.flags(FIN_ACK));
        assert_eq!((f.state(&key), f.timeout(&key)), (FLOW_REPLIED | FLOW_FIN_CLIENT, SHORT.tcp_established));
        f.reply(&reply.flags(TCP_ACK), host, 8080);
        // The pod's FIN: closing, with the short timeout.
        f.at(T0 + 3 * SEC);
        f.reply(&reply.flags(FIN_ACK), host, 8080);
        let closed = FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD;
        assert_eq!((f.state(&key), f.timeout(&key)), (closed, SHORT.tcp_closed));
        f.request(&request.flags(TCP_ACK));
        assert_eq!(f.state(&key), closed, "the last ACK changes nothing");

        // Exactly at the timeout the flow is alive (a retransmitted FIN is still translated,
        // and refreshes it); a timeout later plus a second it is gone.
        let last = T0 + 3 * SEC + SHORT.tcp_closed;
        f.at(last);
        f.reply(&reply.flags(FIN_ACK), host, 8080);
        assert_eq!(f.flow(&key).map(|fl| fl.seen_ns), Some(last));
        f.at(last + SHORT.tcp_closed + SEC);
        f.assert_untouched(&reply.flags(FIN_ACK), "a reply of an expired closed flow");
        assert_eq!(f.flow(&key), None, "the expired flow is deleted by the program");
        let s = f.flow_stats();
        assert_eq!((s.created, s.removed, s.reverse), (1, 1, 4));
        assert_eq!(f.counters(&e).packets_out, 4);
    }
}

/// A packet writes only what it changes: a change of state within a second of the time seen
/// leaves that time alone (a connection's two directions run on two CPUs, and each line one
/// writes, the other fetches), so the new state's timeout counts from it.
#[test]
fn a_state_change_within_the_second_writes_the_state_alone() {
    let mut f = Fixture::new();
    f.short_clock();
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "10.77.0.200");
    f.tables.install(&entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let request = spec(Protocol::Tcp, (client, 40000), (host, 8080));
    let reply = spec(Protocol::Tcp, (pod, 80), (client, 40000));
    let key = flow_key(Protocol::Tcp, (pod, 80), (client, 40000));
    let seen = |f: &Fixture| f.flow(&key).map(|fl| (fl.state, fl.seen_ns));

    f.request(&request.flags(TCP_SYN));
    f.at(T0 + SEC / 2);
    f.reply(&reply.flags(SYN_ACK), host, 8080);
    assert_eq!(seen(&f), Some((FLOW_REPLIED, T0)), "replied; seen half a second ago still");
    f.at(T0 + SEC - 1);
    f.request(&request.flags(FIN_ACK));
    f.reply(&reply.flags(FIN_ACK), host, 8080);
    let closed = FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD;
    assert_eq!(seen(&f), Some((closed, T0)), "closed; its timeout counts from T0");

    // A second on, the time seen moves again.
    f.at(T0 + SEC);
    f.request(&request.flags(TCP_ACK));
    assert_eq!(seen(&f), Some((closed, T0 + SEC)));
    // The closed timeout counts from it: alive at its end, gone a nanosecond later.
    let flow = f.flow(&key).expect("the closed flow");
    assert!(!SHORT.expired(&flow, T0 + SEC + SHORT.tcp_closed));
    f.at(T0 + SEC + SHORT.tcp_closed + 1);
    f.assert_untouched(&reply.flags(TCP_ACK), "a reply of the expired closed flow");
    assert_eq!(f.flow(&key), None);
}

#[test]
fn tcp_rst_resets_the_flow_and_it_expires_after_the_reset_timeout() {
    let mut f = Fixture::new();
    f.short_clock();
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "10.77.0.200");
    f.tables.install(&entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();

    // The pod refuses: the RST is translated (the client must see it from the host port).
    let key = flow_key(Protocol::Tcp, (pod, 80), (client, 40000));
    f.request(&spec(Protocol::Tcp, (client, 40000), (host, 8080)).flags(TCP_SYN));
    let refusal = spec(Protocol::Tcp, (pod, 80), (client, 40000)).flags(TCP_RST | TCP_ACK);
    f.reply(&refusal, host, 8080);
    assert_eq!((f.state(&key), f.timeout(&key)), (FLOW_REPLIED | FLOW_RST, SHORT.tcp_reset));
    f.at(T0 + SHORT.tcp_reset + SEC);
    f.assert_untouched(&refusal, "a reply of an expired reset flow");
    assert_eq!(f.flow(&key), None);

    // The client resets an established connection.
    f.at(T0);
    let key = flow_key(Protocol::Tcp, (pod, 80), (client, 40001));
    let request = spec(Protocol::Tcp, (client, 40001), (host, 8080));
    f.request(&request.flags(TCP_SYN));
    f.reply(&spec(Protocol::Tcp, (pod, 80), (client, 40001)).flags(SYN_ACK), host, 8080);
    f.request(&request.flags(TCP_RST));
    assert_eq!((f.state(&key), f.timeout(&key)), (FLOW_REPLIED | FLOW_RST, SHORT.tcp_reset));
    // It reconnects from the same port: the flow starts over.
    f.at(T0 + SEC);
    f.request(&request.flags(TCP_SYN));
    assert_eq!((f.state(&key), f.timeout(&key)), (0, SHORT.tcp_syn));
    let s = f.flow_stats();
    assert_eq!((s.created, s.removed), (2, 1));
}

#[test]
fn a_new_syn_on_a_closed_flow_restarts_it() {
    let mut f = Fixture::new();
    f.short_clock();
    let (host, pod, client) = ("fd00:77::1", "fd00:77::5", "fd00:77::c8");
    f.tables.install(&entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let request = spec(Protocol::Tcp, (client, 40000), (host, 8080));
    let reply = spec(Protocol::Tcp, (pod, 80), (client, 40000));
    let key = flow_key(Protocol::Tcp, (pod, 80), (client, 40000));
    f.request(&request.flags(TCP_SYN));
    f.reply(&reply.flags(SYN_ACK), host, 8080);
    f.request(&request.flags(FIN_ACK));
    f.reply(&reply.flags(FIN_ACK), host, 8080);
    let closed = FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD;
    assert_eq!(f.state(&key), closed);

    // Only a SYN without ACK restarts a closed flow.
    f.at(T0 + 4 * SEC);
    f.request(&request.flags(TCP_ACK));
    assert_eq!(f.state(&key), closed);
    f.at(T0 + 5 * SEC);
    f.request(&request.flags(TCP_SYN));
    let flow = f.flow(&key).unwrap();
    assert_eq!((flow.state, flow.seen_ns, f.timeout(&key)), (0, T0 + 5 * SEC, SHORT.tcp_syn));
    f.reply(&reply.flags(SYN_ACK), host, 8080);
    assert_eq!(f.state(&key), FLOW_REPLIED);
    let s = f.flow_stats();
    assert_eq!((s.created, s.removed), (1, 0), "the same entry, restarted");
}

#[test]
fn udp_flows_expire_on_the_fixed_clock() {
    for (host, pod, client) in
        [("10.77.0.1", "10.77.0.5", "10.77.0.200"), ("fd00:77::1", "fd00:77::5", "fd00:77::c8")]
    {
        let mut f = Fixture::new();
        f.short_clock();
        let e = entry(Protocol::Udp, host, 5353, pod, 53, (7, Hook::Egress));
        f.tables.install(&e).unwrap();
        let (a, b) = ((client, 40000), (client, 40001));
        let (key_a, key_b) = (flow_key(Protocol::Udp, (pod, 53), a), flow_key(Protocol::Udp, (pod, 53), b));
        f.request(&spec(Protocol::Udp, a, (host, 5353)));
        f.request(&spec(Protocol::Udp, b, (host, 5353)));
        assert_eq!(f.timeout(&key_a), SHORT.udp);

        // A second before the timeout, a is answered: replied, it lives by udp_stream now.
        let answered = T0 + SHORT.udp - SEC;
        f.at(answered);
        f.reply(&spec(Protocol::Udp, (pod, 53), a), host, 5353);
        assert_eq!((f.state(&key_a), f.timeout(&key_a)), (FLOW_REPLIED, SHORT.udp_stream));
        assert_eq!(f.flow(&key_a).unwrap().seen_ns, answered);

        // A second after the timeout, b (never answered) is gone; a is still translated.
        let later = T0 + SHORT.udp + SEC;
        f.at(later);
        f.assert_untouched(&spec(Protocol::Udp, (pod, 53), b), "a reply of an expired UDP flow");
        assert_eq!(f.flow(&key_b), None);
        f.reply(&spec(Protocol::Udp, (pod, 53), a), host, 5353);
        assert_eq!(f.flow(&key_a).unwrap().seen_ns, later);

        // udp_stream and a second after its last packet, a is gone too.
        f.at(later + SHORT.udp_stream + SEC);
        f.assert_untouched(&spec(Protocol::Udp, (pod, 53), a), "a reply of an expired replied UDP flow");
        assert!(f.flows().is_empty());
        let s = f.flow_stats();
        assert_eq!((s.created, s.removed, s.forward, s.reverse), (2, 2, 2, 2));
        assert_eq!(f.counters(&e).packets_out, 2);
    }
}

#[test]
fn a_request_on_an_expired_flow_starts_a_new_one_in_its_place() {
    let mut f = Fixture::new();
    f.short_clock();
    let e = entry(Protocol::Udp, "10.77.0.1", 5353, "10.77.0.5", 53, (7, Hook::Egress));
    f.tables.install(&e).unwrap();
    let request = spec(Protocol::Udp, ("10.77.0.200", 40000), ("10.77.0.1", 5353));
    let key = flow_key(Protocol::Udp, ("10.77.0.5", 53), ("10.77.0.200", 40000));
    f.request(&request);
    f.reply(&spec(Protocol::Udp, ("10.77.0.5", 53), ("10.77.0.200", 40000)), "10.77.0.1", 5353);
    assert_eq!(f.state(&key), FLOW_REPLIED);
    let again = T0 + SHORT.udp_stream + SEC;
    f.at(again);
    f.request(&request);
    let flow = f.flow(&key).unwrap();
    assert_eq!((flow.state, flow.created_ns, flow.seen_ns), (0, again, again), "a new flow");
    let s = f.flow_stats();
    assert_eq!((s.created, s.removed, s.forward), (1, 0, 2), "overwritten: neither created nor removed");
    assert_eq!(s.evicted(1), 0);
}

#[test]
fn the_reaper_removes_exactly_the_expired_flows() {
    let mut f = Fixture::new();
    f.short_clock();
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "10.77.0.200");
    f.tables.install(&entry(Protocol::Udp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    f.tables.install(&entry(Protocol::Tcp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    // a: UDP, unanswered (udp, 10 s); b: UDP, answered (udp_stream, 40 s); c: TCP SYN
    // (tcp_syn, 60 s); d: UDP, unanswered, 5 s later (until T0 + 15 s).
    let udp = |port| spec(Protocol::Udp, (client, port), (host, 8080));
    let udp_reply = |port| spec(Protocol::Udp, (pod, 80), (client, port));
    f.request(&udp(40000));
    f.request(&udp(40001));
    f.reply(&udp_reply(40001), host, 8080);
    f.request(&spec(Protocol::Tcp, (client, 40000), (host, 8080)).flags(TCP_SYN));
    f.at(T0 + 5 * SEC);
    f.request(&udp(40002));
    let a = flow_key(Protocol::Udp, (pod, 80), (client, 40000));
    let b = flow_key(Protocol::Udp, (pod, 80), (client, 40001));
    let c = flow_key(Protocol::Tcp, (pod, 80), (client, 40000));
    let d = flow_key(Protocol::Udp, (pod, 80), (client, 40002));
    let keys = |f: &Fixture| f.flows().into_iter().map(|(k, _)| k).collect::<BTreeSet<_>>();
    assert_eq!(keys(&f), BTreeSet::from([a, b, c, d]));

    assert_eq!(f.tables.reap(T0 + SHORT.udp, &SHORT).unwrap(), 0, "exactly at its timeout a lives");
    assert_eq!(f.tables.reap(T0 + SHORT.udp + 2 * SEC, &SHORT).unwrap(), 1);
    assert_eq!(keys(&f), BTreeSet::from([b, c, d]));
    assert_eq!(f.tables.reap(T0 + SHORT.udp + 2 * SEC, &SHORT).unwrap(), 0);
    assert_eq!(f.tables.reap(T0 + SHORT.udp_stream + SEC, &SHORT).unwrap(), 2);
    assert_eq!(keys(&f), BTreeSet::from([c]));
    let s = f.flow_stats();
    assert_eq!((s.created, s.removed, s.evicted(1)), (4, 3, 0), "the agent counts what it reaps");
    // A reaped flow's reply is untracked.
    f.at(T0 + SHORT.udp_stream + SEC);
    f.assert_untouched(&udp_reply(40001), "a reply of a reaped flow");
}

/// Keeps the calling thread on one CPU until dropped (then restores its affinity).
struct OnOneCpu(CpuSet);

impl OnOneCpu {
    fn pin() -> OnOneCpu {
        let me = Pid::from_raw(0);
        let before = sched_getaffinity(me).expect("sched_getaffinity");
        let cpu = (0..CpuSet::count()).find(|&c| before.is_set(c).unwrap_or(false)).expect("a CPU");
        let mut one = CpuSet::new();
        one.set(cpu).unwrap();
        sched_setaffinity(me, &one).expect("sched_setaffinity");
        OnOneCpu(before)
    }
}

impl Drop for OnOneCpu {
    fn drop(&mut self) {
        let _ = sched_setaffinity(Pid::from_raw(0), &self.0);
    }
}

#[test]
fn a_full_table_evicts_the_least_recently_used_flows_and_counts_them() {
    // The kernel's LRU hash keeps free nodes in per-CPU local lists, filled from the global
    // free list (or by evicting) `target_free` nodes at a time, where target_free is
    // max_entries / possible CPUs / 2, at least 1 (Linux 6.16+; 128 before). Inserts from
    // several CPUs would leave nodes idle in other CPUs' lists and evict early, and a
    // target_free above 1 evicts several entries at once. So: every insert from one CPU (this
    // thread pinned; BPF_PROG_TEST_RUN runs the program on the caller's CPU), and a table
    // small enough for a target_free of 1, where each new flow of a full table evicts exactly
    // one.
    let _pinned = OnOneCpu::pin();
    let cpus = crate::dataplane::maps::cpus().unwrap() as u32;
    let capacity = 4 * cpus - 1;
    let mut f = Fixture::with_flows(capacity);
    assert_eq!(f.tables.flow_capacity(), capacity);
    f.short_clock();
    let (host, pod, client) = ("10.77.0.1", "10.77.0.5", "10.77.0.200");
    f.tables.install(&entry(Protocol::Udp, host, 8080, pod, 80, (7, Hook::Egress))).unwrap();
    let request = |i: u32| spec(Protocol::Udp, (client, 40000 + i as u16), (host, 8080));
    let live =
        |f: &Fixture| -> BTreeSet<u16> { f.flows().iter().map(|(k, _)| u16::from_be(k.peer_port)).collect() };

    for i in 0..capacity {
        f.request(&request(i));
    }
    assert_eq!(live(&f).len(), capacity as usize);
    assert_eq!(f.flow_stats().evicted(u64::from(capacity)), 0);

    // The oldest flow is used again (a lookup marks it referenced; nothing is written, the
    // clock stands still), then k new flows come.
    f.request(&request(0));
    let k = capacity - 1;
    for i in capacity..capacity + k {
        f.request(&request(i));
    }
    let present = live(&f);
    let s = f.flow_stats();
    assert_eq!(s.created, u64::from(capacity + k));
    assert_eq!(s.evicted(present.len() as u64), u64::from(k), "present: {present:?}");
    let recent: BTreeSet<u16> =
        std::iter::once(0).chain(capacity..capacity + k).map(|i| 40000 + i as u16).collect();
    assert_eq!(present, recent, "the most recently used flows are the ones left");
    // An evicted flow's reply is untracked.
    f.assert_untouched(&spec(Protocol::Udp, (pod, 80), (client, 40001)), "a reply of an evicted flow");
}
