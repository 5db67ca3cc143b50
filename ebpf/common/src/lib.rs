//! The shared vocabulary of plexus's BPF programs and the agent: the names of the maps and the
//! `#[repr(C)]` layout of their keys and values. One definition, compiled into the BPF object
//! (`ebpf/programs`, bpfel-unknown-none) and into the agent (with the `user` feature, which makes
//! the types `aya::Pod`), so the two sides cannot drift apart.
//!
//! Every struct spells out its padding as named fields that are always zero: the kernel hashes
//! keys byte for byte, so an uninitialised hole would make equal keys differ.

#![no_std]

pub mod crc32c;
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

/// Forward direction: host endpoint (host IP, host port, protocol) → pod endpoint.
pub const MAP_FORWARD: &str = "PM_FWD";
/// Reverse direction: pod endpoint (pod IP, container port, protocol) → host endpoint.
pub const MAP_REVERSE: &str = "PM_REV";
/// Per-CPU packet and byte counters, keyed by the host endpoint of a mapping.
pub const MAP_STATS: &str = "PM_STATS";
/// One [`Config`] entry at index 0.
pub const MAP_CONFIG: &str = "PM_CONFIG";
/// Program array: index [`TAIL_SCTP`] holds the SCTP checksum fixup program.
pub const MAP_TAIL: &str = "PM_TAIL";

/// Every map of its own the object defines, for pinning. It also reads the shaping object's
/// [`shape::MAP_LIMITS`], pinned with that object.
pub const MAPS: [&str; 5] = [MAP_FORWARD, MAP_REVERSE, MAP_STATS, MAP_CONFIG, MAP_TAIL];

/// [`MAP_TAIL`] index of the SCTP fixup program.
pub const TAIL_SCTP: u32 = 0;

/// How many mappings a node can hold (forward entries; the reverse map has as many).
pub const MAX_MAPPINGS: u32 = 16384;

pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_SCTP: u8 = 132;

/// [`Rewrite::flags`]: deliver with `bpf_redirect(ifindex, BPF_F_INGRESS)` (the device's receive
/// path) rather than its transmit path.
pub const DELIVER_INGRESS: u16 = 1;

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

/// One end of a mapping: the key of [`MAP_FORWARD`] (host side), [`MAP_REVERSE`] (pod side) and
/// [`MAP_STATS`] (host side).
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
}

/// What a packet matching an [`Endpoint`] is rewritten to, and where it goes next.
///
/// In [`MAP_FORWARD`], `addr`/`port_be` are the pod's IP and container port; in [`MAP_REVERSE`],
/// the host IP and host port. Both directions carry the same delivery and MAC data, since a
/// hairpin reply is delivered to the pod exactly like a forward packet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Rewrite {
    pub addr: Addr,
    pub port_be: u16,
    /// [`DELIVER_INGRESS`] or 0.
    pub flags: u16,
    /// The device that reaches the pod: the pod's host-side veth (bridge, transmit path) or the
    /// macvlan master (receive path, where macvlan's rx_handler picks the pod by MAC).
    pub ifindex: u32,
    /// The pod interface's MAC: the destination MAC of packets delivered to it.
    pub pod_mac: [u8; 6],
    /// The MAC of the node interface that holds the host IP: the source MAC of hairpin packets.
    pub host_mac: [u8; 6],
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

/// Settings of one agent's programs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The network namespace (cookie) whose sockets the cgroup hooks translate. The hooks are
    /// attached to a cgroup, which spans every namespace; 0 disables them.
    pub netns_cookie: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data with explicit padding fields; every bit pattern is valid.
    unsafe impl aya::Pod for super::Endpoint {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Rewrite {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Counters {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Config {}
}

// The layouts are part of the pinned maps' ABI: a change must come with new map names, or an
// upgraded agent would reuse maps of the old size.
const _: () = assert!(core::mem::size_of::<Endpoint>() == 20);
const _: () = assert!(core::mem::size_of::<Rewrite>() == 36);
const _: () = assert!(core::mem::size_of::<Counters>() == 40);
const _: () = assert!(core::mem::size_of::<Config>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_names_compare_byte_for_byte() {
        assert!(same_name("PM_FWD", MAP_FORWARD));
        assert!(!same_name("PM_FWD", MAP_REVERSE));
        assert!(!same_name("PM_FW", MAP_FORWARD));
        assert!(!same_name("PM_FWDX", MAP_FORWARD));
        assert!(same_name("", ""));
    }
}
