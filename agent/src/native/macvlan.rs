//! The `macvlan` plugin, run in the agent over netlink instead of exec'ing the reference binary,
//! with the reference's config, result and behaviour (containernetworking/plugins
//! plugins/main/macvlan):
//!
//! - ADD creates the macvlan on the master (a node interface, or the pod's with
//!   `linkInContainer`) directly inside the pod's namespace, under a temporary name so it
//!   cannot collide with a node interface, renames it to CNI_IFNAME there, then runs IPAM and
//!   applies its addresses and routes, brings it up and announces the addresses. Any failure
//!   undoes everything done so far (link deleted, IPAM released).
//! - DEL releases IPAM and deletes the link (under its temporary name when an ADD died before
//!   renaming it: the name is fixed per attachment); a missing namespace or link is fine, and
//!   a link of that name that is not a macvlan is left alone (it is not ours).
//! - CHECK verifies the link (macvlan, mode, master, MTU, MAC) and the addresses and routes of
//!   the previous result, then asks IPAM.
//! - STATUS and GC would be IPAM's business (macvlan keeps no state of its own), but the IPAM
//!   façade offers neither, so both only check that the config parses.

mod config;
mod error;

use std::path::Path;

use futures::future::BoxFuture;
use nix::errno::Errno;
use serde_json::Value;

pub use config::{mode_from_name, mode_name, ConfigError, MacvlanConf, Settings};
pub use error::{LinkMismatch, MacvlanError};

use super::announce;
use super::invocation::{self, output, pod_for_del, pod_of, result_version, NativeType, Pod};
use crate::cni::result::{CniResult, Interface};
use crate::cni::ErrorCode;
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::ipam::Ipam;
use crate::netlink::{
    attachment_temp_name, configure_ip, verify_ips, verify_routes, LinkError, LinkSnapshot, MacVlanMode,
    Netlink, NewMacVlan,
};

/// The CNI `type` this plugin answers to.
pub const TYPE: &str = "macvlan";

/// The native macvlan plugin; IPAM goes through the agent's IPAM façade, exactly as the
/// reference plugin would exec the IPAM binary.
pub struct Macvlan {
    ipam: Ipam,
}

impl Macvlan {
    pub fn new(ipam: Ipam) -> Macvlan {
        Macvlan { ipam }
    }
}

impl NativePlugin for Macvlan {
    /// The built-in IPAM honours an IPAMClaim, whatever the config declares.
    fn capabilities(&self) -> &'static [&'static str] {
        &[crate::ipam::claim::RUNTIME_CONFIG_KEY]
    }

    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        invocation::invoke(self, call)
    }
}

/// What an ADD was called with.
#[derive(Clone, Copy)]
struct Call<'a> {
    conf: &'a MacvlanConf,
    /// The config as received, for IPAM.
    config: &'a Value,
    env: &'a InvocationEnv,
    /// The version the result is printed in.
    version: &'a str,
}

impl NativeType for Macvlan {
    const TYPE: &'static str = TYPE;

    type Error = MacvlanError;

    async fn add(&self, config: &Value, env: &InvocationEnv) -> Result<Value, MacvlanError> {
        let conf = parse(config)?;
        let version = result_version(&conf.cni_version)?;
        let settings = conf.settings(&env.args)?;
        let pod = pod_of(env)?;
        let pod_ns = Netlink::pod(pod.netns).await?;
        let host_ns = if conf.link_in_container { None } else { Some(Netlink::agent()?) };
        let master_ns = host_ns.as_ref().unwrap_or(&pod_ns);
        let master = master(master_ns, &conf).await?;
        check_mtu(&settings, &master)?;

        let temporary = attachment_temp_name(&env.container_id, &env.ifname);
        let created = create(master_ns, &pod_ns, &master, &settings, &temporary).await?;
        let call = Call { conf: &conf, config, env, version: &version };
        match self.attach(&call, &pod_ns, &pod, &created).await {
            Ok(output) => Ok(output),
            Err(failure) => {
                if let Err(e) = pod_ns.delete(&created).await {
                    tracing::warn!("undoing a failed macvlan ADD: {e}");
                }
                Err(failure)
            }
        }
    }

    async fn del(&self, config: &Value, env: &InvocationEnv) -> Result<(), MacvlanError> {
        let conf = parse(config)?;
        // Both halves run even when one fails, so a retry has as little left to do as possible.
        let released = if conf.is_layer3() {
            self.ipam.del(config, env).await.map_err(MacvlanError::delegate)
        } else {
            Ok(())
        };
        let removed = remove_link(env).await;
        released.and(removed)
    }

