//! sriov-cni's network config, read and validated the way its `LoadConf` does, with messages that
//! name the key, the value found and what is accepted.
//!
//! Keys: `deviceID` (required), `vlan`, `vlanQoS`, `vlanProto`, `spoofchk`, `trust`, `link_state`,
//! `min_tx_rate`, `max_tx_rate`, `mac`, `ipam`; plexus also reads `mtu`. The MAC is taken from, in
//! increasing precedence, `mac`, `CNI_ARGS` `MAC=`, and `runtimeConfig.mac` (as sriov-cni does).
//! `runtimeConfig.bandwidth` is honoured for egress only (see the module documentation).

use serde_json::{Map, Value};

use super::error::SriovError;
use super::vf_netlink::{LinkState, VfSetting, VlanProto};
use crate::netlink::Mac;

/// A validated sriov config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SriovConf {
    pub cni_version: String,
    /// PCI address of the VF, lower case ("0000:03:02.3").
    pub device_id: String,
    /// `None`: no VLAN configured, which still clears any port VLAN left on the VF (sriov-cni
    /// sets VLAN 0 in that case too).
    pub vlan: Option<u16>,
    pub vlan_qos: u8,
    pub vlan_proto: VlanProto,
    pub spoofchk: Option<bool>,
    pub trust: Option<bool>,
    pub link_state: Option<LinkState>,
    /// Mbps.
    pub min_tx_rate: Option<u32>,
    /// Mbps; `runtimeConfig.bandwidth.egressRate` when that is given.
    pub max_tx_rate: Option<u32>,
    pub mac: Option<Mac>,
    pub mtu: Option<u32>,
    /// Whether the config has an `ipam` section with a `type`.
    pub has_ipam: bool,
}

impl SriovConf {
    /// Reads the plugin's config and `CNI_ARGS` (`args`) for ADD and CHECK.
    pub fn parse(config: &Value, args: &str) -> Result<SriovConf, SriovError> {
        let obj = config.as_object().ok_or_else(|| err("the config must be a JSON object"))?;
        if obj.get("vlan_trunk").is_some_and(|v| !v.is_null()) {
            return Err(err(
                "\"vlan_trunk\" is not supported by plexus's native sriov type; remove it or run the \
                 sriov-cni binary for this network",
            ));
        }
        let cni_version = match obj.get("cniVersion") {
            None | Some(Value::Null) => "0.1.0".to_owned(),
            Some(Value::String(v)) if v.is_empty() => "0.1.0".to_owned(),
            Some(Value::String(v)) => v.clone(),
            Some(other) => return Err(err(format!("\"cniVersion\" must be a string, found {other}"))),
        };
        let device_id = device_id(obj)?;
        let vlan = integer(obj, "vlan", 0, 4094)?.map(|v| v as u16);
        let vlan_qos = integer(obj, "vlanQoS", 0, 7)?.map(|v| v as u8);
        let vlan_proto = vlan_proto(obj)?;
        match vlan {
            None if vlan_qos.is_some() => return Err(err("\"vlanQoS\" needs \"vlan\" to be set")),
            None if vlan_proto.is_some() => return Err(err("\"vlanProto\" needs \"vlan\" to be set")),
            Some(0) if vlan_qos.is_some_and(|q| q != 0) => {
                return Err(err("a non-zero \"vlanQoS\" needs a non-zero \"vlan\""))
            }
            Some(0) if vlan_proto == Some(VlanProto::Dot1Ad) => {
                return Err(err("\"vlanProto\": \"802.1ad\" needs a non-zero \"vlan\""))
            }
            _ => {}
        }
        let mut conf = SriovConf {
            cni_version,
            device_id,
            vlan,
            vlan_qos: vlan_qos.unwrap_or(0),
            vlan_proto: vlan_proto.unwrap_or_default(),
            spoofchk: on_off(obj, "spoofchk")?,
            trust: on_off(obj, "trust")?,
            link_state: link_state(obj)?,
            min_tx_rate: integer(obj, "min_tx_rate", 0, u64::from(u32::MAX))?.map(|v| v as u32),
            max_tx_rate: integer(obj, "max_tx_rate", 0, u64::from(u32::MAX))?.map(|v| v as u32),
            mac: mac(obj.get("mac"), "\"mac\"")?,
            mtu: integer(obj, "mtu", 68, 65535)?.map(|v| v as u32),
            has_ipam: has_ipam(obj)?,
        };
        if let Some(text) = cni_arg(args, "MAC") {
            conf.mac = mac(Some(&Value::String(text.to_owned())), "CNI_ARGS MAC")?;
        }
        let runtime = match obj.get("runtimeConfig") {
            None | Some(Value::Null) => None,
            Some(Value::Object(runtime)) => Some(runtime),
            Some(other) => return Err(err(format!("\"runtimeConfig\" must be an object, found {other}"))),
        };
        if let Some(runtime) = runtime {
            if let Some(runtime_mac) = mac(runtime.get("mac"), "runtimeConfig \"mac\"")? {
                conf.mac = Some(runtime_mac);
            }
            if let Some(egress) = bandwidth_egress_mbps(runtime)? {
                conf.max_tx_rate = Some(egress);
            }
            // A VF's traffic never crosses the host, where port mappings are made: refused
            // rather than silently ignored.
            if runtime.get("portMappings").and_then(Value::as_array).is_some_and(|m| !m.is_empty()) {
                return Err(err(
                    "runtimeConfig \"portMappings\": an SR-IOV VF's traffic bypasses the host, so no plugin can map \
                     host ports to it; expose the pod another way (a Service, or a port mapping on a bridge or \
                     macvlan network)",
                ));
            }
        }
        if let (Some(min), Some(max)) = (conf.min_tx_rate, conf.max_tx_rate) {
            if max != 0 && min > max {
                return Err(err(format!(
                    "\"min_tx_rate\" ({min} Mbps) must not exceed \"max_tx_rate\" ({max} Mbps)"
                )));
            }
        }
        Ok(conf)
    }

