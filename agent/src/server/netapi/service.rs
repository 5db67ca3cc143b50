//! The `RuntimeService` RPCs: set, remove and list networks, and a sandbox's IPs per
//! network. Each failure is an [`ApiError`], which knows its gRPC status code.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tonic::{Code, Request, Response, Status};

use super::status::Prober;
use crate::catalog::{confdir, Catalog, CatalogError, NadSummary};
use crate::engine::network_statuses;
use crate::netapi::config::{
    from_conflist, name_problem, namespace_problem, to_conflist, validate, InvalidField,
};
use crate::netapi::generation::SetDecision;
use crate::netapi::model::{effective_namespace, Cniv1Config, NetworkConfig};
use crate::netapi::proto::runtime_service_server::RuntimeService;
use crate::netapi::proto::{self};
use crate::netapi::store::{NetworkStore, StoreError};
use crate::netapi::FALLBACK_NETWORK;
use crate::spec::resolve::resolve_network_config;
use crate::state::{StateError, StateStore};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("listing the catalog's NetworkAttachmentDefinitions: {0}")]
    Catalog(#[source] CatalogError),
    #[error("reading the attachment records: {0}")]
    State(#[source] StateError),
    #[error("no sandbox {0} has networks plexus attached (no attachment record has this container ID)")]
    NoSandbox(String),
    #[error("a network API task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            ApiError::Invalid(_) => Code::InvalidArgument,
            ApiError::Store(StoreError::Generation(_)) => Code::FailedPrecondition,
            ApiError::Store(StoreError::NotFound { .. }) | ApiError::NoSandbox(_) => Code::NotFound,
            ApiError::Store(StoreError::Corrupt { .. }) => Code::DataLoss,
            ApiError::Store(StoreError::Io { .. } | StoreError::Encode { .. })
            | ApiError::State(_)
            | ApiError::Join(_) => Code::Internal,
            ApiError::Catalog(_) => Code::Unavailable,
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        Status::new(e.code(), e.to_string())
    }
}

/// What the service reads and measures.
pub struct NetworkApi {
    pub store: Arc<NetworkStore>,
    /// The NADs to list (Kubernetes or files).
    pub catalog: Arc<dyn Catalog>,
    /// Where the on-disk default network (`_fallback`) is.
    pub default_network_dir: PathBuf,
    /// The on-disk configs a NAD without `spec.config` names (spec 3.4.1).
    pub network_conf_dirs: Vec<PathBuf>,
    pub prober: Prober,
    pub state: StateStore,
}

/// A network of the list with the configlist its status is measured on (`None`: none
/// can be made of its config).
struct Listed {
    config: proto::NetworkConfig,
    conflist: Option<Value>,
}

impl NetworkApi {
    pub async fn set(&self, config: Option<proto::NetworkConfig>) -> Result<SetDecision, ApiError> {
        let config = config.ok_or_else(|| InvalidField::new("config", "it is missing"))?;
        let mut config = NetworkConfig::try_from(config)?;
        validate(&config)?;
        config.metadata.namespace = config.namespace().to_owned();
        let store = self.store.clone();
        let stored = config.clone();
        let decision = tokio::task::spawn_blocking(move || store.set(&stored)).await??;
        let (namespace, name, generation) =
            (config.namespace(), &config.metadata.name, config.metadata.generation);
        match decision {
            SetDecision::Write => {
                tracing::info!(network = %format!("{namespace}/{name}"), generation, "network set")
            }
            SetDecision::Unchanged => {
                tracing::debug!(network = %format!("{namespace}/{name}"), generation, "network set again, unchanged")
            }
        }
        Ok(decision)
    }

    pub async fn remove(&self, namespace: &str, name: &str) -> Result<(), ApiError> {
        if let Some(problem) = name_problem(name) {
            return Err(InvalidField::new("name", problem).into());
        }
        if let Some(problem) = namespace_problem(namespace) {
            return Err(InvalidField::new("namespace", problem).into());
        }
        let (store, ns, n) = (self.store.clone(), namespace.to_owned(), name.to_owned());
        tokio::task::spawn_blocking(move || store.remove(&ns, &n)).await??;
        tracing::info!(network = %format!("{}/{name}", effective_namespace(namespace)), "network removed");
        Ok(())
    }

