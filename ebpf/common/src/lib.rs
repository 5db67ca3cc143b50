//! The shared vocabulary of plexus's BPF programs and the agent: the names of the maps and the
//! `#[repr(C)]` layout of their keys and values. One definition, compiled into the BPF object
//! (`ebpf/programs`, bpfel-unknown-none) and into the agent (with the `user` feature, which makes
//! the types `aya::Pod`), so the two sides cannot drift apart.
//!
//! Every struct spells out its padding as named fields that are always zero: the kernel hashes
//! keys byte for byte, so an uninitialised hole would make equal keys differ.

#![no_std]

pub mod crc32c;
pub mod csum;
pub mod flow;
pub mod policy;
pub mod shape;

/// Whether two map names are the same: the BPF programs declare each map with a literal
/// (aya-ebpf's `#[map(name = ...)]` takes nothing else) and check it against the constant here
/// at compile time (`const _: () = assert!(...)`), so kernel and user side cannot drift.
pub const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The mappings: host endpoint (host IP, host port, protocol) → pod endpoint and delivery.
pub const MAP_FORWARD: &str = "PM_FORWARD";
/// Per-CPU packet and byte counters of the mappings, an array indexed by
/// [`Rewrite::counters`]: the programs reach a mapping's counters by index (an array lookup
/// the verifier inlines) from the forward entry or the flow they hold already, not by a hash
/// lookup of its host endpoint per packet.
pub const MAP_COUNTERS: &str = "PM_COUNTERS";
/// One [`flow::Settings`] entry at index 0.
pub const MAP_SETTINGS: &str = "PM_SETTINGS";
/// A bit per port number ([`UNMAPPED_WORDS`] words, see [`port_bit`]), set when no mapping
/// has it as its host port, in any protocol or host IP: the programs then skip the forward
/// lookup, which most packets (a pod's replies, everything unmapped) would miss. A clear bit
/// only means "look": a new map, all clear, makes the programs look up every packet.
pub const MAP_UNMAPPED: &str = "PM_UNMAPPED";
/// Program array: index [`TAIL_SCTP`] holds the SCTP checksum fixup program, [`TAIL_ICMP`] the
/// translation of ICMP errors, [`TAIL_FRAGMENT`] that of IP fragments after the first.
pub const MAP_TAIL: &str = "PM_TAILS";

/// Every map of its own the object defines, for pinning. It also reads the shaping object's
/// [`shape::MAP_LIMITS`] and [`shape::MAP_UNLIMITED`], pinned with that object.
pub const MAPS: [&str; 9] = [
    MAP_FORWARD,
    MAP_UNMAPPED,
    MAP_COUNTERS,
    MAP_SETTINGS,
    MAP_TAIL,
    flow::MAP_FLOWS,
    flow::MAP_FLOW_STATS,
    flow::MAP_SOCKETS,
    flow::MAP_FRAGMENTS,
];

/// Map names of earlier versions that a pin directory may still hold: the agent removes their
/// pins once the current object is loaded (the stateless reverse map, the settings, the
/// one-entry tail-call array; the forward entries without a counters index, the counters
/// keyed by host endpoint, and the fragments that kept the host endpoint for them).
pub const RETIRED_MAPS: [&str; 6] = ["PM_REV", "PM_CONFIG", "PM_TAIL", "PM_FWD", "PM_STATS", "PM_FRAGMENTS"];

/// [`MAP_TAIL`] index of the SCTP fixup program.
pub const TAIL_SCTP: u32 = 0;
/// [`MAP_TAIL`] index of the ICMP error translation program.
pub const TAIL_ICMP: u32 = 1;
/// [`MAP_TAIL`] index of the program for IP fragments after the first.
pub const TAIL_FRAGMENT: u32 = 2;
/// Entries of [`MAP_TAIL`].
pub const TAILS: u32 = 3;

/// How many mappings a node can hold (forward entries).
pub const MAX_MAPPINGS: u32 = 16384;

/// Entries of [`MAP_COUNTERS`]: index 0 is no mapping's ([`NO_COUNTERS`]), so every mapping
/// has an index of its own in `1..=MAX_MAPPINGS`.
pub const COUNTER_SLOTS: u32 = MAX_MAPPINGS + 1;

