//! Link operations over rtnetlink, in the agent's own network namespace or inside a pod's,
//! for the native plugins: macvlan creates its link with them, SR-IOV moves VFs with them.
//!
//! A [`Netlink`] is one rtnetlink socket bound to one namespace. The agent's is opened on the
//! calling thread (the agent's threads never change namespace); a pod's is opened on a
//! throwaway thread that entered the pod ([`crate::netns::netlink_in`]) and then used from
//! any task, because the kernel ties a netlink socket to the namespace it was created in.
//!
//! Every error names the action, the link and the namespace, so a failure reads as
//! "renaming plx1a2b3c4d to net1 in network namespace /run/netns/p: File exists (os error 17)".
//!
//! What is here:
//! - reading: [`Netlink::links`], [`Netlink::link`], [`Netlink::link_by_index`],
//!   [`Netlink::require`] (each a [`LinkSnapshot`]), [`Netlink::addresses`], [`Netlink::routes`],
//!   [`Netlink::default_route_interface`];
//! - changing one link: [`Netlink::create`], [`Netlink::create_in`], [`Netlink::rename`], [`Netlink::set_mac`],
//!   [`Netlink::set_mtu`], [`Netlink::set_up`], [`Netlink::set_down`], [`Netlink::delete`],
//!   [`Netlink::move_to`];
//! - whole steps: [`move_into`] / [`move_out`] (between namespaces, through a temporary name),
//!   [`configure_ip`] (addresses and routes of a CNI result, as libcni's `ConfigureIface`),
//!   [`verify_ips`] / [`verify_routes`] (CHECK, as libcni's `ValidateExpected*`).

use std::fmt;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, MacVlanMode,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteMetric, RouteProtocol, RouteScope,
    RouteType,
};
use nix::errno::Errno;
use rtnetlink::{Handle, LinkUnspec, RouteMessageBuilder};

use super::inside;
use crate::cni::result::{CniResult, IpConfig, Route};

/// How long [`configure_ip`] waits for IPv6 duplicate address detection, as libcni does.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// A link operation the kernel (or the namespace) refused.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{action} in {place}: {cause}")]
pub struct LinkError {
    /// What was being done, e.g. "renaming plx0a1b2c3d to net1".
    pub action: String,
    /// "the agent's network namespace" or "network namespace /run/netns/x".
    pub place: String,
    pub cause: String,
    /// The kernel's answer, when it was an errno; callers branch on it (EEXIST, ENODEV, ...).
    pub errno: Option<Errno>,
}

impl LinkError {
    pub fn is(&self, errno: Errno) -> bool {
        self.errno == Some(errno)
    }
}

/// A 6-byte Ethernet address.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Group (multicast/broadcast) addresses cannot be an interface's own; the kernel refuses them.
    pub fn is_unicast(&self) -> bool {
        self.0[0] & 1 == 0
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

impl FromStr for Mac {
    type Err = String;

    /// Accepts the 6-byte forms Go's `net.ParseMAC` accepts: `0a:58:0a:01:00:05`,
    /// `0a-58-0a-01-00-05` and `0a58.0a01.0005`.
    fn from_str(text: &str) -> Result<Mac, String> {
        let invalid =
            || format!("{text:?} is not a MAC address; write 6 bytes in hex like \"0a:58:0a:01:00:05\"");
        let hex: String = if text.contains('.') {
            let groups: Vec<&str> = text.split('.').collect();
            if groups.len() != 3 || groups.iter().any(|g| g.len() != 4) {
                return Err(invalid());
            }
            groups.concat()
        } else {
            let separator = if text.contains('-') { '-' } else { ':' };
            let parts: Vec<&str> = text.split(separator).collect();
            if parts.len() != 6 || parts.iter().any(|p| p.len() != 2) {
                return Err(invalid());
            }
            parts.concat()
        };
        let mut bytes = [0u8; 6];
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).ok_or_else(invalid)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
        }
        Ok(Mac(bytes))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hardware_address(&self.0))
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac({self})")
    }
}

/// A hardware address as Go's `net.HardwareAddr.String()` prints it (lowercase hex, colons), which
/// is what CNI results carry.
pub fn hardware_address(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// A fresh interface name for a link in transit ("plx" + 8 hex digits): unique enough that it
/// collides with nothing on either side of a move, and within the kernel's 15 characters.
pub fn temp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS per process and varies per instance: no extra crate.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    format!("plx{:08x}", hasher.finish() as u32)
}

