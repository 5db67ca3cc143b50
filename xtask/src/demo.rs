//! The standalone demo: a node and six pods as network namespaces, networks and pods from
//! `deploy/examples/` (one network created through the CRI network API), the real agent and
//! the real `plexus` CNI binary, real traffic.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use plexus_testkit::{Bpffs, Netns, Proc};
use serde_json::Value;

use crate::util::{is_root, output, root};

const BASE: &str = "/run/plexus-demo";
const NODE: &str = "pxdemo-node";
const PODS: &[&str] = &["pod-a", "pod-b", "pod-c"];
/// Pods that ask for PodNetworks (KEP-3698) rather than NADs.
const KEP_PODS: &[&str] = &["pod-d", "pod-e"];
/// The pod whose runtime names its networks (the CRI network API's PodSandboxNetworkConfig).
const API_POD: &str = "pod-f";

/// Everything the demo created; dropping it removes all of it, also after a failure.
struct Demo {
    base: PathBuf,
    agent: Option<Proc>,
    namespaces: Vec<Netns>,
    /// Servers running in pods.
    children: Vec<Proc>,
    /// The bpffs the agent pins its eBPF objects on (unmounted last: that releases them).
    bpffs: Option<Bpffs>,
}

impl Drop for Demo {
    fn drop(&mut self) {
        self.agent.take();
        self.children.clear();
        while self.namespaces.pop().is_some() {}
        self.bpffs.take();
        if let Err(e) = std::fs::remove_dir_all(&self.base) {
            eprintln!("could not remove {}: {e}", self.base.display());
        }
    }
}