/// [`Rewrite::counters`] of a mapping without counters: the flows an earlier version made,
/// whose [`flow::Flow`] had zero padding where the index sits now. Their packets are
/// translated as before and go uncounted.
pub const NO_COUNTERS: u32 = 0;

/// Words of [`MAP_UNMAPPED`]: 64 port numbers each.
pub const UNMAPPED_WORDS: u32 = 65536 / 64;

/// The word of [`MAP_UNMAPPED`] that holds the bit of port `port_be` (network byte order, as
/// the packet and [`Endpoint::port_be`] have it), and the bit.
#[inline(always)]
pub const fn port_bit(port_be: u16) -> (u32, u64) {
    let port = u16::from_be(port_be);
    ((port >> 6) as u32, 1u64 << (port & 63))
}

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_SCTP: u8 = 132;
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_ICMPV6: u8 = 58;

/// Whether an ICMP (`v6` false) or ICMPv6 message type is an error the port mapping translates
/// (it quotes the packet it is about): destination unreachable (fragmentation needed is its
/// code 4) and time exceeded; ICMPv6's destination unreachable, packet too big and time
/// exceeded.
pub const fn icmp_is_error(v6: bool, kind: u8) -> bool {
    if v6 {
        kind == 1 || kind == 2 || kind == 3
    } else {
        kind == 3 || kind == 11
    }
}

/// [`Rewrite::flags`]: deliver with `bpf_redirect(ifindex, BPF_F_INGRESS)` (the device's receive
/// path) rather than its transmit path.
pub const DELIVER_INGRESS: u16 = 1;
/// [`Rewrite::flags`]: the host IP is a bridge's and the pod is behind that bridge (its veth is
/// a port of it), so a request arriving on one of the bridge's uplinks, addressed to the
/// bridge's MAC ([`Rewrite::host_mac`]), reaches the pod by the bridge's own forwarding once
/// its destination MAC is the pod's: what lets the XDP program on an uplink translate it.
pub const DELIVER_BRIDGE: u16 = 2;
/// [`Rewrite::flags`], with [`DELIVER_BRIDGE`]: the pod's end of its veth takes XDP frames (the
/// agent turned GRO on there, which gives it the NAPI context a veth receives XDP frames on),
/// so the XDP program on an uplink redirects a translated request straight into the pod's
/// host-side veth ([`Rewrite::ifindex`]) instead of handing it to the bridge, unless the pod's
/// ingress is limited on that veth's transmit path (which a redirect skips).
pub const DELIVER_XDP_REDIRECT: u16 = 4;

/// An IP address as four 32-bit words in network byte order, IPv4 as IPv4-mapped IPv6
/// (`::ffff:a.b.c.d`), so one key type serves both families.
pub type Addr = [u32; 4];

/// The second word of an IPv4-mapped address, in network byte order, as read on a
/// little-endian machine (the only byte order BPF runs in here: bpfel).
pub const V4_MAPPED_WORD2: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// `addr` (network-order word) as IPv4-mapped.
#[inline(always)]
pub const fn v4_mapped(addr: u32) -> Addr {
    [0, 0, V4_MAPPED_WORD2, addr]
}

/// True when `a` is IPv4-mapped.
#[inline(always)]
pub const fn is_v4_mapped(a: &Addr) -> bool {
    a[0] == 0 && a[1] == 0 && a[2] == V4_MAPPED_WORD2
}

/// Compares addresses word by word: array equality may compile to `memcmp`, which BPF lacks.
#[inline(always)]
pub const fn addr_eq(a: &Addr, b: &Addr) -> bool {
    a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3]
}

/// One end of a mapping: the key of [`MAP_FORWARD`] (the host side), and the pod side in
/// flows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: Addr,
    /// Port in network byte order, as it sits in the packet.
    pub port_be: u16,
    /// IP protocol number: [`PROTO_TCP`], [`PROTO_UDP`] or [`PROTO_SCTP`].
    pub proto: u8,
    pub pad: u8,
}

impl Endpoint {
    #[inline(always)]
    pub const fn new(addr: Addr, port_be: u16, proto: u8) -> Endpoint {
        Endpoint { addr, port_be, proto, pad: 0 }
    }

