//! `plexus-agent network`: the operator's client of the network API (docs/network-api.md).
//! It sets a network from a YAML or JSON file of a `NetworkConfig` ([`crate::netapi::model`]),
//! removes one, lists them with their status, and shows which IP of a sandbox is on which
//! network; as a table, or with `--json` in the proto's JSON mapping (what `set -f` reads).
//!
//! The connection is gRPC over the agent's Unix socket; what is printed is made by the pure
//! functions at the end, tested without a socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::cni::error::chain;
use crate::netapi::config::InvalidField;
use crate::netapi::model::{effective_namespace, NetworkConfig};
use crate::netapi::proto;
use crate::netapi::proto::runtime_service_client::RuntimeServiceClient;

#[derive(Debug, Subcommand)]
pub enum NetworkCommand {
    /// SetPodNetwork: creates or updates a network from a YAML or JSON file of a NetworkConfig
    /// (the proto's JSON mapping; lowerCamelCase or the proto's field names). An update needs a
    /// higher metadata.generation than the stored one.
    Set(NetworkSetOptions),
    /// RemovePodNetwork: new attachments can no longer select the network; pods attached to it
    /// keep it until their DEL, which uses the config they were attached with.
    Remove(NetworkRemoveOptions),
    /// ListPodNetwork: every network (set through the API, NADs, and the on-disk default
    /// network as `_fallback`) with its measured status.
    List(NetworkListOptions),
    /// PodSandboxNetworks: the IPs of a sandbox, each with its network, in attachment order.
    Ips(NetworkIpsOptions),
}

/// The socket every `plexus-agent network` command talks to.
#[derive(Debug, Clone, Args)]
pub struct NetworkApiSocket {
    /// The agent's --network-api-socket.
    #[arg(long, env = "PLEXUS_NETWORK_API_SOCKET", default_value = crate::netapi::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

/// `network set`.
#[derive(Debug, Clone, Args)]
pub struct NetworkSetOptions {
    #[command(flatten)]
    pub socket: NetworkApiSocket,
    /// The NetworkConfig, YAML or JSON.
    #[arg(long, short = 'f')]
    pub file: PathBuf,
}

/// `network remove`.
#[derive(Debug, Clone, Args)]
pub struct NetworkRemoveOptions {
    #[command(flatten)]
    pub socket: NetworkApiSocket,
    /// The network's name.
    pub name: String,
    /// The network's namespace; empty means `default`.
    #[arg(long, short = 'n', default_value = "")]
    pub namespace: String,
}

/// `network list`.
#[derive(Debug, Clone, Args)]
pub struct NetworkListOptions {
    #[command(flatten)]
    pub socket: NetworkApiSocket,
    /// JSON instead of a table: {"networks": [{"config", "status"}]}, the proto's JSON mapping
    /// (a config reads back with `network set -f`).
    #[arg(long)]
    pub json: bool,
}

/// `network ips`.
#[derive(Debug, Clone, Args)]
pub struct NetworkIpsOptions {
    #[command(flatten)]
    pub socket: NetworkApiSocket,
    /// The sandbox's ID (the CNI_CONTAINERID of its ADD).
    pub sandbox_id: String,
    /// JSON instead of a table: {"ips": [{"ip", "networkName"}]}.
    #[arg(long)]
    pub json: bool,
}

/// How long connecting to the socket may take (a local socket answers at once or never).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no network API socket given: pass --socket or set PLEXUS_NETWORK_API_SOCKET")]
    NoSocket,
    #[error(
        "cannot reach the network API at {}: {}; is the agent running with --network-api-socket {}?",
        socket.display(),
        chain(source),
        socket.display()
    )]
    Connect {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("{}: {}", code_name(status.code()), status.message())]
    Rpc {
        #[source]
        status: tonic::Status,
    },
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a NetworkConfig (YAML or JSON, the proto's JSON mapping): {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    #[error("the agent answered with a network plexus cannot read: {0}")]
    Answer(#[source] InvalidField),
}

impl ClientError {
    /// The process exit code: 3 for an error the API answered with, 1 for any other.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Rpc { .. } => 3,
            _ => 1,
        }
    }
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> Self {
        ClientError::Rpc { status }
    }
}

