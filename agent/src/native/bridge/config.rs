//! The bridge config, exactly as the reference plugin (containernetworking/plugins
//! plugins/main/bridge) reads it, so existing configs and NetworkAttachmentDefinitions work
//! unchanged:
//!
//! - `bridge`: the node bridge (default `cni0`), created when missing;
//! - `isGateway`: the bridge gets each IP's gateway (the subnet's first address when IPAM gives
//!   none) and forwarding is enabled; `isDefaultGateway` also adds a default route through it;
//!   `forceAddress`: a bridge address in the way is replaced rather than refused;
//! - `mtu`: both veth ends and a new bridge (0: the kernel's default);
//! - `hairpinMode`, `promiscMode` (the bridge's): not both;
//! - `enabledad`: IPv6 duplicate address detection on the pod's interface (off by default);
//! - `disableContainerInterface`: the pod's end stays down (layer 2 only);
//! - the MAC: `MAC=` in CNI_ARGS, then `args.cni.mac`, then `runtimeConfig.mac` (the last wins);
//! - `ipam`: any IPAM plugin; without a `type` the interface gets no address (layer 2 only);
//! - `dns`: the result's DNS when set, else IPAM's;
//! - `ipMasq`: the pod's traffic leaving its subnet is masqueraded, in nftables; with
//!   `ipMasqBackend` `"nftables"` (or none), natively, with `"iptables"` by the reference binary;
//! - `macspoofchk`: frames from the pod with another source MAC than its own are dropped, in
//!   nftables.
//!
//! `ipMasqBackend: "iptables"`, `portIsolation` and VLANs (`vlan`, `vlanTrunk`, with
//! `preserveDefaultVlan`) are not done natively: a config that asks for one is handed to the
//! reference binary whole ([`BridgeConf::needs_reference`]). VLANs need the
//! kernel's bridge VLAN filtering, which the kernels plexus is tested on lack, so the native
//! code for them could not be compared with the reference.
//!
//! Types are checked the way Go's JSON decoding does (null reads as unset, a wrong type is an
//! error; unknown keys are ignored). Values are checked separately, in [`BridgeConf::settings`],
//! so that DEL never fails on a value it does not need.

use serde_json::Value;

use crate::cni::json::{FieldError, JsonObject};
use crate::cni::result::Dns;
use crate::native::netconf::{self, mac_from_cni_args, unicast_mac, NetconfError};
use crate::netlink::Mac;

/// The reference's default bridge name.
pub const DEFAULT_BRIDGE: &str = "cni0";

/// The `ipMasqBackend` values: the one done natively, the one handed to the reference.
const NFTABLES: &str = "nftables";
const IPTABLES: &str = "iptables";

/// One entry of `vlanTrunk`, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrunkEntry {
    pub min_id: Option<i64>,
    pub max_id: Option<i64>,
    pub id: Option<i64>,
}

/// The keys of a bridge config that matter, types checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BridgeConf {
    /// "0.1.0" when absent, as libcni reads a config from before versioning.
    pub cni_version: String,
    pub name: String,
    pub bridge: String,
    pub is_gateway: bool,
    pub is_default_gateway: bool,
    pub force_address: bool,
    pub ip_masq: bool,
    pub ip_masq_backend: Option<String>,
    /// As written; checked by [`BridgeConf::settings`].
    pub mtu: i64,
    pub hairpin_mode: bool,
    pub promisc_mode: bool,
    pub vlan: i64,
    /// None: no `vlanTrunk` key (or null); Some(empty): `[]`, which still turns filtering on.
    pub vlan_trunk: Option<Vec<TrunkEntry>>,
    pub preserve_default_vlan: bool,
    pub mac_spoof_check: bool,
    pub enable_dad: bool,
    pub disable_container_interface: bool,
    pub port_isolation: bool,
    pub args_mac: Option<String>,
    pub runtime_mac: Option<String>,
    /// None: layer 2 only.
    pub ipam_type: Option<String>,
    pub dns: Dns,
}

/// The checked values an ADD or CHECK acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// 0: the kernel's default.
    pub mtu: u32,
    /// The pod end's MAC.
    pub mac: Option<Mac>,
    /// isGateway, or implied by isDefaultGateway.
    pub is_gateway: bool,
    pub hairpin: bool,
}

/// What is wrong with a bridge config or its per-pod arguments: the user fixes it (code 7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Netconf(#[from] NetconfError),
    #[error("mtu {0} is invalid: use 0 (the default) or a positive MTU")]
    Mtu(i64),
    #[error("cannot set hairpin mode and promiscuous mode at the same time: drop one of \"hairpinMode\" and \"promiscMode\"")]
    HairpinAndPromisc,
    #[error("cannot use IPAM when DisableContainerInterface flag is set: drop \"ipam\" or \"disableContainerInterface\"")]
    IpamWithoutInterface,
    #[error("unknown ipMasqBackend {0:?}: use \"nftables\" or \"iptables\", or leave it out")]
    MasqBackend(String),
}

impl BridgeConf {
    pub fn parse(config: &Value) -> Result<BridgeConf, ConfigError> {
        netconf::load(config, "(the bridge config itself)", Self::read)
    }

