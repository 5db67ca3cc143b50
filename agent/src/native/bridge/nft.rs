//! The bridge's nftables rules: `ipMasq` and `macspoofchk` as the reference bridge plugin
//! (v1.1.1) applies them, made over netlink ([`crate::netlink::nftables`]) instead of by
//! iptables and nft.
//!
//! Each attachment gets base chains of its own in a table `plexus`, named after the attachment
//! (a hash of its container ID and interface) and commented "<network> <container ID>
//! <interface>", so DEL removes them by name with no listing, and GC finds the ones of its
//! network that no valid attachment owns:
//!
//! - `ipMasq`: chain `masq-<id>` in `inet plexus`, type nat, hook postrouting, priority srcnat
//!   (100): one rule per pod address, `ip saddr <pod> ip daddr != <pod's subnet> ip daddr !=
//!   224.0.0.0/4 masquerade` (IPv6: `ff00::/8`). The reference's `CNI-<id>` chain does the same
//!   in two rules (traffic to the subnet accepted, everything else but multicast masqueraded).
//!   NAT chains run in priority order until one of them sets up NAT, so the chains of other
//!   pods do not see past a pod's own rule;
//! - `macspoofchk`: chain `spoof-<id>` in `bridge plexus`, type filter, hook prerouting,
//!   priority -300 (the reference's): `iifname <host veth> ether saddr != <pod's MAC> drop`,
//!   the reference's three chains in one rule.

use ipnet::IpNet;
use nix::errno::Errno;

use crate::cni::attachment::AttachmentKey;
use crate::netlink::nftables::{
    self, delete_chain, flush_chain, new_base_chain, new_rule, new_table, BaseChain, ChainInfo, ChainType,
    CmpOp, Expr, Family, Hook, Message, MetaKey, NftError, PayloadBase, Verdict,
};
use crate::netlink::Mac;

/// The table (in both families) plexus's bridge chains live in.
pub const TABLE: &str = "plexus";

/// A kind of per-attachment chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    Masquerade,
    SpoofCheck,
}

impl Guard {
    pub const ALL: [Guard; 2] = [Guard::Masquerade, Guard::SpoofCheck];

    fn prefix(self) -> &'static str {
        match self {
            Guard::Masquerade => "masq-",
            Guard::SpoofCheck => "spoof-",
        }
    }

    pub fn family(self) -> Family {
        match self {
            Guard::Masquerade => Family::Inet,
            Guard::SpoofCheck => Family::Bridge,
        }
    }

    fn base_chain<'a>(self, name: &'a str, comment: &'a str) -> BaseChain<'a> {
        let (kind, hook, priority) = match self {
            Guard::Masquerade => (ChainType::Nat, Hook::Postrouting, 100),
            Guard::SpoofCheck => (ChainType::Filter, Hook::Prerouting, -300),
        };
        BaseChain { family: self.family(), table: TABLE, name, kind, hook, priority, comment }
    }
}

/// Whose chains these are.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    pub network: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
}

impl Owner<'_> {
    /// The chain's name: fixed length whatever the container ID's (FNV-1a, 64 bits).
    pub fn chain(&self, guard: Guard) -> String {
        chain_name(guard, self.container_id, self.ifname)
    }

    /// The chain's comment, which `nft list` shows and GC reads the network from.
    pub fn comment(&self) -> String {
        format!("{} {} {}", self.network, self.container_id, self.ifname)
    }
}

/// The name of the chain of kind `guard` of an attachment.
pub fn chain_name(guard: Guard, container_id: &str, ifname: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}{hash:016x}", guard.prefix())
}

/// The batch that makes (or remakes) the attachment's masquerading chain for its addresses;
/// empty when no address has anything to masquerade.
pub fn masquerade_batch(owner: &Owner<'_>, addresses: &[IpNet]) -> Vec<Message> {
    let rules: Vec<Vec<Expr>> = addresses.iter().filter_map(|a| masquerade_rule(*a)).collect();
    if rules.is_empty() {
        return Vec::new();
    }
    let name = owner.chain(Guard::Masquerade);
    let comment = owner.comment();
    let mut batch = vec![
        new_table(Family::Inet, TABLE),
        new_base_chain(&Guard::Masquerade.base_chain(&name, &comment)),
        // Whatever an interrupted ADD left in it goes.
        flush_chain(Family::Inet, TABLE, &name),
    ];
    batch.extend(rules.iter().map(|rule| new_rule(Family::Inet, TABLE, &name, rule, &comment)));
    batch
}