/// Runs a `plexus-agent network` command: what to print on success.
pub async fn run(command: &NetworkCommand) -> Result<String, ClientError> {
    match command {
        NetworkCommand::Set(o) => set(o).await,
        NetworkCommand::Remove(o) => remove(o).await,
        NetworkCommand::List(o) => list(o).await,
        NetworkCommand::Ips(o) => ips(o).await,
    }
}

async fn set(o: &NetworkSetOptions) -> Result<String, ClientError> {
    let config = read_network_file(&o.file)?;
    let done = format!(
        "network {}/{} set (generation {})\n",
        config.namespace(),
        config.metadata.name,
        config.metadata.generation
    );
    let mut client = connect(&o.socket.socket).await?;
    client.set_pod_network(proto::SetPodNetworkRequest { config: Some(config.into()) }).await?;
    Ok(done)
}

async fn remove(o: &NetworkRemoveOptions) -> Result<String, ClientError> {
    let mut client = connect(&o.socket.socket).await?;
    let request = proto::RemovePodNetworkRequest { name: o.name.clone(), namespace: o.namespace.clone() };
    client.remove_pod_network(request).await?;
    Ok(format!("network {}/{} removed\n", effective_namespace(&o.namespace), o.name))
}

async fn list(o: &NetworkListOptions) -> Result<String, ClientError> {
    let mut client = connect(&o.socket.socket).await?;
    let response = client.list_pod_network(proto::ListPodNetworkRequest {}).await?.into_inner();
    let networks = listed_networks(response)?;
    Ok(if o.json { format!("{}\n", networks_json(&networks)) } else { networks_table(&networks) })
}

async fn ips(o: &NetworkIpsOptions) -> Result<String, ClientError> {
    let mut client = connect(&o.socket.socket).await?;
    let request = proto::PodSandboxNetworksRequest { pod_sandbox_id: o.sandbox_id.clone() };
    let response = client.pod_sandbox_networks(request).await?.into_inner();
    Ok(if o.json { format!("{}\n", ips_json(&response.ips)) } else { ips_table(&response.ips) })
}

/// A gRPC client on the Unix socket `socket`.
pub async fn connect(socket: &Path) -> Result<RuntimeServiceClient<Channel>, ClientError> {
    if socket.as_os_str().is_empty() {
        return Err(ClientError::NoSocket);
    }
    let path = socket.to_owned();
    // The URI is required by the transport and unused: every connection goes to `path`.
    let channel = Endpoint::from_static("http://[::]:50051")
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
        .map_err(|source| ClientError::Connect { socket: socket.to_owned(), source })?;
    Ok(RuntimeServiceClient::new(channel))
}

/// A NetworkConfig from a YAML or JSON file (JSON is YAML).
pub fn read_network_file(path: &Path) -> Result<NetworkConfig, ClientError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ClientError::Read { path: path.to_owned(), source })?;
    parse_network(&text).map_err(|source| ClientError::Parse { path: path.to_owned(), source })
}

fn parse_network(text: &str) -> Result<NetworkConfig, serde_yaml::Error> {
    serde_yaml::from_str(text)
}

/// A listed network: its config in our own form, and its status.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedNetwork {
    pub config: NetworkConfig,
    pub sandbox_management: bool,
    pub connectivity: bool,
}

fn listed_networks(response: proto::ListPodNetworkResponse) -> Result<Vec<ListedNetwork>, ClientError> {
    response
        .networks
        .into_iter()
        .map(|n| {
            let status = n.status.unwrap_or_default();
            let config = n.config.unwrap_or_default();
            Ok(ListedNetwork {
                config: NetworkConfig::try_from(config).map_err(ClientError::Answer)?,
                sandbox_management: status.sandbox_management,
                connectivity: status.connectivity,
            })
        })
        .collect()
}

/// The list in the proto's JSON mapping: `{"networks": [{"config", "status"}]}`.
pub fn networks_json(networks: &[ListedNetwork]) -> Value {
    let networks: Vec<Value> = networks
        .iter()
        .map(|n| {
            json!({
                "config": n.config,
                "status": {"sandboxManagement": n.sandbox_management, "connectivity": n.connectivity},
            })
        })
        .collect();
    json!({ "networks": networks })
}