    async fn check(&self, config: &Value, env: &InvocationEnv) -> Result<(), MacvlanError> {
        let conf = parse(config)?;
        let settings = conf.settings(&env.args)?;
        let pod = pod_of(env)?;
        if conf.is_layer3() {
            self.ipam.check(config, env).await.map_err(MacvlanError::delegate)?;
        }
        let prev = match config.get("prevResult") {
            None | Some(Value::Null) => {
                return Err(MacvlanError::config(
                    "required prevResult missing: CHECK needs the result of the ADD",
                ))
            }
            Some(prev) => CniResult::parse(prev, &conf.cni_version)
                .map_err(|e| MacvlanError::new(ErrorCode::DecodeFailure, format!("prevResult: {e}")))?,
        };
        let sandbox = pod.netns.display().to_string();
        let Some(expected) = prev
            .interfaces
            .iter()
            .find(|i| i.name == pod.ifname && i.sandbox.as_deref() == Some(sandbox.as_str()))
        else {
            return Err(MacvlanError::internal_msg(format!(
                "prevResult has no interface {} in sandbox {sandbox}: it does not describe this attachment",
                pod.ifname
            )));
        };
        let pod_ns = Netlink::pod(pod.netns).await?;
        let host_ns = if conf.link_in_container { None } else { Some(Netlink::agent()?) };
        let master = master(host_ns.as_ref().unwrap_or(&pod_ns), &conf).await?;
        let link = pod_ns.link(pod.ifname).await?.ok_or_else(|| {
            MacvlanError::internal_msg(format!(
                "interface {} of prevResult is missing from network namespace {sandbox}",
                pod.ifname
            ))
        })?;
        let wanted_mac = expected.mac.clone().or(settings.mac.map(|m| m.to_string()));
        let wanted = Expected {
            settings: &settings,
            master: &master,
            in_container: conf.link_in_container,
            mac: wanted_mac,
        };
        verify_link(&link, &wanted)?;
        verify_ips(&pod_ns, pod.ifname, &prev.ips).await?;
        verify_routes(&pod_ns, &prev.routes).await?;
        Ok(())
    }

    /// The reference asks IPAM for its STATUS; the IPAM façade has none to give (static and
    /// host-local need nothing to be ready), so a config that parses is ready.
    async fn status(&self, config: &Value) -> Result<(), MacvlanError> {
        parse(config).map(drop)
    }

    /// macvlan keeps no state of its own, and the IPAM façade keeps none that outlives DEL
    /// except host-local's, which it offers no GC for: nothing to collect.
    async fn gc(&self, config: &Value) -> Result<(), MacvlanError> {
        parse(config).map(drop)
    }
}

impl Macvlan {
    /// Everything after the link exists: rename, IPAM, addresses, up, and the result in the
    /// config's version. On failure the caller deletes the link; IPAM is released here, since
    /// only this knows whether it ran.
    async fn attach(
        &self,
        call: &Call<'_>,
        pod_ns: &Netlink,
        pod: &Pod<'_>,
        created: &LinkSnapshot,
    ) -> Result<Value, MacvlanError> {
        let Call { conf, config, env, version } = *call;
        let link = pod_ns.rename(created, pod.ifname).await.map_err(|e| {
            if e.is(Errno::EEXIST) {
                MacvlanError::config(format!(
                    "interface {} already exists in the pod's network namespace {}; give this attachment \
                     another interface name (\"interface\" in the networks annotation)",
                    pod.ifname,
                    pod.netns.display()
                ))
            } else {
                MacvlanError::from(e)
            }
        })?;
        let mut result = base_result(&link, pod.netns, conf);
        if let Err(e) = announce::enable_kernel_notify(pod.netns, pod.ifname).await {
            // The explicit announcements below still go out.
            tracing::debug!("{e}");
        }
        if !conf.is_layer3() {
            pod_ns.set_up(&link).await?;
            return Ok(output(&result, version)?);
        }
        let assigned = self.ipam.add(config, env).await.map_err(MacvlanError::delegate)?;
        let finished = match take_ipam(&mut result, assigned) {
            Ok(()) => match configure(pod_ns, pod, &link, &result).await {
                Ok(()) => output(&result, version).map_err(MacvlanError::from),
                Err(failure) => Err(failure),
            },
            Err(failure) => Err(failure),
        };
        if finished.is_err() {
            if let Err(e) = self.ipam.del(config, env).await {
                tracing::warn!("releasing the addresses of a failed macvlan ADD: {e}");
            }
        }
        finished
    }
}

