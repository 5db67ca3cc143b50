//! The `NetworkAttachmentPolicy` objects (group `plexus.dev`, plexus's own; version
//! `v1alpha1`; cluster-scoped, so only cluster administrators write them), watched and merged
//! into the policy the engine checks (docs/policy.md).
//!
//! - Several objects merge, oldest first (`creationTimestamp`, then name): a namespace (or
//!   `*`) named by several takes the oldest object's rule, and the conflict is logged.
//! - An object that becomes invalid keeps its last valid version in force; one that never was
//!   valid refuses every attachment until fixed (an invalid policy never widens what is
//!   allowed). Both are logged and counted (`plexus_network_policy_loads{result="invalid"}`).
//! - No objects, or the resource not served (its CRD not installed): no policy, everything is
//!   allowed. Until the first list answers, attachments wait (try again later).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use ::kube::api::Api;
use ::kube::core::ClusterResourceScope;

use super::resource::custom_resource;
use ::kube::runtime::watcher::{self, watcher, Event};
use ::kube::{Client, ResourceExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::watch::Sink;
use crate::metrics::metrics;
use crate::policy::model::{Rule, GROUP, KIND, VERSION};
use crate::policy::{Policy, PolicyHandle, PolicySource, PolicyState};

pub const PLURAL: &str = "networkattachmentpolicies";

/// The object as served. `spec` is read as any JSON so that one malformed object is an error
/// naming it, not a list that cannot be decoded.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NetworkAttachmentPolicy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
}

custom_resource!(
    NetworkAttachmentPolicy,
    group = GROUP,
    version = VERSION,
    kind = KIND,
    plural = PLURAL,
    scope = ClusterResourceScope
);

type Compiled = Vec<(Vec<String>, Rule)>;

/// The objects as last seen, and the last valid version of each.
#[derive(Default)]
pub struct Merger {
    objects: BTreeMap<String, NetworkAttachmentPolicy>,
    /// By uid: the compiled rules of the object's last valid version.
    last_good: HashMap<String, Compiled>,
    /// By uid: the error last logged for the object, so a broken object is logged once.
    reported: HashMap<String, String>,
}

impl Merger {
    pub fn apply(&mut self, obj: NetworkAttachmentPolicy) {
        self.objects.insert(obj.name_any(), obj);
    }

    pub fn delete(&mut self, obj: &NetworkAttachmentPolicy) {
        self.objects.remove(&obj.name_any());
    }

    pub fn replace(&mut self, objects: Vec<NetworkAttachmentPolicy>) {
        self.objects = objects.into_iter().map(|o| (o.name_any(), o)).collect();
    }

