//! CNI_ARGS (`K1=V1;K2=V2`) read as libcni's `types.LoadArgs` reads it into a plugin's args
//! struct, so the same CNI_ARGS fail or succeed here as with the reference plugin.

/// Why CNI_ARGS cannot be loaded, in libcni's words followed by what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("ARGS: invalid pair {0:?}; CNI_ARGS must be KEY=VALUE pairs separated by ';'")]
    InvalidPair(String),
    #[error("ARGS: error parsing value of pair {pair:?}: {source}")]
    Value { pair: String, source: InvalidValue },
    #[error("ARGS: unknown args {0:?}; add IgnoreUnknown=1 to CNI_ARGS or drop the unknown keys")]
    Unknown(Vec<String>),
}

/// Why the value of a known key does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub String);

/// Reads `args`, handing each pair to `set`, which returns `Ok(true)` when the key is a field
/// of the plugin's args, `Ok(false)` when it is not, and `Err(reason)` when the value does not
/// parse. Keys the plugin does not know are an error unless `IgnoreUnknown` is true, as in
/// libcni (kubelet always passes `IgnoreUnknown=1`).
pub fn load_args(
    args: &str,
    mut set: impl FnMut(&str, &str) -> Result<bool, InvalidValue>,
) -> Result<(), ArgsError> {
    if args.is_empty() {
        return Ok(());
    }
    let mut unknown = Vec::new();
    let mut ignore_unknown = false;
    for pair in args.split(';') {
        let kv: Vec<&str> = pair.split('=').collect();
        let [key, value] = kv[..] else {
            return Err(ArgsError::InvalidPair(pair.to_owned()));
        };
        let parse_error = |source: InvalidValue| ArgsError::Value { pair: pair.to_owned(), source };
        if key == "IgnoreUnknown" {
            ignore_unknown = parse_bool(value).map_err(parse_error)?;
            continue;
        }
        if !set(key, value).map_err(parse_error)? {
            unknown.push(pair.to_owned());
        }
    }
    if !unknown.is_empty() && !ignore_unknown {
        return Err(ArgsError::Unknown(unknown));
    }
    Ok(())
}

/// libcni's `UnmarshallableBool`.
fn parse_bool(value: &str) -> Result<bool, InvalidValue> {
    let lower = value.to_lowercase();
    match lower.as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(InvalidValue(format!("boolean unmarshal error: invalid input {lower}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads `args` for a plugin whose only field is IP, returning its last value.
    fn ip_arg(args: &str) -> Result<Option<String>, ArgsError> {
        let mut ip = None;
        load_args(args, |k, v| {
            if k != "IP" {
                return Ok(false);
            }
            if v == "bad" {
                return Err(InvalidValue("invalid IP address bad".into()));
            }
            ip = Some(v.to_owned());
            Ok(true)
        })?;
        Ok(ip)
    }

    #[test]
    fn known_keys_are_set_last_one_wins() {
        assert_eq!(ip_arg(""), Ok(None));
        assert_eq!(ip_arg("IP=10.1.0.5"), Ok(Some("10.1.0.5".into())));
        assert_eq!(ip_arg("IP=a;IP=b"), Ok(Some("b".into())));
        assert_eq!(ip_arg("IP="), Ok(Some(String::new())));
    }

    #[test]
    fn unknown_keys_need_ignore_unknown() {
        let err = ip_arg("K8S_POD_NAME=x;IP=1").unwrap_err().to_string();
        assert!(err.starts_with(r#"ARGS: unknown args ["K8S_POD_NAME=x"]"#), "{err}");
        for yes in ["1", "true", "TRUE", "True"] {
            let args = format!("IgnoreUnknown={yes};K8S_POD_NAME=x;IP=1");
            assert_eq!(ip_arg(&args), Ok(Some("1".into())), "{args}");
        }
        // The flag is read once all pairs are, wherever it stands.
        assert_eq!(ip_arg("K8S_POD_NAME=x;IgnoreUnknown=1"), Ok(None));
        assert!(ip_arg("IgnoreUnknown=0;X=1").is_err());
        assert!(ip_arg("IgnoreUnknown=false;X=1").is_err());
    }

    #[test]
    fn malformed_pairs_and_values_are_errors_naming_the_pair() {
        let cases = [
            ("IP", r#"ARGS: invalid pair "IP""#),
            ("IP=1;", r#"ARGS: invalid pair """#),
            ("IP=1=2", r#"ARGS: invalid pair "IP=1=2""#),
            ("IP=bad", r#"ARGS: error parsing value of pair "IP=bad": invalid IP address bad"#),
            (
                "IgnoreUnknown=Maybe",
                r#"ARGS: error parsing value of pair "IgnoreUnknown=Maybe": boolean unmarshal error: invalid input maybe"#,
            ),
        ];
        for (args, want) in cases {
            let err = ip_arg(args).unwrap_err().to_string();
            assert!(err.starts_with(want), "{args}: {err}");
        }
    }
}
