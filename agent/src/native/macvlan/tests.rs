//! The pure parts of the plugin: results, what CHECK compares, error hints. The netlink parts
//! are covered against the kernel and the reference binary in tests/tests/system/native_macvlan.rs.

use serde_json::json;

use super::*;
use crate::cni::result::IpConfig;
use crate::cni::ErrorCode;
use crate::delegate::native::CniFailure;
use crate::netlink::{LinkCause, Mac, MacVlanMode};

/// A link as the kernel reports it (the reading itself is the netlink layer's, tested there).
fn snapshot(kind: &str, mode: Option<MacVlanMode>, parent: u32, netnsid: Option<i32>) -> LinkSnapshot {
    let mut link = LinkSnapshot::named(7, "net1");
    link.kind = Some(kind.to_owned());
    link.macvlan_mode = mode;
    link.mac = Some("0a:58:00:00:00:01".into());
    link.mtu = Some(1400);
    link.parent_index = Some(parent);
    link.parent_netnsid = netnsid;
    link
}

fn master() -> LinkSnapshot {
    let mut master = LinkSnapshot::named(3, "up0");
    master.mtu = Some(1500);
    master
}

fn settings(mode: MacVlanMode, mtu: u32) -> Settings {
    Settings { mode, mtu, mac: None }
}

fn macvlan_on_node() -> LinkSnapshot {
    snapshot("macvlan", Some(MacVlanMode::Bridge), 3, Some(0))
}

#[test]
fn the_result_carries_the_interface_in_its_sandbox_and_the_configs_dns() {
    let conf =
        MacvlanConf::parse(&json!({"cniVersion": "1.0.0", "dns": {"nameservers": ["10.1.0.1"]}})).unwrap();
    let mut result = base_result(&macvlan_on_node(), Path::new("/run/netns/p"), &conf);
    let ipam = CniResult {
        ips: vec![IpConfig { address: "10.1.0.5/24".parse().unwrap(), gateway: None, interface: Some(3) }],
        routes: vec![],
        dns: crate::cni::result::Dns { nameservers: vec!["ignored".into()], ..Default::default() },
        ..Default::default()
    };
    take_ipam(&mut result, ipam).unwrap();
    assert_eq!(
        result.to_version("1.0.0").unwrap(),
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "0a:58:00:00:00:01", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.1.0.5/24", "interface": 0}],
            "dns": {"nameservers": ["10.1.0.1"]}
        })
    );
    assert_eq!(result.to_version("0.3.1").unwrap()["ips"][0]["version"], "4");
}

#[test]
fn ipam_without_addresses_fails_the_add() {
    let conf = MacvlanConf::default();
    let mut result = base_result(&macvlan_on_node(), Path::new("/run/netns/p"), &conf);
    let Err(MacvlanError::Cni(CniFailure { code, msg })) = take_ipam(&mut result, CniResult::default())
    else {
        panic!("an empty IPAM result must fail");
    };
    assert_eq!(code, ErrorCode::Internal);
    assert!(msg.contains("IPAM plugin returned missing IP config"), "{msg}");
}

fn expect<'a>(settings: &'a Settings, master: &'a LinkSnapshot) -> Expected<'a> {
    Expected { settings, master, in_container: false, mac: None }
}

#[test]
fn check_accepts_the_link_as_created() {
    let (s, m) = (settings(MacVlanMode::Bridge, 1400), master());
    let mut wanted = expect(&s, &m);
    wanted.mac = Some("0A:58:00:00:00:01".into());
    verify_link(&macvlan_on_node(), &wanted).unwrap();
}

#[test]
fn check_names_each_mismatch() {
    let m = master();
    let bridge = settings(MacVlanMode::Bridge, 0);
    let veth = snapshot("veth", None, 3, Some(0));
    assert!(verify_link(&veth, &expect(&bridge, &m))
        .unwrap_err()
        .to_string()
        .contains("not of type macvlan but veth"));
    let vepa = settings(MacVlanMode::Vepa, 0);
    let err = verify_link(&macvlan_on_node(), &expect(&vepa, &m)).unwrap_err();
    assert_eq!(err.to_string(), "container macvlan mode bridge does not match expected value: vepa");
    let other_parent = snapshot("macvlan", Some(MacVlanMode::Bridge), 9, Some(0));
    assert!(verify_link(&other_parent, &expect(&bridge, &m))
        .unwrap_err()
        .to_string()
        .contains("not on master up0"));
    let mut in_pod = expect(&bridge, &m);
    in_pod.in_container = true;
    assert!(verify_link(&macvlan_on_node(), &in_pod).is_err(), "the master is the node's, not the pod's");
    let mtu = settings(MacVlanMode::Bridge, 9000);
    assert!(verify_link(&macvlan_on_node(), &expect(&mtu, &m))
        .unwrap_err()
        .to_string()
        .contains("MTU 1400 instead of the configured 9000"));
    let mut mac = expect(&bridge, &m);
    mac.mac = Some("0a:58:00:00:00:02".into());
    assert!(verify_link(&macvlan_on_node(), &mac)
        .unwrap_err()
        .to_string()
        .contains("doesn't match container Mac"));
}

#[test]
fn creation_failures_hint_at_the_cause() {
    let m = master();
    let refused = |errno| LinkError {
        action: "creating macvlan plx0".into(),
        place: "the agent's network namespace".into(),
        errno: Some(errno),
        cause: LinkCause::Refused("refused".into()),
    };
    let MacvlanError::Cni(CniFailure { msg, .. }) =
        creation_failure(refused(Errno::EINVAL), &settings(MacVlanMode::Passthrough, 0), &m)
    else {
        panic!()
    };
    assert!(msg.contains("passthru mode needs up0 to itself"), "{msg}");
    let with_mac = Settings { mac: Some(Mac([0x0a, 0, 0, 0, 0, 9])), ..settings(MacVlanMode::Bridge, 0) };
    let MacvlanError::Cni(CniFailure { msg, .. }) =
        creation_failure(refused(Errno::EADDRINUSE), &with_mac, &m)
    else {
        panic!()
    };
    assert!(msg.contains("MAC 0a:00:00:00:00:09 is taken on up0"), "{msg}");
}

#[test]
fn mtu_above_the_masters_is_a_config_error() {
    let Err(MacvlanError::Cni(CniFailure { code, msg })) =
        check_mtu(&settings(MacVlanMode::Bridge, 9000), &master())
    else {
        panic!()
    };
    assert_eq!(code.code(), 7);
    assert!(msg.contains("invalid MTU 9000, must be [0, master MTU(1500)]"), "{msg}");
    assert!(check_mtu(&settings(MacVlanMode::Bridge, 1500), &master()).is_ok());
}

#[test]
fn unsupported_versions_are_refused_with_code_1() {
    let conf = MacvlanConf { cni_version: "0.5.0".into(), ..Default::default() };
    let Err(CniFailure { code, msg }) = result_version(&conf.cni_version) else { panic!() };
    assert_eq!(code.code(), 1);
    assert!(msg.contains("1.1.0"), "{msg}");
}

#[test]
fn a_layer_2_result_cannot_be_written_as_0_2_0() {
    let result = base_result(&macvlan_on_node(), Path::new("/run/netns/p"), &MacvlanConf::default());
    let Err(CniFailure { code, msg }) = output(&result, "0.2.0") else { panic!("0.2.0 has no interfaces") };
    assert_eq!(code.code(), 1);
    assert!(msg.contains("use cniVersion 0.3.0 or later"), "{msg}");
    assert_eq!(output(&result, "0.3.1").unwrap()["interfaces"][0]["name"], "net1");
}