    /// The PF-side changes an ADD makes, in sriov-cni's order. The VLAN is always set, to 0 when
    /// none is configured, so a VLAN left on the VF by a previous user never leaks into this pod.
    pub fn vf_settings(&self) -> Vec<VfSetting> {
        let mut settings = vec![VfSetting::Vlan {
            vlan: self.vlan.unwrap_or(0),
            qos: self.vlan_qos,
            proto: self.vlan_proto,
        }];
        if let Some(mac) = self.mac {
            settings.push(VfSetting::Mac { mac });
        }
        if self.min_tx_rate.is_some() || self.max_tx_rate.is_some() {
            settings.push(VfSetting::Rate {
                min_tx_rate: self.min_tx_rate.unwrap_or(0),
                max_tx_rate: self.max_tx_rate.unwrap_or(0),
            });
        }
        if let Some(on) = self.spoofchk {
            settings.push(VfSetting::SpoofCheck { on });
        }
        if let Some(on) = self.trust {
            settings.push(VfSetting::Trust { on });
        }
        if let Some(state) = self.link_state {
            settings.push(VfSetting::LinkState { state });
        }
        settings
    }
}

/// The VF of a config, for DEL and GC: they must work with whatever config ADD was given, so
/// only `deviceID` is read. `None` when it is missing or invalid, as then ADD cannot have
/// claimed anything.
pub fn device_id_for_del(config: &Value) -> Option<String> {
    config.as_object().and_then(|obj| device_id(obj).ok())
}

/// Whether the config has an `ipam` section to run (ADD validated it; DEL only needs to know).
pub fn has_ipam_for_del(config: &Value) -> bool {
    config.as_object().is_some_and(|obj| has_ipam(obj).unwrap_or(false))
}

/// The value of `key` in `CNI_ARGS` ("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;MAC=...").
pub fn cni_arg<'a>(args: &'a str, key: &str) -> Option<&'a str> {
    args.split(';').filter_map(|pair| pair.split_once('=')).find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn err(msg: impl Into<String>) -> SriovError {
    SriovError::Config(msg.into())
}

