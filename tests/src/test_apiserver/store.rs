//! The test API server's objects: one resourceVersion sequence for everything, a bounded
//! history of changes for watches that resume, and the open watches.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::resources::{ResourceDef, RESOURCES};
use super::selector::FieldSelector;

/// Changes kept for watches resuming from a resourceVersion; older ones answer 410 Gone.
const HISTORY: usize = 10_000;

/// Identifies an object: resource plural, namespace ("" for cluster-scoped), name.
pub type Key = (String, String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub fn wire(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    resource: String,
    namespace: String,
    old: Option<Value>,
    new: Option<Value>,
}

/// What flows to one watch connection, in order.
#[derive(Debug)]
pub enum WatchMsg {
    /// One JSON line (an event, a bookmark, an error).
    Line(String),
    /// End the response cleanly (as a server-side timeout does).
    End,
    /// Break the connection mid-stream (as a network failure or an API server restart does).
    Abort,
}

pub struct Watcher {
    pub resource: String,
    /// `None` for a watch across namespaces.
    pub namespace: Option<String>,
    pub selector: FieldSelector,
    pub metadata_only: bool,
    pub bookmarks: bool,
    pub tx: UnboundedSender<WatchMsg>,
}

impl Watcher {
    fn sees(&self, namespace: &str, obj: &Value) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace) && self.selector.matches(obj)
    }

    pub fn wire_object(&self, obj: &Value) -> Value {
        if self.metadata_only {
            partial_metadata(obj)
        } else {
            obj.clone()
        }
    }

    pub fn event_line(&self, t: ChangeType, obj: &Value) -> String {
        json!({"type": t.wire(), "object": self.wire_object(obj)}).to_string()
    }

    /// A BOOKMARK carrying only a resourceVersion (and annotations), typed like the watch's
    /// objects, as the API server sends it.
    pub fn bookmark_line(&self, rv: u64, initial_events_end: bool) -> String {
        let def = def(&self.resource);
        let (api_version, kind) = if self.metadata_only {
            ("meta.k8s.io/v1".to_owned(), "PartialObjectMetadata".to_owned())
        } else {
            (def.api_version(), def.kind.to_owned())
        };
        let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata}})
            .to_string()
    }
}

fn def(resource: &str) -> &'static ResourceDef {
    RESOURCES.iter().find(|d| d.plural == resource).expect("a known resource")
}

/// The object as `PartialObjectMetadata` (what `Accept: ...;as=PartialObjectMetadata` gets).
pub fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"].clone()})
}

#[derive(Default)]
pub struct Store {
    pub objects: BTreeMap<Key, Value>,
    pub rv: u64,
    history: VecDeque<Change>,
    /// The oldest resourceVersion a watch may resume from.
    oldest: u64,
    pub watchers: Vec<Watcher>,
    next_uid: u64,
}

impl Store {
    pub fn new() -> Self {
        // Start above 0: "0" means "any version" on the wire.
        Store { rv: 100, oldest: 100, ..Default::default() }
    }

    /// Creates or replaces an object; returns it as stored (with resourceVersion, uid, ...).
    pub fn put(&mut self, resource: &str, mut obj: Value) -> Value {
        let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
        let name = obj["metadata"]["name"].as_str().expect("objects need metadata.name").to_owned();
        let key = (resource.to_owned(), namespace.clone(), name);
        let old = self.objects.get(&key).cloned();
        self.rv += 1;
        let meta = obj["metadata"].as_object_mut().expect("metadata is an object");
        meta.insert("resourceVersion".into(), json!(self.rv.to_string()));
        let uid = match old.as_ref().and_then(|o| o["metadata"]["uid"].as_str()) {
            Some(u) => u.to_owned(),
            None => {
                self.next_uid += 1;
                meta.get("uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("uid-{:08}", self.next_uid))
            }
        };
        meta.insert("uid".into(), json!(uid));
        meta.entry("creationTimestamp").or_insert(json!("2026-01-01T00:00:00Z"));
        let def = def(resource);
        obj["apiVersion"] = json!(def.api_version());
        obj["kind"] = json!(def.kind);
        self.objects.insert(key, obj.clone());
        self.record(resource, &namespace, old, Some(obj.clone()));
        obj
    }

    pub fn delete(&mut self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let old = self.objects.remove(&(resource.to_owned(), namespace.to_owned(), name.to_owned()))?;
        self.rv += 1;
        // A deleted object's last state carries the deletion's resourceVersion.
        let mut last = old;
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.record(resource, namespace, Some(last.clone()), None);
        Some(last)
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(resource.to_owned(), namespace.to_owned(), name.to_owned()))
    }

