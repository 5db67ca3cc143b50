//! The agent's command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use plexus_ebpf_common::flow::{Timeouts, DEFAULT_MAX_FLOWS, NSEC_PER_SEC};

use crate::dataplane::XdpWhere;
use crate::server::netapi::client::NetworkCommand;

#[derive(Debug, Parser)]
#[command(name = "plexus-agent", version, about = "plexus node agent: secondary networks for pods")]
pub struct Cli {
    #[command(subcommand)]
    pub command: CliCommand,
}

#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Serve CNI requests from the `plexus` shim.
    Run(Box<AgentOptions>),
    /// Install the `plexus` CNI binary into the node's CNI bin directory, atomically (a
    /// temporary file renamed over the old one): the DaemonSet's init container.
    InstallShim(InstallShimOptions),
    /// Port mappings of the eBPF dataplane.
    #[command(subcommand)]
    Portmap(PortmapCommand),
    /// Bandwidth limits of the eBPF dataplane.
    #[command(subcommand)]
    Bandwidth(BandwidthCommand),
    /// What the node holds that no record explains: records whose pod's network namespace is
    /// gone, port mappings, flows and bandwidth limits without a record, host-local allocations,
    /// VF claims and temporary files nobody owns, links under plexus's temporary names. Exits 0
    /// when there is none, 1 when some remain (with --fix: could not be removed), 2 when the
    /// node could not be read. Run it where the agent runs (its network, PID and mount
    /// namespaces: its container on Kubernetes).
    Doctor(DoctorOptions),
    /// The PodNetwork controller (KEP-3698): conditions, InUse finalizers and the `default`
    /// PodNetwork, for the whole cluster; run as a Deployment, one replica acting at a time
    /// (leader election on a Lease). docs/podnetwork-controller.md.
    Controller(ControllerOptions),
    /// The network API's client (docs/network-api.md): set, remove and list the networks the
    /// agent serves on its network API socket, and show which IP of a sandbox is on which
    /// network. Exits 3 when the API refuses a request, 1 on any other error.
    #[command(subcommand)]
    Network(NetworkCommand),
}

/// `plexus-agent controller`.
#[derive(Debug, Clone, Args)]
pub struct ControllerOptions {
    /// The kubeconfig to use. Unset: the pod's service account (in-cluster config); a
    /// KUBECONFIG variable is not consulted.
    #[arg(long, env = "PLEXUS_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the leader election Lease (the controller's own, from the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,

    /// Name of the leader election Lease.
    #[arg(long, env = "PLEXUS_LEASE_NAME", default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,

    /// This replica's identity in the Lease (its pod's name, from the downward API). Default:
    /// the host name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// `leaseDurationSeconds`: how long the other replicas wait for a leader that stopped
    /// renewing. The leader renews every fifth of it and stops acting after two thirds of it
    /// without a renewal.
    #[arg(long, env = "PLEXUS_LEASE_DURATION", value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_duration: u64,

    /// Do not create (nor recreate) the `default` PodNetwork: the cluster operator manages it
    /// (the KEP's disable-default-podnetwork-creation). It is then treated as any other
    /// PodNetwork, InUse finalizer included.
    #[arg(long)]
    pub no_default_pod_network: bool,

    /// Reconcile everything at least this often (retries writes that failed).
    #[arg(long, env = "PLEXUS_RESYNC", value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub resync: u64,

    /// Address of the HTTP endpoints /metrics, /healthz and /readyz, or `off`.
    #[arg(long, env = "PLEXUS_METRICS_ADDR", default_value = DEFAULT_CONTROLLER_METRICS_ADDR)]
    pub metrics_addr: String,
}

/// The default name of the controller's Lease.
pub const DEFAULT_LEASE_NAME: &str = "plexus-podnetwork-controller";
/// The controller's default metrics address (not the agent's port: both may share a host).
pub const DEFAULT_CONTROLLER_METRICS_ADDR: &str = "0.0.0.0:9466";

impl ControllerOptions {
    /// `--metrics-addr`, `None` when switched off.
    pub fn metrics_socket_addr(&self) -> Result<Option<std::net::SocketAddr>, MetricsAddrError> {
        metrics_socket_addr(&self.metrics_addr)
    }

    /// The identity: `--identity`, else the host name.
    pub fn identity(&self) -> Result<String, std::io::Error> {
        match self.identity.clone().filter(|i| !i.is_empty()) {
            Some(i) => Ok(i),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()),
        }
    }

    pub fn config(&self, identity: String) -> crate::controller::ControllerConfig {
        crate::controller::ControllerConfig {
            lease: crate::controller::lease::LeaseConfig {
                namespace: self.lease_namespace.clone(),
                name: self.lease_name.clone(),
                identity,
                lease_duration: Duration::from_secs(self.lease_duration),
            },
            plan: crate::controller::plan::PlanConfig { manage_default: !self.no_default_pod_network },
            resync: Duration::from_secs(self.resync),
            watch: crate::kube::watch::Settings::default(),
        }
    }
}

