//! Live attachments: a running pod's attachments follow its networks annotation, through the
//! real shim and the real agent, standalone (pod manifests) and in Kubernetes mode (the
//! in-process test API server).
//!
//! One story in both modes: a pod started with the default network alone gains a bridge
//! attachment with a port mapping and a bandwidth limit, then a native macvlan one without an
//! interface name (it gets the next free `netN`), loses the first, has the macvlan's bandwidth
//! changed in place (iperf3 before and after; the interface is not re-created); a change whose
//! last addition fails leaves the pod exactly as it was (links, addresses, records, IPAM) and
//! records a `LiveAttachmentFailed` event. After each step the published network-status lists
//! exactly the interfaces in the pod's namespace, with their addresses. DEL leaves nothing.
//! In both modes too: the agent killed during a live ADD converges when it starts again, and
//! so does a change made while it is down. Standalone also: a changed NAD re-attaches only a
//! pod that asks (and a failed re-attach restores the old attachment), and
//! `--no-live-attachments` leaves the pod alone.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use plexus_agent::dataplane::bandwidth::plan::BUCKET_NS;
use plexus_tests::test_apiserver::{nad, pod, rbac, ServerOptions, TestApiServer, EVENTS, PODS};
use plexus_tests::traffic::{cid, client_namespace, forward_into, no_dad, plain};
use plexus_tests::world::bin;
use plexus_tests::{Netns, Proc, World};
use serde_json::{json, Value};

const NODE: &str = "node-1";
const NS: &str = "default";
const POD: &str = "live1";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const MBIT: u64 = 1_000_000;
/// The macvlan network's master: the node end of the traffic client's veth.
const MASTER: &str = "lvm0";

/// Where the pod's annotation is written and its reports read: manifest files, or the API.
trait Cluster {
    fn world(&self) -> &World;
    fn world_mut(&mut self) -> &mut World;
    fn set_networks(&self, annotation: Option<&str>);
    /// The published network-status, if any.
    fn network_status(&self) -> Option<Value>;
    /// The pod's events, one "reason: message" per line.
    fn events(&self) -> String;
    fn write_nad(&self, name: &str, config: &str);
    /// Starts the agent and waits until it is ready.
    fn start(&mut self);
}

struct Standalone {
    w: World,
}

impl Cluster for Standalone {
    fn world(&self) -> &World {
        &self.w
    }
    fn world_mut(&mut self) -> &mut World {
        &mut self.w
    }
    fn set_networks(&self, annotation: Option<&str>) {
        self.w.write_pod(NS, POD, annotation);
    }
    fn network_status(&self) -> Option<Value> {
        let path = self.w.path("state").join("pods").join(NS).join(format!("{POD}.network-status.json"));
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }
    fn events(&self) -> String {
        self.w
            .events(NS, POD)
            .lines()
            .map(|l| l.replacen("Warning\t", "", 1).replacen('\t', ": ", 1) + "\n")
            .collect()
    }
    fn write_nad(&self, name: &str, config: &str) {
        self.w.write_nad(NS, name, Some(config));
    }
    fn start(&mut self) {
        start_and_wait(&mut self.w, &[]);
    }
}

struct Kube {
    w: World,
    api: TestApiServer,
}

impl Kube {
    fn new() -> Kube {
        let mut w = World::new();
        let api = TestApiServer::start_with(ServerOptions {
            rbac: Some(rbac::deploy_rules()),
            ..Default::default()
        });
        forward_into(&w.node, &api.url());
        w.agent_args.extend([
            "--catalog".into(),
            "kube".into(),
            "--kubeconfig".into(),
            api.kubeconfig().display().to_string(),
            "--node-name".into(),
            NODE.into(),
        ]);
        Kube { w, api }
    }
}