    /// Every API network, every NAD they do not shadow, then `_fallback`, each with its
    /// status, measured concurrently.
    pub async fn list(&self) -> Result<Vec<proto::PodNetworkResponse>, ApiError> {
        let store = self.store.clone();
        let api = tokio::task::spawn_blocking(move || store.list()).await??;
        let nads = self.catalog.networks().await.map_err(ApiError::Catalog)?;
        let (default_dir, conf_dirs) = (self.default_network_dir.clone(), self.network_conf_dirs.clone());
        let (on_disk, fallback) = tokio::task::spawn_blocking(move || {
            (confdir::on_disk_configs(&conf_dirs), confdir::default_network(&default_dir).ok())
        })
        .await?;

        let api_names: BTreeSet<(String, String)> =
            api.iter().map(|c| (c.namespace().to_owned(), c.metadata.name.clone())).collect();
        let mut listed: Vec<Listed> =
            api.into_iter().map(|c| Listed { conflist: Some(to_conflist(&c)), config: c.into() }).collect();
        for summary in nads {
            if !api_names.contains(&(summary.nad.namespace.clone(), summary.nad.name.clone())) {
                listed.push(nad_listed(summary, &on_disk));
            }
        }
        if let Some((_, list)) = fallback {
            let config = NetworkConfig { cniv1_config: from_conflist(&list), ..NetworkConfig::default() };
            let mut config: proto::NetworkConfig = config.into();
            if let Some(m) = config.metadata.as_mut() {
                m.name = FALLBACK_NETWORK.into();
            }
            listed.push(Listed { config, conflist: Some(list.to_value()) });
        }

        let statuses =
            futures::future::join_all(listed.iter().map(|l| self.prober.probe(l.conflist.as_ref()))).await;
        Ok(listed
            .into_iter()
            .zip(statuses)
            .map(|(l, status)| proto::PodNetworkResponse { config: Some(l.config), status: Some(status) })
            .collect())
    }

    /// Every IP of the sandbox's attachments with the network it is on, in attachment order.
    pub async fn sandbox_ips(&self, sandbox_id: &str) -> Result<Vec<proto::PodIp>, ApiError> {
        if sandbox_id.is_empty() {
            return Err(InvalidField::new("pod_sandbox_id", "it is empty; give the sandbox's ID").into());
        }
        let records = self.state.list().await.map_err(ApiError::State)?;
        let records: Vec<_> = records.into_iter().filter(|r| r.container_id == sandbox_id).collect();
        if records.is_empty() {
            return Err(ApiError::NoSandbox(sandbox_id.to_owned()));
        }
        Ok(records
            .iter()
            .flat_map(network_statuses)
            .flat_map(|status| {
                let network = status.name;
                status.ips.into_iter().map(move |ip| proto::PodIp { ip, network_name: network.clone() })
            })
            .collect())
    }
}

/// A NAD of the catalog as a listed network: its metadata, and its CNI config (`spec.config`
/// or the on-disk config it names) turned back into a `CNIv1Config`; a config that cannot
/// be resolved lists no plugins and is never ready.
fn nad_listed(summary: NadSummary, on_disk: &[crate::spec::resolve::OnDiskConfig]) -> Listed {
    let NadSummary { nad, uid, generation } = summary;
    let (cniv1_config, conflist) = match resolve_network_config(&nad, on_disk) {
        Ok((list, _)) => (from_conflist(&list), Some(list.to_value())),
        Err(e) => {
            tracing::debug!(nad = %nad.reference(), "listing a NAD whose config cannot be used: {e}");
            (Cniv1Config { network_name: nad.name.clone(), ..Cniv1Config::default() }, None)
        }
    };
    let mut config = NetworkConfig { cniv1_config, ..NetworkConfig::default() };
    config.metadata.name = nad.name;
    config.metadata.namespace = nad.namespace;
    config.metadata.uid = uid;
    config.metadata.generation = u32::try_from(generation.max(0)).unwrap_or(u32::MAX);
    Listed { config: config.into(), conflist }
}

#[tonic::async_trait]
impl RuntimeService for NetworkApi {
    async fn set_pod_network(
        &self,
        request: Request<proto::SetPodNetworkRequest>,
    ) -> Result<Response<proto::CreatePodNetworkResponse>, Status> {
        self.set(request.into_inner().config).await?;
        Ok(Response::new(proto::CreatePodNetworkResponse {}))
    }

    async fn remove_pod_network(
        &self,
        request: Request<proto::RemovePodNetworkRequest>,
    ) -> Result<Response<proto::RemovePodNetworkResponse>, Status> {
        let r = request.into_inner();
        self.remove(&r.namespace, &r.name).await?;
        Ok(Response::new(proto::RemovePodNetworkResponse {}))
    }

    async fn list_pod_network(
        &self,
        _request: Request<proto::ListPodNetworkRequest>,
    ) -> Result<Response<proto::ListPodNetworkResponse>, Status> {
        Ok(Response::new(proto::ListPodNetworkResponse { networks: self.list().await? }))
    }

