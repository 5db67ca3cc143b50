//! Where an attachment's mapped packets travel on the node (pure): which node interfaces hold
//! the host IP, where the programs run, and how a packet reaches the pod.
//!
//! - bridge: the host IP is the bridge's. Clients' packets to it come up the bridge device
//!   (TC ingress of the bridge), are rewritten and redirected to the pod's host-side veth;
//!   the pod's replies enter that veth (its TC ingress), where they are rewritten back before
//!   the bridge forwards them. A pod reaching a hostPort, its own or another's, is caught on
//!   its veth's ingress too.
//! - macvlan: the host IP is the master's, or a host-side macvlan's on the same master (the
//!   usual way to give the node an address on a macvlan network, and the only one that lets
//!   the node itself reach the pods: macvlan never delivers the master's own packets to its
//!   children). TC ingress of the master runs before macvlan's rx_handler, so rewriting the
//!   destination MAC there hands the packet to the pod's macvlan; the pod's replies leave
//!   through the master's transmit path (TC egress). The master's XDP program (see
//!   `dataplane::xdp`) translates the plain requests before TC sees them, the same way and
//!   into the same flow table; TC does everything XDP leaves. A host-side macvlan gets the ingress
//!   program too: pods reach it directly through the macvlan bridge, not through the master.
//!   A bridge's uplinks (the ports where clients' traffic enters the node: `uplinks` in the
//!   config, or by default the ports that reach the wire, none on a host-only bridge) get the
//!   XDP program, which translates the plain requests addressed to the bridge before the bridge
//!   sees them and redirects them into the pod's veth (when its pod end takes XDP frames, see
//!   `Topology::pod_takes_xdp`, and the pod's ingress is not limited) or hands them to the
//!   bridge's forwarding with the pod's MAC; TC on the bridge does everything XDP leaves.
//! - `hostInterface` names the interface holding the host IP explicitly.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value};

use crate::cni::result::CniResult;
use crate::dataplane::attach::{Attach, AttachPoint, Hook};
use crate::dataplane::netdev::NodeInterface;
use crate::netlink::Mac;

/// The pod's side of an attachment, from prevResult.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSide {
    pub ips: Vec<IpNet>,
    pub mac: [u8; 6],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Hooks every attachment of this kind needs.
    pub hooks: Vec<AttachPoint>,
    /// The device that reaches the pod, and the path of it to deliver on.
    pub deliver_ifindex: u32,
    pub deliver: Hook,
    /// Interfaces whose addresses can be the host IP, in order of preference.
    pub holders: Vec<NodeInterface>,
    /// The bridge the pod's veth is a port of (bridge networks).
    pub bridge: Option<u32>,
    /// The pod's end of its veth takes XDP frames (GRO on: see `DELIVER_XDP_REDIRECT`), so the
    /// XDP program on the bridge's uplinks may redirect requests straight into the veth. Not
    /// resolved from the node's interfaces: the plugin finds it out in the pod's namespace.
    pub pod_takes_xdp: bool,
}

impl Topology {
    /// The bridge has uplinks the XDP program runs on.
    pub fn has_xdp_uplinks(&self) -> bool {
        self.bridge.is_some() && self.hooks.iter().any(|h| h.attach == Attach::Xdp)
    }

