//! The bench's world, every piece of it a guard that removes itself on drop (also after a
//! failure or Ctrl-C):
//!
//! ```text
//!   client netns                      node netns (agents, runtime helper)           pod netns
//!   mv0   <───veth───> pxmv0 (macvlan master) ──macvlan── net1..net4 ──────────────▶ (per pod)
//!   eth1  <───veth───> pxcl0 ─┐
//!                             pxpm0 (bridge 10.77.0.1/16) ─veth── net1 (portmap/bandwidth)
//!                      pxdef0 (bridge 10.88.0.1/16, default network) ─veth── eth0
//! ```
//!
//! The client's `eth1` is 10.77.255.250/16, plus two /32s outside the pods' subnet
//! ([`FILL_SOURCES`]), which the node routes back over `pxpm0`.
//!
//! Namespaces are named by plexus-testkit (`pxb-<role>-<pid>-<n>`), cgroups `pxb<pid>-<role>`:
//! names carry this process's id, so concurrent runs never collide and a later run can remove
//! what a killed one left (see [`sweep_stale`]).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use plexus_testkit::{files_in, Bpffs, Entered, Netns, Proc};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::{Bins, Side};
use crate::util::output;

pub const DEFAULT_BRIDGE: &str = "pxdef0";
/// The macvlan master: a veth end in the node whose peer is the client's `mv0`.
pub const MASTER: &str = "pxmv0";
/// The bridge of the portmap and bandwidth networks, with the client attached to it.
pub const PM_BRIDGE: &str = "pxpm0";
pub const PM_GATEWAY: &str = "10.77.0.1";
/// The MAC of [`PM_BRIDGE`], set so that it stays put (locally administered).
const PM_BRIDGE_MAC: &str = "02:77:00:00:00:01";
pub const CLIENT_ADDR: &str = "10.77.255.250";
/// Addresses of the client outside the pods' subnet, the sources of the portmap section's
/// flow table fill (two: more distinct source address and port pairs than one address has
/// ports). Outside it, because the reference portmap masquerades whatever comes from the
/// pods' own subnet (its hairpin rule) to the bridge's single address, which has only 64,512
/// source ports to give; peers from elsewhere are plainly DNAT'ed. /32s: the client's own
/// connections still leave from [`CLIENT_ADDR`].
pub const FILL_SOURCES: [&str; 2] = ["10.78.255.250", "10.78.255.249"];
/// The node's route back to [`FILL_SOURCES`], on the bridge.
const FILL_NET: &str = "10.78.0.0/16";
/// The client's port on [`PM_BRIDGE`] (its peer is the client's `eth1`): the bridge's uplink.
pub const CLIENT_PORT: &str = "pxcl0";
/// Node interfaces that are the bench's, not leftovers of a pod.
const INFRA_LINKS: &[&str] = &["lo", MASTER, CLIENT_PORT, PM_BRIDGE, DEFAULT_BRIDGE];

/// What the bench's namespaces are named after (then their role, this process's id and a
/// counter).
const NETNS_PREFIX: &str = "pxb-";

fn prefix() -> String {
    format!("pxb{}", std::process::id())
}

/// A namespace of the bench for `role` (`node`, `cl`, `pod`), `lo` up, deleted on drop.
pub fn netns(role: &str) -> anyhow::Result<Netns> {
    Ok(Netns::try_new(&format!("{NETNS_PREFIX}{role}"))?)
}

/// The copy of this binary that runs the helpers (`bench-net`) inside namespaces.
static HELPER_EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The binary for `bench-net` helpers: a copy taken when the lab was built, so a rebuild of
/// target/debug/xtask during a long run (another `cargo build --workspace`) cannot pull it
/// away from under the run.
pub fn helper_exe() -> anyhow::Result<PathBuf> {
    match HELPER_EXE.get() {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().context("finding this executable"),
    }
}

/// Reads /proc/sys as seen from inside the namespace (network sysctls are per namespace).
pub fn read_sysctl(ns: &Netns, key: &str) -> anyhow::Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let text = in_netns(&ns.path_str(), move || std::fs::read_to_string(path))
        .with_context(|| format!("reading {key} in {}", ns.name))?;
    Ok(text.trim().to_owned())
}