fn metrics_socket_addr(addr: &str) -> Result<Option<std::net::SocketAddr>, MetricsAddrError> {
    match addr {
        "" | "off" => Ok(None),
        a => a.parse().map(Some).map_err(|source| MetricsAddrError { addr: a.to_owned(), source }),
    }
}

#[derive(Debug, Clone, Args)]
pub struct DoctorOptions {
    #[command(flatten)]
    pub dirs: DataplaneDirs,

    /// The agent's socket: records whose namespace is gone are torn down by the agent's DEL.
    #[arg(long, env = "PLEXUS_SOCKET", default_value = plexus_cni_shim::DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// host-local dataDirs to look for allocations in (repeat or separate with ':'), besides
    /// those of the recorded secondary attachments' configs. The cluster default network's is
    /// looked at only when given: pods attached before plexus was installed hold addresses
    /// there without a record of plexus.
    #[arg(long = "ipam-dir", env = "PLEXUS_DOCTOR_IPAM_DIRS", value_delimiter = ':')]
    pub ipam_dirs: Vec<PathBuf>,

    /// The CRI socket of the container runtime the node's kubelet uses (its
    /// --container-runtime-endpoint): a container no record lists is alive while the runtime
    /// lists its sandbox. When it cannot be asked, liveness is decided by the network
    /// namespaces the runtime's result cache names, and an address of a container none is
    /// named for is never freed.
    #[arg(long, env = "PLEXUS_RUNTIME_SOCKET", default_value = crate::cri::DEFAULT_SOCKET)]
    pub runtime_socket: PathBuf,

    /// libcni's cache directory: the runtime's result cache files (`<dir>/results/`) of gone
    /// containers are leftovers, and those of the others name their network namespaces.
    #[arg(long, env = "PLEXUS_CNI_CACHE_DIR", default_value = crate::doctor::gather::DEFAULT_CNI_CACHE_DIR)]
    pub cni_cache_dir: PathBuf,

    /// Multus's cache directory (its `cniDir`): the cache of a gone container Multus attached
    /// is a leftover, which `--fix` has the agent release (docs/migrating-from-multus.md).
    #[arg(long, env = "PLEXUS_MULTUS_CACHE_DIR", default_value = crate::takeover::store::DEFAULT_DIR)]
    pub multus_cache_dir: PathBuf,

    /// The agent's --cni-bin-dir: IPAM plugins a VF's release runs.
    #[arg(long = "cni-bin-dir", env = "PLEXUS_CNI_BIN_DIRS", value_delimiter = ':',
          default_values = ["/opt/cni/bin", "/usr/lib/cni"])]
    pub cni_bin_dirs: Vec<PathBuf>,

    /// Remove what is found, as the agent would.
    #[arg(long)]
    pub fix: bool,

    /// JSON instead of a table: [{"kind", "what", "fixed"?, "error"?}].
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum BandwidthCommand {
    /// The installed limits, with the programs' passed/dropped/marked counters (from the pinned
    /// BPF maps and the agent's records; works while the agent is down).
    List(ListOptions),
    /// Changes the limits of an attachment in place, without re-creating the pod: the new
    /// rate and burst apply to the next packet (with a fresh bucket).
    Set(BandwidthSetOptions),
}

#[derive(Debug, Clone, Args)]
pub struct BandwidthSetOptions {
    #[command(flatten)]
    pub dirs: DataplaneDirs,
    /// The attachment's container ID (CNI_CONTAINERID).
    #[arg(long)]
    pub container_id: String,
    /// The attachment's pod interface (CNI_IFNAME).
    #[arg(long)]
    pub ifname: String,
    /// Traffic to the pod, bits per second.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub ingress_rate: Option<u64>,
    /// Bits; default: 10 ms of the rate.
    #[arg(long, requires = "ingress_rate", value_parser = clap::value_parser!(u64).range(1..))]
    pub ingress_burst: Option<u64>,
    /// Traffic from the pod, bits per second.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub egress_rate: Option<u64>,
    /// Bits; default: 10 ms of the rate.
    #[arg(long, requires = "egress_rate", value_parser = clap::value_parser!(u64).range(1..))]
    pub egress_burst: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum PortmapCommand {
    /// The active mappings, from the pinned BPF maps, with the programs' packet and byte
    /// counters and the flows each one has (works while the agent is down: the maps are
    /// pinned).
    List(ListOptions),
    /// The tracked flows of the port mappings (protocol, client, host and pod endpoints,
    /// state, age and idle time) and the flow table's figures, from the pinned BPF maps (works
    /// while the agent is down).
    Flows(FlowsOptions),
}

/// `portmap flows`.
#[derive(Debug, Clone, Args)]
pub struct FlowsOptions {
    /// The agent's --bpf-pin-dir.
    #[arg(long, env = "PLEXUS_BPF_PIN_DIR", default_value = crate::dataplane::pin::DEFAULT_PIN_DIR)]
    pub bpf_pin_dir: PathBuf,

