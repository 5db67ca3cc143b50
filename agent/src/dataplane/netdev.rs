//! Everything the dataplane asks the kernel over netlink, in the agent's (the node's)
//! namespace, through the one netlink layer ([`crate::netlink`]): the node's interfaces with
//! their addresses and the default route (one dump each per ADD), an interface's root qdisc,
//! and the TC filters on a hook.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

use super::attach::Hook;
use crate::netlink::{AddressSnapshot, FilterHook, LinkError, LinkSnapshot, Netlink, RouteSnapshot};

/// A node interface, as the services need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInterface {
    pub index: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    /// The lower device's index when this is a macvlan.
    pub macvlan_lower: Option<u32>,
    /// Global addresses (link-local ones cannot be a host IP).
    pub addrs: Vec<IpNet>,
    /// The bridge (or bond) this interface is a port of.
    pub master: Option<u32>,
    /// A device that reaches the wire: hardware (no link kind), a bond, a team or a VLAN; not
    /// a veth, tap or tunnel. A bridge's ports of this sort are its uplinks by default.
    pub wire: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    #[error("reading the node's network devices: {0}")]
    Netlink(#[from] LinkError),
    #[error("starting a runtime for netlink: {0}")]
    Runtime(#[source] std::io::Error),
}

/// The index of the interface named `name` in the agent's namespace, if there is one.
pub fn index_of(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a NUL-terminated string, which the call only reads.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// Every interface of the node with its global addresses, and the interface of the IPv4
/// default route (if any, in any table).
pub async fn snapshot() -> Result<(Vec<NodeInterface>, Option<u32>), NetdevError> {
    let node = Netlink::agent()?;
    let links = node.links().await?;
    let addresses = node.all_addresses().await?;
    let routes = node.ipv4_routes().await?;
    Ok((interfaces(&links, &addresses), default_route(&routes)))
}

/// The node's interfaces (index, name), so that reconciling leaves hooks of vanished ones
/// alone; None when netlink cannot say (then every recorded hook counts as present).
pub async fn node_interfaces() -> Option<BTreeSet<(u32, String)>> {
    match snapshot().await {
        Ok((node, _)) => Some(node.into_iter().map(|i| (i.index, i.name)).collect()),
        Err(e) => {
            tracing::warn!("{e}; reconciling keeps the hooks of every recorded interface");
            None
        }
    }
}

/// The kind of `ifindex`'s root qdisc ("fq", "noqueue", "pfifo_fast", ...), if it has one.
pub async fn root_qdisc_kind(ifindex: u32) -> Result<Option<String>, NetdevError> {
    Ok(Netlink::agent()?.root_qdisc_kind(ifindex).await?)
}

/// Whether a cls_bpf filter at `priority` and `handle` is on the hook of `ifindex`. Blocking
/// (callers run off the async workers).
pub fn bpf_filter_present(ifindex: u32, hook: Hook, priority: u16, handle: u32) -> Result<bool, NetdevError> {
    let hook = match hook {
        Hook::Ingress => FilterHook::Ingress,
        Hook::Egress => FilterHook::Egress,
    };
    let query = async move { Netlink::agent()?.filters(ifindex, hook).await };
    let filters = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.block_on(query),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(NetdevError::Runtime)?
            .block_on(query),
    }?;
    Ok(filters
        .iter()
        .any(|f| f.handle == handle && f.priority == priority && f.kind.as_deref() == Some("bpf")))
}

fn interfaces(links: &[LinkSnapshot], addresses: &[AddressSnapshot]) -> Vec<NodeInterface> {
    let mut global: BTreeMap<u32, Vec<IpNet>> = BTreeMap::new();
    for a in addresses.iter().filter(|a| a.is_global()) {
        global.entry(a.index).or_default().push(a.address);
    }
    links
        .iter()
        .map(|l| NodeInterface {
            index: l.index,
            name: l.name.clone(),
            mac: l.ethernet_mac().map(|m| m.0),
            macvlan_lower: l.parent_index.filter(|_| l.is_macvlan()),
            addrs: global.remove(&l.index).unwrap_or_default(),
            master: l.master,
            wire: matches!(l.kind.as_deref(), None | Some("bond" | "team" | "vlan")),
        })
        .collect()
}

/// `routes` are IPv4 ones.
fn default_route(routes: &[RouteSnapshot]) -> Option<u32> {
    routes.iter().filter(|r| r.dst.prefix_len() == 0).find_map(|r| r.oif)
}
