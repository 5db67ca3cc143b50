//! The eBPF dataplane: programs written in Rust (`ebpf/programs`, aya-ebpf), embedded in the
//! agent and loaded with aya.
//!
//! The core, shared by the features:
//! - [`pin`]: the bpffs directory holding maps, programs and links, so the dataplane outlives
//!   the agent (restarts and upgrades do not interrupt traffic).
//! - [`attach`]: where a TC program runs (hook, interface, TCX link or filter);
//!   [`loader`]: loading an object, attaching its programs as pinned links or filters,
//!   replacing them on upgrade without a gap; [`maps`]: what the map wrappers share;
//!   [`errno`]: reading aya's errors; [`xdp`]: the XDP program on the interfaces where
//!   clients' traffic enters the node (an optional accelerator of the TC path).
//! - [`records`]: the durable record of each attachment; [`gate`]: the state loaded in the
//!   background; [`service`]: the one lifecycle (start, ADD, DEL, CHECK, GC, STATUS);
//!   [`chained`]: the one chained plugin type on it.
//! - [`netdev`]: every netlink question the dataplane asks, over the one netlink layer
//!   ([`crate::netlink`]).
//!
//! The features:
//! - [`portmap`]: `portMappings` (NPWG 4.1.2.1.7) in TC and cgroup programs, and the
//!   `plexus-portmap` plugin type that drives them.
//! - [`bandwidth`]: `bandwidth` (NPWG 4.1.2.1.8) in TC programs of their own object, and the
//!   `plexus-bandwidth` plugin type.
//! - [`capabilities`]: native plugin types (macvlan) serving both capabilities themselves.

pub mod attach;
pub mod bandwidth;
pub mod batch;
pub mod capabilities;
pub mod chained;
pub mod errno;
pub mod gate;
pub mod loader;
pub mod maps;
pub mod netdev;
pub mod pin;
pub mod portmap;
pub mod records;
pub mod service;
pub mod skip_bits;
pub mod xdp;

#[cfg(test)]
mod kernel_tests;

use std::path::PathBuf;

use plexus_ebpf_common::flow::Timeouts;

/// Where the dataplane keeps its objects, and how port mappings track flows.
#[derive(Debug, Clone)]
pub struct DataplaneOptions {
    /// bpffs directory for pins (see [`pin`]).
    pub pin_dir: PathBuf,
    /// cgroup v2 directory the socket hooks attach to (the root: they filter by namespace).
    pub cgroup_root: PathBuf,
    /// Entries of the port mapping flow table, when it is created (a pinned one keeps its
    /// size).
    pub max_flows: u32,
    /// How long port mapping flows live after their last packet, by state.
    pub timeouts: Timeouts,
    /// Whether the XDP program runs where clients' traffic enters the node (`--no-xdp`: TC
    /// alone).
    pub xdp: bool,
}
