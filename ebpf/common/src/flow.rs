//! Flow tracking of port mappings: the flow table's key and value, its counters, the settings
//! the programs read, and the pure rules (timeouts, TCP state) that both the programs and the
//! agent's reaper apply, so the two cannot disagree about when a flow has expired.
//!
//! A flow is made when a packet is translated forward (client → hostIP:hostPort becomes
//! client → podIP:containerPort). Its key is the tuple of the *replies* as the pod sends them
//! ([`FlowKey`]: podIP:containerPort → the peer the pod saw), so a reply finds it with one
//! lookup; the value remembers what to restore: the host endpoint the client used (which of
//! several host ports mapping to one container port) and the client's own address when the
//! request's source was rewritten too (hairpin).

use crate::{Addr, Endpoint, Rewrite, PROTO_SCTP, PROTO_TCP, PROTO_UDP};

/// The flow table: an LRU hash of [`FlowKey`] → [`Flow`], sized by the agent.
pub const MAP_FLOWS: &str = "PM_FLOWS";
/// Per-CPU [`FlowStats`]: index [`STATS_PROGRAMS`] is written by the programs only, index
/// [`STATS_AGENT`] by the agent only (what it removed), so neither overwrites the other.
pub const MAP_FLOW_STATS: &str = "PM_FLOW_STATS";
/// The socket hooks' memory: an LRU hash of [`SockKey`] → the host [`Endpoint`] a node-local
/// socket connected or sent to, so `recvmsg`/`getpeername` report the endpoint the application
/// used (several host ports may map to one container port).
pub const MAP_SOCKETS: &str = "PM_SOCKETS";

/// A per-CPU [`Flow`] the programs build a new flow in (a flow does not fit their stack next to
/// the packet's state). Not pinned: nothing outlives a packet in it.
pub const MAP_SCRATCH: &str = "PM_SCRATCH";

/// IP fragments after the first carry no ports: an LRU hash of [`FragmentKey`] → [`Fragment`],
/// made by a translated first fragment, tells the rest of its datagram what to rewrite.
pub const MAP_FRAGMENTS: &str = "PM_FRAGS";
/// A per-CPU [`Fragment`] to build a new one in (see [`MAP_SCRATCH`]). Not pinned.
pub const MAP_FRAGMENT_SCRATCH: &str = "PM_FRAG_SCRATCH";
/// Size of the fragments table: datagrams being reassembled at once.
pub const MAX_FRAGMENTED: u32 = 8192;
/// How long the rest of a datagram may follow its first fragment (the kernel's reassembly
/// timeout, `net.ipv4.ipfrag_time`: 30 s).
pub const FRAGMENT_TIMEOUT_NS: u64 = 30 * NSEC_PER_SEC;

/// [`Fragment::flags`]: rewrite the source address.
pub const FRAG_SRC: u8 = 1;
/// [`Fragment::flags`]: rewrite the destination address.
pub const FRAG_DST: u8 = 2;
/// [`Fragment::flags`]: deliver to the pod (destination MAC, redirect) with [`Fragment::rewrite`].
pub const FRAG_TO_POD: u8 = 4;
/// [`Fragment::flags`]: the source MAC becomes the host interface's (hairpin).
pub const FRAG_HAIRPIN: u8 = 8;
/// [`Fragment::flags`]: a reply (counted as such).
pub const FRAG_REPLY: u8 = 16;

/// [`MAP_FLOW_STATS`] index written by the programs.
pub const STATS_PROGRAMS: u32 = 0;
/// [`MAP_FLOW_STATS`] index written by the agent.
pub const STATS_AGENT: u32 = 1;

