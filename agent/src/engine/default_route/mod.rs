//! A `default-route` selection (spec 4.1.2.1.9), or a PodNetwork entry's `isDefaultGW`:
//! which attachment holds the pod's default route, setting and checking it in the pod, and
//! what it changes in what plexus reports.
//!
//! [`in_pod`] sets the routes inside the pod's network namespace, over the agent's netlink
//! layer ([`crate::netlink`]), which opens each socket inside the pod so the agent's own
//! threads never change namespace.

mod error;
mod in_pod;
mod links;

#[cfg(test)]
mod kernel_tests;

pub use error::NetnsError;

use std::net::IpAddr;
use std::path::Path;

use crate::cni::result::CniResult;
use crate::cni::CniError;
use crate::state::{AttachmentRecord, ContainerRecord};

use super::request::CniEnv;

/// The secondary attachment that takes the pod's default route, if any, with its gateways.
pub fn holder(record: &ContainerRecord) -> Option<(&AttachmentRecord, &[IpAddr])> {
    record
        .attachments
        .iter()
        .filter(|a| !a.is_default)
        .find_map(|a| a.default_route.as_deref().map(|g| (a, g)))
}

/// The address families whose default routes an attachment with these gateways takes over,
/// as the pod's routes are replaced: those of its gateways, or both for an empty list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    pub v4: bool,
    pub v6: bool,
}

impl Families {
    pub const NONE: Families = Families { v4: false, v6: false };

    pub fn taken_by(gateways: &[IpAddr]) -> Families {
        if gateways.is_empty() {
            return Families { v4: true, v6: true };
        }
        Families { v4: gateways.iter().any(IpAddr::is_ipv4), v6: gateways.iter().any(IpAddr::is_ipv6) }
    }

    fn contains_v4(self, v4: bool) -> bool {
        if v4 {
            self.v4
        } else {
            self.v6
        }
    }
}

/// The families the holder of the record takes from the default network.
pub fn taken(record: &ContainerRecord) -> Families {
    holder(record).map_or(Families::NONE, |(_, gateways)| Families::taken_by(gateways))
}

/// The default network's result as the pod is: without the default routes of the families
/// another attachment took. Other routes and the other family's default stay.
pub fn without_taken_defaults(result: &CniResult, taken: Families) -> CniResult {
    let mut out = result.clone();
    out.routes.retain(|r| r.dst.prefix_len() != 0 || !taken.contains_v4(r.dst.addr().is_ipv4()));
    out
}

/// The gateways an `isDefaultGW` attachment takes the pod's default routes through: per
/// address family, the gateway of its result's default route, else the gateway of its first
/// address of that family. The IPv4 one first.
pub fn result_gateways(result: &CniResult) -> Vec<IpAddr> {
    let defaults = crate::spec::status::default_gateways(result);
    [true, false]
        .into_iter()
        .filter_map(|v4| {
            defaults
                .iter()
                .copied()
                .find(|g| g.is_ipv4() == v4)
                .or_else(|| result.ips.iter().filter_map(|ip| ip.gateway).find(|g| g.is_ipv4() == v4))
        })
        .collect()
}

/// Makes the attachment (just added, its result recorded) the holder of the pod's default
/// routes, through its result's gateways. Without a gateway there is nothing to route
/// through: the ADD fails (and is undone), saying what to give the network.
pub fn take_from_result(attachment: &mut AttachmentRecord) -> Result<(), CniError> {
    let gateways = super::parsed_result(attachment).map(|r| result_gateways(&r)).unwrap_or_default();
    if gateways.is_empty() {
        let network = attachment.pod_network.clone().unwrap_or_else(|| attachment.network.clone());
        return Err(CniError::invalid_config(format!(
            "PodNetwork {network:?} (interface {}) is to hold the pod's default route (isDefaultGW), but its CNI \
             result has no gateway; give the network's IPAM a gateway (or a default route), or drop isDefaultGW",
            attachment.ifname
        ))
        .with_details(network));
    }
    attachment.default_route = Some(gateways);
    Ok(())
}