    /// The hooks for entries using `host_ips`: the fixed ones, plus the ingress of every
    /// interface holding one of them (traffic to that address enters there).
    pub fn hooks_for(&self, host_ips: impl IntoIterator<Item = IpAddr>) -> Vec<AttachPoint> {
        let mut hooks = self.hooks.clone();
        for ip in host_ips {
            if let Some(h) = self.holders.iter().find(|h| h.addrs.iter().any(|a| a.addr() == ip)) {
                hooks.push(point(h, Hook::Ingress, Attach::Tcx));
            }
        }
        hooks.sort();
        hooks.dedup();
        hooks
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("the previous plugin's result has no MAC address for the pod interface {0}")]
    NoPodMac(String),
    #[error("the previous plugin's result has no IP address on the pod interface {0}: nothing to map to")]
    NoPodAddress(String),
    #[error(
        "plexus-portmap maps ports of attachments made by bridge or macvlan; network {network} starts with {plugin:?}: \
         use the reference portmap plugin for it"
    )]
    Unsupported { network: String, plugin: String },
    #[error("plexus-portmap cannot map ports of a macvlan whose master is in the pod (linkInContainer)")]
    LinkInContainer,
    #[error("the node has no interface {0}")]
    MissingInterface(String),
    #[error("the bridge plugin's result names no host-side veth for the pod")]
    NoHostVeth,
    #[error("the macvlan config names no master and the node has no default route to take it from")]
    NoMaster,
    #[error("\"uplinks\" names {uplink}, which is not a port of the bridge {bridge}: name the bridge's ports where clients' traffic enters the node")]
    NotABridgePort { uplink: String, bridge: String },
    #[error(
        "\"uplinks\" is for bridge networks; network {network} starts with {plugin:?}, whose clients' traffic enters \
         through its master (where the XDP program runs already): remove \"uplinks\""
    )]
    UplinksWithoutBridge { network: String, plugin: String },
}

/// What the topology is resolved from.
#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    pub network: &'a str,
    /// The configlist's first plugin: the one that made the interface.
    pub first_plugin: Option<&'a Map<String, Value>>,
    pub prev: &'a CniResult,
    pub ifname: &'a str,
    pub host_interface: Option<&'a str>,
    /// The config's `uplinks` (bridge networks).
    pub uplinks: Option<&'a [String]>,
    /// Whether a macvlan master's ingress takes the XDP program too (`--xdp always`): by
    /// default TC alone translates there, where XDP loses (see `XdpWhere::Auto`).
    pub xdp_on_master: bool,
}

pub fn pod_side(prev: &CniResult, ifname: &str) -> Result<PodSide, TopologyError> {
    let in_sandbox = |i: &&crate::cni::result::Interface| i.sandbox.as_deref().is_some_and(|s| !s.is_empty());
    let index = prev
        .interfaces
        .iter()
        .position(|i| in_sandbox(&i) && i.name == ifname)
        .or_else(|| prev.interfaces.iter().position(|i| in_sandbox(&i)));
    let mac = index
        .and_then(|i| prev.interfaces[i].mac.as_deref())
        .and_then(|text| text.parse::<Mac>().ok().map(|m| m.0))
        .ok_or_else(|| TopologyError::NoPodMac(ifname.to_owned()))?;
    let ips: Vec<IpNet> = prev
        .ips
        .iter()
        .filter(|ip| match (ip.interface, index) {
            (Some(n), Some(i)) => usize::try_from(n).is_ok_and(|n| n == i),
            _ => true,
        })
        .map(|ip| ip.address)
        .collect();
    if ips.is_empty() {
        return Err(TopologyError::NoPodAddress(ifname.to_owned()));
    }
    Ok(PodSide { ips, mac })
}

fn by_name<'a>(node: &'a [NodeInterface], name: &str) -> Result<&'a NodeInterface, TopologyError> {
    node.iter().find(|i| i.name == name).ok_or_else(|| TopologyError::MissingInterface(name.to_owned()))
}

fn point(i: &NodeInterface, hook: Hook, attach: Attach) -> AttachPoint {
    AttachPoint { ifindex: i.index, ifname: i.name.clone(), hook, attach }
}