/// Default size of the flow table (entries). Each entry takes [`FLOW_ENTRY_BYTES`] of kernel
/// memory, preallocated: 131072 entries are 25 MiB.
pub const DEFAULT_MAX_FLOWS: u32 = 131_072;
/// Kernel memory per flow table entry: the hash element (its header, 48 bytes on 64-bit
/// kernels: its links in a hash chain and an LRU list, and its hash; then the key and the
/// value: 184 bytes) and its bucket (16 bytes; the kernel gives the table as many buckets as
/// entries, rounded up to a power of two). Measured on kernel 6.18: the map's `memlock`
/// (/proc/PID/fdinfo) is 26215296 bytes for 131072 entries, 200 per entry.
pub const FLOW_ENTRY_BYTES: u64 =
    48 + core::mem::size_of::<FlowKey>() as u64 + core::mem::size_of::<Flow>() as u64 + 16;
/// Size of the socket hooks' table (node-local sockets talking to a host port).
pub const MAX_SOCKETS: u32 = 16_384;

/// A flow's last-seen time is written at most this often, a change of state included (a write
/// per packet would bounce the entry's cache line between CPUs); timeouts are therefore exact
/// to within this.
pub const SEEN_GRANULARITY_NS: u64 = 1_000_000_000;

pub const NSEC_PER_SEC: u64 = 1_000_000_000;

/// [`Flow::state`]: a packet of the reply direction was seen.
pub const FLOW_REPLIED: u8 = 1;
/// [`Flow::state`]: the client sent a FIN.
pub const FLOW_FIN_CLIENT: u8 = 2;
/// [`Flow::state`]: the pod sent a FIN.
pub const FLOW_FIN_POD: u8 = 4;
/// [`Flow::state`]: either side sent a RST.
pub const FLOW_RST: u8 = 8;
/// [`Flow::state`]: the request's source was rewritten to the host IP (a pod reaching its own
/// host port): replies go back to [`Flow::client`] and are turned around to the pod.
pub const FLOW_SNAT: u8 = 16;

/// TCP flags as they sit in the 14th byte of the TCP header.
pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_ACK: u8 = 0x10;

/// The tuple of a flow's replies as the pod sends them. Ports in network byte order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    /// The pod's address (the replies' source).
    pub pod: Addr,
    /// The peer as the pod sees it (the replies' destination): the client, or the host IP when
    /// the request's source was rewritten ([`FLOW_SNAT`]).
    pub peer: Addr,
    pub pod_port: u16,
    pub peer_port: u16,
    pub proto: u8,
    pub pad: [u8; 3],
}

impl FlowKey {
    #[inline(always)]
    pub const fn new(pod: Addr, pod_port: u16, peer: Addr, peer_port: u16, proto: u8) -> FlowKey {
        FlowKey { pod, peer, pod_port, peer_port, proto, pad: [0; 3] }
    }
}

/// What a flow restores on its replies, and its life.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// The host endpoint the client reached (the replies' new source), which is also the
    /// mapping's key in the forward and counter maps.
    pub host: Endpoint,
    /// The client as it sent the request (the replies' new destination when [`FLOW_SNAT`]).
    pub client: Addr,
    pub client_port: u16,
    /// `FLOW_*` bits.
    pub state: u8,
    pub pad: u8,
    /// The mapping's forward value (pod endpoint, how to deliver to it, its counters): replies
    /// turned around to the pod and ICMP errors for the pod are delivered with it, and the
    /// flow's packets counted by it.
    pub rewrite: Rewrite,
    /// When the flow was made and last seen, in nanoseconds of the coarse monotonic clock
    /// (`bpf_ktime_get_coarse_ns`, CLOCK_MONOTONIC_COARSE in user space: the same clock, read
    /// at the timekeeper's last tick).
    pub created_ns: u64,
    pub seen_ns: u64,
}

/// Counters of the flow table, per CPU (the agent sums the CPUs and both indexes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Flows made (an insert that found no entry).
    pub created: u64,
    /// Flows removed: by the programs, expired flows met on the packet path; by the agent,
    /// expired flows reaped, and the flows of deleted mappings.
    pub removed: u64,
    /// Packets translated towards the pod (requests of tracked flows).
    pub forward: u64,
    /// Replies translated back (packets of tracked flows from the pod).
    pub reverse: u64,
    /// ICMP and ICMPv6 errors quoting a tracked flow, translated.
    pub icmp: u64,
}

