//! The patch types the API server accepts for custom and built-in resources: JSON merge
//! patch (RFC 7386), and strategic merge patch for what plexus patches (maps such as
//! annotations merge the same way; list directives are not needed and are refused).

use serde_json::Value;

pub const MERGE: &str = "application/merge-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