/// `DDDD:BB:DD.F` in hex, as sysfs names PCI functions. sriov-cni accepts exactly this form; a
/// strict check also keeps the value from escaping the sysfs and state directories.
fn device_id(obj: &Map<String, Value>) -> Result<String, SriovError> {
    let text = match obj.get("deviceID") {
        None | Some(Value::Null) => {
            return Err(err("\"deviceID\" (the PCI address of the VF, e.g. \"0000:03:02.3\") is required"))
        }
        Some(Value::String(text)) => text,
        Some(other) => return Err(err(format!("\"deviceID\" must be a string, found {other}"))),
    };
    let invalid = || {
        err(format!(
            "\"deviceID\" {text:?} is not a PCI address; expected domain:bus:device.function in hex, \
             e.g. \"0000:03:02.3\""
        ))
    };
    let (domain, rest) = text.split_once(':').ok_or_else(invalid)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(invalid)?;
    let (device, function) = rest.split_once('.').ok_or_else(invalid)?;
    let hex = |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
    let device_ok = hex(device, 2) && u8::from_str_radix(device, 16).is_ok_and(|d| d <= 0x1f);
    let function_ok = matches!(function.as_bytes(), [b'0'..=b'7']);
    if !(hex(domain, 4) && hex(bus, 2) && device_ok && function_ok) {
        return Err(invalid());
    }
    Ok(text.to_ascii_lowercase())
}

/// An optional integer key within `min..=max`.
fn integer(obj: &Map<String, Value>, key: &str, min: u64, max: u64) -> Result<Option<u64>, SriovError> {
    let value = match obj.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(value) => value,
    };
    match value.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(err(format!("\"{key}\" must be an integer from {min} to {max}, found {value}"))),
    }
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, SriovError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        // sriov-cni's Go struct reads "" as "not set".
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(err(format!("\"{key}\" must be a string, found {other}"))),
    }
}

fn vlan_proto(obj: &Map<String, Value>) -> Result<Option<VlanProto>, SriovError> {
    match string(obj, "vlanProto")?.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(None),
        Some("802.1q") => Ok(Some(VlanProto::Dot1Q)),
        Some("802.1ad") => Ok(Some(VlanProto::Dot1Ad)),
        Some(other) => Err(err(format!("\"vlanProto\" must be \"802.1Q\" or \"802.1ad\", found {other:?}"))),
    }
}

fn on_off(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, SriovError> {
    match string(obj, key)? {
        None => Ok(None),
        Some("on") => Ok(Some(true)),
        Some("off") => Ok(Some(false)),
        Some(other) => Err(err(format!("\"{key}\" must be \"on\" or \"off\", found {other:?}"))),
    }
}

fn link_state(obj: &Map<String, Value>) -> Result<Option<LinkState>, SriovError> {
    match string(obj, "link_state")? {
        None => Ok(None),
        Some("auto") => Ok(Some(LinkState::Auto)),
        Some("enable") => Ok(Some(LinkState::Enable)),
        Some("disable") => Ok(Some(LinkState::Disable)),
        Some(other) => {
            Err(err(format!("\"link_state\" must be \"auto\", \"enable\" or \"disable\", found {other:?}")))
        }
    }
}

fn mac(value: Option<&Value>, what: &str) -> Result<Option<Mac>, SriovError> {
    let text = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) if text.is_empty() => return Ok(None),
        Some(Value::String(text)) => text,
        Some(other) => return Err(err(format!("{what} must be a string, found {other}"))),
    };
    let mac: Mac = text.parse().map_err(|reason| err(format!("{what}: {reason}")))?;
    if mac.is_zero() || !mac.is_unicast() {
        return Err(err(format!("{what} {mac} is not a unicast address (zero, multicast or broadcast)")));
    }
    Ok(Some(mac))
}

fn has_ipam(obj: &Map<String, Value>) -> Result<bool, SriovError> {
    match obj.get("ipam") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Object(ipam)) if ipam.is_empty() => Ok(false),
        Some(Value::Object(ipam)) => match ipam.get("type") {
            Some(Value::String(kind)) if !kind.is_empty() => Ok(true),
            _ => Err(err("\"ipam\" needs a \"type\" (the IPAM plugin to run)")),
        },
        Some(other) => Err(err(format!("\"ipam\" must be an object, found {other}"))),
    }
}

