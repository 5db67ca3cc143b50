//! Which node interfaces a plugin's config makes it use, read the way each plugin reads its
//! config (the reference plugins, sriov-cni, host-device, ovs-cni, and plexus's own types,
//! which take the same keys).

use serde_json::{Map, Value};

use super::model::InterfaceKind;

/// One node interface a plugin uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInterface {
    pub kind: InterfaceKind,
    /// The plugin type that uses it.
    pub plugin: String,
    /// How the config names it (`master`, `bridge`, `deviceID`, ...).
    pub key: &'static str,
    pub name: Named,
}

/// The interface's name, or why it cannot be known before the plugin runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Name(String),
    /// The plugin takes the interface of the node's default route.
    DefaultRoute,
    /// The SR-IOV VF `deviceID` whose PF is not found on this node.
    UnknownPf {
        vf: String,
    },
    /// The config identifies the interface in a way no name can be matched against
    /// (host-device's `hwaddr` or `kernelpath`), or not at all.
    Unnamed,
}

/// Finds what a VF's PF is on this node (sysfs in the agent, a table in tests).
pub trait HostLookup: Send + Sync {
    /// The PF netdev of the VF at PCI address `vf_pci`, `None` when there is no such VF.
    fn sriov_pf(&self, vf_pci: &str) -> Option<String>;
}

fn string<'a>(c: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    c.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn flag(c: &Map<String, Value>, key: &str) -> bool {
    c.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The node interfaces one plugin's config uses.
