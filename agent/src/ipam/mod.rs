//! IPAM for plexus's native attachment types (macvlan, sriov), without exec'ing a plugin on
//! the hot path.
//!
//! [`Ipam`] takes what a reference plugin hands its IPAM plugin (`ipam.ExecAdd`): the parent's
//! whole config and the attachment's CNI variables. `static` and `host-local` run in-process
//! and behave as the reference plugins of containernetworking/plugins v1.1.1 do (host-local
//! shares their on-disk state and lock); any other type is exec'd from the plugin directories
//! exactly as the reference plugins exec it.
//!
//! Errors are CNI errors; [`error`] says which code each failure gets.

mod addr;
pub mod claim;
mod cni_args;
pub mod error;
mod exec;
pub mod host_local;
mod netconf;
pub mod static_ipam;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::cni::result::CniResult;
use crate::cni::Command;
use crate::delegate::{DelegateError, InvocationEnv};
pub use error::IpamError;

/// IPAM for a parent plugin.
#[derive(Debug, Clone)]
pub struct Ipam {
    /// Where exec'd IPAM plugins are looked for (CNI_PATH).
    pub bin_dirs: Vec<PathBuf>,
    /// Per exec'd plugin run; for host-local, how long to wait for its lock.
    pub timeout: Duration,
}

const STATIC: &str = "static";
const HOST_LOCAL: &str = "host-local";

impl Ipam {
    /// `netconf` is the full plugin config the parent plugin received on stdin (with "name",
    /// "cniVersion", "ipam", optional "runtimeConfig" {ips, ...}, "args"), exactly what reference
    /// plugins pass to their IPAM plugin (ipam.ExecAdd). Native for ipam.type "static" and
    /// "host-local"; any other type is exec'd like the reference plugins do
    /// (crate::delegate::exec::run with the same CNI env and the netconf on stdin).
    ///
    /// The result's `ips` carry no interface index: the parent sets it.
    pub async fn add(&self, netconf: &Value, env: &InvocationEnv) -> Result<CniResult, DelegateError> {
        const ADD: Command = Command::Add;
        let _timer = crate::phase::start(crate::phase::Phase::Ipam);
        let result = match ipam_type(netconf).map_err(|e| delegate_error("ipam", ADD, e))? {
            STATIC => static_add(netconf, env).map_err(|e| delegate_error(STATIC, ADD, e)),
            HOST_LOCAL => {
                host_local_add(self, netconf, env).await.map_err(|e| delegate_error(HOST_LOCAL, ADD, e))
            }
            other => exec::add(self, other, netconf, env, &cni_version(netconf)).await,
        };
        result.map(|mut r| {
            for ip in &mut r.ips {
                ip.interface = None;
            }
            r
        })
    }

    /// Releases what ADD allocated; idempotent (nothing to release is success).
    pub async fn del(&self, netconf: &Value, env: &InvocationEnv) -> Result<(), DelegateError> {
        const DEL: Command = Command::Del;
        let _timer = crate::phase::start(crate::phase::Phase::Ipam);
        match ipam_type(netconf).map_err(|e| delegate_error("ipam", DEL, e))? {
            // Static allocates nothing; the reference's DEL does not even read the config.
            STATIC => Ok(()),
            HOST_LOCAL => {
                host_local_del(self, netconf, env).await.map_err(|e| delegate_error(HOST_LOCAL, DEL, e))
            }
            other => exec::run(self, other, DEL, netconf, env).await.map(drop),
        }
    }

    /// CHECK, with the parent's config (its `prevResult` included, which static compares).
    pub async fn check(&self, netconf: &Value, env: &InvocationEnv) -> Result<(), DelegateError> {
        const CHECK: Command = Command::Check;
        let _timer = crate::phase::start(crate::phase::Phase::Ipam);
        match ipam_type(netconf).map_err(|e| delegate_error("ipam", CHECK, e))? {
            STATIC => static_check(netconf, env).map_err(|e| delegate_error(STATIC, CHECK, e)),
            HOST_LOCAL => {
                host_local_check(self, netconf, env).await.map_err(|e| delegate_error(HOST_LOCAL, CHECK, e))
            }
            other => exec::run(self, other, CHECK, netconf, env).await.map(drop),
        }
    }
}