impl Cluster for Kube {
    fn world(&self) -> &World {
        &self.w
    }
    fn world_mut(&mut self) -> &mut World {
        &mut self.w
    }
    fn set_networks(&self, annotation: Option<&str>) {
        match self.api.get(PODS, NS, POD) {
            // An update of the running pod, as `kubectl annotate` makes.
            Some(mut p) => {
                match annotation {
                    Some(a) => p["metadata"]["annotations"][NETWORKS] = json!(a),
                    None => {
                        if let Some(m) = p["metadata"]["annotations"].as_object_mut() {
                            m.remove(NETWORKS);
                        }
                    }
                }
                self.api.apply(p);
            }
            None => {
                let annotations: Vec<(&str, &str)> = annotation.map(|a| (NETWORKS, a)).into_iter().collect();
                self.api.apply(pod(NS, POD, NODE, &annotations));
            }
        }
    }
    fn network_status(&self) -> Option<Value> {
        let p = self.api.get(PODS, NS, POD)?;
        serde_json::from_str(p["metadata"]["annotations"][NETWORK_STATUS].as_str()?).ok()
    }
    fn events(&self) -> String {
        self.api
            .objects(EVENTS)
            .into_iter()
            .filter(|e| e["regarding"]["name"] == POD)
            .map(|e| {
                format!("{}: {}\n", e["reason"].as_str().unwrap_or(""), e["note"].as_str().unwrap_or(""))
            })
            .collect()
    }
    fn write_nad(&self, name: &str, config: &str) {
        self.api.apply(nad(NS, name, Some(config)));
    }
    fn start(&mut self) {
        start_and_wait(&mut self.w, &["NetworkAttachmentDefinitions: initial state complete"]);
    }
}

