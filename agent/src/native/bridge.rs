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

mod add;
mod check;
mod config;
mod del;
mod error;
mod gateway;
pub mod nft;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

pub use config::{BridgeConf, ConfigError, Settings, TrunkEntry, DEFAULT_BRIDGE};
pub use error::{BridgeError, Mismatch};
pub use gateway::{address_plan, plan, AddressPlan, Gateways, POD_INTERFACE};

use super::invocation::{self, NativeType};
use crate::cni::Command;
use crate::delegate::exec::{self, Exec};
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::ipam::Ipam;

/// The CNI `type` this plugin answers to.
pub const TYPE: &str = "bridge";

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
        if let Ok(Some(reason)) = BridgeConf::parse(call.config).map(|c| c.needs_reference()) {
            return Box::pin(self.hand_off(call, reason));
        }
        invocation::invoke(self, call)
    }
}

impl NativeType for Bridge {
    const TYPE: &'static str = TYPE;

    type Error = BridgeError;

    async fn add(&self, config: &Value, env: &InvocationEnv) -> Result<Value, BridgeError> {
        add::run(self, config, env).await
    }

    async fn del(&self, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
        del::run(self, config, env).await
    }

    async fn check(&self, config: &Value, env: &InvocationEnv) -> Result<(), BridgeError> {
        check::run(self, config, env).await
    }

    /// The IPAM façade has no STATUS to ask: a config that parses is ready.
    async fn status(&self, config: &Value) -> Result<(), BridgeError> {
        parse(config).map(drop)
    }

    /// GC: the network's nftables chains that no valid attachment owns go.
    async fn gc(&self, config: &Value) -> Result<(), BridgeError> {
        del::gc(config).await
    }
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

#[cfg(test)]
mod tests;