/// Writes /proc/sys from inside the namespace (no procps needed).
pub fn sysctl(ns: &Netns, key: &str, value: &str) -> anyhow::Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    output(ns.command("sh").args(["-c", r#"echo "$1" > "$0""#, &path, value])).map(drop)
}

/// A TCP port on 127.0.0.1 that nothing in the namespace listens on right now.
pub fn free_local_port(ns: &Netns) -> anyhow::Result<u16> {
    in_netns(&ns.path_str(), || Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port()))
        .with_context(|| format!("finding a free port in {}", ns.name))
}

/// The first IPv4 address of an interface.
pub fn ipv4(ns: &Netns, ifname: &str) -> anyhow::Result<String> {
    let text = ns.try_ip(&["-j", "-4", "addr", "show", "dev", ifname])?;
    let v: Vec<Value> = serde_json::from_str(&text).context("ip -j addr")?;
    v.iter()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .find_map(|a| a["local"].as_str().map(str::to_owned))
        .with_context(|| format!("{ifname} in {} has no IPv4 address", ns.name))
}

/// The MAC address of `ifname` in `ns`.
pub fn mac(ns: &Netns, ifname: &str) -> anyhow::Result<String> {
    let text = ns.try_ip(&["-j", "link", "show", "dev", ifname])?;
    let v: Vec<Value> = serde_json::from_str(&text).context("ip -j link")?;
    v.iter()
        .find_map(|l| l["address"].as_str().map(str::to_owned))
        .with_context(|| format!("{ifname} in {} has no MAC address", ns.name))
}

/// Runs `f` on a thread of its own that joined the network namespace at `netns` (a path):
/// enough to open sockets there, which stay in it wherever they are used afterwards.
pub fn in_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let path = netns.to_owned();
    let joined = std::thread::spawn(move || -> anyhow::Result<T> {
        let _inside = Entered::new(Path::new(&path))?;
        Ok(f()?)
    })
    .join();
    joined.map_err(|_| anyhow!("the thread joining {netns} panicked"))?
}

/// The body of `GET path` from an HTTP server listening in the network namespace `netns`.
pub fn http_get_in(netns: &str, addr: SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = in_netns(netns, move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)))
        .with_context(|| format!("connecting to {addr} in {netns}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).with_context(|| format!("reading GET {path} from {addr}"))?;
    let (head, body) = raw.split_once("\r\n\r\n").context("HTTP answer without headers")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET {path} from {addr}: {status}");
    }
    Ok(body.to_owned())
}

/// A cgroup v2 group for the processes of one measured side: its `cpu.stat` `usage_usec`
/// counts all CPU time they used, including the kernel's network processing done in their
/// context (softirqs run on the sender's CPU when it re-enables them).
#[derive(Debug)]
pub struct Cgroup {
    pub path: PathBuf,
}

impl Cgroup {
    /// `None` when the machine has no cgroup v2 hierarchy mounted.
    pub fn create(role: &str) -> anyhow::Result<Option<Cgroup>> {
        let Some(root) = cgroup2_root() else { return Ok(None) };
        let path = root.join(format!("{}-{role}", prefix()));
        std::fs::create_dir_all(&path).with_context(|| format!("creating cgroup {}", path.display()))?;
        Ok(Some(Cgroup { path }))
    }