/// The topology of an attachment. `default_route` is the interface of the node's default
/// route, which a macvlan without `master` uses (as the reference plugin does).
pub fn resolve(
    a: &Attachment<'_>,
    node: &[NodeInterface],
    default_route: Option<u32>,
) -> Result<Topology, TopologyError> {
    let first = a.first_plugin;
    let plugin_type = first.and_then(|p| p.get("type")).and_then(Value::as_str).unwrap_or_default();
    let key = |k: &str| first.and_then(|p| p.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty());
    let explicit = a.host_interface.map(|name| by_name(node, name)).transpose()?;
    match plugin_type {
        "bridge" => {
            let bridge = by_name(node, key("bridge").unwrap_or("cni0"))?;
            let veth_name = a
                .prev
                .interfaces
                .iter()
                .find(|i| i.sandbox.as_deref().is_none_or(str::is_empty) && i.name != bridge.name)
                .map(|i| i.name.as_str())
                .ok_or(TopologyError::NoHostVeth)?;
            let veth = by_name(node, veth_name)?;
            let mut hooks =
                vec![point(bridge, Hook::Ingress, Attach::Tcx), point(veth, Hook::Ingress, Attach::Filter)];
            hooks.extend(
                uplinks(a.uplinks, bridge, node)?.into_iter().map(|u| point(u, Hook::Ingress, Attach::Xdp)),
            );
            Ok(Topology {
                hooks,
                deliver_ifindex: veth.index,
                deliver: Hook::Egress,
                holders: vec![explicit.unwrap_or(bridge).clone()],
                bridge: Some(bridge.index),
                pod_takes_xdp: false,
            })
        }
        "macvlan" if a.uplinks.is_some() => Err(TopologyError::UplinksWithoutBridge {
            network: a.network.to_owned(),
            plugin: plugin_type.to_owned(),
        }),
        "macvlan" => {
            if first.and_then(|p| p.get("linkInContainer")).and_then(Value::as_bool) == Some(true) {
                return Err(TopologyError::LinkInContainer);
            }
            let master = match key("master") {
                Some(name) => by_name(node, name)?,
                None => default_route
                    .and_then(|index| node.iter().find(|i| i.index == index))
                    .ok_or(TopologyError::NoMaster)?,
            };
            let holders = match explicit {
                Some(h) => vec![h.clone()],
                None => {
                    let mut uppers: Vec<&NodeInterface> =
                        node.iter().filter(|i| i.macvlan_lower == Some(master.index)).collect();
                    uppers.sort_by(|x, y| x.name.cmp(&y.name));
                    std::iter::once(master).chain(uppers).cloned().collect()
                }
            };
            let mut hooks =
                vec![point(master, Hook::Ingress, Attach::Tcx), point(master, Hook::Egress, Attach::Tcx)];
            if a.xdp_on_master {
                hooks.push(point(master, Hook::Ingress, Attach::Xdp));
            }
            Ok(Topology {
                hooks,
                deliver_ifindex: master.index,
                deliver: Hook::Ingress,
                holders,
                bridge: None,
                pod_takes_xdp: false,
            })
        }
        other => Err(TopologyError::Unsupported { network: a.network.to_owned(), plugin: other.to_owned() }),
    }
}