pub fn run() -> anyhow::Result<()> {
    if !is_root() {
        bail!("the demo creates network namespaces: run it as root");
    }
    let examples = root().join("deploy/examples");
    // Where cargo put the binaries it just built: CARGO_TARGET_DIR when set, as cargo does.
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"));
    let bin = target.join("debug");
    let mut demo = Demo {
        base: PathBuf::from(BASE),
        agent: None,
        namespaces: Vec::new(),
        children: Vec::new(),
        bpffs: None,
    };
    clean_previous_run();
    for sub in ["default", "nads", "pods", "state", "runtime"] {
        std::fs::create_dir_all(demo.base.join(sub)).with_context(|| format!("creating {BASE}/{sub}"))?;
    }
    copy_dir(&examples.join("default-network"), &demo.base.join("default"))?;
    copy_dir(&examples.join("networks"), &demo.base.join("nads"))?;
    copy_dir(&examples.join("pods"), &demo.base.join("pods"))?;
    name_the_web_uplink(&demo.base.join("nads/web.yaml"))?;

    // The agent runs under `ip netns exec`, which hides /sys/fs/bpf: its eBPF objects are
    // pinned on a bpffs of the demo's own.
    demo.bpffs = Some(Bpffs::try_mount(demo.base.join("bpffs"))?);
    step("node", "a network namespace stands in for the node; the agent runs in it");
    add_netns(&mut demo, NODE)?;
    start_agent(&mut demo, &bin)?;
    let conf = demo.base.join("runtime/00-plexus.conflist");
    wait_for(&conf, Duration::from_secs(5))?;
    println!("  agent ready: it wrote its CNI config {} (the default network exists)", conf.display());

    // The master of the macvlan network `lan`: on a real node, the NIC of that network.
    output(Command::new("ip").args([
        "-n",
        NODE,
        "link",
        "add",
        "plx-lan0",
        "type",
        "veth",
        "peer",
        "name",
        "plx-lan0p",
    ]))?;
    for link in ["plx-lan0", "plx-lan0p"] {
        output(Command::new("ip").args(["-n", NODE, "link", "set", link, "up"]))?;
    }
    web_client(&mut demo)?;
    println!("  {}", native_types(&demo.base));

    step("ADD", "the runtime's view: one `plexus` exec per pod, as containerd or CRI-O would run it");
    for pod in PODS {
        let ns = format!("pxdemo-{pod}");
        add_netns(&mut demo, &ns)?;
        let started = Instant::now();
        let out = shim(&bin, &demo.base, "ADD", pod, &ns)?;
        let result: Value = serde_json::from_str(&out).context("ADD result")?;
        let ip = result["ips"][0]["address"].as_str().unwrap_or("?");
        println!("  {pod}: attached in {} ms, default network address {ip}", started.elapsed().as_millis());
    }

    step("network-status", "what plexus reports per pod (the k8s.v1.cni.cncf.io/network-status annotation)");
    for pod in PODS {
        let status =
            std::fs::read_to_string(demo.base.join(format!("state/pods/default/{pod}.network-status.json")))
                .with_context(|| format!("network-status of {pod}"))?;
        println!("  {pod}:");
        for line in status.lines() {
            println!("    {line}");
        }
        let links = output(Command::new("ip").args(["-n", &format!("pxdemo-{pod}"), "-br", "addr"]))?;
        println!("  interfaces in {pod}:");
        for line in links.lines() {
            println!("    {line}");
        }
    }

    step(
        "traffic",
        "pod-a reaches pod-b over every secondary network they share (bridge, static IPAM, native macvlan)",
    );
    let status_b: Value = serde_json::from_str(&std::fs::read_to_string(
        demo.base.join("state/pods/default/pod-b.network-status.json"),
    )?)?;
    for entry in status_b.as_array().into_iter().flatten().filter(|e| e["default"] == false) {
        let Some(addr) = entry["ips"][0].as_str().and_then(|a| a.split('/').next()) else { continue };
        let ping = Command::new("ip")
            .args(["netns", "exec", "pxdemo-pod-a", "ping", "-c", "3", "-i", "0.2", "-W", "2", addr])
            .output()
            .context("running ping")?;
        let text = String::from_utf8_lossy(&ping.stdout);
        let summary = text.lines().find(|l| l.contains("packets transmitted")).unwrap_or("no reply");
        println!("  pod-a -> pod-b {addr} ({}): {summary}", entry["name"].as_str().unwrap_or(""));
        if !ping.status.success() {
            bail!(
                "pod-a could not reach pod-b at {addr}; agent log: {}",
                demo.base.join("agent.log").display()
            );
        }
    }

    port_mapping(&mut demo, &bin)?;
    bandwidth(&mut demo, &bin)?;
    pod_networks(&mut demo, &bin)?;
    network_api(&mut demo, &bin)?;

    step("DEL", "teardown in reverse order; nothing stays behind");
    for pod in PODS.iter().chain(KEP_PODS).chain([&API_POD]) {
        shim(&bin, &demo.base, "DEL", pod, &format!("pxdemo-{pod}"))?;
        let left: Vec<String> =
            output(Command::new("ip").args(["-n", &format!("pxdemo-{pod}"), "-br", "link"]))?
                .lines()
                .filter(|l| !l.starts_with("lo "))
                .map(str::to_owned)
                .collect();
        println!(
            "  {pod}: detached, interfaces left besides lo: {}",
            if left.is_empty() { "none".into() } else { left.join(", ") }
        );
    }
    println!("  {}", network_command(&bin, &["remove", "purple"])?.trim());
    let records = std::fs::read_dir(demo.base.join("state/attachments")).map(|d| d.count()).unwrap_or(0);
    println!("  attachment records left: {records}");
    let mappings = portmap_command(&bin, &demo.base, "list")?;
    println!("  port mappings left: {}", if mappings.lines().count() <= 1 { "none" } else { &mappings });
    let limits = bandwidth_list(&bin, &demo.base)?;
    println!("  bandwidth limits left: {}", if limits.lines().count() <= 1 { "none" } else { &limits });
    // The agent's own check, as an operator runs it on a node: anything no record explains.
    let doctor = Command::new("ip")
        .args(["netns", "exec", NODE])
        .arg(bin.join("plexus-agent"))
        .args(["doctor", "--state-dir", &format!("{BASE}/state"), "--bpf-pin-dir", &format!("{BASE}/bpffs")])
        .args(["--socket", &format!("{BASE}/plexus.sock")])
        .output()
        .context("running plexus-agent doctor")?;
    println!("  plexus-agent doctor (what the node holds that no record explains):");
    for line in String::from_utf8_lossy(&doctor.stdout).lines() {
        println!("    {line}");
    }
    if !doctor.status.success() {
        bail!("plexus-agent doctor found leftovers ({})", doctor.status);
    }
    println!("\ndemo complete; everything it created is being removed");
    Ok(())
}

