//! Configuring a link's IP: addresses and routes one at a time, and the addresses and routes
//! of a whole CNI result as libcni's `ConfigureIface` applies them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::route::{RouteAttribute, RouteMessage, RouteMetric, RouteProtocol, RouteScope};
use nix::errno::Errno;
use rtnetlink::RouteMessageBuilder;

use super::route_table::set_table;
use super::sysctl::{read_sysctl, write_sysctl};
use super::{run_in, AddressSnapshot, LinkCause, LinkError, LinkSnapshot, Netlink};
use crate::cni::result::{CniResult, IpConfig, Route};

/// How long [`configure_ip`] waits for IPv6 duplicate address detection, as libcni does.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
const SETTLE_POLL: Duration = Duration::from_millis(50);

impl Netlink {
    /// Adds `address` (with its prefix length) to the link. IPv4 addresses get the broadcast
    /// address of their subnet, as `ip addr add ... brd +` and libcni's netlink do.
    pub async fn add_address(&self, link: &LinkSnapshot, address: IpNet) -> Result<(), LinkError> {
        self.handle()
            .address()
            .add(link.index, address.addr(), address.prefix_len())
            .execute()
            .await
            .map_err(|e| self.error(format!("adding address {address} to {}", link.name), e))
    }

    /// Removes `address` (with its prefix length) from the link.
    pub async fn delete_address(&self, link: &LinkSnapshot, address: IpNet) -> Result<(), LinkError> {
        let action = format!("removing address {address} from {}", link.name);
        let mut request = self.handle().address().get().set_link_index_filter(link.index).execute();
        while let Some(message) = request.try_next().await.map_err(|e| self.error(action.clone(), e))? {
            let ours = AddressSnapshot::from_message(&message).is_some_and(|a| a.address == address);
            if ours {
                return self
                    .handle()
                    .address()
                    .del(message)
                    .execute()
                    .await
                    .map_err(|e| self.error(action, e));
            }
        }
        Ok(())
    }

    /// Adds one route through `link`. `gateway` is the route's own or the one the caller chose
    /// for it. Protocol "boot" and universe scope unless the route says otherwise, as libcni's
    /// netlink library adds them, so `ip route` shows the same thing either way.
    pub async fn add_route(
        &self,
        link: &LinkSnapshot,
        route: &Route,
        gateway: Option<IpAddr>,
    ) -> Result<(), LinkError> {
        let dst = route.dst.trunc();
        let action = match gateway {
            Some(gw) => format!("adding route {dst} via {gw} dev {}", link.name),
            None => format!("adding route {dst} dev {}", link.name),
        };
        let message = route_message(link.index, route, gateway).ok_or_else(|| {
            self.refuse(action.clone(), Errno::EINVAL, "the gateway is of the other IP family")
        })?;
        self.handle().route().add(message).execute().await.map_err(|e| self.error(action, e))
    }
}

fn route_message(index: u32, route: &Route, gateway: Option<IpAddr>) -> Option<RouteMessage> {
    let dst = route.dst.trunc();
    let mut message = match (dst, gateway) {
        (IpNet::V4(net), gw) => {
            let mut builder = RouteMessageBuilder::<Ipv4Addr>::new();
            // A default route has no RTA_DST at all, as `ip route add default` sends it.
            if net.prefix_len() > 0 {
                builder = builder.destination_prefix(net.network(), net.prefix_len());
            }
            match gw {
                Some(IpAddr::V4(gw)) => builder = builder.gateway(gw),
                Some(IpAddr::V6(_)) => return None,
                None => {}
            }
            builder.output_interface(index).build()
        }
        (IpNet::V6(net), gw) => {
            let mut builder = RouteMessageBuilder::<Ipv6Addr>::new();
            if net.prefix_len() > 0 {
                builder = builder.destination_prefix(net.network(), net.prefix_len());
            }
            match gw {
                Some(IpAddr::V6(gw)) => builder = builder.gateway(gw),
                Some(IpAddr::V4(_)) => return None,
                None => {}
            }
            builder.output_interface(index).build()
        }
    };
    message.header.protocol = RouteProtocol::Boot;
    if let Some(scope) = route.scope.and_then(|s| u8::try_from(s).ok()) {
        message.header.scope = RouteScope::from(scope);
    }
    if let Some(table) = route.table {
        set_table(&mut message, table);
    }
    if let Some(priority) = route.priority {
        message.attributes.push(RouteAttribute::Priority(priority));
    }
    let mut metrics = Vec::new();
    if let Some(mtu) = route.mtu {
        metrics.push(RouteMetric::Mtu(mtu));
    }
    if let Some(advmss) = route.advmss {
        metrics.push(RouteMetric::Advmss(advmss));
    }
    if !metrics.is_empty() {
        message.attributes.push(RouteAttribute::Metrics(metrics));
    }
    Some(message)
}

