//! Giving back what a deleted IPAMClaim held on this node (the spec's one rule: not before
//! the claim is deleted).

use std::time::Duration;

use serde_json::Value;

use super::registry::ClaimEntry;
use crate::ipam::host_local;
use crate::ipam::IpamError;

/// Releases the claim's addresses in every host-local range that allocated for it. Static
/// IPAM holds nothing. Goes on past failures; returns them.
pub async fn release(entry: &ClaimEntry, timeout: Duration) -> Vec<IpamError> {
    let mut errors = Vec::new();
    for config in &entry.ipam_configs {
        if ipam_type(config) != Some("host-local") {
            continue;
        }
        let dir = match host_local::config::parse(config, "") {
            Ok(cfg) => cfg.network_dir(),
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if let Err(e) = host_local::release_claim(dir, &entry.namespace, &entry.name, timeout).await {
            errors.push(e);
        }
    }
    errors
}

/// `ipam.type` of a plugin config.
pub fn ipam_type(config: &Value) -> Option<&str> {
    config.get("ipam")?.get("type")?.as_str()
}
