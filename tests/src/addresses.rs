//! Reading a pod's addresses in tests.

use plexus_testkit::Netns;

/// The address part of "10.0.0.2/24" (status entries and `ip addr` may differ in the prefix).
pub fn bare(addr: &str) -> &str {
    addr.split('/').next().unwrap_or(addr)
}

/// The only address of an interface of a pod.
#[track_caller]
pub fn only_address(pod: &Netns, ifname: &str) -> String {
    let addrs = pod.addresses(ifname);
    assert_eq!(addrs.len(), 1, "{ifname} in {}: {addrs:?}", pod.name);
    addrs[0].clone()
}

/// `addr` (with its prefix length) is in the /24 whose text starts with `prefix` ("10.1.2.").
#[track_caller]
pub fn assert_in_subnet(addr: &str, prefix: &str) {
    assert!(addr.starts_with(prefix) && addr.ends_with("/24"), "{addr} is not in {prefix}0/24");
}
