//! The CustomResourceDefinitions of `deploy/`, applied to custom resources' writes as the API
//! server applies them: unknown fields pruned, defaults filled in, the OpenAPI checks plexus's
//! schemas use (`type`, `required`, `enum`, `pattern`, `minLength`/`maxLength`,
//! `minItems`/`maxItems`, `minimum`/`maximum`, `format: date-time`), and every `x-kubernetes-validations` rule,
//! evaluated with the `cel-interpreter` crate with `self` and, on an update, `oldSelf`.
//! Failures are a 422 `Invalid` Status whose message names each field and the rule's message.
//!
//! As on the API server: a rule that uses `oldSelf` (a transition rule) runs only on updates
//! where the old value exists; a rule whose value did not change is not evaluated again
//! (ratcheting); list items of `x-kubernetes-list-type: map` lists are matched with their old
//! selves by their keys.

use std::sync::OnceLock;

use serde_json::Value;

use super::lifecycle::Refusal;
use super::resources::ResourceDef;

/// One CRD version's schema.
#[derive(Debug, Clone)]
pub struct CrdSchema {
    pub group: String,
    pub plural: String,
    pub kind: String,
    pub version: String,
    pub schema: Value,
}

/// Every CustomResourceDefinition in `deploy/` (each served version).
pub fn deploy_crds() -> &'static [CrdSchema] {
    static CRDS: OnceLock<Vec<CrdSchema>> = OnceLock::new();
    CRDS.get_or_init(|| {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy");
        let mut out = Vec::new();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let v: Value = serde::Deserialize::deserialize(doc)
                    .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
                if v["kind"] == "CustomResourceDefinition" {
                    out.extend(schemas_of(&v));
                }
            }
        }
        out
    })
}

