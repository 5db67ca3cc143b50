//! The CRI network API on the wire (`proto/network.proto`, docs/network-api.md): the runtime, an
//! operator or a NAD-watching daemon sets, removes and lists networks through gRPC on a Unix
//! socket of the agent's own, and asks which IP of a sandbox is on which network.
//!
//! The path of a request: this module's socket (bound as the CNI socket is: a stale socket
//! replaced, mode 0600, root only, in a directory created 0700 when missing; served with tonic)
//! → [`service`] (RPCs, errors as gRPC codes) → [`crate::netapi`] (the model, its validation
//! and conversion, the generation rule and the durable store, which the catalog reads too).
//! [`status`] measures each listed network's `NetworkStatus`; [`client`] is `plexus-agent
//! network`, the operator's end of the same wire.

pub mod client;
pub mod service;
pub mod status;

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use anyhow::Context;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use self::service::NetworkApi;
use crate::netapi::proto::runtime_service_server::RuntimeServiceServer;

/// Binds the API's socket at `path`.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    super::bind_for(path, None)
}

/// Serves the RPCs on `listener` until it fails.
pub async fn serve(listener: UnixListener, api: NetworkApi) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(RuntimeServiceServer::new(api))
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    use tonic::transport::Channel;
    use tonic::Code;

    use super::status::Prober;
    use super::*;
    use crate::catalog::files::FileCatalog;
    use crate::delegate::{Delegator, NativePlugins};
    use crate::netapi::proto::runtime_service_client::RuntimeServiceClient;
    use crate::netapi::proto::*;
    use crate::netapi::store::NetworkStore;
    use crate::state::StateStore;

    async fn connect(path: PathBuf) -> RuntimeServiceClient<Channel> {
        super::client::connect(&path).await.unwrap()
    }

    fn executable(path: &Path) {
        std::fs::write(path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn network(name: &str, uid: &str, generation: u32, plugin: &str) -> NetworkConfig {
        NetworkConfig {
            metadata: Some(NetworkMetadata {
                name: name.into(),
                namespace: String::new(),
                uid: uid.into(),
                generation,
            }),
            ip_ranges: vec![IpRange { cidr: "10.5.0.0/24".into() }],
            network_type: NetworkType::CnIv1 as i32,
            cniv1_config: Some(CnIv1Config {
                cni_version: "1.1.0".into(),
                network_name: String::new(),
                disable_check: false,
                plugins: vec![CnIv1PluginConfig {
                    r#type: plugin.into(),
                    capabilities: vec!["ips".into()],
                    parameters: [("bridge".to_owned(), "br-test".to_owned())].into_iter().collect(),
                }],
            }),
        }
    }

    fn set(config: NetworkConfig) -> SetPodNetworkRequest {
        SetPodNetworkRequest { config: Some(config) }
    }

    /// (namespace/name, generation, plugin types, sandbox_management, connectivity)
    fn summary(list: &ListPodNetworkResponse) -> Vec<(String, u32, Vec<String>, bool, bool)> {
        list.networks
            .iter()
            .map(|n| {
                let config = n.config.clone().unwrap();
                let meta = config.metadata.unwrap();
                let types = config.cniv1_config.unwrap().plugins.into_iter().map(|p| p.r#type).collect();
                let status = n.status.unwrap();
                (
                    format!("{}/{}", meta.namespace, meta.name),
                    meta.generation,
                    types,
                    status.sandbox_management,
                    status.connectivity,
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_client_sets_lists_and_removes_networks_over_the_socket() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        let default_dir = d.path().join("net.d");
        let nads = d.path().join("nads");
        for dir in [&bin, &default_dir, &nads] {
            std::fs::create_dir_all(dir).unwrap();
        }
        executable(&bin.join("bridge"));
        std::fs::write(
            default_dir.join("10-cluster.conflist"),
            r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge","bridge":"cni0"}]}"#,
        )
        .unwrap();
        std::fs::write(
            nads.join("nads.yaml"),
            "kind: NetworkAttachmentDefinition\nmetadata: {name: red, namespace: team}\nspec: {config: '{\"cniVersion\":\"1.0.0\",\"type\":\"ipvlan\"}'}\n---\nkind: NetworkAttachmentDefinition\nmetadata: {name: blue}\nspec: {config: '{\"cniVersion\":\"1.0.0\",\"type\":\"ipvlan\"}'}\n",
        )
        .unwrap();
        let state_dir = d.path().join("state");
        let api = NetworkApi {
            store: Arc::new(NetworkStore::new(&state_dir)),
            catalog: Arc::new(FileCatalog::new(vec![nads], Vec::new(), d.path().join("reports"))),
            default_network_dir: default_dir,
            network_conf_dirs: Vec::new(),
            prober: Prober {
                delegator: Delegator {
                    bin_dirs: vec![bin],
                    timeout: Duration::from_secs(5),
                    natives: NativePlugins::default(),
                },
            },
            state: StateStore::new(&state_dir),
        };
        let socket = d.path().join("run/plexus/network.sock");
        let listener = bind(&socket).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&socket), 0o600);
        assert_eq!(mode(socket.parent().unwrap()), 0o700);
        let server = tokio::spawn(serve(listener, api));
        let mut client = connect(socket.clone()).await;

        let listed = client.list_pod_network(ListPodNetworkRequest {}).await.unwrap().into_inner();
        assert_eq!(
            summary(&listed),
            [
                ("default/blue".to_owned(), 0, vec!["ipvlan".to_owned()], false, false),
                ("team/red".to_owned(), 0, vec!["ipvlan".to_owned()], false, false),
                ("/_fallback".to_owned(), 0, vec!["bridge".to_owned()], true, true),
            ]
        );

        client.set_pod_network(set(network("blue", "u1", 1, "bridge"))).await.unwrap();
        client.set_pod_network(set(network("blue", "u1", 1, "bridge"))).await.unwrap();
        let stale = client.set_pod_network(set(network("blue", "u1", 0, "bridge"))).await.unwrap_err();
        assert_eq!(stale.code(), Code::FailedPrecondition);
        assert!(stale.message().contains("stale generation 0, the stored one is 1"), "{}", stale.message());
        let same = client.set_pod_network(set(network("blue", "u1", 1, "macvlan"))).await.unwrap_err();
        assert_eq!(same.code(), Code::FailedPrecondition);
        let bad = client.set_pod_network(set(network("blue", "u1", 2, "../bridge"))).await.unwrap_err();
        assert_eq!(bad.code(), Code::InvalidArgument);
        assert!(
            bad.message().starts_with("config.cniv1_config.plugins[0].type: \"../bridge\""),
            "{}",
            bad.message()
        );
        let missing = client.set_pod_network(SetPodNetworkRequest { config: None }).await.unwrap_err();
        assert_eq!((missing.code(), missing.message().starts_with("config:")), (Code::InvalidArgument, true));
        let fallback = client.set_pod_network(set(network("_fallback", "", 1, "bridge"))).await.unwrap_err();
        assert_eq!(fallback.code(), Code::InvalidArgument);
        client.set_pod_network(set(network("green", "", 3, "missing-plugin"))).await.unwrap();

        let listed = client.list_pod_network(ListPodNetworkRequest {}).await.unwrap().into_inner();
        assert_eq!(
            summary(&listed),
            [
                ("default/blue".to_owned(), 1, vec!["bridge".to_owned()], true, true),
                ("default/green".to_owned(), 3, vec!["missing-plugin".to_owned()], false, false),
                ("team/red".to_owned(), 0, vec!["ipvlan".to_owned()], false, false),
                ("/_fallback".to_owned(), 0, vec!["bridge".to_owned()], true, true),
            ],
            "the API network shadows the NAD default/blue"
        );
        let blue = listed.networks[0].config.clone().unwrap();
        assert_eq!(blue.metadata.unwrap().uid, "u1");
        assert_eq!(blue.ip_ranges, [IpRange { cidr: "10.5.0.0/24".into() }]);
        assert_eq!(blue.cniv1_config.unwrap().plugins[0].parameters["bridge"], "br-test");

        let remove = |namespace: &str, name: &str| RemovePodNetworkRequest {
            name: name.into(),
            namespace: namespace.into(),
        };
        client.remove_pod_network(remove("default", "blue")).await.unwrap();
        let gone = client.remove_pod_network(remove("", "blue")).await.unwrap_err();
        assert_eq!(gone.code(), Code::NotFound);
        let reserved = client.remove_pod_network(remove("", "_fallback")).await.unwrap_err();
        assert_eq!(reserved.code(), Code::InvalidArgument);
        assert!(reserved.message().contains("on-disk default network"), "{}", reserved.message());
        let bad_namespace = client.remove_pod_network(remove("Team", "red")).await.unwrap_err();
        assert_eq!(
            (bad_namespace.code(), bad_namespace.message().starts_with("namespace:")),
            (Code::InvalidArgument, true)
        );

        let no_sandbox = client
            .pod_sandbox_networks(PodSandboxNetworksRequest { pod_sandbox_id: "abc".into() })
            .await
            .unwrap_err();
        assert_eq!(no_sandbox.code(), Code::NotFound);

        let listed = client.list_pod_network(ListPodNetworkRequest {}).await.unwrap().into_inner();
        let names: Vec<(String, Vec<String>)> =
            summary(&listed).into_iter().map(|(n, _, t, _, _)| (n, t)).collect();
        assert_eq!(
            names,
            [
                ("default/green", "missing-plugin"),
                ("default/blue", "ipvlan"),
                ("team/red", "ipvlan"),
                ("/_fallback", "bridge")
            ]
            .map(|(n, t)| (n.to_owned(), vec![t.to_owned()])),
            "removed: the NAD is listed again"
        );
        server.abort();
    }
}
