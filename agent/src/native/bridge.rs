//! The `bridge` plugin, run in the agent over netlink instead of exec'ing the reference binary,
//! with the reference's config, result and behaviour (containernetworking/plugins
//! plugins/main/bridge; the config is described in [`config`]):
//!
//! - ADD makes sure the bridge exists (created with the config's MTU; an existing one is used as
//!   it is, made promiscuous and up as the config says), then creates the veth pair in one
//!   netlink request: the host end up and already a port of the bridge, the pod end born in the
//!   pod's namespace under CNI_IFNAME, so nothing moves or is renamed. Then the port's hairpin
//!   mode, IPAM, the pod's
//!   addresses and routes (after its `accept_dad`/`arp_notify` sysctls), the announcements, and
//!   with `isGateway` the gateway addresses on the bridge and forwarding. Any failure undoes
//!   everything done for the pod (the veth pair deleted, IPAM released); the bridge stays, as
//!   with the reference.
//! - DEL deletes the pod's veth (its host end goes with it) and releases IPAM; a missing
//!   namespace or link is fine, and a link of that name that is not a veth whose peer is a
//!   bridge port of the node is left alone (it is not ours).
//! - CHECK verifies the bridge (type, MAC, promiscuous mode), the pod's veth and the host veth
//!   that is its peer and a port of the bridge, then the addresses and routes of the previous
//!   result, and asks IPAM.
//! - STATUS and GC only check that the config parses (the IPAM façade has neither).
//!
//! `ipMasq` and `macspoofchk` are nftables chains of the attachment's own, made over netlink
//! ([`nft`]): ADD makes them (the spoof check once the pair exists, masquerading once the pod has
//! its addresses; a failure undoes the ADD), DEL removes them by name, GC removes those of the
//! network that no valid attachment owns.
//!
//! Unlike the reference, ADD does not poll the host end's operational state for up to 2.5 s:
//! the port forwards as soon as both ends are up, which the one request and the pod's
//! configuration guarantee; the kernel's report of it (linkwatch) merely lags.
//!
//! A config asking for what is not done natively (`ipMasqBackend: "iptables"`, `portIsolation`,
//! VLANs: [`BridgeConf::needs_reference`]) is handed whole to the reference binary, for every
//! command, so its ADD and DEL stay consistent.

mod config;
mod error;
mod gateway;
pub mod nft;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use ipnet::IpNet;
use nix::errno::Errno;
use serde_json::Value;

pub use config::{BridgeConf, ConfigError, Settings, TrunkEntry, DEFAULT_BRIDGE};
pub use error::{BridgeError, Mismatch};
pub use gateway::{address_plan, plan, AddressPlan, Gateways, POD_INTERFACE};

use super::announce;
use crate::cni::attachment::valid_attachments;
use crate::cni::result::{is_supported_version, CniResult, Interface};
use crate::cni::{Command, ErrorCode};
use crate::delegate::exec::{self, Exec};
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::ipam::Ipam;
use crate::netlink::{
    configure_ip, netns_exists, read_sysctl, run_in, temp_name, verify_ips, verify_routes, write_sysctl,
    LinkError, LinkSnapshot, Netlink, VethPair,
};

/// The CNI `type` this plugin answers to.
pub const TYPE: &str = "bridge";

/// How many host veth names ADD tries when the random one is taken.
const VETH_NAME_ATTEMPTS: usize = 10;

/// The native bridge plugin; IPAM goes through the agent's IPAM façade, exactly as the
/// reference plugin would exec the IPAM binary.
pub struct Bridge {
    ipam: Ipam,
    /// Where the reference binary is, for the configs it serves.
    bin_dirs: Vec<PathBuf>,
    timeout: Duration,
    /// Whether the hand-off to the reference was logged already (once per agent).
    handed_off: AtomicBool,
}

impl Bridge {
    pub fn new(ipam: Ipam) -> Bridge {
        Bridge {
            bin_dirs: ipam.bin_dirs.clone(),
            timeout: ipam.timeout,
            ipam,
            handed_off: AtomicBool::new(false),
        }
    }
}