/// The schemas of one CRD object.
pub fn schemas_of(crd: &Value) -> Vec<CrdSchema> {
    let spec = &crd["spec"];
    spec["versions"]
        .as_array()
        .map(|versions| {
            versions
                .iter()
                .map(|v| CrdSchema {
                    group: spec["group"].as_str().unwrap_or("").to_owned(),
                    plural: spec["names"]["plural"].as_str().unwrap_or("").to_owned(),
                    kind: spec["names"]["kind"].as_str().unwrap_or("").to_owned(),
                    version: v["name"].as_str().unwrap_or("").to_owned(),
                    schema: v["schema"]["openAPIV3Schema"].clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Admits a custom resource's write as the API server does (pruning and defaulting `obj` in
/// place), or refuses it with 422. Built-in resources and custom resources without a CRD in
/// `deploy/` pass unchanged.
pub fn admit(def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> Result<(), Refusal> {
    if !def.is_custom() {
        return Ok(());
    }
    let Some(crd) = deploy_crds()
        .iter()
        .find(|c| c.group == def.group && c.plural == def.plural && c.version == def.version)
    else {
        return Ok(());
    };
    admit_with(&crd.schema, &crd.kind, &crd.group, obj, old)
}

/// [`admit`] against one schema.
pub fn admit_with(
    schema: &Value,
    kind: &str,
    group: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), Refusal> {
    prune_and_default(schema, obj, true);
    let mut errors = Vec::new();
    check(schema, obj, old, "", Pass::OpenApi, &mut errors);
    // As the API server: CEL rules run only when the schema checks leave nothing they would
    // trip over (a missing, mistyped, unsupported, too long or too big value).
    let blocking = ["Required value", "must be of type", "Unsupported value", "Too long", "Too many"];
    if errors.iter().any(|e| blocking.iter().any(|b| e.contains(b))) {
        errors.push("<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into());
    } else {
        check(schema, obj, old, "", Pass::Rules, &mut errors);
    }
    if errors.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let listed = if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) };
    Err(Refusal::new(422, format!("{kind}.{group} {name:?} is invalid: {listed}")))
}

/// The OpenAPI checks of `schema` on a value (a default, say): the messages of what fails.
pub fn schema_errors(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, value, None, "", Pass::OpenApi, &mut errors);
    errors
}

/// Whether `value` has fields `schema` would prune.
pub fn prunes(schema: &Value, value: &Value) -> bool {
    let mut pruned = value.clone();
    prune_and_default(schema, &mut pruned, false);
    let mut defaulted_only = value.clone();
    default_only(schema, &mut defaulted_only);
    pruned != defaulted_only
}

fn default_only(schema: &Value, v: &mut Value) {
    if let (Value::Object(m), Some(props)) = (&mut *v, schema["properties"].as_object()) {
        for (k, sub) in props {
            if let (None, Some(d)) = (m.get(k), sub.get("default")) {
                m.insert(k.clone(), d.clone());
            }
            if let Some(child) = m.get_mut(k) {
                default_only(sub, child);
            }
        }
    }
}

/// Drops fields the schema does not know (except where it preserves them, and the root's
/// metadata, which is ObjectMeta's) and fills in defaults.
fn prune_and_default(schema: &Value, v: &mut Value, root: bool) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema.get("properties").is_none() {
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some(props) = schema["properties"].as_object() {
                if schema.get("additionalProperties").is_none()
                    && schema["x-kubernetes-preserve-unknown-fields"] != true
                {
                    m.retain(|k, _| props.contains_key(k));
                }
                for (k, sub) in props {
                    if let (None, Some(d)) = (m.get(k), sub.get("default")) {
                        m.insert(k.clone(), d.clone());
                    }
                    if root && k == "metadata" {
                        continue;
                    }
                    if let Some(child) = m.get_mut(k) {
                        prune_and_default(sub, child, false);
                    }
                }
            } else if let Some(sub) = schema.get("additionalProperties").filter(|s| s.is_object()) {
                for child in m.values_mut() {
                    prune_and_default(sub, child, false);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = schema.get("items") {
                for child in a {
                    prune_and_default(items, child, false);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_fits(schema: &Value, v: &Value) -> bool {
    let actual = type_name(v);
    match schema["type"].as_str() {
        None => true,
        Some(t) => {
            actual == t
                || (t == "number" && actual == "integer")
                || (v.is_null() && schema["nullable"] == true)
        }
    }
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    OpenApi,
    Rules,
}

/// The OpenAPI checks or the CEL rules of `schema` on `v` (at `path`), then its children.
fn check(schema: &Value, v: &Value, old: Option<&Value>, path: &str, pass: Pass, errors: &mut Vec<String>) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if pass == Pass::Rules {
        rules(schema, v, old, shown, errors);
    } else {
        openapi(schema, v, path, errors);
    }
    children(schema, v, old, path, pass, errors);
}

fn openapi(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if let Some(t) = schema["type"].as_str() {
        let actual = type_name(v);
        let fits = actual == t
            || (t == "number" && actual == "integer")
            || (v.is_null() && schema["nullable"] == true);
        if !fits {
            errors.push(format!(
                "{shown}: Invalid value: \"{actual}\": {shown} in body must be of type {t}: \"{actual}\""
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
            errors.push(format!("{shown}: Unsupported value: {v}: supported values: {}", list.join(", ")));
        }
    }
    match v {
        Value::String(s) => {
            if let Some(max) = schema["maxLength"].as_u64() {
                if s.chars().count() as u64 > max {
                    errors.push(format!("{shown}: Too long: may not be more than {max} bytes"));
                }
            }
            if let Some(min) = schema["minLength"].as_u64() {
                if (s.chars().count() as u64) < min {
                    errors.push(format!(
                        "{shown}: Invalid value: {v}: {shown} in body should be at least {min} chars long"
                    ));
                }
            }
            if schema["format"] == "date-time" && s.parse::<k8s_openapi::jiff::Timestamp>().is_err() {
                errors.push(format!(
                    "{shown}: Invalid value: {v}: {shown} in body must be of type date-time: {v}"
                ));
            }
            if let Some(p) = schema["pattern"].as_str() {
                match matches_pattern(s, p) {
                    Ok(true) => {}
                    Ok(false) => errors
                        .push(format!("{shown}: Invalid value: {v}: {shown} in body should match '{p}'")),
                    Err(e) => errors.push(format!(
                        "{shown}: Invalid value: {v}: the pattern '{p}' does not compile: {e}"
                    )),
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if schema["minimum"].as_f64().is_some_and(|m| x < m) {
                errors.push(format!(
                    "{shown}: Invalid value: {v}: {shown} in body should be greater than or equal to {}",
                    schema["minimum"]
                ));
            }
            if schema["maximum"].as_f64().is_some_and(|m| x > m) {
                errors.push(format!(
                    "{shown}: Invalid value: {v}: {shown} in body should be less than or equal to {}",
                    schema["maximum"]
                ));
            }
        }
        Value::Array(a) => {
            if let Some(max) = schema["maxItems"].as_u64() {
                if a.len() as u64 > max {
                    errors.push(format!("{shown}: Too many: {}: must have at most {max} items", a.len()));
                }
            }
            if let Some(min) = schema["minItems"].as_u64() {
                if (a.len() as u64) < min {
                    errors.push(format!(
                        "{shown}: Invalid value: {}: {shown} in body should have at least {min} items",
                        a.len()
                    ));
                }
            }
        }
        Value::Object(m) => {
            for req in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if !m.contains_key(req) {
                    errors.push(format!("{}: Required value", child_path(path, req)));
                }
            }
        }
        _ => {}
    }
}

/// The children of `v`, with their old selves where they can be matched.
fn children(
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    pass: Pass,
    errors: &mut Vec<String>,
) {
    if !type_fits(schema, v) {
        return;
    }
    match v {
        Value::Object(m) => {
            let props = schema["properties"].as_object();
            for (k, child) in m {
                let sub = match props.and_then(|p| p.get(k)) {
                    Some(s) => s,
                    None => match schema.get("additionalProperties").filter(|s| s.is_object()) {
                        Some(s) => s,
                        None => continue,
                    },
                };
                if path.is_empty() && k == "metadata" {
                    continue;
                }
                check(sub, child, old.and_then(|o| o.get(k)), &child_path(path, k), pass, errors);
            }
        }
        Value::Array(a) => {
            let Some(items) = schema.get("items") else { return };
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let is_map = schema["x-kubernetes-list-type"] == "map" && !keys.is_empty();
            for (i, item) in a.iter().enumerate() {
                let old_item = if is_map {
                    old.and_then(Value::as_array)
                        .and_then(|olds| olds.iter().find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k))))
                } else {
                    None
                };
                check(items, item, old_item, &format!("{path}[{i}]"), pass, errors);
            }
        }
        _ => {}
    }
}

/// An OpenAPI `pattern` (an RE2 expression on the API server), tested with CEL's `matches`,
/// which is the same regular expression dialect for what CRDs use.
fn matches_pattern(s: &str, pattern: &str) -> Result<bool, String> {
    let program = cel_interpreter::Program::compile("s.matches(p)").map_err(|e| e.to_string())?;
    let mut ctx = cel_interpreter::Context::default();
    ctx.add_variable("s", s).map_err(|e| e.to_string())?;
    ctx.add_variable("p", pattern).map_err(|e| e.to_string())?;
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("matches gave {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// One `x-kubernetes-validations` rule's outcome on a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOutcome {
    Holds,
    Broken,
    /// The rule does not compile or does not evaluate to a bool.
    Error(String),
}

/// Evaluates one CEL rule with `self` (and `oldSelf` when given).
pub fn evaluate_rule(rule: &str, value: &Value, old: Option<&Value>) -> RuleOutcome {
    // The parser panics on some malformed input rather than answering an error.
    let program = match std::panic::catch_unwind(|| cel_interpreter::Program::compile(rule)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return RuleOutcome::Error(format!("compilation failed: {e}")),
        Err(_) => return RuleOutcome::Error("compilation failed: the CEL parser gave up".into()),
    };
    let mut ctx = cel_interpreter::Context::default();
    if let Err(e) = ctx.add_variable("self", value) {
        return RuleOutcome::Error(e.to_string());
    }
    if let Some(o) = old {
        if let Err(e) = ctx.add_variable("oldSelf", o) {
            return RuleOutcome::Error(e.to_string());
        }
    }
    match program.execute(&ctx) {
        Ok(cel_interpreter::Value::Bool(true)) => RuleOutcome::Holds,
        Ok(cel_interpreter::Value::Bool(false)) => RuleOutcome::Broken,
        Ok(other) => RuleOutcome::Error(format!("the rule gave {other:?}, not a bool")),
        Err(e) => RuleOutcome::Error(format!("evaluation failed: {e}")),
    }
}

/// Whether a rule compiles.
pub fn compile_rule(rule: &str) -> Result<(), String> {
    match std::panic::catch_unwind(|| cel_interpreter::Program::compile(rule)) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the CEL parser gave up".into()),
    }
}

/// Whether a rule is a transition rule (it reads `oldSelf`).
pub fn is_transition_rule(rule: &str) -> bool {
    rule.contains("oldSelf")
}

fn rules(schema: &Value, v: &Value, old: Option<&Value>, shown: &str, errors: &mut Vec<String>) {
    let Some(list) = schema["x-kubernetes-validations"].as_array() else { return };
    for r in list {
        let Some(rule) = r["rule"].as_str() else { continue };
        let transition = is_transition_rule(rule);
        if (transition && old.is_none()) || old == Some(v) {
            continue;
        }
        let field = match r["fieldPath"].as_str() {
            Some(fp) if shown == "<root>" => fp.trim_start_matches('.').to_owned(),
            Some(fp) => format!("{shown}{fp}"),
            None => shown.to_owned(),
        };
        let message =
            r["message"].as_str().map(str::to_owned).unwrap_or_else(|| format!("failed rule: {rule}"));
        match evaluate_rule(rule, v, if transition { old } else { None }) {
            RuleOutcome::Holds => {}
            RuleOutcome::Broken => {
                errors.push(format!("{field}: Invalid value: \"{}\": {message}", type_name(v)))
            }
            RuleOutcome::Error(e) => {
                errors.push(format!("{field}: Invalid value: \"{}\": rule {rule:?}: {e}", type_name(v)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "x-kubernetes-validations": [
                        {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
                        {"rule": "self.name != 'forbidden'", "message": "that name is forbidden"}
                    ],
                    "properties": {
                        "name": {"type": "string", "maxLength": 9, "pattern": "^[a-z]+$"},
                        "on": {"type": "boolean", "default": true},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "list": {"type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 1}},
                        "at": {"type": "string", "format": "date-time"}
                    }
                }
            }
        })
    }

    fn admit(obj: &mut Value, old: Option<&Value>) -> Result<(), String> {
        admit_with(&schema(), "Thing", "plexus.dev", obj, old).map_err(|r| {
            assert_eq!(r.code, 422);
            r.message
        })
    }

    #[test]
    fn prunes_defaults_and_checks_the_openapi_keywords() {
        let mut o = json!({"metadata": {"name": "t", "x": 1}, "spec": {"name": "ab", "junk": 1, "free": {"a": {"b": 1}}}, "top": 1});
        admit(&mut o, None).unwrap();
        assert_eq!(
            o,
            json!({"metadata": {"name": "t", "x": 1}, "spec": {"name": "ab", "on": true, "free": {"a": {"b": 1}}}})
        );
        let e = admit(&mut json!({"metadata": {"name": "t"}, "spec": {}}), None).unwrap_err();
        assert!(
            e.starts_with("Thing.plexus.dev \"t\" is invalid: [spec.name: Required value, <nil>: "),
            "{e}"
        );
        assert!(e.contains("some validation rules were not checked"), "{e}");
        let e =
            admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "ABCDEFGHIJ"}}), None).unwrap_err();
        assert!(e.contains("spec.name: Too long") && e.contains("should match '^[a-z]+$'"), "{e}");
        let e = admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "a", "on": "yes"}}), None)
            .unwrap_err();
        assert!(e.contains("spec.on in body must be of type boolean"), "{e}");
        let e =
            admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "a", "list": [1, 0, 3]}}), None)
                .unwrap_err();
        assert!(e.contains("Too many: 3") && e.contains("spec.list[1]"), "{e}");
        let e =
            admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "a", "at": "yesterday"}}), None)
                .unwrap_err();
        assert!(e.contains("spec.at in body must be of type date-time"), "{e}");
        admit(
            &mut json!({"metadata": {"name": "t"}, "spec": {"name": "a", "at": "2026-11-24T13:00:00.5Z"}}),
            None,
        )
        .unwrap();
    }

    #[test]
    fn rules_run_with_self_and_old_self() {
        let mut created = json!({"metadata": {"name": "t"}, "spec": {"name": "a"}});
        admit(&mut created, None).unwrap();
        let e =
            admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "forbidden"}}), None).unwrap_err();
        assert!(e.contains("spec: Invalid value: \"object\": that name is forbidden"), "{e}");
        let e = admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "b"}}), Some(&created))
            .unwrap_err();
        assert_eq!(
            e,
            "Thing.plexus.dev \"t\" is invalid: spec: Invalid value: \"object\": name is immutable"
        );
        admit(&mut json!({"metadata": {"name": "t"}, "spec": {"name": "a", "on": false}}), Some(&created))
            .unwrap();
    }

    #[test]
    fn a_rule_that_cannot_evaluate_is_an_error() {
        assert_eq!(evaluate_rule("self.a == 1", &json!({"a": 1}), None), RuleOutcome::Holds);
        assert_eq!(evaluate_rule("self.a == 2", &json!({"a": 1}), None), RuleOutcome::Broken);
        assert!(matches!(evaluate_rule("self.b == 1", &json!({"a": 1}), None), RuleOutcome::Error(_)));
        assert!(matches!(evaluate_rule("self.a +", &json!({"a": 1}), None), RuleOutcome::Error(_)));
        assert!(matches!(evaluate_rule("self.a", &json!({"a": 1}), None), RuleOutcome::Error(_)));
    }
}
