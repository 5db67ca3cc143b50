//! This node's pods: a metadata-only watch with a `spec.nodeName` field selector, each pod
//! trimmed to what plexus reads before it is cached.
//!
//! Memory follows the node (kubelet's max-pods), never the cluster: the API server filters
//! by node, sends metadata only (no specs, no statuses), and of the metadata only the name,
//! namespace, uid and plexus's annotations are kept.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, RwLock};

use tokio::sync::Notify;

use ::kube::api::Api;
use ::kube::core::PartialObjectMeta;
use ::kube::runtime::watcher::{self, watcher, Event};
use ::kube::Client;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::catalog::PodInfo;
use crate::engine::live::REATTACH_ANNOTATION;
use crate::engine::pod_uid::MIRROR_POD_ANNOTATION;
use crate::metrics::metrics;
use crate::podnetwork::model::POD_NETWORKS_ANNOTATION;
use crate::spec::NETWORK_STATUS_ANNOTATION;

/// Annotations plexus reads start with one of these. The network-status plexus writes is
/// left out: it is the largest, and plexus never reads it back.
const KEPT_ANNOTATION_PREFIXES: &[&str] = &["k8s.v1.cni.cncf.io/", "v1.multus-cni.io/"];
/// Other annotations plexus reads: a static pod's mirror, exempt from the UID check, the
/// pod's PodNetwork list (KEP-3698; its status, which plexus writes, is left out), and whether
/// a changed network config re-attaches the pod (live attachments).
const KEPT_ANNOTATIONS: &[&str] = &[MIRROR_POD_ANNOTATION, POD_NETWORKS_ANNOTATION, REATTACH_ANNOTATION];

