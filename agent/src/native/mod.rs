//! CNI plugin types the agent implements itself, over netlink, instead of exec'ing a binary:
//! `bridge`, `macvlan` and `sriov`. Each honours the reference plugin's config and result, so existing
//! NetworkAttachmentDefinitions work unchanged, and each can be switched off per type
//! (`--exec-plugin TYPE`, or `--no-native` for all) to get the reference binary back.
//!
//! The netlink operations they share (create, rename, move between namespaces, addresses and
//! routes) are the agent's netlink layer, [`crate::netlink`]; [`announce`] tells the pod's
//! neighbours about a new interface from a thread inside the pod's namespace (gratuitous ARP,
//! unsolicited neighbour advertisements).

pub mod announce;
pub mod bridge;
pub mod error;
pub mod invocation;
pub mod macvlan;
pub mod netconf;
pub mod sriov;

use std::path::Path;
use std::sync::Arc;

use crate::delegate::NativePlugins;
use crate::ipam::Ipam;

/// Every type [`register_all`] knows.
pub const TYPES: [&str; 3] = [bridge::TYPE, macvlan::TYPE, sriov::TYPE];

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
    if wanted(bridge::TYPE) {
        natives.register(bridge::TYPE, Arc::new(bridge::Bridge::new(ipam.clone())));
        registered.push(bridge::TYPE);
    }
    if wanted(macvlan::TYPE) {
        natives.register(macvlan::TYPE, Arc::new(macvlan::Macvlan::new(ipam.clone())));
        registered.push(macvlan::TYPE);
    }
    if wanted(sriov::TYPE) {
        natives.register(sriov::TYPE, sriov::plugin(ipam, state_dir.to_path_buf(), "/sys".into()));
        registered.push(sriov::TYPE);
    }
    registered
}
