//! The macvlan config, exactly as the reference plugin (containernetworking/plugins
//! plugins/main/macvlan) reads it, so existing NetworkAttachmentDefinitions work unchanged:
//!
//! - `master`: the node interface to attach to; empty or absent: the interface of the default
//!   route (of the pod's namespace with `linkInContainer`);
//! - `mode`: `bridge` (default), `private`, `vepa` or `passthru`;
//! - `mtu`: 0 (default: the master's) up to the master's MTU;
//! - `mac`: the interface's MAC; `MAC=` in CNI_ARGS overrides it, and `runtimeConfig.mac`
//!   (capability `mac`, the networks annotation's `mac`) overrides both;
//! - `linkInContainer`: the master is an interface of the pod's namespace, not the node's;
//! - `ipam`: any IPAM plugin; without a `type` the interface gets no address (layer 2 only);
//! - `dns`: copied into the result as is (the IPAM plugin's DNS is not used, as in the
//!   reference).
//!
//! Types are checked the way Go's JSON decoding does (null reads as unset, a wrong type is an
//! error; [`crate::cni::json`] reads them); unknown keys are ignored. Values (mode, MAC, MTU range) are checked separately, in
//! [`MacvlanConf::settings`], so that DEL never fails on a value it does not need.

use serde_json::Value;

use crate::cni::json::{FieldError, JsonObject};
use crate::cni::result::Dns;
use crate::native::netconf::{self, mac_from_cni_args, unicast_mac, NetconfError};
use crate::netlink::{Mac, MacVlanMode};

/// The keys of a macvlan config that matter, types checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MacvlanConf {
    /// "0.1.0" when absent, as libcni reads a config from before versioning.
    pub cni_version: String,
    pub name: String,
    /// None: the interface of the default route.
    pub master: Option<String>,
    pub mode: String,
    /// As written; may be out of range until [`MacvlanConf::settings`] checks it.
    pub mtu: i64,
    pub mac: Option<String>,
    pub runtime_mac: Option<String>,
    pub link_in_container: bool,
    /// None: layer 2 only.
    pub ipam_type: Option<String>,
    pub dns: Dns,
}

/// The checked values an ADD or CHECK acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: MacVlanMode,
    /// 0: the master's.
    pub mtu: u32,
    pub mac: Option<Mac>,
}

/// What is wrong with a macvlan config or its per-pod arguments: the user fixes it (code 7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Netconf(#[from] NetconfError),
    #[error("unknown macvlan mode {0:?}: use bridge, private, vepa or passthru")]
    Mode(String),
    #[error("mtu {0} is invalid: use 0 (the master's MTU) or a positive MTU")]
    Mtu(i64),
}

impl MacvlanConf {
    pub fn parse(config: &Value) -> Result<MacvlanConf, ConfigError> {
        netconf::load(config, "(the macvlan config itself)", Self::read)
    }

    fn read(top: &JsonObject) -> Result<MacvlanConf, FieldError> {
        let runtime = top.object("runtimeConfig")?;
        let ipam = top.object("ipam")?;
        Ok(MacvlanConf {
            cni_version: top.opt_string("cniVersion")?.unwrap_or_else(|| "0.1.0".into()),
            name: top.opt_string("name")?.unwrap_or_default(),
            master: top.opt_string("master")?,
            mode: top.opt_string("mode")?.unwrap_or_default(),
            mtu: top.integer("mtu")?.unwrap_or(0),
            mac: top.opt_string("mac")?,
            runtime_mac: runtime.map(|r| r.opt_string("mac")).transpose()?.flatten(),
            link_in_container: top.boolean("linkInContainer")?.unwrap_or(false),
            ipam_type: ipam.map(|i| i.opt_string("type")).transpose()?.flatten(),
            dns: Dns::read_field(top, "dns")?,
        })
    }

    /// Mode, MTU and MAC, checked. `cni_args` is CNI_ARGS, whose `MAC=` the reference reads.
    pub fn settings(&self, cni_args: &str) -> Result<Settings, ConfigError> {
        let mode = mode_from_name(&self.mode)?;
        let mtu = u32::try_from(self.mtu).map_err(|_| ConfigError::Mtu(self.mtu))?;
        // Later sources win, as in the reference: config, then CNI_ARGS, then runtimeConfig.
        let mac_text = [self.runtime_mac.clone(), mac_from_cni_args(cni_args)?, self.mac.clone()]
            .into_iter()
            .flatten()
            .next();
        let mac = mac_text.map(|text| unicast_mac(&text)).transpose()?;
        Ok(Settings { mode, mtu, mac })
    }

    pub fn is_layer3(&self) -> bool {
        self.ipam_type.is_some()
    }
}

/// The reference's `modeFromString`.
pub fn mode_from_name(name: &str) -> Result<MacVlanMode, ConfigError> {
    match name {
        "" | "bridge" => Ok(MacVlanMode::Bridge),
        "private" => Ok(MacVlanMode::Private),
        "vepa" => Ok(MacVlanMode::Vepa),
        "passthru" => Ok(MacVlanMode::Passthrough),
        other => Err(ConfigError::Mode(other.to_owned())),
    }
}

