//! IPAMClaims (NPWG spec section 8) as the built-in IPAM types honour them.
//!
//! The engine resolves a selection's `ipam-claim-reference` to the claim object and hands it
//! to the attachment's plugin in `runtimeConfig` under [`RUNTIME_CONFIG_KEY`] (plexus's native
//! types honour the key whatever their config declares). `host-local` then allocates for the
//! claim instead of the container: the claim's addresses when its status has them, else those
//! the claim already holds in the range, else the next free ones; the allocation files name
//! the claim ([`ClaimRequest::owner_id`]), so the pod's DEL leaves them and only the claim's
//! deletion releases them ([`registry`], [`release`]). `static` takes the claim's addresses
//! in place of its own when the claim has some. Any other IPAM type is exec'd with the key
//! in its config and ignores it, as the spec says a plugin without the feature does.

pub mod registry;
pub mod release;
pub mod source;

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::addr::{canonical, parse_cidr, parse_ip};
use super::IpamError;

/// The runtimeConfig key carrying the claim to the plugin (a key of plexus's own: CNI
/// CONVENTIONS has none for it).
pub const RUNTIME_CONFIG_KEY: &str = "plexus.dev/ipamClaim";

/// The interface name host-local records for a claim's allocations: they belong to the claim,
/// not to one of its pods' interfaces.
pub const OWNER_IFNAME: &str = "ipamclaim";

/// The IPAM types that honour a claim.
pub const HONOURED_BY: [&str; 2] = ["host-local", "static"];

/// The claim as the plugin receives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    pub namespace: String,
    pub name: String,
    /// The claim's `status.ips` (CIDR notation); empty when nothing was allocated yet.
    #[serde(default)]
    pub ips: Vec<String>,
}

impl ClaimRequest {
    /// The owner host-local records for the claim's allocations (in place of a container ID):
    /// `ipamclaim/<namespace>/<name>`, which no container ID can be.
    pub fn owner_id(&self) -> String {
        owner_id(&self.namespace, &self.name)
    }

    /// The claim's addresses, without their prefix lengths.
    pub fn addresses(&self) -> Result<Vec<IpAddr>, IpamError> {
        self.ips
            .iter()
            .map(|text| {
                parse_cidr(text)
                    .map(|net| canonical(net.addr()))
                    .or_else(|| parse_ip(text).map(canonical))
                    .ok_or_else(|| {
                        IpamError::invalid_config(format!(
                            "IPAMClaim {}/{}: status.ips holds {text:?}, which is not an IP address; fix the \
                             claim's status",
                            self.namespace, self.name
                        ))
                    })
            })
            .collect()
    }
}

/// See [`ClaimRequest::owner_id`].
pub fn owner_id(namespace: &str, name: &str) -> String {
    format!("ipamclaim/{namespace}/{name}")
}

/// The claim in a plugin's config (`runtimeConfig`), when the engine passed one.
pub fn from_netconf(netconf: &Value) -> Result<Option<ClaimRequest>, IpamError> {
    let Some(raw) = netconf.get("runtimeConfig").and_then(|rc| rc.get(RUNTIME_CONFIG_KEY)) else {
        return Ok(None);
    };
    if raw.is_null() {
        return Ok(None);
    }
    serde_json::from_value(raw.clone())
        .map(Some)
        .map_err(|e| IpamError::invalid_config(format!("runtimeConfig.{RUNTIME_CONFIG_KEY}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claim_is_read_from_the_runtime_config() {
        assert_eq!(from_netconf(&json!({"name": "n"})).unwrap(), None);
        let conf = json!({"runtimeConfig": {RUNTIME_CONFIG_KEY: {"namespace": "ns1", "name": "vm-a.tenantred",
                                                                  "ips": ["10.128.20.8/24", "fd10:128:20::8/64"]}}});
        let claim = from_netconf(&conf).unwrap().unwrap();
        assert_eq!(claim.owner_id(), "ipamclaim/ns1/vm-a.tenantred");
        assert_eq!(
            claim.addresses().unwrap(),
            ["10.128.20.8".parse::<IpAddr>().unwrap(), "fd10:128:20::8".parse().unwrap()]
        );
        let bad = json!({"runtimeConfig": {RUNTIME_CONFIG_KEY: {"namespace": "ns1"}}});
        assert!(from_netconf(&bad).unwrap_err().to_string().contains("missing field `name`"));
        let claim =
            ClaimRequest { namespace: "a".into(), name: "b".into(), ips: vec!["10.0.0.300/24".into()] };
        assert!(claim.addresses().unwrap_err().to_string().contains("\"10.0.0.300/24\", which is not an IP"));
    }
}