impl FlowStats {
    pub fn add(&mut self, o: &FlowStats) {
        self.created += o.created;
        self.removed += o.removed;
        self.forward += o.forward;
        self.reverse += o.reverse;
        self.icmp += o.icmp;
    }

    /// Flows the kernel evicted to make room (the LRU's least recently used), given how many
    /// entries the table holds now: every flow made was either removed, evicted or is still
    /// there.
    pub fn evicted(&self, live: u64) -> u64 {
        self.created.saturating_sub(self.removed).saturating_sub(live)
    }
}

/// A datagram being fragmented, as its fragments carry it (before any rewrite): addresses, the
/// IP identification (16 bits in IPv4, 32 in the IPv6 fragment header) and the protocol.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FragmentKey {
    pub src: Addr,
    pub dst: Addr,
    pub id: u32,
    pub proto: u8,
    pub pad: [u8; 3],
}

/// What the first fragment's translation did, for the rest of the datagram.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fragment {
    /// The addresses after the rewrite.
    pub src: Addr,
    pub dst: Addr,
    /// The mapping's forward value, as the first fragment's translation used it (delivery,
    /// MACs, counters).
    pub rewrite: Rewrite,
    /// `FRAG_*` bits.
    pub flags: u8,
    pub pad: [u8; 3],
    pub pad2: u32,
    pub created_ns: u64,
}

/// Key of [`MAP_SOCKETS`]: a socket (its cookie) and the pod endpoint it was sent to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockKey {
    pub cookie: u64,
    pub pod: Endpoint,
    pub pad: u32,
}

/// How long a flow lives after its last packet, by state, in nanoseconds. The defaults are
/// conntrack's (`net.netfilter.nf_conntrack_*_timeout*`), so users of the reference plugin see
/// the same lifetimes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP, no reply yet (conntrack's `tcp_timeout_syn_sent`: 120 s).
    pub tcp_syn: u64,
    /// TCP, replied and not closed (`tcp_timeout_established`: 5 days).
    pub tcp_established: u64,
    /// TCP, FIN from both sides (`tcp_timeout_time_wait`: 120 s).
    pub tcp_closed: u64,
    /// TCP, after a RST (`tcp_timeout_close`: 10 s).
    pub tcp_reset: u64,
    /// UDP, no reply yet (`udp_timeout`: 30 s).
    pub udp: u64,
    /// UDP, replied (`udp_timeout_stream`: 120 s).
    pub udp_stream: u64,
    /// SCTP (not followed chunk by chunk; `sctp_timeout_established`: 210 s).
    pub sctp: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts::CONNTRACK
    }
}

impl Timeouts {
    /// conntrack's defaults.
    pub const CONNTRACK: Timeouts = Timeouts {
        tcp_syn: 120 * NSEC_PER_SEC,
        tcp_established: 5 * 24 * 3600 * NSEC_PER_SEC,
        tcp_closed: 120 * NSEC_PER_SEC,
        tcp_reset: 10 * NSEC_PER_SEC,
        udp: 30 * NSEC_PER_SEC,
        udp_stream: 120 * NSEC_PER_SEC,
        sctp: 210 * NSEC_PER_SEC,
    };

    /// How long a flow in `state` of protocol `proto` lives after its last packet. A timeout of
    /// 0 (settings not written yet: a freshly created map is zeroed) is conntrack's default.
    #[inline(always)]
    pub fn of(&self, proto: u8, state: u8) -> u64 {
        let configured = self.configured(proto, state);
        if configured != 0 {
            return configured;
        }
        Timeouts::CONNTRACK.configured(proto, state)
    }