/// The agent's own line saying which plugin types it runs in-process (macvlan among them).
fn native_types(base: &Path) -> String {
    let log = std::fs::read_to_string(base.join("agent.log")).unwrap_or_default();
    log.lines()
        .find_map(|l| l.split_once("plugin types run natively: ").map(|(_, types)| types.trim().to_owned()))
        .map(|types| format!("plugin types the agent runs itself, over netlink (no exec): {types}"))
        .unwrap_or_else(|| "the agent did not report its native plugin types".into())
}

fn step(name: &str, what: &str) {
    println!("\n== {name}: {what}");
}

fn clean_previous_run() {
    // A killed run left its bpffs mounted (a run that ended unmounted it: then this fails,
    // which is fine); the directory cannot go while it is.
    let _ = Command::new("umount").arg("-l").arg(format!("{BASE}/bpffs")).stderr(Stdio::null()).status();
    let _ = std::fs::remove_dir_all(BASE);
    if let Ok(list) = output(Command::new("ip").args(["netns", "list"])) {
        for ns in
            list.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| n.starts_with("pxdemo-"))
        {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn add_netns(demo: &mut Demo, name: &str) -> anyhow::Result<()> {
    demo.namespaces.push(Netns::try_named(name)?);
    Ok(())
}

fn start_agent(demo: &mut Demo, bin: &Path) -> anyhow::Result<()> {
    let base = &demo.base;
    let log = std::fs::File::create(base.join("agent.log")).context("agent log")?;
    let child = Command::new("ip")
        .args(["netns", "exec", NODE])
        .arg(bin.join("plexus-agent"))
        .arg("run")
        .args(["--socket", &format!("{BASE}/plexus.sock")])
        .args(["--state-dir", &format!("{BASE}/state")])
        .args(["--cni-bin-dir", "/usr/lib/cni"])
        .args(["--default-network-dir", &format!("{BASE}/default")])
        .args(["--network-conf-dir", &format!("{BASE}/default")])
        .args(["--runtime-conf-dir", &format!("{BASE}/runtime")])
        .args(["--nad-dir", &format!("{BASE}/nads")])
        .args(["--pod-dir", &format!("{BASE}/pods")])
        .args(["--bpf-pin-dir", &format!("{BASE}/bpffs")])
        .args(["--network-api-socket", &format!("{BASE}/network.sock")])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting plexus-agent")?;
    demo.agent = Some(Proc(child));
    wait_for(&base.join("plexus.sock"), Duration::from_secs(10))?;
    wait_for(&base.join("network.sock"), Duration::from_secs(10))
}

fn wait_for(path: &Path, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if Instant::now() > deadline {
            bail!("{} did not appear; agent log: {BASE}/agent.log", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// One CNI call through the real `plexus` binary, exactly as a runtime makes it; for
/// [`API_POD`], with the networks its sandbox names.
fn shim(bin: &Path, base: &Path, command: &str, pod: &str, netns: &str) -> anyhow::Result<String> {
    let mut config = serde_json::json!({
        "cniVersion": "1.0.0", "name": "plexus", "type": "plexus", "socket": base.join("plexus.sock"),
    });
    if pod == API_POD {
        config["runtimeConfig"] = serde_json::json!({"podSandboxNetworks": sandbox_networks()});
    }
    let mut child = Command::new(bin.join("plexus"))
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", format!("demo-{pod}"))
        .env("CNI_NETNS", format!("/run/netns/{netns}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .env("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running plexus")?;
    child.stdin.take().context("stdin")?.write_all(config.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("{command} {pod} failed: {stdout}");
    }
    Ok(stdout)
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))
            .with_context(|| format!("copying {}", entry.path().display()))?;
    }
    Ok(())
}

/// A TCP server on port 80 of pod-a: one line per connection, naming the client it sees.
const SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 80))
s.listen(8)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(("hello from pod-a port 80, you are %s:%d\n" % peer).encode())
    c.close()
"#;

/// A TCP client: prints the server's line.
const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
print(s.recv(200).decode().strip())
"#;

/// The client of the web network, on the bridge's wire.
const WEB_CLIENT: &str = "pxdemo-client";
/// The bridge's port it is behind: on a real node, the NIC enslaved to the bridge.
const WEB_UPLINK: &str = "plx-webcl";

/// The web network's bridge and a client namespace on its wire (a veth whose node end is a
/// port of the bridge), made before any pod joins the network: the bridge plugin adopts the
/// bridge, and plexus-portmap finds the port it is told is the uplink. Checksum offload off on
/// the client, so the translated packets' checksums are really checked.
fn web_client(demo: &mut Demo) -> anyhow::Result<()> {
    output(Command::new("ip").args(["-n", NODE, "link", "add", "plx-web", "type", "bridge"]))?;
    output(Command::new("ip").args(["-n", NODE, "link", "set", "plx-web", "up"]))?;
    add_netns(demo, WEB_CLIENT)?;
    output(
        Command::new("ip")
            .args(["-n", NODE, "link", "add", WEB_UPLINK, "type", "veth", "peer", "name", "eth0"])
            .args(["netns", WEB_CLIENT]),
    )?;
    output(Command::new("ip").args(["-n", NODE, "link", "set", WEB_UPLINK, "master", "plx-web", "up"]))?;
    output(Command::new("ip").args(["-n", WEB_CLIENT, "addr", "add", "10.30.0.200/24", "dev", "eth0"]))?;
    output(Command::new("ip").args(["-n", WEB_CLIENT, "link", "set", "eth0", "up"]))?;
    let _ =
        Command::new("ip").args(["netns", "exec", WEB_CLIENT, "ethtool", "-K", "eth0", "tx", "off"]).output();
    println!("  the web network's bridge plx-web, with a client behind its port {WEB_UPLINK} (the node's NIC on a real node)");
    Ok(())
}

/// The demo's copy of the web network names the client's port as the bridge's uplink, where
/// plexus-portmap's XDP program translates the client's requests (on a real node, the
/// bridge's NIC ports are its uplinks without naming them: a veth is not one).
fn name_the_web_uplink(nad: &Path) -> anyhow::Result<()> {
    const PORTMAP: &str = r#"{ "type": "plexus-portmap", "capabilities": { "portMappings": true } }"#;
    let text = std::fs::read_to_string(nad).with_context(|| format!("reading {}", nad.display()))?;
    if !text.contains(PORTMAP) {
        bail!("{} no longer chains {PORTMAP}: update the demo", nad.display());
    }
    let named = text.replace(
        PORTMAP,
        &format!(r#"{{ "type": "plexus-portmap", "capabilities": {{ "portMappings": true }}, "uplinks": ["{WEB_UPLINK}"] }}"#),
    );
    std::fs::write(nad, named).with_context(|| format!("writing {}", nad.display()))
}

/// pod-a asked for `hostPort 8080 → containerPort 80` on the `web` network, whose configlist
/// chains `plexus-portmap`: a client on that network reaches pod-a at the node's address there.
fn port_mapping(demo: &mut Demo, bin: &Path) -> anyhow::Result<()> {
    step(
        "port mapping",
        "pod-a maps hostPort 8080 to its port 80 on the web network: eBPF programs on the node translate (XDP on the bridge's uplink, which redirects the requests into the pod's veth; TC on the bridge and the veth), no iptables",
    );
    let mut server = Command::new("ip")
        .args(["netns", "exec", "pxdemo-pod-a", "python3", "-c", SERVER])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting a server in pod-a")?;
    let stdout = server.stdout.take().context("server stdout")?;
    demo.children.push(Proc(server));
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut ready)?;

    let client = WEB_CLIENT;
    let reply = output(Command::new("ip").args([
        "netns",
        "exec",
        client,
        "python3",
        "-c",
        CLIENT,
        "10.30.0.1",
        "8080",
    ]))
    .context("the client could not reach 10.30.0.1:8080")?;
    println!("  client 10.30.0.200 -> node 10.30.0.1:8080: {}", reply.trim());
    let reply = output(Command::new("ip").args([
        "netns",
        "exec",
        NODE,
        "python3",
        "-c",
        CLIENT,
        "10.30.0.1",
        "8080",
    ]))
    .context("the node could not reach 10.30.0.1:8080")?;
    println!("  the node itself -> 10.30.0.1:8080:       {}", reply.trim());
    // The mapping tracks flows: only replies of mapped connections are rewritten, so the pod's
    // own address keeps working for peers on its network.
    let pod_ip = network_ip(demo, "pod-a", "default/web")?;
    let reply =
        output(Command::new("ip").args(["netns", "exec", client, "python3", "-c", CLIENT, &pod_ip, "80"]))
            .with_context(|| format!("the client could not reach pod-a directly at {pod_ip}:80"))?;
    println!("  client 10.30.0.200 -> pod-a {pod_ip}:80 directly: {}", reply.trim());
    println!("  plexus-agent portmap list (the pinned BPF maps, with the programs' counters; PATH: where requests are translated):");
    for line in portmap_command(bin, &demo.base, "list")?.lines() {
        println!("    {line}");
    }
    println!("  plexus-agent portmap flows (the flow table: closed connections linger, as in conntrack):");
    for line in portmap_command(bin, &demo.base, "flows")?.lines() {
        println!("    {line}");
    }
    Ok(())
}

/// The first address of `pod` on `network` (namespace/name), from the network-status the agent
/// wrote.
fn network_ip(demo: &Demo, pod: &str, network: &str) -> anyhow::Result<String> {
    let path = demo.base.join(format!("state/pods/default/{pod}.network-status.json"));
    let status: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    status
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == network)
        .and_then(|e| e["ips"][0].as_str())
        .and_then(|a| a.split('/').next())
        .map(str::to_owned)
        .with_context(|| format!("{} names no address of {pod} on {network}", path.display()))
}

/// `plexus-agent portmap list` (which names the pods, from the state directory, and says where
/// each mapping's requests are translated) or `flows`.
fn portmap_command(bin: &Path, base: &Path, command: &str) -> anyhow::Result<String> {
    // In the node's namespace, whose interfaces' XDP modes `list` reads.
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NODE]).arg(bin.join("plexus-agent"));
    cmd.args(["portmap", command, "--bpf-pin-dir"]).arg(base.join("bpffs"));
    if command == "list" {
        cmd.arg("--state-dir").arg(base.join("state"));
    }
    output(&mut cmd)
}