/// Applies the addresses and routes of `result` to the interface `ifname` of `ns`, the way
/// libcni's `ipam.ConfigureIface` does, so a native plugin leaves the same state as the
/// reference plugin:
///
/// 1. the link goes up (IPv6 duplicate address detection starts only then);
/// 2. each IP whose `interface` index names `ifname` is added; IPs without an index are for
///    someone else and skipped; an index naming another interface is an error. Before the
///    first IPv6 address, IPv6 is enabled on `lo` and the interface (`disable_ipv6=0`);
/// 3. with an IPv6 gateway, waits (up to 10 s) for duplicate address detection to finish, since
///    the kernel refuses routes through a tentative address. An address that failed it is an
///    error: another host uses it;
/// 4. each route is added through the interface; one without a gateway gets the first gateway of
///    its family among the IPs. A route already there is skipped (the first one wins).
pub async fn configure_ip(ns: &Netlink, ifname: &str, result: &CniResult) -> Result<(), LinkError> {
    let link = ns.require(ifname).await?;
    ns.set_up(&link).await?;
    let mut v4_gateway = None;
    let mut v6_gateway = None;
    let mut ipv6_enabled = false;
    for ip in ips_for(ns, ifname, result)? {
        if ip.address.addr().is_ipv6() && !ipv6_enabled {
            enable_ipv6(ns, ifname).await?;
            ipv6_enabled = true;
        }
        ns.add_address(&link, ip.address).await?;
        match ip.gateway {
            Some(gw @ IpAddr::V4(_)) => {
                v4_gateway.get_or_insert(gw);
            }
            Some(gw @ IpAddr::V6(_)) => {
                v6_gateway.get_or_insert(gw);
            }
            None => {}
        }
    }
    if v6_gateway.is_some() {
        settle(ns, &link, result).await?;
    }
    for route in &result.routes {
        let gateway = route.gw.or(if route.dst.addr().is_ipv4() { v4_gateway } else { v6_gateway });
        match ns.add_route(&link, route, gateway).await {
            Err(e) if e.is(Errno::EEXIST) => tracing::debug!("{e}; keeping the route already there"),
            other => other?,
        }
    }
    Ok(())
}

/// The IPs of `result` that belong to `ifname`.
fn ips_for<'a>(ns: &Netlink, ifname: &str, result: &'a CniResult) -> Result<Vec<&'a IpConfig>, LinkError> {
    let mut mine = Vec::new();
    for ip in &result.ips {
        let Some(index) = ip.interface else { continue };
        let named = usize::try_from(index).ok().and_then(|i| result.interfaces.get(i)).map(|i| &i.name);
        if named.map(String::as_str) != Some(ifname) {
            return Err(ns.refuse(
                format!("adding address {} to {ifname}", ip.address),
                Errno::EINVAL,
                format!("the result assigns it to interface index {index}, which is not {ifname}"),
            ));
        }
        mine.push(ip);
    }
    Ok(mine)
}