impl NativePlugin for Bridge {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        Box::pin(async move {
            if let Ok(Some(reason)) = BridgeConf::parse(call.config).map(|c| c.needs_reference()) {
                return self.hand_off(call, reason).await;
            }
            let outcome = match call.command {
                Command::Add => self.add(call.config, call.env).await.map(Some),
                Command::Del => self.del(call.config, call.env).await.map(|()| None),
                Command::Check => self.check(call.config, call.env).await.map(|()| None),
                Command::Status => parse(call.config).map(|_| None),
                Command::Gc => self.gc(call.config).await.map(|()| None),
                other => Err(BridgeError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("unknown CNI_COMMAND {:?}: use ADD, DEL, CHECK, STATUS or GC", other.as_str()),
                )),
            };
            outcome.map_err(|failure| failure.into_delegate_error(TYPE, call.command))
        })
    }
}

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

/// The pod side of an invocation, checked.
struct Pod<'a> {
    netns: &'a Path,
    ifname: &'a str,
}

/// The veth pair of an attachment, as created.
struct Pair {
    host: LinkSnapshot,
    pod: LinkSnapshot,
}

impl Bridge {
    /// Runs the reference binary for a config that asks for what is not done natively.
    async fn hand_off(&self, call: NativeCall<'_>, reason: &str) -> Result<Option<Value>, DelegateError> {
        if !self.handed_off.swap(true, Ordering::Relaxed) {
            tracing::info!(
                "a bridge config asks for {reason}, which plexus does not do natively: such configs run the \
                 reference bridge binary (logged once)"
            );
        }
        let env =
            if matches!(call.command, Command::Status | Command::Gc) { Vec::new() } else { call.env.vars() };
        let exec = Exec { plugin: TYPE, command: call.command, env, config: call.config };
        exec::run(&self.bin_dirs, exec, self.timeout).await
    }

