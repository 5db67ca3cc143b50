use super::add::veth_name;
use super::check::same_mac;

#[test]
fn host_veth_names_look_like_the_references() {
    let (a, b) = (veth_name(), veth_name());
    assert!(a.starts_with("veth") && a.len() == 12 && a[4..].chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    assert_ne!(a, b);
}

#[test]
fn macs_compare_without_case() {
    assert!(same_mac(Some("0A:58:00:00:00:01"), "0a:58:00:00:00:01"));
    assert!(!same_mac(None, "0a:58:00:00:00:01"));
    assert!(!same_mac(Some("0a:58:00:00:00:02"), "0a:58:00:00:00:01"));
}