pub async fn apply(record: &ContainerRecord, env: &CniEnv) -> Result<(), CniError> {
    let Some((holder, gateways)) = holder(record) else { return Ok(()) };
    let _timer = crate::phase::start(crate::phase::Phase::DefaultRoute);
    in_pod::replace_default_routes(Path::new(&env.netns), &holder.ifname, gateways).await.map_err(|e| {
        CniError::invalid_config(format!("setting the default route of network {}: {e}", holder.network))
            .with_details(holder.network.clone())
    })
}

pub async fn check(record: &ContainerRecord, env: &CniEnv) -> Result<(), CniError> {
    let Some((holder, gateways)) = holder(record) else { return Ok(()) };
    let routes = in_pod::default_routes(Path::new(&env.netns))
        .await
        .map_err(|e| CniError::io(format!("reading the pod's routes: {e}")))?;
    for gw in gateways {
        if !routes.iter().any(|(ifname, g)| *ifname == holder.ifname && *g == Some(*gw)) {
            return Err(CniError::invalid_config(format!(
                "the default route via {gw} on {} (network {}) is missing",
                holder.ifname, holder.network
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dual_stack() -> CniResult {
        CniResult::parse(
            &json!({
                "cniVersion": "1.0.0",
                "ips": [{"address": "10.88.0.5/24", "gateway": "10.88.0.1"}, {"address": "fd00::5/64"}],
                "routes": [
                    {"dst": "0.0.0.0/0", "gw": "10.88.0.1"},
                    {"dst": "::/0", "gw": "fd00::1"},
                    {"dst": "10.96.0.0/12", "gw": "10.88.0.1"}
                ]
            }),
            "1.0.0",
        )
        .unwrap()
    }

    fn dsts(r: &CniResult) -> Vec<String> {
        r.routes.iter().map(|r| r.dst.to_string()).collect()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn families_follow_the_gateways_and_an_empty_list_takes_both() {
        assert_eq!(Families::taken_by(&ips(&["10.0.0.1"])), Families { v4: true, v6: false });
        assert_eq!(Families::taken_by(&ips(&["fd01::1"])), Families { v4: false, v6: true });
        assert_eq!(Families::taken_by(&ips(&["10.0.0.1", "fd01::1"])), Families { v4: true, v6: true });
        assert_eq!(Families::taken_by(&[]), Families { v4: true, v6: true });
    }

    #[test]
    fn is_default_gw_takes_the_default_routes_gateways_else_the_addresses() {
        assert_eq!(result_gateways(&dual_stack()), ips(&["10.88.0.1", "fd00::1"]));
        let addresses_only = CniResult::parse(
            &json!({"cniVersion": "1.0.0", "ips": [
                {"address": "fd01::5/64", "gateway": "fd01::1"},
                {"address": "10.10.2.5/24", "gateway": "10.10.2.1"},
                {"address": "10.10.3.5/24", "gateway": "10.10.3.1"}]}),
            "1.0.0",
        )
        .unwrap();
        assert_eq!(result_gateways(&addresses_only), ips(&["10.10.2.1", "fd01::1"]));
        let none =
            CniResult::parse(&json!({"cniVersion": "1.0.0", "ips": [{"address": "10.10.2.5/24"}]}), "1.0.0")
                .unwrap();
        assert!(result_gateways(&none).is_empty());
    }

    #[test]
    fn only_the_default_routes_of_the_families_taken_leave_the_result() {
        let r = dual_stack();
        assert_eq!(
            dsts(&without_taken_defaults(&r, Families::taken_by(&ips(&["10.10.2.1"])))),
            ["::/0", "10.96.0.0/12"]
        );
        assert_eq!(
            dsts(&without_taken_defaults(&r, Families::taken_by(&ips(&["fd01::1"])))),
            ["0.0.0.0/0", "10.96.0.0/12"]
        );
        assert_eq!(dsts(&without_taken_defaults(&r, Families::taken_by(&[]))), ["10.96.0.0/12"]);
        assert_eq!(without_taken_defaults(&r, Families::NONE), r);
    }
}
