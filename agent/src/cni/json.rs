//! Reading untyped CNI JSON (configs, results) field by field, the way Go's encoding/json fills
//! a struct: `null` reads as absent, unknown keys are ignored, a wrong JSON type is an error.
//! Errors name the field by its path from the top ("ips[0].address", "ipam.type") and say what
//! was expected and what was found.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value};

/// A field of the JSON being read that has the wrong type or value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    /// Path from the top, e.g. "ips[0].address".
    pub field: String,
    pub reason: String,
}

/// A JSON object being read, with its path from the top for error messages.
#[derive(Debug)]
pub struct JsonObject<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> JsonObject<'a> {
    /// The top-level object; `what` names it in the error when `value` is no object.
    pub fn root(value: &'a Value, what: &str) -> Result<JsonObject<'a>, FieldError> {
        match value {
            Value::Object(map) => Ok(JsonObject { map, path: String::new() }),
            other => Err(FieldError { field: what.to_owned(), reason: expected("an object", other) }),
        }
    }

    fn nested(value: &'a Value, path: String) -> Result<JsonObject<'a>, FieldError> {
        match value {
            Value::Object(map) => Ok(JsonObject { map, path }),
            other => Err(FieldError { field: path, reason: expected("an object", other) }),
        }
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// An error about `key` of this object.
    pub fn malformed(&self, key: &str, reason: String) -> FieldError {
        FieldError { field: self.path_of(key), reason }
    }

    fn wrong_type(&self, key: &str, what: &str, got: &Value) -> FieldError {
        self.malformed(key, expected(what, got))
    }

    /// `key` as it is, if present. Go's encoding/json leaves a field untouched on `null`, so
    /// `null` reads as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// `key` converted by `convert`; `what` says what it must be when `convert` refuses it.
    pub fn typed<T>(
        &self,
        key: &str,
        what: &str,
        convert: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, FieldError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        convert(value).map(Some).ok_or_else(|| self.wrong_type(key, what, value))
    }

    pub fn string(&self, key: &str) -> Result<Option<&'a str>, FieldError> {
        self.typed(key, "a string", Value::as_str)
    }

    /// Go cannot tell an empty string from an absent one, so neither can we.
    pub fn opt_string(&self, key: &str) -> Result<Option<String>, FieldError> {
        Ok(self.string(key)?.filter(|s| !s.is_empty()).map(str::to_owned))
    }

    pub fn boolean(&self, key: &str) -> Result<Option<bool>, FieldError> {
        self.typed(key, "true or false", Value::as_bool)
    }

    pub fn integer(&self, key: &str) -> Result<Option<i64>, FieldError> {
        self.typed(key, "an integer", Value::as_i64)
    }

    pub fn uint(&self, key: &str) -> Result<Option<u32>, FieldError> {
        let Some(n) = self.typed(key, "a non-negative integer", Value::as_u64)? else { return Ok(None) };
        u32::try_from(n)
            .map(Some)
            .map_err(|_| self.malformed(key, format!("{n} is out of range (max {})", u32::MAX)))
    }

    /// libcni's omitempty integers: 0 cannot be told from unset.
    pub fn nonzero_uint(&self, key: &str) -> Result<Option<u32>, FieldError> {
        Ok(self.uint(key)?.filter(|n| *n != 0))
    }

    /// An address with its prefix length, host bits kept; required.
    pub fn cidr(&self, key: &str) -> Result<IpNet, FieldError> {
        let text = self.string(key)?.ok_or_else(|| self.malformed(key, "is required".into()))?;
        text.parse().map_err(|_| {
            self.malformed(
                key,
                format!("expected an address with prefix length like \"10.1.0.5/16\", got {text:?}"),
            )
        })
    }

    /// An empty string is accepted as unset, as Go's `net.IP` unmarshalling does.
    pub fn ip(&self, key: &str) -> Result<Option<IpAddr>, FieldError> {
        match self.string(key)? {
            None | Some("") => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| self.malformed(key, format!("expected an IP address, got {text:?}"))),
        }
    }

    pub fn object(&self, key: &str) -> Result<Option<JsonObject<'a>>, FieldError> {
        self.get(key).map(|v| JsonObject::nested(v, self.path_of(key))).transpose()
    }

    fn array(&self, key: &str) -> Result<&'a [Value], FieldError> {
        Ok(self.typed(key, "an array", |v| v.as_array().map(Vec::as_slice))?.unwrap_or_default())
    }

    /// The objects of the array `key`, each read by `parse`; absent: none.
    pub fn list<T, E: From<FieldError>>(
        &self,
        key: &str,
        mut parse: impl FnMut(JsonObject<'a>) -> Result<T, E>,
    ) -> Result<Vec<T>, E> {
        let path = self.path_of(key);
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, item)| parse(JsonObject::nested(item, format!("{path}[{i}]"))?))
            .collect()
    }

    /// The array of strings `key`; absent: empty.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, FieldError> {
        let path = self.path_of(key);
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => {
                    Err(FieldError { field: format!("{path}[{i}]"), reason: expected("a string", other) })
                }
            })
            .collect()
    }
}

