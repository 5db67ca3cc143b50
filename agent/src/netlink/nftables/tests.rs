//! The messages against what `nft` 1.0.6 sent for the same commands (captured with
//! `strace -e trace=sendmsg -e write=all nft -f <file>`; the commands are in the capture
//! files' tests), and a batch applied to a real kernel.

use super::message::NLM_F_ACK;
use super::*;

/// The nf_tables messages of one nft batch, as captured: (type, flags, bytes after the
/// netlink header), one per line "tttt ffff hex...".
pub(crate) fn nft_sent(capture: &str) -> Vec<(u16, u16, Vec<u8>)> {
    capture
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let mut hex = || fields.next().expect("a capture line has three fields");
            let kind = u16::from_str_radix(hex(), 16).expect("type");
            let flags = u16::from_str_radix(hex(), 16).expect("flags");
            let body = hex();
            let bytes = (0..body.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&body[i..i + 2], 16).expect("hex byte"))
                .collect();
            (kind, flags, bytes)
        })
        .collect()
}

/// A message as nft would send it: type, flags without the acknowledgement nft does not ask
/// for, and the bytes after the netlink header.
pub(crate) fn as_nft_sends(message: &Message) -> (u16, u16, Vec<u8>) {
    let bytes = message.encode(1, false);
    let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
    let flags = u16::from_ne_bytes([bytes[6], bytes[7]]) & !NLM_F_ACK;
    (kind, flags, bytes[16..].to_vec())
}

/// `add table inet plexus` and
/// `add chain inet plexus masq-abc { type nat hook postrouting priority 100; policy accept; comment "net c1 eth0"; }`
#[test]
fn a_table_and_a_nat_base_chain_are_what_nft_sends() {
    let sent = nft_sent(include_str!("captures/masquerade.hex"));
    assert_eq!(as_nft_sends(&new_table(Family::Inet, "plexus")), sent[0]);
    let chain = BaseChain {
        family: Family::Inet,
        table: "plexus",
        name: "masq-abc",
        kind: ChainType::Nat,
        hook: Hook::Postrouting,
        priority: 100,
        comment: "net c1 eth0",
    };
    assert_eq!(as_nft_sends(&new_base_chain(&chain)), sent[1]);
}

/// `add table bridge plexus` and
/// `add chain bridge plexus spoof-abc { type filter hook prerouting priority -300; policy accept; comment "net c1 net1"; }`
#[test]
fn a_bridge_table_and_a_filter_base_chain_are_what_nft_sends() {
    let sent = nft_sent(include_str!("captures/spoofcheck.hex"));
    assert_eq!(as_nft_sends(&new_table(Family::Bridge, "plexus")), sent[0]);
    let chain = BaseChain {
        family: Family::Bridge,
        table: "plexus",
        name: "spoof-abc",
        kind: ChainType::Filter,
        hook: Hook::Prerouting,
        priority: -300,
        comment: "net c1 net1",
    };
    assert_eq!(as_nft_sends(&new_base_chain(&chain)), sent[1]);
}

/// `flush chain inet plexus masq-abc` and `delete chain inet plexus masq-abc`
#[test]
fn flushing_and_deleting_a_chain_are_what_nft_sends() {
    let sent = nft_sent(include_str!("captures/removal.hex"));
    assert_eq!(as_nft_sends(&flush_chain(Family::Inet, "plexus", "masq-abc")), sent[0]);
    assert_eq!(as_nft_sends(&delete_chain(Family::Inet, "plexus", "masq-abc")), sent[1]);
}

#[test]
fn comments_read_back_and_are_cut_to_nfts_limit() {
    assert_eq!(objects::comment_of(&objects::comment("net c1 eth0")).as_deref(), Some("net c1 eth0"));
    let long = "é".repeat(100);
    let stored = objects::comment(&long);
    assert!(stored.len() - 2 <= COMMENT_MAX, "{}", stored.len());
    let back = objects::comment_of(&stored).unwrap();
    assert!(long.starts_with(&back) && back.len() == 126, "cut on a character boundary");
    assert_eq!(objects::comment_of(&[1, 2, 0, 0]), None, "no comment TLV");
    assert_eq!(objects::comment_of(&[0, 9, b'x']), None, "truncated");
}

fn masquerade_chain<'a>(name: &'a str, comment: &'a str) -> BaseChain<'a> {
    BaseChain {
        family: Family::Inet,
        table: "plexus-test",
        name,
        kind: ChainType::Nat,
        hook: Hook::Postrouting,
        priority: 100,
        comment,
    }
}

#[tokio::test]
async fn kernel_a_batch_applies_whole_or_not_at_all_and_errors_keep_the_errno() {
    let ns = plexus_testkit::Netns::new("pxnft");
    let path = std::path::PathBuf::from(ns.path_str());
    let outcome = crate::netlink::run_in(&path, || {
        let mut nft = Nftables::open()?;
        let chain = masquerade_chain("masq-one", "net c1 eth0");
        let rule =
            [Expr::Meta(MetaKey::NfProto), Expr::Cmp { op: CmpOp::Eq, data: vec![2] }, Expr::Masquerade];
        nft.apply(&[
            new_table(Family::Inet, "plexus-test"),
            new_base_chain(&chain),
            new_rule(Family::Inet, "plexus-test", "masq-one", &rule, "net c1 eth0"),
        ])?;
        let listed = nft.chains(Family::Inet, "plexus-test")?;
        // A batch whose last message fails leaves nothing of its first ones.
        let second = masquerade_chain("masq-two", "net c2 eth0");
        let failed = nft
            .apply(&[new_base_chain(&second), delete_chain(Family::Inet, "plexus-test", "no-such-chain")])
            .expect_err("deleting a missing chain");
        let after = nft.chains(Family::Inet, "plexus-test")?;
        // Flushed and deleted in one batch, as nft's `flush chain` and `delete chain`.
        nft.apply(&[
            flush_chain(Family::Inet, "plexus-test", "masq-one"),
            delete_chain(Family::Inet, "plexus-test", "masq-one"),
        ])?;
        let last = nft.chains(Family::Inet, "plexus-test")?;
        Ok::<_, NftError>((listed, failed, after, last))
    })
    .await
    .expect("entering the namespace");
    let (listed, failed, after, last) = outcome.expect("the batches");
    assert_eq!(
        listed,
        [ChainInfo {
            table: "plexus-test".into(),
            name: "masq-one".into(),
            comment: Some("net c1 eth0".into())
        }]
    );
    assert!(failed.is(nix::errno::Errno::ENOENT), "{failed}");
    assert!(failed.to_string().contains("deleting chain inet plexus-test no-such-chain"), "{failed}");
    assert_eq!(after, listed, "masq-two was not made");
    assert!(last.is_empty(), "{last:?}");
}
