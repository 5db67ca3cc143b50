//! What the controller knows of the cluster: the KEP objects, the NADs and AttachmentParameters
//! they reference, and of each pod not Succeeded or Failed only the PodNetworks and
//! PodNetworkAttachments its `plexus.dev/pod-networks` annotation names.
//!
//! Each collection is filled by one watch; a (re)list replaces it whole when complete, so
//! objects deleted while a watch was down disappear. Memory: the KEP objects are few; a pod
//! costs nothing unless it names networks, then its key and the names (see
//! docs/podnetwork-controller.md for the measured figure).

use std::collections::BTreeMap;

use ::kube::runtime::watcher::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::podnetwork::model::{
    AttachmentParameters, PodNetwork, PodNetworkAttachment, POD_NETWORKS_ANNOTATION,
};
use crate::podnetwork::request::parse_pod_networks;
use crate::spec::resolve;

/// (namespace, name); the namespace is empty for a cluster-scoped object.
pub type Key = (String, String);

/// The interface name the pod's list is checked against for `default` (the runtime's, which
/// the controller does not know; Kubernetes runtimes use `eth0`). A list naming another
/// interface for `default` is refused by the node, so it references nothing here either.
pub const ASSUMED_DEFAULT_IFNAME: &str = "eth0";

/// One watch's objects.
#[derive(Debug)]
pub struct Collection<V> {
    live: BTreeMap<Key, V>,
    /// A (re)list in progress: replaces `live` when complete.
    relist: Option<BTreeMap<Key, V>>,
}

impl<V> Default for Collection<V> {
    fn default() -> Self {
        Collection { live: BTreeMap::new(), relist: None }
    }
}

impl<V> Collection<V> {
    /// Applies one watch event. `keep` turns an object into its key and what is kept of it
    /// (`None`: nothing worth keeping, the object is forgotten). Answers how many are kept.
    pub fn apply<T>(&mut self, event: Event<T>, keep: impl Fn(T) -> Option<(Key, Option<V>)>) -> usize {
        match event {
            Event::Init => self.relist = Some(BTreeMap::new()),
            Event::InitApply(o) => {
                if let (Some(relist), Some((key, Some(v)))) = (self.relist.as_mut(), keep(o)) {
                    relist.insert(key, v);
                }
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    self.live = relist;
                }
            }
            Event::Apply(o) => match keep(o) {
                Some((key, Some(v))) => {
                    self.live.insert(key, v);
                }
                Some((key, None)) => {
                    self.live.remove(&key);
                }
                None => {}
            },
            Event::Delete(o) => {
                if let Some((key, _)) = keep(o) {
                    self.live.remove(&key);
                }
            }
        }
        self.live.len()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&V> {
        self.live.get(&(namespace.to_owned(), name.to_owned()))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.live.iter()
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.live.values()
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Sets an object directly (tests, and the pure planner's inputs).
    pub fn insert(&mut self, namespace: &str, name: &str, v: V) {
        self.live.insert((namespace.to_owned(), name.to_owned()), v);
    }
}

/// What a pod references (names as written; attachments are in the pod's namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRefs {
    pub networks: Box<[Box<str>]>,
    pub attachments: Box<[Box<str>]>,
}

impl PodRefs {
    /// The references of a pod's annotation; `None` when it references nothing (no
    /// annotation, or a list the node refuses: such a pod is never attached).
    pub fn of(meta: &ObjectMeta) -> Option<PodRefs> {
        let text = meta.annotations.as_ref()?.get(POD_NETWORKS_ANNOTATION)?;
        let requests = parse_pod_networks(text, ASSUMED_DEFAULT_IFNAME).ok()?;
        let networks: Box<[Box<str>]> =
            requests.iter().filter_map(|r| r.name.as_deref().map(Box::from)).collect();
        let attachments: Box<[Box<str>]> =
            requests.iter().filter_map(|r| r.attachment_name.as_deref().map(Box::from)).collect();
        (!networks.is_empty() || !attachments.is_empty()).then_some(PodRefs { networks, attachments })
    }
}

fn key_of(meta: &ObjectMeta) -> Option<Key> {
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    Some((meta.namespace.clone().unwrap_or_default(), name))
}

/// Drops what the controller never reads before an object is kept.
fn trim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Everything the controller decides from.
#[derive(Debug, Default)]
pub struct View {
    pub pod_networks: Collection<PodNetwork>,
    pub attachments: Collection<PodNetworkAttachment>,
    pub nads: Collection<resolve::NetworkAttachmentDefinition>,
    pub parameters: Collection<AttachmentParameters>,
    pub pods: Collection<PodRefs>,
}

impl View {
    pub fn apply_pod_network(&mut self, event: Event<PodNetwork>) -> usize {
        self.pod_networks.apply(event, |mut o| {
            trim(&mut o.metadata);
            Some((key_of(&o.metadata)?, Some(o)))
        })
    }

