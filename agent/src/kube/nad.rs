//! The NetworkAttachmentDefinition custom resource (group `k8s.cni.cncf.io`, version `v1`)
//! and its cache: a kube reflector fed by a watch of every namespace.

use std::future::Future;

use ::kube::api::Api;
use ::kube::core::NamespaceResourceScope;

use super::resource::custom_resource;
use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::{watcher, WatchStreamExt};
use ::kube::{Client, ResourceExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::metrics::metrics;
use crate::spec::resolve;
use crate::spec::RESOURCE_NAME_ANNOTATION;

pub const GROUP: &str = "k8s.cni.cncf.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "NetworkAttachmentDefinition";
pub const PLURAL: &str = "network-attachment-definitions";

/// kubectl's copy of the whole applied object: as large as the object, and never read.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The resource as the API server serves it (NPWG spec 3.2). Written by hand rather than
/// derived: plexus needs no generated schema, and `deploy/crd.yaml` is the schema.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NetworkAttachmentDefinition {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NadSpec,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NadSpec {
    /// A string holding CNI JSON. Read as any JSON value so one malformed object (on a
    /// server without the CRD's schema) cannot make the whole list undecodable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
}

custom_resource!(
    NetworkAttachmentDefinition,
    group = GROUP,
    version = VERSION,
    kind = KIND,
    plural = PLURAL,
    scope = NamespaceResourceScope
);

impl NetworkAttachmentDefinition {
    /// What the spec engine reads of it.
    pub fn to_spec(&self) -> resolve::NetworkAttachmentDefinition {
        let namespace = self.namespace().unwrap_or_else(|| "default".into());
        let name = self.name_any();
        let config = match &self.spec.config {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            // Not a string: handed on as JSON text, so resolving it fails (or works) with the
            // NAD named in the message, instead of the NAD silently not existing.
            Some(other) => {
                tracing::warn!(nad = %format!("{namespace}/{name}"), "spec.config should be a string holding CNI JSON");
                Some(other.to_string())
            }
        };
        let resource_name =
            self.annotations().get(RESOURCE_NAME_ANNOTATION).filter(|r| !r.is_empty()).cloned();
        resolve::NetworkAttachmentDefinition { namespace, name, config, resource_name }
    }
}

impl NetworkAttachmentDefinition {
    /// What the network API lists of it: the spec engine's view, its uid and generation
    /// (which [`trim`] keeps).
    pub fn summary(&self) -> crate::catalog::NadSummary {
        crate::catalog::NadSummary {
            nad: self.to_spec(),
            uid: self.metadata.uid.clone().unwrap_or_default(),
            generation: self.metadata.generation.unwrap_or(0),
        }
    }
}

/// Drops what plexus never reads before the object is cached.
fn trim(nad: &mut NetworkAttachmentDefinition) {
    nad.metadata.managed_fields = None;
    if let Some(a) = nad.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// The NADs of every namespace, as last seen by the watch.
#[derive(Clone)]
pub struct NadCache {
    store: Store<NetworkAttachmentDefinition>,
}

impl NadCache {
    /// The cache and the task that fills it (run it on the runtime; it never returns).
    pub fn start(
        client: Client,
        settings: super::watch::Settings,
        synced: tokio::sync::watch::Sender<bool>,
    ) -> (NadCache, impl Future<Output = ()> + Send + 'static) {
        let (store, mut writer) = reflector::store::<NetworkAttachmentDefinition>();
        let api: Api<NetworkAttachmentDefinition> = Api::all(client);
        let reader = store.clone();
        let task = super::watch::run(
            "NetworkAttachmentDefinitions",
            watcher::Config::default(),
            settings,
            move |config| watcher(api.clone(), config).modify(trim),
            move |event| {
                writer.apply_watcher_event(&event);
                let n = reader.len();
                metrics().set_cached("nads", n);
                n
            },
            synced,
        );
        (NadCache { store }, task)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<resolve::NetworkAttachmentDefinition> {
        self.store.get(&ObjectRef::new(name).within(namespace)).map(|n| n.to_spec())
    }

    /// Every cached NAD with its uid and generation, by namespace then name.
    pub fn list(&self) -> Vec<crate::catalog::NadSummary> {
        let mut all: Vec<crate::catalog::NadSummary> =
            self.store.state().iter().map(|n| n.summary()).collect();
        all.sort_by(|a, b| (&a.nad.namespace, &a.nad.name).cmp(&(&b.nad.namespace, &b.nad.name)));
        all
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::Resource;
    use serde_json::json;

    #[test]
    fn decodes_the_wire_object_and_trims_it() {
        let mut nad: NetworkAttachmentDefinition = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {
                "name": "net-a", "namespace": "ns1", "resourceVersion": "7", "uid": "u-1", "generation": 4,
                "annotations": {LAST_APPLIED: "{...}", "k8s.v1.cni.cncf.io/resourceName": "x"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
            },
            "spec": {"config": "{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}"}
        }))
        .unwrap();
        trim(&mut nad);
        assert!(nad.metadata.managed_fields.is_none());
        let summary = nad.summary();
        assert_eq!(
            (summary.uid.as_str(), summary.generation),
            ("u-1", 4),
            "trimming keeps uid and generation"
        );
        assert_eq!(nad.annotations().len(), 1);
        let s = nad.to_spec();
        assert_eq!((s.namespace.as_str(), s.name.as_str()), ("ns1", "net-a"));
        assert!(s.config.unwrap().contains("bridge"));
        assert_eq!(s.resource_name.as_deref(), Some("x"), "the resourceName annotation is kept");
        assert_eq!(
            NetworkAttachmentDefinition::url_path(&(), Some("ns1")),
            "/apis/k8s.cni.cncf.io/v1/namespaces/ns1/network-attachment-definitions"
        );
    }

    #[test]
    fn spec_config_other_than_a_string_is_passed_on_as_text() {
        let nad: NetworkAttachmentDefinition =
            serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": {"config": {"type": "x"}}}))
                .unwrap();
        assert_eq!(nad.to_spec().config.as_deref(), Some(r#"{"type":"x"}"#));
        let bare: NetworkAttachmentDefinition =
            serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(bare.to_spec().config, None);
        assert_eq!(bare.to_spec().namespace, "default");
    }
}