    #[inline(always)]
    const fn configured(&self, proto: u8, state: u8) -> u64 {
        match proto {
            PROTO_TCP => {
                if state & FLOW_RST != 0 {
                    self.tcp_reset
                } else if state & (FLOW_FIN_CLIENT | FLOW_FIN_POD) == FLOW_FIN_CLIENT | FLOW_FIN_POD {
                    self.tcp_closed
                } else if state & FLOW_REPLIED != 0 {
                    self.tcp_established
                } else {
                    self.tcp_syn
                }
            }
            PROTO_UDP => {
                if state & FLOW_REPLIED != 0 {
                    self.udp_stream
                } else {
                    self.udp
                }
            }
            PROTO_SCTP => self.sctp,
            _ => 0,
        }
    }

    /// True when `flow` has expired at `now`.
    #[inline(always)]
    pub fn expired(&self, flow: &Flow, now: u64) -> bool {
        now.saturating_sub(flow.seen_ns) > self.of(flow.host.proto, flow.state)
    }
}

/// The settings of one agent's port mapping programs (index 0 of [`crate::MAP_SETTINGS`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The network namespace (cookie) whose sockets the cgroup hooks translate. The hooks are
    /// attached to a cgroup, which spans every namespace; 0 disables them.
    pub netns_cookie: u64,
    /// A fixed "now" in nanoseconds for BPF_PROG_TEST_RUN tests; 0 (always, in the agent) means
    /// the kernel's monotonic clock.
    pub fixed_now_ns: u64,
    pub timeouts: Timeouts,
}

/// The state after a TCP packet with `flags`, sent by the client (`from_client`) or the pod,
/// on a flow in `state`. A SYN without ACK from the client on a closed or reset flow starts a
/// new connection on the same tuple (the client reused its port), as conntrack does.
#[inline(always)]
pub const fn tcp_state(state: u8, flags: u8, from_client: bool) -> u8 {
    let mut s = state;
    let closed = s & FLOW_RST != 0 || s & (FLOW_FIN_CLIENT | FLOW_FIN_POD) == FLOW_FIN_CLIENT | FLOW_FIN_POD;
    if from_client && closed && flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
        s &= FLOW_SNAT;
    }
    if !from_client {
        s |= FLOW_REPLIED;
    }
    if flags & TCP_RST != 0 {
        s |= FLOW_RST;
    }
    if flags & TCP_FIN != 0 {
        s |= if from_client { FLOW_FIN_CLIENT } else { FLOW_FIN_POD };
    }
    s
}

/// The state after a packet of `proto` (TCP flags in `tcp_flags`).
#[inline(always)]
pub const fn next_state(state: u8, proto: u8, tcp_flags: u8, from_client: bool) -> u8 {
    if proto == PROTO_TCP {
        tcp_state(state, tcp_flags, from_client)
    } else if from_client {
        state
    } else {
        state | FLOW_REPLIED
    }
}

/// Whether a packet at `now` moves a flow's last-seen time, `seen_ns`: once it is
/// [`SEEN_GRANULARITY_NS`] old. A change of state does not move it either (the timeout of the
/// new state then counts from at most that much before the packet).
#[inline(always)]
pub const fn seen_is_stale(seen_ns: u64, now: u64) -> bool {
    now.saturating_sub(seen_ns) >= SEEN_GRANULARITY_NS
}