    pub fn procs(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    pub fn usage_usec(&self) -> anyhow::Result<u64> {
        let stat = std::fs::read_to_string(self.path.join("cpu.stat"))?;
        stat.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .context("cpu.stat has no usage_usec")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The processes are gone by now (their guards dropped first); a group with members
        // cannot be removed, so kill stragglers first.
        if let Ok(procs) = std::fs::read_to_string(self.procs()) {
            for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: plain kill(2) of a process of our own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// Where cgroup2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
    })
}

/// The world every section runs in: node and client namespaces, wired up.
pub struct Lab {
    // Drop order: namespaces first (their interfaces go with them), the directory last.
    pub node: Netns,
    pub client: Netns,
    pub dir: TempDir,
    /// Agent logs and other files kept with the results.
    pub logs: PathBuf,
}

impl Lab {
    pub fn new(out: &Path) -> anyhow::Result<Lab> {
        let dir = tempfile::Builder::new().prefix(&format!("pxbench-{}-", std::process::id())).tempdir()?;
        let exe = dir.path().join("bench-net");
        // /proc/self/exe still reads when the file was replaced since this process started.
        std::fs::copy("/proc/self/exe", &exe).context("copying this binary for the helpers")?;
        let _ = HELPER_EXE.set(exe);
        let lab = Lab { node: netns("node")?, client: netns("cl")?, dir, logs: out.join("logs") };
        let (node, client) = (&lab.node, &lab.client);
        sysctl(node, "net.ipv4.ip_forward", "1")?;
        // The client opens tens of thousands of short connections (crr_rate).
        sysctl(client, "net.ipv4.ip_local_port_range", "1024 65000")?;
        sysctl(client, "net.ipv4.tcp_tw_reuse", "1")?;

        // The macvlan network: the client is on the master's wire.
        node.try_ip(&["link", "add", MASTER, "type", "veth", "peer", "name", "mv0", "netns", &client.name])?;
        node.try_ip(&["link", "set", MASTER, "up"])?;
        client.try_ip(&["link", "set", "mv0", "up"])?;

        // The portmap/bandwidth bridge with the client attached; the bridge plugin adopts an
        // existing bridge and its gateway address.
        // A MAC of its own: a bridge without one takes its lowest port's, which changes as pods'
        // veths come and go, and the client's cached neighbour entry for the bridge's address
        // then points at a MAC the bridge no longer answers to: frames to it are flooded to the
        // ports instead of going up the bridge (where plexus translates them) until the client
        // resolves the address again, tens of seconds later.
        node.try_ip(&["link", "add", PM_BRIDGE, "address", PM_BRIDGE_MAC, "type", "bridge"])?;
        node.try_ip(&["addr", "add", &format!("{PM_GATEWAY}/16"), "dev", PM_BRIDGE])?;
        node.try_ip(&["link", "set", PM_BRIDGE, "up"])?;
        node.try_ip(&[
            "link",
            "add",
            CLIENT_PORT,
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "netns",
            &client.name,
        ])?;
        node.try_ip(&["link", "set", CLIENT_PORT, "master", PM_BRIDGE, "up"])?;
        client.try_ip(&["addr", "add", &format!("{CLIENT_ADDR}/16"), "dev", "eth1"])?;
        for a in FILL_SOURCES {
            client.try_ip(&["addr", "add", &format!("{a}/32"), "dev", "eth1"])?;
        }
        client.try_ip(&["link", "set", "eth1", "up"])?;
        node.try_ip(&["route", "add", FILL_NET, "dev", PM_BRIDGE])?;
        Ok(lab)
    }

    /// A directory of this run (removed at the end).
    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// veths in the node that belong to no infrastructure: pods' host ends left behind.
    pub fn node_veths(&self) -> Vec<String> {
        self.node.link_names().into_iter().filter(|l| !INFRA_LINKS.contains(&l.as_str())).collect()
    }

    /// Lets bridged traffic through iptables (`br_netfilter`) or not. The reference portmap
    /// needs it on: a client on the pod's bridge gets the pod's replies bridged, and only then
    /// does conntrack undo the DNAT on them. plexus and the baselines do without, so each side
    /// runs with the node setting it needs.
    pub fn bridge_netfilter(&self, on: bool) -> anyhow::Result<()> {
        sysctl(&self.node, "net.bridge.bridge-nf-call-iptables", if on { "1" } else { "0" })
    }
}

/// An IPv4 range of `10.a.0.0/16` for one side: sides get disjoint ranges of one subnet, so
/// each side's pods can be alive at once without sharing addresses. Networks sharing a
/// subnet (and a client) take different `block`s: an address reused by another network's pod
/// would meet the client's neighbour entry for the old pod's MAC and stall until it expires.
fn range(side: Side, a: u8, block: usize) -> Value {
    let first = block * 120 + side.index() * 40 + 1;
    json!([{
        "subnet": format!("10.{a}.0.0/16"),
        "rangeStart": format!("10.{a}.{first}.1"),
        "rangeEnd": format!("10.{a}.{}.254", first + 38),
    }])
}

/// The cluster default network: bridge + host-local.
pub fn default_network(side: Side, ipam_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "bench-default",
        "plugins": [{
            "type": "bridge", "bridge": DEFAULT_BRIDGE, "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [range(side, 88, 0)], "dataDir": ipam_dir},
        }]
    })
}

/// Secondary network `bench-mv<k>` (k = 1..=4): macvlan on the client's wire + host-local,
/// one subnet per network.
pub fn macvlan_network(k: u32, side: Side, ipam_dir: &Path) -> Value {
    let a = 60 + k as u8;
    json!({
        "cniVersion": "1.0.0",
        "name": format!("bench-mv{k}"),
        "plugins": [{
            "type": "macvlan", "master": MASTER, "mode": "bridge",
            "ipam": {"type": "host-local", "ranges": [range(side, a, 0)], "dataDir": ipam_dir},
        }]
    })
}

