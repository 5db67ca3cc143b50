//! Deleting a pod's links together.
//!
//! Every RTM_DELLINK waits out the kernel's RCU grace periods while it unregisters the device
//! (`synchronize_net` and friends: 15 to 20 ms each on this machine, whatever the link), so a
//! pod with four attachments paid that four times over on DEL. One RTM_DELLINK that names a
//! device group (ifindex 0, IFLA_GROUP) unregisters every link of the group in the socket's
//! namespace as one batch, behind one wait (`ip link delete group N`). The wait is not the
//! request's to sit out either: a deletion is done when the kernel announces the links gone
//! (`super::unregister`).
//!
//! A DEL that wants that runs its plugins inside [`deferring`]: a native plugin's
//! [`Netlink::delete_soon`] then records the link instead of deleting it, after the plugin made
//! every check it makes before a delete (it is the macvlan, the bridged veth, the attachment
//! made), and [`delete_deferred`] deletes what was recorded, per namespace: it puts the links in
//! [`DELETION_GROUP`], makes sure no other link of the namespace is in it, and deletes the group.
//! Outside [`deferring`] (a live detach, CHECK, tests of one plugin) `delete_soon` deletes at once.

use std::cell::RefCell;
use std::future::Future;
use std::path::PathBuf;

use futures::FutureExt;
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use nix::errno::Errno;
use rtnetlink::LinkUnspec;

use super::error::errno_of;
use super::{LinkError, LinkSnapshot, Netlink};

/// The device group the links of one batch are put in just before it is deleted ("plx", a
/// value no distribution's /etc/iproute2/group names). Links in it that the batch did not put
/// there make the batch fall back to deleting its links one by one.
pub const DELETION_GROUP: u32 = 0x0070_6c78;

tokio::task_local! {
    static PENDING: RefCell<Vec<PendingDeletion>>;
}

/// A link a plugin asked to delete, not deleted yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDeletion {
    /// The namespace the link is in (a pod's; links of the agent's own are never deferred).
    pub netns: PathBuf,
    pub index: u32,
    pub name: String,
}

/// Runs `work` with link deletions deferred; returns its output and the links it asked to
/// delete, in the order asked.
///
/// Built from combinators, not `async`: an async wrapper awaiting `work` keeps it twice in
/// its state, and the engine's teardown is large.
pub fn deferring<F: Future>(work: F) -> impl Future<Output = (F::Output, Vec<PendingDeletion>)> {
    PENDING
        .scope(RefCell::new(Vec::new()), work.map(|output| (output, PENDING.with(|pending| pending.take()))))
}

impl Netlink {
    /// Deletes `link` now, or, inside [`deferring`] and in a pod's namespace, records it for
    /// [`delete_deferred`]. A link already gone counts as deleted, as with [`Netlink::delete`].
    pub async fn delete_soon(&self, link: &LinkSnapshot) -> Result<(), LinkError> {
        if let Some(netns) = self.netns() {
            let pending =
                PendingDeletion { netns: netns.to_path_buf(), index: link.index, name: link.name.clone() };
            let recorded = PENDING.try_with(|p| p.borrow_mut().push(pending.clone())).is_ok();
            if recorded {
                return Ok(());
            }
        }
        self.delete(link).await
    }
}

/// Deletes the pending links, each namespace's in one batch where it can; returns each link
/// that could not be deleted with its error. A namespace that no longer exists took its links
/// with it.
pub async fn delete_deferred(pending: Vec<PendingDeletion>) -> Vec<(PendingDeletion, LinkError)> {
    let mut failures = Vec::new();
    for (netns, links) in by_namespace(pending) {
        if !super::netns_exists(&netns) {
            continue;
        }
        let ns = match Netlink::pod(&netns).await {
            Ok(ns) => ns,
            Err(e) => {
                // One error per link, each telling why: the namespace could not be entered.
                let why = e.to_string();
                failures.extend(links.into_iter().map(|l| {
                    let error = LinkError {
                        action: format!("deleting {}", l.name),
                        place: super::error::place_of(Some(&l.netns)),
                        errno: None,
                        cause: super::LinkCause::Refused(why.clone()),
                    };
                    (l, error)
                }));
                continue;
            }
        };
        failures.extend(delete_in(&ns, links).await);
    }
    failures
}