fn parse(config: &Value) -> Result<MacvlanConf, MacvlanError> {
    Ok(MacvlanConf::parse(config)?)
}

/// The master link: the configured one, or the interface of the default route.
async fn master(ns: &Netlink, conf: &MacvlanConf) -> Result<LinkSnapshot, MacvlanError> {
    let name = match &conf.master {
        Some(name) => name.clone(),
        None => ns.default_route_interface().await?.ok_or_else(|| {
            MacvlanError::config(format!(
                "the config names no \"master\" and {} has no default route to take it from; set \"master\" \
                 to the interface the macvlan should sit on",
                ns.place()
            ))
        })?,
    };
    // The reference's words come first ("failed to lookup master ...: Link not found"): people
    // and scripts search for them.
    ns.link(&name).await?.ok_or_else(|| {
        MacvlanError::config(format!(
            "failed to lookup master {name:?}: Link not found: there is no such interface in {}; set \
             \"master\" to an existing interface{}",
            ns.place(),
            if conf.link_in_container { " of the pod" } else { " of the node" }
        ))
    })
}

fn check_mtu(settings: &Settings, master: &LinkSnapshot) -> Result<(), MacvlanError> {
    let master_mtu = master.mtu.unwrap_or(u32::MAX);
    if settings.mtu > master_mtu {
        return Err(MacvlanError::config(format!(
            "invalid MTU {}, must be [0, master MTU({master_mtu})]: the macvlan cannot exceed the MTU of {}; \
             use at most {master_mtu}, or 0 for the master's",
            settings.mtu, master.name
        )));
    }
    Ok(())
}

/// Creates the macvlan inside the pod's namespace under the attachment's temporary name
/// ([`attachment_temp_name`]: a DEL after a crash before the renaming finds it); returns it as
/// found there. With the master in the node's namespace the link is created from there with
/// IFLA_NET_NS_FD, so it never exists on the node.
async fn create(
    master_ns: &Netlink,
    pod_ns: &Netlink,
    master: &LinkSnapshot,
    settings: &Settings,
    temporary: &str,
) -> Result<LinkSnapshot, MacvlanError> {
    let link = NewMacVlan {
        name: temporary,
        master: master.index,
        mode: settings.mode,
        mtu: settings.mtu,
        mac: settings.mac,
    };
    let what = format!("macvlan {temporary} ({} mode) on {}", mode_name(settings.mode), master.name);
    // With the master on the node, the link is born in the pod; else the pod holds both.
    let born_in = master_ns.netns().is_none().then_some(pod_ns);
    master_ns
        .create_macvlan(&what, &link, born_in)
        .await
        .map_err(|e| creation_failure(e, settings, master))?;
    crate::failpoint::reached_in_request(crate::failpoint::Point::LinkCreated);
    pod_ns.link(temporary).await?.ok_or_else(|| {
        MacvlanError::internal_msg(format!("the new macvlan {temporary} is not in {}", pod_ns.place()))
    })
}

/// The kernel's refusals of a new macvlan, with what to do about them.
fn creation_failure(e: LinkError, settings: &Settings, master: &LinkSnapshot) -> MacvlanError {
    let hint = match e.errno {
        Some(Errno::EINVAL) if settings.mode == MacVlanMode::Passthrough => {
            format!("; passthru mode needs {} to itself: no other macvlan may use it", master.name)
        }
        Some(Errno::EINVAL) => format!(
            "; {} may already carry passthru macvlans, or it cannot be a macvlan master at all",
            master.name
        ),
        Some(Errno::EADDRINUSE) | Some(Errno::EADDRNOTAVAIL) => match settings.mac {
            Some(mac) => format!("; MAC {mac} is taken on {} or not usable: request another", master.name),
            None => String::new(),
        },
        Some(Errno::EBUSY) => format!("; {} is enslaved to something that excludes macvlans", master.name),
        _ => String::new(),
    };
    MacvlanError::internal_msg(format!("failed to create macvlan: {e}{hint}"))
}

/// The result of a layer-2 ADD: the macvlan in the pod's sandbox, with its MAC, and the
/// config's DNS (the reference ignores IPAM's DNS).
fn base_result(link: &LinkSnapshot, netns: &Path, conf: &MacvlanConf) -> CniResult {
    CniResult {
        interfaces: vec![Interface {
            name: link.name.clone(),
            mac: link.mac.clone(),
            sandbox: Some(netns.display().to_string()),
            ..Default::default()
        }],
        dns: conf.dns.clone(),
        ..Default::default()
    }
}