/// The reference's `modeToString`, for messages.
pub fn mode_name(mode: MacVlanMode) -> String {
    match mode {
        MacVlanMode::Bridge => "bridge".into(),
        MacVlanMode::Private => "private".into(),
        MacVlanMode::Vepa => "vepa".into(),
        MacVlanMode::Passthrough => "passthru".into(),
        MacVlanMode::Source => "source".into(),
        MacVlanMode::Other(n) => format!("mode {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_reference_config_reads_every_key() {
        let conf = MacvlanConf::parse(&json!({
            "cniVersion": "1.0.0", "name": "blue", "type": "macvlan", "master": "eth1", "mode": "vepa",
            "mtu": 1400, "mac": "0a:00:00:00:00:01", "linkInContainer": true,
            "runtimeConfig": {"mac": "0a:00:00:00:00:02"},
            "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"},
            "dns": {"nameservers": ["10.1.0.1"], "domain": "example.org", "search": ["a"], "options": ["ndots:2"]},
            "unknownKey": [1, 2]
        }))
        .unwrap();
        assert_eq!(conf.cni_version, "1.0.0");
        assert_eq!(conf.master.as_deref(), Some("eth1"));
        assert!(conf.link_in_container && conf.is_layer3());
        assert_eq!(conf.ipam_type.as_deref(), Some("host-local"));
        assert_eq!(conf.dns.domain.as_deref(), Some("example.org"));
        assert_eq!(conf.dns.options, ["ndots:2"]);
        let settings = conf.settings("").unwrap();
        assert_eq!(settings.mode, MacVlanMode::Vepa);
        assert_eq!(settings.mtu, 1400);
        assert_eq!(settings.mac, Some(Mac([0x0a, 0, 0, 0, 0, 2])), "runtimeConfig wins");
    }

    #[test]
    fn defaults_are_the_references() {
        let conf = MacvlanConf::parse(&json!({"type": "macvlan", "master": null, "ipam": {}})).unwrap();
        assert_eq!(conf.cni_version, "0.1.0");
        assert_eq!(conf.master, None);
        assert!(!conf.is_layer3(), "an ipam without type is layer 2 only");
        assert_eq!(conf.settings("").unwrap(), Settings { mode: MacVlanMode::Bridge, mtu: 0, mac: None });
    }

    #[test]
    fn every_mode_maps_both_ways() {
        for (name, mode) in [
            ("bridge", MacVlanMode::Bridge),
            ("private", MacVlanMode::Private),
            ("vepa", MacVlanMode::Vepa),
            ("passthru", MacVlanMode::Passthrough),
        ] {
            assert_eq!(mode_from_name(name).unwrap(), mode);
            assert_eq!(mode_name(mode), name);
        }
        assert_eq!(mode_from_name("").unwrap(), MacVlanMode::Bridge);
        let err = mode_from_name("passthrough").unwrap_err().to_string();
        assert!(err.contains("\"passthrough\"") && err.contains("passthru"), "{err}");
    }

    #[test]
    fn mac_precedence_is_config_then_cni_args_then_runtime_config() {
        let mut conf = MacvlanConf { mac: Some("0a:00:00:00:00:01".into()), ..Default::default() };
        assert_eq!(conf.settings("").unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 1])));
        let args = "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=0a:00:00:00:00:03";
        assert_eq!(conf.settings(args).unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 3])));
        conf.runtime_mac = Some("0a:00:00:00:00:02".into());
        assert_eq!(conf.settings(args).unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 2])));
    }

    #[test]
    fn bad_values_say_what_to_write() {
        let conf = |v: Value| MacvlanConf::parse(&v).unwrap().settings("").unwrap_err().to_string();
        assert!(conf(json!({"mtu": -1})).contains("use 0 (the master's MTU)"));
        assert!(conf(json!({"mac": "01:00:5e:00:00:01"})).contains("unicast"));
        assert!(conf(json!({"mac": "00:00:00:00:00:00"})).contains("unicast"));
        assert!(conf(json!({"mac": "nope"})).contains("0a:58:0a:01:00:05"));
        assert!(conf(json!({"mode": "l2"})).contains("bridge, private, vepa or passthru"));
    }

    #[test]
    fn wrong_types_name_the_key_and_what_was_found() {
        let cases = [
            (json!({"master": 5}), "master: expected a string, got the number 5"),
            (json!({"mtu": "1500"}), "mtu: expected an integer, got the string \"1500\""),
            (json!({"mtu": 1500.5}), "mtu: expected an integer"),
            (json!({"linkInContainer": "yes"}), "linkInContainer: expected true or false"),
            (json!({"ipam": []}), "ipam: expected an object, got an array"),
            (json!({"ipam": {"type": 1}}), "ipam.type: expected a string"),
            (json!({"runtimeConfig": {"mac": 1}}), "runtimeConfig.mac: expected a string"),
            (json!({"dns": {"nameservers": "10.0.0.1"}}), "dns.nameservers: expected an array"),
            (json!({"dns": {"search": ["a", 1]}}), "dns.search[1]: expected a string, got the number 1"),
            (json!([1]), "(the macvlan config itself): expected an object, got an array"),
        ];
        for (config, want) in cases {
            let err = MacvlanConf::parse(&config).unwrap_err().to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }

    #[test]
    fn delete_needs_no_valid_values() {
        // A mode or MAC the kernel would refuse must not keep DEL from releasing the address.
        let conf =
            MacvlanConf::parse(&json!({"mode": "bogus", "mac": "zz", "ipam": {"type": "static"}})).unwrap();
        assert!(conf.is_layer3());
    }
}