    async fn add(&self, config: &Value, env: &InvocationEnv) -> Result<Value, BridgeError> {
        let conf = parse(config)?;
        let version = result_version(&conf)?;
        let settings = conf.settings(&env.args)?;
        let pod = pod_of(env)?;
        let node = Netlink::agent()?;
        let pod_ns = Netlink::pod(pod.netns).await?;
        let bridge = ensure_bridge(&node, &conf, &settings).await?;
        let pair = create_pair(&node, &pod_ns, &pod, &bridge, &settings).await?;
        crate::failpoint::reached_in_request(crate::failpoint::Point::LinkCreated);
        let call = Call { conf: &conf, settings: &settings, config, env, pod: &pod };
        let outcome = match self.guard_and_attach(&call, &node, &pod_ns, &bridge, &pair).await {
            Ok(result) => match output(&result, &version) {
                Ok(printed) => Ok(printed),
                // A layer-2 result has nothing to say in 0.1.0 or 0.2.0: undone like any failure.
                Err(failure) => {
                    if conf.is_layer3() {
                        if let Err(e) = self.ipam.del(config, env).await {
                            tracing::warn!("releasing the addresses of a failed bridge ADD: {e}");
                        }
                    }
                    Err(failure)
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

    /// The spoof check on the pair's host end when asked for, then everything else; on failure
    /// the caller removes the pair and the chains.
    async fn guard_and_attach(
        &self,
        call: &Call<'_>,
        node: &Netlink,
        pod_ns: &Netlink,
        bridge: &LinkSnapshot,
        pair: &Pair,
    ) -> Result<CniResult, BridgeError> {
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
        self.attach(call, node, pod_ns, bridge, pair).await
    }

    /// Everything after the pair exists; on failure the caller deletes the pair, IPAM is
    /// released here, since only this knows whether it ran.
    async fn attach(
        &self,
        call: &Call<'_>,
        node: &Netlink,
        pod_ns: &Netlink,
        bridge: &LinkSnapshot,
        pair: &Pair,
    ) -> Result<CniResult, BridgeError> {
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
            if let Err(failure) = self.address(call, node, pod_ns, bridge, pair, &mut result, assigned).await
            {
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
    #[allow(clippy::too_many_arguments)]
    async fn address(
        &self,
        call: &Call<'_>,
        node: &Netlink,
        pod_ns: &Netlink,
        bridge: &LinkSnapshot,
        pair: &Pair,
        result: &mut CniResult,
        assigned: CniResult,
    ) -> Result<(), BridgeError> {
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

    async fn del(&self, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
        let conf = parse(config)?;
        // Every part runs even when one fails, so a retry has as little left to do as possible.
        let removed = remove_link(env).await;
        let released = if conf.is_layer3() {
            self.ipam.del(config, env).await.map_err(BridgeError::delegate)
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
    async fn gc(&self, config: &Value) -> Result<(), BridgeError> {
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

    async fn check(&self, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
        let conf = parse(config)?;
        conf.settings(&env.args)?;
        let pod = pod_of(env)?;
        if conf.is_layer3() {
            self.ipam.check(config, env).await.map_err(BridgeError::delegate)?;
        }
        let prev = match config.get("prevResult") {
            None | Some(Value::Null) => {
                return Err(BridgeError::config(
                    "Required prevResult missing: CHECK needs the result of the ADD",
                ))
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
}

fn parse(config: &Value) -> Result<BridgeConf, BridgeError> {
    Ok(BridgeConf::parse(config)?)
}

/// The nftables chains the config asks for.
fn guards(conf: &BridgeConf) -> Vec<nft::Guard> {
    let mut guards = Vec::new();
    if conf.ip_masq {
        guards.push(nft::Guard::Masquerade);
    }
    if conf.mac_spoof_check {
        guards.push(nft::Guard::SpoofCheck);
    }
    guards
}

/// Whose chains an invocation's are.
fn owner<'a>(conf: &'a BridgeConf, env: &'a InvocationEnv) -> nft::Owner<'a> {
    nft::Owner { network: &conf.name, container_id: &env.container_id, ifname: &env.ifname }
}

/// The version the result is printed in: the config's.
fn result_version(conf: &BridgeConf) -> Result<String, BridgeError> {
    if !is_supported_version(&conf.cni_version) {
        return Err(BridgeError::new(
            ErrorCode::IncompatibleVersion,
            format!(
                "cniVersion {:?} is not supported; use one of {}",
                conf.cni_version,
                crate::cni::SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    Ok(conf.cni_version.clone())
}

fn pod_of(env: &InvocationEnv) -> Result<Pod<'_>, BridgeError> {
    let invalid = |msg: String| BridgeError::new(ErrorCode::InvalidEnvironment, msg);
    if env.netns.is_empty() {
        return Err(invalid(
            "CNI_NETNS is missing: the runtime must pass the pod's network namespace".into(),
        ));
    }
    if !crate::spec::validate::is_kernel_ifname(&env.ifname) {
        return Err(invalid(format!(
            "CNI_IFNAME {:?} is not a valid interface name: 1 to 15 bytes, no '/', ':' or white space",
            env.ifname
        )));
    }
    let netns = Path::new(&env.netns);
    if !netns_exists(netns) {
        return Err(BridgeError::new(
            ErrorCode::ContainerUnknown,
            format!("network namespace {} does not exist (the pod's sandbox is gone)", env.netns),
        ));
    }
    Ok(Pod { netns, ifname: &env.ifname })
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
fn veth_name() -> String {
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

/// The result as the config's version writes it. 0.1.0 and 0.2.0 results consist of IP
/// addresses, so a layer-2 attachment cannot answer in them.
fn output(result: &CniResult, version: &str) -> Result<Value, BridgeError> {
    result.to_version(version).map_err(|e| {
        BridgeError::new(
            ErrorCode::IncompatibleVersion,
            format!("{e}; use cniVersion 0.3.0 or later for this network"),
        )
    })
}

/// Deletes the attachment's veth, if it is there and a veth (its host end goes with it).
async fn remove_link(env: &InvocationEnv) -> Result<(), BridgeError> {
    let netns = Path::new(&env.netns);
    // No namespace (the runtime passes none, or the sandbox is gone): the link went with it.
    if env.netns.is_empty() || env.ifname.is_empty() || !netns_exists(netns) {
        return Ok(());
    }
    let pod_ns = Netlink::pod(netns).await?;
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

fn same_mac(found: Option<&str>, wanted: &str) -> bool {
    found.is_some_and(|f| f.eq_ignore_ascii_case(wanted))
}

#[cfg(test)]
mod tests;
