//! Reading a namespace: its links, addresses and routes, each as a snapshot of one moment.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage, AddressScope};
use netlink_packet_route::link::{
    InfoData, InfoMacVlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, LinkXdp,
};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteType};
use nix::errno::Errno;
use rtnetlink::RouteMessageBuilder;

use super::error::errno_of;
use super::mac::hardware_address;
use super::route_table::table_of;
use super::{LinkError, Mac, MacVlanMode, Netlink};

/// What one link looks like at one moment.
#[derive(Debug, Clone)]
pub struct LinkSnapshot {
    pub index: u32,
    pub name: String,
    /// IFLA_INFO_KIND ("macvlan", "veth", "bridge", ...); None for a plain (hardware) device.
    pub kind: Option<String>,
    /// As a CNI result writes it; longer than 6 bytes for InfiniBand.
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// IFLA_LINK: the lower device's index, in the namespace of `parent_netnsid` when that is set.
    pub parent_index: Option<u32>,
    pub parent_netnsid: Option<i32>,
    /// IFLA_MASTER: the bridge or bond the link is enslaved to.
    pub master: Option<u32>,
    pub macvlan_mode: Option<MacVlanMode>,
    /// IFLA_PARENT_DEV_NAME: the bus name of the device behind the netdev (a PCI address for a
    /// NIC's function), which survives renames and moves between namespaces.
    pub parent_device: Option<String>,
    /// The XDP program attached to the link (IFLA_XDP), if any.
    pub xdp: Option<XdpProgram>,
    /// Everything the kernel said, for what the fields above leave out.
    pub(super) message: LinkMessage,
}

/// An XDP program attached to a link, as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpProgram {
    pub id: u32,
    /// Run in the stack (generic, `XDP_FLAGS_SKB_MODE`) rather than in the driver (native).
    pub generic: bool,
}

impl LinkSnapshot {
    /// A link of that index and name and nothing else known about it (down, no kind, no MAC),
    /// for callers that describe a link by hand, such as tests; set the fields they know.
    pub fn named(index: u32, name: &str) -> LinkSnapshot {
        let mut message = LinkMessage::default();
        message.header.index = index;
        LinkSnapshot {
            index,
            name: name.to_owned(),
            kind: None,
            mac: None,
            mtu: None,
            up: false,
            parent_index: None,
            parent_netnsid: None,
            master: None,
            macvlan_mode: None,
            parent_device: None,
            xdp: None,
            message,
        }
    }

    pub(super) fn from_message(message: LinkMessage) -> Option<LinkSnapshot> {
        let mut snapshot = LinkSnapshot::named(message.header.index, "");
        snapshot.up = message.header.flags.contains(LinkFlags::Up);
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::IfName(name) => snapshot.name = name.clone(),
                LinkAttribute::Address(bytes) => snapshot.mac = Some(hardware_address(bytes)),
                LinkAttribute::Mtu(mtu) => snapshot.mtu = Some(*mtu),
                LinkAttribute::Link(index) => snapshot.parent_index = Some(*index),
                LinkAttribute::LinkNetNsId(id) => snapshot.parent_netnsid = Some(*id),
                LinkAttribute::Controller(index) => snapshot.master = Some(*index),
                LinkAttribute::ParentDevName(name) => snapshot.parent_device = Some(name.clone()),
                LinkAttribute::Xdp(xdp) => snapshot.xdp = xdp_program(xdp),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(kind) => snapshot.kind = Some(kind.to_string()),
                            LinkInfo::Data(InfoData::MacVlan(data)) => {
                                snapshot.macvlan_mode = data.iter().find_map(|d| match d {
                                    InfoMacVlan::Mode(mode) => Some(MacVlanMode::from(*mode)),
                                    _ => None,
                                });
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        snapshot.message = message;
        (!snapshot.name.is_empty()).then_some(snapshot)
    }

    pub fn is_macvlan(&self) -> bool {
        self.kind.as_deref() == Some("macvlan")
    }

    /// The link's hardware address when it is an Ethernet one (6 bytes).
    pub fn ethernet_mac(&self) -> Option<Mac> {
        self.message.attributes.iter().find_map(|attribute| match attribute {
            LinkAttribute::Address(bytes) => Mac::from_hardware_address(bytes),
            _ => None,
        })
    }
}

/// The program of IFLA_XDP, by the id of the mode it runs in (IFLA_XDP_PROG_ID alone does not
/// say which).
fn xdp_program(xdp: &[LinkXdp]) -> Option<XdpProgram> {
    xdp.iter().find_map(|x| match x {
        LinkXdp::DrvProgId(id) if *id != 0 => Some(XdpProgram { id: *id, generic: false }),
        LinkXdp::SkbProgId(id) if *id != 0 => Some(XdpProgram { id: *id, generic: true }),
        _ => None,
    })
}

/// One address of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSnapshot {
    pub index: u32,
    /// With its prefix length, host bits kept.
    pub address: IpNet,
    flags: AddressFlags,
    scope: AddressScope,
}

