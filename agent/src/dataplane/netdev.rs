//! Everything the dataplane asks the kernel over rtnetlink, in the agent's (the node's)
//! namespace: the node's interfaces with their addresses and the default route (one dump each
//! per ADD), an interface's root qdisc, and the TC filters on a hook. Each call opens its own
//! connection through [`with_connection`], the one place to move onto a shared netlink layer.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::Ipv4Addr;

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};
use rtnetlink::{Handle, RouteMessageBuilder};

use super::attach::Hook;

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
}

#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    #[error("opening a netlink connection: {0}")]
    Connect(#[source] std::io::Error),
    #[error("reading the node's {what} over netlink: {source}")]
    Read {
        what: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("interface index {0} out of range")]
    Index(u32),
    #[error("starting a runtime for netlink: {0}")]
    Runtime(#[source] std::io::Error),
}

fn read(what: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> NetdevError {
    let what = what.into();
    move |source| NetdevError::Read { what, source }
}

/// Runs `query` on a connection of its own, closed when it is done.
async fn with_connection<T, F, Fut>(query: F) -> Result<T, NetdevError>
where
    F: FnOnce(Handle) -> Fut,
    Fut: Future<Output = Result<T, NetdevError>>,
{
    let (connection, handle, _) = rtnetlink::new_connection().map_err(NetdevError::Connect)?;
    let driver = tokio::spawn(connection);
    let result = query(handle).await;
    driver.abort();
    result
}

/// Every interface of the node with its global addresses, and the interface of the IPv4
/// default route (if any).
pub async fn snapshot() -> Result<(Vec<NodeInterface>, Option<u32>), NetdevError> {
    with_connection(|handle| async move {
        let links: Vec<LinkMessage> =
            handle.link().get().execute().try_collect().await.map_err(read("interfaces"))?;
        let addresses: Vec<AddressMessage> =
            handle.address().get().execute().try_collect().await.map_err(read("addresses"))?;
        let routes: Vec<RouteMessage> = handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(read("routes"))?;
        Ok((interfaces(&links, &addresses), default_route(&routes)))
    })
    .await
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
    let index = i32::try_from(ifindex).map_err(|_| NetdevError::Index(ifindex))?;
    let qdiscs: Vec<TcMessage> = with_connection(|handle| async move {
        handle
            .qdisc()
            .get()
            .index(index)
            .execute()
            .try_collect()
            .await
            .map_err(read(format!("qdiscs of interface {ifindex}")))
    })
    .await?;
    Ok(qdiscs.iter().filter(|q| q.header.index == index && q.header.parent == TcHandle::ROOT).find_map(kind))
}

/// Whether a cls_bpf filter at `priority` and `handle` is on the hook of `ifindex`. Blocking
/// (callers run off the async workers).
pub fn bpf_filter_present(ifindex: u32, hook: Hook, priority: u16, handle: u32) -> Result<bool, NetdevError> {
    let index = i32::try_from(ifindex).map_err(|_| NetdevError::Index(ifindex))?;
    let query = with_connection(|netlink| async move {
        let request = netlink.traffic_filter(index).get();
        let request = match hook {
            Hook::Ingress => request.ingress(),
            Hook::Egress => request.egress(),
        };
        let filters: Vec<TcMessage> =
            request.execute().try_collect().await.map_err(read(format!("filters of interface {ifindex}")))?;
        Ok(filters)
    });
    let filters = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.block_on(query),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(NetdevError::Runtime)?
            .block_on(query),
    }?;
    Ok(filters.iter().any(|f| {
        u32::from(f.header.handle) == handle
            && f.header.info >> 16 == u32::from(priority)
            && kind(f).as_deref() == Some("bpf")
    }))
}

fn kind(message: &TcMessage) -> Option<String> {
    message.attributes.iter().find_map(|a| match a {
        TcAttribute::Kind(k) => Some(k.clone()),
        _ => None,
    })
}

fn interfaces(links: &[LinkMessage], addresses: &[AddressMessage]) -> Vec<NodeInterface> {
    let mut addrs: BTreeMap<u32, Vec<IpNet>> = BTreeMap::new();
    for a in addresses.iter().filter(|a| a.header.scope == AddressScope::Universe) {
        // IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer's on p2p links).
        let ip = a
            .attributes
            .iter()
            .find_map(|x| match x {
                AddressAttribute::Local(ip) => Some(*ip),
                _ => None,
            })
            .or_else(|| {
                a.attributes.iter().find_map(|x| match x {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })
            });
        if let Some(net) = ip.and_then(|ip| IpNet::new(ip, a.header.prefix_len).ok()) {
            addrs.entry(a.header.index).or_default().push(net);
        }
    }
    links
        .iter()
        .map(|l| {
            let mut i = NodeInterface {
                index: l.header.index,
                name: String::new(),
                mac: None,
                macvlan_lower: None,
                addrs: addrs.remove(&l.header.index).unwrap_or_default(),
            };
            let mut lower = None;
            let mut macvlan = false;
            for attr in &l.attributes {
                match attr {
                    LinkAttribute::IfName(n) => i.name = n.clone(),
                    LinkAttribute::Address(bytes) => i.mac = <[u8; 6]>::try_from(bytes.as_slice()).ok(),
                    LinkAttribute::Link(index) => lower = Some(*index),
                    LinkAttribute::LinkInfo(infos) => {
                        macvlan = infos.iter().any(|x| matches!(x, LinkInfo::Kind(InfoKind::MacVlan)));
                    }
                    _ => {}
                }
            }
            i.macvlan_lower = lower.filter(|_| macvlan);
            i
        })
        .collect()
}

fn default_route(routes: &[RouteMessage]) -> Option<u32> {
    routes.iter().filter(|r| r.header.destination_prefix_length == 0).find_map(|r| {
        r.attributes.iter().find_map(|a| match a {
            RouteAttribute::Oif(index) => Some(*index),
            _ => None,
        })
    })
}
