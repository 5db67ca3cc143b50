//! A test world: a node namespace running a real agent, its config tree, and the shim.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use plexus_testkit::{assert_nothing_left, files_in, host_local_allocations, Bpffs, Netns, Proc};

use crate::REFERENCE_PLUGINS;

/// The directory of the workspace's built binaries (`target/debug`), next to the test's.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current test executable");
    let dir = exe.parent().and_then(Path::parent).expect("target directory");
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --workspace` before the tests", path.display());
    path
}

/// What the shim printed and how it exited.
#[derive(Debug, Clone)]
pub struct CniOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CniOutput {
    pub fn ok(&self) -> bool {
        self.exit_code == 0
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or(Value::Null)
    }

    /// The CNI error code, when the output is an error.
    pub fn code(&self) -> Option<u64> {
        if self.ok() {
            None
        } else {
            self.json()["code"].as_u64()
        }
    }

    pub fn msg(&self) -> String {
        self.json()["msg"].as_str().unwrap_or_default().to_owned()
    }

    #[track_caller]
    pub fn expect_ok(&self) -> Value {
        assert!(self.ok(), "CNI call failed: {} {}", self.stdout, self.stderr);
        self.json()
    }
}

/// A running `plexus-agent`, killed on drop.
#[derive(Debug)]
pub struct Agent(Proc);

impl Agent {
    pub fn pid(&self) -> u32 {
        self.0 .0.id()
    }

    /// SIGKILL, as a crash would: no cleanup runs.
    pub fn kill(self) {
        drop(self);
    }
}

pub struct World {
    pub dir: TempDir,
    pub node: Netns,
    pub agent: Option<Agent>,
    /// Options added to every agent start.
    pub agent_args: Vec<String>,
    /// Environment variables added to every agent start (a test's `PLEXUS_FAILPOINT`).
    pub agent_env: Vec<(String, String)>,
    /// Whether the agent serves the CRI network API (on [`World::network_api_socket`]); true
    /// unless a test turns it off.
    pub network_api: bool,
    /// The world's own bpffs, when the agent pins on one (see [`World::pin_on_own_bpffs`]).
    pub bpffs: Option<Bpffs>,
    /// The agent's --cni-bin-dir (the reference plugins unless a test says otherwise).
    pub cni_bin_dir: PathBuf,
}

impl World {
    /// A node with a cluster default network: bridge `cni0`, 10.88.0.0/24, host-local IPAM.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("plexus-test-").tempdir().expect("tempdir");
        for sub in ["default", "nads", "pods", "state", "netconf", "runtime", "ipam", "multus"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("creating world dirs");
        }
        let world = World {
            dir,
            node: Netns::new("pxnode"),
            agent: None,
            agent_args: Vec::new(),
            agent_env: Vec::new(),
            network_api: true,
            bpffs: None,
            cni_bin_dir: PathBuf::from(REFERENCE_PLUGINS),
        };
        world.write_default_network(
            "10-cluster.conflist",
            &world.bridge_config("cluster", "cni0", "10.88.0.0/24", true),
        );
        world
    }

    /// Mounts a bpffs in the world's directory and has the agent pin its BPF objects there
    /// (`ip netns exec`, which runs the agent, hides /sys/fs/bpf). It is unmounted, releasing
    /// every pin, when the world goes: after the agent, before the directory. Returns its path.
    pub fn pin_on_own_bpffs(&mut self) -> PathBuf {
        let bpffs = Bpffs::mount(self.path("bpffs"));
        self.agent_args.extend(["--bpf-pin-dir".into(), bpffs.path().display().to_string()]);
        let path = bpffs.path().to_owned();
        self.bpffs = Some(bpffs);
        path
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    pub fn socket(&self) -> PathBuf {
        self.path("plexus.sock")
    }

    /// The agent's CRI network API socket (docs/network-api.md).
    pub fn network_api_socket(&self) -> PathBuf {
        self.path("network.sock")
    }

    /// A veth pair in the node namespace, both ends up, to serve as a macvlan master (the kernel
    /// here has no dummy links). Not named `veth*`, so the leftover check does not take it for
    /// a pod's veth.
    pub fn master_link(&self, name: &str) {
        let peer = format!("{name}p");
        self.node.ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.node.ip(&["link", "set", name, "up"]);
        self.node.ip(&["link", "set", &peer, "up"]);
    }

    /// A bridge + host-local configlist (the reference plugins), IPAM state in this world.
    pub fn bridge_config(&self, name: &str, bridge: &str, subnet: &str, gateway: bool) -> String {
        json!({
            "cniVersion": "1.0.0",
            "name": name,
            "plugins": [{
                "type": "bridge",
                "bridge": bridge,
                "isGateway": gateway,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "dataDir": self.path("ipam").join(name),
                }
            }]
        })
        .to_string()
    }

    pub fn write_default_network(&self, file: &str, config: &str) {
        std::fs::write(self.path("default").join(file), config).expect("writing default network");
    }

    /// A CNI config file in the directory searched for NAD names (spec 3.4.1 rules 2, 3).
    pub fn write_netconf(&self, file: &str, config: &str) {
        std::fs::write(self.path("netconf").join(file), config).expect("writing netconf");
    }

    /// A NetworkAttachmentDefinition manifest; `config: None` for one without spec.config.
    pub fn write_nad(&self, namespace: &str, name: &str, config: Option<&str>) {
        let mut nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": namespace},
        });
        if let Some(c) = config {
            nad["spec"] = json!({"config": c});
        }
        std::fs::write(self.path("nads").join(format!("{namespace}_{name}.json")), nad.to_string())
            .expect("writing NAD");
    }

    pub fn write_pod(&self, namespace: &str, name: &str, networks: Option<&str>) {
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}});
        if let Some(n) = networks {
            pod["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/networks": n});
        }
        std::fs::write(self.path("pods").join(format!("{namespace}_{name}.json")), pod.to_string())
            .expect("writing pod");
    }

    /// Starts the agent inside the node namespace and waits until it answers.
    pub fn start_agent(&mut self) {
        let api = if self.network_api { self.network_api_socket() } else { PathBuf::new() };
        let child = self.spawn_agent(&self.socket(), &api, "state", "runtime", "agent.log");
        self.agent = Some(Agent(Proc(child)));
        let deadline = Instant::now() + Duration::from_secs(15);
        // Both sockets: the CNI one and the network API's, when it is served.
        let mut sockets = vec![self.socket()];
        if self.network_api {
            sockets.push(self.network_api_socket());
        }
        for socket in sockets {
            while UnixStream::connect(&socket).is_err() {
                assert!(Instant::now() < deadline, "agent did not start; log:\n{}", self.agent_log());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts another agent next to the world's own, in the node's namespace, as a DaemonSet
    /// update with `maxSurge` or a restart overlapping the old process would: the world's
    /// networks, pods and agent options (its pin directory among them), and its own CNI socket,
    /// state directory (`<name>-state`), runtime config directory and log (`<name>.log`), no
    /// network API. Does not wait for it. CNI calls reach it through [`World::cni_via`].
    pub fn spawn_other_agent(&self, name: &str) -> (Agent, PathBuf) {
        let socket = self.path(&format!("{name}.sock"));
        let state = format!("{name}-state");
        let runtime = format!("{name}-runtime");
        for dir in [&state, &runtime] {
            std::fs::create_dir_all(self.path(dir)).expect("creating the other agent's dirs");
        }
        let child = self.spawn_agent(&socket, Path::new(""), &state, &runtime, &format!("{name}.log"));
        (Agent(Proc(child)), socket)
    }

    fn spawn_agent(
        &self,
        socket: &Path,
        network_api_socket: &Path,
        state: &str,
        runtime: &str,
        log: &str,
    ) -> std::process::Child {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.path(log)).expect("agent log");
        let mut cmd = self.node.command(bin("plexus-agent"));
        cmd.arg("run")
            .arg("--socket")
            .arg(socket)
            .arg("--network-api-socket")
            .arg(network_api_socket)
            .arg("--state-dir")
            .arg(self.path(state))
            .arg("--cni-bin-dir")
            .arg(&self.cni_bin_dir)
            .arg("--default-network-dir")
            .arg(self.path("default"))
            .arg("--network-conf-dir")
            .arg(self.path("netconf"))
            .arg("--runtime-conf-dir")
            .arg(self.path(runtime))
            .arg("--nad-dir")
            .arg(self.path("nads"))
            .arg("--pod-dir")
            .arg(self.path("pods"))
            // Multus's cache of this world (crate::multus), never the machine's.
            .arg("--multus-cache-dir")
            .arg(self.path("multus"))
            .args(&self.agent_args)
            // PLEXUS_TEST_LOG (a RUST_LOG filter) for more detail in a test agent's log; a
            // test's own RUST_LOG in `agent_env` wins.
            .env("RUST_LOG", std::env::var("PLEXUS_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .envs(self.agent_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        cmd.spawn().expect("starting plexus-agent")
    }

    /// Kills the agent with SIGKILL.
    pub fn kill_agent(&mut self) {
        if let Some(a) = self.agent.take() {
            a.kill();
        }
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.path("agent.log")).unwrap_or_default()
    }

    /// plexus's own CNI config as a runtime passes it.
    pub fn plexus_config(&self, cni_version: &str) -> String {
        json!({"cniVersion": cni_version, "name": "plexus", "type": "plexus", "socket": self.socket()})
            .to_string()
    }

    /// Runs the real `plexus` binary as a runtime would.
    pub fn shim(&self, env: &[(&str, &str)], stdin: &str) -> CniOutput {
        let mut cmd = Command::new(bin("plexus"));
        cmd.env_clear().envs(env.iter().copied()).env("CNI_PATH", REFERENCE_PLUGINS);
        run_cni(&mut cmd, stdin)
    }

    /// A CNI call for a pod's sandbox `cid` in `pod` (namespace/name via CNI_ARGS).
    pub fn cni(&self, command: &str, cid: &str, netns: &Netns, pod: (&str, &str)) -> CniOutput {
        self.cni_versioned(command, cid, netns, pod, "1.0.0")
    }

    pub fn cni_versioned(
        &self,
        command: &str,
        cid: &str,
        netns: &Netns,
        pod: (&str, &str),
        v: &str,
    ) -> CniOutput {
        self.cni_with_config(command, cid, netns, pod, &self.plexus_config(v))
    }

    /// A CNI call whose config carries `runtime_config` as its `runtimeConfig`, as a runtime
    /// passes the capabilities plexus's config declares (`portMappings`, `podSandboxNetworks`).
    pub fn cni_with_runtime_config(
        &self,
        command: &str,
        cid: &str,
        netns: &Netns,
        pod: (&str, &str),
        runtime_config: &Value,
    ) -> CniOutput {
        let mut config: Value =
            serde_json::from_str(&self.plexus_config("1.0.0")).expect("plexus config JSON");
        config["runtimeConfig"] = runtime_config.clone();
        self.cni_with_config(command, cid, netns, pod, &config.to_string())
    }

    /// A CNI call through the agent listening on `socket` (see [`World::spawn_other_agent`]).
    pub fn cni_via(
        &self,
        socket: &Path,
        command: &str,
        cid: &str,
        netns: &Netns,
        pod: (&str, &str),
    ) -> CniOutput {
        let config = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus", "socket": socket});
        self.cni_with_config(command, cid, netns, pod, &config.to_string())
    }

    fn cni_with_config(
        &self,
        command: &str,
        cid: &str,
        netns: &Netns,
        pod: (&str, &str),
        config: &str,
    ) -> CniOutput {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={cid}",
            pod.0, pod.1
        );
        let netns_path = netns.path_str();
        self.shim(
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", cid),
                ("CNI_NETNS", &netns_path),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", &args),
            ],
            config,
        )
    }

    pub fn add(&self, cid: &str, netns: &Netns, pod: (&str, &str)) -> CniOutput {
        self.cni("ADD", cid, netns, pod)
    }

    pub fn del(&self, cid: &str, netns: &Netns, pod: (&str, &str)) -> CniOutput {
        self.cni("DEL", cid, netns, pod)
    }

    /// The network-status the agent published for a pod, parsed.
    pub fn network_status(&self, namespace: &str, name: &str) -> Value {
        let path =
            self.path("state").join("pods").join(namespace).join(format!("{name}.network-status.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).expect("network-status JSON")
    }

    pub fn events(&self, namespace: &str, name: &str) -> String {
        std::fs::read_to_string(
            self.path("state").join("pods").join(namespace).join(format!("{name}.events")),
        )
        .unwrap_or_default()
    }

    /// Attachment records on disk.
    pub fn state_files(&self) -> Vec<String> {
        files_in(&self.path("state").join("attachments"))
    }

    /// Addresses host-local still holds, per network ("net/10.88.0.2").
    pub fn ipam_allocations(&self) -> Vec<String> {
        // Each network of the world has a dataDir of its own below ipam/.
        files_in(&self.path("ipam"))
            .into_iter()
            .flat_map(|data_dir| host_local_allocations(&self.path("ipam").join(data_dir)))
            .collect()
    }

    /// veth ends of pods on the node (a delegate that did not clean up leaves these).
    pub fn node_veths(&self) -> Vec<String> {
        self.node
            .links()
            .iter()
            .filter(|l| {
                l["linkinfo"]["info_kind"] == "veth"
                    || l["link_type"] == "ether"
                        && l["ifname"].as_str().is_some_and(|n| n.starts_with("veth"))
            })
            .filter_map(|l| l["ifname"].as_str().map(str::to_owned))
            .collect()
    }

    /// nftables chains of pods' attachments in the node: every chain of plexus's `plexus`
    /// tables, and the reference bridge's (its `ipMasq` chains `CNI-<24 hex digits>` in
    /// `ip`/`ip6 nat`, its `macspoofchk` chains `cni-br-iface-*` in `bridge nat`), as "family
    /// table chain".
    pub fn nft_chains(&self) -> Vec<String> {
        let (ok, out) = self.node.exec(&["nft", "-j", "list", "ruleset"]);
        assert!(ok, "nft list ruleset in the node: {out}");
        let ruleset: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("nft -j: {e}: {out}"));
        ruleset["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let chain = entry.get("chain")?;
                let (family, table, name) =
                    (chain["family"].as_str()?, chain["table"].as_str()?, chain["name"].as_str()?);
                let pods = table == "plexus"
                    || table == "nat" && (family == "ip" || family == "ip6") && is_masquerading_chain(name)
                    || table == "nat" && family == "bridge" && name.starts_with("cni-br-iface-");
                pods.then(|| format!("{family} {table} {name}"))
            })
            .collect()
    }

    /// Everything a pod's attachments may leave behind: records, addresses, veths, nftables
    /// chains, and any interface but `lo` in the pods' namespaces.
    pub fn leftovers(&self, pods: &[&Netns]) -> Vec<String> {
        let mut out: Vec<String> =
            self.state_files().into_iter().map(|f| format!("state file {f}")).collect();
        out.extend(self.ipam_allocations().into_iter().map(|a| format!("IPAM allocation {a}")));
        out.extend(self.node_veths().into_iter().map(|v| format!("node veth {v}")));
        out.extend(self.nft_chains().into_iter().map(|c| format!("nft chain {c}")));
        for p in pods {
            out.extend(
                p.link_names().into_iter().filter(|n| n != "lo").map(|n| format!("link {n} in {}", p.name)),
            );
        }
        out
    }

    /// Fails unless the pods' attachments left nothing behind (see [`World::leftovers`]).
    #[track_caller]
    pub fn assert_nothing_left(&self, pods: &[&Netns]) {
        assert_nothing_left(self.leftovers(pods));
    }
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_agent();
        if std::thread::panicking() {
            eprintln!("--- agent log ({}) ---\n{}", self.path("agent.log").display(), self.agent_log());
        }
        // Unmounted before the directory is removed: a mount point cannot be.
        self.bpffs.take();
    }
}

/// The name the reference plugins give a pod's `ipMasq` chain: "CNI-" and 24 hex digits.
fn is_masquerading_chain(name: &str) -> bool {
    name.strip_prefix("CNI-").is_some_and(|id| id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Runs a CNI binary (or a wrapper of one) with `stdin`, as a runtime does: the config on
/// stdin, the answer on stdout.
pub fn run_cni(cmd: &mut Command, stdin: &str) -> CniOutput {
    let (exit_code, stdout, stderr) = run_with_stdin(cmd, stdin);
    CniOutput { exit_code, stdout: stdout.trim().to_owned(), stderr }
}

/// Runs `cmd` with `stdin`: its exit code (-1 when killed), stdout and stderr.
pub fn run_with_stdin(cmd: &mut Command, stdin: &str) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("writing stdin");
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("waiting for {cmd:?}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