/// A bridge's uplinks: the ones `names` lists, each of which must be a port of it, or else its
/// ports that reach the wire.
fn uplinks<'a>(
    names: Option<&[String]>,
    bridge: &NodeInterface,
    node: &'a [NodeInterface],
) -> Result<Vec<&'a NodeInterface>, TopologyError> {
    let Some(names) = names else {
        return Ok(node.iter().filter(|i| i.master == Some(bridge.index) && i.wire).collect());
    };
    names
        .iter()
        .map(|name| {
            let i = by_name(node, name)?;
            if i.master == Some(bridge.index) {
                Ok(i)
            } else {
                Err(TopologyError::NotABridgePort { uplink: name.clone(), bridge: bridge.name.clone() })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node() -> Vec<NodeInterface> {
        let i = |index: u32, name: &str, lower: Option<u32>, addrs: &[&str]| NodeInterface {
            index,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, index as u8]),
            macvlan_lower: lower,
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            master: None,
            wire: lower.is_none(),
        };
        let port = |i: NodeInterface, wire: bool| NodeInterface { master: Some(3), wire, ..i };
        vec![
            i(2, "eth0", None, &["192.0.2.10/24"]),
            i(3, "br0", None, &["10.77.0.1/24"]),
            port(i(4, "veth1234", None, &[]), false),
            i(5, "pmm0", None, &[]),
            i(6, "pmh0", Some(5), &["10.78.0.1/24"]),
            port(i(7, "eno2", None, &[]), true),
            port(i(8, "vethclient", None, &[]), false),
        ]
    }

    fn prev(value: serde_json::Value) -> CniResult {
        CniResult::parse(&value, "1.0.0").unwrap()
    }

    fn plugin(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn bridge_attachments_hook_the_bridge_and_the_pods_veth() {
        let p = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "br0", "mac": "02:00:00:00:00:03"}, {"name": "veth1234", "mac": "02:00:00:00:00:04"},
                           {"name": "net1", "mac": "0a:58:0a:4d:00:05", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.77.0.5/24", "interface": 2}]}));
        let first = plugin(json!({"type": "bridge", "bridge": "br0"}));
        let a = Attachment {
            network: "n",
            first_plugin: Some(&first),
            prev: &p,
            ifname: "net1",
            host_interface: None,
            uplinks: None,
            xdp_on_master: true,
        };
        let t = resolve(&a, &node(), None).unwrap();
        assert_eq!(
            t.hooks.iter().map(|h| (h.ifindex, h.hook, h.attach)).collect::<Vec<_>>(),
            [
                (3, Hook::Ingress, Attach::Tcx),
                (4, Hook::Ingress, Attach::Filter),
                (7, Hook::Ingress, Attach::Xdp)
            ],
            "XDP on the bridge's wire port, not on veths"
        );
        assert_eq!((t.deliver_ifindex, t.deliver), (4, Hook::Egress));
        assert_eq!(t.holders.iter().map(|h| h.index).collect::<Vec<_>>(), [3]);
        assert_eq!(t.bridge, Some(3));
        let pod = pod_side(&p, "net1").unwrap();
        assert_eq!(pod.mac, [0x0a, 0x58, 0x0a, 0x4d, 0, 5]);
        assert_eq!(pod.ips, ["10.77.0.5/24".parse::<IpNet>().unwrap()]);
    }

    #[test]
    fn a_bridges_uplinks_are_the_named_ports_or_none() {
        let p = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "veth1234"}, {"name": "net1", "mac": "0a:58:0a:4d:00:05", "sandbox": "/p"}],
            "ips": [{"address": "10.77.0.5/24"}]}));
        let first = plugin(json!({"type": "bridge", "bridge": "br0"}));
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<String>>();
        let xdp = |uplinks: &[String]| {
            let a = Attachment {
                network: "n",
                first_plugin: Some(&first),
                prev: &p,
                ifname: "net1",
                host_interface: None,
                uplinks: Some(uplinks),
                xdp_on_master: true,
            };
            resolve(&a, &node(), None).map(|t| {
                let points = t.hooks.iter().filter(|h| h.attach == Attach::Xdp).map(|h| h.ifindex);
                let points: Vec<u32> = points.collect();
                assert_eq!(t.has_xdp_uplinks(), !points.is_empty(), "{uplinks:?}");
                assert!(!t.pod_takes_xdp, "found out in the pod's namespace, not here");
                points
            })
        };
        assert_eq!(xdp(&names(&["vethclient"])), Ok(vec![8]), "a named veth port (a test's client) counts");
        assert_eq!(xdp(&names(&["vethclient", "eno2"])), Ok(vec![8, 7]));
        assert_eq!(xdp(&[]), Ok(vec![]), "[]: TC alone");
        assert_eq!(
            xdp(&names(&["eth0"])),
            Err(TopologyError::NotABridgePort { uplink: "eth0".into(), bridge: "br0".into() })
        );
        assert_eq!(xdp(&names(&["nope"])), Err(TopologyError::MissingInterface("nope".into())));
        let err = TopologyError::NotABridgePort { uplink: "eth0".into(), bridge: "br0".into() }.to_string();
        assert!(err.contains("eth0") && err.contains("not a port of the bridge br0"), "{err}");
    }

    #[test]
    fn macvlan_attachments_hook_the_master_and_find_host_side_macvlans() {
        let p = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "0a:58:0a:4e:00:05", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.78.0.5/24", "interface": 0}]}));
        let first = plugin(json!({"type": "macvlan", "master": "pmm0"}));
        let a = Attachment {
            network: "n",
            first_plugin: Some(&first),
            prev: &p,
            ifname: "net1",
            host_interface: None,
            uplinks: None,
            xdp_on_master: true,
        };
        let t = resolve(&a, &node(), None).unwrap();
        assert!(!t.has_xdp_uplinks(), "XDP on the master, which is no bridge's uplink");
        assert_eq!(
            t.hooks.iter().map(|h| (h.ifindex, h.hook, h.attach)).collect::<Vec<_>>(),
            [
                (5, Hook::Ingress, Attach::Tcx),
                (5, Hook::Egress, Attach::Tcx),
                (5, Hook::Ingress, Attach::Xdp)
            ],
            "with --xdp always"
        );
        let by_default = resolve(&Attachment { xdp_on_master: false, ..a }, &node(), None).unwrap();
        assert_eq!(
            by_default.hooks.iter().map(|h| (h.ifindex, h.hook, h.attach)).collect::<Vec<_>>(),
            [(5, Hook::Ingress, Attach::Tcx), (5, Hook::Egress, Attach::Tcx)],
            "by default TC alone on a macvlan master, where XDP loses"
        );
        assert_eq!((t.deliver_ifindex, t.deliver), (5, Hook::Ingress));
        assert_eq!(t.holders.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["pmm0", "pmh0"]);

        // No master: the default route's interface, as the reference macvlan.
        let first = plugin(json!({"type": "macvlan"}));
        let a = Attachment { first_plugin: Some(&first), ..a };
        assert_eq!(resolve(&a, &node(), Some(2)).unwrap().deliver_ifindex, 2);
        assert_eq!(resolve(&a, &node(), None).unwrap_err(), TopologyError::NoMaster);

        // hostInterface wins.
        let a = Attachment { host_interface: Some("eth0"), ..a };
        assert_eq!(resolve(&a, &node(), Some(5)).unwrap().holders[0].name, "eth0");

        // uplinks are a bridge's: the master is the macvlan's.
        let none: &[String] = &[];
        let err = resolve(&Attachment { uplinks: Some(none), ..a }, &node(), Some(5)).unwrap_err();
        assert_eq!(
            err,
            TopologyError::UplinksWithoutBridge { network: "n".into(), plugin: "macvlan".into() }
        );
        assert!(err.to_string().contains("remove \"uplinks\""), "{err}");
    }

    #[test]
    fn holders_used_by_entries_get_an_ingress_hook() {
        let p = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "0a:58:0a:4e:00:05", "sandbox": "/run/netns/p"}],
            "ips": [{"address": "10.78.0.5/24"}]}));
        let first = plugin(json!({"type": "macvlan", "master": "pmm0"}));
        let a = Attachment {
            network: "n",
            first_plugin: Some(&first),
            prev: &p,
            ifname: "net1",
            host_interface: None,
            uplinks: None,
            xdp_on_master: true,
        };
        let t = resolve(&a, &node(), None).unwrap();
        let pod = pod_side(&p, "net1").unwrap();
        let mapping = super::super::config::PortMapping {
            host_port: 80,
            container_port: 80,
            protocol: crate::spec::selection::Protocol::Tcp,
            host_ip: None,
        };
        let entries = super::super::entries::plan("n", &[mapping], &pod, &t).unwrap();
        let hooks: Vec<(u32, Hook, Attach)> = t
            .hooks_for(entries.iter().map(|e| e.host_ip))
            .iter()
            .map(|h| (h.ifindex, h.hook, h.attach))
            .collect();
        assert_eq!(
            hooks,
            [
                (5, Hook::Ingress, Attach::Tcx),
                (5, Hook::Ingress, Attach::Xdp),
                (5, Hook::Egress, Attach::Tcx),
                (6, Hook::Ingress, Attach::Tcx)
            ]
        );
    }

    #[test]
    fn other_plugins_and_incomplete_results_are_refused_clearly() {
        let p = prev(
            json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}], "ips": []}),
        );
        assert_eq!(pod_side(&p, "net1").unwrap_err(), TopologyError::NoPodMac("net1".into()));
        let first = plugin(json!({"type": "ipvlan"}));
        let a = Attachment {
            network: "n",
            first_plugin: Some(&first),
            prev: &p,
            ifname: "net1",
            host_interface: None,
            uplinks: None,
            xdp_on_master: true,
        };
        assert!(matches!(resolve(&a, &node(), None), Err(TopologyError::Unsupported { .. })));
    }
}