/// pod-b asked for 50 Mbit/s each way on the `web` network, whose configlist chains
/// `plexus-bandwidth`: iperf3 from the client namespace measures what gets through.
fn bandwidth(demo: &mut Demo, bin: &Path) -> anyhow::Result<()> {
    step(
        "bandwidth",
        "pod-b is limited to 50 Mbit/s each way on the web network: eBPF programs on its veth, no tbf or ifb",
    );
    let addr = network_ip(demo, "pod-b", "default/web")?;
    let server = Command::new("ip")
        .args(["netns", "exec", "pxdemo-pod-b", "iperf3", "-s", "-p", "5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 in pod-b (cargo xtask setup installs it)")?;
    demo.children.push(Proc(server));
    for (direction, reverse) in [("to pod-b (ingress)", false), ("from pod-b (egress)", true)] {
        let measured = iperf_rate(WEB_CLIENT, &addr, reverse)?;
        println!(
            "  client -> {addr}, {direction}: {:.1} Mbit/s measured for a 50 Mbit/s limit",
            measured / 1e6
        );
    }
    println!("  plexus-agent bandwidth list (the pinned BPF maps, with the programs' counters):");
    for line in bandwidth_list(bin, &demo.base)?.lines() {
        println!("    {line}");
    }
    Ok(())
}

/// pod-d asks for the PodNetwork blue-pn, pod-e for the PodNetworkAttachment web-slow (the
/// PodNetwork web-pn with a 20 Mbit/s bandwidth parameter): the same engine attaches them,
/// and the agent reports the KEP's status next to network-status.
fn pod_networks(demo: &mut Demo, bin: &Path) -> anyhow::Result<()> {
    step(
        "PodNetworks",
        "pod-d asks for the PodNetwork blue-pn, pod-e for the PodNetworkAttachment web-slow (KEP-3698, plexus.dev/pod-networks)",
    );
    for pod in KEP_PODS {
        let ns = format!("pxdemo-{pod}");
        add_netns(demo, &ns)?;
        shim(bin, &demo.base, "ADD", pod, &ns)?;
        let status = std::fs::read_to_string(
            demo.base.join(format!("state/pods/default/{pod}.pod-networks-status.json")),
        )
        .with_context(|| format!("the KEP status of {pod}"))?;
        println!("  {pod}: the KEP status (the plexus.dev/pod-networks-status annotation):");
        for line in status.lines() {
            println!("    {line}");
        }
    }
    let pod_a = network_ip(demo, "pod-a", "default/blue")?;
    let ping = Command::new("ip")
        .args(["netns", "exec", "pxdemo-pod-d", "ping", "-c", "3", "-i", "0.2", "-W", "2", &pod_a])
        .output()
        .context("running ping")?;
    let text = String::from_utf8_lossy(&ping.stdout);
    let summary = text.lines().find(|l| l.contains("packets transmitted")).unwrap_or("no reply");
    println!("  pod-d (PodNetwork blue-pn) -> pod-a {pod_a} (NAD blue, the same network): {summary}");
    if !ping.status.success() {
        bail!("pod-d could not reach pod-a at {pod_a}; agent log: {}", demo.base.join("agent.log").display());
    }
    let addr = network_ip(demo, "pod-e", "default/web")?;
    let server = Command::new("ip")
        .args(["netns", "exec", "pxdemo-pod-e", "iperf3", "-s", "-p", "5201"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 in pod-e")?;
    demo.children.push(Proc(server));
    let measured = iperf_rate(WEB_CLIENT, &addr, false)?;
    println!(
        "  client -> pod-e {addr}: {:.1} Mbit/s measured for the 20 Mbit/s of its AttachmentParameters",
        measured / 1e6
    );
    println!("  plexus-agent bandwidth list:");
    for line in bandwidth_list(bin, &demo.base)?.lines() {
        println!("    {line}");
    }
    Ok(())
}

/// What the runtime of [`API_POD`] passes: its sandbox's PodSandboxNetworkConfig list, the
/// proto's JSON mapping. The first entry takes the default network's place.
fn sandbox_networks() -> Value {
    serde_json::json!([
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "net1", "networkName": "purple"},
    ])
}

/// `plexus-agent network <args>` on the demo agent's network API socket: its output.
fn network_command(bin: &Path, args: &[&str]) -> anyhow::Result<String> {
    output(
        Command::new(bin.join("plexus-agent"))
            .arg("network")
            .args(args)
            .args(["--socket", &format!("{BASE}/network.sock")]),
    )
}

/// The CRI network API: the network purple is created through it (not as a NAD), pod-f's
/// runtime names purple among its sandbox's networks, the list shows every network with its
/// measured status, and the agent says which of pod-f's IPs is on which network.
fn network_api(demo: &mut Demo, bin: &Path) -> anyhow::Result<()> {
    step(
        "network API",
        "the CRI network API: `plexus-agent network set` creates purple; pod-f's runtime names its networks",
    );
    let file = root().join("deploy/examples/network-api/purple.yaml");
    println!("  plexus-agent network set -f {}", file.display());
    println!("    {}", network_command(bin, &["set", "-f", &file.display().to_string()])?.trim());

    let ns = format!("pxdemo-{API_POD}");
    add_netns(demo, &ns)?;
    shim(bin, &demo.base, "ADD", API_POD, &ns)?;
    println!("  {API_POD}: its runtime passed runtimeConfig.podSandboxNetworks = {}", sandbox_networks());
    let links = output(Command::new("ip").args(["-n", &ns, "-br", "addr"]))?;
    println!("  interfaces in {API_POD}:");
    for line in links.lines() {
        println!("    {line}");
    }
    println!("  plexus-agent network list (every network, with its measured status):");
    for line in network_command(bin, &["list"])?.lines() {
        println!("    {line}");
    }
    let sandbox = format!("demo-{API_POD}");
    println!("  plexus-agent network ips {sandbox} (which IP is on which network):");
    for line in network_command(bin, &["ips", &sandbox])?.lines() {
        println!("    {line}");
    }
    Ok(())
}

/// Goodput in bit/s of a 3-second iperf3 run (after one omitted second) from `client`.
fn iperf_rate(client: &str, addr: &str, reverse: bool) -> anyhow::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", client, "iperf3", "-J", "-c", addr, "-t", "3", "-O", "1"]);
        if reverse {
            cmd.arg("-R");
        }
        let out = cmd.output().context("running iperf3")?;
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(bps) = report["end"]["sum_received"]["bits_per_second"].as_f64() {
            return Ok(bps);
        }
        if Instant::now() > deadline {
            bail!("iperf3 to {addr} failed: {}", report["error"].as_str().unwrap_or("no report"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn bandwidth_list(bin: &Path, base: &Path) -> anyhow::Result<String> {
    output(
        Command::new(bin.join("plexus-agent"))
            .args(["bandwidth", "list", "--bpf-pin-dir"])
            .arg(base.join("bpffs"))
            .arg("--state-dir")
            .arg(base.join("state")),
    )
}
