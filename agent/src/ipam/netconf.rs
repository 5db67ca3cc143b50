//! Reading the parts of a plugin config every IPAM type shares: the network's name and
//! version, the `ipam` object, routes, DNS, and the CNI variables they are used with.
//!
//! The reference plugins decode with Go's `encoding/json`, which ignores unknown keys and
//! `null`, and fails on a wrong type; the same holds here, but every error names the key and
//! says what it must be.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value};

use super::addr::{canonical_net, parse_cidr, parse_ip};
use super::IpamError;
use crate::cni::result::{Dns, Route};
use crate::delegate::InvocationEnv;

/// What every IPAM type reads from the top of the config.
#[derive(Debug, Clone)]
pub struct Common<'a> {
    pub name: &'a str,
    /// "0.1.0" when absent, as libcni reads a config without one.
    pub cni_version: String,
    pub ipam: &'a Map<String, Value>,
    pub top: &'a Map<String, Value>,
}

pub fn common(netconf: &Value) -> Result<Common<'_>, IpamError> {
    let Value::Object(top) = netconf else {
        return Err(IpamError::invalid_config("the IPAM plugin's config must be a JSON object"));
    };
    let name = match top.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.as_str(),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            return Err(IpamError::invalid_config("missing network name; the config needs a \"name\""))
        }
        Some(_) => return Err(wrong_type("name", "a string")),
    };
    // Host-local makes the name a directory: libcni's rule keeps it a single, safe component.
    if !is_valid_name(name) {
        return Err(IpamError::invalid_config(format!(
            "invalid characters found in network name {name:?}; use letters, digits, '_', '.' and '-', \
             starting with a letter or digit"
        )));
    }
    let cni_version = match top.get("cniVersion") {
        None | Some(Value::Null) => "0.1.0".to_owned(),
        Some(Value::String(v)) if v.is_empty() => "0.1.0".to_owned(),
        Some(Value::String(v)) => v.clone(),
        Some(_) => return Err(wrong_type("cniVersion", "a string")),
    };
    // The result is built in this version, so it must be one plexus can write.
    if !crate::cni::result::is_supported_version(&cni_version) {
        return Err(IpamError::Version(format!(
            "incompatible CNI versions: config is {cni_version:?}, plexus supports {}",
            crate::cni::SUPPORTED_VERSIONS.join(", ")
        )));
    }
    let ipam = match top.get("ipam") {
        Some(Value::Object(ipam)) => ipam,
        None | Some(Value::Null) => {
            return Err(IpamError::invalid_config(
                "IPAM config missing 'ipam' key; add an \"ipam\" object with a \"type\"",
            ))
        }
        Some(_) => return Err(wrong_type("ipam", "an object")),
    };
    Ok(Common { name, cni_version, ipam, top })
}

/// libcni's `ValidateNetworkName`/`ValidateContainerID` pattern: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The checks libcni's skel makes on the CNI variables before any plugin runs. Host-local
/// writes the container ID and interface into its files as `<id>\r\n<ifname>`, so they must
/// not be able to contain a line break.
pub fn validate_env(env: &InvocationEnv) -> Result<(), IpamError> {
    if env.container_id.is_empty() {
        return Err(IpamError::invalid_env("required env variables [CNI_CONTAINERID] missing"));
    }
    if !is_valid_name(&env.container_id) {
        return Err(IpamError::invalid_env(format!(
            "invalid characters in containerID {:?}; it may hold letters, digits, '_', '.' and '-'",
            env.container_id
        )));
    }
    let ifname = &env.ifname;
    if ifname.is_empty() {
        return Err(IpamError::invalid_env("required env variables [CNI_IFNAME] missing"));
    }
    // IFNAMSIZ is 16 with the terminating NUL.
    if ifname.len() > 15 {
        return Err(IpamError::invalid_env(format!(
            "interface name {ifname:?} is too long; it must be at most 15 bytes"
        )));
    }
    if ifname == "." || ifname == ".." || ifname.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err(IpamError::invalid_env(format!(
            "interface name {ifname:?} contains / or : or whitespace characters, or is . or .."
        )));
    }
    Ok(())
}

pub fn wrong_type(path: &str, expected: &str) -> IpamError {
    IpamError::invalid_config(format!("the IPAM config key {path:?} must be {expected}"))
}

/// A string key; `null` and absent are `None`.
pub fn opt_str<'a>(v: Option<&'a Value>, path: &str) -> Result<Option<&'a str>, IpamError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(wrong_type(path, "a string")),
    }
}

