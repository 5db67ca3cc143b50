//! What the API server does to an object on every write, whatever the verb: the system
//! metadata it owns (uid, creationTimestamp, generation, deletionTimestamp), the split
//! between an object and its status subresource, and finalizers.

use serde_json::{json, Value};

use super::resources::ResourceDef;

/// A write the API server refuses: the HTTP code and the Status message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

impl Refusal {
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        Refusal { code, message: message.into() }
    }
}

/// Checks what a body written whole (create, update, server-side apply) says it is, as the
/// API server's decoder does: `apiVersion` and `kind` must be there and name the resource of
/// the URL. (A merge or JSON patch carries neither, and needs neither.)
pub fn check_type_meta(def: &ResourceDef, obj: &Value, body: &[u8]) -> Result<(), Refusal> {
    let text = String::from_utf8_lossy(body);
    let missing = |field: &str| {
        let detail = format!("Object '{field}' is missing in '{text}'");
        let message = if def.is_custom() {
            format!("the object provided is unrecognized (must be of type {}): {detail}", def.kind)
        } else {
            detail
        };
        Err(Refusal::new(400, message))
    };
    let Some(kind) = obj.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty()) else {
        return missing("Kind");
    };
    let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str).filter(|v| !v.is_empty()) else {
        return missing("apiVersion");
    };
    let expected = def.api_version();
    if api_version != expected {
        return Err(Refusal::new(
            400,
            format!("the API version in the data ({api_version}) does not match the expected API version ({expected})"),
        ));
    }
    if kind != def.kind {
        return Err(Refusal::new(
            400,
            format!("the kind in the data ({kind}) does not match the expected kind ({})", def.kind),
        ));
    }
    Ok(())
}

/// Now, as the API server writes timestamps (RFC 3339, seconds, UTC).
pub fn now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second()).map(|t| t.to_string()).unwrap_or_default()
}

/// Metadata the API server owns: what a client sends for them is replaced.
const SYSTEM_METADATA: &[&str] =
    ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"].as_slice();

/// The object about to be created, as the API server stores it: a new uid and
/// creationTimestamp, generation 1, no deletionTimestamp; a custom resource's status is
/// dropped when it has a status subresource, a pod's is reset to Pending.
pub fn prepare_create(def: &ResourceDef, obj: &mut Value, now: &str) -> Result<(), Refusal> {
    if obj["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()) {
        return Err(Refusal::new(500, "resourceVersion should not be set on objects to be created"));
    }
    let Some(meta) = obj["metadata"].as_object_mut() else {
        return Err(Refusal::new(400, "the object has no metadata"));
    };
    for field in SYSTEM_METADATA {
        meta.remove(*field);
    }
    meta.remove("resourceVersion");
    meta.insert("creationTimestamp".into(), json!(now));
    if def.tracks_generation() {
        meta.insert("generation".into(), json!(1));
    }
    if def.has_status() {
        if def.is_custom() {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        } else {
            obj["status"] = json!({"phase": "Pending"});
        }
    }
    Ok(())
}

/// The object an update (PUT, patch, apply) stores, from the stored one and the one the
/// request made: a `/status` write changes only the status; a write of the object keeps the
/// stored status when the resource has a status subresource. The system metadata stays the
/// stored one's; generation goes up when anything but metadata and that status changed. An
/// object being deleted accepts no new finalizer.
pub fn prepare_update(
    def: &ResourceDef,
    old: &Value,
    requested: Value,
    status_write: bool,
) -> Result<Value, Refusal> {
    let mut new = if status_write {
        let mut new = old.clone();
        match requested.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        new
    } else {
        let mut new = requested;
        if def.has_status() {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        new
    };
    if !new["metadata"].is_object() {
        return Err(Refusal::new(400, "the object has no metadata"));
    }
    for field in SYSTEM_METADATA.iter().chain(["name", "namespace"].iter()) {
        match old["metadata"].get(*field) {
            Some(v) => new["metadata"][*field] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(*field);
                }
            }
        }
    }
    if def.tracks_generation() {
        new["metadata"]["generation"] = json!(generation_after(def, Some(old), &new));
    }
    if is_deleting(old) {
        let before = finalizers(old);
        let added: Vec<&str> = finalizers(&new).into_iter().filter(|f| !before.contains(f)).collect();
        if !added.is_empty() {
            return Err(Refusal::new(
                422,
                format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                ),
            ));
        }
    }
    Ok(new)
}

