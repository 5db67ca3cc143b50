//! The configuration handed to a delegate for one attachment: capability checks,
//! `runtimeConfig` per CNI CONVENTIONS, and `args` from `cni-args` (spec 4.1.2.1.3 to
//! 4.1.2.1.8, 4.1.2.1.10, 7.5).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::selection::{Bandwidth, NetworkSelection};
use crate::cni::config::NetworkConfigList;
use crate::cni::{CniCode, ErrorCode};

/// A configlist ready to run, with the runtime config each plugin may receive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegateConfig {
    pub list: NetworkConfigList,
    /// Filtered per plugin by its declared capabilities when the plugin runs.
    #[serde(default)]
    pub runtime_config: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "network {network} cannot honour the pod's {key:?} request: no plugin in its CNI config declares \
     \"capabilities\": {{\"{capability}\": true}}; add a plugin that does, or do not request {key:?} of this \
     network"
)]
pub struct CapabilityError {
    pub network: String,
    /// The annotation key.
    pub key: &'static str,
    /// The CNI capability.
    pub capability: &'static str,
}

/// A capability no plugin declares is a config the user must fix.
impl CniCode for CapabilityError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// Builds the delegate config of a secondary attachment. Fails when the selection asks for
/// a capability that no plugin of the network declares: the spec makes that a failure of
/// the whole attachment, not a silent drop.
pub fn secondary_delegate(
    network: &str,
    mut list: NetworkConfigList,
    sel: &NetworkSelection,
) -> Result<DelegateConfig, CapabilityError> {
    let mut rc = Map::new();
    let mut require = |key: &'static str, capability: &'static str, value: Value| {
        if !list.has_capability(capability) {
            return Err(CapabilityError { network: network.to_owned(), key, capability });
        }
        rc.insert(capability.to_owned(), value);
        Ok(())
    };
    if let Some(ips) = &sel.ips {
        require("ips", "ips", json!(ips))?;
    }
    if let Some(mac) = &sel.mac {
        require("mac", "mac", json!(mac))?;
    }
    if let Some(pms) = &sel.port_mappings {
        let pms: Vec<Value> = pms
            .iter()
            .map(|p| {
                let mut m = json!({
                    "hostPort": p.host_port,
                    "containerPort": p.container_port,
                    "protocol": p.protocol.as_str(),
                });
                if let Some(ip) = p.host_ip {
                    m["hostIP"] = json!(ip.to_string());
                }
                m
            })
            .collect();
        require("portMappings", "portMappings", Value::Array(pms))?;
    }
    if let Some(bw) = &sel.bandwidth {
        require("bandwidth", "bandwidth", bandwidth_runtime_config(bw))?;
    }
    if let Some(guid) = &sel.infiniband_guid {
        require("infiniband-guid", "infinibandGUID", json!(guid))?;
    }
    if let Some(args) = &sel.cni_args {
        merge_cni_args(&mut list, args);
    }
    Ok(DelegateConfig { list, runtime_config: rc })
}

/// The cluster default network gets kubelet's runtimeConfig, and only it does (spec 7.5).
pub fn default_delegate(
    list: NetworkConfigList,
    kubelet_runtime_config: &Map<String, Value>,
) -> DelegateConfig {
    DelegateConfig { list, runtime_config: kubelet_runtime_config.clone() }
}

/// A sandbox that names its networks (`spec::sandbox_networks`) has its first network in the
/// place of the cluster default network: kubelet's runtimeConfig reaches it as it reaches the
/// default network (spec 7.5), and the entry's own parameters take precedence over kubelet's
/// keys of the same name, being asked for this attachment.
pub fn with_kubelet_runtime_config(
    delegate: DelegateConfig,
    kubelet_runtime_config: &Map<String, Value>,
) -> DelegateConfig {
    let mut runtime_config = kubelet_runtime_config.clone();
    runtime_config.extend(delegate.runtime_config);
    DelegateConfig { list: delegate.list, runtime_config }
}

