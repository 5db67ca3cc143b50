//! The NETLINK_NETFILTER socket: a batch sent and every message's acknowledgement read back
//! (the first refusal wins), and a dump of chains.

use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nix::errno::Errno;

use super::message::{
    attributes, batch, string_of, Family, Message, HEADERS_LEN, NLMSG_HDRLEN, NLM_F_DUMP, NLM_F_REQUEST,
};
use super::objects::{comment_of, list_chains, NFTA_CHAIN_USERDATA};
use super::NftError;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RECEIVE_BUFFER: usize = 64 * 1024;

/// A chain as a dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    pub table: String,
    pub name: String,
    /// Its comment, when it has one.
    pub comment: Option<String>,
}

/// A socket in the calling thread's network namespace (the agent's threads never leave it).
pub struct Nftables {
    socket: Socket,
    next_seq: u32,
}

impl Nftables {
    pub fn open() -> Result<Nftables, NftError> {
        let action = "opening a netfilter netlink socket";
        let mut socket = Socket::new(NETLINK_NETFILTER).map_err(|e| NftError::io(action, e))?;
        socket.bind_auto().map_err(|e| NftError::io(action, e))?;
        // Acknowledgements without a copy of each request.
        socket.set_cap_ack(true).map_err(|e| NftError::io(action, e))?;
        Ok(Nftables { socket, next_seq: 1 })
    }

    /// Applies `messages` as one transaction: all of them or, on the first refusal, none.
    pub fn apply(&mut self, messages: &[Message]) -> Result<(), NftError> {
        if messages.is_empty() {
            return Ok(());
        }
        let first = self.next_seq;
        self.next_seq = first.wrapping_add(messages.len() as u32 + 2);
        let action_of = |seq: u32| {
            let index = seq.wrapping_sub(first).wrapping_sub(1) as usize;
            messages
                .get(index)
                .map_or_else(|| "applying a batch".to_owned(), |m| format!("{} {}", m.kind.verb(), m.subject))
        };
        let bytes = batch(messages, first);
        self.socket.send(&bytes, 0).map_err(|e| NftError::io("sending a batch", e))?;
        // The kernel handles the batch inside send: every answer is queued by now.
        let mut acknowledged = 0;
        let mut refusal = None;
        loop {
            let mut buffer = Vec::with_capacity(RECEIVE_BUFFER);
            match self.socket.recv(&mut buffer, libc::MSG_DONTWAIT) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(NftError::io("reading the batch's answers", e)),
            }
            for (kind, seq, payload) in split(&buffer) {
                if kind != NLMSG_ERROR {
                    continue;
                }
                match error_code(payload) {
                    Some(0) => acknowledged += 1,
                    Some(code) => {
                        refusal
                            .get_or_insert_with(|| NftError::errno(action_of(seq), Errno::from_raw(-code)));
                    }
                    None => return Err(NftError::garbled(action_of(seq), "a truncated acknowledgement")),
                }
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        if acknowledged < messages.len() {
            return Err(NftError::garbled(
                "applying a batch",
                &format!("the kernel acknowledged {acknowledged} of {} messages", messages.len()),
            ));
        }
        Ok(())
    }

    /// Every chain of `table` in `family`.
    pub fn chains(&mut self, family: Family, table: &str) -> Result<Vec<ChainInfo>, NftError> {
        let action = format!("listing the chains of {} {table}", family.name());
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        let request = list_chains(family);
        let bytes = super::message::encode(
            request.kind.code(),
            NLM_F_REQUEST | NLM_F_DUMP,
            seq,
            family as u8,
            0,
            &request.attributes,
        );
        self.socket.send(&bytes, 0).map_err(|e| NftError::io(action.clone(), e))?;
        let mut chains = Vec::new();
        loop {
            let mut buffer = Vec::with_capacity(RECEIVE_BUFFER);
            self.socket.recv(&mut buffer, 0).map_err(|e| NftError::io(action.clone(), e))?;
            for (kind, _, payload) in split(&buffer) {
                match kind {
                    NLMSG_DONE => return Ok(chains),
                    NLMSG_ERROR => match error_code(payload) {
                        Some(0) => {}
                        Some(code) => return Err(NftError::errno(action, Errno::from_raw(-code))),
                        None => return Err(NftError::garbled(action, "a truncated error")),
                    },
                    _ => {
                        if let Some(chain) = chain_of(payload) {
                            if chain.table == table {
                                chains.push(chain);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The netlink messages in `buffer`: type, sequence number, payload (after the netlink header).
fn split(buffer: &[u8]) -> Vec<(u16, u32, &[u8])> {
    let mut out = Vec::new();
    let mut rest = buffer;
    while rest.len() >= NLMSG_HDRLEN {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            break;
        }
        let kind = u16::from_ne_bytes([rest[4], rest[5]]);
        let seq = u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]);
        out.push((kind, seq, &rest[NLMSG_HDRLEN..len]));
        rest = rest.get((len + 3) & !3..).unwrap_or_default();
    }
    out
}

/// The (negative) errno of an NLMSG_ERROR payload; 0 for an acknowledgement.
fn error_code(payload: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(payload.get(..4)?.try_into().ok()?))
}

/// A NEWCHAIN message of a dump, read.
fn chain_of(payload: &[u8]) -> Option<ChainInfo> {
    let attrs = attributes(payload.get(HEADERS_LEN - NLMSG_HDRLEN..)?);
    let find = |kind: u16| attrs.iter().find(|a| a.kind == kind).map(|a| a.value);
    Some(ChainInfo {
        table: string_of(find(1)?),
        name: string_of(find(3)?),
        comment: find(NFTA_CHAIN_USERDATA).and_then(comment_of),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_split_by_their_lengths() {
        let mut buffer = Vec::new();
        for (kind, seq, error) in [(NLMSG_ERROR, 5u32, 0i32), (NLMSG_ERROR, 6, -17)] {
            buffer.extend_from_slice(&36u32.to_ne_bytes());
            buffer.extend_from_slice(&kind.to_ne_bytes());
            buffer.extend_from_slice(&0u16.to_ne_bytes());
            buffer.extend_from_slice(&seq.to_ne_bytes());
            buffer.extend_from_slice(&0u32.to_ne_bytes());
            buffer.extend_from_slice(&error.to_ne_bytes());
            buffer.extend_from_slice(&[0; 16]);
        }
        buffer.extend_from_slice(&[99, 0, 0]);
        let messages = split(&buffer);
        assert_eq!(messages.len(), 2, "the truncated tail is dropped");
        assert_eq!((messages[1].0, messages[1].1), (NLMSG_ERROR, 6));
        assert_eq!(error_code(messages[0].2), Some(0));
        assert_eq!(error_code(messages[1].2), Some(-17));
        assert_eq!(error_code(&[1, 2]), None);
    }
}
