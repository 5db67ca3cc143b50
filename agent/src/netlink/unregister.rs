//! Deleting links, done when the kernel announces them gone.
//!
//! The kernel handles an RTM_DELLINK inside the sender's `sendmsg`: it unregisters the links
//! under RTNL and announces each (RTM_DELLINK to the RTNLGRP_LINK group), releases RTNL, and
//! then, still inside that `sendmsg`, waits for pending RCU callbacks (`rcu_barrier`) and for
//! the devices' last references before it acknowledges. That wait is about 20 ms of a link's
//! deletion on a small machine, and the links are already gone from every view during it.
//!
//! So a deletion here is sent from a blocking-pool thread (the wait blocks no runtime worker,
//! and so no other request), and it is done at whichever comes first: the announcement of
//! every link it deletes, or the acknowledgement (a refusal always comes as one).

use std::collections::BTreeSet;
use std::io;

use futures::channel::oneshot;
use netlink_packet_route::link::LinkMessage;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};
use nix::errno::Errno;
use rtnetlink::packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::error::errno_of;
use super::namespace::run_in;
use super::{LinkCause, LinkError, Netlink};

/// The RTNLGRP_LINK multicast group, as a bind mask.
const RTMGRP_LINK: u32 = 1;
const RECEIVE_BUFFER: usize = 64 * 1024;

/// How a deletion ended.
enum Outcome {
    /// The kernel acknowledged it, or announced every link gone first.
    Deleted,
    /// The kernel refused it.
    Refused(rtnetlink::Error),
}

/// A socket that hears of link changes, and one to send with: both opened in the namespace.
struct Sockets {
    watcher: Socket,
    sender: Socket,
}

impl Sockets {
    fn open() -> io::Result<Sockets> {
        let mut watcher = Socket::new(NETLINK_ROUTE)?;
        watcher.bind(&SocketAddr::new(0, RTMGRP_LINK))?;
        watcher.set_non_blocking(true)?;
        let mut sender = Socket::new(NETLINK_ROUTE)?;
        sender.bind_auto()?;
        // Acknowledgements without a copy of the request.
        sender.set_cap_ack(true)?;
        Ok(Sockets { watcher, sender })
    }
}

impl Netlink {
    /// Sends `request` (an RTM_DELLINK naming a link by index, or a device group) in this
    /// socket's namespace, expecting the links of `indexes` to go. Ok once each is announced
    /// gone, or the kernel acknowledged; Err with the kernel's refusal.
    pub(super) async fn unregister(
        &self,
        action: &str,
        request: LinkMessage,
        indexes: &[u32],
    ) -> Result<(), LinkError> {
        let sockets = match self.netns() {
            Some(netns) => run_in(netns, Sockets::open).await?,
            None => Sockets::open(),
        }
        .map_err(|e| self.socket_error(action, e))?;
        // SAFETY: the Socket owns its descriptor, open until the AsyncFd drops it, and its
        // as_raw_fd always returns that one.
        let watcher = unsafe { AsyncFd::register_with_interest(sockets.watcher, Interest::READABLE) }
            .map_err(|e| self.socket_error(action, e.into()))?;
        let bytes = delete_message(request);
        let (tx, acknowledged) = oneshot::channel();
        let sender = sockets.sender;
        tokio::task::spawn_blocking(move || {
            // The receiver is gone when the announcement came first; the answer is then moot.
            let _ = tx.send(send_and_wait(&sender, &bytes));
        });
        let outcome = announced_or_acknowledged(&watcher, acknowledged, indexes).await;
        match outcome {
            Ok(Outcome::Deleted) => Ok(()),
            Ok(Outcome::Refused(e)) => Err(self.error(action.to_owned(), e)),
            Err(e) => Err(self.socket_error(action, e)),
        }
    }

    fn socket_error(&self, action: &str, e: io::Error) -> LinkError {
        LinkError {
            action: action.to_owned(),
            place: self.place(),
            errno: e.raw_os_error().map(Errno::from_raw),
            cause: LinkCause::Socket(e),
        }
    }
}

