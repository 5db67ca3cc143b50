//! nf_tables messages as the kernel reads them: a netlink header, the nfgenmsg header, then
//! attributes (type-length-value, 4-byte aligned, nested ones flagged NLA_F_NESTED), numbers in
//! network byte order as nf_tables wants them. Built by hand: nothing here does I/O.

/// The nf_tables subsystem of nfnetlink, in the high byte of a message type.
const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub(super) const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
pub(super) const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNETLINK_V0: u8 = 0;

pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
pub(super) const NLM_F_DUMP: u16 = 0x300;
const NLM_F_APPEND: u16 = 0x800;
const NLM_F_CREATE: u16 = 0x400;
const NLA_F_NESTED: u16 = 0x8000;

pub(super) const NLMSG_HDRLEN: usize = 16;
/// nlmsghdr + nfgenmsg.
pub(super) const HEADERS_LEN: usize = NLMSG_HDRLEN + 4;

/// The nf_tables message types this layer sends or reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum MessageType {
    NewTable = 0,
    NewChain = 3,
    GetChain = 4,
    DelChain = 5,
    NewRule = 6,
    DelRule = 8,
}

impl MessageType {
    pub(super) fn code(self) -> u16 {
        (NFNL_SUBSYS_NFTABLES << 8) | self as u16
    }

    /// What a message of this type does, for error messages.
    pub(super) fn verb(self) -> &'static str {
        match self {
            MessageType::NewTable => "creating table",
            MessageType::NewChain => "creating chain",
            MessageType::GetChain => "listing chains",
            MessageType::DelChain => "deleting chain",
            MessageType::NewRule => "adding a rule",
            MessageType::DelRule => "deleting the rules of chain",
        }
    }
}

/// The address families of nf_tables tables (NFPROTO_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Family {
    /// `inet`: IPv4 and IPv6 together.
    Inet = 1,
    /// `bridge`: frames crossing a bridge.
    Bridge = 7,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Bridge => "bridge",
        }
    }
}

/// Attributes being written into a buffer; nested ones are closed by [`Attributes::nest`].
#[derive(Debug, Default)]
pub struct Attributes {
    bytes: Vec<u8>,
}

impl Attributes {
    pub fn new() -> Attributes {
        Attributes::default()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn header(&mut self, kind: u16, payload: usize) {
        let len = u16::try_from(4 + payload).unwrap_or(u16::MAX);
        self.bytes.extend_from_slice(&len.to_ne_bytes());
        self.bytes.extend_from_slice(&kind.to_ne_bytes());
    }

    fn pad(&mut self) {
        while self.bytes.len() % 4 != 0 {
            self.bytes.push(0);
        }
    }

    /// An attribute holding `value` as it is.
    pub fn raw(&mut self, kind: u16, value: &[u8]) -> &mut Attributes {
        self.header(kind, value.len());
        self.bytes.extend_from_slice(value);
        self.pad();
        self
    }

    /// A NUL-terminated string.
    pub fn string(&mut self, kind: u16, value: &str) -> &mut Attributes {
        self.header(kind, value.len() + 1);
        self.bytes.extend_from_slice(value.as_bytes());
        self.bytes.push(0);
        self.pad();
        self
    }

    /// A 32-bit number in network byte order (nf_tables' NLA_BE32).
    pub fn be32(&mut self, kind: u16, value: u32) -> &mut Attributes {
        self.raw(kind, &value.to_be_bytes())
    }

    /// A nested attribute whose content `fill` writes.
    pub fn nest(&mut self, kind: u16, fill: impl FnOnce(&mut Attributes)) -> &mut Attributes {
        let mut inner = Attributes::new();
        fill(&mut inner);
        self.header(kind | NLA_F_NESTED, inner.bytes.len());
        self.bytes.extend_from_slice(&inner.bytes);
        self
    }
}

/// How a message asks the kernel to treat what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Created unless it exists (nft's `add`), or a plain request.
    Create,
    /// A rule appended at the end of its chain.
    Append,
    /// A deletion or a query.
    Plain,
}

impl Mode {
    fn flags(self) -> u16 {
        match self {
            Mode::Create => NLM_F_CREATE,
            Mode::Append => NLM_F_CREATE | NLM_F_APPEND,
            Mode::Plain => 0,
        }
    }
}

/// One nf_tables message of a batch, before it is given a sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: MessageType,
    pub family: Family,
    pub mode: Mode,
    /// The attributes, already encoded.
    pub attributes: Vec<u8>,
    /// What the message is about ("inet plexus masq-..."), for error messages.
    pub subject: String,
}