async fn enable_ipv6(ns: &Netlink, ifname: &str) -> Result<(), LinkError> {
    let action = format!("enabling IPv6 on lo and {ifname}");
    let Some(netns) = ns.netns() else {
        return Err(ns.refuse(action, Errno::EINVAL, "only done inside a pod's namespace"));
    };
    let ifname = ifname.to_owned();
    let outcome = run_in(netns, move || {
        for interface in ["lo", ifname.as_str()] {
            let key = ["net", "ipv6", "conf", interface, "disable_ipv6"];
            // Reading fails when the kernel has no IPv6 at all; adding the address will then
            // say so more clearly than this.
            if read_sysctl(&key).is_ok_and(|v| v != "0") {
                write_sysctl(&key, "0").map_err(|source| LinkCause::Sysctl { key: key.join("/"), source })?;
            }
        }
        Ok::<(), LinkCause>(())
    })
    .await;
    let cause = match outcome {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(cause)) => cause,
        Err(entering) => LinkCause::Namespace(entering),
    };
    Err(LinkError { action, place: ns.place(), errno: Some(Errno::EIO), cause })
}

/// Waits until no IPv6 address of the link is tentative (libcni's `SettleAddresses`).
async fn settle(ns: &Netlink, link: &LinkSnapshot, result: &CniResult) -> Result<(), LinkError> {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let addresses = ns.addresses(link).await?;
        let v6: Vec<&AddressSnapshot> = addresses.iter().filter(|a| a.address.addr().is_ipv6()).collect();
        if let Some(failed) = v6
            .iter()
            .find(|a| a.dad_failed() && result.ips.iter().any(|ip| ip.address.addr() == a.address.addr()))
        {
            return Err(ns.refuse(
                format!("adding address {} to {}", failed.address, link.name),
                Errno::EADDRINUSE,
                "duplicate address detection failed: another host on the network uses this address; \
                 give the attachment a free one",
            ));
        }
        if !v6.iter().any(|a| a.is_tentative()) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // libcni goes on too; adding a route through the address will fail if it matters.
            tracing::warn!(
                "{} in {} still has tentative IPv6 addresses after {SETTLE_TIMEOUT:?}",
                link.name,
                ns.place()
            );
            return Ok(());
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::route::RouteAddress;

    use super::*;

    fn route(dst: &str, gw: Option<&str>) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            gw: gw.map(|g| g.parse().unwrap()),
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    #[test]
    fn route_messages_are_boot_protocol_with_masked_destinations() {
        let message =
            route_message(7, &route("10.9.9.9/8", None), Some("10.1.0.1".parse().unwrap())).unwrap();
        assert_eq!(message.header.protocol, RouteProtocol::Boot);
        assert_eq!(message.header.destination_prefix_length, 8);
        assert!(message
            .attributes
            .contains(&RouteAttribute::Destination(RouteAddress::Inet("10.0.0.0".parse().unwrap()))));
        assert!(message.attributes.contains(&RouteAttribute::Oif(7)));
        let default = route_message(7, &route("0.0.0.0/0", None), None).unwrap();
        assert!(!default.attributes.iter().any(|a| matches!(a, RouteAttribute::Destination(_))));
    }

    #[test]
    fn route_attributes_of_cni_1_1_reach_the_message() {
        let mut r = route("fd00::/64", Some("fd00::1"));
        r.priority = Some(5);
        r.table = Some(1000);
        r.scope = Some(253);
        r.mtu = Some(1400);
        let message = route_message(3, &r, r.gw).unwrap();
        assert!(message.attributes.contains(&RouteAttribute::Priority(5)));
        assert!(message.attributes.contains(&RouteAttribute::Table(1000)));
        assert_eq!(message.header.scope, RouteScope::Link);
        assert!(message.attributes.contains(&RouteAttribute::Metrics(vec![RouteMetric::Mtu(1400)])));
    }

    #[test]
    fn a_gateway_of_the_other_family_is_refused() {
        assert!(route_message(1, &route("10.0.0.0/8", None), Some("fd00::1".parse().unwrap())).is_none());
        assert!(route_message(1, &route("fd00::/8", None), Some("10.0.0.1".parse().unwrap())).is_none());
    }
}