    /// The same endpoint, compared field by field (see [`addr_eq`]).
    #[inline(always)]
    pub const fn same(&self, o: &Endpoint) -> bool {
        addr_eq(&self.addr, &o.addr) && self.port_be == o.port_be && self.proto == o.proto
    }
}

/// What a packet matching an [`Endpoint`] is rewritten to, and where it goes next.
///
/// `addr`/`port_be` are the pod's IP and container port. A flow keeps a copy, since a hairpin
/// reply and an ICMP error for the pod are delivered to it exactly like a forward packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rewrite {
    pub addr: Addr,
    pub port_be: u16,
    /// [`DELIVER_INGRESS`], [`DELIVER_BRIDGE`] (with or without [`DELIVER_XDP_REDIRECT`]), or 0.
    pub flags: u16,
    /// The device that reaches the pod: the pod's host-side veth (bridge, transmit path) or the
    /// macvlan master (receive path, where macvlan's rx_handler picks the pod by MAC).
    pub ifindex: u32,
    /// The pod interface's MAC: the destination MAC of packets delivered to it.
    pub pod_mac: [u8; 6],
    /// The MAC of the node interface that holds the host IP: the source MAC of hairpin packets.
    pub host_mac: [u8; 6],
    /// The index of the mapping's counters in [`MAP_COUNTERS`], assigned by the agent when it
    /// installs the mapping; [`NO_COUNTERS`] counts nothing. A flow's copy keeps it, so its
    /// replies are counted without looking the mapping up.
    pub counters: u32,
}

/// Per-CPU counters of one mapping (the agent sums the CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets (and bytes, L2 included) rewritten towards the pod.
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Replies rewritten back to the host endpoint.
    pub packets_out: u64,
    pub bytes_out: u64,
    /// Node-local connects/sends translated by the cgroup hooks.
    pub local: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data with explicit padding fields; every bit pattern is valid.
    unsafe impl aya::Pod for super::Endpoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Rewrite {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Counters {}
}

// The layouts are part of the pinned maps' ABI: a change must come with new map names, or an
// upgraded agent would reuse maps of the old size.
const _: () = assert!(core::mem::size_of::<Endpoint>() == 20);
const _: () = assert!(core::mem::size_of::<Rewrite>() == 40);
const _: () = assert!(core::mem::size_of::<Counters>() == 40);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmp_errors_are_the_messages_that_quote_a_packet() {
        // ICMP: destination unreachable, time exceeded; not echo request/reply, redirect.
        assert!(icmp_is_error(false, 3) && icmp_is_error(false, 11));
        assert!(!icmp_is_error(false, 0) && !icmp_is_error(false, 8) && !icmp_is_error(false, 5));
        // ICMPv6: destination unreachable, packet too big, time exceeded; not echo, not NDP.
        assert!(icmp_is_error(true, 1) && icmp_is_error(true, 2) && icmp_is_error(true, 3));
        assert!(!icmp_is_error(true, 128) && !icmp_is_error(true, 129) && !icmp_is_error(true, 135));
        assert!(!icmp_is_error(true, 4));
    }

    #[test]
    fn map_names_compare_byte_for_byte() {
        assert!(same_name("PM_FORWARD", MAP_FORWARD));
        assert!(!same_name("PM_FORWARD", MAP_COUNTERS));
        assert!(!same_name("PM_FORWAR", MAP_FORWARD));
        assert!(!same_name("PM_FORWARDX", MAP_FORWARD));
        assert!(same_name("", ""));
    }

    #[test]
    fn every_port_has_one_bit_of_its_own() {
        let mut seen = [0u64; UNMAPPED_WORDS as usize];
        for port in 0..=u16::MAX {
            let (word, bit) = port_bit(port.to_be());
            assert!(word < UNMAPPED_WORDS, "port {port}");
            assert_eq!(bit.count_ones(), 1, "port {port}");
            assert_eq!(seen[word as usize] & bit, 0, "port {port} shares a bit");
            seen[word as usize] |= bit;
        }
        assert!(seen.iter().all(|w| *w == u64::MAX), "every bit belongs to a port");
        assert_eq!(port_bit(8080u16.to_be()), (8080 / 64, 1 << (8080 % 64)), "host order, not the wire's");
    }
}
