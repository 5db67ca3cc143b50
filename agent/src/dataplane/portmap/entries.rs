//! From port mappings to map entries (pure): which host address each mapping uses, and the
//! exact keys and values the BPF programs read.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use plexus_ebpf_common::{
    Addr, Endpoint, Rewrite, DELIVER_BRIDGE, DELIVER_INGRESS, DELIVER_XDP_REDIRECT, NO_COUNTERS, PROTO_SCTP,
    PROTO_TCP, PROTO_UDP,
};
use serde::{Deserialize, Serialize};

use super::config::PortMapping;
use super::topology::{PodSide, Topology};
use crate::dataplane::attach::Hook;
use crate::dataplane::maps::{addr_words, words_addr};
use crate::dataplane::netdev::NodeInterface;
use crate::netlink::Mac;
use crate::spec::selection::Protocol;

pub fn protocol_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => PROTO_TCP,
        Protocol::Udp => PROTO_UDP,
        Protocol::Sctp => PROTO_SCTP,
    }
}

pub fn protocol_from_number(n: u8) -> Option<Protocol> {
    match n {
        PROTO_TCP => Some(Protocol::Tcp),
        PROTO_UDP => Some(Protocol::Udp),
        PROTO_SCTP => Some(Protocol::Sctp),
        _ => None,
    }
}

/// One installed translation: one mapping for one address family of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub protocol: Protocol,
    pub host_ip: IpAddr,
    pub host_port: u16,
    pub pod_ip: IpAddr,
    pub container_port: u16,
    pub pod_mac: String,
    /// The MAC of the node interface holding `host_ip`.
    pub host_mac: String,
    /// The node interface that reaches the pod, and on which of its paths.
    pub deliver_ifindex: u32,
    pub deliver: Hook,
    /// `host_ip` is the bridge's the pod's veth is a port of (`DELIVER_BRIDGE`: the XDP
    /// program on the bridge's uplinks may translate its requests). Records written before
    /// it existed read false: TC alone, as then.
    #[serde(default)]
    pub via_bridge: bool,
    /// With `via_bridge`: the pod's end of its veth takes XDP frames, so the XDP program on an
    /// uplink redirects requests straight into the veth (`DELIVER_XDP_REDIRECT`). Records
    /// written before it existed read false: through the bridge, as then.
    #[serde(default)]
    pub xdp_redirect: bool,
}

impl Entry {
    pub fn host_endpoint(&self) -> Endpoint {
        Endpoint::new(addr_words(self.host_ip), self.host_port.to_be(), protocol_number(self.protocol))
    }

    pub fn pod_endpoint(&self) -> Endpoint {
        Endpoint::new(addr_words(self.pod_ip), self.container_port.to_be(), protocol_number(self.protocol))
    }

    /// The forward value: to the pod, and how to deliver to it. Its counters are the table's to
    /// assign when it installs the mapping.
    pub fn forward(&self) -> Rewrite {
        Rewrite {
            addr: addr_words(self.pod_ip),
            port_be: self.container_port.to_be(),
            flags: if self.deliver == Hook::Ingress { DELIVER_INGRESS } else { 0 }
                | if self.via_bridge { DELIVER_BRIDGE } else { 0 }
                | if self.via_bridge && self.xdp_redirect { DELIVER_XDP_REDIRECT } else { 0 },
            ifindex: self.deliver_ifindex,
            pod_mac: self.pod_mac.parse::<Mac>().map(|m| m.0).unwrap_or_default(),
            host_mac: self.host_mac.parse::<Mac>().map(|m| m.0).unwrap_or_default(),
            counters: NO_COUNTERS,
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} -> {}/{}",
            endpoint_text(self.host_ip, self.host_port),
            self.protocol.as_str(),
            endpoint_text(self.pod_ip, self.container_port),
            self.protocol.as_str()
        )
    }
}

/// `1.2.3.4:80` or `[fd00::1]:80`.
pub fn endpoint_text(ip: IpAddr, port: u16) -> String {
    std::net::SocketAddr::new(ip, port).to_string()
}

/// [`endpoint_text`] of an address and port as the maps hold them.
pub fn map_endpoint_text(addr: &Addr, port_be: u16) -> String {
    endpoint_text(words_addr(addr), u16::from_be(port_be))
}

