//! The nf_tables expressions plexus's rules are made of, encoded as `nft` encodes them (the
//! same attributes in the same order), working on register 1 and the verdict register.

use super::message::Attributes;

/// NFT_REG_VERDICT and NFT_REG_1 (the 16-byte registers, as nft uses them).
const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;

const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;

/// What `meta` loads (NFT_META_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    /// The input interface's name, 16 bytes (IFNAMSIZ), NUL-padded.
    IifName = 6,
    /// The packet's NFPROTO_* family (an inet table sees both).
    NfProto = 15,
}

/// Where `payload` loads from (NFT_PAYLOAD_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    LinkHeader = 0,
    NetworkHeader = 1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
}

/// A final verdict (NF_DROP, NF_ACCEPT; NFT_RETURN is negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Drop,
    Accept,
    Return,
}

impl Verdict {
    fn code(self) -> i32 {
        match self {
            Verdict::Drop => 0,
            Verdict::Accept => 1,
            Verdict::Return => -5,
        }
    }
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Loads a meta key into register 1.
    Meta(MetaKey),
    /// Loads `len` bytes at `offset` of a header into register 1.
    Payload { base: PayloadBase, offset: u32, len: u32 },
    /// Register 1 = (register 1 & mask) ^ xor, over the mask's length.
    Bitwise { mask: Vec<u8>, xor: Vec<u8> },
    /// Compares register 1 with `data`; the rule stops here unless it holds.
    Cmp { op: CmpOp, data: Vec<u8> },
    /// Source NAT to the address of the interface the packet leaves by.
    Masquerade,
    /// Sets the verdict.
    Immediate(Verdict),
}

impl Expr {
    fn name(&self) -> &'static str {
        match self {
            Expr::Meta(_) => "meta",
            Expr::Payload { .. } => "payload",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Cmp { .. } => "cmp",
            Expr::Masquerade => "masq",
            Expr::Immediate(_) => "immediate",
        }
    }

    fn data(&self, out: &mut Attributes) {
        match self {
            Expr::Meta(key) => {
                out.be32(2, *key as u32).be32(1, REG_1);
            }
            Expr::Payload { base, offset, len } => {
                out.be32(1, REG_1).be32(2, *base as u32).be32(3, *offset).be32(4, *len);
            }
            Expr::Bitwise { mask, xor } => {
                let len = u32::try_from(mask.len()).unwrap_or(u32::MAX);
                out.be32(1, REG_1).be32(2, REG_1).be32(3, len);
                out.nest(4, |m| {
                    m.raw(NFTA_DATA_VALUE, mask);
                });
                out.nest(5, |x| {
                    x.raw(NFTA_DATA_VALUE, xor);
                });
            }
            Expr::Cmp { op, data } => {
                out.be32(1, REG_1).be32(2, *op as u32).nest(3, |d| {
                    d.raw(NFTA_DATA_VALUE, data);
                });
            }
            Expr::Masquerade => {}
            Expr::Immediate(verdict) => {
                out.be32(1, REG_VERDICT).nest(2, |d| {
                    d.nest(NFTA_DATA_VERDICT, |v| {
                        v.be32(NFTA_VERDICT_CODE, verdict.code() as u32);
                    });
                });
            }
        }
    }
}

/// A rule's NFTA_RULE_EXPRESSIONS content: one list element per expression.
pub fn encode_all(exprs: &[Expr], out: &mut Attributes) {
    for expr in exprs {
        out.nest(NFTA_LIST_ELEM, |elem| {
            elem.string(NFTA_EXPR_NAME, expr.name()).nest(NFTA_EXPR_DATA, |data| expr.data(data));
        });
    }
}
