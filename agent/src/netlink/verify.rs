//! CHECK: whether a namespace still has the addresses and routes a CNI result gave it, as
//! libcni's `ValidateExpected*` decide it.

use netlink_packet_route::route::RouteHeader;
use nix::errno::Errno;

use super::{LinkError, Netlink};
use crate::cni::result::{IpConfig, Route};

/// CHECK of addresses, as libcni's `ValidateExpectedInterfaceIPs`: every IP of `ips` is on
/// `ifname` with its prefix length, and the main table has a route to its subnet (unless it
/// is a single-host prefix, which has none: libcni's check fails on those).
pub async fn verify_ips(ns: &Netlink, ifname: &str, ips: &[IpConfig]) -> Result<(), LinkError> {
    let link = ns.require(ifname).await?;
    let addresses = ns.addresses(&link).await?;
    let routes = ns.routes().await?;
    let main = u32::from(RouteHeader::RT_TABLE_MAIN);
    for ip in ips {
        let action = format!("checking address {} on {ifname}", ip.address);
        if !addresses.iter().any(|a| a.address == ip.address) {
            return Err(ns.refuse(action, Errno::ENOENT, "the address is not on the interface"));
        }
        let subnet = ip.address.trunc();
        // The kernel adds no subnet route for a /32 (or /128), so there is none to look for.
        let host_route = ip.address.prefix_len() == ip.address.max_prefix_len();
        if !host_route && !routes.iter().any(|r| r.dst == subnet && r.table == main) {
            return Err(ns.refuse(
                action,
                Errno::ENOENT,
                format!("there is no route to its subnet {subnet}"),
            ));
        }
    }
    Ok(())
}

/// CHECK of routes, as libcni's `ValidateExpectedRoute`: each route of `routes` is in its
/// table (main unless it names one), with its gateway when it has one.
pub async fn verify_routes(ns: &Netlink, routes: &[Route]) -> Result<(), LinkError> {
    let present = ns.routes().await?;
    for route in routes {
        let dst = route.dst.trunc();
        let table = route.table.unwrap_or(u32::from(RouteHeader::RT_TABLE_MAIN));
        let found = present
            .iter()
            .any(|r| r.dst == dst && r.table == table && (route.gw.is_none() || r.gateway == route.gw));
        if !found {
            let via = route.gw.map(|gw| format!(" via {gw}")).unwrap_or_default();
            return Err(ns.refuse(
                format!("checking route {dst}{via}"),
                Errno::ENOENT,
                "the route is not in the routing table",
            ));
        }
    }
    Ok(())
}