/// Starts the agent and waits until its dataplane (and `also` in its log) is ready.
fn start_and_wait(w: &mut World, also: &[&str]) {
    let starts = plain(&w.agent_log()).matches("port mappings reconciled").count();
    w.start_agent();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = plain(&w.agent_log());
        if log.matches("port mappings reconciled").count() > starts
            && log.matches("bandwidth limits reconciled").count() > starts
            && also.iter().all(|a| log.contains(a))
        {
            return;
        }
        assert!(Instant::now() < deadline, "the agent never got ready:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A bridge network chaining the eBPF port mappings and bandwidth limits.
fn bridge_nad(w: &World, name: &str, bridge: &str, subnet: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": w.path("ipam").join(name)}},
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

/// The native macvlan on [`MASTER`], with eBPF bandwidth limits.
fn macvlan_nad(w: &World, name: &str, master: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "macvlan", "master": master, "mode": "bridge",
             "ipam": {"type": "host-local",
                      "ranges": [[{"subnet": "10.82.0.0/24", "rangeStart": "10.82.0.10", "rangeEnd": "10.82.0.99"}]],
                      "dataDir": w.path("ipam").join(name)}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

fn rate(mbit: u64) -> Value {
    json!({"ingressRate": mbit * MBIT, "egressRate": mbit * MBIT})
}

/// `plexus-agent <tool> list --json` rows of the pod's container.
fn rows(w: &World, tool: &str) -> Vec<Value> {
    let out = Command::new(bin("plexus-agent"))
        .args([tool, "list", "--json", "--state-dir"])
        .arg(w.path("state"))
        .args(
            w.bpffs
                .as_ref()
                .map(|b| vec!["--bpf-pin-dir".into(), b.path().display().to_string()])
                .unwrap_or_default(),
        )
        .output()
        .expect("running plexus-agent list");
    assert!(out.status.success(), "{tool} list: {}", String::from_utf8_lossy(&out.stderr));
    let all: Vec<Value> = serde_json::from_slice(&out.stdout).expect("list JSON");
    all.into_iter().filter(|r| r["container_id"] == cid(POD)).collect()
}

/// The pod's interfaces but `lo`, sorted.
fn links(pod: &Netns) -> Vec<String> {
    let mut names: Vec<String> = pod.link_names().into_iter().filter(|n| n != "lo").collect();
    names.sort();
    names
}

/// Waits until the pod's namespace holds exactly `ifnames` and the published network-status
/// lists exactly those interfaces, each with the IPv4 addresses it has in the namespace.
#[track_caller]
fn converged(c: &dyn Cluster, pod: &Netns, ifnames: &[&str]) -> Value {
    let mut want: Vec<String> = ifnames.iter().map(|s| (*s).to_owned()).collect();
    want.sort();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let have = links(pod);
        let last = if let Some(status) = c.network_status() {
            let mut listed: Vec<String> = status
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["interface"].as_str().map(str::to_owned))
                .collect();
            listed.sort();
            let addresses_match = have == want
                && listed == want
                && status.as_array().into_iter().flatten().all(|e| {
                    let ifname = e["interface"].as_str().unwrap_or_default();
                    let inside = v4_of(pod, ifname);
                    let mut published: Vec<String> = e["ips"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect();
                    published.sort();
                    inside == published
                });
            if have == want && listed == want && addresses_match {
                return status;
            }
            format!("links {have:?}, status {status:#}")
        } else {
            format!("links {have:?}, no status")
        };
        assert!(
            Instant::now() < deadline,
            "never converged to {want:?}: {last}\nagent log:\n{}",
            c.world().agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The IPv4 addresses (without prefix) of `ifname` in the pod; empty while it does not exist.
fn v4_of(pod: &Netns, ifname: &str) -> Vec<String> {
    let text = pod.try_ip(&["-j", "addr", "show", "dev", ifname]).unwrap_or_default();
    let links: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
    let mut out: Vec<String> = links
        .iter()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["family"] == "inet")
        .filter_map(|a| a["local"].as_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

/// The interface index of `ifname` in the pod.
fn ifindex(pod: &Netns, ifname: &str) -> u64 {
    pod.link(ifname).and_then(|l| l["ifindex"].as_u64()).unwrap_or_else(|| panic!("no {ifname}"))
}

/// How long [`iperf`] measures, after the second it leaves out.
const MEASURED_SECS: u64 = 4;

/// Goodput (bit/s) from the client namespace to the pod's iperf3 server, the first second left
/// out; a measurement that fails (the server not listening yet) is repeated for up to 10 s.
fn iperf(client: &str, server: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let secs = MEASURED_SECS.to_string();
    loop {
        let out = Command::new("ip")
            .args(["netns", "exec", client, "iperf3", "-J", "-c", server, "-t", &secs, "-O", "1"])
            .output()
            .expect("running iperf3");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(bps) = report["end"]["sum_received"]["bits_per_second"].as_f64() {
            return bps;
        }
        assert!(Instant::now() < deadline, "iperf3 to {server}: {}", String::from_utf8_lossy(&out.stdout));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The measured rate is the limit's, within what a token bucket allows: at most one bucket
/// ([`BUCKET_NS`] of the rate) on top of it, where the bucket was still full when the measured
/// seconds began (the sender ramped up slowly in the second left out, on a busy machine), and
/// 2% for the measurement's own edges.
#[track_caller]
fn assert_rate(what: &str, got: f64, mbit: u64) {
    let ratio = got / (mbit * MBIT) as f64;
    let most = 1.02 + BUCKET_NS as f64 / (MEASURED_SECS * 1_000_000_000) as f64;
    assert!((0.85..=most).contains(&ratio), "{what}: {:.2} Mbit/s for a limit of {mbit} Mbit/s", got / 1e6);
}

/// What a failed change must leave exactly as it was.
fn snapshot(c: &dyn Cluster, pod: &Netns) -> (Vec<String>, Vec<Vec<String>>, Vec<String>, Vec<String>) {
    let w = c.world();
    let ifnames = links(pod);
    let addresses = ifnames.iter().map(|i| pod.addresses(i)).collect();
    let record =
        std::fs::read_to_string(w.path("state").join("attachments").join(format!("{}@eth0.json", cid(POD))))
            .expect("the pod's record");
    (ifnames, addresses, vec![record], w.ipam_allocations())
}

/// The whole story (see the module's documentation) in cluster `c`.
fn story(c: &mut dyn Cluster) {
    c.world_mut().pin_on_own_bpffs();
    no_dad(&c.world().node);
    let client = client_namespace(&c.world().node, "lvcl", MASTER, &["10.82.0.200/24"]);
    let bridge = bridge_nad(c.world(), "livebr", "livebr0", "10.81.0.0/24");
    c.write_nad("livebr", &bridge);
    let macvlan = macvlan_nad(c.world(), "livemv", MASTER);
    c.write_nad("livemv", &macvlan);
    // A network whose ADD fails: its master does not exist.
    let broken = macvlan_nad(c.world(), "livebad", "nosuchmaster0");
    c.write_nad("livebad", &broken);
    let other_bridge = bridge_nad(c.world(), "livebr2", "livebr1", "10.83.0.0/24");
    c.write_nad("livebr2", &other_bridge);
    c.set_networks(None);
    c.start();

    let pod = Netns::new("lvpod");
    no_dad(&pod);
    c.world().add(&cid(POD), &pod, (NS, POD)).expect_ok();
    converged(c, &pod, &["eth0"]);

    // 1. A bridge attachment with a port mapping and a bandwidth limit.
    let with_bridge = json!([{"name": "livebr", "interface": "net1",
        "portMappings": [{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"}],
        "bandwidth": rate(20)}]);
    c.set_networks(Some(&with_bridge.to_string()));
    let status = converged(c, &pod, &["eth0", "net1"]);
    assert!(status
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "default/livebr" && e["interface"] == "net1"));
    let pm = rows(c.world(), "portmap");
    assert!(
        pm.iter().any(|r| r["ifname"] == "net1" && r["host"].as_str().is_some_and(|h| h.ends_with(":18080"))),
        "{pm:#?}"
    );
    let bw = rows(c.world(), "bandwidth");
    assert!(bw.iter().any(|r| r["ifname"] == "net1" && r["rate_bps"] == 20 * MBIT), "{bw:#?}");

    // 2. A native macvlan without an interface name: the next free netN, with a limit.
    let both = json!([with_bridge[0], {"name": "livemv", "bandwidth": rate(10)}]);
    c.set_networks(Some(&both.to_string()));
    converged(c, &pod, &["eth0", "net1", "net2"]);

    // 3. The bridge goes: its interface, port mapping, limit and address with it.
    let macvlan_only = json!([{"name": "livemv", "bandwidth": rate(10)}]);
    c.set_networks(Some(&macvlan_only.to_string()));
    converged(c, &pod, &["eth0", "net2"]);
    assert!(rows(c.world(), "portmap").is_empty());
    assert!(rows(c.world(), "bandwidth").iter().all(|r| r["ifname"] == "net2"));
    assert!(
        !c.world().ipam_allocations().iter().any(|a| a.starts_with("livebr/")),
        "{:?}",
        c.world().ipam_allocations()
    );

    // 4. The macvlan's bandwidth changes in place: same interface, new rate, measured.
    let addr = pod.addresses("net2").into_iter().find(|a| !a.contains(':')).expect("net2 address");
    let addr = addr.split('/').next().unwrap_or_default().to_owned();
    let server = Proc(
        pod.command("iperf3")
            .args(["-s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3 -s"),
    );
    assert_rate("before", iperf(&client.name, &addr), 10);
    let index = ifindex(&pod, "net2");
    let faster = json!([{"name": "livemv", "bandwidth": rate(40)}]);
    c.set_networks(Some(&faster.to_string()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !rows(c.world(), "bandwidth").iter().all(|r| r["rate_bps"] == 40 * MBIT) {
        assert!(Instant::now() < deadline, "the limit never changed:\n{}", c.world().agent_log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(ifindex(&pod, "net2"), index, "the interface was re-created");
    assert_rate("after", iperf(&client.name, &addr), 40);
    drop(server);
    converged(c, &pod, &["eth0", "net2"]);

    // 5. A change whose last addition fails: the earlier addition is undone too, nothing else
    //    changes, and the pod gets an event naming the network.
    let before = snapshot(c, &pod);
    let failing = json!([faster[0], {"name": "livebr2"}, {"name": "livebad"}]);
    c.set_networks(Some(&failing.to_string()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.events().contains("LiveAttachmentFailed") {
        assert!(
            Instant::now() < deadline,
            "no event:\n{}\nagent log:\n{}",
            c.events(),
            c.world().agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(c.events().contains("default/livebad"), "{}", c.events());
    assert_eq!(snapshot(c, &pod), before);
    converged(c, &pod, &["eth0", "net2"]);
    // Not retried while the request stays the same.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.events().matches("LiveAttachmentFailed").count(), 1, "{}", c.events());

    // DEL leaves nothing behind.
    let out = c.world().del(&cid(POD), &pod, (NS, POD));
    assert!(out.ok(), "DEL: {} {}", out.stdout, out.stderr);
    c.world().assert_nothing_left(&[&pod]);
    drop(client);
}

#[test]
fn kernel_standalone_a_running_pod_follows_its_selection() {
    story(&mut Standalone { w: World::new() });
}

#[test]
fn kernel_kubernetes_a_running_pod_follows_its_selection() {
    story(&mut Kube::new());
}

/// A bridge wrapper that answers its ADD only after a pause while the file `flag` exists, so
/// the agent can be killed while a live ADD is running (the bridge made, its answer not yet
/// received).
fn slow_bridge(flag: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\nout=$({}/bridge) || {{ rc=$?; echo \"$out\"; exit $rc; }}\n\
         if [ \"$CNI_COMMAND\" = ADD ] && [ -e {} ]; then sleep 3; fi\necho \"$out\"\n",
        plexus_tests::REFERENCE_PLUGINS,
        flag.display()
    )
}

/// The agent killed during a live ADD converges when it starts again; so does a change made
/// while it is down.
fn restart_mid_change(c: &mut dyn Cluster) {
    c.world_mut().pin_on_own_bpffs();
    let bins = c.world().path("bin");
    std::fs::create_dir_all(&bins).unwrap();
    let script = bins.join("slowbridge");
    let flag = c.world().path("slow");
    std::fs::write(&script, slow_bridge(&flag)).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(&flag, "").unwrap();
    c.world_mut().agent_args.extend(["--cni-bin-dir".into(), bins.display().to_string()]);
    let mut config: Value =
        serde_json::from_str(&bridge_nad(c.world(), "slow", "livebr3", "10.84.0.0/24")).unwrap();
    config["plugins"][0]["type"] = json!("slowbridge");
    c.write_nad("slow", &config.to_string());
    c.set_networks(None);
    c.start();
    let pod = Netns::new("lvpod");
    no_dad(&pod);
    c.world().add(&cid(POD), &pod, (NS, POD)).expect_ok();

    c.set_networks(Some(r#"[{"name":"slow"}]"#));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pod.has_link("net1") {
        assert!(Instant::now() < deadline, "the live ADD never started:\n{}", c.world().agent_log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The bridge is made, its ADD not answered: the record says so.
    let record_path = c.world().path("state").join("attachments").join(format!("{}@eth0.json", cid(POD)));
    let record = std::fs::read_to_string(&record_path).unwrap();
    assert!(record.contains("\"live_pending\": true"), "{record}");
    c.world_mut().kill_agent();
    std::fs::remove_file(&flag).unwrap();
    c.start();
    let status = converged(c, &pod, &["eth0", "net1"]);
    assert_eq!(plexus_tests::status_of(&status, "net1")["name"], "default/slow");
    let log = plain(&c.world().agent_log());
    assert!(log.contains("undoing live attachments an earlier agent did not finish"), "{log}");
    let slow =
        |c: &dyn Cluster| c.world().ipam_allocations().iter().filter(|a| a.starts_with("slow/")).count();
    assert_eq!(slow(c), 1, "{:?}", c.world().ipam_allocations());

    // Changed while the agent is down: applied when it starts.
    c.world_mut().kill_agent();
    c.set_networks(None);
    c.start();
    converged(c, &pod, &["eth0"]);
    assert_eq!(slow(c), 0, "{:?}", c.world().ipam_allocations());

    let out = c.world().del(&cid(POD), &pod, (NS, POD));
    assert!(out.ok(), "DEL: {} {}", out.stdout, out.stderr);
    c.world().assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_standalone_the_agent_restarting_mid_change_converges() {
    restart_mid_change(&mut Standalone { w: World::new() });
}

#[test]
fn kernel_kubernetes_the_agent_restarting_mid_change_converges() {
    restart_mid_change(&mut Kube::new());
}

#[test]
fn kernel_standalone_with_live_attachments_off_a_running_pod_is_left_alone() {
    let mut w = World::new();
    w.pin_on_own_bpffs();
    w.agent_args.push("--no-live-attachments".into());
    let bridge = bridge_nad(&w, "livebr", "livebr4", "10.85.0.0/24");
    w.write_nad(NS, "livebr", Some(&bridge));
    w.write_pod(NS, POD, None);
    let mut c = Standalone { w };
    c.start();
    let pod = Netns::new("lvpod");
    c.w.add(&cid(POD), &pod, (NS, POD)).expect_ok();
    c.set_networks(Some(r#"[{"name":"livebr"}]"#));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(links(&pod), ["eth0"]);
    assert!(plain(&c.w.agent_log()).contains("live attachments are off"));
    let out = c.w.del(&cid(POD), &pod, (NS, POD));
    assert!(out.ok(), "DEL: {} {}", out.stdout, out.stderr);
    c.w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_standalone_a_changed_network_config_reattaches_only_pods_that_ask() {
    let mut w = World::new();
    w.pin_on_own_bpffs();
    w.agent_args.extend(["--live-resync-secs".into(), "1".into()]);
    w.write_nad(NS, "livebr", Some(&bridge_nad(&w, "livebr", "livebr5", "10.86.0.0/24")));
    // `pad`: spaces in the annotation, which make it a new request with the same selection.
    let write_pod = |w: &World, reattach: bool, pad: &str| {
        let mut annotations = json!({NETWORKS: format!(r#"{pad}[{{"name":"livebr"}}]"#)});
        if reattach {
            annotations["plexus.dev/reattach-on-config-change"] = json!("true");
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": POD, "namespace": NS, "annotations": annotations}});
        std::fs::write(w.path("pods").join(format!("{NS}_{POD}.json")), pod.to_string()).unwrap();
    };
    write_pod(&w, false, "");
    let mut c = Standalone { w };
    c.start();
    let pod = Netns::new("lvpod");
    no_dad(&pod);
    c.w.add(&cid(POD), &pod, (NS, POD)).expect_ok();
    converged(&c, &pod, &["eth0", "net1"]);
    let v4 = |pod: &Netns| v4_of(pod, "net1");
    assert!(v4(&pod)[0].starts_with("10.86.0."), "{:?}", v4(&pod));

    // The network's config changes: a pod that did not ask keeps its attachment as it is.
    // (The new config cannot be attached: its bridge already has the old gateway address.)
    c.w.write_nad(NS, "livebr", Some(&bridge_nad(&c.w, "livebr", "livebr5", "10.87.0.0/24")));
    std::thread::sleep(Duration::from_secs(3));
    assert!(v4(&pod)[0].starts_with("10.86.0."), "{:?}", v4(&pod));

    // Asked, and the new config fails: the attachment is back as it was, with an event.
    write_pod(&c.w, true, "");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.events().contains("LiveAttachmentFailed") {
        assert!(Instant::now() < deadline, "no event:\n{}", c.w.agent_log());
        std::thread::sleep(Duration::from_millis(100));
    }
    converged(&c, &pod, &["eth0", "net1"]);
    assert!(v4(&pod)[0].starts_with("10.86.0."), "{:?}", v4(&pod));

    // A config that works (and the request said again): re-attached on the same interface.
    c.w.write_nad(NS, "livebr", Some(&bridge_nad(&c.w, "livebr", "livebr6", "10.87.0.0/24")));
    write_pod(&c.w, true, " ");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !v4(&pod).first().is_some_and(|a| a.starts_with("10.87.0.")) {
        assert!(Instant::now() < deadline, "never re-attached:\n{}", c.w.agent_log());
        std::thread::sleep(Duration::from_millis(100));
    }
    converged(&c, &pod, &["eth0", "net1"]);
    assert!(plain(&c.w.agent_log()).contains("network config changed: re-attaching"));

    let out = c.w.del(&cid(POD), &pod, (NS, POD));
    assert!(out.ok(), "DEL: {} {}", out.stdout, out.stderr);
    c.w.assert_nothing_left(&[&pod]);
}