    pub fn apply_attachment(&mut self, event: Event<PodNetworkAttachment>) -> usize {
        self.attachments.apply(event, |mut o| {
            trim(&mut o.metadata);
            Some((key_of(&o.metadata)?, Some(o)))
        })
    }

    pub fn apply_nad(&mut self, event: Event<crate::kube::nad::NetworkAttachmentDefinition>) -> usize {
        self.nads.apply(event, |o| Some((key_of(&o.metadata)?, Some(o.to_spec()))))
    }

    pub fn apply_parameters(&mut self, event: Event<AttachmentParameters>) -> usize {
        self.parameters.apply(event, |mut o| {
            trim(&mut o.metadata);
            Some((key_of(&o.metadata)?, Some(o)))
        })
    }

    pub fn apply_pod(
        &mut self,
        event: Event<::kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod>>,
    ) -> usize {
        self.pods.apply(event, |p| Some((key_of(&p.metadata)?, PodRefs::of(&p.metadata))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(
        name: &str,
        networks: Option<&str>,
    ) -> ::kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Pod> {
        let annotations = match networks {
            Some(n) => json!({POD_NETWORKS_ANNOTATION: n, "other": "x"}),
            None => json!({"other": "x"}),
        };
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": name, "namespace": "ns", "annotations": annotations}
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_kept_only_with_the_networks_it_names() {
        let mut view = View::default();
        view.apply_pod(Event::Apply(pod("a", Some(r#"[{"name":"blue"},{"attachmentName":"red-1"}]"#))));
        view.apply_pod(Event::Apply(pod("plain", None)));
        view.apply_pod(Event::Apply(pod("broken", Some("not json"))));
        assert_eq!(view.pods.len(), 1);
        let refs = view.pods.get("ns", "a").unwrap();
        assert_eq!(&*refs.networks, [Box::from("blue")]);
        assert_eq!(&*refs.attachments, [Box::from("red-1")]);
        // The annotation removed: the pod references nothing any more.
        view.apply_pod(Event::Apply(pod("a", None)));
        assert!(view.pods.is_empty());
        view.apply_pod(Event::Apply(pod("a", Some(r#"[{"name":"blue"}]"#))));
        view.apply_pod(Event::Delete(pod("a", Some(r#"[{"name":"blue"}]"#))));
        assert!(view.pods.is_empty());
    }

    #[test]
    fn a_relist_replaces_a_collection_whole() {
        let mut view = View::default();
        view.apply_pod(Event::Apply(pod("old", Some(r#"[{"name":"blue"}]"#))));
        view.apply_pod(Event::Init);
        view.apply_pod(Event::InitApply(pod("new", Some(r#"[{"name":"blue"}]"#))));
        assert!(view.pods.get("ns", "old").is_some(), "the previous state until the relist completes");
        view.apply_pod(Event::InitDone);
        assert!(view.pods.get("ns", "old").is_none());
        assert!(view.pods.get("ns", "new").is_some());
    }
}
