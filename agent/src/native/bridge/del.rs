//! DEL and GC: what an attachment made goes, and nothing that is not its own.

use serde_json::Value;

use super::{guards, nft, owner, parse, Bridge, BridgeError};
use crate::cni::attachment::valid_attachments;
use crate::delegate::InvocationEnv;
use crate::native::invocation::pod_for_del;
use crate::netlink::{LinkSnapshot, Netlink};

/// DEL: the pod's veth, IPAM's addresses and the attachment's chains; the bridge stays.
pub(super) async fn run(plugin: &Bridge, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
    let conf = parse(config)?;
    // Every part runs even when one fails, so a retry has as little left to do as possible.
    let removed = remove_link(env).await;
    let released = if conf.is_layer3() {
        plugin.ipam.del(config, env).await.map_err(BridgeError::delegate)
    } else {
        Ok(())
    };
    let mut unguarded = Ok(());
    for guard in guards(&conf) {
        if let Err(e) = nft::remove(&owner(&conf, env), guard).await {
            unguarded = Err(BridgeError::internal_msg(format!("failed to remove {guard:?} rules: {e}")));
        }
    }
    removed.and(released).and(unguarded)
}

/// GC: the network's nftables chains that no valid attachment owns go.
pub(super) async fn gc(config: &Value) -> Result<(), BridgeError> {
    let conf = parse(config)?;
    if guards(&conf).is_empty() {
        return Ok(());
    }
    let removed = nft::collect(&conf.name, &valid_attachments(config))
        .await
        .map_err(|e| BridgeError::internal_msg(format!("GC of the nftables chains: {e}")))?;
    if removed > 0 {
        tracing::info!(network = %conf.name, "GC removed {removed} nftables chains of gone attachments");
    }
    Ok(())
}

/// Deletes the attachment's veth, if it is there and a veth (its host end goes with it).
async fn remove_link(env: &InvocationEnv) -> Result<(), BridgeError> {
    let Some(pod_ns) = pod_for_del(env).await? else {
        return Ok(());
    };
    let Some(link) = pod_ns.link(&env.ifname).await? else {
        return Ok(());
    };
    if is_bridged_veth(&link).await? {
        return pod_ns.delete_soon(&link).await.map_err(BridgeError::from);
    }
    tracing::warn!(
        "not deleting {} in {}: it is a {} interface whose peer is no bridge port of this node, not the veth \
         a bridge attachment made",
        link.name,
        env.netns,
        link.kind.map_or("plain".to_owned(), |k| k.to_string())
    );
    Ok(())
}

/// Whether the pod's `link` is a veth whose peer is on the node, enslaved to a bridge there.
async fn is_bridged_veth(link: &LinkSnapshot) -> Result<bool, BridgeError> {
    let (true, Some(peer), Some(_)) = (link.is_veth(), link.parent_index, link.parent_netnsid) else {
        return Ok(false);
    };
    let node = Netlink::agent()?;
    let Some(host) = node.link_by_index(peer).await? else {
        return Ok(false);
    };
    if !host.is_veth() || host.parent_index != Some(link.index) {
        return Ok(false);
    }
    Ok(match host.master {
        Some(master) => node.link_by_index(master).await?.is_some_and(|m| m.is_bridge()),
        None => false,
    })
}
