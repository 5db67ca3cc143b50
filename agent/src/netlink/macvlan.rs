//! Macvlans: their mode, and creating one on a master.

use netlink_packet_route::link::MacVlanMode as KernelMode;
use rtnetlink::LinkMacVlan;

use super::{LinkError, Mac, Netlink};

/// How a macvlan shares its master (IFLA_MACVLAN_MODE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacVlanMode {
    Private,
    Vepa,
    Bridge,
    Passthrough,
    Source,
    /// A mode this agent has no name for, by its number.
    Other(u32),
}

impl From<KernelMode> for MacVlanMode {
    fn from(mode: KernelMode) -> MacVlanMode {
        match mode {
            KernelMode::Private => MacVlanMode::Private,
            KernelMode::Vepa => MacVlanMode::Vepa,
            KernelMode::Bridge => MacVlanMode::Bridge,
            KernelMode::Passthrough => MacVlanMode::Passthrough,
            KernelMode::Source => MacVlanMode::Source,
            KernelMode::Other(n) => MacVlanMode::Other(n),
            // A mode the library learns later: by its number until this enum names it too.
            other => MacVlanMode::Other(u32::from(other)),
        }
    }
}

impl From<MacVlanMode> for KernelMode {
    fn from(mode: MacVlanMode) -> KernelMode {
        match mode {
            MacVlanMode::Private => KernelMode::Private,
            MacVlanMode::Vepa => KernelMode::Vepa,
            MacVlanMode::Bridge => KernelMode::Bridge,
            MacVlanMode::Passthrough => KernelMode::Passthrough,
            MacVlanMode::Source => KernelMode::Source,
            MacVlanMode::Other(n) => KernelMode::Other(n),
        }
    }
}

/// A macvlan to create.
#[derive(Debug, Clone, Copy)]
pub struct NewMacVlan<'a> {
    pub name: &'a str,
    /// The master's index, in the namespace of the socket that creates the link.
    pub master: u32,
    pub mode: MacVlanMode,
    /// 0: the kernel's default (the master's).
    pub mtu: u32,
    pub mac: Option<Mac>,
}

impl Netlink {
    /// Creates the macvlan `link` on its master, which is in this socket's namespace; with
    /// `born_in`, the link is born in that namespace (IFLA_NET_NS_FD) and never exists here.
    /// `what` names it in errors.
    pub async fn create_macvlan(
        &self,
        what: &str,
        link: &NewMacVlan<'_>,
        born_in: Option<&Netlink>,
    ) -> Result<(), LinkError> {
        // IFLA_TXQLEN 0, because the reference's netlink library always sends the LinkAttrs field
        // and the plugin leaves it 0; without it the kernel copies the master's (1000). The link
        // has no queue either way (noqueue), but `ip link` would show the difference.
        let mut builder = LinkMacVlan::new(link.name, link.master, link.mode.into()).txqueuelen(0);
        if link.mtu > 0 {
            builder = builder.mtu(link.mtu);
        }
        if let Some(mac) = link.mac {
            builder = builder.address(mac.0.to_vec());
        }
        match born_in {
            Some(target) => self.create_in(what, builder.build(), target).await,
            None => self.create(what, builder.build()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_the_kernels() {
        for mode in [
            MacVlanMode::Private,
            MacVlanMode::Vepa,
            MacVlanMode::Bridge,
            MacVlanMode::Passthrough,
            MacVlanMode::Source,
            MacVlanMode::Other(64),
        ] {
            assert_eq!(MacVlanMode::from(KernelMode::from(mode)), mode);
        }
        assert_eq!(KernelMode::from(MacVlanMode::Passthrough), KernelMode::from(8u32));
    }
}
