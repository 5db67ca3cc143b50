//! The main table's default routes, for the NPWG default-route selection ([`crate::netns`]):
//! read with every next hop, deleted as the kernel reported them, added through one link.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHop, RouteType, RouteVia,
};
use rtnetlink::RouteMessageBuilder;

use super::route_table::table_of;
use super::{LinkError, Netlink};

/// An IP family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    fn dump_request(self) -> RouteMessage {
        match self {
            IpFamily::V4 => RouteMessageBuilder::<Ipv4Addr>::new().build(),
            IpFamily::V6 => RouteMessageBuilder::<Ipv6Addr>::new().build(),
        }
    }
}

/// A unicast default route of the main table, as the kernel reported it.
#[derive(Debug, Clone)]
pub struct DefaultRoute {
    /// (interface index, gateway) of each next hop; a multipath route has several.
    pub hops: Vec<(u32, Option<IpAddr>)>,
    /// RTA_PRIORITY; 0 when absent.
    pub metric: u32,
    /// What deleting it sends.
    deletion: RouteMessage,
}

impl DefaultRoute {
    /// The route of `message` when it is a unicast default route of the main table: blackhole
    /// and unreachable defaults carry no traffic through any interface.
    fn of_main(message: RouteMessage) -> Option<DefaultRoute> {
        let main_default = message.header.destination_prefix_length == 0
            && message.header.kind == RouteType::Unicast
            && table_of(&message) == u32::from(RouteHeader::RT_TABLE_MAIN);
        main_default.then(|| DefaultRoute {
            hops: hops(&message),
            metric: metric_of(&message),
            deletion: deletion_of(message),
        })
    }
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

impl Netlink {
    /// The unicast default routes of `family` in the main table, lowest metric first.
    pub async fn main_default_routes(&self, family: IpFamily) -> Result<Vec<DefaultRoute>, LinkError> {
        let routes: Vec<RouteMessage> = self
            .handle()
            .route()
            .get(family.dump_request())
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error("listing routes", e))?;
        let mut defaults: Vec<DefaultRoute> = routes.into_iter().filter_map(DefaultRoute::of_main).collect();
        defaults.sort_by_key(|route| route.metric);
        Ok(defaults)
    }

    /// Deletes `route` (`description` names it in the error). The kernel's errno tells one
    /// already gone (ESRCH, ENOENT) from a refusal.
    pub async fn delete_default_route(
        &self,
        route: &DefaultRoute,
        description: &str,
    ) -> Result<(), LinkError> {
        self.handle()
            .route()
            .del(route.deletion.clone())
            .execute()
            .await
            .map_err(|e| self.error(format!("removing route {description}"), e))
    }

    /// Adds a default route via `gateway` through the link `index`, with `metric`.
    pub async fn add_default_route(&self, index: u32, gateway: IpAddr, metric: u32) -> Result<(), LinkError> {
        let route = match gateway {
            IpAddr::V4(gateway) => RouteMessageBuilder::<Ipv4Addr>::new()
                .output_interface(index)
                .gateway(gateway)
                .priority(metric)
                .build(),
            IpAddr::V6(gateway) => RouteMessageBuilder::<Ipv6Addr>::new()
                .output_interface(index)
                .gateway(gateway)
                .priority(metric)
                .build(),
        };
        self.handle()
            .route()
            .add(route)
            .execute()
            .await
            .map_err(|e| self.error(format!("adding default route via {gateway} dev index {index}"), e))
    }
}