    /// The policy the objects make: `Unrestricted` when there are none.
    pub fn policy(&mut self) -> PolicyState {
        if self.objects.is_empty() {
            self.last_good.clear();
            self.reported.clear();
            return PolicyState::Unrestricted;
        }
        let mut ordered: Vec<&NetworkAttachmentPolicy> = self.objects.values().collect();
        ordered.sort_by_key(|o| (o.metadata.creation_timestamp.clone(), o.name_any()));
        let mut compiled = Vec::new();
        let mut invalid = Vec::new();
        for o in ordered {
            let name = o.name_any();
            let uid = o.metadata.uid.clone().unwrap_or_else(|| name.clone());
            match PolicySource::from_spec(&name, &o.spec).and_then(|s| Policy::compile_one(&s)) {
                Ok(rules) => {
                    self.reported.remove(&uid);
                    self.last_good.insert(uid, rules.clone());
                    compiled.push(rules);
                }
                Err(e) => {
                    let msg = e.to_string();
                    let kept = self.last_good.get(&uid).cloned();
                    if self.reported.get(&uid) != Some(&msg) {
                        metrics().policy_load("invalid");
                        match kept {
                            Some(_) => tracing::warn!(
                                "{msg}; its last valid version stays in force until it is fixed"
                            ),
                            None => tracing::error!(
                                "{msg}; every network is refused until it is fixed or deleted"
                            ),
                        }
                        self.reported.insert(uid, msg);
                    }
                    match kept {
                        Some(rules) => compiled.push(rules),
                        None => invalid.push(name),
                    }
                }
            }
        }
        let live: Vec<String> =
            self.objects.values().map(|o| o.metadata.uid.clone().unwrap_or_else(|| o.name_any())).collect();
        self.last_good.retain(|uid, _| live.contains(uid));
        self.reported.retain(|uid, _| live.contains(uid));
        let policy = Policy::merge(compiled, invalid);
        for c in policy.conflicts() {
            tracing::warn!("network attachment policy: {c}");
        }
        PolicyState::Active(Arc::new(policy))
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// A handle waiting for the objects, whether the watch's view is current (true while it
/// holds the server's current state, as the catalog's caches: readiness includes it), and
/// the task that watches them into it (run it on the runtime; it never returns). The watch is
/// the caches' ([`super::watch`]): a 410 relists at once, failures back off, the resource not
/// served (404) is no objects. While the watch fails, the last policy stays in force.
pub fn start(
    client: Client,
    host: Arc<dyn crate::policy::HostLookup>,
) -> (PolicyHandle, tokio::sync::watch::Receiver<bool>, impl Future<Output = ()> + Send + 'static) {
    let handle = PolicyHandle::new(PolicyState::Waiting { source: format!("the {KIND} objects") }, host);
    let api: Api<NetworkAttachmentPolicy> = Api::all(client);
    let (synced, current) = tokio::sync::watch::channel(false);
    let task = super::watch::run_into(
        "NetworkAttachmentPolicies",
        watcher::Config::default(),
        super::watch::Settings::default(),
        move |config| watcher(api.clone(), config),
        Objects { handle: handle.clone(), merger: Merger::default(), listing: Vec::new() },
        synced,
    );
    (handle, current, task)
}

/// The watched objects, merged into the handle's policy.
struct Objects {
    handle: PolicyHandle,
    merger: Merger,
    /// The objects of a list in progress.
    listing: Vec<NetworkAttachmentPolicy>,
}

impl Objects {
    fn publish(&mut self) {
        let state = self.merger.policy();
        metrics().set_cached("networkattachmentpolicies", self.merger.len());
        match &state {
            PolicyState::Active(p) => {
                tracing::info!(
                    objects = self.merger.len(),
                    rules = p.rules().len(),
                    "network attachment policy in force"
                )
            }
            _ => tracing::info!("no network attachment policy: every network is allowed"),
        }
        self.handle.set(state);
    }
}

impl Sink<NetworkAttachmentPolicy> for Objects {
    fn apply(&mut self, event: Event<NetworkAttachmentPolicy>) -> usize {
        match event {
            Event::Init => self.listing.clear(),
            Event::InitApply(o) => self.listing.push(o),
            Event::InitDone => {
                self.merger.replace(std::mem::take(&mut self.listing));
                self.publish();
            }
            Event::Apply(o) => {
                self.merger.apply(o);
                self.publish();
            }
            Event::Delete(o) => {
                self.merger.delete(&o);
                self.publish();
            }
        }
        self.merger.len()
    }

    /// Before the first list, attachments wait, saying why; after it, the last policy read
    /// stays in force.
    fn failed(&mut self, why: &str) {
        if !self.handle.is_loaded() {
            self.handle.set(PolicyState::Waiting { source: format!("the {KIND} objects: {why}") });
        }
    }

    fn if_not_served(&self) -> Option<&'static str> {
        Some("install deploy/policy-crd.yaml to use a network attachment policy")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::Resource;
    use serde_json::json;

    fn object(name: &str, uid: &str, created: &str, spec: Value) -> NetworkAttachmentPolicy {
        let mut o = json!({
            "apiVersion": "plexus.dev/v1alpha1", "kind": "NetworkAttachmentPolicy",
            "metadata": {"name": name, "uid": uid},
            "spec": spec,
        });
        if !created.is_empty() {
            o["metadata"]["creationTimestamp"] = json!(created);
        }
        serde_json::from_value(o).unwrap()
    }

    fn active(state: PolicyState) -> Arc<Policy> {
        match state {
            PolicyState::Active(p) => p,
            other => panic!("not active: {other:?}"),
        }
    }

    #[test]
    fn the_url_is_cluster_wide_in_plexus_group() {
        assert_eq!(
            NetworkAttachmentPolicy::url_path(&(), None),
            "/apis/plexus.dev/v1alpha1/networkattachmentpolicies"
        );
    }

    #[test]
    fn no_objects_is_no_policy_and_the_oldest_object_wins_a_namespace() {
        let mut m = Merger::default();
        assert!(matches!(m.policy(), PolicyState::Unrestricted));
        m.apply(object(
            "zz-old",
            "u1",
            "2026-01-01T00:00:00Z",
            json!({"rules": [{"name": "old", "namespaces": ["a"]}]}),
        ));
        m.apply(object(
            "aa-new",
            "u2",
            "2026-02-01T00:00:00Z",
            json!({"rules": [{"name": "new", "namespaces": ["a", "b"]}]}),
        ));
        let p = active(m.policy());
        assert_eq!(p.rule_for("a").unwrap().name, "old", "older by creation, though later by name");
        assert_eq!(p.rule_for("b").unwrap().name, "new");
        m.delete(&object("zz-old", "u1", "", json!(null)));
        assert_eq!(active(m.policy()).rule_for("a").unwrap().name, "new");
        m.replace(Vec::new());
        assert!(matches!(m.policy(), PolicyState::Unrestricted));
    }

    #[test]
    fn an_invalid_object_keeps_its_last_valid_version_or_refuses_everything() {
        let mut m = Merger::default();
        let good = json!({"rules": [{"name": "r", "namespaces": ["*"], "plugins": ["bridge"]}]});
        m.apply(object("p", "u1", "2026-01-01T00:00:00Z", good));
        assert!(active(m.policy()).invalid().is_empty());
        // Broken later: the last valid version stays.
        m.apply(object("p", "u1", "2026-01-01T00:00:00Z", json!({"rules": [{"namespaces": []}]})));
        let p = active(m.policy());
        assert!(p.invalid().is_empty());
        assert_eq!(p.rule_for("x").unwrap().name, "r");
        // Another object, never valid: nothing is allowed.
        m.apply(object("q", "u2", "2026-01-02T00:00:00Z", json!({"rulez": []})));
        assert_eq!(active(m.policy()).invalid(), ["q"]);
        // Re-created under the same name (a new uid) and still broken: no last valid version.
        m.delete(&object("p", "u1", "", json!(null)));
        m.delete(&object("q", "u2", "", json!(null)));
        m.apply(object("p", "u3", "2026-01-03T00:00:00Z", json!({"rules": "no"})));
        assert_eq!(active(m.policy()).invalid(), ["p"]);
    }
}
