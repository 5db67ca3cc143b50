//! The HTTP side of the test API server: routing, authentication, authorization, injected
//! failures, and the verbs (get, list, watch, create, update, patch, delete) in Kubernetes'
//! wire format.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::lifecycle::{self, Refusal};
use super::patch::{
    json_patch, merge_patch, strategic_merge_patch, JsonPatchError, APPLY, JSON_PATCH, MERGE, STRATEGIC,
};
use super::rbac;
use super::resources::{parse_path, Target};
use super::selector::FieldSelector;
use super::store::{partial_metadata, WatchMsg, Watcher};
use super::validation;
use super::{RequestRecord, Shared};

pub type Body = BoxBody<Bytes, std::io::Error>;

/// The longest a watch stays open when the client asks for no timeout.
const MAX_WATCH: Duration = Duration::from_secs(1800);

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never: Infallible| match never {}).boxed()
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// A `Status` object, as every API error answer carries.
pub fn status_object(code: u16, reason: &str, message: &str, details: Option<(&str, &str)>) -> Value {
    let mut s = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    if let Some((kind, name)) = details {
        s["details"] = json!({"name": name, "kind": kind});
    }
    s
}

pub fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "Unknown",
    }
}

fn error(code: u16, message: &str, target: Option<&Target>) -> Response<Body> {
    error_with_reason(code, reason_of(code), message, target)
}

fn error_with_reason(code: u16, reason: &str, message: &str, target: Option<&Target>) -> Response<Body> {
    let details = target.and_then(|t| t.name.as_deref().map(|n| (t.def.plural, n)));
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &status_object(code, reason, message, details))
}

/// `a=b&c=%3D` → pairs, percent- and plus-decoded.
fn decode_query(q: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                        Ok(v) => {
                            out.push(v);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
    }
    fn flag(&self, k: &str) -> bool {
        self.get(k) == Some("true")
    }
}

fn verb_of(method: &Method, target: &Target, watch: bool) -> &'static str {
    match (method.as_str(), target.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("PUT", _) => "update",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query_text = req.uri().query().unwrap_or("").to_owned();
    let query = Query(decode_query(&query_text));
    let header = |name: hyper::header::HeaderName| {
        req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
    };
    let accept = header(hyper::header::ACCEPT).unwrap_or_default();
    let content_type = header(hyper::header::CONTENT_TYPE);
    let authorization = header(hyper::header::AUTHORIZATION);
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(error(400, &format!("reading the body: {e}"), None)),
    };
    let metadata_only = accept.contains("as=PartialObjectMetadata");
    let Some(target) = parse_path(&path) else {
        shared.log(RequestRecord::unknown(&method, &path, &query_text));
        return Ok(error(404, &format!("the server could not find the requested resource ({path})"), None));
    };
    let verb = verb_of(&method, &target, query.flag("watch"));
    let mut record = RequestRecord {
        method: method.to_string(),
        path: path.clone(),
        query: query_text.clone(),
        verb: verb.to_owned(),
        group: target.def.group.to_owned(),
        resource: target.def.plural.to_owned(),
        subresource: target.status.then(|| "status".to_owned()),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        metadata_only,
        content_type: content_type.clone(),
        body: serde_json::from_slice(&body).ok(),
        status: 0,
        watch_error: None,
        at: std::time::Instant::now(),
    };
    let response =
        respond(&shared, &target, verb, &query, metadata_only, content_type.as_deref(), &body, authorization)
            .await;
    record.status = response.status().as_u16();
    record.watch_error = response.extensions().get::<WatchError>().map(|e| e.0);
    record.at = std::time::Instant::now();
    shared.log(record);
    Ok(response)
}