/// Waits for the announcement of every link of `indexes` gone, or for the acknowledgement.
/// When the watcher falls behind (ENOBUFS) or fails, the acknowledgement alone decides.
async fn announced_or_acknowledged(
    watcher: &AsyncFd<Socket>,
    mut acknowledged: oneshot::Receiver<io::Result<Outcome>>,
    indexes: &[u32],
) -> io::Result<Outcome> {
    let mut remaining: BTreeSet<u32> = indexes.iter().copied().collect();
    let mut watching = !remaining.is_empty();
    loop {
        if !watching {
            return answer(acknowledged.await);
        }
        tokio::select! {
            answer_now = &mut acknowledged => return answer(answer_now),
            ready = watcher.readable() => {
                let mut guard = match ready {
                    Ok(guard) => guard,
                    Err(e) => {
                        tracing::debug!("watching link deletions: {e}; waiting for the acknowledgement");
                        watching = false;
                        continue;
                    }
                };
                match drain(watcher.get_ref(), &mut remaining) {
                    Ok(()) => guard.clear_ready(),
                    Err(e) => {
                        tracing::debug!("watching link deletions: {e}; waiting for the acknowledgement");
                        watching = false;
                    }
                }
                if remaining.is_empty() {
                    return Ok(Outcome::Deleted);
                }
            }
        }
    }
}

fn answer(received: Result<io::Result<Outcome>, oneshot::Canceled>) -> io::Result<Outcome> {
    received.unwrap_or_else(|_| Err(io::Error::other("the thread sending the deletion died")))
}

/// Reads every queued message of the watcher, striking the links announced deleted off
/// `remaining`; returns at WouldBlock.
fn drain(watcher: &Socket, remaining: &mut BTreeSet<u32>) -> io::Result<()> {
    loop {
        let mut buffer = Vec::with_capacity(RECEIVE_BUFFER);
        match watcher.recv(&mut buffer, 0) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
        for index in deleted_links(&buffer) {
            remaining.remove(&index);
        }
    }
}

/// The indexes of the links a datagram of link notifications announces deleted.
fn deleted_links(datagram: &[u8]) -> Vec<u32> {
    let mut deleted = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..]) else {
            break;
        };
        let length = message.header.length as usize;
        if let NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(link)) = message.payload {
            deleted.push(link.header.index);
        }
        if length == 0 {
            break;
        }
        offset += nlmsg_align(length);
    }
    deleted
}

fn nlmsg_align(length: usize) -> usize {
    (length + 3) & !3
}

fn delete_message(request: LinkMessage) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = 1;
    let mut message =
        NetlinkMessage::new(header, NetlinkPayload::from(RouteNetlinkMessage::DelLink(request)));
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    bytes
}

/// Sends the deletion and reads its acknowledgement: blocking, for the kernel's wait after
/// the unregistration happens inside the send.
fn send_and_wait(sender: &Socket, bytes: &[u8]) -> io::Result<Outcome> {
    sender.send(bytes, 0)?;
    loop {
        let mut buffer = Vec::with_capacity(RECEIVE_BUFFER);
        sender.recv(&mut buffer, 0)?;
        let mut offset = 0;
        while offset < buffer.len() {
            let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buffer[offset..])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            let length = message.header.length as usize;
            if let NetlinkPayload::Error(err) = message.payload {
                if err.code.is_none() {
                    return Ok(Outcome::Deleted);
                }
                let refusal = rtnetlink::Error::NetlinkError(err);
                // Gone already counts as deleted, as with every deletion of the layer.
                if matches!(errno_of(&refusal), Some(Errno::ENODEV)) {
                    return Ok(Outcome::Deleted);
                }
                return Ok(Outcome::Refused(refusal));
            }
            if length == 0 {
                break;
            }
            offset += nlmsg_align(length);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification(payload: RouteNetlinkMessage) -> Vec<u8> {
        let mut message = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(payload));
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        bytes
    }

    fn link(index: u32) -> LinkMessage {
        let mut link = LinkMessage::default();
        link.header.index = index;
        link
    }

    #[test]
    fn only_deletions_are_read_from_a_datagram_of_notifications() {
        let mut datagram = notification(RouteNetlinkMessage::NewLink(link(4)));
        datagram.extend(notification(RouteNetlinkMessage::DelLink(link(7))));
        datagram.extend(notification(RouteNetlinkMessage::DelLink(link(9))));
        assert_eq!(deleted_links(&datagram), vec![7, 9]);
        assert_eq!(deleted_links(&[]), Vec::<u32>::new());
        assert_eq!(deleted_links(&[1, 2, 3]), Vec::<u32>::new(), "garbage ends the reading");
    }

    #[test]
    fn the_request_is_a_dellink_asking_for_an_acknowledgement() {
        let bytes = delete_message(link(12));
        let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes).unwrap();
        assert_eq!(message.header.flags, NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(message.header.length as usize, bytes.len());
        assert!(
            matches!(message.payload, NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) if l.header.index == 12)
        );
    }
}