/// The JSON type of a value, as a user reads it in a message ("a list", "an object").
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn expected(what: &str, got: &Value) -> String {
    format!("expected {what}, got {}", describe(got))
}

/// A JSON value as a message shows what was found instead of what was expected.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_error<T: std::fmt::Debug>(r: Result<T, FieldError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn null_and_absent_read_as_unset_and_go_empty_strings_as_absent() {
        let v = json!({"a": null, "s": ""});
        let o = JsonObject::root(&v, "config").unwrap();
        assert_eq!(o.string("a").unwrap(), None);
        assert_eq!(o.string("s").unwrap(), Some(""));
        assert_eq!(o.opt_string("s").unwrap(), None);
        assert_eq!(o.integer("missing").unwrap(), None);
        assert_eq!(o.boolean("a").unwrap(), None);
        assert!(o.object("a").unwrap().is_none());
        assert!(o.strings("a").unwrap().is_empty());
        assert_eq!(o.ip("s").unwrap(), None);
    }

    #[test]
    fn errors_name_the_path_and_what_was_expected_and_found() {
        let v =
            json!({"ipam": {"type": 1, "ranges": [{"gw": "x"}], "dns": ["a", 2]}, "on": "yes", "mtu": 1.5});
        let top = JsonObject::root(&v, "config").unwrap();
        let ipam = top.object("ipam").unwrap().unwrap();
        assert_eq!(field_error(ipam.string("type")), "ipam.type: expected a string, got the number 1");
        assert_eq!(field_error(ipam.strings("dns")), "ipam.dns[1]: expected a string, got the number 2");
        let ranges = ipam.list("ranges", |r| r.ip("gw"));
        assert_eq!(field_error(ranges), "ipam.ranges[0].gw: expected an IP address, got \"x\"");
        assert_eq!(field_error(top.boolean("on")), "on: expected true or false, got the string \"yes\"");
        assert_eq!(field_error(top.integer("mtu")), "mtu: expected an integer, got the number 1.5");
        assert_eq!(
            field_error(top.list("ipam", |_| Ok::<_, FieldError>(()))),
            "ipam: expected an array, got an object"
        );
        assert_eq!(
            field_error(JsonObject::root(&json!([1]), "the config")),
            "the config: expected an object, got an array"
        );
    }

    #[test]
    fn unsigned_integers_are_range_checked() {
        let v = json!({"big": 4294967296u64, "neg": -1, "zero": 0});
        let o = JsonObject::root(&v, "config").unwrap();
        assert!(field_error(o.uint("big")).contains("out of range"));
        assert!(field_error(o.uint("neg")).ends_with("expected a non-negative integer, got the number -1"));
        assert_eq!(o.uint("zero").unwrap(), Some(0));
        assert_eq!(o.nonzero_uint("zero").unwrap(), None);
    }
}