/// `runtimeConfig.bandwidth` (bits per second, as the bandwidth plugin reads it): egress becomes
/// the VF's `max_tx_rate` in Mbps, rounded up so the limit is never stricter than asked. A VF has
/// no receive limiter, so an ingress limit is refused rather than silently not enforced.
fn bandwidth_egress_mbps(runtime: &Map<String, Value>) -> Result<Option<u32>, SriovError> {
    let bandwidth = match runtime.get("bandwidth") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(bandwidth)) => bandwidth,
        Some(other) => {
            return Err(err(format!("runtimeConfig \"bandwidth\" must be an object, found {other}")))
        }
    };
    let rate = |key: &str| -> Result<u64, SriovError> {
        match bandwidth.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(value) => value.as_u64().ok_or_else(|| {
                err(format!(
                    "runtimeConfig bandwidth \"{key}\" must be a non-negative integer, found {value}"
                ))
            }),
        }
    };
    if rate("ingressRate")? != 0 {
        return Err(err(
            "runtimeConfig bandwidth \"ingressRate\": an SR-IOV VF can only limit what it transmits \
             (the pod's egress); remove the ingress limit or chain the bandwidth plugin",
        ));
    }
    match rate("egressRate")? {
        0 => Ok(None),
        bits => {
            let mbps = bits.div_ceil(1_000_000);
            u32::try_from(mbps).map(Some).map_err(|_| {
                err(format!("runtimeConfig bandwidth \"egressRate\" {bits} bits/s is too large for a VF"))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with(extra: Value) -> Value {
        let mut config =
            json!({"cniVersion": "1.0.0", "name": "n", "type": "sriov", "deviceID": "0000:03:02.3"});
        for (key, value) in extra.as_object().expect("an object") {
            config[key] = value.clone();
        }
        config
    }

    fn parse(extra: Value) -> Result<SriovConf, String> {
        SriovConf::parse(&with(extra), "").map_err(|e| e.to_string())
    }

    fn mac(text: &str) -> Mac {
        text.parse().expect("a MAC")
    }

    #[test]
    fn every_key_is_read() {
        let conf = parse(json!({
            "cniVersion": "0.4.0", "deviceID": "0000:AF:1f.7",
            "vlan": 4094, "vlanQoS": 7, "vlanProto": "802.1ad",
            "spoofchk": "off", "trust": "on", "link_state": "disable",
            "min_tx_rate": 100, "max_tx_rate": 1000,
            "mac": "02:00:00:00:00:01", "mtu": 9000, "ipam": {"type": "host-local"},
            "logLevel": "debug", "someUnknownKey": [1, 2]
        }))
        .expect("valid");
        assert_eq!(
            conf,
            SriovConf {
                cni_version: "0.4.0".into(),
                device_id: "0000:af:1f.7".into(),
                vlan: Some(4094),
                vlan_qos: 7,
                vlan_proto: VlanProto::Dot1Ad,
                spoofchk: Some(false),
                trust: Some(true),
                link_state: Some(LinkState::Disable),
                min_tx_rate: Some(100),
                max_tx_rate: Some(1000),
                mac: Some(mac("02:00:00:00:00:01")),
                mtu: Some(9000),
                has_ipam: true,
            }
        );
    }

    #[test]
    fn a_bare_config_changes_only_the_vlan() {
        let conf = parse(json!({"ipam": {}})).expect("valid");
        assert_eq!((conf.vlan, conf.mac, conf.has_ipam), (None, None, false));
        assert_eq!(conf.vf_settings(), [VfSetting::Vlan { vlan: 0, qos: 0, proto: VlanProto::Dot1Q }]);
        // Go's empty strings mean "not set" to sriov-cni.
        let conf =
            parse(json!({"spoofchk": "", "trust": "", "link_state": "", "mac": "", "vlanProto": null}))
                .expect("valid");
        assert_eq!(conf.vf_settings().len(), 1);
        assert_eq!(
            SriovConf::parse(&json!({"deviceID": "0000:03:02.3"}), "").expect("valid").cni_version,
            "0.1.0"
        );
    }

    #[test]
    fn port_mappings_are_refused_saying_why() {
        let e = parse(json!({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80}]}}))
            .unwrap_err();
        assert!(e.contains("SR-IOV VF's traffic bypasses the host"), "{e}");
        assert!(parse(json!({"runtimeConfig": {"portMappings": []}})).is_ok());
    }

    #[test]
    fn settings_come_in_sriov_cni_order() {
        let conf = parse(json!({
            "link_state": "auto", "trust": "off", "spoofchk": "on", "max_tx_rate": 5,
            "mac": "02:00:00:00:00:02",
            "vlan": 9
        }))
        .expect("valid");
        assert_eq!(
            conf.vf_settings(),
            [
                VfSetting::Vlan { vlan: 9, qos: 0, proto: VlanProto::Dot1Q },
                VfSetting::Mac { mac: mac("02:00:00:00:00:02") },
                VfSetting::Rate { min_tx_rate: 0, max_tx_rate: 5 },
                VfSetting::SpoofCheck { on: true },
                VfSetting::Trust { on: false },
                VfSetting::LinkState { state: LinkState::Auto },
            ]
        );
    }

    #[test]
    fn the_mac_comes_from_runtime_config_then_cni_args_then_the_config() {
        let config = with(json!({"mac": "02:00:00:00:00:01"}));
        assert_eq!(SriovConf::parse(&config, "").unwrap().mac, Some(mac("02:00:00:00:00:01")));
        let args = "IgnoreUnknown=1;MAC=02:00:00:00:00:02;K8S_POD_NAME=p";
        assert_eq!(SriovConf::parse(&config, args).unwrap().mac, Some(mac("02:00:00:00:00:02")));
        let config = with(json!({"mac": "02:00:00:00:00:01", "runtimeConfig": {"mac": "02:00:00:00:00:03"}}));
        assert_eq!(SriovConf::parse(&config, args).unwrap().mac, Some(mac("02:00:00:00:00:03")));
        let err = SriovConf::parse(&config, "MAC=nonsense").unwrap_err().to_string();
        assert!(err.contains("CNI_ARGS MAC") && err.contains("nonsense"), "{err}");
    }

    #[test]
    fn bandwidth_egress_becomes_max_tx_rate_rounded_up_and_ingress_is_refused() {
        let egress = |bits: u64| {
            let bandwidth = json!({"egressRate": bits, "egressBurst": 99});
            parse(json!({"max_tx_rate": 7, "runtimeConfig": {"bandwidth": bandwidth}}))
                .expect("valid")
                .max_tx_rate
        };
        assert_eq!(egress(1), Some(1));
        assert_eq!(egress(1_000_000), Some(1));
        assert_eq!(egress(1_000_001), Some(2));
        assert_eq!(egress(0), Some(7), "0 is no limit: the config's stays");
        let err = parse(json!({"runtimeConfig": {"bandwidth": {"ingressRate": 8000, "ingressBurst": 8000}}}))
            .unwrap_err();
        assert!(err.contains("ingressRate") && err.contains("egress"), "{err}");
        let err =
            parse(json!({"min_tx_rate": 50, "runtimeConfig": {"bandwidth": {"egressRate": 10_000_000}}}))
                .unwrap_err();
        assert!(err.contains("\"min_tx_rate\" (50 Mbps) must not exceed \"max_tx_rate\" (10 Mbps)"), "{err}");
    }

    #[test]
    fn invalid_values_are_refused_with_what_is_accepted() {
        let cases = [
            (
                json!({"deviceID": null}),
                "\"deviceID\" (the PCI address of the VF, e.g. \"0000:03:02.3\") is required",
            ),
            (json!({"deviceID": 3}), "\"deviceID\" must be a string, found 3"),
            (json!({"deviceID": "03:02.3"}), "\"deviceID\" \"03:02.3\" is not a PCI address"),
            (json!({"deviceID": "0000:03:20.0"}), "is not a PCI address"),
            (json!({"deviceID": "0000:03:02.8"}), "is not a PCI address"),
            (json!({"deviceID": "0000:03:02.3/../x"}), "is not a PCI address"),
            (json!({"deviceID": "../../etc:03:02.3"}), "is not a PCI address"),
            (json!({"vlan": -1}), "\"vlan\" must be an integer from 0 to 4094, found -1"),
            (json!({"vlan": 4095}), "\"vlan\" must be an integer from 0 to 4094, found 4095"),
            (json!({"vlan": "10"}), "\"vlan\" must be an integer from 0 to 4094, found \"10\""),
            (json!({"vlan": 1.5}), "\"vlan\" must be an integer from 0 to 4094, found 1.5"),
            (json!({"vlan": 1, "vlanQoS": 8}), "\"vlanQoS\" must be an integer from 0 to 7, found 8"),
            (json!({"vlanQoS": 1}), "\"vlanQoS\" needs \"vlan\" to be set"),
            (json!({"vlanProto": "802.1q"}), "\"vlanProto\" needs \"vlan\" to be set"),
            (json!({"vlan": 0, "vlanQoS": 3}), "a non-zero \"vlanQoS\" needs a non-zero \"vlan\""),
            (
                json!({"vlan": 0, "vlanProto": "802.1ad"}),
                "\"vlanProto\": \"802.1ad\" needs a non-zero \"vlan\"",
            ),
            (
                json!({"vlan": 1, "vlanProto": "qinq"}),
                "\"vlanProto\" must be \"802.1Q\" or \"802.1ad\", found \"qinq\"",
            ),
            (json!({"spoofchk": "yes"}), "\"spoofchk\" must be \"on\" or \"off\", found \"yes\""),
            (json!({"trust": true}), "\"trust\" must be a string, found true"),
            (
                json!({"link_state": "up"}),
                "\"link_state\" must be \"auto\", \"enable\" or \"disable\", found \"up\"",
            ),
            (json!({"min_tx_rate": -5}), "\"min_tx_rate\" must be an integer from 0 to 4294967295, found -5"),
            (json!({"max_tx_rate": 5_000_000_000_u64}), "\"max_tx_rate\" must be an integer from 0"),
            (json!({"min_tx_rate": 20, "max_tx_rate": 10}), "must not exceed"),
            (json!({"mac": "02:00:00:00:00"}), "\"mac\": \"02:00:00:00:00\" is not a MAC address"),
            (json!({"mac": "01:00:5e:00:00:01"}), "\"mac\" 01:00:5e:00:00:01 is not a unicast address"),
            (json!({"mac": "00:00:00:00:00:00"}), "is not a unicast address"),
            (
                json!({"runtimeConfig": {"mac": "ff:ff:ff:ff:ff:ff"}}),
                "runtimeConfig \"mac\" ff:ff:ff:ff:ff:ff",
            ),
            (json!({"runtimeConfig": []}), "\"runtimeConfig\" must be an object"),
            (
                json!({"runtimeConfig": {"bandwidth": {"egressRate": "1M"}}}),
                "\"egressRate\" must be a non-negative integer",
            ),
            (json!({"mtu": 10}), "\"mtu\" must be an integer from 68 to 65535, found 10"),
            (json!({"ipam": {"subnet": "10.0.0.0/8"}}), "\"ipam\" needs a \"type\""),
            (json!({"ipam": "host-local"}), "\"ipam\" must be an object"),
            (json!({"cniVersion": 1}), "\"cniVersion\" must be a string"),
            (json!({"vlan_trunk": "10-20"}), "\"vlan_trunk\" is not supported"),
        ];
        for (extra, expected) in cases {
            let err = parse(extra.clone()).expect_err(&format!("{extra} must be refused"));
            assert!(err.starts_with("invalid sriov config: "), "{err}");
            assert!(err.contains(expected), "{extra}: {err}");
        }
        let err = SriovConf::parse(&json!([]), "").unwrap_err();
        assert_eq!(crate::cni::CniCode::cni_code(&err), crate::cni::ErrorCode::InvalidNetworkConfig);
    }

    #[test]
    fn del_reads_only_what_it_needs_and_never_fails_on_it() {
        assert_eq!(device_id_for_del(&with(json!({"vlan": 99999}))).as_deref(), Some("0000:03:02.3"));
        assert_eq!(device_id_for_del(&with(json!({"deviceID": "nonsense"}))), None);
        assert_eq!(device_id_for_del(&json!("not even an object")), None);
        assert!(has_ipam_for_del(&with(json!({"ipam": {"type": "static"}}))));
        assert!(!has_ipam_for_del(&with(json!({"ipam": {"no": "type"}}))));
    }

    #[test]
    fn cni_args_are_split_on_semicolons() {
        let args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=web-0;MAC=02:00:00:00:00:01";
        assert_eq!(cni_arg(args, "K8S_POD_NAME"), Some("web-0"));
        assert_eq!(cni_arg(args, "MAC"), Some("02:00:00:00:00:01"));
        assert_eq!(cni_arg(args, "K8S_POD"), None);
        assert_eq!(cni_arg("", "MAC"), None);
    }
}
