use std::net::IpAddr;
use std::path::PathBuf;

/// What went wrong inside a pod's network namespace, always naming the namespace path and,
/// where one is involved, the interface and gateway.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot use netlink in {}: not called from inside a tokio runtime", netns.display())]
    NoRuntime { netns: PathBuf },

    #[error("cannot open network namespace {}: {source}", netns.display())]
    Open { netns: PathBuf, source: std::io::Error },

    #[error("cannot enter network namespace {} (setns): {source}", netns.display())]
    Enter { netns: PathBuf, source: nix::Error },

    #[error("cannot open a netlink socket in network namespace {}: {source}", netns.display())]
    Socket { netns: PathBuf, source: std::io::Error },

    #[error("cannot start the thread that enters network namespace {}: {source}", netns.display())]
    Thread { netns: PathBuf, source: std::io::Error },

    #[error("the thread entering network namespace {} died before handing back a netlink socket", netns.display())]
    ThreadDied { netns: PathBuf },

    #[error("cannot list the interfaces of network namespace {}: {source}", netns.display())]
    ListLinks { netns: PathBuf, source: Box<rtnetlink::Error> },

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
