use super::*;

fn settings(vlan: u16, trunk: &[u16]) -> Settings {
    Settings {
        mtu: 0,
        vlan,
        trunk: trunk.to_vec(),
        vlan_filtering: vlan != 0 || !trunk.is_empty(),
        mac: None,
        is_gateway: false,
        hairpin: false,
        preserve_default_vlan: false,
    }
}

#[test]
fn a_port_without_vlans_gets_none() {
    assert!(port_vlans(&settings(0, &[])).is_empty());
}

#[test]
fn the_native_vlan_comes_first_then_the_trunk_as_ranges() {
    assert_eq!(
        port_vlans(&settings(100, &[5, 6, 7, 200])),
        [
            PortVlan::Native(100),
            PortVlan::Tagged { first: 5, last: 7 },
            PortVlan::Tagged { first: 200, last: 200 }
        ]
    );
}

#[test]
fn a_trunk_without_a_vlan_gets_vlan_1_as_native_last() {
    assert_eq!(
        port_vlans(&settings(0, &[10, 11])),
        [PortVlan::Tagged { first: 10, last: 11 }, PortVlan::Native(1)]
    );
}

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