    fn read(top: &JsonObject) -> Result<BridgeConf, FieldError> {
        let runtime = top.object("runtimeConfig")?;
        let args_cni = match top.object("args")? {
            Some(args) => args.object("cni")?,
            None => None,
        };
        let ipam = top.object("ipam")?;
        let vlan_trunk = match top.get("vlanTrunk") {
            None => None,
            Some(_) => Some(top.list("vlanTrunk", |entry| {
                Ok::<_, FieldError>(TrunkEntry {
                    min_id: entry.integer("minID")?,
                    max_id: entry.integer("maxID")?,
                    id: entry.integer("id")?,
                })
            })?),
        };
        let flag = |key: &str| top.boolean(key).map(Option::unwrap_or_default);
        Ok(BridgeConf {
            cni_version: top.opt_string("cniVersion")?.unwrap_or_else(|| "0.1.0".into()),
            name: top.opt_string("name")?.unwrap_or_default(),
            bridge: top.opt_string("bridge")?.unwrap_or_else(|| DEFAULT_BRIDGE.into()),
            is_gateway: flag("isGateway")?,
            is_default_gateway: flag("isDefaultGateway")?,
            force_address: flag("forceAddress")?,
            ip_masq: flag("ipMasq")?,
            ip_masq_backend: top.opt_string("ipMasqBackend")?,
            mtu: top.integer("mtu")?.unwrap_or(0),
            hairpin_mode: flag("hairpinMode")?,
            promisc_mode: flag("promiscMode")?,
            vlan: top.integer("vlan")?.unwrap_or(0),
            vlan_trunk,
            preserve_default_vlan: flag("preserveDefaultVlan")?,
            mac_spoof_check: flag("macspoofchk")?,
            enable_dad: flag("enabledad")?,
            disable_container_interface: flag("disableContainerInterface")?,
            port_isolation: flag("portIsolation")?,
            args_mac: args_cni.map(|a| a.opt_string("mac")).transpose()?.flatten(),
            runtime_mac: runtime.map(|r| r.opt_string("mac")).transpose()?.flatten(),
            ipam_type: ipam.map(|i| i.opt_string("type")).transpose()?.flatten(),
            dns: Dns::read_field(top, "dns")?,
        })
    }

    pub fn is_layer3(&self) -> bool {
        self.ipam_type.as_deref().is_some_and(|t| !t.is_empty())
    }

