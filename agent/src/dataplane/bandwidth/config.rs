//! The `plexus-bandwidth` plugin's configuration: the reference `bandwidth` plugin's keys.
//!
//! ```json
//! {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true},
//!  "ingressRate": 100000000, "ingressBurst": 1000000}
//! ```
//!
//! Limits come from `runtimeConfig.bandwidth` (CNI CONVENTIONS: what the runtime or the
//! delegating plugin passes for the pod) when present, else from the plugin's own keys, as the
//! reference plugin does. Rates are bits per second, bursts bits; a rate of 0 means no limit
//! (kubelet's encoding), a burst without a rate is an error, a rate without a burst gets a
//! default one (see [`super::plan`]).

use serde_json::{Map, Value};

use crate::dataplane::chained::ChainArgs;

/// One direction's limit, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub rate_bps: u64,
    pub burst_bits: Option<u64>,
}

/// Both directions, from the pod's point of view: ingress is traffic to the pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub ingress: Option<Limit>,
    pub egress: Option<Limit>,
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.ingress.is_none() && self.egress.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BandwidthConf {
    pub chain: ChainArgs,
    pub limits: Limits,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plexus-bandwidth config: {0}")]
pub struct ConfigError(pub String);

impl BandwidthConf {
    pub fn parse(config: &Value) -> Result<BandwidthConf, ConfigError> {
        let Value::Object(c) = config else {
            return Err(ConfigError("the config must be a JSON object".into()));
        };
        let limits = match c.get("runtimeConfig").and_then(|r| r.get("bandwidth")) {
            None | Some(Value::Null) => limits(c, "")?,
            Some(Value::Object(rt)) => limits(rt, "runtimeConfig.bandwidth.")?,
            Some(v) => {
                return Err(ConfigError(format!("runtimeConfig.bandwidth is {v}; it must be an object")));
            }
        };
        Ok(BandwidthConf { chain: ChainArgs::read(c), limits })
    }
}

/// The limits of `m` (the plugin config or `runtimeConfig.bandwidth`); `at` prefixes keys in
/// messages.
pub fn limits(m: &Map<String, Value>, at: &str) -> Result<Limits, ConfigError> {
    let number = |key: &str| -> Result<Option<u64>, ConfigError> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(0) => Ok(None),
                Some(n) => Ok(Some(n)),
                None => Err(ConfigError(format!(
                    "{at}{key} is {v}; it must be a non-negative integer ({})",
                    if key.ends_with("Rate") { "bits per second" } else { "bits" }
                ))),
            },
        }
    };
    let direction = |rate_key: &str, burst_key: &str| -> Result<Option<Limit>, ConfigError> {
        match (number(rate_key)?, number(burst_key)?) {
            (Some(rate_bps), burst_bits) => Ok(Some(Limit { rate_bps, burst_bits })),
            (None, Some(_)) => {
                Err(ConfigError(format!("{at}{burst_key} is set without {at}{rate_key}; set the rate too")))
            }
            (None, None) => Ok(None),
        }
    };
    Ok(Limits {
        ingress: direction("ingressRate", "ingressBurst")?,
        egress: direction("egressRate", "egressBurst")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runtime_config_wins_over_the_plugins_own_keys() {
        let c = BandwidthConf::parse(&json!({
            "cniVersion": "1.0.0", "name": "n", "type": "plexus-bandwidth",
            "ingressRate": 1000, "ingressBurst": 2000,
            "runtimeConfig": {"bandwidth": {"egressRate": 5000000}}
        }))
        .unwrap();
        assert_eq!(
            c.limits,
            Limits { ingress: None, egress: Some(Limit { rate_bps: 5_000_000, burst_bits: None }) }
        );
        assert_eq!((c.chain.network.as_str(), c.chain.cni_version.as_str()), ("n", "1.0.0"));

        let c = BandwidthConf::parse(&json!({"ingressRate": 1000, "ingressBurst": 2000})).unwrap();
        assert_eq!(c.limits.ingress, Some(Limit { rate_bps: 1000, burst_bits: Some(2000) }));
        assert!(c.limits.egress.is_none());
    }

    #[test]
    fn zero_means_unset_as_kubelet_encodes_it() {
        let c = BandwidthConf::parse(
            &json!({"runtimeConfig": {"bandwidth": {"ingressRate": 0, "egressRate": 0}}}),
        )
        .unwrap();
        assert!(c.limits.is_empty());
    }

    #[test]
    fn bad_values_say_what_to_fix() {
        let err = |v: serde_json::Value| BandwidthConf::parse(&v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"ingressBurst": 10})),
            "plexus-bandwidth config: ingressBurst is set without ingressRate; set the rate too"
        );
        assert_eq!(
            err(json!({"runtimeConfig": {"bandwidth": {"egressRate": -1}}})),
            "plexus-bandwidth config: runtimeConfig.bandwidth.egressRate is -1; it must be a non-negative integer \
             (bits per second)"
        );
        assert_eq!(
            err(json!({"egressRate": 1, "egressBurst": "big"})),
            "plexus-bandwidth config: egressBurst is \"big\"; it must be a non-negative integer (bits)"
        );
        assert_eq!(
            err(json!({"runtimeConfig": {"bandwidth": []}})),
            "plexus-bandwidth config: runtimeConfig.bandwidth is []; it must be an object"
        );
        assert_eq!(err(json!([])), "plexus-bandwidth config: the config must be a JSON object");
    }
}
