use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use futures::TryStreamExt;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop, RouteType, RouteVia,
};
use nix::errno::Errno;
use rtnetlink::RouteMessageBuilder;

use super::links::{index_of, links_by_index};
use super::NetnsError;
use crate::netlink::route_table::table_of;
use crate::netlink::{errno_of, Netlink};

/// Interface names of a namespace, by index.
pub(super) type Links = BTreeMap<u32, String>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    V4,
    V6,
}

impl Family {
    fn of(ip: &IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn dump_request(self) -> RouteMessage {
        match self {
            Family::V4 => RouteMessageBuilder::<Ipv4Addr>::new().build(),
            Family::V6 => RouteMessageBuilder::<Ipv6Addr>::new().build(),
        }
    }
}

/// Applies the NPWG "default-route" selection (spec 4.1.2.1.9) inside the pod:
/// removes every default route (0.0.0.0/0 for IPv4, ::/0 for IPv6) of the families being replaced, on
/// every interface in the namespace (families = those of `gateways`; both families when `gateways` is
/// empty, because an empty list means "this attachment takes the default route, with no gateway"),
/// then adds one default route per gateway through interface `ifname`, in order, with metric =
/// position (0, 1, 2...) so the first gateway wins.
/// Idempotent: calling it twice gives the same routes.
///
/// Only the main routing table is touched: tables of policy routing (e.g. the sbr plugin's) keep
/// their own default routes on purpose. The kernel turns an IPv6 metric of 0 into 1024, which would
/// put the first IPv6 gateway last, so IPv6 routes get position + 1 instead.
///
/// If adding a route fails, the replaced families may be left without a default route; the caller
/// owns undoing the attachment.
pub async fn replace_default_routes(
    netns: &Path,
    ifname: &str,
    gateways: &[IpAddr],
) -> Result<(), NetnsError> {
    let ns = Netlink::pod(netns).await?;
    let links = links_by_index(&ns).await?;
    // Resolved before anything is removed, so a wrong name leaves the pod's routes untouched.
    let index = index_of(&links, netns, ifname)?;
    for family in families_replaced(gateways) {
        for route in main_defaults(&ns, netns, family).await? {
            delete_route(&ns, netns, &links, route).await?;
        }
    }
    for (position, gateway) in (0u32..).zip(gateways) {
        let target = Target { netns, ifname, index, gateway: *gateway };
        add_default(&ns, &target, metric(position, gateway)).await?;
    }
    Ok(())
}

/// Default routes in the namespace as (interface name, gateway) pairs, for CHECK and for tests.
///
/// IPv4 routes come first, each family ordered by metric so the route in use leads; a multipath
/// route yields one pair per next hop.
pub async fn default_routes(netns: &Path) -> Result<Vec<(String, Option<IpAddr>)>, NetnsError> {
    let ns = Netlink::pod(netns).await?;
    let links = links_by_index(&ns).await?;
    let mut pairs = Vec::new();
    for family in [Family::V4, Family::V6] {
        for route in main_defaults(&ns, netns, family).await? {
            pairs.extend(hops(&route).into_iter().map(|(index, gateway)| (name_of(&links, index), gateway)));
        }
    }
    Ok(pairs)
}

/// Families whose default routes an attachment with these gateways takes over.
fn families_replaced(gateways: &[IpAddr]) -> Vec<Family> {
    if gateways.is_empty() {
        return vec![Family::V4, Family::V6];
    }
    [Family::V4, Family::V6]
        .into_iter()
        .filter(|family| gateways.iter().any(|gateway| Family::of(gateway) == *family))
        .collect()
}

fn metric(position: u32, gateway: &IpAddr) -> u32 {
    match gateway {
        IpAddr::V4(_) => position,
        IpAddr::V6(_) => position.saturating_add(1),
    }
}

/// The unicast default routes of the main table, lowest metric first.
pub(super) async fn main_defaults(
    ns: &Netlink,
    netns: &Path,
    family: Family,
) -> Result<Vec<RouteMessage>, NetnsError> {
    let routes: Vec<RouteMessage> =
        ns.handle().route().get(family.dump_request()).execute().try_collect().await.map_err(|source| {
            NetnsError::ListRoutes { netns: netns.to_path_buf(), source: Box::new(source) }
        })?;
    let mut defaults: Vec<RouteMessage> = routes.into_iter().filter(is_main_default).collect();
    defaults.sort_by_key(metric_of);
    Ok(defaults)
}

/// Unicast only: blackhole/unreachable defaults do not carry traffic through any interface.
fn is_main_default(route: &RouteMessage) -> bool {
    route.header.destination_prefix_length == 0
        && route.header.kind == RouteType::Unicast
        && table_of(route) == u32::from(RouteHeader::RT_TABLE_MAIN)
}

fn metric_of(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|attr| match attr {
            RouteAttribute::Priority(metric) => Some(*metric),
            _ => None,
        })
        .unwrap_or(0)
}

