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

    // The route errors say what failed where themselves, and take only the kernel's answer
    // (`source.cause`) from the netlink layer's error, whose errno decided the variant. Boxed:
    // the netlink layer's error names its action and place too.
    #[error("cannot list the routes of network namespace {}: {}", netns.display(), source.cause)]
    ListRoutes { netns: PathBuf, source: Box<LinkError> },

    #[error("cannot remove route \"{route}\" in network namespace {}: {}", netns.display(), source.cause)]
    DeleteRoute { netns: PathBuf, route: String, source: Box<LinkError> },

    #[error("gateway {gateway} is not reachable through {ifname} in network namespace {}: {}",
        netns.display(), source.cause)]
    GatewayUnreachable { netns: PathBuf, ifname: String, gateway: IpAddr, source: Box<LinkError> },

    #[error("cannot add default route via {gateway} dev {ifname} in network namespace {}: {}",
        netns.display(), source.cause)]
    AddRoute { netns: PathBuf, ifname: String, gateway: IpAddr, source: Box<LinkError> },
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
