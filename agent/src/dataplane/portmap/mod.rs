//! Port mappings (NPWG 4.1.2.1.7) of secondary attachments, in eBPF instead of iptables.
//!
//! Traffic to hostIP:hostPort, where the host IP is the node's address on the attachment's
//! network, is translated to podIP:containerPort on the pod's interface of that network, and
//! the replies of those flows back, by the programs of `ebpf/programs` (TC on the host-side
//! interfaces, see [`topology`]; cgroup socket hooks for the node's own clients). The programs
//! track each translated flow in a pinned LRU table, so only its replies are rewritten; the
//! agent removes the flows of deleted mappings and reaps expired ones. An ADD is a netlink
//! dump, a few map updates and at most one TCX attachment: no exec, no iptables, no conntrack.
//!
//! - [`config`]: the plugin's config and `runtimeConfig.portMappings`;
//! - [`topology`]: which node interfaces are involved (read by `dataplane::netdev`);
//! - [`entries`]: mappings to map entries (pure);
//! - [`mapper`]: the BPF object; [`table`]: its maps; [`reaper`]: removes expired flows;
//!   [`store`]: durable records;
//! - [`plugin`]: the `plexus-portmap` CNI plugin type; [`list`]: `plexus-agent portmap list`
//!   and `flows`, with [`flows`] (pure) formatting flows.
//!
//! The lifecycle (ADD, DEL, CHECK, GC, STATUS, the start) is the dataplane's one
//! ([`crate::dataplane::service`]), with [`mapper::Mapper`] as its feature. Native plugins
//! (macvlan) offer the `portMappings` capability by running [`plugin`] on their own result
//! (see `dataplane::capabilities`).

pub mod config;
pub mod entries;
pub mod flows;
pub mod list;
pub mod mapper;
pub mod plugin;
pub mod reaper;
pub mod store;
pub mod table;
pub mod topology;

#[cfg(test)]
mod kernel_tests;

use crate::cni::{CniCode, ErrorCode};
use crate::dataplane::chained::PrevResultError;
use crate::dataplane::netdev::NetdevError;
use crate::dataplane::service::{Service, ServiceError};

/// The port mapping service of the agent (see [`crate::dataplane::service`]).
pub type Portmap = Service<mapper::Mapper>;

#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    PrevResult(#[from] PrevResultError),
    #[error(transparent)]
    Topology(#[from] topology::TopologyError),
    #[error(transparent)]
    Plan(#[from] entries::PlanError),
    #[error(transparent)]
    Netdev(#[from] NetdevError),
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl CniCode for PortmapError {
    /// The config and the pod's request are the user's to fix (CNI code 7); the rest is the
    /// node's (999, "internal").
    fn cni_code(&self) -> ErrorCode {
        match self {
            PortmapError::Config(_)
            | PortmapError::PrevResult(_)
            | PortmapError::Topology(_)
            | PortmapError::Plan(_) => ErrorCode::InvalidNetworkConfig,
            PortmapError::Netdev(_) => ErrorCode::Internal,
            PortmapError::Service(e) => e.cni_code(),
        }
    }
}