/// The pending deletions grouped by namespace, each group in the order asked.
fn by_namespace(pending: Vec<PendingDeletion>) -> Vec<(PathBuf, Vec<PendingDeletion>)> {
    let mut groups: Vec<(PathBuf, Vec<PendingDeletion>)> = Vec::new();
    for p in pending {
        match groups.iter_mut().find(|(netns, _)| *netns == p.netns) {
            Some((_, links)) => {
                if !links.iter().any(|l| l.index == p.index) {
                    links.push(p);
                }
            }
            None => groups.push((p.netns.clone(), vec![p])),
        }
    }
    groups
}

async fn delete_in(ns: &Netlink, links: Vec<PendingDeletion>) -> Vec<(PendingDeletion, LinkError)> {
    if links.len() > 1 {
        match delete_as_group(ns, &links).await {
            Ok(true) => return Vec::new(),
            Ok(false) => {}
            Err(e) => {
                tracing::debug!("deleting {} links together failed, one by one instead: {e}", links.len())
            }
        }
    }
    let mut failures = Vec::new();
    for link in links {
        // By index, as recorded: the name may have been reused since.
        if let Err(e) = ns.delete_index(link.index, &link.name).await {
            failures.push((link, e));
        }
    }
    failures
}

/// Puts `links` in [`DELETION_GROUP`] and deletes the group. Ok(false) when it did not try
/// because another link of the namespace is in the group.
async fn delete_as_group(ns: &Netlink, links: &[PendingDeletion]) -> Result<bool, LinkError> {
    for link in links {
        let message = LinkUnspec::new_with_index(link.index).link_group(DELETION_GROUP).build();
        match ns.handle().link().change(message).execute().await {
            Err(e) if matches!(errno_of(&e), Some(Errno::ENODEV)) => {}
            Err(e) => {
                return Err(ns.error(format!("putting {} in device group {DELETION_GROUP}", link.name), e))
            }
            Ok(()) => {}
        }
    }
    let foreign = ns
        .links()
        .await?
        .into_iter()
        .filter(|l| in_group(l, DELETION_GROUP) && !links.iter().any(|p| p.index == l.index))
        .map(|l| l.name)
        .collect::<Vec<_>>();
    if !foreign.is_empty() {
        tracing::warn!(
            "not deleting device group {DELETION_GROUP} in {}: {} in it too; deleting one by one",
            ns.place(),
            foreign.join(", ")
        );
        return Ok(false);
    }
    // ENODEV (every link of the batch went in the meantime) counts as deleted.
    let mut request = LinkMessage::default();
    request.attributes.push(LinkAttribute::Group(DELETION_GROUP));
    let indexes: Vec<u32> = links.iter().map(|l| l.index).collect();
    ns.unregister(&format!("deleting device group {DELETION_GROUP}"), request, &indexes).await?;
    Ok(true)
}

fn in_group(link: &LinkSnapshot, group: u32) -> bool {
    link.message.attributes.iter().any(|a| matches!(a, LinkAttribute::Group(g) if *g == group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(netns: &str, index: u32) -> PendingDeletion {
        PendingDeletion { netns: PathBuf::from(netns), index, name: format!("if{index}") }
    }

    #[test]
    fn pending_deletions_are_grouped_by_namespace_in_the_order_asked() {
        let groups =
            by_namespace(vec![pending("/a", 3), pending("/b", 1), pending("/a", 2), pending("/a", 3)]);
        assert_eq!(
            groups,
            vec![
                (PathBuf::from("/a"), vec![pending("/a", 3), pending("/a", 2)]),
                (PathBuf::from("/b"), vec![pending("/b", 1)]),
            ]
        );
    }

    #[tokio::test]
    async fn deferring_hands_back_what_was_recorded_inside_it_only() {
        assert!(PENDING.try_with(|_| ()).is_err(), "no scope outside deferring");
        let ((), recorded) = deferring(async {
            PENDING.with(|p| p.borrow_mut().push(pending("/a", 1)));
        })
        .await;
        assert_eq!(recorded, vec![pending("/a", 1)]);
    }
}