    async fn pod_sandbox_networks(
        &self,
        request: Request<proto::PodSandboxNetworksRequest>,
    ) -> Result<Response<proto::PodSandboxNetworksResponse>, Status> {
        let ips = self.sandbox_ips(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(proto::PodSandboxNetworksResponse { ips }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::catalog::files::FileCatalog;
    use crate::delegate::{Delegator, NativePlugins};
    use crate::state::ContainerRecord;

    fn api(dir: &std::path::Path) -> NetworkApi {
        NetworkApi {
            store: Arc::new(NetworkStore::new(dir)),
            catalog: Arc::new(FileCatalog::new(Vec::new(), Vec::new(), dir.join("reports"))),
            default_network_dir: dir.join("net.d"),
            network_conf_dirs: Vec::new(),
            prober: Prober {
                delegator: Delegator {
                    bin_dirs: Vec::new(),
                    timeout: Duration::from_secs(1),
                    natives: NativePlugins::default(),
                },
            },
            state: StateStore::new(dir),
        }
    }

    fn attachment(network: &str, ifname: &str, is_default: bool, ips: &[&str]) -> Value {
        let ips: Vec<Value> = ips.iter().map(|a| json!({"address": a, "interface": 0})).collect();
        json!({
            "network": network,
            "is_default": is_default,
            "ifname": ifname,
            "delegate": {"list": {"cniVersion": "1.0.0", "name": network, "plugins": [{"type": "bridge"}]}},
            "result": {"cniVersion": "1.0.0", "interfaces": [{"name": ifname, "sandbox": "/run/netns/x"}], "ips": ips}
        })
    }

    #[tokio::test]
    async fn a_sandboxs_ips_are_paired_with_their_networks_in_attachment_order() {
        let d = tempfile::tempdir().unwrap();
        let api = api(d.path());
        let record = |id: &str, attachments: Vec<Value>| -> ContainerRecord {
            serde_json::from_value(json!({
                "container_id": id, "ifname": "eth0", "netns": "/run/netns/x",
                "attachments": attachments, "complete": true
            }))
            .unwrap()
        };
        let sandbox = record(
            "sandbox-1",
            vec![
                attachment("cluster", "eth0", true, &["10.0.0.5/24", "fd00::5/64"]),
                attachment("team/blue", "net1", false, &["10.1.0.7/24"]),
                attachment("team/empty", "net2", false, &[]),
            ],
        );
        api.state.save(&sandbox, crate::state::Sync::Durable).await.unwrap();
        api.state
            .save(
                &record("sandbox-2", vec![attachment("cluster", "eth0", true, &["10.0.0.6/24"])]),
                crate::state::Sync::Durable,
            )
            .await
            .unwrap();
        let ips: Vec<(String, String)> =
            api.sandbox_ips("sandbox-1").await.unwrap().into_iter().map(|p| (p.ip, p.network_name)).collect();
        let expected = [("10.0.0.5", "cluster"), ("fd00::5", "cluster"), ("10.1.0.7", "team/blue")];
        assert_eq!(ips, expected.map(|(ip, n)| (ip.to_owned(), n.to_owned())));
        let missing = api.sandbox_ips("sandbox-3").await.unwrap_err();
        assert_eq!(missing.code(), Code::NotFound);
        assert_eq!(api.sandbox_ips("").await.unwrap_err().code(), Code::InvalidArgument);
    }

    #[tokio::test]
    async fn each_failure_has_its_grpc_code() {
        let d = tempfile::tempdir().unwrap();
        let api = api(d.path());
        let wire = |name: &str, generation: u32| -> proto::NetworkConfig {
            let mut c = NetworkConfig::default();
            c.metadata.name = name.into();
            c.metadata.generation = generation;
            c.cniv1_config.cni_version = "1.0.0".into();
            c.cniv1_config.plugins = vec![crate::netapi::model::PluginConfig {
                plugin_type: "bridge".into(),
                ..Default::default()
            }];
            c.into()
        };
        assert_eq!(api.set(Some(wire("blue", 2))).await.unwrap(), SetDecision::Write);
        assert_eq!(api.set(Some(wire("blue", 2))).await.unwrap(), SetDecision::Unchanged);
        let stored = api.store.get("default", "blue").unwrap().unwrap();
        assert_eq!(stored.metadata.namespace, "default", "stored with its namespace filled in");
        assert_eq!(api.set(Some(wire("blue", 1))).await.unwrap_err().code(), Code::FailedPrecondition);
        assert_eq!(api.set(Some(wire("Blue", 1))).await.unwrap_err().code(), Code::InvalidArgument);
        let mut no_metadata = wire("blue", 3);
        no_metadata.metadata = None;
        let e = api.set(Some(no_metadata)).await.unwrap_err();
        assert_eq!((e.code(), e.to_string().starts_with("config.metadata:")), (Code::InvalidArgument, true));
        let mut unknown_type = wire("blue", 3);
        unknown_type.network_type = 7;
        let e = api.set(Some(unknown_type)).await.unwrap_err();
        assert_eq!(
            (e.code(), e.to_string().starts_with("config.network_type:")),
            (Code::InvalidArgument, true)
        );
        let mut no_cni = wire("blue", 3);
        no_cni.cniv1_config = None;
        let e = api.set(Some(no_cni)).await.unwrap_err();
        assert_eq!(
            (e.code(), e.to_string().starts_with("config.cniv1_config:")),
            (Code::InvalidArgument, true)
        );
        assert_eq!(api.remove("", "green").await.unwrap_err().code(), Code::NotFound);
        assert_eq!(api.remove("", "_fallback").await.unwrap_err().code(), Code::InvalidArgument);
        std::fs::write(d.path().join("networks/default/red.json"), "{").unwrap();
        assert_eq!(api.list().await.unwrap_err().code(), Code::DataLoss);
        let status: Status = api.list().await.unwrap_err().into();
        assert!(status.message().contains("red.json"), "{}", status.message());
    }
}
