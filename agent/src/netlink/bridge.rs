//! Bridges and their ports: creating a bridge, a veth pair whose host end is born a port of it
//! and whose other end is born in a pod's namespace, and a port's hairpin mode and VLANs.

use std::os::fd::AsRawFd;

use netlink_packet_route::link::{
    BridgeVlanInfoFlags, InfoBridge, InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo,
};
use nix::errno::Errno;
use rtnetlink::{LinkBridge, LinkBridgePort, LinkBridgeVlan, LinkUnspec, LinkVeth};

use super::{LinkError, LinkSnapshot, Mac, Netlink};

/// One VLAN of a bridge port, as `bridge vlan add` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortVlan {
    /// The port's native VLAN: untagged frames in and out belong to it (`pvid untagged`).
    Native(u16),
    /// Tagged VLANs `first..=last` (a trunk).
    Tagged { first: u16, last: u16 },
}

/// The veth pair of a pod's attachment to a bridge.
#[derive(Debug, Clone)]
pub struct VethPair<'a> {
    /// The end that stays here, a port of `bridge`, created up.
    pub host_name: &'a str,
    /// The end born in the pod's namespace, created down.
    pub pod_name: &'a str,
    /// 0: the kernel's default. Both ends get it.
    pub mtu: u32,
    /// The pod end's MAC; None: a random one.
    pub pod_mac: Option<Mac>,
    /// The bridge index, in this namespace.
    pub bridge: u32,
}

impl Netlink {
    /// Creates bridge `name` (MTU when not 0, VLAN filtering when asked). Ok(false) when a link
    /// of that name exists already: it is left as it is, whatever it is.
    pub async fn create_bridge(&self, name: &str, mtu: u32, vlan_filtering: bool) -> Result<bool, LinkError> {
        let mut builder = LinkBridge::new(name);
        if mtu > 0 {
            builder = builder.mtu(mtu);
        }
        if vlan_filtering {
            builder = builder.vlan_filtering(true);
        }
        match self.create(&format!("bridge {name}"), builder.build()).await {
            Ok(()) => Ok(true),
            Err(e) if e.is(Errno::EEXIST) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One RTM_NEWLINK: a veth pair whose host end is created here, up and already a port of
    /// the bridge, and whose other end is created down in `pod`'s namespace (IFLA_NET_NS_FD in
    /// the peer's attributes), so nothing has to move or be renamed afterwards.
    pub async fn create_veth_into(&self, pair: &VethPair<'_>, pod: &Netlink) -> Result<(), LinkError> {
        let what = format!("veth pair {} (here) and {} (in {})", pair.host_name, pair.pod_name, pod.place());
        let ns = pod.open_netns().map_err(|e| {
            self.refuse(
                format!("creating {what}"),
                e.raw_os_error().map_or(Errno::EIO, Errno::from_raw),
                format!("cannot open the pod's namespace: {e}"),
            )
        })?;
        let mut peer = LinkUnspec::new_with_name(pair.pod_name);
        if pair.mtu > 0 {
            peer = peer.mtu(pair.mtu);
        }
        if let Some(mac) = pair.pod_mac {
            peer = peer.address(mac.0.to_vec());
        }
        let mut peer = peer.build();
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        peer.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        let mut host = LinkVeth::new(pair.host_name, pair.pod_name).up().controller(pair.bridge);
        if pair.mtu > 0 {
            host = host.mtu(pair.mtu);
        }
        let mut message = host.build();
        for attribute in &mut message.attributes {
            if let LinkAttribute::LinkInfo(infos) = attribute {
                for info in infos.iter_mut() {
                    if let LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(p))) = info {
                        *p = peer.clone();
                    }
                }
            }
        }
        self.create(&what, message).await
    }

    pub async fn set_promiscuous(&self, link: &LinkSnapshot) -> Result<(), LinkError> {
        let message = LinkUnspec::new_with_index(link.index).promiscuous(true).build();
        self.handle()
            .link()
            .change(message)
            .execute()
            .await
            .map_err(|e| self.error(format!("setting {} promiscuous", link.name), e))
    }

    /// `ip link set PORT type bridge_slave hairpin on`.
    pub async fn set_hairpin(&self, port: &LinkSnapshot) -> Result<(), LinkError> {
        let message = LinkBridgePort::new(port.index).hairpin(true).build();
        self.handle()
            .link()
            .set_port(message)
            .execute()
            .await
            .map_err(|e| self.error(format!("setting hairpin mode on bridge port {}", port.name), e))
    }