/// A protocol number as the listings show it: `tcp`, `udp`, `sctp`, or the number.
pub fn protocol_text(proto: u8) -> String {
    protocol_from_number(proto).map_or_else(|| proto.to_string(), |p| p.as_str().into())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "network {network} cannot offer port mappings: the node has no {family} address on {interfaces} for \
         {mapping}; give the node an address on that network (on the bridge, the macvlan master or a host-side \
         macvlan of it, or the interface named by \"hostInterface\")"
    )]
    NoHostAddress { network: String, family: &'static str, interfaces: String, mapping: String },
    #[error("portMappings hostIP {host_ip} is not an address of {interfaces} (network {network}), so no traffic to it reaches this network")]
    ForeignHostIp { network: String, host_ip: IpAddr, interfaces: String },
    #[error(
        "portMappings hostIP {host_ip} is {family}, but the pod has no {family} address on network {network}"
    )]
    NoPodAddress { network: String, host_ip: IpAddr, family: &'static str },
    #[error(
        "two portMappings of the pod ask for {what}; each host IP, port and protocol can be mapped once"
    )]
    DuplicateHost { what: String },
}

fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn names(interfaces: &[NodeInterface]) -> String {
    let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
    if names.is_empty() {
        "no interface".into()
    } else {
        names.join(" or ")
    }
}

/// The holder and address for a pod address of one family: the first holder with an address
/// of that family, preferring one in the pod's subnet (the address clients on that network
/// use).
fn host_address<'a>(holders: &'a [NodeInterface], pod: &IpNet) -> Option<(&'a NodeInterface, IpAddr)> {
    holders.iter().find_map(|h| {
        let same_family: Vec<&IpNet> =
            h.addrs.iter().filter(|a| a.addr().is_ipv4() == pod.addr().is_ipv4()).collect();
        let pick = same_family.iter().find(|a| a.contains(&pod.addr())).or(same_family.first())?;
        Some((h, pick.addr()))
    })
}