/// Secondary network `bench-br<k>` (k = 1..=4) of the cni section: a bridge of its own
/// (`pxcbr<k>`, the gateway on it) + host-local, one subnet per network.
pub fn secondary_bridge_network(k: u32, side: Side, ipam_dir: &Path) -> Value {
    let a = 70 + k as u8;
    json!({
        "cniVersion": "1.0.0",
        "name": format!("bench-br{k}"),
        "plugins": [{
            "type": "bridge", "bridge": format!("pxcbr{k}"), "isGateway": true,
            "ipam": {"type": "host-local", "ranges": [range(side, a, 0)], "dataDir": ipam_dir},
        }]
    })
}

/// Secondary network `bench-chain<k>` (k = 1..=2) of the cni section: the common chain of a
/// secondary network with port mappings and a bandwidth limit, bridge (`pxccb<k>`) +
/// host-local, then `portmap` and `bandwidth` (plexus: `plexus-portmap`, `plexus-bandwidth`).
pub fn chained_bridge_network(k: u32, side: Side, ipam_dir: &Path, portmap: &str, bandwidth: &str) -> Value {
    let a = 74 + k as u8;
    json!({
        "cniVersion": "1.0.0",
        "name": format!("bench-chain{k}"),
        "plugins": [
            {
                "type": "bridge", "bridge": format!("pxccb{k}"), "isGateway": true,
                "ipam": {"type": "host-local", "ranges": [range(side, a, 0)], "dataDir": ipam_dir},
            },
            {"type": portmap, "capabilities": {"portMappings": true}},
            {"type": bandwidth, "capabilities": {"bandwidth": true}},
        ]
    })
}

/// A network on the client's bridge, with an optional chained plugin (portmap, bandwidth);
/// `block` 0 or 1 (see [`range`]).
pub fn bridge_network(
    name: &str,
    block: usize,
    side: Side,
    ipam_dir: &Path,
    chained: Option<Value>,
) -> Value {
    let mut plugins = vec![json!({
        "type": "bridge", "bridge": PM_BRIDGE, "isGateway": true,
        "ipam": {"type": "host-local", "ranges": [range(side, 77, block)], "dataDir": ipam_dir},
    })];
    plugins.extend(chained);
    json!({"cniVersion": "1.0.0", "name": name, "plugins": plugins})
}

/// A running `plexus-agent` in the node, with its own config tree, state and bpffs. Fields
/// drop in order: the process dies before its bpffs is unmounted.
pub struct Agent {
    proc: Proc,
    _bpffs: Bpffs,
    pub root: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    /// Where it serves /metrics in the node namespace, when started with it.
    pub metrics: Option<SocketAddr>,
    /// The namespace it runs in (the node's), by path.
    netns_path: String,
    /// Its binary, for its read-only subcommands.
    bin: PathBuf,
    /// Its command line, for a restart.
    args: Vec<OsString>,
}

impl Agent {
    /// Starts the agent and waits until it answers on its socket. `name` names its tree and
    /// log; `side` picks its address ranges. No metrics endpoint: agents sharing the node
    /// namespace would fight over the port.
    pub fn start(lab: &Lab, bins: &Bins, name: &str, side: Side, extra: &[&str]) -> anyhow::Result<Agent> {
        Agent::launch(lab, bins, name, side, extra, None)
    }

    /// [`Agent::start`], serving /metrics on a free port of 127.0.0.1 in the node namespace
    /// (read with [`Agent::plugin_seconds`]).
    pub fn start_with_metrics(
        lab: &Lab,
        bins: &Bins,
        name: &str,
        side: Side,
        extra: &[&str],
    ) -> anyhow::Result<Agent> {
        let port = free_local_port(&lab.node)?;
        Agent::launch(lab, bins, name, side, extra, Some(SocketAddr::from((Ipv4Addr::LOCALHOST, port))))
    }