/// (interface index, gateway) of each next hop of `route`.
fn hops(route: &RouteMessage) -> Vec<(u32, Option<IpAddr>)> {
    let multipath = route.attributes.iter().find_map(|attr| match attr {
        RouteAttribute::MultiPath(hops) => Some(hops),
        _ => None,
    });
    if let Some(multipath) = multipath {
        return multipath
            .iter()
            .map(|hop: &RouteNextHop| (hop.interface_index, gateway_in(&hop.attributes)))
            .collect();
    }
    let oif = route.attributes.iter().find_map(|attr| match attr {
        RouteAttribute::Oif(index) => Some(*index),
        _ => None,
    });
    oif.map(|index| vec![(index, gateway_in(&route.attributes))]).unwrap_or_default()
}

/// RTA_VIA appears instead of RTA_GATEWAY when an IPv4 route goes through an IPv6 next hop.
fn gateway_in(attributes: &[RouteAttribute]) -> Option<IpAddr> {
    attributes.iter().find_map(|attr| match attr {
        RouteAttribute::Gateway(RouteAddress::Inet(v4)) | RouteAttribute::Via(RouteVia::Inet(v4)) => {
            Some(IpAddr::V4(*v4))
        }
        RouteAttribute::Gateway(RouteAddress::Inet6(v6)) | RouteAttribute::Via(RouteVia::Inet6(v6)) => {
            Some(IpAddr::V6(*v6))
        }
        _ => None,
    })
}

/// A link can vanish between the link dump and the route dump; its index still identifies it.
fn name_of(links: &Links, index: u32) -> String {
    links.get(&index).cloned().unwrap_or_else(|| format!("ifindex {index}"))
}

pub(super) async fn delete_route(
    ns: &Netlink,
    netns: &Path,
    links: &Links,
    route: RouteMessage,
) -> Result<(), NetnsError> {
    let description = describe(&route, links);
    tracing::debug!(netns = %netns.display(), route = %description, "removing default route");
    match ns.handle().route().del(deletion_of(route)).execute().await {
        Ok(()) => Ok(()),
        // Someone else (a plugin, the kernel removing a link) got there first: gone either way.
        Err(err) if matches!(errno_of(&err), Some(Errno::ESRCH | Errno::ENOENT)) => Ok(()),
        Err(source) => Err(NetnsError::DeleteRoute {
            netns: netns.to_path_buf(),
            route: description,
            source: Box::new(source),
        }),
    }
}

/// The dump carries read-only attributes (cache info, expiry, preference) that mean nothing to a
/// delete; keep only what the kernel matches a route on.
fn deletion_of(route: RouteMessage) -> RouteMessage {
    let mut deletion = route;
    deletion.attributes.retain(|attr| {
        matches!(
            attr,
            RouteAttribute::Table(_)
                | RouteAttribute::Priority(_)
                | RouteAttribute::Oif(_)
                | RouteAttribute::Gateway(_)
                | RouteAttribute::Via(_)
                | RouteAttribute::MultiPath(_)
        )
    });
    deletion
}

/// `ip route`-style text, for errors and logs.
fn describe(route: &RouteMessage, links: &Links) -> String {
    let mut text = String::from("default");
    for (index, gateway) in hops(route) {
        if let Some(gateway) = gateway {
            text.push_str(&format!(" via {gateway}"));
        }
        text.push_str(&format!(" dev {}", name_of(links, index)));
    }
    text.push_str(&format!(" metric {}", metric_of(route)));
    text
}

/// Where one new default route goes.
struct Target<'a> {
    netns: &'a Path,
    ifname: &'a str,
    index: u32,
    gateway: IpAddr,
}

async fn add_default(ns: &Netlink, target: &Target<'_>, metric: u32) -> Result<(), NetnsError> {
    let route = match target.gateway {
        IpAddr::V4(gateway) => RouteMessageBuilder::<Ipv4Addr>::new()
            .output_interface(target.index)
            .gateway(gateway)
            .priority(metric)
            .build(),
        IpAddr::V6(gateway) => RouteMessageBuilder::<Ipv6Addr>::new()
            .output_interface(target.index)
            .gateway(gateway)
            .priority(metric)
            .build(),
    };
    ns.handle().route().add(route).execute().await.map_err(|source| add_error(target, source))
}

fn add_error(target: &Target<'_>, source: rtnetlink::Error) -> NetnsError {
    let netns = target.netns.to_path_buf();
    let ifname = target.ifname.to_owned();
    let gateway = target.gateway;
    let unreachable = is_unreachable(&source);
    let source = Box::new(source);
    if unreachable {
        NetnsError::GatewayUnreachable { netns, ifname, gateway, source }
    } else {
        NetnsError::AddRoute { netns, ifname, gateway, source }
    }
}

/// The errors the kernel gives when the gateway is not on a subnet of (or not up on) the interface.
fn is_unreachable(err: &rtnetlink::Error) -> bool {
    matches!(errno_of(err), Some(Errno::ENETUNREACH | Errno::EHOSTUNREACH | Errno::ENETDOWN))
}