    /// JSON instead of a table: {"flows": [...], "table": {...}}.
    #[arg(long)]
    pub json: bool,
}

/// Smallest flow table `--portmap-max-flows` accepts.
pub const MIN_FLOWS: u32 = 1024;
/// Longest timeout, in seconds (about 136 years: nanoseconds stay within 64 bits).
pub const MAX_TIMEOUT_SECS: u64 = u32::MAX as u64;

fn max_flows(s: &str) -> Result<u32, String> {
    let n: u32 = s.trim().parse().map_err(|_| format!("{s:?} is not a whole number of entries"))?;
    if n < MIN_FLOWS {
        return Err(format!("{n} entries is too small a flow table: at least {MIN_FLOWS}"));
    }
    Ok(n)
}

fn seconds(s: &str) -> Result<u64, String> {
    let n: u64 =
        s.trim().parse().map_err(|_| format!("{s:?} is not a whole number of seconds (e.g. 120)"))?;
    match n {
        0 => Err("a timeout must be at least 1 second".into()),
        n if n > MAX_TIMEOUT_SECS => Err(format!("{n} seconds is too long: at most {MAX_TIMEOUT_SECS}")),
        n => Ok(n),
    }
}

fn default_secs(pick: fn(&Timeouts) -> u64) -> u64 {
    pick(&Timeouts::default()) / NSEC_PER_SEC
}

/// The port mapping flow table: its size and how long flows live after their last packet, by
/// state (seconds; the defaults are conntrack's).
#[derive(Debug, Clone, Args)]
pub struct FlowTableOptions {
    /// Entries of the flow table (each takes 200 bytes of kernel memory, preallocated: the
    /// default is 25 MiB). When full, the least recently used flow is evicted. A
    /// table pinned by an earlier run keeps its size until its pin is removed.
    #[arg(long, env = "PLEXUS_PORTMAP_MAX_FLOWS", value_name = "ENTRIES",
          default_value_t = DEFAULT_MAX_FLOWS, value_parser = max_flows)]
    pub portmap_max_flows: u32,

    /// TCP flows once replied (conntrack's tcp_timeout_established).
    #[arg(long, env = "PLEXUS_PORTMAP_TCP_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.tcp_established), value_parser = seconds)]
    pub portmap_tcp_timeout: u64,

    /// TCP flows not replied yet (tcp_timeout_syn_sent).
    #[arg(long, env = "PLEXUS_PORTMAP_TCP_SYN_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.tcp_syn), value_parser = seconds)]
    pub portmap_tcp_syn_timeout: u64,

    /// TCP flows after a FIN from both sides (tcp_timeout_time_wait).
    #[arg(long, env = "PLEXUS_PORTMAP_TCP_CLOSE_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.tcp_closed), value_parser = seconds)]
    pub portmap_tcp_close_timeout: u64,

    /// TCP flows after a RST (tcp_timeout_close).
    #[arg(long, env = "PLEXUS_PORTMAP_TCP_RESET_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.tcp_reset), value_parser = seconds)]
    pub portmap_tcp_reset_timeout: u64,

    /// UDP flows not replied yet (udp_timeout).
    #[arg(long, env = "PLEXUS_PORTMAP_UDP_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.udp), value_parser = seconds)]
    pub portmap_udp_timeout: u64,

    /// UDP flows once replied (udp_timeout_stream).
    #[arg(long, env = "PLEXUS_PORTMAP_UDP_STREAM_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.udp_stream), value_parser = seconds)]
    pub portmap_udp_stream_timeout: u64,

    /// SCTP flows (sctp_timeout_established).
    #[arg(long, env = "PLEXUS_PORTMAP_SCTP_TIMEOUT", value_name = "SECONDS",
          default_value_t = default_secs(|t| t.sctp), value_parser = seconds)]
    pub portmap_sctp_timeout: u64,
}

