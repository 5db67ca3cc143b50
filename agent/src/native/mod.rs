//! CNI plugin types the agent implements itself, over netlink, instead of exec'ing a binary:
//! `macvlan` and `sriov`. Each honours the reference plugin's config and result, so existing
//! NetworkAttachmentDefinitions work unchanged, and each can be switched off per type
//! (`--exec-plugin TYPE`, or `--no-native` for all) to get the reference binary back.
//!
//! [`link`] holds the netlink operations they share (create, rename, move between namespaces,
//! addresses and routes); [`inside`] and [`announce`] the work done on a thread inside the pod's
//! namespace (sysctls, gratuitous ARP, unsolicited neighbour advertisements).

pub mod announce;
pub mod inside;
pub mod link;
pub mod macvlan;
pub mod sriov;

use std::path::Path;
use std::sync::Arc;

use crate::cni::{Command, ErrorCode};
use crate::delegate::native::native_error;
use crate::delegate::{DelegateError, NativePlugins};
use crate::ipam::Ipam;

/// Every type [`register_all`] knows.
pub const TYPES: [&str; 2] = [macvlan::TYPE, "sriov"];

/// Registers the native plugins, except the types in `exec_types` (those keep being exec'd).
/// `state_dir` is the agent's; plugins that keep records put them in a directory of their own
/// under it. Returns the types registered, for the log.
pub fn register_all(
    natives: &mut NativePlugins,
    ipam: Ipam,
    state_dir: &Path,
    exec_types: &[String],
) -> Vec<&'static str> {
    for unknown in exec_types.iter().filter(|t| !TYPES.contains(&t.as_str())) {
        tracing::warn!(
            "--exec-plugin {unknown}: plexus has no native {unknown:?} plugin, so it is exec'd anyway; \
             native types are {}",
            TYPES.join(", ")
        );
    }
    let wanted = |plugin_type: &str| !exec_types.iter().any(|t| t == plugin_type);
    let mut registered = Vec::new();
    if wanted(macvlan::TYPE) {
        natives.register(macvlan::TYPE, Arc::new(macvlan::Macvlan::new(ipam.clone())));
        registered.push(macvlan::TYPE);
    }
    if wanted("sriov") {
        natives.register("sriov", sriov::plugin(ipam, state_dir.to_path_buf(), "/sys".into()));
        registered.push("sriov");
    }
    registered
}

/// How a native plugin invocation failed, before it becomes a [`DelegateError`].
#[derive(Debug)]
enum Failure {
    /// A CNI error of the plugin's own.
    Cni { code: u32, msg: String },
    /// Passed through as it came (IPAM's errors keep their plugin, code and details); boxed
    /// because it is large and failures travel through every `?`.
    Delegate(Box<DelegateError>),
}

impl Failure {
    fn new(code: u32, msg: impl Into<String>) -> Failure {
        Failure::Cni { code, msg: msg.into() }
    }

    /// The config asks for something impossible: code 7, with what to change.
    fn config(msg: impl Into<String>) -> Failure {
        Failure::new(ErrorCode::InvalidNetworkConfig.code(), msg)
    }

    fn delegate(e: DelegateError) -> Failure {
        Failure::Delegate(Box::new(e))
    }

    fn internal(e: link::LinkError) -> Failure {
        Failure::new(ErrorCode::Internal.code(), e.to_string())
    }

    fn internal_msg(msg: impl Into<String>) -> Failure {
        Failure::new(ErrorCode::Internal.code(), msg)
    }

    fn into_delegate_error(self, plugin: &str, command: Command) -> DelegateError {
        match self {
            Failure::Cni { code, msg } => native_error(plugin, command, ErrorCode::Delegate(code), msg),
            Failure::Delegate(e) => *e,
        }
    }
}