/// An address key; empty is `None`, as Go reads an empty `net.IP`.
pub fn opt_ip(v: Option<&Value>, path: &str) -> Result<Option<IpAddr>, IpamError> {
    match opt_str(v, path)? {
        None | Some("") => Ok(None),
        Some(s) => parse_ip(s).map(Some).ok_or_else(|| {
            IpamError::invalid_config(format!(
                "invalid IP address: {s} (in {path:?}); write a plain address like \"10.1.0.1\""
            ))
        }),
    }
}

/// A list of strings; `null` and absent are empty.
pub fn str_list<'a>(v: Option<&'a Value>, path: &str) -> Result<Vec<&'a str>, IpamError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => {
            items.iter().map(|i| i.as_str().ok_or_else(|| wrong_type(path, "a list of strings"))).collect()
        }
        Some(_) => Err(wrong_type(path, "a list of strings")),
    }
}

/// A list of objects; `null` and absent are empty.
pub fn object_list<'a>(v: Option<&'a Value>, path: &str) -> Result<Vec<&'a Map<String, Value>>, IpamError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => {
            items.iter().map(|i| i.as_object().ok_or_else(|| wrong_type(path, "a list of objects"))).collect()
        }
        Some(_) => Err(wrong_type(path, "a list of objects")),
    }
}

/// An object key; `null` and absent are `None`.
pub fn opt_object<'a>(v: Option<&'a Value>, path: &str) -> Result<Option<&'a Map<String, Value>>, IpamError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(wrong_type(path, "an object")),
    }
}

/// A CIDR as libcni's `types.ParseCIDR` reads it: host bits kept.
pub fn cidr(s: &str, path: &str) -> Result<IpNet, IpamError> {
    parse_cidr(s).map(canonical_net).ok_or_else(|| {
        IpamError::invalid_config(format!(
            "invalid CIDR address: {s} (in {path:?}); write an address with prefix length like \"10.1.0.0/16\""
        ))
    })
}

/// `routes`: `[{"dst": CIDR, "gw": IP}]`, as libcni's `types.Route` of the reference plugins'
/// version, which has no other attribute.
pub fn routes(v: Option<&Value>, path: &str) -> Result<Vec<Route>, IpamError> {
    object_list(v, path)?
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let here = format!("{path}[{i}]");
            let dst = opt_str(r.get("dst"), &format!("{here}.dst"))?.ok_or_else(|| {
                IpamError::invalid_config(format!(
                    "route {here:?} has no \"dst\"; add the destination, e.g. \"0.0.0.0/0\""
                ))
            })?;
            Ok(Route {
                dst: cidr(dst, &format!("{here}.dst"))?,
                gw: opt_ip(r.get("gw"), &format!("{here}.gw"))?,
                mtu: None,
                advmss: None,
                priority: None,
                table: None,
                scope: None,
            })
        })
        .collect()
}

/// `dns`: `{"nameservers", "domain", "search", "options"}`.
pub fn dns(v: Option<&Value>, path: &str) -> Result<Dns, IpamError> {
    let Some(d) = opt_object(v, path)? else { return Ok(Dns::default()) };
    let strings = |key: &str| -> Result<Vec<String>, IpamError> {
        Ok(str_list(d.get(key), &format!("{path}.{key}"))?.into_iter().map(str::to_owned).collect())
    };
    Ok(Dns {
        nameservers: strings("nameservers")?,
        domain: opt_str(d.get("domain"), &format!("{path}.domain"))?
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        search: strings("search")?,
        options: strings("options")?,
    })
}