/// The error as the parent reports it: as if the IPAM plugin `plugin` had failed, its own
/// error kept as the source.
fn delegate_error(plugin: &str, command: Command, e: IpamError) -> DelegateError {
    DelegateError::native(plugin, command, e)
}

/// `ipam.type`, the only key read before knowing who handles the config.
fn ipam_type(netconf: &Value) -> Result<&str, IpamError> {
    let ipam = match netconf.get("ipam") {
        Some(Value::Object(ipam)) => ipam,
        None | Some(Value::Null) => {
            return Err(IpamError::invalid_config(
                "IPAM config missing 'ipam' key; add an \"ipam\" object with a \"type\"",
            ))
        }
        Some(_) => return Err(netconf::wrong_type("ipam", "an object")),
    };
    match ipam.get("type") {
        Some(Value::String(t)) if !t.is_empty() => Ok(t),
        _ => Err(IpamError::invalid_config(
            "the \"ipam\" section has no \"type\"; name the IPAM plugin, e.g. \"type\": \"host-local\"",
        )),
    }
}

/// The version results are read in when they do not say (libcni reads no version as 0.1.0).
fn cni_version(netconf: &Value) -> String {
    netconf.get("cniVersion").and_then(Value::as_str).filter(|v| !v.is_empty()).unwrap_or("0.1.0").to_owned()
}

fn static_add(netconf: &Value, env: &InvocationEnv) -> Result<CniResult, IpamError> {
    netconf::validate_env(env)?;
    let with_claim = with_claimed_ips(netconf)?;
    Ok(static_ipam::parse(with_claim.as_ref().unwrap_or(netconf), &env.args)?.result())
}

/// For static IPAM, an IPAMClaim with addresses is a request for them: the config with the
/// claim's addresses as `runtimeConfig.ips`, which replace the config's own (the selection
/// cannot also have `ips`). `None`: the config as it is.
fn with_claimed_ips(netconf: &Value) -> Result<Option<Value>, IpamError> {
    let Some(claim) = claim::from_netconf(netconf)? else { return Ok(None) };
    if claim.ips.is_empty() {
        return Ok(None);
    }
    let mut conf = netconf.clone();
    conf["runtimeConfig"]["ips"] = serde_json::json!(claim.ips);
    Ok(Some(conf))
}

fn static_check(netconf: &Value, env: &InvocationEnv) -> Result<(), IpamError> {
    netconf::validate_env(env)?;
    let with_claim = with_claimed_ips(netconf)?;
    static_ipam::parse(with_claim.as_ref().unwrap_or(netconf), &env.args)?
        .check(netconf.get("prevResult"), &env.ifname)
}

async fn host_local_add(ipam: &Ipam, netconf: &Value, env: &InvocationEnv) -> Result<CniResult, IpamError> {
    netconf::validate_env(env)?;
    let cfg = host_local::config::parse(netconf, &env.args)?;
    host_local::add(cfg, env, ipam.timeout, claim::from_netconf(netconf)?).await
}

async fn host_local_del(ipam: &Ipam, netconf: &Value, env: &InvocationEnv) -> Result<(), IpamError> {
    netconf::validate_env(env)?;
    let cfg = host_local::config::parse(netconf, &env.args)?;
    host_local::del(cfg, env, ipam.timeout, claim::from_netconf(netconf)?).await
}

async fn host_local_check(ipam: &Ipam, netconf: &Value, env: &InvocationEnv) -> Result<(), IpamError> {
    netconf::validate_env(env)?;
    let cfg = host_local::config::parse(netconf, &env.args)?;
    host_local::check(cfg, env, ipam.timeout, claim::from_netconf(netconf)?).await
}