    /// `bridge vlan del dev PORT vid VID`.
    pub async fn remove_port_vlan(&self, port: &LinkSnapshot, vid: u16) -> Result<(), LinkError> {
        let message = LinkBridgeVlan::new(port.index).vlan(vid, BridgeVlanInfoFlags::empty()).build();
        self.handle()
            .link()
            .del_with_message(message)
            .execute()
            .await
            .map_err(|e| self.error(format!("removing VLAN {vid} from bridge port {}", port.name), e))
    }

    /// `bridge vlan add dev PORT ...` for each of `vlans`, in order (a later entry for the same
    /// VLAN replaces the flags of an earlier one, as separate commands would), in one request.
    pub async fn add_port_vlans(&self, port: &LinkSnapshot, vlans: &[PortVlan]) -> Result<(), LinkError> {
        let mut builder = LinkBridgeVlan::new(port.index);
        for vlan in vlans {
            builder = match *vlan {
                PortVlan::Native(vid) => {
                    builder.vlan(vid, BridgeVlanInfoFlags::Pvid | BridgeVlanInfoFlags::Untagged)
                }
                PortVlan::Tagged { first, last } if first == last => {
                    builder.vlan(first, BridgeVlanInfoFlags::empty())
                }
                PortVlan::Tagged { first, last } => builder
                    .vlan_range_start(first, BridgeVlanInfoFlags::empty())
                    .vlan_range_end(last, BridgeVlanInfoFlags::empty()),
            };
        }
        self.handle()
            .link()
            .set(builder.build())
            .execute()
            .await
            .map_err(|e| self.error(format!("adding VLANs to bridge port {}", port.name), e))
    }
}

impl LinkSnapshot {
    pub fn is_bridge(&self) -> bool {
        self.kind == Some(InfoKind::Bridge)
    }

    pub fn is_veth(&self) -> bool {
        self.kind == Some(InfoKind::Veth)
    }

    /// IFF_PROMISC is set.
    pub fn promiscuous(&self) -> bool {
        self.message.header.flags.contains(LinkFlags::Promisc)
    }

    /// A bridge's default PVID (what a new port gets as its native VLAN); None when it has none
    /// or is no bridge.
    pub fn bridge_default_pvid(&self) -> Option<u16> {
        self.bridge_info().find_map(|info| match info {
            InfoBridge::VlanDefaultPvid(pvid) if *pvid > 0 => Some(*pvid),
            _ => None,
        })
    }

    /// Whether a bridge filters by VLAN.
    pub fn bridge_vlan_filtering(&self) -> bool {
        self.bridge_info().any(|info| matches!(info, InfoBridge::VlanFiltering(true)))
    }

    fn bridge_info(&self) -> impl Iterator<Item = &InfoBridge> {
        self.message
            .attributes
            .iter()
            .filter_map(|attribute| match attribute {
                LinkAttribute::LinkInfo(infos) => Some(infos),
                _ => None,
            })
            .flatten()
            .filter_map(|info| match info {
                LinkInfo::Data(InfoData::Bridge(data)) => Some(data),
                _ => None,
            })
            .flatten()
    }
}

/// `vids`, sorted and without duplicates, as the fewest ranges of consecutive VLANs.
pub fn tagged_ranges(vids: &[u16]) -> Vec<PortVlan> {
    let mut ranges: Vec<PortVlan> = Vec::new();
    for &vid in vids {
        match ranges.last_mut() {
            Some(PortVlan::Tagged { last, .. }) if last.checked_add(1) == Some(vid) => *last = vid,
            _ => ranges.push(PortVlan::Tagged { first: vid, last: vid }),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_vlans_become_ranges() {
        assert_eq!(tagged_ranges(&[]), vec![]);
        assert_eq!(tagged_ranges(&[5]), vec![PortVlan::Tagged { first: 5, last: 5 }]);
        assert_eq!(
            tagged_ranges(&[1, 2, 3, 7, 9, 10, 4094]),
            vec![
                PortVlan::Tagged { first: 1, last: 3 },
                PortVlan::Tagged { first: 7, last: 7 },
                PortVlan::Tagged { first: 9, last: 10 },
                PortVlan::Tagged { first: 4094, last: 4094 },
            ]
        );
    }
}
