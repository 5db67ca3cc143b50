//! Moving a link between namespaces as one step, through a temporary name.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;

use super::{LinkError, LinkSnapshot, Netlink};

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

/// The temporary name of the link an attachment (container ID, interface) creates inside the
/// pod's namespace before naming it: the same for every agent build and run, so a DEL after
/// a crash between the creation and the renaming finds the link under it. Inside one pod's
/// namespace the (container, interface) pairs differ, and so, but for a 32-bit hash's chance,
/// do their names. Shaped like [`temp_name`]'s ("plx" + 8 hex digits).
pub fn attachment_temp_name(container_id: &str, ifname: &str) -> String {
    // FNV-1a: fixed by its definition, unlike std's hashers.
    let mut hash: u32 = 0x811c_9dc5;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("plx{hash:08x}")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_temp_names_are_fixed_per_attachment() {
        let a = attachment_temp_name("c1", "net1");
        assert_eq!(a, attachment_temp_name("c1", "net1"));
        assert_eq!(attachment_temp_name("", ""), "plx050c5d1f", "FNV-1a of one NUL byte");
        assert!(a.len() == 11 && a.starts_with("plx"), "{a}");
        for other in [attachment_temp_name("c1", "net2"), attachment_temp_name("c1n", "et1")] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn temp_names_fit_the_kernel_and_differ() {
        let a = temp_name();
        let b = temp_name();
        assert!(a.len() <= 15 && a.starts_with("plx"), "{a}");
        assert_ne!(a, b);
    }
}