/// The pod as plexus caches it, or `None` for an object without a name.
pub fn pod_info(meta: &ObjectMeta) -> Option<PodInfo> {
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| {
            KEPT_ANNOTATIONS.contains(&k.as_str())
                || k.as_str() != NETWORK_STATUS_ANNOTATION
                    && KEPT_ANNOTATION_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some(PodInfo {
        namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        name,
        uid: meta.uid.clone(),
        annotations,
    })
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[derive(Default)]
struct Pods {
    live: HashMap<String, PodInfo>,
    /// A (re)list in progress: it replaces `live` whole when complete, so pods deleted while
    /// the watch was down disappear.
    relist: Option<HashMap<String, PodInfo>>,
}

/// The pods of this node, as last seen by the watch.
#[derive(Default)]
pub struct PodCache {
    pods: RwLock<Pods>,
    /// Notified when a pod's kept fields change (live attachments, `crate::live`).
    changes: Arc<Notify>,
}

impl PodCache {
    /// The field selector of the watch: this node's pods only.
    pub fn field_selector(node_name: &str) -> String {
        format!("spec.nodeName={node_name}")
    }

    /// The cache and the task that fills it (run it on the runtime; it never returns).
    pub fn start(
        client: Client,
        node_name: &str,
        settings: super::watch::Settings,
        synced: tokio::sync::watch::Sender<bool>,
    ) -> (Arc<PodCache>, impl Future<Output = ()> + Send + 'static) {
        let cache = Arc::new(PodCache::default());
        // `PartialObjectMeta` makes every request metadata-only (the Accept header asks the
        // server for PartialObjectMetadata).
        let api: Api<PartialObjectMeta<Pod>> = Api::all(client);
        let config = watcher::Config::default().fields(&Self::field_selector(node_name));
        let writer = cache.clone();
        let task = super::watch::run(
            "pods",
            config,
            settings,
            move |config| watcher(api.clone(), config),
            move |event| writer.apply(event),
            synced,
        );
        (cache, task)
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<PodInfo> {
        self.read().live.get(&key(namespace, name)).cloned()
    }

    /// Notified (one permit kept while nobody waits) whenever a pod appears or its kept
    /// fields change, and after every relist.
    pub fn changes(&self) -> Arc<Notify> {
        self.changes.clone()
    }

    pub fn len(&self) -> usize {
        self.read().live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one watch event; returns how many pods are cached.
    pub fn apply(&self, event: Event<PartialObjectMeta<Pod>>) -> usize {
        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Init => pods.relist = Some(HashMap::new()),
            Event::InitApply(p) => {
                if let (Some(relist), Some(info)) = (pods.relist.as_mut(), pod_info(&p.metadata)) {
                    relist.insert(key(&info.namespace, &info.name), info);
                }
            }
            Event::InitDone => {
                if let Some(relist) = pods.relist.take() {
                    pods.live = relist;
                    self.changes.notify_one();
                }
            }
            Event::Apply(p) => {
                if let Some(info) = pod_info(&p.metadata) {
                    if pods.live.insert(key(&info.namespace, &info.name), info.clone()).as_ref()
                        != Some(&info)
                    {
                        self.changes.notify_one();
                    }
                }
            }
            Event::Delete(p) => {
                if let Some(info) = pod_info(&p.metadata) {
                    pods.live.remove(&key(&info.namespace, &info.name));
                }
            }
        }
        metrics().set_cached("pods", pods.live.len());
        pods.live.len()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Pods> {
        self.pods.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use serde_json::json;

    fn pod(name: &str, annotations: serde_json::Value) -> PartialObjectMeta<Pod> {
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "annotations": annotations,
                         "managedFields": [{"manager": "kubelet"}], "labels": {"app": "x"}}
        }))
        .unwrap()
    }

    #[test]
    fn keeps_only_plexus_annotations() {
        let p = pod(
            "a",
            json!({
                "k8s.v1.cni.cncf.io/networks": "net-a",
                "k8s.v1.cni.cncf.io/network-status": "[...]",
                "v1.multus-cni.io/default-network": "x",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                "kubernetes.io/config.mirror": "5e1f",
                "kubernetes.io/config.source": "file",
                "plexus.dev/pod-networks": "[{\"name\":\"blue\"}]",
                "plexus.dev/pod-networks-status": "[...]"
            }),
        );
        let info = pod_info(&p.metadata).unwrap();
        assert_eq!(info.uid.as_deref(), Some("uid-a"));
        assert_eq!(
            info.annotations.keys().collect::<Vec<_>>(),
            [
                "k8s.v1.cni.cncf.io/networks",
                "kubernetes.io/config.mirror",
                "plexus.dev/pod-networks",
                "v1.multus-cni.io/default-network"
            ]
        );
    }

    #[test]
    fn a_changed_pod_notifies_and_an_unchanged_one_does_not() {
        let cache = PodCache::default();
        let changes = cache.changes();
        let notified = || changes.notified().now_or_never().is_some();
        cache.apply(Event::Apply(pod("a", json!({"k8s.v1.cni.cncf.io/networks": "blue"}))));
        assert!(notified(), "a new pod");
        cache.apply(Event::Apply(pod("a", json!({"k8s.v1.cni.cncf.io/networks": "blue", "other": "x"}))));
        assert!(!notified(), "only annotations plexus does not keep changed");
        cache.apply(Event::Apply(pod("a", json!({"k8s.v1.cni.cncf.io/networks": "blue,red"}))));
        assert!(notified(), "the selection changed");
        cache.apply(Event::Apply(pod(
            "a",
            json!({"k8s.v1.cni.cncf.io/networks": "blue,red",
            "plexus.dev/reattach-on-config-change": "true"}),
        )));
        assert!(notified(), "the re-attach annotation is kept");
    }

    #[test]
    fn a_relist_replaces_the_cache_whole() {
        let cache = PodCache::default();
        cache.apply(Event::Apply(pod("old", json!({}))));
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(pod("new", json!({}))));
        // Until the relist completes, lookups see the previous state.
        assert!(cache.get("ns", "old").is_some());
        cache.apply(Event::InitDone);
        assert!(cache.get("ns", "old").is_none());
        assert!(cache.get("ns", "new").is_some());
        cache.apply(Event::Delete(pod("new", json!({}))));
        assert!(cache.is_empty());
    }
}