/// Whether results of `cni_version` may carry more than one address per family (0.3.0 on).
/// An unparsable version counts as old, as libcni's `GreaterThanOrEqualTo` failing does.
pub fn allows_many_per_family(cni_version: &str) -> bool {
    crate::cni::result::compare_versions(cni_version, "0.3.0").is_ok_and(|o| o.is_ge())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::CniCode;
    use serde_json::json;

    fn env(id: &str, ifname: &str) -> InvocationEnv {
        InvocationEnv {
            container_id: id.into(),
            netns: "/x".into(),
            ifname: ifname.into(),
            args: String::new(),
        }
    }

    #[test]
    fn common_reads_name_version_and_ipam() {
        let v = json!({"name": "net-a", "cniVersion": "1.0.0", "ipam": {"type": "static"}});
        let c = common(&v).unwrap();
        assert_eq!((c.name, c.cni_version.as_str()), ("net-a", "1.0.0"));
        assert_eq!(c.ipam["type"], "static");
        let v = json!({"name": "n", "ipam": {}});
        assert_eq!(common(&v).unwrap().cni_version, "0.1.0");
    }

    #[test]
    fn common_errors_say_what_to_fix() {
        let cases = [
            (json!([]), "must be a JSON object"),
            (json!({"ipam": {}}), "missing network name"),
            (json!({"name": "", "ipam": {}}), "missing network name"),
            (json!({"name": 3, "ipam": {}}), "\"name\" must be a string"),
            (json!({"name": "../x", "ipam": {}}), "invalid characters found in network name"),
            (json!({"name": "a/b", "ipam": {}}), "invalid characters found in network name"),
            (json!({"name": "-x", "ipam": {}}), "invalid characters found in network name"),
            (json!({"name": "n"}), "IPAM config missing 'ipam' key"),
            (json!({"name": "n", "ipam": "static"}), "\"ipam\" must be an object"),
            (json!({"name": "n", "cniVersion": 1, "ipam": {}}), "\"cniVersion\" must be a string"),
        ];
        for (v, want) in cases {
            let err = common(&v).unwrap_err();
            assert_eq!(err.cni_code().code(), 7, "{v}");
            assert!(err.to_string().contains(want), "{v}: {}", err);
        }
        let err = common(&json!({"name": "n", "cniVersion": "9.9.9", "ipam": {}})).unwrap_err();
        assert_eq!(err.cni_code().code(), 1);
        assert!(
            err.to_string().starts_with("incompatible CNI versions: config is \"9.9.9\""),
            "{}",
            err.to_string()
        );
    }

    #[test]
    fn env_is_validated_like_skel() {
        assert!(validate_env(&env("abc-1_2.3", "net1")).is_ok());
        assert!(validate_env(&env("c", "123456789012345")).is_ok());
        let cases = [
            (env("", "net1"), "CNI_CONTAINERID"),
            (env("a/b", "net1"), "invalid characters in containerID"),
            (env("a\r\nb", "net1"), "invalid characters in containerID"),
            (env("_a", "net1"), "invalid characters in containerID"),
            (env("c", ""), "CNI_IFNAME"),
            (env("c", "1234567890123456"), "too long"),
            (env("c", "a/b"), "contains /"),
            (env("c", "a:b"), "contains /"),
            (env("c", "a\nb"), "contains /"),
            (env("c", ".."), "contains /"),
        ];
        for (e, want) in cases {
            let err = validate_env(&e).unwrap_err();
            assert_eq!(err.cni_code().code(), 4, "{e:?}");
            assert!(err.to_string().contains(want), "{e:?}: {}", err);
        }
    }

    #[test]
    fn routes_and_dns() {
        let v = json!([{"dst": "0.0.0.0/0"}, {"dst": "10.9.9.9/8", "gw": "10.1.0.1", "priority": 5},
                       {"dst": "::ffff:10.0.0.0/104", "gw": ""}]);
        let r = routes(Some(&v), "routes").unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(r[1].dst.to_string(), "10.9.9.9/8", "host bits are kept");
        assert_eq!(r[1].gw, Some("10.1.0.1".parse().unwrap()));
        assert_eq!(r[1].priority, None, "the reference's routes have no priority");
        assert_eq!(r[2].dst.to_string(), "10.0.0.0/8");
        assert_eq!(r[2].gw, None);
        assert!(routes(None, "routes").unwrap().is_empty());
        for (bad, want) in [
            (json!("x"), "must be a list of objects"),
            (json!([{"gw": "10.1.0.1"}]), "has no \"dst\""),
            (json!([{"dst": "x"}]), "invalid CIDR address: x"),
            (json!([{"dst": "10.0.0.1"}]), "invalid CIDR address: 10.0.0.1"),
            (json!([{"dst": "0.0.0.0/0", "gw": "x"}]), "invalid IP address: x"),
        ] {
            let err = routes(Some(&bad), "ipam.routes").unwrap_err();
            assert!(err.to_string().contains(want), "{bad}: {}", err);
        }
        let d = dns(
            Some(&json!({"nameservers": ["1.1.1.1"], "domain": "x", "search": ["a", "b"], "options": ["ndots:2"]})),
            "dns",
        )
        .unwrap();
        assert_eq!(d.nameservers, ["1.1.1.1"]);
        assert_eq!(d.domain.as_deref(), Some("x"));
        assert_eq!(d.search, ["a", "b"]);
        assert_eq!(d.options, ["ndots:2"]);
        assert_eq!(dns(None, "dns").unwrap(), Dns::default());
        assert!(dns(Some(&json!({"nameservers": "1.1.1.1"})), "dns")
            .unwrap_err()
            .to_string()
            .contains("nameservers"));
    }

    #[test]
    fn address_count_limit_follows_the_version() {
        for old in ["0.1.0", "0.2.0", "", "x"] {
            assert!(!allows_many_per_family(old), "{old}");
        }
        for new in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            assert!(allows_many_per_family(new), "{new}");
        }
    }
}
