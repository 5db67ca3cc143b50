use std::net::IpAddr;
use std::path::PathBuf;

use crate::cni::{CniCode, ErrorCode};
use crate::netlink::{LinkError, NamespaceError};

/// What went wrong inside a pod's network namespace, always naming the namespace path and,
/// where one is involved, the interface and gateway.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(transparent)]
    Namespace(#[from] NamespaceError),

    #[error(transparent)]
    Link(#[from] LinkError),

    #[error("interface {ifname} does not exist in network namespace {}", netns.display())]
    LinkNotFound { netns: PathBuf, ifname: String },

    #[error("cannot list the routes of network namespace {}: {source}", netns.display())]
    ListRoutes { netns: PathBuf, source: Box<rtnetlink::Error> },

    #[error("cannot remove route \"{route}\" in network namespace {}: {source}", netns.display())]
    DeleteRoute { netns: PathBuf, route: String, source: Box<rtnetlink::Error> },

    #[error("gateway {gateway} is not reachable through {ifname} in network namespace {}: {source}",
        netns.display())]
    GatewayUnreachable { netns: PathBuf, ifname: String, gateway: IpAddr, source: Box<rtnetlink::Error> },

    #[error("cannot add default route via {gateway} dev {ifname} in network namespace {}: {source}",
        netns.display())]
    AddRoute { netns: PathBuf, ifname: String, gateway: IpAddr, source: Box<rtnetlink::Error> },
}

/// What the attachment asks for cannot be done (no such interface, a gateway off its subnets):
/// the network's config is wrong. Anything else is the node's failure.
impl CniCode for NetnsError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            NetnsError::LinkNotFound { .. } | NetnsError::GatewayUnreachable { .. } => {
                ErrorCode::InvalidNetworkConfig
            }
            NetnsError::Namespace(e) => e.cni_code(),
            NetnsError::Link(e) => e.cni_code(),
            NetnsError::ListRoutes { .. } | NetnsError::DeleteRoute { .. } | NetnsError::AddRoute { .. } => {
                ErrorCode::Internal
            }
        }
    }
}
