//! ADD: the bridge made sure of, the veth pair in one request, the spoof check, IPAM, the pod's
//! sysctls, addresses and routes, the announcements, the gateways on the bridge and
//! masquerading. A failure undoes everything made for the pod.

use ipnet::IpNet;
use nix::errno::Errno;
use serde_json::Value;

use super::{
    address_plan, guards, nft, owner, parse, plan, AddressPlan, Bridge, BridgeConf, BridgeError, Settings,
};
use crate::cni::result::{CniResult, Interface};
use crate::delegate::InvocationEnv;
use crate::native::announce;
use crate::native::invocation::{output, pod_of, result_version, Pod};
use crate::netlink::{
    configure_ip, read_sysctl, run_in, temp_name, write_sysctl, LinkError, LinkSnapshot, Netlink, VethPair,
};

/// How many host veth names ADD tries when the random one is taken.
const VETH_NAME_ATTEMPTS: usize = 10;

/// What an ADD was called with.
#[derive(Clone, Copy)]
struct Call<'a> {
    conf: &'a BridgeConf,
    settings: &'a Settings,
    /// The config as received, for IPAM.
    config: &'a Value,
    env: &'a InvocationEnv,
    pod: &'a Pod<'a>,
}

/// The veth pair of an attachment, as created.
struct Pair {
    host: LinkSnapshot,
    pod: LinkSnapshot,
}

/// What an ADD works on once the pair exists: the node's and the pod's netlink, the bridge and
/// the pair.
#[derive(Clone, Copy)]
struct Links<'a> {
    node: &'a Netlink,
    pod_ns: &'a Netlink,
    bridge: &'a LinkSnapshot,
    pair: &'a Pair,
}

/// ADD; on failure everything made for the pod is undone (the bridge stays, as with the reference).
pub(super) async fn run(plugin: &Bridge, config: &Value, env: &InvocationEnv) -> Result<Value, BridgeError> {
    let conf = parse(config)?;
    let version = result_version(&conf.cni_version)?;
    let settings = conf.settings(&env.args)?;
    let pod = pod_of(env)?;
    let node = Netlink::agent()?;
    let pod_ns = Netlink::pod(pod.netns).await?;
    let bridge = ensure_bridge(&node, &conf, &settings).await?;
    let pair = create_pair(&node, &pod_ns, &pod, &bridge, &settings).await?;
    crate::failpoint::reached_in_request(crate::failpoint::Point::LinkCreated);
    let call = Call { conf: &conf, settings: &settings, config, env, pod: &pod };
    let links = Links { node: &node, pod_ns: &pod_ns, bridge: &bridge, pair: &pair };
    let outcome = match plugin.guard_and_attach(&call, links).await {
        Ok(result) => match output(&result, &version) {
            Ok(printed) => Ok(printed),
            // A layer-2 result has nothing to say in 0.1.0 or 0.2.0: undone like any failure.
            Err(failure) => {
                if conf.is_layer3() {
                    if let Err(e) = plugin.ipam.del(config, env).await {
                        tracing::warn!("releasing the addresses of a failed bridge ADD: {e}");
                    }
                }
                Err(failure.into())
            }
        },
        Err(failure) => Err(failure),
    };
    if outcome.is_err() {
        if let Err(e) = pod_ns.delete(&pair.pod).await {
            tracing::warn!("undoing a failed bridge ADD: {e}");
        }
        for guard in guards(&conf) {
            if let Err(e) = nft::remove(&owner(&conf, env), guard).await {
                tracing::warn!("undoing a failed bridge ADD: {e}");
            }
        }
    }
    outcome
}

