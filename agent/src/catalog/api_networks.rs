//! The networks set through the CRI network API ([`crate::netapi`]) as a source of the
//! catalog: a NAD lookup asks the API's store first, so a pod selects an API network by
//! `namespace/name` exactly as a NAD, and an API network shadows a NAD of the same
//! namespace and name. Everything else is the inner catalog's.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Catalog, CatalogError, NadSummary, PodInfo, StatusReport};
use crate::netapi::config::to_conflist;
use crate::netapi::store::NetworkStore;
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use crate::spec::resolve::NetworkAttachmentDefinition;

pub struct ApiNetworks {
    store: Arc<NetworkStore>,
    inner: Arc<dyn Catalog>,
}

impl ApiNetworks {
    pub fn new(store: Arc<NetworkStore>, inner: Arc<dyn Catalog>) -> Self {
        ApiNetworks { store, inner }
    }

    /// The API network `namespace/name` as a NAD whose `spec.config` is its configlist.
    async fn api_network(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<NetworkAttachmentDefinition>, CatalogError> {
        let (store, ns, n) = (self.store.clone(), namespace.to_owned(), name.to_owned());
        let found = tokio::task::spawn_blocking(move || store.get(&ns, &n))
            .await
            .map_err(|e| CatalogError::unavailable("the network API's store", e))?
            .map_err(|e| {
                CatalogError::unavailable(format!("network {namespace}/{name} of the network API"), e)
            })?;
        Ok(found.map(|config| NetworkAttachmentDefinition {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            config: Some(to_conflist(&config).to_string()),
            resource_name: None,
        }))
    }
}

impl Catalog for ApiNetworks {
    fn nad<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<NetworkAttachmentDefinition>, CatalogError>> {
        async move {
            match self.api_network(namespace, name).await? {
                Some(network) => Ok(Some(network)),
                None => self.inner.nad(namespace, name).await,
            }
        }
        .boxed()
    }

    /// The inner catalog's NADs: the API's own networks are the store's to list.
    fn networks(&self) -> BoxFuture<'_, Result<Vec<NadSummary>, CatalogError>> {
        self.inner.networks()
    }

    fn pod<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodInfo>, CatalogError>> {
        self.inner.pod(namespace, name)
    }

    fn pod_network<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<PodNetwork>, CatalogError>> {
        self.inner.pod_network(name)
    }

    fn pod_network_attachment<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<PodNetworkAttachment>, CatalogError>> {
        self.inner.pod_network_attachment(namespace, name)
    }

    fn attachment_parameters<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<AttachmentParameters>, CatalogError>> {
        self.inner.attachment_parameters(namespace, name)
    }

    fn publish_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        report: StatusReport,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        self.inner.publish_status(pod, report)
    }

    fn publish_network_status<'a>(
        &'a self,
        pod: &'a PodInfo,
        annotation_value: &'a str,
    ) -> BoxFuture<'a, Result<(), CatalogError>> {
        self.inner.publish_network_status(pod, annotation_value)
    }

    fn record_event<'a>(&'a self, pod: &'a PodInfo, reason: &'a str, message: &'a str) -> BoxFuture<'a, ()> {
        self.inner.record_event(pod, reason, message)
    }

    fn collect_reports<'a>(&'a self, live: &'a [(String, String)]) -> BoxFuture<'a, ()> {
        self.inner.collect_reports(live)
    }

    fn pod_changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        self.inner.pod_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::files::FileCatalog;
    use crate::netapi::model::{NetworkConfig, PluginConfig};

    #[tokio::test]
    async fn api_networks_come_first_and_shadow_nads_of_the_same_name() {
        let d = tempfile::tempdir().unwrap();
        let nads = d.path().join("nads");
        std::fs::create_dir_all(&nads).unwrap();
        std::fs::write(
            nads.join("n.yaml"),
            "kind: NetworkAttachmentDefinition\nmetadata: {name: blue}\nspec: {config: '{\"cniVersion\":\"1.0.0\",\"type\":\"ipvlan\"}'}\n---\nkind: NetworkAttachmentDefinition\nmetadata: {name: red}\nspec: {config: '{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}'}\n",
        )
        .unwrap();
        let store = Arc::new(NetworkStore::new(&d.path().join("state")));
        let inner: Arc<dyn Catalog> =
            Arc::new(FileCatalog::new(vec![nads], Vec::new(), d.path().join("reports")));
        let catalog = ApiNetworks::new(store.clone(), inner);
        let red = catalog.nad("default", "red").await.unwrap().unwrap();
        assert!(red.config.unwrap().contains("bridge"), "a NAD without an API network of its name");

        let mut blue = NetworkConfig::default();
        blue.metadata.name = "blue".into();
        blue.cniv1_config.cni_version = "1.0.0".into();
        blue.cniv1_config.plugins =
            vec![PluginConfig { plugin_type: "macvlan".into(), ..Default::default() }];
        store.set(&blue).unwrap();
        let shadowing = catalog.nad("default", "blue").await.unwrap().unwrap();
        let config: serde_json::Value = serde_json::from_str(shadowing.config.as_deref().unwrap()).unwrap();
        assert_eq!(config["plugins"][0]["type"], "macvlan");
        assert_eq!(config["name"], "blue");
        assert!(catalog.nad("other", "blue").await.unwrap().is_none());
        assert_eq!(catalog.networks().await.unwrap().len(), 2, "the inner catalog's NADs");

        store.remove("default", "blue").unwrap();
        let back = catalog.nad("default", "blue").await.unwrap().unwrap();
        assert!(back.config.unwrap().contains("ipvlan"), "removed: the NAD again");
    }

    #[tokio::test]
    async fn an_unreadable_store_is_a_catalog_that_cannot_answer_now() {
        use crate::cni::CniCode;
        let d = tempfile::tempdir().unwrap();
        let store = Arc::new(NetworkStore::new(d.path()));
        std::fs::create_dir_all(d.path().join("networks/default")).unwrap();
        std::fs::write(d.path().join("networks/default/blue.json"), "{").unwrap();
        let inner: Arc<dyn Catalog> =
            Arc::new(FileCatalog::new(Vec::new(), Vec::new(), d.path().join("reports")));
        let e = ApiNetworks::new(store, inner).nad("default", "blue").await.unwrap_err();
        assert_eq!(e.cni_code(), crate::cni::ErrorCode::TryAgainLater);
        let text = e.to_string();
        assert!(
            text.contains("network default/blue of the network API") && text.contains("blue.json"),
            "{text}"
        );
    }
}