const _: () = assert!(core::mem::size_of::<FlowKey>() == 40);
const _: () = assert!(core::mem::size_of::<Flow>() == 96);
// A flow's counters index sits where the flows of earlier versions (before
// [`Rewrite::counters`]) had zero padding: a table pinned by one of them keeps its layout, and
// its flows read as [`crate::NO_COUNTERS`].
const _: () = assert!(
    core::mem::offset_of!(Flow, rewrite) + core::mem::offset_of!(Rewrite, counters) == 76
        && core::mem::offset_of!(Flow, created_ns) == 80
);
const _: () = assert!(core::mem::size_of::<FlowStats>() == 40);
const _: () = assert!(core::mem::size_of::<SockKey>() == 32);
const _: () = assert!(core::mem::size_of::<FragmentKey>() == 40);
const _: () = assert!(core::mem::size_of::<Fragment>() == 88);
const _: () = assert!(core::mem::size_of::<Timeouts>() == 56);
const _: () = assert!(core::mem::size_of::<Settings>() == 72);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data with explicit padding fields; every bit pattern is valid.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Flow {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FlowStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SockKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Settings {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FragmentKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Fragment {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NSEC_PER_SEC;

    fn flow(proto: u8, state: u8, seen_ns: u64) -> Flow {
        Flow { host: Endpoint::new([0; 4], 80u16.to_be(), proto), state, seen_ns, ..Flow::default() }
    }

    #[test]
    fn defaults_are_conntracks() {
        let t = Timeouts::default();
        assert_eq!(t.tcp_syn, 120 * S);
        assert_eq!(t.tcp_established, 432_000 * S);
        assert_eq!(t.tcp_closed, 120 * S);
        assert_eq!(t.tcp_reset, 10 * S);
        assert_eq!(t.udp, 30 * S);
        assert_eq!(t.udp_stream, 120 * S);
        assert_eq!(t.sctp, 210 * S);
        assert_eq!(Settings::default().timeouts, t);
        assert_eq!(Settings::default().fixed_now_ns, 0);
    }

    #[test]
    fn the_timeout_follows_the_state() {
        let t = Timeouts::default();
        assert_eq!(t.of(PROTO_TCP, 0), t.tcp_syn);
        assert_eq!(t.of(PROTO_TCP, FLOW_SNAT), t.tcp_syn);
        assert_eq!(t.of(PROTO_TCP, FLOW_REPLIED), t.tcp_established);
        // Half-closed connections may still carry data one way.
        assert_eq!(t.of(PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT), t.tcp_established);
        assert_eq!(t.of(PROTO_TCP, FLOW_REPLIED | FLOW_FIN_POD), t.tcp_established);
        assert_eq!(t.of(PROTO_TCP, FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD), t.tcp_closed);
        assert_eq!(t.of(PROTO_TCP, FLOW_REPLIED | FLOW_RST), t.tcp_reset);
        assert_eq!(t.of(PROTO_TCP, FLOW_FIN_CLIENT | FLOW_FIN_POD | FLOW_RST), t.tcp_reset);
        assert_eq!(t.of(PROTO_UDP, 0), t.udp);
        assert_eq!(t.of(PROTO_UDP, FLOW_REPLIED), t.udp_stream);
        assert_eq!(t.of(PROTO_SCTP, FLOW_REPLIED), t.sctp);
        assert_eq!(t.of(1, 0), 0, "nothing else is tracked");
    }

    #[test]
    fn unwritten_settings_mean_conntracks_timeouts() {
        let zero = Timeouts {
            tcp_syn: 0,
            tcp_established: 0,
            tcp_closed: 0,
            tcp_reset: 0,
            udp: 0,
            udp_stream: 0,
            sctp: 0,
        };
        let d = Timeouts::default();
        for (proto, state) in [(PROTO_TCP, 0), (PROTO_TCP, FLOW_REPLIED), (PROTO_UDP, 0), (PROTO_SCTP, 0)] {
            assert_eq!(zero.of(proto, state), d.of(proto, state));
        }
        let udp_only = Timeouts { udp: 5 * S, ..zero };
        assert_eq!((udp_only.of(PROTO_UDP, 0), udp_only.of(PROTO_TCP, 0)), (5 * S, d.tcp_syn));
    }

    #[test]
    fn a_flow_expires_strictly_after_its_timeout() {
        let t = Timeouts::default();
        let f = flow(PROTO_UDP, 0, 1000 * S);
        assert!(!t.expired(&f, 1000 * S));
        assert!(!t.expired(&f, 1030 * S));
        assert!(t.expired(&f, 1030 * S + 1));
        // A clock behind the flow's last sight (a test's fixed clock) is not expiry.
        assert!(!t.expired(&f, 10 * S));
        let replied = flow(PROTO_UDP, FLOW_REPLIED, 1000 * S);
        assert!(!t.expired(&replied, 1100 * S));
        assert!(t.expired(&replied, 1121 * S));
    }

    #[test]
    fn tcp_state_follows_fin_rst_and_replies() {
        let syn = tcp_state(0, TCP_SYN, true);
        assert_eq!(syn, 0);
        let est = tcp_state(syn, TCP_SYN | TCP_ACK, false);
        assert_eq!(est, FLOW_REPLIED);
        let fin1 = tcp_state(est, TCP_FIN | TCP_ACK, true);
        assert_eq!(fin1, FLOW_REPLIED | FLOW_FIN_CLIENT);
        let fin2 = tcp_state(fin1, TCP_FIN | TCP_ACK, false);
        assert_eq!(fin2, FLOW_REPLIED | FLOW_FIN_CLIENT | FLOW_FIN_POD);
        assert_eq!(tcp_state(est, TCP_RST, false), FLOW_REPLIED | FLOW_RST);
        assert_eq!(tcp_state(est, TCP_RST | TCP_ACK, true), FLOW_REPLIED | FLOW_RST);
        // A new SYN on a closed or reset tuple starts over (the client reused its port); the
        // hairpin bit stays, as the tuple still is a hairpin one.
        assert_eq!(tcp_state(fin2 | FLOW_SNAT, TCP_SYN, true), FLOW_SNAT);
        assert_eq!(tcp_state(FLOW_REPLIED | FLOW_RST, TCP_SYN, true), 0);
        // ... but not on a live one, nor a SYN-ACK.
        assert_eq!(tcp_state(est, TCP_SYN, true), est);
        assert_eq!(tcp_state(fin2, TCP_SYN | TCP_ACK, true), fin2);
        // From the pod, a SYN never restarts a flow.
        assert_eq!(tcp_state(fin2, TCP_SYN, false), fin2);
    }

    #[test]
    fn other_protocols_only_learn_replies() {
        assert_eq!(next_state(0, PROTO_UDP, 0xff, true), 0);
        assert_eq!(next_state(0, PROTO_UDP, 0, false), FLOW_REPLIED);
        assert_eq!(next_state(FLOW_SNAT, PROTO_SCTP, 0, false), FLOW_SNAT | FLOW_REPLIED);
        assert_eq!(next_state(0, PROTO_TCP, TCP_FIN, true), FLOW_FIN_CLIENT);
    }

    #[test]
    fn seen_is_written_once_a_second() {
        assert!(!seen_is_stale(50 * S, 50 * S));
        assert!(!seen_is_stale(50 * S, 50 * S + SEEN_GRANULARITY_NS - 1));
        assert!(seen_is_stale(50 * S, 50 * S + SEEN_GRANULARITY_NS));
        assert!(seen_is_stale(0, u64::MAX));
        // A clock behind the flow (another CPU wrote a later time) is not stale.
        assert!(!seen_is_stale(50 * S, 49 * S));
    }

    #[test]
    fn evictions_are_what_was_made_and_neither_removed_nor_present() {
        let mut s = FlowStats { created: 10, removed: 3, ..FlowStats::default() };
        assert_eq!(s.evicted(7), 0);
        assert_eq!(s.evicted(5), 2);
        // The two indexes (programs, agent) add up.
        s.add(&FlowStats { removed: 2, icmp: 1, ..FlowStats::default() });
        assert_eq!((s.removed, s.icmp), (5, 1));
        assert_eq!(s.evicted(5), 0);
        // Never negative, even when a scan races with new flows.
        assert_eq!(s.evicted(50), 0);
    }

    #[test]
    fn an_entry_costs_what_the_docs_say() {
        assert_eq!(FLOW_ENTRY_BYTES, 200);
        // The default table: 131072 entries, 25 MiB.
        assert_eq!(FLOW_ENTRY_BYTES * u64::from(DEFAULT_MAX_FLOWS) / (1 << 20), 25);
    }
}
