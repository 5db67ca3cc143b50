//! The KEP-3698 objects the node reads (PodNetwork, PodNetworkAttachment,
//! AttachmentParameters; plexus's group `plexus.dev`), each cached by a kube reflector fed by
//! a watch of every namespace, as the NADs are ([`super::nad`]).
//!
//! Their CRDs are optional: on a cluster that uses only the NPWG annotations they are not
//! installed, the API server answers `404 Not Found`, and the caches are empty and current
//! (one INFO line says so, [`super::watch`]), so readiness does not wait for them.

use std::future::Future;

use ::kube::api::Api;
use ::kube::runtime::reflector::{self, ObjectRef, Store};
use ::kube::runtime::watcher::{self, watcher, Event};
use ::kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::watch::{Settings, Sink};
use crate::metrics::metrics;
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};

/// kubectl's copy of the whole applied object: as large as the object, and never read.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What an operator does to serve the kinds.
const INSTALL_HINT: &str = "install deploy/podnetwork-crds.yaml to use PodNetworks";

/// One kind's objects, as last seen by its watch.
#[derive(Clone)]
pub struct ObjectCache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
}

impl<K> ObjectCache<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
{
    /// The cache and the task that fills it (run it on the runtime; it never returns).
    /// `what` names the watch in logs and metrics, `cached` the objects in the cache-size
    /// metric.
    pub fn start(
        client: Client,
        what: &'static str,
        cached: &'static str,
        settings: Settings,
        synced: tokio::sync::watch::Sender<bool>,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store::<K>();
        let api: Api<K> = Api::all(client);
        let sink = OptionalStore { cached, writer, reader: store.clone() };
        let task = super::watch::run_into(
            what,
            watcher::Config::default(),
            settings,
            move |config| watcher(api.clone(), config),
            sink,
            synced,
        );
        (ObjectCache { store }, task)
    }

    /// The object `namespace/name` (`namespace` empty for a cluster-scoped kind).
    pub fn get(&self, namespace: &str, name: &str) -> Option<K> {
        let key =
            if namespace.is_empty() { ObjectRef::new(name) } else { ObjectRef::new(name).within(namespace) };
        self.store.get(&key).map(|o| o.as_ref().clone())
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }
}

/// A reflector store whose kind may not be served (its CRD not installed).
struct OptionalStore<K: Resource<DynamicType = ()> + Clone + 'static> {
    cached: &'static str,
    writer: reflector::store::Writer<K>,
    reader: Store<K>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Sink<K> for OptionalStore<K> {
    fn apply(&mut self, event: Event<K>) -> usize {
        let event = event.modify(trim);
        self.writer.apply_watcher_event(&event);
        let n = self.reader.len();
        metrics().set_cached(self.cached, n);
        n
    }

    fn if_not_served(&self) -> Option<&'static str> {
        Some(INSTALL_HINT)
    }
}

/// Drops what plexus never reads before the object is cached.
fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// A watch's task: run it on the runtime; it never returns.
pub type WatchTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// The three caches the node reads, and whether each is current.
pub struct PodNetworkCaches {
    pub pod_networks: ObjectCache<PodNetwork>,
    pub attachments: ObjectCache<PodNetworkAttachment>,
    pub parameters: ObjectCache<AttachmentParameters>,
    pub synced: Vec<tokio::sync::watch::Receiver<bool>>,
}

impl PodNetworkCaches {
    /// Starts the three watches; returns the caches and their tasks.
    pub fn start(client: Client, settings: Settings) -> (PodNetworkCaches, Vec<WatchTask>) {
        let (pn_tx, pn_rx) = tokio::sync::watch::channel(false);
        let (pna_tx, pna_rx) = tokio::sync::watch::channel(false);
        let (params_tx, params_rx) = tokio::sync::watch::channel(false);
        let (pod_networks, pn_task) =
            ObjectCache::start(client.clone(), "PodNetworks", "podnetworks", settings, pn_tx);
        let (attachments, pna_task) = ObjectCache::start(
            client.clone(),
            "PodNetworkAttachments",
            "podnetworkattachments",
            settings,
            pna_tx,
        );
        let (parameters, params_task) =
            ObjectCache::start(client, "AttachmentParameters", "attachmentparameters", settings, params_tx);
        let caches = PodNetworkCaches {
            pod_networks,
            attachments,
            parameters,
            synced: vec![pn_rx, pna_rx, params_rx],
        };
        (caches, vec![Box::pin(pn_task), Box::pin(pna_task), Box::pin(params_task)])
    }

    pub fn is_synced(&self) -> bool {
        self.synced.iter().all(|s| *s.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_urls_are_plexuss_group_and_the_pod_network_is_cluster_wide() {
        assert_eq!(PodNetwork::url_path(&(), None), "/apis/plexus.dev/v1alpha1/podnetworks");
        assert_eq!(
            PodNetworkAttachment::url_path(&(), Some("ns1")),
            "/apis/plexus.dev/v1alpha1/namespaces/ns1/podnetworkattachments"
        );
        assert_eq!(
            AttachmentParameters::url_path(&(), Some("ns1")),
            "/apis/plexus.dev/v1alpha1/namespaces/ns1/attachmentparameters"
        );
    }

    #[test]
    fn trimming_drops_what_is_never_read() {
        let mut pn: PodNetwork = serde_json::from_value(json!({
            "metadata": {"name": "blue", "annotations": {LAST_APPLIED: "{...}", "keep": "x"},
                         "managedFields": [{"manager": "kubectl"}]},
        }))
        .unwrap();
        trim(&mut pn);
        assert!(pn.metadata.managed_fields.is_none());
        assert_eq!(pn.metadata.annotations.unwrap().len(), 1);
    }
}