    /// Why this config goes to the reference binary instead, when it does: what it asks for
    /// that is not done natively.
    pub fn needs_reference(&self) -> Option<&'static str> {
        if self.ip_masq_backend.as_deref() == Some(IPTABLES) {
            Some("ipMasqBackend \"iptables\"")
        } else if self.port_isolation {
            Some("portIsolation")
        } else if self.vlan != 0 || self.vlan_trunk.is_some() {
            Some("VLANs (vlan, vlanTrunk)")
        } else {
            None
        }
    }

    /// Everything ADD and CHECK need, checked. `cni_args` is CNI_ARGS, whose `MAC=` counts.
    pub fn settings(&self, cni_args: &str) -> Result<Settings, ConfigError> {
        let mtu = u32::try_from(self.mtu).map_err(|_| ConfigError::Mtu(self.mtu))?;
        if self.hairpin_mode && self.promisc_mode {
            return Err(ConfigError::HairpinAndPromisc);
        }
        if self.is_layer3() && self.disable_container_interface {
            return Err(ConfigError::IpamWithoutInterface);
        }
        if let Some(backend) = self.ip_masq_backend.as_deref().filter(|b| *b != NFTABLES && *b != IPTABLES) {
            return Err(ConfigError::MasqBackend(backend.to_owned()));
        }
        // Later sources win, as in the reference: CNI_ARGS, then args.cni, then runtimeConfig.
        let mac_text = [self.runtime_mac.clone(), self.args_mac.clone(), mac_from_cni_args(cni_args)?]
            .into_iter()
            .flatten()
            .find(|m| !m.is_empty());
        let mac = mac_text.map(|text| unicast_mac(&text)).transpose()?;
        Ok(Settings {
            mtu,
            mac,
            is_gateway: self.is_gateway || self.is_default_gateway,
            hairpin: self.hairpin_mode,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_reference_config_reads_every_key() {
        let conf = BridgeConf::parse(&json!({
            "cniVersion": "1.0.0", "name": "blue", "type": "bridge", "bridge": "br9",
            "isGateway": true, "isDefaultGateway": true, "forceAddress": true, "mtu": 1400,
            "hairpinMode": true, "preserveDefaultVlan": true, "enabledad": true,
            "args": {"cni": {"mac": "0a:00:00:00:00:01"}},
            "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"},
            "dns": {"nameservers": ["10.1.0.1"]},
            "unknownKey": [1, 2]
        }))
        .unwrap();
        assert_eq!(conf.bridge, "br9");
        assert!(conf.is_gateway && conf.is_default_gateway && conf.force_address && conf.hairpin_mode);
        assert!(conf.preserve_default_vlan && conf.enable_dad && conf.is_layer3());
        assert_eq!(conf.needs_reference(), None);
        let settings = conf.settings("").unwrap();
        assert_eq!(settings.mtu, 1400);
        assert!(settings.is_gateway && settings.hairpin);
        assert_eq!(settings.mac, Some(Mac([0x0a, 0, 0, 0, 0, 1])));
    }

    #[test]
    fn defaults_are_the_references() {
        let conf = BridgeConf::parse(&json!({"type": "bridge", "bridge": null, "ipam": {}})).unwrap();
        assert_eq!(conf.cni_version, "0.1.0");
        assert_eq!(conf.bridge, "cni0");
        assert!(!conf.is_layer3(), "an ipam without type is layer 2 only");
        assert_eq!(conf.needs_reference(), None);
        let settings = conf.settings("").unwrap();
        assert_eq!(settings, Settings { mtu: 0, mac: None, is_gateway: false, hairpin: false });
    }

    #[test]
    fn is_default_gateway_implies_is_gateway() {
        let conf = BridgeConf::parse(&json!({"isDefaultGateway": true})).unwrap();
        assert!(conf.settings("").unwrap().is_gateway);
    }

    #[test]
    fn options_done_by_the_reference_are_named() {
        for (config, why) in [
            (json!({"ipMasq": true, "ipMasqBackend": "iptables"}), "ipMasqBackend \"iptables\""),
            (json!({"portIsolation": true}), "portIsolation"),
            (json!({"vlan": 5}), "VLANs (vlan, vlanTrunk)"),
            (json!({"vlanTrunk": []}), "VLANs (vlan, vlanTrunk)"),
        ] {
            assert_eq!(BridgeConf::parse(&config).unwrap().needs_reference(), Some(why), "{config}");
        }
        let plain =
            BridgeConf::parse(&json!({"vlan": 0, "vlanTrunk": null, "preserveDefaultVlan": true})).unwrap();
        assert_eq!(plain.needs_reference(), None);
        for native in [
            json!({"ipMasq": true}),
            json!({"ipMasq": true, "ipMasqBackend": "nftables"}),
            json!({"macspoofchk": true}),
        ] {
            assert_eq!(BridgeConf::parse(&native).unwrap().needs_reference(), None, "{native}");
        }
    }

    #[test]
    fn bad_values_say_what_to_write() {
        let settings = |v: Value| BridgeConf::parse(&v).unwrap().settings("").unwrap_err().to_string();
        assert!(settings(json!({"mtu": -1})).contains("use 0 (the default)"));
        assert!(settings(json!({"hairpinMode": true, "promiscMode": true})).contains("drop one of"));
        assert!(settings(json!({"disableContainerInterface": true, "ipam": {"type": "static"}}))
            .contains("cannot use IPAM when DisableContainerInterface"));
        assert!(settings(json!({"runtimeConfig": {"mac": "01:00:5e:00:00:01"}})).contains("unicast"));
        assert!(settings(json!({"args": {"cni": {"mac": "nope"}}})).contains("0a:58:0a:01:00:05"));
        assert!(settings(json!({"ipMasq": true, "ipMasqBackend": "ebpf"}))
            .contains("unknown ipMasqBackend \"ebpf\": use \"nftables\" or \"iptables\""));
    }

    #[test]
    fn mac_precedence_is_cni_args_then_args_then_runtime_config() {
        let mut conf = BridgeConf::default();
        let args = "IgnoreUnknown=1;K8S_POD_NAME=p;MAC=0a:00:00:00:00:03";
        assert_eq!(conf.settings(args).unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 3])));
        conf.args_mac = Some("0a:00:00:00:00:01".into());
        assert_eq!(conf.settings(args).unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 1])));
        conf.runtime_mac = Some("0a:00:00:00:00:02".into());
        assert_eq!(conf.settings(args).unwrap().mac, Some(Mac([0x0a, 0, 0, 0, 0, 2])));
        assert!(conf.settings("K8S_POD_NAME=p").unwrap_err().to_string().contains("unknown args"));
    }

    #[test]
    fn wrong_types_name_the_key_and_what_was_found() {
        let cases = [
            (json!({"bridge": 5}), "bridge: expected a string, got the number 5"),
            (json!({"isGateway": "yes"}), "isGateway: expected true or false"),
            (json!({"vlan": "100"}), "vlan: expected an integer"),
            (json!({"vlanTrunk": {"id": 1}}), "vlanTrunk: expected an array"),
            (json!({"vlanTrunk": [{"id": "1"}]}), "vlanTrunk[0].id: expected an integer"),
            (json!({"args": {"cni": {"mac": 1}}}), "args.cni.mac: expected a string"),
            (json!([1]), "(the bridge config itself): expected an object, got an array"),
        ];
        for (config, want) in cases {
            let err = BridgeConf::parse(&config).unwrap_err().to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }

    #[test]
    fn delete_needs_no_valid_values() {
        let conf = BridgeConf::parse(&json!({"vlan": 9999, "mtu": -5, "ipam": {"type": "static"}})).unwrap();
        assert!(conf.is_layer3());
    }
}
