//! The VF's own netdev: into the pod and back. The moves themselves are the generic ones of
//! [`crate::netlink`]; what is SR-IOV-specific is recognising the VF's netdev wherever a
//! crash may have left it, and putting back its name, MAC and MTU.

use super::error::SriovError;
use super::state::{NetdevState, VfRecord};
use crate::netlink::{move_into, move_out, LinkSnapshot, Mac, Netlink};

/// Moves the VF's netdev (named `original.name` in `host`) into `pod` as `ifname`, with `mac`
/// and `mtu` when given. Returns it as it is in the pod, still down.
pub async fn attach(
    host: &Netlink,
    pod: &Netlink,
    original: &NetdevState,
    ifname: &str,
    mac: Option<Mac>,
    mtu: Option<u32>,
) -> Result<LinkSnapshot, SriovError> {
    let link = host.require(&original.name).await?;
    let moved = move_into(host, &link, pod, ifname).await?;
    if let Some(mac) = mac {
        pod.set_mac(&moved, mac).await?;
    }
    if let Some(mtu) = mtu {
        pod.set_mtu(&moved, mtu).await?;
    }
    Ok(pod.link_by_index(moved.index).await?.unwrap_or(moved))
}

/// Puts the VF's netdev back in `host` as it was before the ADD: name, MAC, MTU, down.
///
/// Looks in the pod first (`pod` is `None` when its namespace is gone), then in `host`, where it
/// is when the ADD failed before moving it, when DEL runs twice, or when the kernel returned it
/// on the pod's namespace destruction (physical netdevs go back to the root namespace, under a
/// generated name when theirs is taken). Finding it nowhere is not an error: there is nothing
/// left to restore (a veth standing in for a VF dies with its namespace).
pub async fn detach(host: &Netlink, pod: Option<&Netlink>, record: &VfRecord) -> Result<(), SriovError> {
    let Some(original) = &record.netdev else { return Ok(()) };
    if let Some(pod) = pod {
        if let Some(link) = find(pod, record, true).await? {
            pod.set_down(&link).await?;
            restore_mac_mtu(pod, &link, original).await?;
            move_out(pod, &link, host, &original.name).await?;
            return Ok(());
        }
    }
    let Some(link) = find(host, record, false).await? else {
        tracing::warn!(
            vf = %record.device.pci,
            "the netdev of VF {} ({}) is neither in the pod nor in {}; nothing to restore",
            record.device.pci,
            original.name,
            host.place()
        );
        return Ok(());
    };
    let link = if link.name == original.name {
        link
    } else {
        host.set_down(&link).await?;
        host.rename(&link, &original.name).await?
    };
    restore_mac_mtu(host, &link, original).await
}

async fn restore_mac_mtu(
    ns: &Netlink,
    link: &LinkSnapshot,
    original: &NetdevState,
) -> Result<(), SriovError> {
    if link.mac.as_deref() != Some(original.mac.to_string().as_str()) {
        ns.set_mac(link, original.mac).await?;
    }
    if link.mtu != Some(original.mtu) {
        ns.set_mtu(link, original.mtu).await?;
    }
    Ok(())
}

/// The VF's netdev in `ns` (`in_pod`: the pod's namespace, else the node's), if it is there.
///
/// A netdev of a PCI function names the function as its parent device, which identifies a real
/// VF beyond doubt wherever it is and whatever its name. A netdev without a parent (a veth
/// standing in for a VF in tests) is recognised by the index it has where it is looked for (the
/// pod index is recorded right after the move) together with a name it can have there: its
/// original, the pod's, or a transit name of [`crate::netlink`] ("plx…"). An index alone
/// is not enough: each namespace numbers its links from 1, so a pod's own interface can have
/// the index the VF had on the node.
pub async fn find(ns: &Netlink, record: &VfRecord, in_pod: bool) -> Result<Option<LinkSnapshot>, SriovError> {
    let Some(original) = &record.netdev else { return Ok(None) };
    let links = ns.links().await?;
    if let Some(parent) = &original.parent {
        return Ok(links.into_iter().find(|link| parent_device(link) == Some(parent.as_str())));
    }
    let index = if in_pod { record.pod_ifindex } else { Some(original.ifindex) };
    let names = [original.name.as_str(), record.owner.ifname.as_str()];
    Ok(links.into_iter().find(|link| {
        Some(link.index) == index
            && parent_device(link).is_none()
            && (names.contains(&link.name.as_str()) || link.name.starts_with("plx"))
    }))
}

/// IFLA_PARENT_DEV_NAME: the bus address of the device behind a netdev (a PCI address here).
fn parent_device(link: &LinkSnapshot) -> Option<&str> {
    link.parent_device.as_deref()
}

/// What the record keeps of a netdev.
pub fn state_of(link: &LinkSnapshot) -> Result<NetdevState, SriovError> {
    let mac = link.mac.as_deref().unwrap_or_default();
    let mac: Mac = mac.parse().map_err(|source| SriovError::Mac {
        what: format!("reading the MAC address of {}", link.name),
        source,
    })?;
    Ok(NetdevState {
        name: link.name.clone(),
        mac,
        mtu: link.mtu.unwrap_or(1500),
        ifindex: link.index,
        parent: parent_device(link).map(str::to_owned),
    })
}