    fn launch(
        lab: &Lab,
        bins: &Bins,
        name: &str,
        side: Side,
        extra: &[&str],
        metrics: Option<SocketAddr>,
    ) -> anyhow::Result<Agent> {
        let root = lab.path(name);
        for sub in ["default", "nads", "pods", "state", "netconf", "ipam"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        std::fs::write(
            root.join("default/10-bench.conflist"),
            default_network(side, &root.join("ipam")).to_string(),
        )?;
        let bpffs = Bpffs::try_mount(root.join("bpffs"))?;
        let log = lab.logs.join(format!("{name}.log"));
        let socket = root.join("plexus.sock");
        // The CRI network API's socket in the agent's directory too, not the node's default.
        let mut args: Vec<OsString> = vec![
            "run".into(),
            "--socket".into(),
            socket.clone().into(),
            "--network-api-socket".into(),
            root.join("network.sock").into(),
        ];
        let dir_args = [
            ("--state-dir", "state"),
            ("--default-network-dir", "default"),
            ("--network-conf-dir", "netconf"),
            ("--nad-dir", "nads"),
            ("--pod-dir", "pods"),
            ("--bpf-pin-dir", "bpffs"),
        ];
        for (option, sub) in dir_args {
            args.push(option.into());
            args.push(root.join(sub).into());
        }
        args.extend(["--cni-bin-dir", "/usr/lib/cni", "--metrics-addr"].map(OsString::from));
        args.push(metrics.map_or_else(|| "off".to_owned(), |a| a.to_string()).into());
        args.extend(extra.iter().map(OsString::from));
        let proc = spawn_agent(&lab.node, &bins.agent, &args, &log)?;
        let mut agent = Agent {
            proc,
            _bpffs: bpffs,
            root,
            socket,
            log,
            metrics,
            netns_path: lab.node.path_str(),
            bin: bins.agent.clone(),
            args,
        };
        agent.wait_ready()?;
        Ok(agent)
    }

    /// Waits until the agent answers on its socket (20 s at most).
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&self.socket).is_err() {
            if let Ok(Some(status)) = self.proc.0.try_wait() {
                bail!("plexus-agent exited ({status}); log: {}", self.log.display());
            }
            if Instant::now() > deadline {
                bail!("plexus-agent did not open its socket in 20 s; log: {}", self.log.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Kills the agent with SIGKILL, as an OOM kill or a node crash would, and starts it again
    /// on the same state, configs and bpffs (whose pins outlive it), its log appended to.
    pub fn kill_and_restart(&mut self, node: &Netns) -> anyhow::Result<()> {
        // Proc's drop kills and reaps the old process.
        let old = std::mem::replace(&mut self.proc, spawn_placeholder()?);
        drop(old);
        // A crash leaves the socket file; the new agent replaces it, and until then connecting
        // to the stale file fails, so readiness waits for the new one.
        self.proc = spawn_agent(node, &self.bin, &self.args, &self.log)?;
        self.wait_ready()
    }

    /// The agent's resident memory (VmRSS), in KiB. `ip netns exec` execs the agent, so the
    /// child's pid is the agent's.
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmRSS:")
    }

    /// The agent's resident memory by kind, in KiB: anonymous (its heap, stacks) and file-backed
    /// (the pages of its binary it touched).
    pub fn rss_anon_file_kib(&self) -> anyhow::Result<(u64, u64)> {
        Ok((self.status_kib("RssAnon:")?, self.status_kib("RssFile:")?))
    }

    /// The agent's peak resident memory (VmHWM), in KiB.
    pub fn rss_peak_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let pid = self.proc.0.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {field} in /proc/<pid>/status"))
    }

    /// `(sum in seconds, count)` of `plexus_plugin_duration_seconds` for one plugin type and
    /// CNI command, `(0, 0)` before its first run. Needs [`Agent::start_with_metrics`].
    pub fn plugin_seconds(&self, plugin: &str, command: &str) -> anyhow::Result<(f64, f64)> {
        let body = self.metrics_text()?;
        Ok(super::prom::histogram_sum_count(
            &body,
            "plexus_plugin_duration_seconds",
            &[("type", plugin), ("command", command)],
        )
        .unwrap_or((0.0, 0.0)))
    }

    /// Each phase's (sum, count) of `verb` in the agent's `plexus_cni_phase_duration_seconds`.
    /// Needs [`Agent::start_with_metrics`].
    pub fn phase_totals(&self, verb: &str) -> anyhow::Result<super::phases::Totals> {
        Ok(super::phases::Totals::read(&self.metrics_text()?, verb))
    }

    /// A gauge's or counter's value (summed over the series carrying `labels`), `None` when the
    /// agent does not expose it. Needs [`Agent::start_with_metrics`].
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<Option<f64>> {
        Ok(super::prom::value(&self.metrics_text()?, name, labels))
    }

    /// `plexus-agent portmap list --json` of this agent's pins and records: one object per
    /// mapping, with `protocol`, `host` (`address:port`) and the `flows` it tracks right now.
    pub fn portmap_list(&self) -> anyhow::Result<Vec<Value>> {
        let text = output(
            Command::new(&self.bin)
                .args(["portmap", "list", "--json", "--bpf-pin-dir"])
                .arg(self.root.join("bpffs"))
                .arg("--state-dir")
                .arg(self.root.join("state")),
        )?;
        serde_json::from_str(&text).context("plexus-agent portmap list --json")
    }

    /// `plexus-agent bandwidth list --json` of this agent's pins and records, in the node's
    /// namespace (where the interfaces whose XDP mode it reads are): one object per limited
    /// direction, with its counters and the XDP mode enforcing it.
    pub fn bandwidth_list(&self, node: &Netns) -> anyhow::Result<Vec<Value>> {
        let text = output(
            node.command(&self.bin)
                .args(["bandwidth", "list", "--json", "--bpf-pin-dir"])
                .arg(self.root.join("bpffs"))
                .arg("--state-dir")
                .arg(self.root.join("state")),
        )?;
        serde_json::from_str(&text).context("plexus-agent bandwidth list --json")
    }

    fn metrics_text(&self) -> anyhow::Result<String> {
        let addr = self.metrics.context("the agent was started without a metrics address")?;
        http_get_in(&self.netns_path, addr, "/metrics")
    }

    pub fn ipam_dir(&self) -> PathBuf {
        self.root.join("ipam")
    }

    /// Attachment records on disk.
    pub fn state_files(&self) -> Vec<String> {
        files_in(&self.root.join("state/attachments"))
    }

    pub fn write_nad(&self, name: &str, config: &Value) -> anyhow::Result<()> {
        let nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"config": config.to_string()},
        });
        std::fs::write(self.root.join(format!("nads/default_{name}.json")), nad.to_string())?;
        Ok(())
    }

    fn pod_manifest(&self, pod: &str) -> PathBuf {
        self.root.join(format!("pods/default_{pod}.json"))
    }

    /// The pod as the catalog will find it. The standalone catalog re-reads its directory on
    /// every ADD; the bench keeps only pods being added there, so the figures measure the
    /// agent, not the directory's size (the Kubernetes catalog answers from a cache).
    pub fn write_pod(&self, pod: &str, networks: &Value) -> anyhow::Result<()> {
        let manifest = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default",
                         "annotations": {"k8s.v1.cni.cncf.io/networks": networks.to_string()}},
        });
        std::fs::write(self.pod_manifest(pod), manifest.to_string())?;
        Ok(())
    }

    pub fn remove_pod(&self, pod: &str) {
        let _ = std::fs::remove_file(self.pod_manifest(pod));
    }
}