pub fn host_interfaces(plugin: &Map<String, Value>, host: &dyn HostLookup) -> Vec<HostInterface> {
    let Some(t) = string(plugin, "type") else { return Vec::new() };
    let one = |kind, key, name| vec![HostInterface { kind, plugin: t.to_owned(), key, name }];
    let named = |s: &str| Named::Name(s.to_owned());
    match t {
        // An empty or absent master is the default route's interface; with linkInContainer
        // the master is one of the pod's own interfaces, not the node's.
        "macvlan" | "ipvlan" | "vlan" => {
            if flag(plugin, "linkInContainer") {
                return Vec::new();
            }
            let kind = match t {
                "macvlan" => InterfaceKind::MacvlanMaster,
                "ipvlan" => InterfaceKind::IpvlanMaster,
                _ => InterfaceKind::VlanMaster,
            };
            one(kind, "master", string(plugin, "master").map_or(Named::DefaultRoute, named))
        }
        // The reference bridge plugin's default bridge.
        "bridge" => one(InterfaceKind::Bridge, "bridge", named(string(plugin, "bridge").unwrap_or("cni0"))),
        "ovs" => one(InterfaceKind::Bridge, "bridge", string(plugin, "bridge").map_or(Named::Unnamed, named)),
        // tap joins a bridge only when told to.
        "tap" => match string(plugin, "bridge") {
            Some(b) => one(InterfaceKind::Bridge, "bridge", named(b)),
            None => Vec::new(),
        },
        "host-device" => {
            let mut out = Vec::new();
            for key in ["device", "pciBusID", "deviceID"] {
                if let Some(name) = string(plugin, key) {
                    out.extend(one(InterfaceKind::HostDevice, key, named(name)));
                }
            }
            if out.is_empty() {
                let key = if string(plugin, "hwaddr").is_some() { "hwaddr" } else { "kernelpath" };
                out.extend(one(InterfaceKind::HostDevice, key, Named::Unnamed));
            }
            out
        }
        "sriov" => {
            let mut out = Vec::new();
            if let Some(vf) = string(plugin, "deviceID") {
                let name =
                    host.sriov_pf(vf).map_or_else(|| Named::UnknownPf { vf: vf.to_owned() }, Named::Name);
                out.extend(one(InterfaceKind::SriovPf, "deviceID", name));
            }
            // Older sriov-cni configs name the PF itself.
            for key in ["master", "pfName"] {
                if let Some(pf) = string(plugin, key) {
                    out.extend(one(InterfaceKind::SriovPf, key, named(pf)));
                }
            }
            if out.is_empty() {
                out.extend(one(InterfaceKind::SriovPf, "deviceID", Named::Unnamed));
            }
            out
        }
        "plexus-portmap" => match string(plugin, "hostInterface") {
            Some(i) => one(InterfaceKind::PortmapHostInterface, "hostInterface", named(i)),
            None => Vec::new(),
        },
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Pfs;
    impl HostLookup for Pfs {
        fn sriov_pf(&self, vf_pci: &str) -> Option<String> {
            (vf_pci == "0000:3b:02.1").then(|| "ens1f0".to_owned())
        }
    }

    fn of(config: Value) -> Vec<(InterfaceKind, &'static str, Named)> {
        let Value::Object(c) = config else { panic!("not an object") };
        host_interfaces(&c, &Pfs).into_iter().map(|h| (h.kind, h.key, h.name)).collect()
    }

    fn name(s: &str) -> Named {
        Named::Name(s.into())
    }

    #[test]
    fn masters_of_macvlan_ipvlan_and_vlan() {
        use InterfaceKind::*;
        assert_eq!(
            of(json!({"type": "macvlan", "master": "eth1"})),
            [(MacvlanMaster, "master", name("eth1"))]
        );
        assert_eq!(of(json!({"type": "ipvlan", "master": "eth2"})), [(IpvlanMaster, "master", name("eth2"))]);
        assert_eq!(
            of(json!({"type": "vlan", "master": "eth3", "vlanId": 5})),
            [(VlanMaster, "master", name("eth3"))]
        );
        // Absent or empty: the default route's interface, which no name can allow.
        assert_eq!(of(json!({"type": "macvlan"})), [(MacvlanMaster, "master", Named::DefaultRoute)]);
        assert_eq!(
            of(json!({"type": "ipvlan", "master": ""})),
            [(IpvlanMaster, "master", Named::DefaultRoute)]
        );
        // A master inside the pod is not the node's.
        assert_eq!(of(json!({"type": "macvlan", "master": "eth0", "linkInContainer": true})), []);
    }

    #[test]
    fn bridges_with_the_reference_default() {
        use InterfaceKind::Bridge;
        assert_eq!(of(json!({"type": "bridge", "bridge": "br1"})), [(Bridge, "bridge", name("br1"))]);
        assert_eq!(of(json!({"type": "bridge"})), [(Bridge, "bridge", name("cni0"))]);
        assert_eq!(of(json!({"type": "bridge", "bridge": ""})), [(Bridge, "bridge", name("cni0"))]);
        assert_eq!(of(json!({"type": "ovs", "bridge": "br-ex"})), [(Bridge, "bridge", name("br-ex"))]);
        assert_eq!(of(json!({"type": "tap", "bridge": "br2"})), [(Bridge, "bridge", name("br2"))]);
        assert_eq!(of(json!({"type": "tap"})), []);
    }

    #[test]
    fn host_devices_by_name_or_pci_address() {
        use InterfaceKind::HostDevice;
        assert_eq!(
            of(json!({"type": "host-device", "device": "eth5"})),
            [(HostDevice, "device", name("eth5"))]
        );
        assert_eq!(
            of(json!({"type": "host-device", "pciBusID": "0000:3b:00.0"})),
            [(HostDevice, "pciBusID", name("0000:3b:00.0"))]
        );
        assert_eq!(
            of(json!({"type": "host-device", "deviceID": "0000:3b:00.1"})),
            [(HostDevice, "deviceID", name("0000:3b:00.1"))]
        );
        assert_eq!(
            of(json!({"type": "host-device", "hwaddr": "02:00:00:00:00:01"})),
            [(HostDevice, "hwaddr", Named::Unnamed)]
        );
        assert_eq!(
            of(json!({"type": "host-device", "kernelpath": "/sys/x"})),
            [(HostDevice, "kernelpath", Named::Unnamed)]
        );
    }

    #[test]
    fn sriov_pf_from_the_vf_or_named() {
        use InterfaceKind::SriovPf;
        assert_eq!(
            of(json!({"type": "sriov", "deviceID": "0000:3b:02.1"})),
            [(SriovPf, "deviceID", name("ens1f0"))]
        );
        assert_eq!(
            of(json!({"type": "sriov", "deviceID": "0000:99:00.1"})),
            [(SriovPf, "deviceID", Named::UnknownPf { vf: "0000:99:00.1".into() })]
        );
        assert_eq!(of(json!({"type": "sriov", "master": "ens2f0"})), [(SriovPf, "master", name("ens2f0"))]);
        assert_eq!(
            of(json!({"type": "sriov", "deviceID": "0000:3b:02.1", "pfName": "ens9"})),
            [(SriovPf, "deviceID", name("ens1f0")), (SriovPf, "pfName", name("ens9"))]
        );
        assert_eq!(of(json!({"type": "sriov"})), [(SriovPf, "deviceID", Named::Unnamed)]);
    }

    #[test]
    fn plexus_portmap_host_interface_and_types_without_node_interfaces() {
        assert_eq!(
            of(json!({"type": "plexus-portmap", "hostInterface": "eth0"})),
            [(InterfaceKind::PortmapHostInterface, "hostInterface", name("eth0"))]
        );
        for t in [
            "plexus-portmap",
            "plexus-bandwidth",
            "portmap",
            "bandwidth",
            "tuning",
            "ptp",
            "dummy",
            "loopback",
        ] {
            assert_eq!(of(json!({"type": t, "master": "eth0", "bridge": "br0"})), [], "{t}");
        }
        assert_eq!(of(json!({"master": "eth0"})), []);
    }
}