impl Bridge {
    /// The spoof check on the pair's host end when asked for, then everything else; on failure
    /// the caller removes the pair and the chains.
    async fn guard_and_attach(&self, call: &Call<'_>, links: Links<'_>) -> Result<CniResult, BridgeError> {
        let pair = links.pair;
        if call.conf.mac_spoof_check {
            let mac = pair.pod.ethernet_mac().ok_or_else(|| {
                BridgeError::internal_msg(format!(
                    "the pod's interface {} has no Ethernet MAC",
                    pair.pod.name
                ))
            })?;
            let owner = owner(call.conf, call.env);
            nft::apply(nft::spoof_check_batch(&owner, &pair.host.name, mac))
                .await
                .map_err(|e| BridgeError::internal_msg(format!("failed to setup spoof-check: {e}")))?;
        }
        self.attach(call, links).await
    }

    /// Everything after the pair exists; on failure the caller deletes the pair, IPAM is
    /// released here, since only this knows whether it ran.
    async fn attach(&self, call: &Call<'_>, links: Links<'_>) -> Result<CniResult, BridgeError> {
        let Links { node, pod_ns, bridge, pair } = links;
        if call.settings.hairpin {
            node.set_hairpin(&pair.host).await?;
        }
        let mut result = CniResult {
            interfaces: vec![
                Interface { name: bridge.name.clone(), mac: bridge.mac.clone(), ..Default::default() },
                Interface { name: pair.host.name.clone(), mac: pair.host.mac.clone(), ..Default::default() },
                Interface {
                    name: pair.pod.name.clone(),
                    mac: pair.pod.mac.clone(),
                    sandbox: Some(call.pod.netns.display().to_string()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        if call.conf.is_layer3() {
            let assigned = self.ipam.add(call.config, call.env).await.map_err(BridgeError::delegate)?;
            if let Err(failure) = self.address(call, links, &mut result, assigned).await {
                if let Err(e) = self.ipam.del(call.config, call.env).await {
                    tracing::warn!("releasing the addresses of a failed bridge ADD: {e}");
                }
                return Err(failure);
            }
        } else {
            if !call.conf.disable_container_interface {
                pod_ns.set_up(&pair.pod).await?;
            }
            if !call.conf.dns.is_empty() {
                result.dns = call.conf.dns.clone();
            }
        }
        // The bridge's MAC changes when it takes its first port, unless it was set.
        let now = node.require(&bridge.name).await?;
        result.interfaces[0].mac = now.mac;
        Ok(result)
    }

    /// Layer 3: IPAM's answer into the result, the pod configured, the bridge's gateways.
    async fn address(
        &self,
        call: &Call<'_>,
        links: Links<'_>,
        result: &mut CniResult,
        assigned: CniResult,
    ) -> Result<(), BridgeError> {
        let Links { node, pod_ns, bridge, pair } = links;
        if assigned.ips.is_empty() {
            return Err(BridgeError::internal_msg(
                "IPAM plugin returned missing IP config: the network's \"ipam\" gave this pod no address",
            ));
        }
        result.ips = assigned.ips;
        result.routes = assigned.routes;
        // IPAM's DNS unless the config has its own (the current reference's rule).
        result.dns = if call.conf.dns.is_empty() { assigned.dns } else { call.conf.dns.clone() };
        let gateways = plan(result, call.settings.is_gateway, call.conf.is_default_gateway);
        pod_sysctls(call.pod, call.conf.enable_dad).await?;
        configure_ip(pod_ns, call.pod.ifname, result).await?;
        if let Some(mac) = pair.pod.ethernet_mac() {
            let addresses = result.ips.iter().map(|ip| ip.address.addr()).collect();
            for failure in announce::announce(call.pod.netns, pair.pod.index, mac, addresses).await {
                tracing::debug!(ifname = call.pod.ifname, "not announced: {failure}");
            }
        }
        if call.settings.is_gateway {
            for (family, wanted) in [(Family::V4, &gateways.v4), (Family::V6, &gateways.v6)] {
                for &gateway in wanted {
                    ensure_address(node, bridge, family, gateway, call.conf.force_address).await?;
                }
                if !wanted.is_empty() {
                    enable_forwarding(family)?;
                }
            }
        }
        if call.conf.ip_masq {
            let addresses: Vec<IpNet> = result.ips.iter().map(|ip| ip.address).collect();
            nft::apply(nft::masquerade_batch(&owner(call.conf, call.env), &addresses))
                .await
                .map_err(|e| BridgeError::internal_msg(format!("failed to set up IP masquerading: {e}")))?;
        }
        Ok(())
    }
}

/// The reference's `ensureBridge`: the bridge as it is once it exists, is promiscuous when asked
/// and is up; its IPv6 routes are the plugin's (`accept_ra` 0).
async fn ensure_bridge(
    node: &Netlink,
    conf: &BridgeConf,
    settings: &Settings,
) -> Result<LinkSnapshot, BridgeError> {
    let name = conf.bridge.as_str();
    if !crate::spec::validate::is_kernel_ifname(name) {
        return Err(BridgeError::config(format!(
            "\"bridge\" {name:?} is not a valid interface name: 1 to 15 bytes, no '/', ':' or white space"
        )));
    }
    let mut bridge = match node.link(name).await? {
        Some(link) => link,
        None => {
            node.create_bridge(name, settings.mtu)
                .await
                .map_err(|e| BridgeError::internal_msg(format!("failed to create bridge {name:?}: {e}")))?;
            node.require(name).await?
        }
    };
    if !bridge.is_bridge() {
        return Err(BridgeError::config(format!(
            "failed to create bridge {name:?}: {name:?} already exists but is not a bridge; set \"bridge\" to \
             another name or remove that interface"
        )));
    }
    if conf.promisc_mode && !bridge.promiscuous() {
        node.set_promiscuous(&bridge).await?;
    }
    if let Err(e) = write_sysctl(&["net", "ipv6", "conf", name, "accept_ra"], "0") {
        // Absent without IPv6, as for the reference, which ignores it too.
        tracing::debug!("net.ipv6.conf.{name}.accept_ra: {e}");
    }
    if !bridge.up {
        node.set_up(&bridge).await?;
        bridge.up = true;
    }
    Ok(bridge)
}

/// A host veth name as the reference makes them: "veth" and 8 random hex digits.
pub(super) fn veth_name() -> String {
    format!("veth{}", temp_name().trim_start_matches("plx"))
}

/// Creates the pair; returns both ends as created.
async fn create_pair(
    node: &Netlink,
    pod_ns: &Netlink,
    pod: &Pod<'_>,
    bridge: &LinkSnapshot,
    settings: &Settings,
) -> Result<Pair, BridgeError> {
    for _ in 0..VETH_NAME_ATTEMPTS {
        let host_name = veth_name();
        let pair = VethPair {
            host_name: &host_name,
            pod_name: pod.ifname,
            mtu: settings.mtu,
            pod_mac: settings.mac,
            bridge: bridge.index,
        };
        match node.create_veth_into(&pair, pod_ns).await {
            Ok(()) => {}
            Err(e) if e.is(Errno::EEXIST) => {
                if pod_ns.link(pod.ifname).await?.is_some() {
                    return Err(BridgeError::config(format!(
                        "container veth name ({:?}) peer provided ({host_name:?}) already exists: interface {} is \
                         taken in the pod's network namespace {}; give this attachment another interface name \
                         (\"interface\" in the networks annotation)",
                        pod.ifname,
                        pod.ifname,
                        pod.netns.display()
                    )));
                }
                // The host name was taken: another one.
                continue;
            }
            Err(e) => return Err(creation_failure(e, settings)),
        }
        let pod_end = pod_ns.require(pod.ifname).await?;
        let host = match node.require(&host_name).await {
            Ok(host) => host,
            Err(e) => {
                if let Err(undo) = pod_ns.delete(&pod_end).await {
                    tracing::warn!("undoing a failed bridge ADD: {undo}");
                }
                return Err(e.into());
            }
        };
        // The plugin owns the routes of the host end (its IPv6 router advertisements ignored).
        if let Err(e) = write_sysctl(&["net", "ipv6", "conf", &host_name, "accept_ra"], "0") {
            tracing::debug!("net.ipv6.conf.{host_name}.accept_ra: {e}");
        }
        return Ok(Pair { host, pod: pod_end });
    }
    Err(BridgeError::internal_msg("failed to find a unique veth name"))
}

/// The kernel's refusals of a new veth pair, with what to do about them.
fn creation_failure(e: LinkError, settings: &Settings) -> BridgeError {
    let hint = match e.errno {
        Some(Errno::EINVAL) if settings.mtu > 0 => {
            format!("; MTU {} may be out of the range veths take", settings.mtu)
        }
        Some(Errno::EADDRINUSE) | Some(Errno::EADDRNOTAVAIL) => match settings.mac {
            Some(mac) => format!("; MAC {mac} is not usable: request another"),
            None => String::new(),
        },
        _ => String::new(),
    };
    BridgeError::internal_msg(format!("failed to make veth pair: {e}{hint}"))
}

/// The pod interface's sysctls before it gets addresses, as the reference sets them.
async fn pod_sysctls(pod: &Pod<'_>, enable_dad: bool) -> Result<(), BridgeError> {
    let ifname = pod.ifname.to_owned();
    let outcome = run_in(pod.netns, move || {
        let v6 = |key: &str, value: &str| write_sysctl(&["net", "ipv6", "conf", &ifname, key], value);
        // Absent without IPv6; the reference ignores every one of these failures.
        let results = if enable_dad {
            [v6("enhanced_dad", "1"), v6("accept_dad", "1")]
        } else {
            [v6("accept_dad", "0"), Ok(())]
        };
        let notify = write_sysctl(&["net", "ipv4", "conf", &ifname, "arp_notify"], "1");
        for failure in results.into_iter().chain([notify]).filter_map(Result::err) {
            tracing::debug!("a sysctl of {ifname}: {failure}");
        }
    })
    .await;
    outcome.map_err(BridgeError::from)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// The reference's `ensureAddr`: `gateway` on the bridge, and the bridge's MAC pinned to the one
/// it had before this ADD added a port (so it stops following its ports').
async fn ensure_address(
    node: &Netlink,
    bridge: &LinkSnapshot,
    family: Family,
    gateway: IpNet,
    force: bool,
) -> Result<(), BridgeError> {
    let present: Vec<IpNet> = node
        .addresses(bridge)
        .await?
        .into_iter()
        .map(|a| a.address)
        .filter(|a| (family == Family::V6) == a.addr().is_ipv6())
        .collect();
    match address_plan(&present, gateway, force) {
        AddressPlan::Present => return Ok(()),
        AddressPlan::Conflict(other) => {
            return Err(BridgeError::config(format!(
                "failed to set bridge addr: {:?} already has an IP address different from {gateway} ({other}); set \
                 \"forceAddress\" to replace it, or use a subnet whose gateway is {other}",
                bridge.name
            )))
        }
        AddressPlan::Replace(remove) => {
            for address in remove {
                node.delete_address(bridge, address).await?;
            }
        }
    }
    match node.add_address(bridge, gateway).await {
        Err(e) if !e.is(Errno::EEXIST) => return Err(e.into()),
        _ => {}
    }
    if let Some(mac) = bridge.ethernet_mac() {
        node.set_mac(bridge, mac).await?;
    }
    Ok(())
}

/// IP forwarding on, as the reference's `enableIPForward` (the node's namespace).
fn enable_forwarding(family: Family) -> Result<(), BridgeError> {
    let key: &[&str] = match family {
        Family::V4 => &["net", "ipv4", "ip_forward"],
        Family::V6 => &["net", "ipv6", "conf", "all", "forwarding"],
    };
    if read_sysctl(key).is_ok_and(|v| v == "1") {
        return Ok(());
    }
    write_sysctl(key, "1").map_err(|e| {
        BridgeError::internal_msg(format!("failed to enable forwarding: setting {}: {e}", key.join(".")))
    })
}
