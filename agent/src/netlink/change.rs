//! Changing one link: create, rename, MAC, MTU, up/down, delete, and moving it to another
//! namespace under its current name.

use std::os::fd::AsRawFd;

use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use nix::errno::Errno;
use rtnetlink::LinkUnspec;

use super::{LinkCause, LinkError, LinkSnapshot, Mac, Netlink};

impl Netlink {
    /// RTM_NEWLINK with create-exclusive: a new link as `message` describes it (see the
    /// builders of `rtnetlink`, e.g. `LinkMacVlan`). `what` names it in errors.
    pub(super) async fn create(&self, what: &str, message: LinkMessage) -> Result<(), LinkError> {
        self.handle()
            .link()
            .add(message)
            .execute()
            .await
            .map_err(|e| self.error(format!("creating {what}"), e))
    }

    /// Like [`Netlink::create`], but the link is born in `target`'s namespace (IFLA_NET_NS_FD):
    /// links it refers to (IFLA_LINK: a macvlan's master) are looked up here, and it never
    /// exists here, so its name only has to be free there.
    pub(super) async fn create_in(
        &self,
        what: &str,
        message: LinkMessage,
        target: &Netlink,
    ) -> Result<(), LinkError> {
        let ns = self.open_target(format!("creating {what} in {}", target.place()), target)?;
        let mut message = message;
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        message.attributes.push(LinkAttribute::NetNsFd(ns.as_raw_fd()));
        self.create(what, message).await
    }

    fn open_target(&self, action: String, target: &Netlink) -> Result<std::fs::File, LinkError> {
        target.open_netns().map_err(|e| LinkError {
            action,
            place: self.place(),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: LinkCause::TargetNamespace(e),
        })
    }

    async fn change(&self, action: String, message: LinkMessage) -> Result<(), LinkError> {
        self.handle().link().change(message).execute().await.map_err(|e| self.error(action, e))
    }

    /// Renames the link; the kernel wants it down (EBUSY otherwise). Returns it as renamed.
    pub async fn rename(&self, link: &LinkSnapshot, new_name: &str) -> Result<LinkSnapshot, LinkError> {
        let action = format!("renaming {} to {new_name}", link.name);
        self.change(action, LinkUnspec::new_with_index(link.index).name(new_name.to_owned()).build()).await?;
        // A rename changes the name and nothing else: no second round trip to read it back.
        Ok(renamed(link, new_name))
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
        self.delete_index(link.index, &link.name).await
    }

    /// Deletes the link of that index (`name` is for the error); gone already counts as deleted.
    /// Done when the kernel announces it gone, before its wait for the device's last
    /// references ([`super::unregister`]).
    pub async fn delete_index(&self, index: u32, name: &str) -> Result<(), LinkError> {
        let mut request = LinkMessage::default();
        request.header.index = index;
        self.unregister(&format!("deleting {name}"), request, &[index]).await
    }

    /// Moves the link, under its current name, into the namespace of `target` (IFLA_NET_NS_FD).
    /// The name must be free there (EEXIST otherwise): [`super::move_into`] and
    /// [`super::move_out`] take care of that. The link usually keeps its index; look it up by
    /// name on the other side.
    pub async fn move_to(&self, link: &LinkSnapshot, target: &Netlink) -> Result<(), LinkError> {
        let action = format!("moving {} to {}", link.name, target.place());
        let ns = self.open_target(action.clone(), target)?;
        // The kernel reads the descriptor while handling the request; `ns` outlives it.
        let message = LinkUnspec::new_with_index(link.index).setns_by_fd(ns.as_raw_fd()).build();
        self.change(action, message).await
    }
}

/// `link` as the kernel has it after renaming it to `name`.
fn renamed(link: &LinkSnapshot, name: &str) -> LinkSnapshot {
    let mut renamed = link.clone();
    renamed.name = name.to_owned();
    for attribute in &mut renamed.message.attributes {
        if let LinkAttribute::IfName(old) = attribute {
            *old = name.to_owned();
        }
    }
    renamed
}
