//! The `static` IPAM type, as the reference plugin (containernetworking/plugins
//! plugins/ipam/static, v1.1.1) behaves: pure, no state, DEL does nothing.
//!
//! Addresses come from, by increasing precedence:
//! 1. `ipam.addresses` plus CNI_ARGS `IP=<cidr>[,<cidr>...]` (appended; `GATEWAY=<ip>[,...]`
//!    sets the gateway of the CNI_ARGS addresses that contain it);
//! 2. `args.cni.ips` (replaces all of the above);
//! 3. `runtimeConfig.ips`, the `ips` capability (replaces all of the above).
//!
//! As in the reference, a config address is only parsed when nothing replaced it.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::addr::{canonical, canonical_net, parse_cidr, parse_ip};
use super::cni_args::load_args;
use super::netconf::{self, Common};
use super::IpamError;
use crate::cni::result::{CniResult, Dns, IpConfig, Route};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Host bits kept: the address the interface gets, with its prefix length.
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticConfig {
    pub cni_version: String,
    pub addresses: Vec<Address>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// An address before the sources are merged: config addresses stay text until nothing
/// overrides them.
enum Pending {
    Config { text: String, gateway: Option<IpAddr> },
    Parsed(Address),
}

pub fn parse(netconf: &Value, cni_args: &str) -> Result<StaticConfig, IpamError> {
    let common = netconf::common(netconf)?;
    let Common { ipam, top, .. } = &common;
    // What Go's JSON decoding rejects, before anything else.
    let mut addresses = Vec::new();
    for (i, a) in netconf::object_list(ipam.get("addresses"), "ipam.addresses")?.into_iter().enumerate() {
        let here = format!("ipam.addresses[{i}]");
        let text = netconf::opt_str(a.get("address"), &format!("{here}.address"))?.unwrap_or_default();
        let gateway = netconf::opt_ip(a.get("gateway"), &format!("{here}.gateway"))?;
        addresses.push(Pending::Config { text: text.to_owned(), gateway });
    }
    let routes = netconf::routes(ipam.get("routes"), "ipam.routes")?;
    let dns = netconf::dns(ipam.get("dns"), "ipam.dns")?;
    let args_ips = match netconf::opt_object(top.get("args"), "args")? {
        Some(args) => match netconf::opt_object(args.get("cni"), "args.cni")? {
            Some(cni) => netconf::str_list(cni.get("ips"), "args.cni.ips")?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };
    let runtime_ips = match netconf::opt_object(top.get("runtimeConfig"), "runtimeConfig")? {
        Some(rc) => netconf::str_list(rc.get("ips"), "runtimeConfig.ips")?,
        None => Vec::new(),
    };

    addresses.extend(env_addresses(cni_args)?.into_iter().map(Pending::Parsed));
    for (source, ips) in [("args.cni.ips", &args_ips), ("runtimeConfig.ips", &runtime_ips)] {
        if ips.is_empty() {
            continue;
        }
        addresses = ips
            .iter()
            .map(|text| {
                let address = parse_cidr(text).map(canonical_net).ok_or_else(|| {
                    IpamError::invalid_config(format!(
                        "an entry in the 'ips' field is NOT in CIDR notation, got: '{text}' (in {source:?}); \
                         write it with a prefix length, like \"10.1.0.5/24\""
                    ))
                })?;
                Ok(Pending::Parsed(Address { address, gateway: None }))
            })
            .collect::<Result<_, IpamError>>()?;
    }

    let addresses = addresses
        .into_iter()
        .map(|p| match p {
            Pending::Parsed(a) => Ok(a),
            Pending::Config { text, gateway } => {
                let address = parse_cidr(&text).map(canonical_net).ok_or_else(|| {
                    IpamError::invalid_config(format!(
                        "the 'address' field is expected to be in CIDR notation, got: '{text}'; \
                         write each ipam.addresses[].address with a prefix length, like \"10.1.0.5/24\""
                    ))
                })?;
                Ok(Address { address, gateway })
            }
        })
        .collect::<Result<Vec<_>, IpamError>>()?;

    let v4 = addresses.iter().filter(|a| a.address.addr().is_ipv4()).count();
    if (v4 > 1 || addresses.len() - v4 > 1) && !netconf::allows_many_per_family(&common.cni_version) {
        return Err(IpamError::invalid_config(format!(
            "CNI version {} does not support more than 1 address per family; use cniVersion 0.3.0 or later",
            common.cni_version
        )));
    }
    Ok(StaticConfig { cni_version: common.cni_version, addresses, routes, dns })
}

/// CNI_ARGS `IP` and `GATEWAY`.
fn env_addresses(cni_args: &str) -> Result<Vec<Address>, IpamError> {
    let (mut ip, mut gateway) = (String::new(), String::new());
    load_args(cni_args, |key, value| {
        match key {
            "IP" => ip = value.to_owned(),
            "GATEWAY" => gateway = value.to_owned(),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    let mut addresses = Vec::new();
    if !ip.is_empty() {
        for item in ip.split(',') {
            let text = item.trim();
            let address = parse_cidr(text).map(canonical_net).ok_or_else(|| {
                IpamError::invalid_env(format!(
                    "the 'ip' field is expected to be in CIDR notation, got: '{text}'; \
                     write CNI_ARGS IP= with prefix lengths, like IP=10.1.0.5/24"
                ))
            })?;
            addresses.push(Address { address, gateway: None });
        }
    }
    if !gateway.is_empty() {
        for item in gateway.split(',') {
            let gw = parse_ip(item.trim()).ok_or_else(|| {
                IpamError::invalid_env(format!(
                    "invalid gateway address: {item}; write GATEWAY=<ip>[,<ip>...]"
                ))
            })?;
            for a in addresses.iter_mut().filter(|a| super::addr::net_contains(&a.address, gw)) {
                a.gateway = Some(canonical(gw));
            }
        }
    }
    Ok(addresses)
}

impl StaticConfig {
    /// The ADD result: every address (no interface index: the parent plugin sets it),
    /// the routes and DNS as configured.
    pub fn result(&self) -> CniResult {
        CniResult {
            cni_version: self.cni_version.clone(),
            interfaces: Vec::new(),
            ips: self
                .addresses
                .iter()
                .map(|a| IpConfig { address: a.address, gateway: a.gateway, interface: None })
                .collect(),
            routes: self.routes.clone(),
            dns: self.dns.clone(),
        }
    }

    /// CHECK as the reference does it: each configured address found in the previous result
    /// must have the configured gateway (an address not found there is not an error).
    pub fn check(&self, prev_result: Option<&Value>, ifname: &str) -> Result<(), IpamError> {
        let prev = prev_result.filter(|v| !v.is_null()).ok_or_else(|| {
            IpamError::invalid_config("Required prevResult missing; CHECK needs the ADD result as prevResult")
        })?;
        let prev = CniResult::parse(prev, &self.cni_version)
            .map_err(|e| IpamError::invalid_config(format!("could not parse prevResult: {e}")))?;
        for want in &self.addresses {
            let Some(found) = prev.ips.iter().find(|ip| ip.address.addr() == want.address.addr()) else {
                continue;
            };
            if want.gateway.is_some_and(|gw| found.gateway != Some(gw)) {
                return Err(IpamError::reference(format!(
                    "static: Failed to match addr {} on interface {ifname}",
                    found.address.addr()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::CniCode;
    use serde_json::json;

    fn conf(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "s", "ipam": ipam})
    }

    fn addrs(c: &StaticConfig) -> Vec<String> {
        c.addresses
            .iter()
            .map(|a| match a.gateway {
                Some(gw) => format!("{} via {gw}", a.address),
                None => a.address.to_string(),
            })
            .collect()
    }

    #[test]
    fn config_addresses_routes_and_dns() {
        let v = conf(json!({"type": "static",
            "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}, {"address": "fd00::5/64"}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "fd01::/64", "gw": "fd00::1"}],
            "dns": {"nameservers": ["1.1.1.1"], "domain": "x", "search": ["a"], "options": ["ndots:2"]}}));
        let c = parse(&v, "").unwrap();
        assert_eq!(addrs(&c), ["10.1.0.5/24 via 10.1.0.1", "fd00::5/64"]);
        let r = c.result();
        assert_eq!(r.cni_version, "1.0.0");
        assert_eq!(r.ips.len(), 2);
        assert!(r.ips.iter().all(|ip| ip.interface.is_none()));
        assert_eq!(r.routes.len(), 2);
        assert_eq!(r.dns.nameservers, ["1.1.1.1"]);
        assert_eq!(
            r.to_version("1.0.0").unwrap(),
            json!({"cniVersion": "1.0.0",
                   "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}, {"address": "fd00::5/64"}],
                   "routes": [{"dst": "0.0.0.0/0"}, {"dst": "fd01::/64", "gw": "fd00::1"}],
                   "dns": {"nameservers": ["1.1.1.1"], "domain": "x", "search": ["a"], "options": ["ndots:2"]}})
        );
    }

    #[test]
    fn no_addresses_is_an_empty_result() {
        let c = parse(&conf(json!({"type": "static"})), "").unwrap();
        assert!(c.addresses.is_empty());
        assert!(c.result().ips.is_empty());
    }

    #[test]
    fn cni_args_append_and_gateway_applies_to_their_addresses_only() {
        let v =
            conf(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}]}));
        let c = parse(&v, "IP=10.2.0.5/24, fd00::7/64;GATEWAY=10.2.0.1").unwrap();
        assert_eq!(addrs(&c), ["10.1.0.5/24 via 10.1.0.1", "10.2.0.5/24 via 10.2.0.1", "fd00::7/64"]);
        // The config addresses are not parsed yet when GATEWAY applies, so it never reaches them.
        let c = parse(&v, "IP=10.2.0.5/24;GATEWAY=10.1.0.254").unwrap();
        assert_eq!(addrs(&c), ["10.1.0.5/24 via 10.1.0.1", "10.2.0.5/24"]);
        let c = parse(&v, "IgnoreUnknown=1;K8S_POD_NAME=p;IP=;GATEWAY=").unwrap();
        assert_eq!(addrs(&c), ["10.1.0.5/24 via 10.1.0.1"]);
    }

    #[test]
    fn args_then_runtime_config_replace_everything_before_them() {
        let base = json!({"cniVersion": "1.0.0", "name": "s",
            "ipam": {"type": "static", "addresses": [{"address": "not-even-parsed"}]},
            "args": {"cni": {"ips": ["10.3.0.5/24"]}}});
        let c = parse(&base, "IP=10.2.0.5/24;GATEWAY=10.2.0.1").unwrap();
        assert_eq!(addrs(&c), ["10.3.0.5/24"]);
        let mut v = base.clone();
        v["runtimeConfig"] = json!({"ips": ["10.4.0.5/24", "fd00::4/64"]});
        let c = parse(&v, "IP=10.2.0.5/24").unwrap();
        assert_eq!(addrs(&c), ["10.4.0.5/24", "fd00::4/64"]);
        // Empty lists replace nothing.
        let mut v = conf(json!({"type": "static", "addresses": [{"address": "10.1.0.5/24"}]}));
        v["runtimeConfig"] = json!({"ips": []});
        v["args"] = json!({"cni": {"ips": null}});
        assert_eq!(addrs(&parse(&v, "").unwrap()), ["10.1.0.5/24"]);
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        let c =
            parse(&conf(json!({"type": "static", "addresses": [{"address": "::ffff:10.1.0.5/120"}]})), "")
                .unwrap();
        assert_eq!(addrs(&c), ["10.1.0.5/24"]);
    }

    #[test]
    fn old_versions_take_one_address_per_family() {
        let ipam =
            json!({"type": "static", "addresses": [{"address": "10.1.0.5/24"}, {"address": "10.1.0.6/24"}]});
        let mut v = conf(ipam.clone());
        v["cniVersion"] = json!("0.2.0");
        let err = parse(&v, "").unwrap_err();
        assert_eq!(err.cni_code().code(), 7);
        assert!(err
            .to_string()
            .starts_with("CNI version 0.2.0 does not support more than 1 address per family"));
        v["cniVersion"] = json!("0.3.1");
        assert!(parse(&v, "").is_ok());
        let one_each =
            json!({"type": "static", "addresses": [{"address": "10.1.0.5/24"}, {"address": "fd00::5/64"}]});
        let mut v = conf(one_each);
        v["cniVersion"] = json!("0.2.0");
        assert!(parse(&v, "").is_ok());
    }

    #[test]
    fn errors_carry_the_reference_message_and_a_fix() {
        let with = |ipam: Value, args: &str| parse(&conf(ipam), args).unwrap_err();
        let cases = [
            (
                with(json!({"type": "static", "addresses": [{"address": "10.1.0.5"}]}), ""),
                7,
                "the 'address' field is expected to be in CIDR notation, got: '10.1.0.5'",
            ),
            (
                with(json!({"type": "static", "addresses": [{"gateway": "10.1.0.1"}]}), ""),
                7,
                "the 'address' field is expected to be in CIDR notation, got: ''",
            ),
            (
                with(
                    json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "x"}]}),
                    "",
                ),
                7,
                "invalid IP address: x",
            ),
            (
                with(json!({"type": "static", "addresses": "x"}), ""),
                7,
                "the IPAM config key \"ipam.addresses\" must be a list",
            ),
            (with(json!({"type": "static", "routes": [{"dst": "x"}]}), ""), 7, "invalid CIDR address: x"),
            (
                with(json!({"type": "static"}), "IP=10.2.0.5"),
                4,
                "the 'ip' field is expected to be in CIDR notation, got: '10.2.0.5'",
            ),
            (with(json!({"type": "static"}), "GATEWAY=x"), 4, "invalid gateway address: x"),
            (
                with(json!({"type": "static"}), "K8S_POD_NAME=x"),
                4,
                r#"ARGS: unknown args ["K8S_POD_NAME=x"]"#,
            ),
        ];
        for (err, code, want) in cases {
            assert_eq!(err.cni_code().code(), code, "{}", err);
            assert!(err.to_string().starts_with(want), "{}", err);
        }
        let mut v = conf(json!({"type": "static"}));
        v["runtimeConfig"] = json!({"ips": ["10.4.0.5"]});
        let err = parse(&v, "").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("an entry in the 'ips' field is NOT in CIDR notation, got: '10.4.0.5'"));
        v["runtimeConfig"] = json!({"ips": [5]});
        assert!(parse(&v, "").unwrap_err().to_string().contains("runtimeConfig.ips"));
    }

    #[test]
    fn check_compares_gateways_of_addresses_found_in_the_previous_result() {
        let c = parse(
            &conf(
                json!({"type": "static", "addresses": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1"}]}),
            ),
            "",
        )
        .unwrap();
        let prev =
            |gw: &str, addr: &str| json!({"cniVersion": "1.0.0", "ips": [{"address": addr, "gateway": gw}]});
        assert!(c.check(Some(&prev("10.1.0.1", "10.1.0.5/24")), "net1").is_ok());
        assert!(c.check(Some(&prev("10.1.0.1", "10.1.0.9/24")), "net1").is_ok(), "absent is no error");
        let err = c.check(Some(&prev("10.1.0.2", "10.1.0.5/24")), "net1").unwrap_err();
        assert_eq!(err.to_string(), "static: Failed to match addr 10.1.0.5 on interface net1");
        let err = c.check(None, "net1").unwrap_err();
        assert!(err.to_string().starts_with("Required prevResult missing"));
        assert!(c.check(Some(&json!({"ips": "x"})), "net1").is_err());
    }
}
