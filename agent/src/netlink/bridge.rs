//! Bridges and their ports: creating a bridge, a veth pair whose host end is born a port of it
//! and whose other end is born in a pod's namespace, and a port's hairpin mode.

use std::os::fd::AsRawFd;

use netlink_packet_route::link::{InfoData, InfoVeth, LinkAttribute, LinkFlags, LinkInfo};
use nix::errno::Errno;
use rtnetlink::{LinkBridge, LinkBridgePort, LinkUnspec, LinkVeth};

use super::{LinkError, LinkSnapshot, Mac, Netlink};

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
    /// Creates bridge `name` (MTU when not 0). Ok(false) when a link of that name exists
    /// already: it is left as it is, whatever it is.
    pub async fn create_bridge(&self, name: &str, mtu: u32) -> Result<bool, LinkError> {
        let mut builder = LinkBridge::new(name);
        if mtu > 0 {
            builder = builder.mtu(mtu);
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
        // IFLA_TXQLEN 0 on both ends, as the reference's netlink library sends it (the link has
        // no queue either way, but `ip link` would show the difference).
        let mut peer = LinkUnspec::new_with_name(pair.pod_name).txqueuelen(0);
        if pair.mtu > 0 {
            peer = peer.mtu(pair.mtu);
        }
        if let Some(mac) = pair.pod_mac {
            peer = peer.address(mac.0.to_vec());
        }
        let mut peer = peer.build();
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        peer.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        let mut host =
            LinkVeth::new(pair.host_name, pair.pod_name).up().controller(pair.bridge).txqueuelen(0);
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
}

impl LinkSnapshot {
    pub fn is_bridge(&self) -> bool {
        self.kind.as_deref() == Some("bridge")
    }

    pub fn is_veth(&self) -> bool {
        self.kind.as_deref() == Some("veth")
    }

    /// IFF_PROMISC is set.
    pub fn promiscuous(&self) -> bool {
        self.message.header.flags.contains(LinkFlags::Promisc)
    }
}
