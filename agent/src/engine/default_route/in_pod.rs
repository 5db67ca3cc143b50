use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use nix::errno::Errno;

use super::links::{index_of, links_by_index};
use super::NetnsError;
use crate::netlink::{DefaultRoute, IpFamily, LinkError, Netlink};

/// Interface names of a namespace, by index.
pub(super) type Links = BTreeMap<u32, String>;

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
    for family in [IpFamily::V4, IpFamily::V6] {
        for route in main_defaults(&ns, netns, family).await? {
            pairs.extend(route.hops.iter().map(|(index, gateway)| (name_of(&links, *index), *gateway)));
        }
    }
    Ok(pairs)
}

/// Families whose default routes an attachment with these gateways takes over.
fn families_replaced(gateways: &[IpAddr]) -> Vec<IpFamily> {
    if gateways.is_empty() {
        return vec![IpFamily::V4, IpFamily::V6];
    }
    [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .filter(|family| gateways.iter().any(|gateway| IpFamily::of(gateway) == *family))
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
    family: IpFamily,
) -> Result<Vec<DefaultRoute>, NetnsError> {
    ns.main_default_routes(family)
        .await
        .map_err(|source| NetnsError::ListRoutes { netns: netns.to_path_buf(), source: Box::new(source) })
}

/// A link can vanish between the link dump and the route dump; its index still identifies it.
fn name_of(links: &Links, index: u32) -> String {
    links.get(&index).cloned().unwrap_or_else(|| format!("ifindex {index}"))
}

pub(super) async fn delete_route(
    ns: &Netlink,
    netns: &Path,
    links: &Links,
    route: DefaultRoute,
) -> Result<(), NetnsError> {
    let description = describe(&route, links);
    tracing::debug!(netns = %netns.display(), route = %description, "removing default route");
    match ns.delete_default_route(&route, &description).await {
        Ok(()) => Ok(()),
        // Someone else (a plugin, the kernel removing a link) got there first: gone either way.
        Err(err) if matches!(err.errno, Some(Errno::ESRCH | Errno::ENOENT)) => Ok(()),
        Err(source) => Err(NetnsError::DeleteRoute {
            netns: netns.to_path_buf(),
            route: description,
            source: Box::new(source),
        }),
    }
}

/// `ip route`-style text, for errors and logs.
fn describe(route: &DefaultRoute, links: &Links) -> String {
    let mut text = String::from("default");
    for (index, gateway) in &route.hops {
        if let Some(gateway) = gateway {
            text.push_str(&format!(" via {gateway}"));
        }
        text.push_str(&format!(" dev {}", name_of(links, *index)));
    }
    text.push_str(&format!(" metric {}", route.metric));
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
    ns.add_default_route(target.index, target.gateway, metric)
        .await
        .map_err(|source| add_error(target, source))
}

fn add_error(target: &Target<'_>, source: LinkError) -> NetnsError {
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
fn is_unreachable(err: &LinkError) -> bool {
    matches!(err.errno, Some(Errno::ENETUNREACH | Errno::EHOSTUNREACH | Errno::ENETDOWN))
}