/// The generation of `new` replacing `old` (absent: a creation, 1): the old one's, plus one
/// when anything but metadata and a subresource's status changed.
pub fn generation_after(def: &ResourceDef, old: Option<&Value>, new: &Value) -> i64 {
    match old {
        None => 1,
        Some(old) => {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            if generational(def, old) == generational(def, new) {
                generation
            } else {
                generation + 1
            }
        }
    }
}

/// What generation counts: the object without its metadata and, with a status subresource,
/// its status.
fn generational(def: &ResourceDef, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        for field in ["metadata", "apiVersion", "kind"] {
            o.remove(field);
        }
        if def.has_status() {
            o.remove("status");
        }
    }
    v
}

/// Whether an update changes nothing (the API server then writes nothing: no new
/// resourceVersion, no event).
pub fn unchanged(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        v
    };
    strip(old) == strip(new)
}

pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

pub fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A DELETE of an object that has finalizers: it stays, marked for deletion (deletionTimestamp
/// now, grace period 0, generation up) until its last finalizer is removed.
pub fn mark_deleting(def: &ResourceDef, obj: &mut Value, now: &str) {
    if def.tracks_generation() {
        let generation = obj["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        obj["metadata"]["generation"] = json!(generation);
    }
    obj["metadata"]["deletionTimestamp"] = json!(now);
    obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
}

/// A write that leaves an object being deleted without finalizers deletes it.
pub fn deleted_by_update(obj: &Value) -> bool {
    is_deleting(obj) && finalizers(obj).is_empty()
}

#[cfg(test)]
mod tests {
    use super::super::resources::{LEASES, PODS, POD_NETWORKS, RESOURCES};
    use super::*;

    fn def(plural: &str) -> &'static ResourceDef {
        RESOURCES.iter().find(|d| d.plural == plural).unwrap()
    }

    fn stored() -> Value {
        json!({"metadata": {"name": "n", "uid": "u1", "generation": 3, "resourceVersion": "7",
                            "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"enabled": true}, "status": {"conditions": [{"type": "Ready"}]}})
    }

    #[test]
    fn a_body_written_whole_must_say_what_it_is() {
        let pn = def(POD_NETWORKS);
        let ok =
            json!({"apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "n"}});
        assert_eq!(check_type_meta(pn, &ok, b""), Ok(()));
        let bare = json!({"metadata": {"name": "default"}, "spec": {"enabled": true}});
        let body = serde_json::to_vec(&bare).unwrap();
        let refused = check_type_meta(pn, &bare, &body).unwrap_err();
        assert_eq!(refused.code, 400);
        assert!(
            refused.message.starts_with(
                "the object provided is unrecognized (must be of type PodNetwork): Object 'Kind' is missing in '{"
            ),
            "{}",
            refused.message
        );
        let no_version = json!({"kind": "PodNetwork", "metadata": {"name": "n"}});
        assert!(check_type_meta(pn, &no_version, b"")
            .unwrap_err()
            .message
            .contains("'apiVersion' is missing"));
        let other_version = json!({"apiVersion": "plexus.dev/v1", "kind": "PodNetwork"});
        assert!(check_type_meta(pn, &other_version, b"")
            .unwrap_err()
            .message
            .contains("(plexus.dev/v1alpha1)"));
        let other_kind = json!({"apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetworkAttachment"});
        assert_eq!(check_type_meta(pn, &other_kind, b"").unwrap_err().code, 400);
        let pod = json!({"apiVersion": "v1", "kind": "Pod"});
        assert_eq!(check_type_meta(def(PODS), &pod, b""), Ok(()));
        let lease_bare = json!({"metadata": {"name": "l"}});
        let lease = check_type_meta(def(LEASES), &lease_bare, b"{}").unwrap_err();
        assert_eq!(lease.message, "Object 'Kind' is missing in '{}'", "built-in kinds say it plainly");
    }

    #[test]
    fn create_owns_the_system_metadata_and_drops_a_custom_resources_status() {
        let mut o = json!({"metadata": {"name": "n", "uid": "mine", "generation": 9,
                                        "deletionTimestamp": "2020-01-01T00:00:00Z"},
                           "spec": {}, "status": {"conditions": []}});
        prepare_create(def(POD_NETWORKS), &mut o, "2026-11-24T00:00:00Z").unwrap();
        assert_eq!(
            o,
            json!({"metadata": {"name": "n", "generation": 1, "creationTimestamp": "2026-11-24T00:00:00Z"}, "spec": {}})
        );
        let mut p = json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}});
        prepare_create(def(PODS), &mut p, "t").unwrap();
        assert_eq!(p["status"], json!({"phase": "Pending"}));
        let mut l = json!({"metadata": {"name": "l"}, "spec": {}});
        prepare_create(def(LEASES), &mut l, "t").unwrap();
        assert!(l["metadata"].get("generation").is_none(), "leases keep no generation");
        let mut rv = json!({"metadata": {"name": "n", "resourceVersion": "5"}});
        assert_eq!(prepare_create(def(POD_NETWORKS), &mut rv, "t").unwrap_err().code, 500);
    }

    #[test]
    fn generation_counts_spec_changes_only() {
        let d = def(POD_NETWORKS);
        let mut req = stored();
        req["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(prepare_update(d, &stored(), req, false).unwrap()["metadata"]["generation"], 3);
        let mut req = stored();
        req["spec"]["enabled"] = json!(false);
        req["metadata"]["generation"] = json!(100);
        let new = prepare_update(d, &stored(), req, false).unwrap();
        assert_eq!(
            (new["metadata"]["generation"].clone(), new["spec"]["enabled"].clone()),
            (json!(4), json!(false))
        );
    }

    #[test]
    fn the_status_subresource_splits_writes() {
        let d = def(POD_NETWORKS);
        // A write of the object keeps the stored status.
        let mut req = stored();
        req["status"] = json!({"conditions": []});
        let new = prepare_update(d, &stored(), req, false).unwrap();
        assert_eq!(new["status"], stored()["status"]);
        // A status write changes the status and nothing else.
        let mut req = stored();
        req["status"] = json!({"conditions": []});
        req["spec"]["enabled"] = json!(false);
        req["metadata"]["labels"] = json!({"a": "b"});
        let new = prepare_update(d, &stored(), req, true).unwrap();
        assert_eq!(new["status"], json!({"conditions": []}));
        assert_eq!((new["spec"].clone(), new["metadata"].get("labels")), (stored()["spec"].clone(), None));
        assert_eq!(new["metadata"]["generation"], 3, "a status write is no spec change");
    }

    #[test]
    fn an_object_being_deleted_takes_no_new_finalizer() {
        let d = def(POD_NETWORKS);
        let mut old = stored();
        old["metadata"]["finalizers"] = json!(["a"]);
        mark_deleting(d, &mut old, "2026-11-24T00:00:00Z");
        assert_eq!(old["metadata"]["generation"], 4);
        assert_eq!(old["metadata"]["deletionGracePeriodSeconds"], 0);
        let mut req = old.clone();
        req["metadata"]["finalizers"] = json!(["a", "b"]);
        assert_eq!(prepare_update(d, &old, req, false).unwrap_err().code, 422);
        let mut req = old.clone();
        req["metadata"]["finalizers"] = json!([]);
        req["metadata"]["deletionTimestamp"] = Value::Null;
        let new = prepare_update(d, &old, req, false).unwrap();
        assert!(is_deleting(&new), "deletionTimestamp is the server's");
        assert!(deleted_by_update(&new));
        assert!(!deleted_by_update(&stored()));
    }

    #[test]
    fn an_update_without_changes_is_unchanged() {
        let mut same = stored();
        same["metadata"]["resourceVersion"] = json!("6");
        assert!(unchanged(&stored(), &same));
        same["spec"]["enabled"] = json!(false);
        assert!(!unchanged(&stored(), &same));
    }
}
