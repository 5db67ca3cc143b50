//! What both the leftover finder ([`super::find`]) and the liveness of containers
//! ([`super::liveness`]) read of the node: container records and the runtime's result cache
//! files, as snapshots. Below both, so neither imports the other's types.

use std::path::PathBuf;

/// A container record (one runtime attachment) as doctor sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerView {
    pub container_id: String,
    /// CNI_IFNAME of the runtime's call.
    pub ifname: String,
    pub netns: String,
    /// Whether `netns` is a live network namespace.
    pub netns_alive: bool,
    pub cni_args: String,
    /// The interface of each attachment (the default network's and the secondary ones).
    pub attachment_ifnames: Vec<String>,
    /// `namespace/name`, when known.
    pub pod: Option<String>,
}

/// A network namespace a result cache file names, and whether it exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceView {
    pub path: String,
    pub alive: bool,
}

/// A result cache file of the runtime (libcni's `<cache-dir>/results/<network>-<container>-<ifname>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultCacheView {
    pub path: PathBuf,
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    /// The namespaces it names: its `netns`, and its result's interfaces' `sandbox`es.
    pub namespaces: Vec<NamespaceView>,
}

/// Multus's cache of a container it attached (`crate::takeover`): what the agent's DEL of the
/// container releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultusCacheView {
    /// The delegates file.
    pub path: PathBuf,
    pub container_id: String,
    /// Its networks, the default network first; empty when the file cannot be read (why, then).
    pub networks: Vec<String>,
    pub unreadable: Option<String>,
    /// The runtime's DEL of it: the interface and `CNI_ARGS` of its default network's cached run.
    pub ifname: String,
    pub cni_args: String,
}
