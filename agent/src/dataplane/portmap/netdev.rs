//! The node's interfaces and addresses, read over netlink in the agent's (the node's)
//! namespace: one link dump and one address dump per ADD.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::route::{RouteAttribute, RouteMessage};
use rtnetlink::RouteMessageBuilder;

use super::topology::NodeInterface;

#[derive(Debug, thiserror::Error)]
#[error("reading the node's {what} over netlink: {cause}")]
pub struct NetdevError {
    what: &'static str,
    cause: String,
}

fn error(what: &'static str) -> impl Fn(rtnetlink::Error) -> NetdevError {
    move |e| NetdevError { what, cause: e.to_string() }
}

/// Every interface of the node with its global addresses, and the interface of the IPv4
/// default route (if any).
pub async fn snapshot() -> Result<(Vec<NodeInterface>, Option<u32>), NetdevError> {
    let (connection, handle, _) =
        rtnetlink::new_connection().map_err(|e| NetdevError { what: "interfaces", cause: e.to_string() })?;
    let driver = tokio::spawn(connection);
    let result = async {
        let links: Vec<LinkMessage> =
            handle.link().get().execute().try_collect().await.map_err(error("interfaces"))?;
        let addresses: Vec<AddressMessage> =
            handle.address().get().execute().try_collect().await.map_err(error("addresses"))?;
        let routes: Vec<RouteMessage> = handle
            .route()
            .get(RouteMessageBuilder::<Ipv4Addr>::new().build())
            .execute()
            .try_collect()
            .await
            .map_err(error("routes"))?;
        Ok((interfaces(&links, &addresses), default_route(&routes)))
    }
    .await;
    driver.abort();
    result
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