#[allow(clippy::too_many_arguments)]
async fn respond(
    shared: &Arc<Shared>,
    target: &Target,
    verb: &str,
    query: &Query,
    metadata_only: bool,
    content_type: Option<&str>,
    body: &[u8],
    authorization: Option<String>,
) -> Response<Body> {
    // Authentication, then authorization, then injected failures: the order of the API
    // server's filters.
    let (authorized, user, rules, delay, injected) = {
        let mut c = shared.config();
        let token = authorization.as_deref().and_then(|a| a.strip_prefix("Bearer "));
        let authorized = token.is_some_and(|t| c.tokens.iter().any(|ok| ok == t));
        let delay = c.delays.iter().find(|(v, _)| v == verb).map(|(_, d)| *d);
        let injected = if authorized { c.take_failure(verb, &target.rbac_resource()) } else { None };
        (authorized, c.user.clone(), c.rbac.clone(), delay, injected)
    };
    if !authorized {
        return error(401, "Unauthorized", None);
    }
    if let Some(rules) = rules {
        let resource = target.rbac_resource();
        if !rbac::allowed(&rules, target.def.group, &resource, verb) {
            let name = target.name.as_deref().map(|n| format!(" {n:?}")).unwrap_or_default();
            let ns =
                target.namespace.as_deref().map(|n| format!(" in the namespace {n:?}")).unwrap_or_default();
            let msg = format!(
                "{}{name} is forbidden: User {user:?} cannot {verb} resource {resource:?} in API group {:?}{ns}",
                target.def.plural, target.def.group
            );
            return error(403, &msg, Some(target));
        }
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if query.get("dryRun").is_some() {
        return error(400, "the test API server does not implement dry runs", Some(target));
    }
    if let Some(code) = injected {
        return error(
            code,
            &format!("injected failure {code} for {verb} {}", target.def.plural),
            Some(target),
        );
    }
    match verb {
        "get" => get(shared, target, metadata_only),
        "list" => list(shared, target, query, metadata_only),
        "watch" => watch(shared, target, query, metadata_only),
        "create" => create(shared, target, body),
        "update" => update(shared, target, body),
        "patch" => patch(shared, target, query, content_type, body),
        "delete" => delete(shared, target, body),
        _ => error(405, &format!("the test API server does not implement {verb}"), Some(target)),
    }
}

fn refused(r: Refusal, target: &Target) -> Response<Body> {
    error(r.code, &r.message, Some(target))
}

fn namespace_of(target: &Target) -> &str {
    target.namespace.as_deref().unwrap_or("")
}

fn get(shared: &Shared, target: &Target, metadata_only: bool) -> Response<Body> {
    let store = shared.store();
    let name = target.name.as_deref().unwrap_or_default();
    match store.get(target.def.plural, namespace_of(target), name) {
        Some(obj) => {
            json_response(StatusCode::OK, &if metadata_only { partial_metadata(obj) } else { obj.clone() })
        }
        None => error(404, &format!("{} {name:?} not found", target.def.plural), Some(target)),
    }
}

fn list(shared: &Shared, target: &Target, query: &Query, metadata_only: bool) -> Response<Body> {
    let selector = match FieldSelector::parse(query.get("fieldSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return error(400, &e, Some(target)),
    };
    let limit: usize =
        query.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let store = shared.store();
    // A continue token holds the list's resourceVersion and where the next page starts.
    let (rv, offset) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => match token
            .split_once(':')
            .and_then(|(r, o)| Some((r.parse::<u64>().ok()?, o.parse::<usize>().ok()?)))
        {
            Some(t) => t,
            None => return error(400, "invalid continue token", Some(target)),
        },
        None => (store.rv, 0),
    };
    let matching: Vec<&Value> =
        store.list(target.def.plural, target.namespace.as_deref()).filter(|o| selector.matches(o)).collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(offset)
        .take(limit)
        .map(|o| if metadata_only { partial_metadata(o) } else { (*o).clone() })
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if offset + page.len() < matching.len() {
        metadata["continue"] = json!(format!("{rv}:{}", offset + page.len()));
    }
    let (kind, api_version) = if metadata_only {
        ("PartialObjectMetadataList".to_owned(), "meta.k8s.io/v1".to_owned())
    } else {
        (format!("{}List", target.def.kind), target.def.api_version())
    };
    json_response(
        StatusCode::OK,
        &json!({"kind": kind, "apiVersion": api_version, "metadata": metadata, "items": page}),
    )
}

fn watch(shared: &Arc<Shared>, target: &Target, query: &Query, metadata_only: bool) -> Response<Body> {
    let selector = match FieldSelector::parse(query.get("fieldSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return error(400, &e, Some(target)),
    };
    let bookmarks = query.flag("allowWatchBookmarks");
    let ignoring = shared.config().ignore_initial_events;
    let send_initial = query.flag("sendInitialEvents") && !ignoring;
    let rv = query.get("resourceVersion").unwrap_or("");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(MAX_WATCH)
        .min(MAX_WATCH);
    if send_initial {
        // What a server with the WatchList feature gate off answers (Kubernetes < 1.32
        // by default), and its validation when it is on.
        if !shared.config().watch_list {
            return error(422, "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled", None);
        }
        if query.get("resourceVersionMatch") != Some("NotOlderThan") || !bookmarks {
            return error(
                422,
                "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
                None,
            );
        }
    } else if query.get("resourceVersionMatch").is_some() && !ignoring {
        return error(
            422,
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            None,
        );
    }
    let mut expired = false;
    let (tx, rx) = mpsc::unbounded_channel();
    let watcher = Watcher {
        resource: target.def.plural.to_owned(),
        namespace: target.namespace.clone(),
        selector,
        metadata_only,
        bookmarks,
        tx,
    };
    {
        let mut store = shared.store();
        let initial: Option<Vec<String>> = if send_initial || rv.is_empty() || rv == "0" {
            // The current state as synthetic ADDED events.
            let mut lines: Vec<String> = store
                .list(target.def.plural, target.namespace.as_deref())
                .filter(|o| watcher.selector.matches(o))
                .map(|o| watcher.event_line(super::store::ChangeType::Added, o))
                .collect();
            if send_initial {
                lines.push(watcher.bookmark_line(store.rv, true));
            }
            Some(lines)
        } else {
            match rv.parse::<u64>() {
                Ok(n) => store.replay(&watcher, n),
                Err(_) => return error(400, &format!("invalid resourceVersion {rv:?}"), Some(target)),
            }
        };
        match initial {
            Some(lines) => {
                for l in lines {
                    let _ = watcher.tx.send(WatchMsg::Line(l));
                }
                store.watchers.push(watcher);
            }
            None => {
                let message = format!("too old resource version: {rv} ({})", store.rv);
                if shared.config().expired_as_http {
                    return error(410, &message, None);
                }
                let gone = status_object(410, "Expired", &message, None);
                let _ = watcher.tx.send(WatchMsg::Line(json!({"type": "ERROR", "object": gone}).to_string()));
                let _ = watcher.tx.send(WatchMsg::End);
                expired = true;
            }
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let frames = futures::stream::unfold(Some(rx), move |rx| async move {
        let mut rx = rx?;
        let msg = tokio::select! {
            m = rx.recv() => m,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        match msg {
            Some(WatchMsg::Line(mut line)) => {
                line.push('\n');
                Some((Ok(Frame::data(Bytes::from(line))), Some(rx)))
            }
            Some(WatchMsg::Abort) => {
                Some((Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "watch dropped")), None))
            }
            Some(WatchMsg::End) | None => None,
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
    r.headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    if expired {
        r.extensions_mut().insert(WatchError(410));
    }
    r
}

/// The code of the ERROR event a watch response starts with (for the request log).
#[derive(Clone, Copy)]
struct WatchError(u16);

/// `pods`, `podnetworks.plexus.dev`: how the API server names a resource in messages.
fn qualified(target: &Target) -> String {
    match target.def.group {
        "" => target.def.plural.to_owned(),
        group => format!("{}.{group}", target.def.plural),
    }
}

fn not_found(target: &Target) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or_default();
    error(404, &format!("{} {name:?} not found", qualified(target)), Some(target))
}

fn conflict(target: &Target) -> Response<Body> {
    let name = target.name.as_deref().unwrap_or_default();
    error(
        409,
        &format!("Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again", target.def.plural),
        Some(target),
    )
}

fn json_object(body: &[u8]) -> Result<Value, Refusal> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(Refusal::new(400, "the body is not a JSON object")),
    }
}

/// Generated names: `generateName` and five characters, as the API server makes them.
fn generated_name(prefix: &str, seq: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = seq.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    let mut suffix = String::new();
    for _ in 0..5 {
        suffix.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    format!("{prefix}{suffix}")
}

fn create(shared: &Shared, target: &Target, body: &[u8]) -> Response<Body> {
    if target.name.is_some() {
        return error(
            405,
            "POST is for a collection; create an object by POSTing it to its resource",
            Some(target),
        );
    }
    let mut obj = match json_object(body) {
        Ok(o) => o,
        Err(r) => return refused(r, target),
    };
    if let Err(r) = lifecycle::check_type_meta(target.def, &obj, body) {
        return refused(r, target);
    }
    let ns = namespace_of(target).to_owned();
    match obj["metadata"]["namespace"].as_str() {
        Some(n) if n != ns && !target.def.is_cluster_scoped() => {
            return error(
                400,
                "the namespace of the object does not match the namespace on the request",
                Some(target),
            )
        }
        _ if target.def.is_cluster_scoped() => {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
        }
        _ => obj["metadata"]["namespace"] = json!(ns),
    }
    let mut store = shared.store();
    if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        if let Some(prefix) = obj["metadata"]["generateName"].as_str().map(str::to_owned) {
            let seq = store.rv;
            obj["metadata"]["name"] = json!(generated_name(&prefix, seq));
        }
    }
    let Some(name) = obj["metadata"]["name"].as_str().filter(|n| !n.is_empty()).map(str::to_owned) else {
        return error(422, "metadata.name: Required value: name or generateName is required", Some(target));
    };
    let t = Target { name: Some(name.clone()), ..target.clone() };
    if store.get(target.def.plural, &ns, &name).is_some() {
        return error_with_reason(
            409,
            "AlreadyExists",
            &format!("{} {name:?} already exists", qualified(target)),
            Some(&t),
        );
    }
    if let Err(r) = lifecycle::prepare_create(target.def, &mut obj, &lifecycle::now()) {
        return refused(r, &t);
    }
    if let Err(r) = validation::admit(target.def, &mut obj, None) {
        return refused(r, &t);
    }
    let stored = store.put(target.def.plural, obj);
    json_response(StatusCode::CREATED, &stored)
}

/// Stores the object an update made from `current` (or nothing when it changed nothing);
/// an object being deleted that has lost its last finalizer is deleted.
fn commit(store: &mut super::store::Store, target: &Target, current: &Value, new: Value) -> Response<Body> {
    if lifecycle::unchanged(current, &new) {
        return json_response(StatusCode::OK, current);
    }
    let ns = namespace_of(target);
    let name = target.name.as_deref().unwrap_or_default();
    if lifecycle::deleted_by_update(&new) {
        // Deleted instead of updated: watchers get DELETED (with the last stored state, as
        // etcd's previous value), the writer the object as it made it.
        let rv = store
            .delete(target.def.plural, ns, name)
            .and_then(|o| o["metadata"]["resourceVersion"].as_str().map(str::to_owned));
        let mut answered = new;
        answered["metadata"]["resourceVersion"] = json!(rv);
        return json_response(StatusCode::OK, &answered);
    }
    let stored = store.put(target.def.plural, new);
    json_response(StatusCode::OK, &stored)
}

/// PUT: replaces the object (or its status), if the resourceVersion it carries is current.
fn update(shared: &Shared, target: &Target, body: &[u8]) -> Response<Body> {
    let requested = match json_object(body) {
        Ok(o) => o,
        Err(r) => return refused(r, target),
    };
    if let Err(r) = lifecycle::check_type_meta(target.def, &requested, body) {
        return refused(r, target);
    }
    let name = target.name.as_deref().unwrap_or_default();
    if requested["metadata"]["name"].as_str() != Some(name) {
        let theirs = requested["metadata"]["name"].as_str().unwrap_or("");
        return error(
            400,
            &format!("the name of the object ({theirs}) does not match the name on the URL ({name})"),
            Some(target),
        );
    }
    if let Some(n) = requested["metadata"]["namespace"].as_str() {
        if !target.def.is_cluster_scoped() && n != namespace_of(target) {
            return error(
                400,
                "the namespace of the provided object does not match the namespace sent on the request",
                Some(target),
            );
        }
    }
    let mut store = shared.store();
    let Some(current) = store.get(target.def.plural, namespace_of(target), name).cloned() else {
        return not_found(target);
    };
    match requested["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty()) {
        Some(rv) if Some(rv) != current["metadata"]["resourceVersion"].as_str() => return conflict(target),
        Some(_) => {}
        None if target.def.requires_resource_version_on_update() => {
            return error(
                422,
                &format!(
                    "{}.{} {name:?} is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                    target.def.kind, target.def.group
                ),
                Some(target),
            )
        }
        None => {}
    }
    write(&mut store, target, &current, requested)
}

/// The common end of update, patch and apply: the server's rules, validation, the write.
fn write(
    store: &mut super::store::Store,
    target: &Target,
    current: &Value,
    requested: Value,
) -> Response<Body> {
    let mut new = match lifecycle::prepare_update(target.def, current, requested, target.status) {
        Ok(n) => n,
        Err(r) => return refused(r, target),
    };
    if let Err(r) = validation::admit(target.def, &mut new, Some(current)) {
        return refused(r, target);
    }
    commit(store, target, current, new)
}

fn patch(
    shared: &Shared,
    target: &Target,
    query: &Query,
    content_type: Option<&str>,
    body: &[u8],
) -> Response<Body> {
    let media = content_type.unwrap_or("").split(';').next().unwrap_or("").trim();
    let p: Value = if media == APPLY {
        // Apply configurations are YAML (JSON is YAML too).
        match serde_yaml::from_slice(body) {
            Ok(v) => v,
            Err(e) => return error(400, &format!("the apply configuration is not YAML: {e}"), Some(target)),
        }
    } else {
        match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => return error(400, "the patch is not JSON", Some(target)),
        }
    };
    let name = target.name.as_deref().unwrap_or_default();
    if media == APPLY {
        if let Err(r) = lifecycle::check_type_meta(target.def, &p, body) {
            return refused(r, target);
        }
    }
    if media == APPLY && query.get("fieldManager").is_none_or(str::is_empty) {
        return error(
            422,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            Some(target),
        );
    }
    let mut store = shared.store();
    let Some(current) = store.get(target.def.plural, namespace_of(target), name).cloned() else {
        if media == APPLY && !target.status {
            drop(store);
            let mut obj = p;
            obj["metadata"]["name"] = json!(name);
            let collection = Target { name: None, ..target.clone() };
            return match serde_json::to_vec(&obj) {
                Ok(b) => create(shared, &collection, &b),
                Err(e) => error(500, &e.to_string(), Some(target)),
            };
        }
        return not_found(target);
    };
    // Optimistic concurrency: a resourceVersion in the patch must be the current one.
    if let Some(rv) = p["metadata"]["resourceVersion"].as_str() {
        if Some(rv) != current["metadata"]["resourceVersion"].as_str() {
            return conflict(target);
        }
    }
    let mut patched = current.clone();
    match media {
        MERGE | APPLY => merge_patch(&mut patched, &p),
        STRATEGIC if target.def.is_custom() => {
            return error(
                415,
                &format!("the body of the request was in an unknown format - accepted media types include: {JSON_PATCH}, {MERGE}, {APPLY}"),
                Some(target),
            )
        }
        STRATEGIC => {
            if let Err(e) = strategic_merge_patch(&mut patched, &p) {
                return error(400, &e, Some(target));
            }
        }
        JSON_PATCH => match json_patch(&mut patched, &p) {
            Ok(()) => {}
            Err(JsonPatchError::Malformed(m)) => return error(400, &m, Some(target)),
            Err(JsonPatchError::Failed(m)) => return error(422, &m, Some(target)),
        },
        other => {
            return error(
                415,
                &format!("the body of the request was in an unknown format: {other}"),
                Some(target),
            )
        }
    }
    write(&mut store, target, &current, patched)
}

/// DELETE: an object with finalizers is marked (deletionTimestamp) and stays until they are
/// removed; one without is gone at once. Pods too: there is no kubelet to end a graceful
/// deletion, so they go as with `gracePeriodSeconds: 0`.
fn delete(shared: &Shared, target: &Target, body: &[u8]) -> Response<Body> {
    if target.status {
        return error(405, "the status subresource cannot be deleted", Some(target));
    }
    let options: Value =
        if body.is_empty() { json!({}) } else { serde_json::from_slice(body).unwrap_or(json!({})) };
    if let Some(policy) = options["propagationPolicy"].as_str().filter(|p| *p != "Background") {
        return error(
            400,
            &format!(
                "the test API server has no garbage collector: propagationPolicy {policy} is not supported"
            ),
            Some(target),
        );
    }
    let mut store = shared.store();
    let name = target.name.as_deref().unwrap_or_default();
    let ns = namespace_of(target);
    let Some(current) = store.get(target.def.plural, ns, name).cloned() else {
        return not_found(target);
    };
    let pre = &options["preconditions"];
    if let Some(uid) = pre["uid"].as_str() {
        let actual = current["metadata"]["uid"].as_str().unwrap_or("");
        if uid != actual {
            return error(
                409,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                Some(target),
            );
        }
    }
    if let Some(rv) = pre["resourceVersion"].as_str() {
        let actual = current["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if rv != actual {
            return error(
                409,
                &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"),
                Some(target),
            );
        }
    }
    if !lifecycle::finalizers(&current).is_empty() {
        if lifecycle::is_deleting(&current) {
            return json_response(StatusCode::OK, &current);
        }
        let mut marked = current;
        lifecycle::mark_deleting(target.def, &mut marked, &lifecycle::now());
        let stored = store.put(target.def.plural, marked);
        return json_response(StatusCode::OK, &stored);
    }
    let Some(last) = store.delete(target.def.plural, ns, name) else {
        return not_found(target);
    };
    if target.def.returns_deleted_object() {
        return json_response(StatusCode::OK, &last);
    }
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "group": target.def.group, "kind": target.def.plural,
                        "uid": last["metadata"]["uid"].clone()},
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = decode_query("fieldSelector=spec.nodeName%3Dnode-1&watch=true&x=a+b&bad=%zz");
        assert_eq!(q[0], ("fieldSelector".into(), "spec.nodeName=node-1".into()));
        assert_eq!(q[2].1, "a b");
        assert_eq!(q[3].1, "%zz");
    }
}