/// The annotation's `cni-args` take priority over the config's own `args.cni`
/// (spec 4.1.2.1.6.2); both reach every plugin of the list as CONVENTIONS' `args.cni`.
fn merge_cni_args(list: &mut NetworkConfigList, cni_args: &Map<String, Value>) {
    for plugin in &mut list.plugins {
        let args = plugin.entry("args").or_insert_with(|| Value::Object(Map::new()));
        if !args.is_object() {
            *args = Value::Object(Map::new());
        }
        let Some(args) = args.as_object_mut() else { continue };
        let cni = args.entry("cni").or_insert_with(|| Value::Object(Map::new()));
        if !cni.is_object() {
            *cni = Value::Object(Map::new());
        }
        if let Some(cni) = cni.as_object_mut() {
            for (k, v) in cni_args {
                cni.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The smallest default burst: two full-size Ethernet frames, in bits. Shapers that
/// need a burst (the reference `bandwidth` plugin does) drop every frame larger than it.
pub const MIN_DEFAULT_BURST_BITS: u64 = 2 * 1514 * 8;

/// A burst for a rate given without one: 10 ms worth of traffic, at least two frames.
pub fn default_burst_bits(rate_bps: u64) -> u64 {
    (rate_bps / 100).max(MIN_DEFAULT_BURST_BITS)
}

/// `runtimeConfig.bandwidth` of a selection's bandwidth (CNI CONVENTIONS keys, bits per second).
pub fn bandwidth_runtime_config(bw: &Bandwidth) -> Value {
    let mut m = Map::new();
    let mut put = |rate_key: &str, burst_key: &str, rate: Option<u64>, burst: Option<u64>| {
        if let Some(rate) = rate {
            m.insert(rate_key.into(), json!(rate));
            m.insert(burst_key.into(), json!(burst.unwrap_or_else(|| default_burst_bits(rate))));
        }
    };
    put("ingressRate", "ingressBurst", bw.ingress_rate, bw.ingress_burst);
    put("egressRate", "egressBurst", bw.egress_rate, bw.egress_burst);
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::selection::parse_selection;

    fn list(text: &str) -> NetworkConfigList {
        NetworkConfigList::parse(text, None).unwrap()
    }

    fn sel(annotation: &str) -> NetworkSelection {
        parse_selection(annotation).unwrap().remove(0)
    }

    const ALL_CAPS: &str = r#"{"cniVersion":"1.0.0","name":"n","plugins":[
        {"type":"bridge","capabilities":{"ips":true,"mac":true,"infinibandGUID":true}},
        {"type":"portmap","capabilities":{"portMappings":true}},
        {"type":"bandwidth","capabilities":{"bandwidth":true}}]}"#;

    #[test]
    fn runtime_config_follows_conventions() {
        let d = secondary_delegate(
            "ns/n",
            list(ALL_CAPS),
            &sel(r#"[{"name":"n","ips":["10.2.2.42/24"],"mac":"02:23:45:67:89:01",
                "portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"TCP","hostIP":"192.0.2.1"}],
                "bandwidth":{"ingressRate":2048,"ingressBurst":300,"egressRate":8000},
                "infiniband-guid":"24:8a:07:03:00:8d:ae:2f"}]"#),
        )
        .unwrap();
        assert_eq!(
            Value::Object(d.runtime_config),
            json!({
                "ips": ["10.2.2.42/24"],
                "mac": "02:23:45:67:89:01",
                "portMappings": [{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":"192.0.2.1"}],
                "bandwidth": {"ingressRate":2048,"ingressBurst":300,"egressRate":8000,"egressBurst":MIN_DEFAULT_BURST_BITS},
                "infinibandGUID": "24:8a:07:03:00:8d:ae:2f",
            })
        );
    }

    #[test]
    fn each_capability_is_required() {
        let none = r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#;
        for (annotation, key) in [
            (r#"[{"name":"n","ips":["10.0.0.1"]}]"#, "ips"),
            (r#"[{"name":"n","mac":"02:23:45:67:89:01"}]"#, "mac"),
            (r#"[{"name":"n","portMappings":[{"hostPort":1,"containerPort":1}]}]"#, "portMappings"),
            (r#"[{"name":"n","bandwidth":{"egressRate":1}}]"#, "bandwidth"),
            (r#"[{"name":"n","infiniband-guid":"24:8a:07:03:00:8d:ae:2f"}]"#, "infiniband-guid"),
        ] {
            let err = secondary_delegate("ns/n", list(none), &sel(annotation)).unwrap_err();
            assert_eq!(err.key, key);
            assert!(err.to_string().contains("declares"), "{err}");
        }
        let err = secondary_delegate(
            "ns/ib",
            list(none),
            &sel(r#"[{"name":"n","infiniband-guid":"24:8a:07:03:00:8d:ae:2f"}]"#),
        )
        .unwrap_err();
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert_eq!(
            err.to_string(),
            "network ns/ib cannot honour the pod's \"infiniband-guid\" request: no plugin in its CNI config \
             declares \"capabilities\": {\"infinibandGUID\": true}; add a plugin that does, or do not request \
             \"infiniband-guid\" of this network"
        );
    }

    #[test]
    fn cni_args_override_config_args_on_every_plugin() {
        let l = list(
            r#"{"cniVersion":"1.0.0","name":"n","plugins":[
                {"type":"a","args":{"cni":{"spoofchk":"off","keep":"yes"},"other":1}},{"type":"b"}]}"#,
        );
        let d =
            secondary_delegate("ns/n", l, &sel(r#"[{"name":"n","cni-args":{"spoofchk":"on"}}]"#)).unwrap();
        assert_eq!(d.list.plugins[0]["args"], json!({"cni":{"spoofchk":"on","keep":"yes"},"other":1}));
        assert_eq!(d.list.plugins[1]["args"], json!({"cni":{"spoofchk":"on"}}));
    }

    #[test]
    fn no_requests_means_no_runtime_config_and_untouched_plugins() {
        let l = list(ALL_CAPS);
        let d = secondary_delegate("ns/n", l.clone(), &sel("n")).unwrap();
        assert!(d.runtime_config.is_empty());
        assert_eq!(d.list, l);
    }

    #[test]
    fn kubelets_runtime_config_reaches_the_first_sandbox_network_under_its_own_parameters() {
        let own = secondary_delegate(
            "ns/n",
            list(ALL_CAPS),
            &sel(r#"[{"name":"n","mac":"02:00:00:00:00:01",
            "portMappings":[{"hostPort":8080,"containerPort":80}]}]"#),
        )
        .unwrap();
        let kubelet = json!({"portMappings": [{"hostPort": 1, "containerPort": 1, "protocol": "tcp"}],
                             "dns": {"servers": ["10.96.0.10"]}});
        let kubelet = kubelet.as_object().unwrap().clone();
        let d = with_kubelet_runtime_config(own.clone(), &kubelet);
        assert_eq!(d.list, own.list);
        assert_eq!(
            Value::Object(d.runtime_config),
            json!({
                "mac": "02:00:00:00:00:01",
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "dns": {"servers": ["10.96.0.10"]},
            })
        );
        let plain = secondary_delegate("ns/n", list(ALL_CAPS), &sel("n")).unwrap();
        assert_eq!(with_kubelet_runtime_config(plain, &kubelet), default_delegate(list(ALL_CAPS), &kubelet));
    }

    #[test]
    fn default_bursts_scale_with_rate() {
        assert_eq!(default_burst_bits(1_000), MIN_DEFAULT_BURST_BITS);
        assert_eq!(default_burst_bits(1_000_000_000), 10_000_000);
    }
}