/// The result takes IPAM's IPs and routes, every IP bound to interface 0 (the macvlan), as
/// the reference does. IPAM must have given at least one address.
fn take_ipam(result: &mut CniResult, assigned: CniResult) -> Result<(), MacvlanError> {
    if assigned.ips.is_empty() {
        return Err(MacvlanError::internal_msg(
            "IPAM plugin returned missing IP config: the network's \"ipam\" gave this pod no address",
        ));
    }
    result.ips = assigned.ips;
    result.routes = assigned.routes;
    for ip in &mut result.ips {
        ip.interface = Some(0);
    }
    Ok(())
}

/// Applies the addresses and routes of `result` to the link and announces the addresses.
async fn configure(
    pod_ns: &Netlink,
    pod: &Pod<'_>,
    link: &LinkSnapshot,
    result: &CniResult,
) -> Result<(), MacvlanError> {
    configure_ip(pod_ns, pod.ifname, result).await?;
    if let Some(mac) = link.ethernet_mac() {
        let addresses = result.ips.iter().map(|ip| ip.address.addr()).collect();
        for failure in announce::announce(pod.netns, link.index, mac, addresses).await {
            tracing::debug!(ifname = pod.ifname, "not announced: {failure}");
        }
    }
    Ok(())
}

/// Deletes the attachment's link, if it is there and a macvlan.
async fn remove_link(env: &InvocationEnv) -> Result<(), MacvlanError> {
    let Some(pod_ns) = pod_for_del(env).await? else {
        return Ok(());
    };
    let found = match pod_ns.link(&env.ifname).await? {
        Some(link) => Some(link),
        // An ADD that died between creating the link and naming it left it under its
        // temporary name.
        None => pod_ns.link(&attachment_temp_name(&env.container_id, &env.ifname)).await?,
    };
    match found {
        Some(link) if link.is_macvlan() => pod_ns.delete_soon(&link).await.map_err(MacvlanError::from),
        Some(link) => {
            tracing::warn!(
                "not deleting {} in {}: it is a {} interface, not the macvlan this attachment made",
                link.name,
                env.netns,
                link.kind.map_or("plain".to_owned(), |k| k.to_string())
            );
            Ok(())
        }
        None => Ok(()),
    }
}

/// What CHECK expects of the link.
struct Expected<'a> {
    settings: &'a Settings,
    master: &'a LinkSnapshot,
    /// The master is in the pod's namespace rather than the node's.
    in_container: bool,
    /// From prevResult, else the requested one.
    mac: Option<String>,
}

/// The reference's `validateCniContainerInterface`, plus master and MTU.
fn verify_link(link: &LinkSnapshot, wanted: &Expected<'_>) -> Result<(), LinkMismatch> {
    if !link.is_macvlan() {
        let kind = link.kind.as_ref().map_or("plain".to_owned(), |k| k.to_string());
        return Err(LinkMismatch::NotMacvlan { name: link.name.clone(), kind });
    }
    let mode = link.macvlan_mode.unwrap_or(MacVlanMode::Bridge);
    if mode != wanted.settings.mode {
        return Err(LinkMismatch::Mode { found: mode_name(mode), wanted: mode_name(wanted.settings.mode) });
    }
    // IFLA_LINK is the master's index in the master's namespace, which the link-netnsid
    // names when that is not the pod's own.
    let on_master = link.parent_index == Some(wanted.master.index)
        && link.parent_netnsid.is_some() != wanted.in_container;
    if !on_master {
        return Err(LinkMismatch::Master { name: link.name.clone(), master: wanted.master.name.clone() });
    }
    if wanted.settings.mtu > 0 && link.mtu != Some(wanted.settings.mtu) {
        return Err(LinkMismatch::Mtu {
            name: link.name.clone(),
            found: link.mtu.map_or("unknown".to_owned(), |m| m.to_string()),
            wanted: wanted.settings.mtu,
        });
    }
    if let Some(mac) = &wanted.mac {
        if link.mac.as_deref().map(str::to_ascii_lowercase) != Some(mac.to_ascii_lowercase()) {
            return Err(LinkMismatch::Mac {
                name: link.name.clone(),
                wanted: mac.clone(),
                found: link.mac.as_deref().unwrap_or("none").to_owned(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
