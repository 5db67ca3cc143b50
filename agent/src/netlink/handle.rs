//! [`Netlink`]: one rtnetlink socket bound to one network namespace, the agent's or a pod's.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use futures::StreamExt;
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::Handle;

use super::error::{errno_of, place_of, KernelError};
use super::namespace::socket_in;
use super::shared;
use super::{LinkCause, LinkError, NamespaceError};

/// An rtnetlink socket in one network namespace. The agent's is opened on the calling thread
/// (the agent's threads never change namespace); a pod's on a throwaway thread that entered
/// the pod ([`super::run_in`]) and then used from any task. Within a request, one per
/// namespace is shared by all ([`super::shared`]).
pub struct Netlink {
    handle: Handle,
    /// None: the agent's own namespace.
    netns: Option<PathBuf>,
}

impl fmt::Debug for Netlink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.place())
    }
}

impl Netlink {
    /// A socket in the agent's own namespace (the node's). Must be called inside the tokio
    /// runtime, which then drives the socket until the `Netlink` is dropped.
    pub fn agent() -> Result<Netlink, LinkError> {
        if let Some(handle) = shared::find(None) {
            return Ok(Netlink { handle, netns: None });
        }
        let (connection, handle, _unsolicited) = rtnetlink::new_connection().map_err(|e| LinkError {
            action: "opening a netlink socket".into(),
            place: place_of(None),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: LinkCause::Socket(e),
        })?;
        tokio::spawn(connection);
        shared::keep(None, &handle);
        Ok(Netlink { handle, netns: None })
    }

    /// A socket inside the network namespace at `netns` (a pod's, or a test's "node"); within
    /// a request, the one the request already has there ([`super::shared`]).
    pub async fn pod(netns: &Path) -> Result<Netlink, NamespaceError> {
        if let Some(handle) = shared::find(Some(netns)) {
            return Ok(Netlink { handle, netns: Some(netns.to_path_buf()) });
        }
        let handle = socket_in(netns).await?;
        shared::keep(Some(netns), &handle);
        Ok(Netlink { handle, netns: Some(netns.to_path_buf()) })
    }

    /// The agent's socket for None, else one inside the namespace at `netns`.
    pub async fn open(netns: Option<&Path>) -> Result<Netlink, LinkError> {
        match netns {
            None => Netlink::agent(),
            Some(path) => Ok(Netlink::pod(path).await?),
        }
    }

    /// The rtnetlink handle, for the layer's own requests: it never leaves `netlink/`.
    pub(super) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The namespace's path; None for the agent's own.
    pub fn netns(&self) -> Option<&Path> {
        self.netns.as_deref()
    }

    /// Where this socket works, for messages.
    pub fn place(&self) -> String {
        place_of(self.netns())
    }

    /// The kernel refused `action`.
    pub(super) fn error(&self, action: impl Into<String>, err: rtnetlink::Error) -> LinkError {
        LinkError {
            action: action.into(),
            place: self.place(),
            errno: errno_of(&err),
            cause: LinkCause::Kernel(KernelError::new(err)),
        }
    }

    /// An error of our own making (nothing the kernel said), with the same context.
    pub fn refuse(&self, action: impl Into<String>, errno: Errno, cause: impl Into<String>) -> LinkError {
        LinkError {
            action: action.into(),
            place: self.place(),
            errno: Some(errno),
            cause: LinkCause::Refused(cause.into()),
        }
    }

    /// A descriptor of this namespace, to hand to the kernel with IFLA_NET_NS_FD.
    pub fn open_netns(&self) -> std::io::Result<File> {
        // /proc/self is the thread group leader, which never changes namespace in the agent.
        File::open(self.netns().unwrap_or(Path::new("/proc/self/ns/net")))
    }

    /// Sends a request rtnetlink has no builder for (the caller sets NLM_F_REQUEST and
    /// NLM_F_ACK) and waits for the kernel's answer: Err with its errno when it refused.
    pub(super) async fn acknowledged(
        &self,
        message: NetlinkMessage<RouteNetlinkMessage>,
    ) -> Result<(), rtnetlink::Error> {
        let mut handle = self.handle.clone();
        let mut replies = handle.request(message)?;
        while let Some(reply) = replies.next().await {
            if let NetlinkPayload::Error(err) = reply.payload {
                if err.code.is_some() {
                    return Err(rtnetlink::Error::NetlinkError(err));
                }
            }
        }
        Ok(())
    }
}