impl AddressSnapshot {
    pub(super) fn from_message(message: &AddressMessage) -> Option<AddressSnapshot> {
        // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point
        // links, and the only one IPv6 sends.
        let local = message.attributes.iter().find_map(|a| match a {
            AddressAttribute::Local(ip) => Some(*ip),
            _ => None,
        });
        let address = local.or_else(|| {
            message.attributes.iter().find_map(|a| match a {
                AddressAttribute::Address(ip) => Some(*ip),
                _ => None,
            })
        })?;
        // IFA_FLAGS carries all 32 bits; the header only the low 8, and only it on old kernels.
        let flags = message
            .attributes
            .iter()
            .find_map(|a| match a {
                AddressAttribute::Flags(flags) => Some(*flags),
                _ => None,
            })
            .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(message.header.flags.bits())));
        Some(AddressSnapshot {
            index: message.header.index,
            address: IpNet::new(address, message.header.prefix_len).ok()?,
            flags,
            scope: message.header.scope,
        })
    }

    /// Still doing duplicate address detection: not usable as a source yet.
    pub fn is_tentative(&self) -> bool {
        self.flags.contains(AddressFlags::Tentative)
    }

    pub fn dad_failed(&self) -> bool {
        self.flags.contains(AddressFlags::Dadfailed)
    }

    /// Of global scope (`ip addr`'s "scope global"): not link-local, host or site.
    pub fn is_global(&self) -> bool {
        self.scope == AddressScope::Universe
    }
}

/// One route, reduced to what CHECK compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSnapshot {
    /// Prefix; 0.0.0.0/0 or ::/0 for a default route.
    pub dst: IpNet,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
    pub table: u32,
    pub(super) kind: RouteType,
}

impl RouteSnapshot {
    fn from_message(message: &RouteMessage) -> Option<RouteSnapshot> {
        let mut dst_addr = None;
        let mut gateway = None;
        let mut oif = None;
        for attribute in &message.attributes {
            match attribute {
                RouteAttribute::Destination(address) => dst_addr = route_address(address),
                RouteAttribute::Gateway(address) => gateway = route_address(address),
                RouteAttribute::Oif(index) => oif = Some(*index),
                _ => {}
            }
        }
        let prefix = message.header.destination_prefix_length;
        let dst_addr = dst_addr.unwrap_or(match message.header.address_family {
            netlink_packet_route::AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        });
        Some(RouteSnapshot {
            dst: IpNet::new(dst_addr, prefix).ok()?,
            gateway,
            oif,
            table: table_of(message),
            kind: message.header.kind,
        })
    }
}