/// `ip saddr <address> ip daddr != <its subnet> ip daddr != <multicast> masquerade`; None
/// for a /0, whose subnet is everything.
pub fn masquerade_rule(address: IpNet) -> Option<Vec<Expr>> {
    if address.prefix_len() == 0 {
        return None;
    }
    let (nfproto, source_offset, destination_offset, multicast): (u8, u32, u32, IpNet) = match address {
        IpNet::V4(_) => (2, 12, 16, "224.0.0.0/4".parse().ok()?),
        IpNet::V6(_) => (10, 8, 24, "ff00::/8".parse().ok()?),
    };
    let host = address_bytes(address.addr());
    let mut rule = vec![
        Expr::Meta(MetaKey::NfProto),
        Expr::Cmp { op: CmpOp::Eq, data: vec![nfproto] },
        Expr::Payload { base: PayloadBase::NetworkHeader, offset: source_offset, len: host.len() as u32 },
        Expr::Cmp { op: CmpOp::Eq, data: host },
    ];
    rule.extend(outside(destination_offset, address.trunc()));
    rule.extend(outside(destination_offset, multicast));
    rule.push(Expr::Masquerade);
    Some(rule)
}

/// "The address at `offset` is not in `net`", as nft writes it: whole bytes of the prefix
/// compared when it ends on a byte, else the whole address masked.
fn outside(offset: u32, net: IpNet) -> Vec<Expr> {
    let bytes = address_bytes(net.network());
    let prefix = usize::from(net.prefix_len());
    if prefix % 8 == 0 {
        let len = prefix / 8;
        return vec![
            Expr::Payload { base: PayloadBase::NetworkHeader, offset, len: len as u32 },
            Expr::Cmp { op: CmpOp::Neq, data: bytes[..len].to_vec() },
        ];
    }
    let mask = address_bytes(net.netmask());
    vec![
        Expr::Payload { base: PayloadBase::NetworkHeader, offset, len: bytes.len() as u32 },
        Expr::Bitwise { xor: vec![0; mask.len()], mask },
        Expr::Cmp { op: CmpOp::Neq, data: bytes },
    ]
}