impl FlowTableOptions {
    /// The timeouts, in nanoseconds.
    pub fn timeouts(&self) -> Timeouts {
        let ns = |secs: u64| secs.saturating_mul(NSEC_PER_SEC);
        Timeouts {
            tcp_syn: ns(self.portmap_tcp_syn_timeout),
            tcp_established: ns(self.portmap_tcp_timeout),
            tcp_closed: ns(self.portmap_tcp_close_timeout),
            tcp_reset: ns(self.portmap_tcp_reset_timeout),
            udp: ns(self.portmap_udp_timeout),
            udp_stream: ns(self.portmap_udp_stream_timeout),
            sctp: ns(self.portmap_sctp_timeout),
        }
    }
}

/// Where the agent keeps what the dataplane subcommands read and change.
#[derive(Debug, Clone, Args)]
pub struct DataplaneDirs {
    /// The agent's --bpf-pin-dir.
    #[arg(long, env = "PLEXUS_BPF_PIN_DIR", default_value = crate::dataplane::pin::DEFAULT_PIN_DIR)]
    pub bpf_pin_dir: PathBuf,

    /// The agent's --state-dir (its records name the pod of each entry).
    #[arg(long, env = "PLEXUS_STATE_DIR", default_value = "/var/lib/plexus")]
    pub state_dir: PathBuf,
}

/// `portmap list` and `bandwidth list`.
#[derive(Debug, Clone, Args)]
pub struct ListOptions {
    #[command(flatten)]
    pub dirs: DataplaneDirs,

    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct InstallShimOptions {
    /// The shim binary to install.
    #[arg(long, default_value = "/usr/local/bin/plexus")]
    pub from: PathBuf,
    /// The CNI bin directory (the host's, mounted).
    #[arg(long, default_value = "/opt/cni/bin")]
    pub to: PathBuf,
    /// File name in that directory: the `type` of plexus's CNI config.
    #[arg(long, default_value = "plexus")]
    pub name: String,
}

/// Where NetworkAttachmentDefinitions and pods come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CatalogSource {
    /// Manifests in --nad-dir and --pod-dir (standalone mode, no cluster).
    Files,
    /// The Kubernetes API server (needs --node-name; --kubeconfig or in-cluster).
    Kube,
}

#[derive(Debug, Clone, Args)]
pub struct AgentOptions {
    /// Unix socket the shim connects to.
    #[arg(long, env = "PLEXUS_SOCKET", default_value = plexus_cni_shim::DEFAULT_SOCKET)]
    pub socket: PathBuf,