fn route_address(address: &RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

impl Netlink {
    /// Every link of the namespace (for the node's: its interfaces with index, name, kind,
    /// parent, master and MAC).
    pub async fn links(&self) -> Result<Vec<LinkSnapshot>, LinkError> {
        let messages: Vec<LinkMessage> = self
            .handle()
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error("listing links", e))?;
        Ok(messages.into_iter().filter_map(LinkSnapshot::from_message).collect())
    }

    /// The link named `name`, if there is one.
    pub async fn link(&self, name: &str) -> Result<Option<LinkSnapshot>, LinkError> {
        let found = self.handle().link().get().match_name(name.to_owned()).execute().try_next().await;
        self.found(found, &format!("looking up link {name}"))
    }

    pub async fn link_by_index(&self, index: u32) -> Result<Option<LinkSnapshot>, LinkError> {
        let found = self.handle().link().get().match_index(index).execute().try_next().await;
        self.found(found, &format!("looking up link index {index}"))
    }

    fn found(
        &self,
        found: Result<Option<LinkMessage>, rtnetlink::Error>,
        action: &str,
    ) -> Result<Option<LinkSnapshot>, LinkError> {
        match found {
            Ok(message) => Ok(message.and_then(LinkSnapshot::from_message)),
            Err(e) if matches!(errno_of(&e), Some(Errno::ENODEV)) => Ok(None),
            Err(e) => Err(self.error(action, e)),
        }
    }

    /// The link named `name`; ENODEV "no such interface" when there is none.
    pub async fn require(&self, name: &str) -> Result<LinkSnapshot, LinkError> {
        self.link(name).await?.ok_or_else(|| {
            self.refuse(
                format!("looking up link {name}"),
                Errno::ENODEV,
                "there is no interface of that name",
            )
        })
    }

    /// The addresses of one link, IPv4 and IPv6, link-local ones included.
    pub async fn addresses(&self, link: &LinkSnapshot) -> Result<Vec<AddressSnapshot>, LinkError> {
        let messages: Vec<AddressMessage> = self
            .handle()
            .address()
            .get()
            .set_link_index_filter(link.index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error(format!("listing the addresses of {}", link.name), e))?;
        Ok(messages.iter().filter_map(AddressSnapshot::from_message).collect())
    }

    /// The addresses of every link of the namespace, in one dump.
    pub async fn all_addresses(&self) -> Result<Vec<AddressSnapshot>, LinkError> {
        let messages: Vec<AddressMessage> = self
            .handle()
            .address()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error("listing addresses", e))?;
        Ok(messages.iter().filter_map(AddressSnapshot::from_message).collect())
    }

    /// Every route of the namespace, both families, all tables.
    pub async fn routes(&self) -> Result<Vec<RouteSnapshot>, LinkError> {
        let mut routes = self.ipv4_routes().await?;
        routes.extend(self.route_dump(RouteMessageBuilder::<Ipv6Addr>::new().build()).await?);
        Ok(routes)
    }

    /// Every IPv4 route of the namespace, all tables: one dump, for callers that need no more.
    pub async fn ipv4_routes(&self) -> Result<Vec<RouteSnapshot>, LinkError> {
        self.route_dump(RouteMessageBuilder::<Ipv4Addr>::new().build()).await
    }

    async fn route_dump(&self, request: RouteMessage) -> Result<Vec<RouteSnapshot>, LinkError> {
        let messages: Vec<RouteMessage> = self
            .handle()
            .route()
            .get(request)
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error("listing routes", e))?;
        Ok(messages.iter().filter_map(RouteSnapshot::from_message).collect())
    }

    /// The interface of the first default route of the main table (IPv4 first): what the
    /// reference plugins take as "the host's interface" when a config names none.
    pub async fn default_route_interface(&self) -> Result<Option<String>, LinkError> {
        let main = u32::from(RouteHeader::RT_TABLE_MAIN);
        let Some(index) = self
            .routes()
            .await?
            .iter()
            .find(|r| r.dst.prefix_len() == 0 && r.table == main && r.oif.is_some())
            .and_then(|r| r.oif)
        else {
            return Ok(None);
        };
        Ok(self.link_by_index(index).await?.map(|l| l.name))
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_route::link::{InfoKind, XdpAttached};

    use super::*;

    #[test]
    fn snapshots_read_kind_mode_parent_and_mac() {
        let mut message = LinkMessage::default();
        message.header.index = 7;
        message.attributes = vec![
            LinkAttribute::IfName("net1".into()),
            LinkAttribute::Address(vec![0x0a, 0x58, 0, 0, 0, 1]),
            LinkAttribute::Mtu(1400),
            LinkAttribute::Link(3),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::MacVlan),
                LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                    netlink_packet_route::link::MacVlanMode::Bridge,
                )])),
            ]),
            LinkAttribute::LinkNetNsId(0),
            LinkAttribute::ParentDevName("0000:03:02.3".into()),
        ];
        let link = LinkSnapshot::from_message(message).unwrap();
        assert!(link.is_macvlan());
        assert_eq!(link.kind.as_deref(), Some("macvlan"));
        assert_eq!(link.macvlan_mode, Some(MacVlanMode::Bridge));
        assert_eq!((link.parent_index, link.parent_netnsid), (Some(3), Some(0)));
        assert_eq!(link.mac.as_deref(), Some("0a:58:00:00:00:01"));
        assert_eq!(link.ethernet_mac(), Some(Mac([0x0a, 0x58, 0, 0, 0, 1])));
        assert_eq!(link.parent_device.as_deref(), Some("0000:03:02.3"));
    }

    #[test]
    fn the_xdp_mode_is_the_kernels() {
        assert_eq!(xdp_program(&[]), None);
        assert_eq!(xdp_program(&[LinkXdp::Attached(XdpAttached::None)]), None);
        assert_eq!(
            xdp_program(&[LinkXdp::Attached(XdpAttached::Driver), LinkXdp::ProgId(7), LinkXdp::DrvProgId(7)]),
            Some(XdpProgram { id: 7, generic: false })
        );
        assert_eq!(
            xdp_program(&[LinkXdp::ProgId(9), LinkXdp::SkbProgId(9)]),
            Some(XdpProgram { id: 9, generic: true })
        );
    }
}
