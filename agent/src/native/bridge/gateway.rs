//! The reference's `calcGateways`, and its `ensureAddr` decision, as pure functions: what
//! the result's IPs and routes become and which addresses the bridge must carry.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::cni::result::{CniResult, Route};

/// Index of the pod's interface in a bridge result: bridge, host veth, pod veth.
pub const POD_INTERFACE: i64 = 2;

/// The bridge's gateway addresses, per family, each with the prefix length of the pod's IP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gateways {
    pub v4: Vec<IpNet>,
    pub v6: Vec<IpNet>,
}

/// Binds every IP to the pod's interface; with `is_gateway`, gives each IP without a gateway
/// its subnet's first address; with `is_default_gateway`, adds a default route per family
/// through the first IP's gateway unless a default route with a gateway is there already.
/// Returns the addresses the bridge needs (none without `is_gateway`).
pub fn plan(result: &mut CniResult, is_gateway: bool, is_default_gateway: bool) -> Gateways {
    let mut gateways = Gateways::default();
    let mut default_route_found = [false, false];
    for i in 0..result.ips.len() {
        let ip = &mut result.ips[i];
        ip.interface = Some(POD_INTERFACE);
        if ip.gateway.is_none() && is_gateway {
            ip.gateway = Some(first_address(&ip.address));
        }
        let address = ip.address;
        let gateway = ip.gateway;
        let family = usize::from(address.addr().is_ipv6());
        if is_default_gateway && !default_route_found[family] {
            let default = default_net(&address);
            if !result.routes.iter().any(|r| r.gw.is_some() && r.dst == default) {
                result.routes.push(Route {
                    dst: default,
                    gw: gateway,
                    mtu: None,
                    advmss: None,
                    priority: None,
                    table: None,
                    scope: None,
                });
            }
            default_route_found[family] = true;
        }
        if is_gateway {
            if let Some(gw) = gateway.and_then(|gw| IpNet::new(gw, address.prefix_len()).ok()) {
                if family == 0 {
                    gateways.v4.push(gw);
                } else {
                    gateways.v6.push(gw);
                }
            }
        }
    }
    gateways
}

/// The first address after the network's (the reference's `calcGatewayIP`).
fn first_address(address: &IpNet) -> IpAddr {
    match address.network() {
        IpAddr::V4(net) => IpAddr::V4(Ipv4Addr::from(u32::from(net).wrapping_add(1))),
        IpAddr::V6(net) => IpAddr::V6(Ipv6Addr::from(u128::from(net).wrapping_add(1))),
    }
}

fn default_net(address: &IpNet) -> IpNet {
    match address {
        IpNet::V4(_) => IpNet::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpNet::V6(_) => IpNet::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    }
    .unwrap_or_default()
}

/// What to do so the bridge carries `wanted`, given the addresses of its family it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPlan {
    /// It is there already: nothing to do.
    Present,
    /// Remove these (with forceAddress), then add it.
    Replace(Vec<IpNet>),
    /// This address is in the way (without forceAddress).
    Conflict(IpNet),
}