/// NAMESPACE NAME GENERATION TYPES SANDBOX-MANAGEMENT CONNECTIVITY; `-` for the empty
/// namespace of `_fallback`, the chain's plugin types joined by commas.
pub fn networks_table(networks: &[ListedNetwork]) -> String {
    let header = ["NAMESPACE", "NAME", "GENERATION", "TYPES", "SANDBOX-MANAGEMENT", "CONNECTIVITY"];
    let rows = networks.iter().map(|n| {
        let types: Vec<&str> = n.config.cniv1_config.plugins.iter().map(|p| p.plugin_type.as_str()).collect();
        vec![
            dash_if_empty(&n.config.metadata.namespace),
            n.config.metadata.name.clone(),
            n.config.metadata.generation.to_string(),
            dash_if_empty(&types.join(",")),
            n.sandbox_management.to_string(),
            n.connectivity.to_string(),
        ]
    });
    table(&header, rows)
}

/// The sandbox's IPs in the proto's JSON mapping: `{"ips": [{"ip", "networkName"}]}`.
pub fn ips_json(ips: &[proto::PodIp]) -> Value {
    let ips: Vec<Value> = ips.iter().map(|i| json!({"ip": i.ip, "networkName": i.network_name})).collect();
    json!({ "ips": ips })
}

/// NETWORK IP, in attachment order.
pub fn ips_table(ips: &[proto::PodIp]) -> String {
    table(&["NETWORK", "IP"], ips.iter().map(|i| vec![i.network_name.clone(), i.ip.clone()]))
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s.to_owned()
    }
}

