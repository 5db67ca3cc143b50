//! CHECK: the reference's `validateCniBrInterface`, `validateCniContainerInterface` and
//! `validateCniVethInterface`, then the addresses and routes of the previous result.

use serde_json::Value;

use super::{parse, Bridge, BridgeConf, BridgeError, Mismatch};
use crate::cni::result::{CniResult, Interface};
use crate::cni::ErrorCode;
use crate::delegate::InvocationEnv;
use crate::native::invocation::pod_of;
use crate::netlink::{verify_ips, verify_routes, LinkSnapshot, Netlink};

/// CHECK: the bridge, the pod's veth and its peer on the bridge, then the previous result's
/// addresses and routes; IPAM is asked first.
pub(super) async fn run(plugin: &Bridge, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
    let conf = parse(config)?;
    conf.settings(&env.args)?;
    let pod = pod_of(env)?;
    if conf.is_layer3() {
        plugin.ipam.check(config, env).await.map_err(BridgeError::delegate)?;
    }
    let prev = match config.get("prevResult") {
        None | Some(Value::Null) => {
            return Err(BridgeError::config("Required prevResult missing: CHECK needs the result of the ADD"))
        }
        Some(prev) => CniResult::parse(prev, &conf.cni_version)
            .map_err(|e| BridgeError::new(ErrorCode::DecodeFailure, format!("prevResult: {e}")))?,
    };
    let node = Netlink::agent()?;
    let pod_ns = Netlink::pod(pod.netns).await?;
    let sandbox = pod.netns.display().to_string();
    let bridge_entry = prev.interfaces.iter().find(|i| i.name == conf.bridge);
    let pod_entry = prev
        .interfaces
        .iter()
        .find(|i| i.name == pod.ifname && i.sandbox.as_deref() == Some(sandbox.as_str()));
    let bridge = verify_bridge(&node, bridge_entry, &conf).await?;
    let Some(pod_entry) = pod_entry else {
        return Err(Mismatch::Sandbox { found: String::new(), wanted: sandbox }.into());
    };
    let pod_link = verify_pod_veth(&pod_ns, pod_entry).await?;
    let mut host_found = false;
    for entry in prev.interfaces.iter().filter(|i| i.name != conf.bridge && i.name != pod_entry.name) {
        if verify_host_veth(&node, entry, &bridge, &pod_link).await? {
            host_found = true;
            break;
        }
    }
    if !host_found {
        return Err(Mismatch::NoHostVeth(conf.bridge.clone()).into());
    }
    verify_ips(&pod_ns, pod.ifname, &prev.ips).await?;
    verify_routes(&pod_ns, &prev.routes).await?;
    Ok(())
}

/// CHECK of the bridge: `validateCniBrInterface`.
async fn verify_bridge(
    node: &Netlink,
    entry: Option<&Interface>,
    conf: &BridgeConf,
) -> Result<LinkSnapshot, BridgeError> {
    let Some(entry) = entry else {
        return Err(Mismatch::NoBridge(conf.bridge.clone()).into());
    };
    let link = node.link(&entry.name).await?.ok_or_else(|| Mismatch::Missing(entry.name.clone()))?;
    if !link.is_bridge() {
        return Err(Mismatch::NotBridge(entry.name.clone()).into());
    }
    if let Some(mac) = &entry.mac {
        if !same_mac(link.mac.as_deref(), mac) {
            return Err(Mismatch::BridgeMac { name: entry.name.clone(), wanted: mac.clone() }.into());
        }
    }
    if link.promiscuous() != conf.promisc_mode {
        return Err(Mismatch::Promisc {
            name: entry.name.clone(),
            wanted: conf.promisc_mode,
            found: link.promiscuous(),
        }
        .into());
    }
    Ok(link)
}

/// CHECK of the pod's end: `validateCniContainerInterface`.
async fn verify_pod_veth(pod_ns: &Netlink, entry: &Interface) -> Result<LinkSnapshot, BridgeError> {
    let link = pod_ns.link(&entry.name).await?.ok_or_else(|| Mismatch::Missing(entry.name.clone()))?;
    if !link.is_veth() {
        return Err(Mismatch::NotVeth(entry.name.clone()).into());
    }
    if let Some(mac) = &entry.mac {
        if !same_mac(link.mac.as_deref(), mac) {
            let found = link.mac.clone().unwrap_or_default();
            return Err(Mismatch::PodMac { name: entry.name.clone(), wanted: mac.clone(), found }.into());
        }
    }
    Ok(link)
}

/// CHECK of one more interface of prevResult: whether it is the host end, the pod end's peer
/// and a port of the bridge (`validateCniVethInterface`); anything else is skipped.
async fn verify_host_veth(
    node: &Netlink,
    entry: &Interface,
    bridge: &LinkSnapshot,
    pod_link: &LinkSnapshot,
) -> Result<bool, BridgeError> {
    if entry.sandbox.is_some() {
        return Ok(false);
    }
    let link = node.link(&entry.name).await?.ok_or_else(|| Mismatch::Missing(entry.name.clone()))?;
    let ours = link.is_veth()
        && pod_link.parent_index == Some(link.index)
        && link.parent_index == Some(pod_link.index)
        && link.master == Some(bridge.index);
    if !ours {
        return Ok(false);
    }
    if let Some(mac) = &entry.mac {
        if !same_mac(link.mac.as_deref(), mac) {
            return Err(Mismatch::HostMac { name: entry.name.clone(), wanted: mac.clone() }.into());
        }
    }
    Ok(true)
}

pub(super) fn same_mac(found: Option<&str>, wanted: &str) -> bool {
    found.is_some_and(|f| f.eq_ignore_ascii_case(wanted))
}