fn address_bytes(address: std::net::IpAddr) -> Vec<u8> {
    match address {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The batch that makes (or remakes) the attachment's spoof check: frames from `host_veth`
/// (the pod's traffic entering the bridge) whose source MAC is not `mac` are dropped.
pub fn spoof_check_batch(owner: &Owner<'_>, host_veth: &str, mac: Mac) -> Vec<Message> {
    let name = owner.chain(Guard::SpoofCheck);
    let comment = owner.comment();
    let mut ifname = [0u8; 16];
    for (slot, byte) in ifname.iter_mut().zip(host_veth.bytes()) {
        *slot = byte;
    }
    let rule = [
        Expr::Meta(MetaKey::IifName),
        Expr::Cmp { op: CmpOp::Eq, data: ifname.to_vec() },
        Expr::Payload { base: PayloadBase::LinkHeader, offset: 6, len: 6 },
        Expr::Cmp { op: CmpOp::Neq, data: mac.0.to_vec() },
        Expr::Immediate(Verdict::Drop),
    ];
    vec![
        new_table(Family::Bridge, TABLE),
        new_base_chain(&Guard::SpoofCheck.base_chain(&name, &comment)),
        flush_chain(Family::Bridge, TABLE, &name),
        new_rule(Family::Bridge, TABLE, &name, &rule, &comment),
    ]
}

/// The batch that removes one chain with its rules.
fn removal_batch(guard: Guard, name: &str) -> Vec<Message> {
    vec![flush_chain(guard.family(), TABLE, name), delete_chain(guard.family(), TABLE, name)]
}

/// Applies a batch made above.
pub async fn apply(batch: Vec<Message>) -> Result<(), NftError> {
    nftables::apply(batch).await
}

/// Removes the attachment's chain of kind `guard`; a chain (or table) that is not there is
/// fine.
pub async fn remove(owner: &Owner<'_>, guard: Guard) -> Result<(), NftError> {
    remove_chain(guard, &owner.chain(guard)).await
}

/// Removes the chain `name` of kind `guard`; a chain (or table) that is not there is fine.
pub async fn remove_chain(guard: Guard, name: &str) -> Result<(), NftError> {
    match nftables::apply(removal_batch(guard, name)).await {
        Err(e) if e.is(Errno::ENOENT) => Ok(()),
        other => other,
    }
}

/// The chains among `chains` (of kind `guard`) that belong to `network` and to no attachment
/// of `valid`.
pub fn orphans(guard: Guard, chains: &[ChainInfo], network: &str, valid: &[AttachmentKey]) -> Vec<String> {
    let owned: std::collections::HashSet<String> =
        valid.iter().map(|key| chain_name(guard, &key.container_id, &key.ifname)).collect();
    chains
        .iter()
        .filter(|chain| chain.name.starts_with(guard.prefix()) && !owned.contains(&chain.name))
        .filter(|chain| chain.comment.as_deref().and_then(|c| c.split(' ').next()) == Some(network))
        .map(|chain| chain.name.clone())
        .collect()
}

/// The chains of kind `guard` there are; none when the table is not there.
pub async fn chains(guard: Guard) -> Result<Vec<ChainInfo>, NftError> {
    match nftables::chains(guard.family(), TABLE).await {
        Err(e) if e.is(Errno::ENOENT) => Ok(Vec::new()),
        other => other,
    }
}

/// GC: removes the chains of `network` that no attachment of `valid` owns. Returns how many.
pub async fn collect(network: &str, valid: &[AttachmentKey]) -> Result<usize, NftError> {
    let mut removed = 0;
    for guard in Guard::ALL {
        let chains = chains(guard).await?;
        for name in orphans(guard, &chains, network, valid) {
            remove_chain(guard, &name).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::nftables::tests::{as_nft_sends, nft_sent};

    fn owner<'a>(container_id: &'a str, ifname: &'a str) -> Owner<'a> {
        Owner { network: "net", container_id, ifname }
    }

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    /// nft -f of
    /// `add rule inet plexus masq-abc ip saddr 10.30.0.2 ip daddr != 10.30.0.0/24 ip daddr != 224.0.0.0/4 masquerade comment "net c1 eth0"`
    /// `add rule inet plexus masq-abc ip6 saddr fd40::5 ip6 daddr != fd40::/64 ip6 daddr != ff00::/8 masquerade comment "net c1 eth0"`
    #[test]
    fn masquerading_rules_are_what_nft_sends_for_the_references_rules() {
        let sent = nft_sent(include_str!("../../netlink/nftables/captures/masquerade.hex"));
        for (address, captured) in [("10.30.0.2/24", &sent[2]), ("fd40::5/64", &sent[3])] {
            let rule = masquerade_rule(net(address)).unwrap();
            let message = new_rule(Family::Inet, TABLE, "masq-abc", &rule, "net c1 eth0");
            assert_eq!(&as_nft_sends(&message), captured, "{address}");
        }
    }

    /// nft -f of
    /// `add rule bridge plexus spoof-abc iifname "veth0123abcd" ether saddr != 0a:58:0a:1e:00:02 drop comment "net c1 net1"`
    #[test]
    fn the_spoof_check_rule_is_what_nft_sends() {
        let sent = nft_sent(include_str!("../../netlink/nftables/captures/spoofcheck.hex"));
        let batch =
            spoof_check_batch(&owner("c1", "net1"), "veth0123abcd", Mac([0x0a, 0x58, 0x0a, 0x1e, 0, 2]));
        let rule = batch.last().unwrap();
        let name = owner("c1", "net1").chain(Guard::SpoofCheck);
        // The same bytes but for the chain's name.
        let mut expected = sent[2].clone();
        let ours = as_nft_sends(rule);
        let from = b"spoof-abc\0".to_vec();
        let to = format!("{name}\0").into_bytes();
        expected.2 = replace_attribute(&expected.2, &from, &to);
        assert_eq!(ours, expected);
    }

    /// `bytes` with the string attribute holding `from` rewritten to hold `to` (its length and
    /// padding adjusted).
    fn replace_attribute(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = bytes.windows(from.len()).position(|w| w == from).expect("the attribute") - 4;
        let old_len = (usize::from(u16::from_ne_bytes([bytes[at], bytes[at + 1]])) + 3) & !3;
        let mut out = bytes[..at].to_vec();
        let mut attribute = crate::netlink::nftables::message::Attributes::new();
        attribute.raw(u16::from_ne_bytes([bytes[at + 2], bytes[at + 3]]), to);
        out.extend_from_slice(attribute.bytes());
        out.extend_from_slice(&bytes[at + old_len..]);
        out
    }

    #[test]
    fn prefixes_off_a_byte_boundary_are_masked_as_nft_does() {
        // ip daddr != 10.30.0.0/20: the whole address loaded, masked, compared.
        let rule = masquerade_rule(net("10.30.0.2/20")).unwrap();
        assert_eq!(
            rule[4..7],
            [
                Expr::Payload { base: PayloadBase::NetworkHeader, offset: 16, len: 4 },
                Expr::Bitwise { mask: vec![255, 255, 240, 0], xor: vec![0; 4] },
                Expr::Cmp { op: CmpOp::Neq, data: vec![10, 30, 0, 0] },
            ]
        );
        // A /32 compares the whole address; a /0 masquerades nothing.
        let host = masquerade_rule(net("10.30.0.2/32")).unwrap();
        assert_eq!(host[5], Expr::Cmp { op: CmpOp::Neq, data: vec![10, 30, 0, 2] });
        assert_eq!(masquerade_rule(net("10.30.0.2/0")), None);
        let v6 = masquerade_rule(net("fd40::5/60")).unwrap();
        assert_eq!(v6[4], Expr::Payload { base: PayloadBase::NetworkHeader, offset: 24, len: 16 });
    }

    #[test]
    fn a_masquerading_batch_remakes_the_chain_and_is_empty_without_addresses() {
        let batch = masquerade_batch(&owner("c1", "eth0"), &[net("10.1.0.5/24"), net("fd00::5/64")]);
        let kinds: Vec<_> = batch.iter().map(|m| m.kind).collect();
        use crate::netlink::nftables::message::MessageType::*;
        assert_eq!(kinds, [NewTable, NewChain, DelRule, NewRule, NewRule]);
        assert!(masquerade_batch(&owner("c1", "eth0"), &[]).is_empty());
        assert!(masquerade_batch(&owner("c1", "eth0"), &[net("10.0.0.1/0")]).is_empty());
    }

    #[test]
    fn chain_names_are_per_attachment_and_of_fixed_length() {
        let a = owner("c1", "eth0").chain(Guard::Masquerade);
        assert!(a.starts_with("masq-") && a.len() == 21, "{a}");
        assert_ne!(a, owner("c1", "net1").chain(Guard::Masquerade));
        assert_ne!(
            owner("c1x", "eth").chain(Guard::Masquerade),
            owner("c1", "xeth").chain(Guard::Masquerade)
        );
        assert_eq!(a, owner("c1", "eth0").chain(Guard::Masquerade), "stable");
        let long = "f".repeat(500);
        assert_eq!(owner(&long, "eth0").chain(Guard::SpoofCheck).len(), 22);
        assert_eq!(owner("c1", "eth0").comment(), "net c1 eth0");
    }

    #[test]
    fn orphans_are_the_networks_chains_no_valid_attachment_owns() {
        let chain = |guard: Guard, network: &str, cid: &str| ChainInfo {
            table: TABLE.into(),
            name: chain_name(guard, cid, "eth0"),
            comment: Some(format!("{network} {cid} eth0")),
        };
        let chains = [
            chain(Guard::Masquerade, "net", "live"),
            chain(Guard::Masquerade, "net", "gone"),
            chain(Guard::Masquerade, "other", "gone2"),
            chain(Guard::SpoofCheck, "net", "gone3"),
            ChainInfo { table: TABLE.into(), name: "masq-handmade".into(), comment: None },
        ];
        let valid = [AttachmentKey::new("live", "eth0")];
        assert_eq!(
            orphans(Guard::Masquerade, &chains, "net", &valid),
            [chain_name(Guard::Masquerade, "gone", "eth0")]
        );
        assert_eq!(
            orphans(Guard::SpoofCheck, &chains, "net", &valid),
            [chain_name(Guard::SpoofCheck, "gone3", "eth0")]
        );
        assert!(orphans(
            Guard::Masquerade,
            &chains,
            "net",
            &[AttachmentKey::new("gone", "eth0"), valid[0].clone()]
        )
        .is_empty());
    }
}