/// The reference's `ensureAddr`: an IPv4 bridge carries one address; IPv6 ones may be several
/// as long as their subnets do not overlap.
pub fn address_plan(present: &[IpNet], wanted: IpNet, force: bool) -> AddressPlan {
    let mut remove = Vec::new();
    for &address in present {
        if address == wanted {
            return AddressPlan::Present;
        }
        let in_the_way =
            wanted.addr().is_ipv4() || address.contains(&wanted.addr()) || wanted.contains(&address.addr());
        if in_the_way {
            if !force {
                return AddressPlan::Conflict(address);
            }
            remove.push(address);
        }
    }
    AddressPlan::Replace(remove)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::IpConfig;

    fn ip(address: &str, gateway: Option<&str>) -> IpConfig {
        IpConfig {
            address: address.parse().unwrap(),
            gateway: gateway.map(|g| g.parse().unwrap()),
            interface: None,
        }
    }

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

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    #[test]
    fn without_gateway_options_only_the_interface_index_changes() {
        let mut result = CniResult { ips: vec![ip("10.1.0.5/24", None)], ..Default::default() };
        assert_eq!(plan(&mut result, false, false), Gateways::default());
        assert_eq!(result.ips[0].interface, Some(2));
        assert_eq!(result.ips[0].gateway, None);
        assert!(result.routes.is_empty());
    }

    #[test]
    fn a_gateway_bridge_takes_the_first_address_when_ipam_names_none() {
        let mut result = CniResult {
            ips: vec![
                ip("10.1.0.5/24", None),
                ip("fd00:1::5/64", Some("fd00:1::fe")),
                ip("10.2.0.9/16", None),
            ],
            ..Default::default()
        };
        let gateways = plan(&mut result, true, false);
        assert_eq!(result.ips[0].gateway, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(result.ips[1].gateway, Some("fd00:1::fe".parse().unwrap()));
        assert_eq!(gateways.v4, [net("10.1.0.1/24"), net("10.2.0.1/16")]);
        assert_eq!(gateways.v6, [net("fd00:1::fe/64")]);
        assert!(result.routes.is_empty());
    }

    #[test]
    fn a_default_gateway_adds_one_default_route_per_family() {
        let mut result = CniResult {
            ips: vec![ip("10.1.0.5/24", None), ip("10.2.0.5/24", None), ip("fd00::5/64", None)],
            routes: vec![route("10.9.0.0/16", None)],
            ..Default::default()
        };
        plan(&mut result, true, true);
        assert_eq!(
            result.routes,
            [
                route("10.9.0.0/16", None),
                route("0.0.0.0/0", Some("10.1.0.1")),
                route("::/0", Some("fd00::1"))
            ]
        );
    }

    #[test]
    fn a_default_route_with_a_gateway_from_ipam_is_kept_alone() {
        let mut result = CniResult {
            ips: vec![ip("10.1.0.5/24", None)],
            routes: vec![route("0.0.0.0/0", Some("10.1.0.254"))],
            ..Default::default()
        };
        plan(&mut result, true, true);
        assert_eq!(result.routes, [route("0.0.0.0/0", Some("10.1.0.254"))]);
        // One without a gateway does not count: the reference adds its own next to it.
        let mut result = CniResult {
            ips: vec![ip("10.1.0.5/24", None)],
            routes: vec![route("0.0.0.0/0", None)],
            ..Default::default()
        };
        plan(&mut result, true, true);
        assert_eq!(result.routes, [route("0.0.0.0/0", None), route("0.0.0.0/0", Some("10.1.0.1"))]);
    }

    #[test]
    fn ipv4_bridges_carry_one_address() {
        let wanted = net("10.1.0.1/24");
        assert_eq!(address_plan(&[], wanted, false), AddressPlan::Replace(vec![]));
        assert_eq!(address_plan(&[wanted], wanted, false), AddressPlan::Present);
        assert_eq!(
            address_plan(&[net("10.7.0.1/24")], wanted, false),
            AddressPlan::Conflict(net("10.7.0.1/24"))
        );
        assert_eq!(
            address_plan(&[net("10.7.0.1/24")], wanted, true),
            AddressPlan::Replace(vec![net("10.7.0.1/24")])
        );
        // Same address, other prefix: a different address.
        assert_eq!(
            address_plan(&[net("10.1.0.1/16")], wanted, false),
            AddressPlan::Conflict(net("10.1.0.1/16"))
        );
    }

    #[test]
    fn ipv6_bridges_carry_several_addresses_of_disjoint_subnets() {
        let wanted = net("fd00:1::1/64");
        assert_eq!(
            address_plan(&[net("fe80::1/64"), net("fd00:2::1/64")], wanted, false),
            AddressPlan::Replace(vec![])
        );
        assert_eq!(
            address_plan(&[net("fd00:1::9/64")], wanted, false),
            AddressPlan::Conflict(net("fd00:1::9/64"))
        );
        assert_eq!(
            address_plan(&[net("fd00::1/16")], wanted, true),
            AddressPlan::Replace(vec![net("fd00::1/16")])
        );
    }
}