    /// Besides root, the members of this group (a name from the agent's /etc/group, or a GID)
    /// may use the socket: it gets the group and mode 0660 instead of 0600, and the agent
    /// checks each peer's credentials (primary and supplementary groups).
    #[arg(long, env = "PLEXUS_SOCKET_GROUP", value_name = "NAME|GID",
          value_parser = crate::server::access::parse_group)]
    pub socket_group: Option<u32>,

    /// Seconds a connection has to send its whole request; slower ones get a CNI error
    /// (code 11) and are closed. The shim sends at once.
    #[arg(long, env = "PLEXUS_SOCKET_READ_TIMEOUT_SECS", value_name = "SECONDS",
          default_value_t = crate::server::DEFAULT_READ_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub socket_read_timeout_secs: u64,

    /// Unix socket of the CRI network API (docs/network-api.md: set, remove and list
    /// networks over gRPC), mode 0600. An empty value turns the API off; with it on, plexus
    /// is ready without an on-disk default network.
    #[arg(long, env = "PLEXUS_NETWORK_API_SOCKET", default_value = crate::netapi::DEFAULT_SOCKET,
          value_parser = path_or_off)]
    pub network_api_socket: PathBuf,

    /// Durable state (attachment records).
    #[arg(long, env = "PLEXUS_STATE_DIR", default_value = "/var/lib/plexus")]
    pub state_dir: PathBuf,

    /// Directories of CNI plugin binaries, searched in order (repeat or separate with ':').
    #[arg(long = "cni-bin-dir", env = "PLEXUS_CNI_BIN_DIRS", value_delimiter = ':',
          default_values = ["/opt/cni/bin", "/usr/lib/cni"])]
    pub cni_bin_dirs: Vec<PathBuf>,

    /// Where the cluster default network's CNI config is: its first valid config is used.
    #[arg(long, env = "PLEXUS_DEFAULT_NETWORK_DIR", default_value = "/etc/cni/net.d")]
    pub default_network_dir: PathBuf,

    /// Directories searched for CNI configs named after a NetworkAttachmentDefinition.
    #[arg(long = "network-conf-dir", env = "PLEXUS_NETWORK_CONF_DIRS", value_delimiter = ':',
          default_values = ["/etc/cni/multus/net.d", "/etc/cni/net.d"])]
    pub network_conf_dirs: Vec<PathBuf>,

    /// The runtime's CNI config directory: plexus writes its own config there once the
    /// default network is ready. Unset: plexus writes none.
    #[arg(long, env = "PLEXUS_RUNTIME_CONF_DIR")]
    pub runtime_conf_dir: Option<PathBuf>,

    /// File name of plexus's own config; it must sort before the default network's.
    #[arg(long, default_value = "00-plexus.conflist")]
    pub runtime_conf_name: String,

    /// cniVersion of plexus's own config (the runtime's libcni must know it).
    #[arg(long, default_value = "1.0.0")]
    pub runtime_cni_version: String,

    /// Standalone mode: directories of NetworkAttachmentDefinition manifests.
    #[arg(long = "nad-dir", env = "PLEXUS_NAD_DIRS", value_delimiter = ':')]
    pub nad_dirs: Vec<PathBuf>,

    /// Standalone mode: directories of pod manifests (found via K8S_POD_NAMESPACE/NAME).
    #[arg(long = "pod-dir", env = "PLEXUS_POD_DIRS", value_delimiter = ':')]
    pub pod_dirs: Vec<PathBuf>,

    /// Namespaces whose networks pods of any namespace may select (repeatable).
    #[arg(long = "allow-namespace", value_delimiter = ',', default_values = ["default"])]
    pub allowed_namespaces: Vec<String>,

    /// Fail an ADD whose networks annotation is invalid, instead of ignoring it.
    #[arg(long)]
    pub strict_annotations: bool,

    /// Write Multus's extra keys in the network-status annotation (`mtu`, `gateway`) besides
    /// the spec's: the compatibility switch for tools that read them. Off, the annotation holds
    /// the keys spec 5.3 defines only (keys without a period are reserved to the spec).
    #[arg(long, env = "PLEXUS_NETWORK_STATUS_MULTUS_KEYS")]
    pub network_status_multus_keys: bool,

    /// Multus's cache directory (its `cniDir`): a DEL or GC of a container plexus has no record
    /// of runs the DELs Multus recorded there for it, so a node taken over from Multus releases
    /// what Multus attached (docs/migrating-from-multus.md).
    #[arg(long, env = "PLEXUS_MULTUS_CACHE_DIR", default_value = crate::takeover::store::DEFAULT_DIR)]
    pub multus_cache_dir: PathBuf,

    /// Leave running pods' attachments alone when their networks annotation changes (live
    /// attachments are on by default: docs/live-attachments.md).
    #[arg(long, env = "PLEXUS_NO_LIVE_ATTACHMENTS")]
    pub no_live_attachments: bool,

    /// Live attachments: seconds between two looks at every running pod's selection, besides
    /// the looks the catalog's change notifications trigger (a NAD change, for pods that asked
    /// to be re-attached, is seen at this pace).
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub live_resync_secs: u64,

    /// The root of the device information files (NPWG Device Information Specification): the
    /// device plugins' under `dp/`, the ones plexus writes for each attachment under `cni/`.
    #[arg(long, env = "PLEXUS_DEVICE_INFO_DIR", default_value = "/var/run/k8s.cni.cncf.io/devinfo")]
    pub device_info_dir: PathBuf,

    /// kubelet's pod-resources socket (its PodResources API, gRPC v1): where the agent learns
    /// which device plugin devices a pod was given, for a network whose
    /// NetworkAttachmentDefinition has the k8s.v1.cni.cncf.io/resourceName annotation (with
    /// --catalog kube, DRA ResourceClaims are read too).
    #[arg(long, env = "PLEXUS_POD_RESOURCES_SOCKET", default_value = crate::devices::podresources::DEFAULT_SOCKET)]
    pub pod_resources_socket: PathBuf,
    /// With --catalog kube: every this many seconds, the IPAMClaims this node holds addresses
    /// of are looked up, and the addresses of those deleted from the cluster are released.
    #[arg(long, env = "PLEXUS_IPAM_CLAIM_CHECK_INTERVAL", value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub ipam_claim_check_interval: u64,

    /// The network attachment policy: a file of NetworkAttachmentPolicy objects saying which
    /// plugin types and node interfaces each namespace's networks may use (docs/policy.md).
    /// Read at start (an invalid file stops the agent) and again whenever it changes (an invalid
    /// new version keeps the last valid one). Unset: with --catalog kube, the cluster's
    /// NetworkAttachmentPolicy objects; otherwise none, and every network is allowed.
    #[arg(long, env = "PLEXUS_NAD_POLICY", value_name = "FILE")]
    pub nad_policy: Option<PathBuf>,

    /// Time limit of one delegate plugin execution, in seconds.
    #[arg(long, default_value_t = 60)]
    pub delegate_timeout_secs: u64,

    /// Exec this CNI plugin type's binary instead of running it natively (repeatable, or
    /// comma-separated). plexus implements `macvlan` and `sriov` in the agent, over netlink,
    /// with the reference plugins' configs and results; naming a type here hands it back to the
    /// binary in --cni-bin-dir, e.g. to compare behaviour or work around a difference.
    #[arg(long = "exec-plugin", env = "PLEXUS_EXEC_PLUGINS", value_delimiter = ',', value_name = "TYPE")]
    pub exec_plugins: Vec<String>,

    /// Run no plugin type natively: exec every plugin's binary, as Multus does (the same as
    /// --exec-plugin for every native type).
    #[arg(long)]
    pub no_native: bool,

    /// bpffs directory where the eBPF dataplane pins its maps, programs and links, so mapped
    /// traffic keeps flowing while the agent restarts. Mounted if bpffs is absent (then it lives
    /// only as long as the agent's mount namespace).
    #[arg(long, env = "PLEXUS_BPF_PIN_DIR", default_value = crate::dataplane::pin::DEFAULT_PIN_DIR)]
    pub bpf_pin_dir: PathBuf,

    /// cgroup v2 directory the node-local port mapping hooks attach to (the root, so every
    /// process of the node's network namespace is covered).
    #[arg(long, env = "PLEXUS_CGROUP_ROOT", default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,

    /// Where the XDP programs run, on the interfaces where clients' traffic enters the node:
    /// `auto` where the bench shows XDP wins (port mappings on a bridge's uplinks, ingress
    /// limits on a macvlan master; port mappings on a macvlan master stay in TC), `always`
    /// (port mappings on a macvlan master too) or `never` (TC alone). A start detaches the XDP
    /// programs an earlier run attached where they no longer belong.
    #[arg(long, env = "PLEXUS_XDP", value_enum, default_value_t = XdpWhere::Auto, conflicts_with = "no_xdp")]
    pub xdp: XdpWhere,

    /// The same as `--xdp never` (kept for existing configurations).
    #[arg(long, env = "PLEXUS_NO_XDP")]
    pub no_xdp: bool,

    #[command(flatten)]
    pub flow_table: FlowTableOptions,

    /// Where NADs and pods come from: `files` (--nad-dir, --pod-dir) or `kube` (the API
    /// server, with --node-name and --kubeconfig or the in-cluster service account).
    #[arg(long, env = "PLEXUS_CATALOG", value_enum, default_value_t = CatalogSource::Files)]
    pub catalog: CatalogSource,

    /// With --catalog kube: the kubeconfig to use. Unset: the pod's service account
    /// (in-cluster config); a KUBECONFIG variable is not consulted.
    #[arg(long, env = "PLEXUS_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// With --catalog kube: this node's name, as kubelet registered it. Only pods with this
    /// spec.nodeName are watched.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// ADDs that run at once; more wait in line, in order (DEL, CHECK, STATUS and GC never
    /// wait). Bounds memory and delegate processes during pod bursts.
    #[arg(long, env = "PLEXUS_MAX_CONCURRENT_ADDS", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_adds: u32,

    /// Address of the HTTP endpoints /metrics, /healthz and /readyz, or `off`.
    #[arg(long, env = "PLEXUS_METRICS_ADDR", default_value = crate::metrics::DEFAULT_ADDR)]
    pub metrics_addr: String,
}

