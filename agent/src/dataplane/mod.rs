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
pub mod policy;
pub mod portmap;
pub mod records;
pub mod service;
pub mod skip_bits;
pub mod xdp;

#[cfg(test)]
pub(crate) mod kernel_tests;

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
    /// Where the XDP programs run (`--xdp`).
    pub xdp: XdpWhere,
}

/// Where the XDP programs run, where clients' traffic enters the node (`--xdp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum XdpWhere {
    /// Where the bench shows XDP wins over TC alone: port mappings on a bridge's uplinks
    /// (1.3 to 1.6 times TC's rate for small packets), ingress limits on a macvlan master
    /// (dropped before the kernel builds an skb); port mappings on a macvlan master stay in TC
    /// (XDP there delivered 0.76 times the no-NAT rate, 0.89 times TC's: docs/bench.md).
    #[default]
    Auto,
    /// Every place the programs can run, port mappings on a macvlan master too.
    Always,
    /// Nowhere: TC alone translates mapped packets and enforces ingress limits.
    Never,
}

impl XdpWhere {
    /// Whether port mappings on a macvlan master take its XDP hook.
    pub fn on_macvlan_masters(self) -> bool {
        self == XdpWhere::Always
    }

    /// Whether any XDP program runs.
    pub fn enabled(self) -> bool {
        self != XdpWhere::Never
    }
}