impl Message {
    /// The message's bytes with sequence number `seq`, and NLM_F_ACK when `ack`.
    pub fn encode(&self, seq: u32, ack: bool) -> Vec<u8> {
        let mut flags = NLM_F_REQUEST | self.mode.flags();
        if ack {
            flags |= NLM_F_ACK;
        }
        encode(self.kind.code(), flags, seq, self.family as u8, 0, &self.attributes)
    }
}

/// A netlink header, an nfgenmsg header and the attributes.
pub(super) fn encode(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16, attributes: &[u8]) -> Vec<u8> {
    let len = HEADERS_LEN + attributes.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.push(family);
    out.push(NFNETLINK_V0);
    out.extend_from_slice(&res_id.to_be_bytes());
    out.extend_from_slice(attributes);
    out
}

/// A batch as the kernel takes it: BATCH_BEGIN, the messages (sequence numbers from `first_seq`
/// on, each acknowledged), BATCH_END. All of it is applied, or none of it.
pub fn batch(messages: &[Message], first_seq: u32) -> Vec<u8> {
    let mut out = encode(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, first_seq, 0, NFNL_SUBSYS_NFTABLES, &[]);
    for (i, message) in messages.iter().enumerate() {
        out.extend(message.encode(first_seq.wrapping_add(1 + i as u32), true));
    }
    let end_seq = first_seq.wrapping_add(1 + messages.len() as u32);
    out.extend(encode(NFNL_MSG_BATCH_END, NLM_F_REQUEST, end_seq, 0, NFNL_SUBSYS_NFTABLES, &[]));
    out
}

/// One attribute read back from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attribute<'a> {
    /// Its type, NLA_F_NESTED and NLA_F_NET_BYTEORDER cleared.
    pub kind: u16,
    pub value: &'a [u8],
}

/// The attributes in `bytes`, in order; a truncated tail ends the list.
pub fn attributes(bytes: &[u8]) -> Vec<Attribute<'_>> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([rest[0], rest[1]]));
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & 0x3fff;
        if len < 4 || len > rest.len() {
            break;
        }
        out.push(Attribute { kind, value: &rest[4..len] });
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..).unwrap_or_default();
    }
    out
}

/// A NUL-terminated string attribute's text.
pub fn string_of(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_aligned_and_nested_ones_flagged() {
        let mut attrs = Attributes::new();
        attrs.string(1, "plexus").be32(2, 0).nest(4, |n| {
            n.be32(1, 4).be32(2, 100);
        });
        assert_eq!(
            attrs.bytes(),
            [
                11, 0, 1, 0, b'p', b'l', b'e', b'x', b'u', b's', 0, 0, // name, padded
                8, 0, 2, 0, 0, 0, 0, 0, // flags
                20, 0, 4, 0x80, 8, 0, 1, 0, 0, 0, 0, 4, 8, 0, 2, 0, 0, 0, 0, 100,
            ]
        );
        let read = attributes(attrs.bytes());
        assert_eq!(read.len(), 3);
        assert_eq!(string_of(read[0].value), "plexus");
        assert_eq!(read[2].kind, 4, "the nested flag is not part of the type");
        assert_eq!(attributes(read[2].value).len(), 2);
    }

    #[test]
    fn a_truncated_attribute_ends_the_list() {
        assert!(attributes(&[200, 0, 1, 0, 1]).is_empty());
        assert!(attributes(&[2, 0, 1, 0]).is_empty(), "shorter than its own header");
    }

    #[test]
    fn a_batch_is_framed_and_numbered() {
        let message = Message {
            kind: MessageType::DelChain,
            family: Family::Inet,
            mode: Mode::Plain,
            attributes: vec![],
            subject: String::new(),
        };
        let bytes = batch(&[message.clone(), message], 7);
        assert_eq!(bytes.len(), 4 * HEADERS_LEN);
        let seqs: Vec<u32> =
            bytes.chunks(HEADERS_LEN).map(|m| u32::from_ne_bytes([m[8], m[9], m[10], m[11]])).collect();
        assert_eq!(seqs, [7, 8, 9, 10]);
        let kinds: Vec<u16> = bytes.chunks(HEADERS_LEN).map(|m| u16::from_ne_bytes([m[4], m[5]])).collect();
        assert_eq!(kinds, [0x10, 0x0a05, 0x0a05, 0x11]);
        // Begin and end name the subsystem in res_id, big-endian; the messages ask for acks.
        assert_eq!(&bytes[18..20], &[0, 10]);
        assert_eq!(u16::from_ne_bytes([bytes[26], bytes[27]]), NLM_F_REQUEST | NLM_F_ACK);
    }
}