/// A path, where an empty value (turning the feature off) is accepted too.
fn path_or_off(value: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(value))
}

impl AgentOptions {
    /// The keys of the network-status annotation's maps.
    pub fn network_status_keys(&self) -> crate::spec::status::StatusKeys {
        if self.network_status_multus_keys {
            crate::spec::status::StatusKeys::Multus
        } else {
            crate::spec::status::StatusKeys::Spec
        }
    }

    /// Where the XDP programs run: `--xdp`, or never with `--no-xdp`.
    pub fn xdp_where(&self) -> XdpWhere {
        if self.no_xdp {
            XdpWhere::Never
        } else {
            self.xdp
        }
    }

    /// `--metrics-addr`, `None` when switched off.
    pub fn metrics_socket_addr(&self) -> Result<Option<std::net::SocketAddr>, MetricsAddrError> {
        metrics_socket_addr(&self.metrics_addr)
    }

    pub fn delegate_timeout(&self) -> Duration {
        Duration::from_secs(self.delegate_timeout_secs)
    }

    /// The network API's socket, or `None` when the API is off.
    pub fn network_api_socket(&self) -> Option<&Path> {
        Some(self.network_api_socket.as_path()).filter(|p| !p.as_os_str().is_empty())
    }

    /// How the socket serves: who may connect, how long a request may take to arrive.
    pub fn server_config(&self) -> crate::server::ServerConfig {
        crate::server::ServerConfig {
            max_concurrent_adds: self.max_concurrent_adds as usize,
            access: crate::server::access::Access::new(self.socket_group),
            read_timeout: Duration::from_secs(self.socket_read_timeout_secs),
            ..crate::server::ServerConfig::new(self.socket.clone())
        }
    }
}

