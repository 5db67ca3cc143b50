use std::collections::BTreeMap;
use std::path::Path;

use super::NetnsError;
use crate::netlink::Netlink;

/// Every link of the namespace, by interface index, in one dump.
pub(super) async fn links_by_index(ns: &Netlink) -> Result<BTreeMap<u32, String>, NetnsError> {
    Ok(ns.links().await?.into_iter().map(|link| (link.index, link.name)).collect())
}

/// The index of `ifname` among `links`.
pub(super) fn index_of(links: &BTreeMap<u32, String>, netns: &Path, ifname: &str) -> Result<u32, NetnsError> {
    links
        .iter()
        .find_map(|(index, name)| (name == ifname).then_some(*index))
        .ok_or_else(|| NetnsError::LinkNotFound { netns: netns.to_path_buf(), ifname: ifname.to_owned() })
}
