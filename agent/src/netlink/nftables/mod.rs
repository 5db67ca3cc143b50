//! nftables over netlink (NETLINK_NETFILTER), with no `nft` or `iptables` to exec: the
//! messages are built by hand ([`message`], [`expr`], [`objects`]) exactly as `nft` builds
//! them for the same commands (the tests compare the bytes with what nft 1.0.6 sent), and
//! applied in batches, which the kernel applies whole or not at all ([`Nftables::apply`]).
//! Refusals keep the kernel's errno ([`NftError`]).
//!
//! It works in the agent's own network namespace (the node's), where plexus's nftables
//! objects live; the async entry points ([`apply`], [`chains`]) run the socket on the
//! blocking pool, whose threads never change namespace.

mod error;
pub mod expr;
pub mod message;
pub mod objects;
mod socket;

#[cfg(test)]
pub(crate) mod tests;

pub use error::NftError;
pub use expr::{CmpOp, Expr, MetaKey, PayloadBase, Verdict};
pub use message::{Family, Message};
pub use objects::{
    delete_chain, flush_chain, new_base_chain, new_rule, new_table, BaseChain, ChainType, Hook, COMMENT_MAX,
};
pub use socket::{ChainInfo, Nftables};

/// Applies `messages` as one transaction in the agent's namespace.
pub async fn apply(messages: Vec<Message>) -> Result<(), NftError> {
    blocking(move || Nftables::open()?.apply(&messages)).await
}

/// The chains of `table` in `family`, in the agent's namespace.
pub async fn chains(family: Family, table: &str) -> Result<Vec<ChainInfo>, NftError> {
    let table = table.to_owned();
    blocking(move || Nftables::open()?.chains(family, &table)).await
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, NftError> + Send + 'static,
) -> Result<T, NftError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| NftError::io("running a netfilter request", std::io::Error::other(e.to_string())))?
}
