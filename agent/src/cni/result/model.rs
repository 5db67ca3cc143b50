//! The canonical result: the CNI 1.1.0 shape, whatever version a result was read in.

use std::net::IpAddr;

use ipnet::IpNet;

/// A CNI result in the CNI 1.1.0 shape, whatever version it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CniResult {
    /// The version the result was read in; [`CniResult::to_version`] ignores it.
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    /// Kept as text: InfiniBand hardware addresses are 20 bytes, not 6.
    pub mac: Option<String>,
    /// CNI 1.1.0 only.
    pub mtu: Option<u32>,
    /// Netns path (or hypervisor id) for sandbox interfaces; `None` for host interfaces.
    pub sandbox: Option<String>,
    /// CNI 1.1.0 only.
    pub socket_path: Option<String>,
    /// CNI 1.1.0 only.
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with its prefix, host bits kept ("10.1.0.5/16").
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
    /// Index into [`CniResult::interfaces`]; 0.1.0/0.2.0 results cannot carry it.
    pub interface: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    /// The remaining fields are CNI 1.1.0 only.
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    /// True when no member carries information (libcni's `DNS.IsEmpty`).
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.as_deref().is_none_or(str::is_empty)
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

impl CniResult {
    /// Index of the first interface with a non-empty sandbox, if any.
    pub fn first_sandbox_interface(&self) -> Option<usize> {
        self.interfaces.iter().position(|i| i.sandbox.as_deref().is_some_and(|s| !s.is_empty()))
    }
}

pub(super) fn is_v4(net: &IpNet) -> bool {
    matches!(net, IpNet::V4(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::fixtures::iface;

    #[test]
    fn first_sandbox_interface_skips_host_interfaces_and_empty_sandboxes() {
        let result = CniResult {
            interfaces: vec![
                iface("br0", "00:11:22:33:44:55", None),
                iface("veth1", "55:44:33:22:11:11", Some("")),
                iface("eth0", "99:88:77:66:55:44", Some("/var/run/netns/blue")),
                iface("eth1", "99:88:77:66:55:45", Some("/var/run/netns/blue")),
            ],
            ..Default::default()
        };
        assert_eq!(result.first_sandbox_interface(), Some(2));
    }

    #[test]
    fn first_sandbox_interface_is_none_without_sandbox_interfaces() {
        assert_eq!(CniResult::default().first_sandbox_interface(), None);
        let host_only =
            CniResult { interfaces: vec![iface("br0", "00:11:22:33:44:55", None)], ..Default::default() };
        assert_eq!(host_only.first_sandbox_interface(), None);
    }

    #[test]
    fn dns_is_empty_ignores_an_empty_domain() {
        assert!(Dns::default().is_empty());
        assert!(Dns { domain: Some(String::new()), ..Default::default() }.is_empty());
        assert!(!Dns { options: vec!["ndots:1".into()], ..Default::default() }.is_empty());
    }
}
