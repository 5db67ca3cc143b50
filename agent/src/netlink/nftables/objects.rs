//! The messages that make and remove tables, chains and rules, as `nft` writes them for
//! `add table`, `add chain` (a base chain with a comment), `add rule ... comment`, `flush chain`
//! and `delete chain`.

use super::expr::{encode_all, Expr};
use super::message::{Attributes, Family, Message, MessageType, Mode};

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_TABLE_FLAGS: u16 = 2;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_POLICY: u16 = 5;
const NFTA_CHAIN_TYPE: u16 = 7;
pub(super) const NFTA_CHAIN_USERDATA: u16 = 12;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_RULE_USERDATA: u16 = 7;
/// NFTNL_UDATA_*_COMMENT: the TLV type of a comment in userdata.
const UDATA_COMMENT: u8 = 0;
/// nft's limit on a comment (NFTNL_UDATA_COMMENT_MAXLEN), NUL included.
pub const COMMENT_MAX: usize = 128;

/// The hooks plexus's base chains attach to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// NF_INET_PRE_ROUTING (and NF_BR_PRE_ROUTING, the same number).
    Prerouting = 0,
    /// NF_INET_POST_ROUTING.
    Postrouting = 4,
}

/// The kind of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    Filter,
    Nat,
}

impl ChainType {
    fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// A base chain: attached to a hook, policy accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain<'a> {
    pub family: Family,
    pub table: &'a str,
    pub name: &'a str,
    pub kind: ChainType,
    pub hook: Hook,
    pub priority: i32,
    /// Shown by `nft list` as the chain's comment (at most [`COMMENT_MAX`] - 1 bytes).
    pub comment: &'a str,
}

/// `add table <family> <name>`: created unless it exists (the kernel creates a table without
/// NLM_F_CREATE, and nft sends none).
pub fn new_table(family: Family, name: &str) -> Message {
    let mut attrs = Attributes::new();
    attrs.string(NFTA_TABLE_NAME, name).be32(NFTA_TABLE_FLAGS, 0);
    Message {
        kind: MessageType::NewTable,
        family,
        mode: Mode::Plain,
        attributes: attrs.bytes().to_vec(),
        subject: format!("{} {name}", family.name()),
    }
}

/// `add chain ... { type .. hook .. priority ..; policy accept; comment ".."; }`: created unless
/// it exists.
pub fn new_base_chain(chain: &BaseChain<'_>) -> Message {
    let mut attrs = Attributes::new();
    attrs
        .string(NFTA_CHAIN_TABLE, chain.table)
        .string(NFTA_CHAIN_NAME, chain.name)
        .string(NFTA_CHAIN_TYPE, chain.kind.name())
        .be32(NFTA_CHAIN_POLICY, 1)
        .nest(NFTA_CHAIN_HOOK, |hook| {
            hook.be32(NFTA_HOOK_HOOKNUM, chain.hook as u32).be32(NFTA_HOOK_PRIORITY, chain.priority as u32);
        })
        .raw(NFTA_CHAIN_USERDATA, &comment(chain.comment));
    Message {
        kind: MessageType::NewChain,
        family: chain.family,
        mode: Mode::Create,
        attributes: attrs.bytes().to_vec(),
        subject: subject(chain.family, chain.table, chain.name),
    }
}

/// `add rule <family> <table> <chain> <exprs> comment "<comment>"`, appended.
pub fn new_rule(family: Family, table: &str, chain: &str, exprs: &[Expr], comment_text: &str) -> Message {
    let mut attrs = Attributes::new();
    attrs
        .string(NFTA_RULE_TABLE, table)
        .string(NFTA_RULE_CHAIN, chain)
        .nest(NFTA_RULE_EXPRESSIONS, |list| encode_all(exprs, list))
        .raw(NFTA_RULE_USERDATA, &comment(comment_text));
    Message {
        kind: MessageType::NewRule,
        family,
        mode: Mode::Append,
        attributes: attrs.bytes().to_vec(),
        subject: subject(family, table, chain),
    }
}

/// `flush chain`: every rule of the chain deleted.
pub fn flush_chain(family: Family, table: &str, chain: &str) -> Message {
    let mut attrs = Attributes::new();
    attrs.string(NFTA_RULE_TABLE, table).string(NFTA_RULE_CHAIN, chain);
    Message {
        kind: MessageType::DelRule,
        family,
        mode: Mode::Plain,
        attributes: attrs.bytes().to_vec(),
        subject: subject(family, table, chain),
    }
}

/// `delete chain` (it must have no rules left: flush it first, in the same batch).
pub fn delete_chain(family: Family, table: &str, chain: &str) -> Message {
    let mut attrs = Attributes::new();
    attrs.string(NFTA_CHAIN_TABLE, table).string(NFTA_CHAIN_NAME, chain);
    Message {
        kind: MessageType::DelChain,
        family,
        mode: Mode::Plain,
        attributes: attrs.bytes().to_vec(),
        subject: subject(family, table, chain),
    }
}

/// A dump request for every chain of `family` (the kernel filters by family only).
pub fn list_chains(family: Family) -> Message {
    Message {
        kind: MessageType::GetChain,
        family,
        mode: Mode::Plain,
        attributes: Vec::new(),
        subject: family.name().to_owned(),
    }
}

fn subject(family: Family, table: &str, chain: &str) -> String {
    format!("{} {table} {chain}", family.name())
}

/// A comment as nft stores it in userdata: one TLV, the text NUL-terminated, cut to fit.
pub fn comment(text: &str) -> Vec<u8> {
    let mut end = text.len().min(COMMENT_MAX - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = vec![UDATA_COMMENT, (end + 1) as u8];
    out.extend_from_slice(&text.as_bytes()[..end]);
    out.push(0);
    out
}

/// The comment in a userdata blob, if it has one.
pub fn comment_of(userdata: &[u8]) -> Option<String> {
    let mut rest = userdata;
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], usize::from(rest[1]));
        let value = rest.get(2..2 + len)?;
        if kind == UDATA_COMMENT {
            return Some(super::message::string_of(value));
        }
        rest = &rest[2 + len..];
    }
    None
}