/// `--metrics-addr` is neither HOST:PORT nor `off`.
#[derive(Debug, thiserror::Error)]
#[error("--metrics-addr {addr:?}: {source} (use HOST:PORT or off)")]
pub struct MetricsAddrError {
    pub addr: String,
    #[source]
    pub source: std::net::AddrParseError,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<CliCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("plexus-agent").chain(args.iter().copied())).map(|c| c.command)
    }

    #[test]
    fn list_subcommands_take_the_directories_and_json() {
        let dirs = ["--bpf-pin-dir", "/pins", "--state-dir", "/state", "--json"];
        for command in [["portmap", "list"], ["bandwidth", "list"]] {
            let parsed = parse(&[&command[..], &dirs[..]].concat()).unwrap();
            let o = match parsed {
                CliCommand::Portmap(PortmapCommand::List(o))
                | CliCommand::Bandwidth(BandwidthCommand::List(o)) => o,
                other => panic!("{command:?} parsed as {other:?}"),
            };
            assert_eq!(
                (o.dirs.bpf_pin_dir.as_path(), o.dirs.state_dir.as_path()),
                ("/pins".as_ref(), "/state".as_ref())
            );
            assert!(o.json);
        }
    }

    fn run(args: &[&str]) -> Result<AgentOptions, clap::Error> {
        match parse(&[&["run"], args].concat())? {
            CliCommand::Run(o) => Ok(*o),
            other => panic!("run parsed as {other:?}"),
        }
    }

    #[test]
    fn flow_table_options_default_to_conntracks_timeouts() {
        let o = run(&[]).unwrap();
        assert_eq!(o.flow_table.portmap_max_flows, DEFAULT_MAX_FLOWS);
        assert_eq!(o.flow_table.timeouts(), Timeouts::default());
        assert_eq!(o.flow_table.portmap_tcp_timeout, 432_000);
        assert_eq!(o.flow_table.portmap_udp_timeout, 30);
    }

    #[test]
    fn flow_table_options_are_seconds_and_entries() {
        let o = run(&[
            "--portmap-max-flows",
            "1024",
            "--portmap-tcp-timeout",
            "3600",
            "--portmap-tcp-syn-timeout",
            "60",
            "--portmap-tcp-close-timeout",
            "30",
            "--portmap-tcp-reset-timeout",
            "1",
            "--portmap-udp-timeout",
            "10",
            "--portmap-udp-stream-timeout",
            "180",
            "--portmap-sctp-timeout",
            "300",
        ])
        .unwrap();
        assert_eq!(o.flow_table.portmap_max_flows, 1024);
        let s = NSEC_PER_SEC;
        assert_eq!(
            o.flow_table.timeouts(),
            Timeouts {
                tcp_syn: 60 * s,
                tcp_established: 3600 * s,
                tcp_closed: 30 * s,
                tcp_reset: s,
                udp: 10 * s,
                udp_stream: 180 * s,
                sctp: 300 * s,
            }
        );
        // Not a power of two: fine.
        assert_eq!(run(&["--portmap-max-flows", "100000"]).unwrap().flow_table.portmap_max_flows, 100_000);
    }

    #[test]
    fn bad_flow_table_options_are_refused_saying_why() {
        for (args, needle) in [
            (["--portmap-max-flows", "1023"], "at least 1024"),
            (["--portmap-max-flows", "lots"], "not a whole number of entries"),
            (["--portmap-udp-timeout", "0"], "at least 1 second"),
            (["--portmap-tcp-timeout", "1.5"], "not a whole number of seconds"),
            (["--portmap-tcp-syn-timeout", "99999999999"], "too long"),
        ] {
            let err = run(&args).unwrap_err().to_string();
            assert!(err.contains(needle) && err.contains(args[0]), "{args:?}: {err}");
        }
    }

    #[test]
    fn the_network_api_is_on_by_default_and_an_empty_socket_turns_it_off() {
        assert_eq!(run(&[]).unwrap().network_api_socket(), Some(Path::new("/run/plexus/network.sock")));
        let o = run(&["--network-api-socket", "/tmp/n.sock"]).unwrap();
        assert_eq!(o.network_api_socket(), Some(Path::new("/tmp/n.sock")));
        assert_eq!(run(&["--network-api-socket", ""]).unwrap().network_api_socket(), None);
    }

    #[test]
    fn socket_options_take_a_group_by_gid_or_name_and_a_read_timeout() {
        let o = run(&[]).unwrap();
        assert_eq!((o.socket_group, o.socket_read_timeout_secs), (None, 5));
        let config = o.server_config();
        assert_eq!((config.access.group, config.read_timeout), (None, Duration::from_secs(5)));
        let o = run(&["--socket-group", "1500", "--socket-read-timeout-secs", "2"]).unwrap();
        assert_eq!((o.socket_group, o.socket_read_timeout_secs), (Some(1500), 2));
        // Every system has a root group, GID 0.
        assert_eq!(run(&["--socket-group", "root"]).unwrap().socket_group, Some(0));
        for (args, needle) in [
            (["--socket-group", "no-such-group-plexus"], "give its GID"),
            (["--socket-read-timeout-secs", "0"], "--socket-read-timeout-secs"),
        ] {
            let err = run(&args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn portmap_flows_takes_the_pin_directory_and_json() {
        let parsed = parse(&["portmap", "flows", "--bpf-pin-dir", "/pins", "--json"]).unwrap();
        let CliCommand::Portmap(PortmapCommand::Flows(o)) = parsed else { panic!("{parsed:?}") };
        assert_eq!((o.bpf_pin_dir.as_path(), o.json), ("/pins".as_ref(), true));
        let err = parse(&["portmap", "flows", "--state-dir", "/state"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
    }

    #[test]
    fn doctor_takes_the_directories_socket_ipam_dirs_fix_and_json() {
        let parsed = parse(&[
            "doctor",
            "--bpf-pin-dir",
            "/pins",
            "--state-dir",
            "/state",
            "--socket",
            "/s.sock",
            "--ipam-dir",
            "/a:/b",
            "--ipam-dir",
            "/c",
            "--fix",
            "--json",
        ])
        .unwrap();
        let CliCommand::Doctor(o) = parsed else { panic!("{parsed:?}") };
        assert_eq!(
            (o.dirs.bpf_pin_dir.as_path(), o.dirs.state_dir.as_path()),
            ("/pins".as_ref(), "/state".as_ref())
        );
        assert_eq!(o.socket, PathBuf::from("/s.sock"));
        assert_eq!(o.ipam_dirs, [PathBuf::from("/a"), "/b".into(), "/c".into()]);
        assert!(o.fix && o.json);
        let CliCommand::Doctor(o) = parse(&["doctor"]).unwrap() else { panic!() };
        assert!(!o.fix && !o.json && o.ipam_dirs.is_empty());
        assert_eq!(o.socket, PathBuf::from(plexus_cni_shim::DEFAULT_SOCKET));
    }

    #[test]
    fn bandwidth_set_takes_the_directories_but_not_json() {
        let set = ["bandwidth", "set", "--container-id", "c", "--ifname", "net1", "--egress-rate", "1000"];
        let parsed =
            parse(&[&set[..], &["--bpf-pin-dir", "/pins", "--state-dir", "/state"]].concat()).unwrap();
        let CliCommand::Bandwidth(BandwidthCommand::Set(o)) = parsed else { panic!("{parsed:?}") };
        assert_eq!(o.dirs.bpf_pin_dir, PathBuf::from("/pins"));
        assert_eq!(o.egress_rate, Some(1000));
        let err = parse(&[&set[..], &["--json"]].concat()).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
    }

    #[test]
    fn network_commands_default_to_the_agents_socket_and_take_their_arguments() {
        match parse(&["network", "remove", "blue", "-n", "team-a"]).unwrap() {
            CliCommand::Network(NetworkCommand::Remove(o)) => {
                assert_eq!((o.name.as_str(), o.namespace.as_str()), ("blue", "team-a"));
                assert_eq!(o.socket.socket, PathBuf::from(crate::netapi::DEFAULT_SOCKET));
            }
            other => panic!("network remove parsed as {other:?}"),
        }
        match parse(&["network", "set", "-f", "blue.yaml", "--socket", "/tmp/n.sock"]).unwrap() {
            CliCommand::Network(NetworkCommand::Set(o)) => {
                assert_eq!(
                    (o.file.as_path(), o.socket.socket.as_path()),
                    ("blue.yaml".as_ref(), "/tmp/n.sock".as_ref())
                );
            }
            other => panic!("network set parsed as {other:?}"),
        }
        match parse(&["network", "ips", "c1", "--json"]).unwrap() {
            CliCommand::Network(NetworkCommand::Ips(o)) => assert!(o.json && o.sandbox_id == "c1"),
            other => panic!("network ips parsed as {other:?}"),
        }
        assert!(parse(&["network", "set"]).is_err(), "set needs -f");
        assert!(parse(&["network", "remove"]).is_err(), "remove needs a name");
    }
}
