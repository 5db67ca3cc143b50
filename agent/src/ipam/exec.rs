//! IPAM types plexus does not implement: the plugin binary is exec'd as the reference plugins
//! do it (`ipam.ExecAdd`/`ExecDel`/`ExecCheck`): the parent's CNI variables, CNI_COMMAND set
//! to the command, the parent's whole config on stdin.

use serde_json::Value;

use crate::cni::result::CniResult;
use crate::cni::Command;
use crate::delegate::exec::{self, Exec, OutputError};
use crate::delegate::{DelegateError, InvocationEnv};

use super::Ipam;

pub async fn run(
    ipam: &Ipam,
    plugin: &str,
    command: Command,
    netconf: &Value,
    env: &InvocationEnv,
) -> Result<Option<Value>, DelegateError> {
    exec::run(&ipam.bin_dirs, Exec { plugin, command, env: env.vars(), config: netconf }, ipam.timeout).await
}

/// ADD: the plugin must print a result, in any CNI version.
pub async fn add(
    ipam: &Ipam,
    plugin: &str,
    netconf: &Value,
    env: &InvocationEnv,
    cni_version: &str,
) -> Result<CniResult, DelegateError> {
    let bad = |e: OutputError| DelegateError::bad_output(plugin, Command::Add, e, String::new());
    let out =
        run(ipam, plugin, Command::Add, netconf, env).await?.ok_or_else(|| bad(OutputError::NoResult))?;
    CniResult::parse(&out, cni_version).map_err(|e| bad(e.into()))
}