/// What one link looks like at one moment.
#[derive(Debug, Clone)]
pub struct LinkSnapshot {
    pub index: u32,
    pub name: String,
    pub kind: Option<InfoKind>,
    /// As a CNI result writes it; longer than 6 bytes for InfiniBand.
    pub mac: Option<String>,
    pub mtu: Option<u32>,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// IFLA_LINK: the lower device's index, in the namespace of `parent_netnsid` when that is set.
    pub parent_index: Option<u32>,
    pub parent_netnsid: Option<i32>,
    pub macvlan_mode: Option<MacVlanMode>,
    /// Everything the kernel said, for what the fields above leave out.
    pub message: LinkMessage,
}

impl LinkSnapshot {
    pub fn from_message(message: LinkMessage) -> Option<LinkSnapshot> {
        let mut snapshot = LinkSnapshot {
            index: message.header.index,
            name: String::new(),
            kind: None,
            mac: None,
            mtu: None,
            up: message.header.flags.contains(LinkFlags::Up),
            parent_index: None,
            parent_netnsid: None,
            macvlan_mode: None,
            message: LinkMessage::default(),
        };
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::IfName(name) => snapshot.name = name.clone(),
                LinkAttribute::Address(bytes) => snapshot.mac = Some(hardware_address(bytes)),
                LinkAttribute::Mtu(mtu) => snapshot.mtu = Some(*mtu),
                LinkAttribute::Link(index) => snapshot.parent_index = Some(*index),
                LinkAttribute::LinkNetNsId(id) => snapshot.parent_netnsid = Some(*id),
                LinkAttribute::LinkInfo(infos) => {
                    for info in infos {
                        match info {
                            LinkInfo::Kind(kind) => snapshot.kind = Some(kind.clone()),
                            LinkInfo::Data(InfoData::MacVlan(data)) => {
                                snapshot.macvlan_mode = data.iter().find_map(|d| match d {
                                    InfoMacVlan::Mode(mode) => Some(*mode),
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
        self.kind == Some(InfoKind::MacVlan)
    }
}

/// One address of a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSnapshot {
    pub index: u32,
    /// With its prefix length, host bits kept.
    pub address: IpNet,
    pub flags: AddressFlags,
}

impl AddressSnapshot {
    fn from_message(message: &AddressMessage) -> Option<AddressSnapshot> {
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
        })
    }

    /// Still doing duplicate address detection: not usable as a source yet.
    pub fn is_tentative(&self) -> bool {
        self.flags.contains(AddressFlags::Tentative)
    }

    pub fn dad_failed(&self) -> bool {
        self.flags.contains(AddressFlags::Dadfailed)
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
    pub kind: RouteType,
}

impl RouteSnapshot {
    fn from_message(message: &RouteMessage) -> Option<RouteSnapshot> {
        let mut dst_addr = None;
        let mut gateway = None;
        let mut oif = None;
        let mut table = u32::from(message.header.table);
        for attribute in &message.attributes {
            match attribute {
                RouteAttribute::Destination(address) => dst_addr = route_address(address),
                RouteAttribute::Gateway(address) => gateway = route_address(address),
                RouteAttribute::Oif(index) => oif = Some(*index),
                // Tables above 255 only fit here; the header then holds a placeholder.
                RouteAttribute::Table(t) => table = *t,
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
            table,
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

/// An rtnetlink socket in one network namespace.
pub struct Netlink {
    handle: Handle,
    /// None: the agent's own namespace.
    netns: Option<PathBuf>,
}

impl fmt::Debug for Netlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.place())
    }
}

impl Netlink {
    /// A socket in the agent's own namespace (the node's). Must be called inside the tokio
    /// runtime, which then drives the socket until the `Netlink` is dropped.
    pub fn agent() -> Result<Netlink, LinkError> {
        let (connection, handle, _unsolicited) = rtnetlink::new_connection().map_err(|e| LinkError {
            action: "opening a netlink socket".into(),
            place: AGENT_PLACE.into(),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: e.to_string(),
        })?;
        tokio::spawn(connection);
        Ok(Netlink { handle, netns: None })
    }

    /// A socket inside the network namespace at `netns` (a pod's).
    pub async fn pod(netns: &Path) -> Result<Netlink, LinkError> {
        let handle = crate::netns::netlink_in(netns).await.map_err(|e| LinkError {
            action: "opening a netlink socket".into(),
            place: place_of(Some(netns)),
            cause: e.to_string(),
            errno: None,
        })?;
        Ok(Netlink { handle, netns: Some(netns.to_path_buf()) })
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The namespace's path; None for the agent's own.
    pub fn netns(&self) -> Option<&Path> {
        self.netns.as_deref()
    }

    /// Where this socket works, for messages.
    pub fn place(&self) -> String {
        place_of(self.netns())
    }

    fn error(&self, action: impl Into<String>, err: rtnetlink::Error) -> LinkError {
        LinkError { action: action.into(), place: self.place(), cause: describe(&err), errno: errno_of(&err) }
    }

    /// An error of our own making (nothing the kernel said), with the same context.
    pub fn refuse(&self, action: impl Into<String>, errno: Errno, cause: impl Into<String>) -> LinkError {
        LinkError { action: action.into(), place: self.place(), cause: cause.into(), errno: Some(errno) }
    }

    /// Every link of the namespace.
    pub async fn links(&self) -> Result<Vec<LinkSnapshot>, LinkError> {
        let messages: Vec<LinkMessage> = self
            .handle
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
        let found = self.handle.link().get().match_name(name).execute().try_next().await;
        self.found(found, &format!("looking up link {name}"))
    }

    pub async fn link_by_index(&self, index: u32) -> Result<Option<LinkSnapshot>, LinkError> {
        let found = self.handle.link().get().match_index(index).execute().try_next().await;
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

    /// RTM_NEWLINK with create-exclusive: a new link as `message` describes it (see the
    /// builders of `rtnetlink`, e.g. `LinkMacVlan`). `what` names it in errors.
    pub async fn create(&self, what: &str, message: LinkMessage) -> Result<(), LinkError> {
        self.handle.link().add(message).execute().await.map_err(|e| self.error(format!("creating {what}"), e))
    }

    /// Like [`Netlink::create`], but the link is born in `target`'s namespace (IFLA_NET_NS_FD):
    /// links it refers to (IFLA_LINK: a macvlan's master) are looked up here, and it never
    /// exists here, so its name only has to be free there.
    pub async fn create_in(
        &self,
        what: &str,
        message: LinkMessage,
        target: &Netlink,
    ) -> Result<(), LinkError> {
        let ns = target.open_netns().map_err(|e| LinkError {
            action: format!("creating {what} in {}", target.place()),
            place: self.place(),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: format!("cannot open the target namespace: {e}"),
        })?;
        let mut message = message;
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        message.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        self.create(what, message).await
    }

    async fn change(&self, action: String, message: LinkMessage) -> Result<(), LinkError> {
        self.handle.link().change(message).execute().await.map_err(|e| self.error(action, e))
    }

    /// Renames the link; the kernel wants it down (EBUSY otherwise). Returns it as renamed.
    pub async fn rename(&self, link: &LinkSnapshot, new_name: &str) -> Result<LinkSnapshot, LinkError> {
        let action = format!("renaming {} to {new_name}", link.name);
        self.change(action.clone(), LinkUnspec::new_with_index(link.index).name(new_name).build()).await?;
        self.link_by_index(link.index)
            .await?
            .ok_or_else(|| self.refuse(action, Errno::ENODEV, "the link vanished right after"))
    }

    pub async fn set_mac(&self, link: &LinkSnapshot, mac: Mac) -> Result<(), LinkError> {
        let message = LinkUnspec::new_with_index(link.index).address(mac.0.to_vec()).build();
        self.change(format!("setting the MAC address of {} to {mac}", link.name), message).await
    }

    pub async fn set_mtu(&self, link: &LinkSnapshot, mtu: u32) -> Result<(), LinkError> {
        let message = LinkUnspec::new_with_index(link.index).mtu(mtu).build();
        self.change(format!("setting the MTU of {} to {mtu}", link.name), message).await
    }

    pub async fn set_up(&self, link: &LinkSnapshot) -> Result<(), LinkError> {
        let message = LinkUnspec::new_with_index(link.index).up().build();
        self.change(format!("setting {} up", link.name), message).await
    }

    pub async fn set_down(&self, link: &LinkSnapshot) -> Result<(), LinkError> {
        let message = LinkUnspec::new_with_index(link.index).down().build();
        self.change(format!("setting {} down", link.name), message).await
    }

    /// Deletes the link; one that is already gone counts as deleted.
    pub async fn delete(&self, link: &LinkSnapshot) -> Result<(), LinkError> {
        match self.handle.link().del(link.index).execute().await {
            Err(e) if !matches!(errno_of(&e), Some(Errno::ENODEV)) => {
                Err(self.error(format!("deleting {}", link.name), e))
            }
            _ => Ok(()),
        }
    }

    /// Moves the link, under its current name, into the namespace of `target` (IFLA_NET_NS_FD).
    /// The name must be free there (EEXIST otherwise): [`move_into`] and [`move_out`] take care
    /// of that. The link usually keeps its index; look it up by name on the other side.
    pub async fn move_to(&self, link: &LinkSnapshot, target: &Netlink) -> Result<(), LinkError> {
        let action = format!("moving {} to {}", link.name, target.place());
        let ns = target.open_netns().map_err(|e| LinkError {
            action: action.clone(),
            place: self.place(),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: format!("cannot open the target namespace: {e}"),
        })?;
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        let message = LinkUnspec::new_with_index(link.index).setns_by_fd(ns.as_raw_fd()).build();
        self.change(action, message).await
    }

    /// A descriptor of this namespace, to hand to the kernel with IFLA_NET_NS_FD.
    pub fn open_netns(&self) -> std::io::Result<File> {
        // /proc/self is the thread group leader, which never changes namespace in the agent.
        File::open(self.netns().unwrap_or(Path::new("/proc/self/ns/net")))
    }

    /// The addresses of one link, IPv4 and IPv6, link-local ones included.
    pub async fn addresses(&self, link: &LinkSnapshot) -> Result<Vec<AddressSnapshot>, LinkError> {
        let messages: Vec<AddressMessage> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(link.index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error(format!("listing the addresses of {}", link.name), e))?;
        Ok(messages.iter().filter_map(AddressSnapshot::from_message).collect())
    }

    /// Adds `address` (with its prefix length) to the link. IPv4 addresses get the broadcast
    /// address of their subnet, as `ip addr add ... brd +` and libcni's netlink do.
    pub async fn add_address(&self, link: &LinkSnapshot, address: IpNet) -> Result<(), LinkError> {
        self.handle
            .address()
            .add(link.index, address.addr(), address.prefix_len())
            .execute()
            .await
            .map_err(|e| self.error(format!("adding address {address} to {}", link.name), e))
    }

    /// Every route of the namespace, both families, all tables.
    pub async fn routes(&self) -> Result<Vec<RouteSnapshot>, LinkError> {
        let mut routes = Vec::new();
        for request in
            [RouteMessageBuilder::<Ipv4Addr>::new().build(), RouteMessageBuilder::<Ipv6Addr>::new().build()]
        {
            let messages: Vec<RouteMessage> = self
                .handle
                .route()
                .get(request)
                .execute()
                .try_collect()
                .await
                .map_err(|e| self.error("listing routes", e))?;
            routes.extend(messages.iter().filter_map(RouteSnapshot::from_message));
        }
        Ok(routes)
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
        self.handle.route().add(message).execute().await.map_err(|e| self.error(action, e))
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

const AGENT_PLACE: &str = "the agent's network namespace";

fn place_of(netns: Option<&Path>) -> String {
    match netns {
        Some(path) => format!("network namespace {}", path.display()),
        None => AGENT_PLACE.to_owned(),
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
        if let Ok(small) = u8::try_from(table) {
            message.header.table = small;
        } else {
            message.header.table = RouteHeader::RT_TABLE_UNSPEC;
            message.attributes.push(RouteAttribute::Table(table));
        }
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

/// The kernel's errno, when the error is one.
pub fn errno_of(err: &rtnetlink::Error) -> Option<Errno> {
    match err {
        rtnetlink::Error::NetlinkError(message) => message.code.map(|code| Errno::from_raw(-code.get())),
        _ => None,
    }
}

/// "File exists (os error 17)" rather than rtnetlink's dump of the whole message.
fn describe(err: &rtnetlink::Error) -> String {
    match errno_of(err) {
        Some(errno) => std::io::Error::from_raw_os_error(errno as i32).to_string(),
        None => err.to_string(),
    }
}

/// Moves `link` from `from`'s namespace into `to`'s and names it `final_name` there.
///
/// The link travels under a temporary name, so neither its old name nor the final one can
/// collide on the way, and is renamed only once inside. It is set down first (the kernel
/// renames only links that are down); bringing it up is the caller's, after configuring it.
/// When the final rename fails (the name is taken: EEXIST) the link is moved back under its
/// old name, best effort, and the error returned.
pub async fn move_into(
    from: &Netlink,
    link: &LinkSnapshot,
    to: &Netlink,
    final_name: &str,
) -> Result<LinkSnapshot, LinkError> {
    if to.link(final_name).await?.is_some() {
        return Err(to.refuse(
            format!("moving {} in as {final_name}", link.name),
            Errno::EEXIST,
            format!("an interface named {final_name} is already there"),
        ));
    }
    let travelling = travel(from, link, to).await?;
    match to.rename(&travelling, final_name).await {
        Ok(arrived) => Ok(arrived),
        Err(e) => {
            if let Err(back) = travel_back(to, &travelling, from, &link.name).await {
                tracing::warn!("returning {} after a failed move: {back}", link.name);
            }
            Err(e)
        }
    }
}

/// Moves `link` out of `from`'s namespace (a pod's) into `to`'s and names it `final_name`
/// there (its name before it went in). If that name is taken by then, the link stays under its
/// temporary name, which the error gives, so it is never lost.
pub async fn move_out(
    from: &Netlink,
    link: &LinkSnapshot,
    to: &Netlink,
    final_name: &str,
) -> Result<LinkSnapshot, LinkError> {
    let travelling = travel(from, link, to).await?;
    to.rename(&travelling, final_name).await
}

/// Down, temporary name, other namespace; returns the link as it is found there.
async fn travel(from: &Netlink, link: &LinkSnapshot, to: &Netlink) -> Result<LinkSnapshot, LinkError> {
    from.set_down(link).await?;
    let temporary = from.rename(link, &temp_name()).await?;
    if let Err(e) = from.move_to(&temporary, to).await {
        if let Err(back) = from.rename(&temporary, &link.name).await {
            tracing::warn!("restoring the name of {} after a failed move: {back}", link.name);
        }
        return Err(e);
    }
    to.link(&temporary.name).await?.ok_or_else(|| {
        to.refuse(
            format!("finding {} after moving it in", temporary.name),
            Errno::ENODEV,
            "the link is not there",
        )
    })
}

async fn travel_back(
    from: &Netlink,
    link: &LinkSnapshot,
    to: &Netlink,
    name: &str,
) -> Result<LinkSnapshot, LinkError> {
    let back = travel(from, link, to).await?;
    to.rename(&back, name).await
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
    let outcome = inside::run(netns, move || {
        for interface in ["lo", ifname.as_str()] {
            let key = ["net", "ipv6", "conf", interface, "disable_ipv6"];
            // Reading fails when the kernel has no IPv6 at all; adding the address will then
            // say so more clearly than this.
            if inside::read_sysctl(&key).is_ok_and(|v| v != "0") {
                inside::write_sysctl(&key, "0").map_err(|e| format!("{}: {e}", key.join("/")))?;
            }
        }
        Ok::<(), String>(())
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(cause)) | Err(cause) => Err(ns.refuse(action, Errno::EIO, cause)),
    }
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

#[cfg(test)]
mod kernel_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_in_every_six_byte_form_and_print_like_go() {
        for text in ["0a:58:0A:01:00:05", "0a-58-0a-01-00-05", "0a58.0a01.0005"] {
            let mac: Mac = text.parse().unwrap();
            assert_eq!(mac, Mac([0x0a, 0x58, 0x0a, 0x01, 0x00, 0x05]), "{text}");
            assert_eq!(mac.to_string(), "0a:58:0a:01:00:05");
        }
    }

    #[test]
    fn malformed_macs_are_refused_with_an_example() {
        for text in [
            "",
            "0a:58:0a:01:00",
            "0a:58:0a:01:00:05:06",
            "0a:58:0a:01:00:zz",
            "0a:58-0a:01:00:05",
            "a:58:0a:01:00:05",
        ] {
            let err = text.parse::<Mac>().unwrap_err();
            assert!(err.contains("0a:58:0a:01:00:05"), "{text}: {err}");
        }
    }

    #[test]
    fn unicast_and_zero_macs() {
        assert!(Mac([0x0a, 0, 0, 0, 0, 1]).is_unicast());
        assert!(!Mac([0x01, 0, 0x5e, 0, 0, 1]).is_unicast());
        assert!(Mac([0; 6]).is_zero());
    }

    #[test]
    fn temp_names_fit_the_kernel_and_differ() {
        let a = temp_name();
        let b = temp_name();
        assert!(a.len() <= 15 && a.starts_with("plx"), "{a}");
        assert_ne!(a, b);
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

    #[test]
    fn hardware_addresses_print_lowercase_with_colons() {
        assert_eq!(hardware_address(&[0xAA, 0x0b, 0, 1, 2, 0xff]), "aa:0b:00:01:02:ff");
    }
}