/// The entries of an attachment's mappings.
pub fn plan(
    network: &str,
    mappings: &[PortMapping],
    pod: &PodSide,
    topology: &Topology,
) -> Result<Vec<Entry>, PlanError> {
    let pod_mac = Mac(pod.mac).to_string();
    let mut entries: Vec<Entry> = Vec::new();
    for m in mappings {
        let mut made = 0;
        for pod_ip in &pod.ips {
            let holder = match m.host_ip {
                Some(ip) if ip.is_ipv4() != pod_ip.addr().is_ipv4() => continue,
                Some(ip) => {
                    topology.holders.iter().find(|h| h.addrs.iter().any(|a| a.addr() == ip)).map(|h| (h, ip))
                }
                None => host_address(&topology.holders, pod_ip),
            };
            let Some((holder, host_ip)) = holder else { continue };
            entries.push(Entry {
                protocol: m.protocol,
                host_ip,
                host_port: m.host_port,
                pod_ip: pod_ip.addr(),
                container_port: m.container_port,
                pod_mac: pod_mac.clone(),
                host_mac: Mac(holder.mac.unwrap_or_default()).to_string(),
                deliver_ifindex: topology.deliver_ifindex,
                deliver: topology.deliver,
                via_bridge: topology.bridge == Some(holder.index),
                xdp_redirect: topology.bridge == Some(holder.index) && topology.pod_takes_xdp,
            });
            made += 1;
        }
        if made == 0 {
            return Err(match m.host_ip {
                Some(ip) if !pod.ips.iter().any(|p| p.addr().is_ipv4() == ip.is_ipv4()) => {
                    PlanError::NoPodAddress { network: network.into(), host_ip: ip, family: family(ip) }
                }
                Some(ip) => PlanError::ForeignHostIp {
                    network: network.into(),
                    host_ip: ip,
                    interfaces: names(&topology.holders),
                },
                None => PlanError::NoHostAddress {
                    network: network.into(),
                    family: match pod.ips.iter().map(|p| family(p.addr())).collect::<Vec<_>>().as_slice() {
                        [one] => one,
                        _ => "IPv4 or IPv6",
                    },
                    interfaces: names(&topology.holders),
                    mapping: format!("hostPort {}/{}", m.host_port, m.protocol.as_str()),
                },
            });
        }
    }
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            if a.host_endpoint() == b.host_endpoint() {
                return Err(PlanError::DuplicateHost {
                    what: format!("{}/{}", endpoint_text(a.host_ip, a.host_port), a.protocol.as_str()),
                });
            }
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::attach::{Attach, AttachPoint};

    fn iface(index: u32, name: &str, addrs: &[&str]) -> NodeInterface {
        NodeInterface {
            index,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, index as u8]),
            macvlan_lower: None,
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            master: None,
            wire: true,
        }
    }

    fn topology(holders: Vec<NodeInterface>) -> Topology {
        Topology {
            hooks: vec![AttachPoint {
                ifindex: 5,
                ifname: "br0".into(),
                hook: Hook::Ingress,
                attach: Attach::Tcx,
            }],
            deliver_ifindex: 9,
            deliver: Hook::Egress,
            holders,
            bridge: Some(5),
            pod_takes_xdp: false,
        }
    }

    fn pod(ips: &[&str]) -> PodSide {
        PodSide { ips: ips.iter().map(|a| a.parse().unwrap()).collect(), mac: [0x0a, 0x58, 0, 0, 0, 7] }
    }

    fn mapping(host: u16, container: u16, protocol: Protocol, host_ip: Option<&str>) -> PortMapping {
        PortMapping {
            host_port: host,
            container_port: container,
            protocol,
            host_ip: host_ip.map(|s| s.parse().unwrap()),
        }
    }

    #[test]
    fn one_entry_per_family_with_the_address_in_the_pods_subnet() {
        let holders = vec![iface(5, "br0", &["192.0.2.1/24", "10.77.0.1/24", "fd00:77::1/64"])];
        let entries = plan(
            "ns/net",
            &[mapping(8080, 80, Protocol::Tcp, None)],
            &pod(&["10.77.0.5/24", "fd00:77::5/64"]),
            &topology(holders),
        )
        .unwrap();
        let text: Vec<String> = entries.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["10.77.0.1:8080/tcp -> 10.77.0.5:80/tcp", "[fd00:77::1]:8080/tcp -> [fd00:77::5]:80/tcp"]
        );
        assert_eq!(entries[0].host_mac, "02:00:00:00:00:05");
        assert_eq!(entries[0].pod_mac, "0a:58:00:00:00:07");
        let fwd = entries[0].forward();
        assert_eq!(fwd.ifindex, 9);
        assert!(entries[0].via_bridge, "the bridge holds the host IP");
        assert_eq!(fwd.flags, DELIVER_BRIDGE, "delivered on the veth's transmit path, through the bridge");
        assert_eq!(u16::from_be(fwd.port_be), 80);
        assert_eq!(words_addr(&fwd.addr), "10.77.0.5".parse::<IpAddr>().unwrap());
        assert_eq!(words_addr(&entries[1].host_endpoint().addr), "fd00:77::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn requests_are_redirected_in_xdp_only_through_the_bridge_to_a_pod_that_takes_xdp_frames() {
        let bridge = iface(5, "br0", &["10.77.0.1/24"]);
        let other = iface(6, "eth0", &["192.0.2.1/24"]);
        let mut t = topology(vec![bridge, other]);
        let plan_with = |t: &Topology, host_ip: &str| {
            plan("ns/net", &[mapping(8080, 80, Protocol::Udp, Some(host_ip))], &pod(&["10.77.0.5/24"]), t)
                .unwrap()
                .remove(0)
        };
        let e = plan_with(&t, "10.77.0.1");
        assert!(!e.xdp_redirect);
        assert_eq!(e.forward().flags, DELIVER_BRIDGE, "the pod's veth does not take XDP frames");

        t.pod_takes_xdp = true;
        let e = plan_with(&t, "10.77.0.1");
        assert!(e.xdp_redirect);
        assert_eq!(e.forward().flags, DELIVER_BRIDGE | DELIVER_XDP_REDIRECT);
        let e = plan_with(&t, "192.0.2.1");
        assert!(!e.via_bridge && !e.xdp_redirect, "a host IP not the bridge's: no XDP at all");
        assert_eq!(e.forward().flags, 0);

        // A record written before the field existed: through the bridge.
        let mut old = serde_json::to_value(plan_with(&t, "10.77.0.1")).unwrap();
        old.as_object_mut().unwrap().remove("xdp_redirect");
        let old: Entry = serde_json::from_value(old).unwrap();
        assert_eq!(old.forward().flags, DELIVER_BRIDGE);
    }

    #[test]
    fn later_holders_are_used_when_the_first_has_no_address_of_the_family() {
        let holders = vec![iface(3, "eth1", &[]), iface(7, "mvhost", &["10.78.0.1/24"])];
        let entries =
            plan("n", &[mapping(53, 53, Protocol::Udp, None)], &pod(&["10.78.0.9/24"]), &topology(holders))
                .unwrap();
        assert_eq!(entries[0].host_ip, "10.78.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(entries[0].host_mac, "02:00:00:00:00:07");
        // Another interface than the bridge holds the host IP: XDP on the bridge's uplinks
        // leaves its requests alone.
        assert!(!entries[0].via_bridge);
        assert_eq!(entries[0].forward().flags, 0);
    }

    #[test]
    fn a_network_without_host_address_cannot_offer_mappings() {
        let err = plan(
            "ns/net",
            &[mapping(1, 2, Protocol::Tcp, None)],
            &pod(&["10.0.0.2/24"]),
            &topology(vec![iface(3, "eth1", &["fd00::1/64"])]),
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::NoHostAddress { family: "IPv4", .. }), "{err}");
        assert!(err.to_string().contains("eth1"), "{err}");
    }

    #[test]
    fn host_ip_must_be_the_networks_and_of_the_pods_family() {
        let t = topology(vec![iface(5, "br0", &["10.77.0.1/24"])]);
        let p = pod(&["10.77.0.5/24"]);
        let ok = plan("n", &[mapping(1, 2, Protocol::Tcp, Some("10.77.0.1"))], &p, &t).unwrap();
        assert_eq!(ok.len(), 1);
        let err = plan("n", &[mapping(1, 2, Protocol::Tcp, Some("192.0.2.9"))], &p, &t).unwrap_err();
        assert!(matches!(err, PlanError::ForeignHostIp { .. }), "{err}");
        let err = plan("n", &[mapping(1, 2, Protocol::Tcp, Some("fd00::1"))], &p, &t).unwrap_err();
        assert!(matches!(err, PlanError::NoPodAddress { .. }), "{err}");
    }

    #[test]
    fn a_host_endpoint_mapped_twice_is_refused() {
        let t = topology(vec![iface(5, "br0", &["10.77.0.1/24"])]);
        let p = pod(&["10.77.0.5/24"]);
        let twice = [mapping(8080, 80, Protocol::Tcp, None), mapping(8080, 81, Protocol::Tcp, None)];
        assert!(matches!(plan("n", &twice, &p, &t), Err(PlanError::DuplicateHost { .. })));
        let other_protocol = [mapping(8080, 80, Protocol::Tcp, None), mapping(8080, 80, Protocol::Udp, None)];
        assert_eq!(plan("n", &other_protocol, &p, &t).unwrap().len(), 2);
    }

    #[test]
    fn two_host_ports_may_map_to_one_container_port() {
        // Each flow remembers the host port it came in on, so replies are not ambiguous.
        let t = topology(vec![iface(5, "br0", &["10.77.0.1/24", "fd00:77::1/64"])]);
        let p = pod(&["10.77.0.5/24", "fd00:77::5/64"]);
        let same_pod_port = [mapping(8080, 80, Protocol::Tcp, None), mapping(8081, 80, Protocol::Tcp, None)];
        let entries = plan("n", &same_pod_port, &p, &t).unwrap();
        let text: Vec<String> = entries.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "10.77.0.1:8080/tcp -> 10.77.0.5:80/tcp",
                "[fd00:77::1]:8080/tcp -> [fd00:77::5]:80/tcp",
                "10.77.0.1:8081/tcp -> 10.77.0.5:80/tcp",
                "[fd00:77::1]:8081/tcp -> [fd00:77::5]:80/tcp",
            ]
        );
        assert_eq!(entries[0].forward(), entries[2].forward(), "one pod endpoint behind both");
    }

    #[test]
    fn addresses_round_trip_through_map_words() {
        for ip in ["10.1.2.3", "fd00::1", "::ffff:10.0.0.1", "::1"] {
            let ip: IpAddr = ip.parse().unwrap();
            let expected = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            };
            assert_eq!(words_addr(&addr_words(ip)), expected);
        }
    }
}
