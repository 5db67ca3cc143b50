//! The patch types the API server accepts: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902), strategic merge patch for what plexus patches (built-in resources only, as on
//! the API server; maps such as annotations merge the same way; list directives are not
//! needed and are refused), and server-side apply (see [`APPLY`]).

use serde_json::Value;

pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const JSON_PATCH: &str = "application/json-patch+json";
/// Server-side apply. The test server keeps no field ownership: the applied configuration is
/// merged as a merge patch (lists replace the stored ones), which is what apply gives when a
/// single field manager owns the fields it applies; it creates the object when absent.
pub const APPLY: &str = "application/apply-patch+yaml";

/// RFC 7386: objects merge key by key, `null` removes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Strategic merge patch, for maps: like a merge patch; `$patch`-style directives (which
/// only matter for lists) are refused rather than misapplied.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    if has_directive(patch) {
        return Err("strategic merge patch directives are not supported by the test API server".into());
    }
    merge_patch(target, patch);
    Ok(())
}

fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(a) => a.iter().any(has_directive),
        _ => false,
    }
}

/// Why a JSON patch was not applied: a malformed patch (400 on the API server) or an
/// operation that cannot apply to the object, a failed `test` included (422).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonPatchError {
    Malformed(String),
    Failed(String),
}

/// RFC 6902: `add`, `remove`, `replace`, `move`, `copy`, `test`, in order, all or nothing.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let malformed = |m: String| JsonPatchError::Malformed(m);
    let ops = patch.as_array().ok_or_else(|| malformed("a JSON patch is a list of operations".into()))?;
    let mut doc = target.clone();
    for op in ops {
        let name = op["op"].as_str().ok_or_else(|| malformed(format!("operation without \"op\": {op}")))?;
        let path =
            op["path"].as_str().ok_or_else(|| malformed(format!("operation without \"path\": {op}")))?;
        let value = || op.get("value").cloned().ok_or_else(|| malformed(format!("{name} needs a \"value\"")));
        let from = || op["from"].as_str().ok_or_else(|| malformed(format!("{name} needs a \"from\"")));
        match name {
            "add" => add(&mut doc, path, value()?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, value()?)?;
            }
            "move" => {
                let from = from()?;
                if path.starts_with(&format!("{from}/")) {
                    return Err(JsonPatchError::Failed(format!("cannot move {from} into itself")));
                }
                let v = remove(&mut doc, from)?;
                add(&mut doc, path, v)?;
            }
            "copy" => {
                let v = doc.pointer(from()?).cloned().ok_or_else(|| missing(path))?;
                add(&mut doc, path, v)?;
            }
            "test" => {
                // As the API server's implementation: a missing value tests equal to null
                // (kube-runtime's finalizer helper tests /metadata/finalizers against null).
                if doc.pointer(path).unwrap_or(&Value::Null) != &value()? {
                    return Err(JsonPatchError::Failed(format!("testing value {path} failed")));
                }
            }
            other => return Err(malformed(format!("unknown JSON patch operation {other:?}"))),
        }
    }
    *target = doc;
    Ok(())
}

fn missing(path: &str) -> JsonPatchError {
    JsonPatchError::Failed(format!("doc is missing path: {path:?}"))
}

/// The parent of a JSON pointer's target and the last token (unescaped).
fn split_pointer(path: &str) -> Result<(&str, String), JsonPatchError> {
    let Some(i) = path.rfind('/') else {
        return Err(JsonPatchError::Malformed(format!("{path:?} is not a JSON pointer")));
    };
    Ok((&path[..i], path[i + 1..].replace("~1", "/").replace("~0", "~")))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, token) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.insert(token, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let at = if token == "-" { a.len() } else { token.parse().map_err(|_| missing(path))? };
            if at > a.len() {
                return Err(missing(path));
            }
            a.insert(at, value);
            Ok(())
        }
        _ => Err(missing(path)),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let (parent, token) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(m)) => m.remove(&token).ok_or_else(|| missing(path)),
        Some(Value::Array(a)) => match token.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing(path)),
        },
        _ => Err(missing(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_patch_follows_rfc_6902() {
        let mut t = json!({"metadata": {"finalizers": ["a", "b"], "n": "x"}, "spec": {}});
        json_patch(
            &mut t,
            &json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/1"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
                {"op": "replace", "path": "/metadata/n", "value": "y"},
                {"op": "add", "path": "/spec/a~1b", "value": 1},
                {"op": "copy", "from": "/metadata/n", "path": "/spec/copy"},
                {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
            ]),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"finalizers": ["a", "c"], "n": "y"}, "spec": {"a/b": 1, "moved": "y"}})
        );
    }

    #[test]
    fn a_missing_value_tests_equal_to_null() {
        let mut t = json!({"metadata": {"name": "n"}});
        json_patch(
            &mut t,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f"]));
        let again =
            json_patch(&mut t, &json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]));
        assert!(matches!(again, Err(JsonPatchError::Failed(_))));
    }

    #[test]
    fn a_failing_json_patch_changes_nothing() {
        let before = json!({"metadata": {"finalizers": ["a"]}});
        let mut t = before.clone();
        let failed = json_patch(
            &mut t,
            &json!([{"op": "remove", "path": "/metadata/finalizers/0"},
                    {"op": "test", "path": "/metadata/finalizers", "value": ["a"]}]),
        );
        assert!(matches!(failed, Err(JsonPatchError::Failed(_))), "{failed:?}");
        assert_eq!(t, before);
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Failed(_))
        ));
        assert!(matches!(json_patch(&mut t, &json!({"op": "add"})), Err(JsonPatchError::Malformed(_))));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "frob", "path": "/a"}])),
            Err(JsonPatchError::Malformed(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "add", "path": "/a"}])),
            Err(JsonPatchError::Malformed(_))
        ));
        assert!(matches!(
            json_patch(&mut t, &json!([{"op": "add", "path": "/metadata/finalizers/5", "value": "x"}])),
            Err(JsonPatchError::Failed(_))
        ));
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
    }

    #[test]
    fn strategic_directives_are_refused() {
        let mut t = json!({});
        assert!(strategic_merge_patch(&mut t, &json!({"spec": {"$patch": "replace"}})).is_err());
        assert!(strategic_merge_patch(&mut t, &json!({"metadata": {"annotations": {"a": "b"}}})).is_ok());
        assert_eq!(t["metadata"]["annotations"]["a"], "b");
    }
}
