//! Results and result JSON the tests of every part of `result` share.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{json, Value};

use super::{CniResult, Dns, Interface, IpConfig, Route};

pub(super) const ALL: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

pub(super) fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

pub(super) fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(super) fn ipc(address: &str, gateway: Option<&str>, interface: Option<i64>) -> IpConfig {
    IpConfig { address: net(address), gateway: gateway.map(addr), interface }
}

pub(super) fn route(dst: &str, gw: Option<&str>) -> Route {
    Route {
        dst: net(dst),
        gw: gw.map(addr),
        mtu: None,
        advmss: None,
        priority: None,
        table: None,
        scope: None,
    }
}

pub(super) fn iface(name: &str, mac: &str, sandbox: Option<&str>) -> Interface {
    Interface {
        name: name.into(),
        mac: Some(mac.into()),
        sandbox: sandbox.map(Into::into),
        ..Default::default()
    }
}

pub(super) const IB_MAC: &str = "a0:00:02:20:fe:80:00:00:00:00:00:00:ec:0d:9a:03:00:2c:0e:51";

/// Uses everything 1.1.0 can say, including what older versions cannot: several IPs
/// per family, interleaved route families, route attributes, interface extras.
pub(super) fn rich() -> CniResult {
    CniResult {
        cni_version: "1.1.0".into(),
        interfaces: vec![
            iface("br0", "00:11:22:33:44:55", None),
            Interface { mtu: Some(1500), ..iface("veth1", "55:44:33:22:11:11", None) },
            Interface {
                mtu: Some(9000),
                socket_path: Some("/run/vhost/net1.sock".into()),
                pci_id: Some("0000:3b:00.1".into()),
                ..iface("net1", IB_MAC, Some("/var/run/netns/blue"))
            },
        ],
        ips: vec![
            ipc("10.1.0.5/16", Some("10.1.0.1"), Some(2)),
            ipc("2001:db8::5/64", Some("2001:db8::1"), Some(2)),
            ipc("10.2.0.7/24", None, Some(2)),
            ipc("2001:db8:1::7/64", None, Some(1)),
        ],
        routes: vec![
            Route {
                mtu: Some(1450),
                advmss: Some(1400),
                priority: Some(100),
                table: Some(100),
                scope: Some(0),
                ..route("0.0.0.0/0", Some("10.1.0.1"))
            },
            Route { priority: Some(50), ..route("::/0", Some("2001:db8::1")) },
            Route { scope: Some(253), ..route("192.168.0.0/16", None) },
            Route { table: Some(0), ..route("2001:db8:2::/48", Some("2001:db8::1")) },
        ],
        dns: Dns {
            nameservers: vec!["10.1.0.1".into(), "2001:db8::53".into()],
            domain: Some("example.com".into()),
            search: vec!["svc.example.com".into(), "example.com".into()],
            options: vec!["ndots:5".into()],
        },
    }
}

pub(super) fn spec_example_1_1_0() -> Value {
    json!({
        "cniVersion": "1.1.0",
        "interfaces": [
            {"name": "cni0", "mac": "00:11:22:33:44:55"},
            {"name": "veth3243", "mac": "55:44:33:22:11:11"},
            {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
        ],
        "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]}
    })
}

pub(super) fn spec_example_canonical(version: &str) -> CniResult {
    CniResult {
        cni_version: version.into(),
        interfaces: vec![
            iface("cni0", "00:11:22:33:44:55", None),
            iface("veth3243", "55:44:33:22:11:11", None),
            iface("eth0", "99:88:77:66:55:44", Some("/var/run/netns/blue")),
        ],
        ips: vec![ipc("10.1.0.5/16", Some("10.1.0.1"), Some(2))],
        routes: vec![route("0.0.0.0/0", None)],
        dns: Dns { nameservers: vec!["10.1.0.1".into()], ..Default::default() },
    }
}

pub(super) fn legacy_example(version: &str) -> Value {
    json!({
        "cniVersion": version,
        "ip4": {
            "ip": "10.1.0.5/16",
            "gateway": "10.1.0.1",
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16"}]
        },
        "ip6": {
            "ip": "2001:db8::5/64",
            "gateway": "2001:db8::1",
            "routes": [{"dst": "::/0"}]
        },
        "dns": {
            "nameservers": ["10.1.0.1"],
            "domain": "example.com",
            "search": ["example.com"],
            "options": ["ndots:2"]
        }
    })
}

pub(super) fn legacy_canonical(version: &str) -> CniResult {
    CniResult {
        cni_version: version.into(),
        interfaces: vec![],
        ips: vec![
            ipc("10.1.0.5/16", Some("10.1.0.1"), None),
            ipc("2001:db8::5/64", Some("2001:db8::1"), None),
        ],
        routes: vec![
            route("0.0.0.0/0", Some("10.1.0.1")),
            route("192.168.0.0/16", None),
            route("::/0", None),
        ],
        dns: Dns {
            nameservers: vec!["10.1.0.1".into()],
            domain: Some("example.com".into()),
            search: vec!["example.com".into()],
            options: vec!["ndots:2".into()],
        },
    }
}