    /// Objects of a resource (in one namespace, or all), in key order.
    pub fn list<'a>(
        &'a self,
        resource: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .iter()
            .filter(move |((r, ns, _), _)| r == resource && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v)
    }

    /// What a restarted API server has: the objects, and a history that starts after the
    /// writes made while it was down (a cluster writes all the time: leases, events), so
    /// every watch resuming from before the restart gets 410 Gone.
    pub fn restart(&mut self) {
        self.rv += 1;
        self.compact();
    }

    /// Forgets the history: every watch resuming from before now gets 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest = self.rv;
    }

    /// The changes after `rv` as watch lines for `w`, or `None` when `rv` is too old.
    pub fn replay(&self, w: &Watcher, rv: u64) -> Option<Vec<String>> {
        if rv < self.oldest {
            return None;
        }
        let mut out = Vec::new();
        for c in self.history.iter().filter(|c| c.rv > rv && c.resource == w.resource) {
            if let Some(line) = change_line(w, &c.namespace, c.old.as_ref(), c.new.as_ref()) {
                out.push(line);
            }
        }
        Some(out)
    }

    fn record(&mut self, resource: &str, namespace: &str, old: Option<Value>, new: Option<Value>) {
        self.watchers.retain(|w| {
            if w.resource != resource {
                return true;
            }
            match change_line(w, namespace, old.as_ref(), new.as_ref()) {
                Some(line) => w.tx.send(WatchMsg::Line(line)).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
        self.history.push_back(Change {
            rv: self.rv,
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            old,
            new,
        });
        while self.history.len() > HISTORY {
            if let Some(c) = self.history.pop_front() {
                self.oldest = c.rv;
            }
        }
    }

    /// Sends a bookmark with the current resourceVersion to every watch that asked for them.
    pub fn bookmark_all(&mut self) {
        let rv = self.rv;
        self.watchers
            .retain(|w| !w.bookmarks || w.tx.send(WatchMsg::Line(w.bookmark_line(rv, false))).is_ok());
    }

    /// Ends (`abort`: breaks) every open watch.
    pub fn close_watches(&mut self, abort: bool) {
        for w in self.watchers.drain(..) {
            let _ = w.tx.send(if abort { WatchMsg::Abort } else { WatchMsg::End });
        }
    }
}

/// The event a watcher sees for one change. An object entering the watch's selection is
/// ADDED, one leaving it DELETED, as the API server's watch cache does for field selectors.
fn change_line(w: &Watcher, namespace: &str, old: Option<&Value>, new: Option<&Value>) -> Option<String> {
    let was = old.is_some_and(|o| w.sees(namespace, o));
    match new {
        Some(n) => {
            let is = w.sees(namespace, n);
            match (was, is) {
                (false, true) => Some(w.event_line(ChangeType::Added, n)),
                (true, true) => Some(w.event_line(ChangeType::Modified, n)),
                (true, false) => Some(w.event_line(ChangeType::Deleted, n)),
                (false, false) => None,
            }
        }
        None => old.filter(|_| was).map(|o| w.event_line(ChangeType::Deleted, o)),
    }
}
