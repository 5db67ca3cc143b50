//! Field selectors (`spec.nodeName=node-1,metadata.namespace!=x`), as the API server
//! evaluates them on objects.

use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// (field path, value, equal?)
    terms: Vec<(String, String, bool)>,
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in s.split(',').filter(|t| !t.is_empty()) {
            let (field, value, eq) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!("invalid field selector term {term:?}"));
            };
            terms.push((field.to_owned(), value.to_owned(), eq));
        }
        Ok(FieldSelector { terms })
    }

    /// A missing field reads as "" (an unscheduled pod's spec.nodeName).
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, value, eq)| {
            let actual =
                field.split('.').try_fold(obj, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or("");
            (actual == value) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_inequality_and_missing_fields() {
        let pod = json!({"metadata": {"namespace": "ns"}, "spec": {"nodeName": "n1"}});
        assert!(FieldSelector::parse("spec.nodeName=n1").unwrap().matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName==n1,metadata.namespace!=x").unwrap().matches(&pod));
        assert!(!FieldSelector::parse("spec.nodeName!=n1").unwrap().matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&json!({"spec": {}})));
        assert!(FieldSelector::parse("").unwrap().matches(&pod));
        assert!(FieldSelector::parse("nonsense").is_err());
    }
}
