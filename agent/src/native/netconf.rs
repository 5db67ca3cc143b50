//! What the native types read from a netconf the same way, because their reference plugins
//! do: the netconf's JSON itself, a MAC address (from the config, `MAC=` in CNI_ARGS or
//! `runtimeConfig.mac`) and CNI_ARGS as libcni's `LoadArgs` parses it. Each type's config
//! module keeps only its own keys and values, and wraps [`NetconfError`] in its error.

use serde_json::Value;

use crate::cni::json::{FieldError, JsonObject};
use crate::netlink::{Mac, MacError};

/// What is wrong in the part every native netconf shares: the user fixes it (code 7, which
/// [`NativeError::Config`](crate::native::error::NativeError::Config) gives every config error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetconfError {
    #[error("failed to load netconf: {0}")]
    Load(#[source] FieldError),
    #[error("invalid MAC address: {0}")]
    Mac(#[source] MacError),
    #[error(
        "invalid MAC address {0:?}: an interface needs a unicast address (the lowest bit of the first byte \
         clear, not all zeros), e.g. \"0a:58:0a:01:00:05\""
    )]
    NotUnicast(String),
    #[error("CNI_ARGS: invalid pair {0:?}; write KEY=VALUE pairs separated by ';'")]
    ArgsPair(String),
    #[error("CNI_ARGS: IgnoreUnknown={0:?} is not a boolean")]
    ArgsIgnoreUnknown(String),
    #[error("CNI_ARGS: unknown args {0:?}; the runtime should pass IgnoreUnknown=1")]
    ArgsUnknown(Vec<String>),
}

/// Reads a netconf's keys with `read`, types checked; `what` names the netconf in an error
/// about the whole (e.g. "(the bridge config itself)"). Any wrong type fails the load, as
/// the reference's JSON decoding does.
pub fn load<'a, T, E: From<NetconfError>>(
    config: &'a Value,
    what: &str,
    read: impl FnOnce(&JsonObject<'a>) -> Result<T, FieldError>,
) -> Result<T, E> {
    JsonObject::root(config, what).and_then(|top| read(&top)).map_err(|e| NetconfError::Load(e).into())
}

/// A MAC address an interface can take: well formed, unicast and not all zeros.
pub fn unicast_mac(text: &str) -> Result<Mac, NetconfError> {
    let mac: Mac = text.parse().map_err(NetconfError::Mac)?;
    if !mac.is_unicast() || mac.is_zero() {
        return Err(NetconfError::NotUnicast(text.to_owned()));
    }
    Ok(mac)
}

/// `MAC` from CNI_ARGS, parsed as libcni's `LoadArgs` does for the reference's `MacEnvArgs`:
/// `KEY=VALUE` pairs separated by `;`, every pair well formed, and unknown keys an error unless
/// `IgnoreUnknown` is true.
pub fn mac_from_cni_args(args: &str) -> Result<Option<String>, NetconfError> {
    if args.is_empty() {
        return Ok(None);
    }
    let mut mac = None;
    let mut ignore_unknown = false;
    let mut unknown = Vec::new();
    for pair in args.split(';') {
        let parts: Vec<&str> = pair.split('=').collect();
        let [key, value] = parts[..] else {
            return Err(NetconfError::ArgsPair(pair.to_owned()));
        };
        match key {
            "MAC" => mac = Some(value.to_owned()),
            "IgnoreUnknown" => {
                ignore_unknown = match value {
                    "1" | "true" | "True" => true,
                    "0" | "false" | "False" => false,
                    _ => return Err(NetconfError::ArgsIgnoreUnknown(value.to_owned())),
                }
            }
            _ => unknown.push(pair),
        }
    }
    if !unknown.is_empty() && !ignore_unknown {
        return Err(NetconfError::ArgsUnknown(unknown.into_iter().map(str::to_owned).collect()));
    }
    // An empty MAC= means "none", as for the reference.
    Ok(mac.filter(|m| !m.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_args_follow_libcni_load_args() {
        assert_eq!(mac_from_cni_args("").unwrap(), None);
        assert_eq!(mac_from_cni_args("MAC=0a:00:00:00:00:01").unwrap().as_deref(), Some("0a:00:00:00:00:01"));
        assert_eq!(mac_from_cni_args("IgnoreUnknown=true;X=1;MAC=").unwrap(), None);
        assert_eq!(
            mac_from_cni_args("IgnoreUnknown=0;MAC=0a:00:00:00:00:02").unwrap().as_deref(),
            Some("0a:00:00:00:00:02")
        );
        let err = |args: &str| mac_from_cni_args(args).unwrap_err();
        assert_eq!(err("K8S_POD_NAME=p"), NetconfError::ArgsUnknown(vec!["K8S_POD_NAME=p".into()]));
        assert_eq!(err("IgnoreUnknown=1;broken"), NetconfError::ArgsPair("broken".into()));
        assert_eq!(err("IgnoreUnknown=1;A=b=c"), NetconfError::ArgsPair("A=b=c".into()));
        assert_eq!(err("IgnoreUnknown=yes"), NetconfError::ArgsIgnoreUnknown("yes".into()));
        assert!(err("K8S_POD_NAME=p").to_string().contains("the runtime should pass IgnoreUnknown=1"));
    }

    #[test]
    fn only_unicast_addresses_are_taken() {
        assert_eq!(unicast_mac("0a:58:0a:01:00:05").unwrap(), Mac([0x0a, 0x58, 0x0a, 0x01, 0x00, 0x05]));
        for refused in ["01:00:5e:00:00:01", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"] {
            assert_eq!(unicast_mac(refused).unwrap_err(), NetconfError::NotUnicast(refused.into()));
        }
        let bad = unicast_mac("nope").unwrap_err();
        assert!(matches!(bad, NetconfError::Mac(_)), "{bad:?}");
    }
}