/// Columns padded to their widest cell, separated by three spaces.
fn table(header: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    lines.extend(rows);
    let widths: Vec<usize> = (0..header.len())
        .map(|c| lines.iter().map(|l| l.get(c).map_or(0, String::len)).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for line in &lines {
        let cells: Vec<String> =
            line.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// The canonical name of a gRPC status code (`INVALID_ARGUMENT`), as every gRPC
/// implementation prints it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netapi::model::{Cniv1Config, NetworkMetadata, PluginConfig};

    fn network(
        namespace: &str,
        name: &str,
        generation: u32,
        types: &[&str],
        status: (bool, bool),
    ) -> ListedNetwork {
        ListedNetwork {
            config: NetworkConfig {
                metadata: NetworkMetadata {
                    name: name.into(),
                    namespace: namespace.into(),
                    uid: String::new(),
                    generation,
                },
                cniv1_config: Cniv1Config {
                    cni_version: "1.0.0".into(),
                    plugins: types
                        .iter()
                        .map(|t| PluginConfig { plugin_type: (*t).into(), ..Default::default() })
                        .collect(),
                    ..Default::default()
                },
                ..Default::default()
            },
            sandbox_management: status.0,
            connectivity: status.1,
        }
    }

    #[test]
    fn the_table_aligns_its_columns_and_marks_empty_cells_with_a_dash() {
        let table = networks_table(&[
            network("default", "blue", 12, &["bridge", "portmap"], (true, true)),
            network("", "_fallback", 0, &["ptp"], (true, false)),
            network("team-a", "ghost", 1, &[], (false, false)),
        ]);
        assert_eq!(
            table,
            "NAMESPACE   NAME        GENERATION   TYPES            SANDBOX-MANAGEMENT   CONNECTIVITY\n\
             default     blue        12           bridge,portmap   true                 true\n\
             -           _fallback   0            ptp              true                 false\n\
             team-a      ghost       1            -                false                false\n"
        );
    }

    #[test]
    fn an_empty_list_is_the_header_alone() {
        assert_eq!(
            networks_table(&[]),
            "NAMESPACE   NAME   GENERATION   TYPES   SANDBOX-MANAGEMENT   CONNECTIVITY\n"
        );
        assert_eq!(networks_json(&[]), json!({"networks": []}));
    }

    #[test]
    fn the_json_list_is_the_proto_mapping_and_reads_back_as_a_network_file() {
        let listed = network("default", "blue", 2, &["bridge"], (true, false));
        let v = networks_json(std::slice::from_ref(&listed));
        assert_eq!(v["networks"][0]["status"], json!({"sandboxManagement": true, "connectivity": false}));
        assert_eq!(v["networks"][0]["config"]["metadata"]["name"], "blue");
        assert_eq!(v["networks"][0]["config"]["cniv1Config"]["plugins"][0]["type"], "bridge");
        let again = parse_network(&v["networks"][0]["config"].to_string()).expect("reads back");
        assert_eq!(again, listed.config);
    }

    #[test]
    fn ips_print_in_attachment_order_as_a_table_and_as_json() {
        let ips = vec![
            proto::PodIp { ip: "10.88.0.5".into(), network_name: "_fallback".into() },
            proto::PodIp { ip: "fd00::5".into(), network_name: "default/blue".into() },
        ];
        assert_eq!(ips_table(&ips), "NETWORK        IP\n_fallback      10.88.0.5\ndefault/blue   fd00::5\n");
        assert_eq!(
            ips_json(&ips),
            json!({"ips": [{"ip": "10.88.0.5", "networkName": "_fallback"}, {"ip": "fd00::5", "networkName": "default/blue"}]})
        );
    }

    #[test]
    fn a_network_file_is_read_as_yaml_or_json_with_either_spelling_of_the_fields() {
        let yaml = "metadata:\n  name: blue\n  generation: 3\nip_ranges:\n  - cidr: 10.1.0.0/24\n\
                    cniv1_config:\n  cni_version: 1.0.0\n  plugins:\n    - type: bridge\n      \
                    capabilities: [portMappings]\n      parameters:\n        bridge: br0\n";
        let json = r#"{"metadata": {"name": "blue", "generation": 3}, "ipRanges": [{"cidr": "10.1.0.0/24"}],
            "networkType": "CNIv1", "cniv1Config": {"cniVersion": "1.0.0",
            "plugins": [{"type": "bridge", "capabilities": ["portMappings"], "parameters": {"bridge": "br0"}}]}}"#;
        let a = parse_network(yaml).expect("YAML");
        let b = parse_network(json).expect("JSON");
        assert_eq!(a, b);
        assert_eq!(a.metadata.generation, 3);
        assert_eq!(a.ip_ranges[0].cidr, "10.1.0.0/24");
        assert_eq!(a.cniv1_config.plugins[0].parameters["bridge"], "br0");
    }

    #[test]
    fn a_network_file_with_an_unknown_field_is_refused_naming_it() {
        let err = parse_network("metadata:\n  name: blue\nipRange: []\n").expect_err("an unknown field");
        assert!(err.to_string().contains("ipRange"), "{err}");
    }

    #[test]
    fn a_missing_file_is_reported_with_its_path() {
        let err = read_network_file(Path::new("/nonexistent/blue.yaml")).expect_err("no such file");
        assert!(matches!(err, ClientError::Read { .. }));
        assert!(err.to_string().contains("/nonexistent/blue.yaml"), "{err}");
        assert_eq!(err.exit_code(), 1);
    }

    #[test]
    fn rpc_errors_print_the_canonical_code_and_the_message_and_exit_3() {
        let err =
            ClientError::from(tonic::Status::failed_precondition("stale generation 1, the stored one is 2"));
        assert_eq!(err.to_string(), "FAILED_PRECONDITION: stale generation 1, the stored one is 2");
        assert_eq!(err.exit_code(), 3);
    }

    #[tokio::test]
    async fn a_socket_nobody_serves_is_named_in_the_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("network.sock");
        let err = connect(&socket).await.expect_err("nothing serves there");
        let text = err.to_string();
        assert!(text.contains(&socket.display().to_string()), "{text}");
        assert!(text.contains("--network-api-socket"), "{text}");
        assert_eq!(err.exit_code(), 1);
    }

    #[tokio::test]
    async fn an_empty_socket_path_is_refused_before_connecting() {
        assert!(matches!(connect(Path::new("")).await, Err(ClientError::NoSocket)));
    }
}