/// Removes what runs that were killed (SIGKILL, power loss) left: namespaces, cgroups and
/// bpffs mounts named after a process that no longer exists.
pub fn sweep_stale() {
    let dead = |name: &str| -> bool {
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        !digits.is_empty()
            && digits != std::process::id().to_string()
            && !Path::new(&format!("/proc/{digits}")).exists()
    };
    for failed in Netns::sweep_stale(NETNS_PREFIX) {
        eprintln!("could not remove a stale namespace {failed}");
    }
    if let Some(root) = cgroup2_root() {
        for g in files_in(&root) {
            if g.strip_prefix("pxb").is_some_and(|rest| dead(rest) && rest.contains('-')) {
                let _ = std::fs::remove_dir(root.join(g));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for m in mounts.lines().filter_map(|l| l.split_whitespace().nth(1)) {
        let stale = m.split('/').any(|part| part.strip_prefix("pxbench-").is_some_and(dead));
        if stale {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
    let tmp = std::env::temp_dir();
    for d in files_in(&tmp) {
        if d.strip_prefix("pxbench-").is_some_and(dead) {
            let _ = std::fs::remove_dir_all(tmp.join(d));
        }
    }
}

/// Starts `plexus-agent ARGS` in `node`, its output appended to `log`.
fn spawn_agent(node: &Netns, bin: &Path, args: &[OsString], log: &Path) -> anyhow::Result<Proc> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = node
        .command(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .context("starting plexus-agent")?;
    Ok(Proc(child))
}

/// A process that exits at once, held while an agent is being replaced.
fn spawn_placeholder() -> anyhow::Result<Proc> {
    Ok(Proc(Command::new("true").spawn().context("running true")?))
}
