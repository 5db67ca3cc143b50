use std::collections::BTreeMap;
use std::path::Path;

use futures::TryStreamExt;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::Handle;

use super::{netlink_in, NetnsError};

/// Names of all links in that namespace.
pub async fn link_names(netns: &Path) -> Result<Vec<String>, NetnsError> {
    let handle = netlink_in(netns).await?;
    Ok(links_by_index(&handle, netns).await?.into_values().collect())
}

/// Every link of the namespace, by interface index, in one dump.
pub(super) async fn links_by_index(
    handle: &Handle,
    netns: &Path,
) -> Result<BTreeMap<u32, String>, NetnsError> {
    let links: Vec<LinkMessage> =
        handle.link().get().execute().try_collect().await.map_err(|source| NetnsError::ListLinks {
            netns: netns.to_path_buf(),
            source: Box::new(source),
        })?;
    Ok(links.iter().filter_map(|link| Some((link.header.index, link_name(link)?))).collect())
}

/// The index of `ifname` among `links`.
pub(super) fn index_of(links: &BTreeMap<u32, String>, netns: &Path, ifname: &str) -> Result<u32, NetnsError> {
    links
        .iter()
        .find_map(|(index, name)| (name == ifname).then_some(*index))
        .ok_or_else(|| NetnsError::LinkNotFound { netns: netns.to_path_buf(), ifname: ifname.to_owned() })
}

fn link_name(link: &LinkMessage) -> Option<String> {
    link.attributes.iter().find_map(|attr| match attr {
        LinkAttribute::IfName(name) => Some(name.clone()),
        _ => None,
    })
}
