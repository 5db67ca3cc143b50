//! `plexus-agent doctor [--fix]` against a real agent: every kind of leftover is planted next to
//! a healthy pod, doctor lists each one and none of the healthy pod's, `--fix` removes them
//! all (a record whose namespace is gone through the agent's own DEL), and doctor is clean
//! afterwards while the healthy pod keeps its mapping, limit and address.
//!
//! Containers no record of plexus lists (pods attached by the default network before plexus was
//! installed) are judged by their liveness: the runtime's sandboxes (a fake CRI runtime,
//! `tests/py/cri_server.py`) or, with no runtime, the network namespaces their result cache
//! files name. What a live one holds is never listed nor freed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_agent::dataplane::attach::Hook;
use plexus_agent::dataplane::bandwidth::plan::{Direction, Entry as Limit, Mechanism};
use plexus_agent::dataplane::bandwidth::table::Table;
use plexus_agent::dataplane::maps::addr_words;
use plexus_agent::dataplane::pin::PinDir;
use plexus_agent::dataplane::portmap::entries::Entry;
use plexus_agent::dataplane::portmap::store::{Record, Store};
use plexus_agent::dataplane::portmap::table::{monotonic_ns, Tables};
use plexus_agent::native::sriov::state::{Owner, VfRecord};
use plexus_agent::native::sriov::sysfs::VfDevice;
use plexus_agent::native::sriov::VfAdmin;
use plexus_agent::spec::selection::Protocol;
use plexus_ebpf_common::flow::{Flow, FlowKey};
use plexus_tests::cri::CriServer;
use plexus_tests::world::bin;
use plexus_tests::{Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";

/// A bridge network `dcbr0` (10.66.0.0/24, the bridge 10.66.0.1 as host IP, masquerading)
/// chaining the agent's port mappings and bandwidth limits.
fn nad(w: &World) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": "dcnet",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "dcbr0",
                "isGateway": true,
                "ipMasq": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.10", "rangeEnd": "10.66.0.99"}]],
                    "dataDir": w.path("ipam").join("dcnet"),
                }
            },
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
    .to_string()
}

fn selection(host_port: u16) -> String {
    json!([{
        "name": "dcnet",
        "portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 10_000_000, "egressRate": 10_000_000}
    }])
    .to_string()
}

struct Doctor {
    w: World,
    pins: PathBuf,
    /// doctor's --runtime-socket (none listens there unless a test starts a [`CriServer`]).
    runtime: PathBuf,
    /// doctor's --ipam-dir.
    ipam_dirs: Vec<PathBuf>,
}

impl Doctor {
    fn new(w: World, pins: PathBuf) -> Doctor {
        let runtime = w.path("no-runtime.sock");
        Doctor { w, pins, runtime, ipam_dirs: Vec::new() }
    }

    /// doctor's --cni-cache-dir: the runtime's result cache files are in its `results/`.
    fn cache_dir(&self) -> PathBuf {
        self.w.path("cni-cache")
    }

    fn command(&self) -> Command {
        let mut cmd = self.w.node.command(bin("plexus-agent"));
        cmd.args(["doctor", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .arg("--socket")
            .arg(self.w.socket())
            .arg("--runtime-socket")
            .arg(&self.runtime)
            .arg("--cni-cache-dir")
            .arg(self.cache_dir())
            .arg("--multus-cache-dir")
            .arg(self.w.path("multus"));
        for dir in &self.ipam_dirs {
            cmd.arg("--ipam-dir").arg(dir);
        }
        cmd
    }

    /// `plexus-agent doctor` in the node's namespace: exit status and JSON rows.
    fn run(&self, fix: bool) -> (i32, Vec<Value>) {
        let (code, rows, _) = self.run_saying(fix);
        (code, rows)
    }

    /// [`Doctor::run`], with what doctor says on stderr (how it decided liveness).
    fn run_saying(&self, fix: bool) -> (i32, Vec<Value>, String) {
        let mut cmd = self.command();
        cmd.arg("--json");
        if fix {
            cmd.arg("--fix");
        }
        let out = cmd.output().expect("running plexus-agent doctor");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("doctor's JSON: {e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout))
        });
        let rows = rows.as_array().cloned().unwrap_or_else(|| panic!("doctor's rows: {rows}"));
        (out.status.code().unwrap_or(-1), rows, stderr)
    }

    /// The human table.
    fn table(&self) -> (i32, String) {
        let out = self.command().output().expect("running plexus-agent doctor");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn tables(&self) -> Tables {
        Tables::open_pinned(&PinDir::open(&self.pins)).expect("the port mapping maps are pinned")
    }

    fn portmap_list(&self) -> Vec<Value> {
        let out = Command::new(bin("plexus-agent"))
            .args(["portmap", "list", "--json", "--bpf-pin-dir"])
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.w.path("state"))
            .output()
            .expect("running plexus-agent portmap list");
        serde_json::from_slice(&out.stdout).expect("portmap list JSON")
    }

    fn wait_loaded(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let log = || self.w.agent_log();
        while !(log().contains("port mappings reconciled") && log().contains("bandwidth limits reconciled")) {
            assert!(Instant::now() < deadline, "the dataplane never loaded:\n{}", log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn mapping(host_port: u16, pod_ip: &str) -> Entry {
    Entry {
        protocol: Protocol::Tcp,
        host_ip: "10.66.0.1".parse().unwrap(),
        host_port,
        pod_ip: pod_ip.parse().unwrap(),
        container_port: 80,
        pod_mac: "0a:58:0a:42:00:fa".into(),
        host_mac: "02:00:00:00:00:01".into(),
        deliver_ifindex: 1,
        deliver: Hook::Egress,
        via_bridge: false,
        xdp_redirect: false,
    }
}

/// A flow of `e` from 10.66.0.200, as the programs make one.
fn flow_of(e: &Entry) -> (FlowKey, Flow) {
    let client = addr_words("10.66.0.200".parse().unwrap());
    let port = 40000u16.to_be();
    let pod = e.pod_endpoint();
    let now = monotonic_ns().expect("clock");
    let key = FlowKey::new(pod.addr, pod.port_be, client, port, pod.proto);
    let flow = Flow {
        host: e.host_endpoint(),
        client,
        client_port: port,
        rewrite: e.forward(),
        created_ns: now,
        seen_ns: now,
        ..Flow::default()
    };
    (key, flow)
}

/// A process ID no process has (one that just exited).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("running true");
    let pid = child.id();
    child.wait().expect("waiting for true");
    assert!(!Path::new("/proc").join(pid.to_string()).exists(), "pid {pid} was reused at once");
    pid
}

/// A result cache file of the runtime's ADD, as libcni writes it
/// (`<cache-dir>/results/<network>-<container>-<ifname>`): `netns` is what ties the container
/// to its network namespace (libcni 1.2+; older ones name it only as the result's interfaces'
/// `sandbox`, or not at all, as with `None`).
fn result_cache(d: &Doctor, network: &str, cid: &str, netns: Option<&str>) -> PathBuf {
    let dir = d.cache_dir().join("results");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cache = json!({
        "kind": "cniCacheV1",
        "containerId": cid,
        "config": "eyJuYW1lIjoiY2x1c3RlciJ9",
        "ifName": "eth0",
        "networkName": network,
        "cniArgs": [["K8S_POD_NAMESPACE", "default"], ["K8S_POD_NAME", format!("pod-{cid}")]],
        "result": {"cniVersion": "1.0.0", "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": netns.unwrap_or("")}]}
    });
    if let Some(netns) = netns {
        cache["netns"] = json!(netns);
    }
    let path = dir.join(format!("{network}-{cid}-eth0"));
    std::fs::write(&path, cache.to_string()).unwrap();
    path
}

/// The default network's host-local network directory of pods that predate plexus, with the
/// allocations `(address, container)` written as host-local writes them.
fn default_network_allocations(d: &mut Doctor, held: &[(&str, &str)]) -> PathBuf {
    let data_dir = d.w.path("ipam-default");
    let dir = data_dir.join("cluster");
    std::fs::create_dir_all(&dir).unwrap();
    for (addr, cid) in held {
        std::fs::write(dir.join(addr), format!("{cid}\r\neth0")).unwrap();
    }
    d.ipam_dirs.push(data_dir);
    dir
}

/// The addresses held in a host-local network directory (not its lock).
fn held(dir: &Path) -> Vec<String> {
    plexus_testkit::files_in(dir)
        .into_iter()
        .filter(|f| f != "lock" && !f.starts_with("last_reserved_ip"))
        .collect()
}

fn kinds(rows: &[Value]) -> BTreeSet<String> {
    rows.iter().filter_map(|r| r["kind"].as_str().map(str::to_owned)).collect()
}

fn whats(rows: &[Value]) -> String {
    rows.iter().filter_map(|r| r["what"].as_str()).collect::<Vec<_>>().join("\n")
}

#[test]
fn kernel_doctor_finds_every_planted_leftover_and_fix_removes_them_but_not_a_healthy_pods() {
    let mut w = World::new();
    let pins = w.pin_on_own_bpffs();
    w.write_nad(NS, "dcnet", Some(&nad(&w)));
    w.start_agent();
    let mut t = Doctor::new(w, pins);
    // The runtime holds the healthy pod's sandbox only.
    let cri = CriServer::start(&t.w.path(""), &["c-healthy"]);
    t.runtime = cri.socket().to_owned();
    t.wait_loaded();
    let state = t.w.path("state");

    // Healthy: a pod with a mapping, a limit and an address; doctor says nothing of it.
    let healthy = Netns::new("dchealthy");
    t.w.write_pod(NS, "healthy", Some(&selection(8080)));
    t.w.add("c-healthy", &healthy, (NS, "healthy")).expect_ok();
    let (code, rows) = t.run(false);
    assert_eq!((code, &rows), (0, &Vec::new()), "a healthy node has no leftovers");
    let (code, text) = t.table();
    assert_eq!(code, 0);
    assert!(text.starts_with("nothing left behind"), "{text}");

    // A pod whose namespace the runtime lost before its DEL.
    let gone = Netns::new("dcgone");
    t.w.write_pod(NS, "gone", Some(&selection(8081)));
    t.w.add("c-gone", &gone, (NS, "gone")).expect_ok();
    drop(gone);

    // A mapping no record lists, with a flow; a flow of a mapping already gone; a port mapping
    // record (with its entry) of an attachment no container record lists.
    let stray = mapping(9099, "10.66.0.250");
    let orphan_entry = mapping(9097, "10.66.0.251");
    let mut tables = t.tables();
    tables.install(&stray).unwrap();
    tables.install(&orphan_entry).unwrap();
    let (k, f) = flow_of(&stray);
    tables.insert_flow(k, f).unwrap();
    let (k, f) = flow_of(&mapping(9098, "10.66.0.252"));
    tables.insert_flow(k, f).unwrap();
    drop(tables);
    Store::new(&state)
        .save(&Record {
            container_id: "c-ghost".into(),
            ifname: "net1".into(),
            network: "dcnet".into(),
            pod: Some("default/ghost".into()),
            entries: vec![orphan_entry.clone()],
            hooks: Vec::new(),
        })
        .unwrap();

    // A bandwidth limit no record lists.
    let limit = Limit {
        direction: Direction::Ingress,
        ifindex: 424_242,
        ifname: "ghost0".into(),
        hook: Hook::Egress,
        mac: None,
        rate_bps: 1_000_000,
        burst_bits: None,
        burst_ns: 10_000_000,
        mechanism: Mechanism::TokenBucket,
    };
    let mut shaper = Table::open_pinned(&PinDir::open(&t.pins.join("bandwidth"))).unwrap();
    shaper.install(&limit).unwrap();
    drop(shaper);

    // An address held for a container nobody knows, in the network's own dataDir.
    let ipam_dir = t.w.path("ipam").join("dcnet").join("dcnet");
    std::fs::write(ipam_dir.join("10.66.0.98"), "c-ghost\r\nnet1").unwrap();

    // A temporary file of a writer that died mid-write.
    let temp = state.join("attachments").join(format!(".c-ghost@eth0.json.{}.tmp", dead_pid()));
    std::fs::write(&temp, "{").unwrap();

    // A VF claimed by an attachment no container record lists (a VF bound to a userspace
    // driver: no netdev to return; nothing applied on the PF yet, as after a crash early in
    // an ADD).
    let vf = VfRecord {
        owner: Owner {
            container_id: "c-ghost".into(),
            ifname: "net2".into(),
            netns: "/run/netns/ghost".into(),
            args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=ghost".into(),
        },
        device: VfDevice {
            pci: "0000:99:00.1".into(),
            pf_pci: "0000:99:00.0".into(),
            pf: "dcpf0".into(),
            vf: 1,
            driver: Some("vfio-pci".into()),
        },
        original: VfAdmin::default(),
        netdev: None,
        planned: Vec::new(),
        applied: Vec::new(),
        pod_ifindex: None,
        config: json!({"cniVersion": "1.0.0", "name": "sriovnet", "type": "sriov", "deviceID": "0000:99:00.1"}),
        complete: false,
    };
    let vf_file = state.join("sriov").join("0000:99:00.1.json");
    std::fs::create_dir_all(vf_file.parent().unwrap()).unwrap();
    std::fs::write(&vf_file, serde_json::to_vec_pretty(&vf).unwrap()).unwrap();

    // A link left under plexus's temporary name in the node.
    t.w.node.ip(&["link", "add", "plx0badc0de", "type", "veth", "peer", "name", "dcpeer0"]);

    // A masquerading chain of an attachment no container record lists.
    let (ok, out) = t.w.node.exec(&[
        "nft",
        "add chain inet plexus masq-0123456789abcdef { type nat hook postrouting priority 100; comment \"dcnet c-ghost net1\"; }",
    ]);
    assert!(ok, "nft: {out}");

    let (code, rows) = t.run(false);
    assert_eq!(code, 1, "leftovers found: exit status 1: {rows:#?}");
    let expected = [
        "record-without-netns",
        "portmap-record",
        "portmap-mapping",
        "portmap-flows",
        "bandwidth-limit",
        "ipam-allocation",
        "temp-file",
        "vf-record",
        "link",
        "nft-chain",
    ];
    assert_eq!(kinds(&rows), expected.iter().map(|k| (*k).to_owned()).collect(), "{rows:#?}");
    let what = whats(&rows);
    for needle in [
        "container c-gone interface eth0",
        "10.66.0.1:9099/tcp: no record",
        "1 flow(s) of port mapping 10.66.0.1:9099/tcp",
        "1 flow(s) of port mapping 10.66.0.1:9098/tcp",
        "pod default/ghost (container c-ghost, interface net1, network dcnet)",
        "ifindex 424242 egress hook",
        "address 10.66.0.98",
        temp.to_str().unwrap(),
        "VF 0000:99:00.1 claimed by pod default/ghost (container c-ghost, interface net2)",
        "link plx0badc0de (veth)",
        "nftables chain inet plexus masq-0123456789abcdef (dcnet c-ghost net1)",
    ] {
        assert!(what.contains(needle), "{needle:?} is not listed:\n{what}");
    }
    // Nothing of the healthy pod, and the entries of records are not listed on their own.
    for not_listed in ["c-healthy", ":8080/", ":8081/", ":9097/"] {
        assert!(!what.contains(not_listed), "{not_listed:?} listed:\n{what}");
    }
    assert_eq!(rows.len(), 11, "{what}");

    let (code, fixed) = t.run(true);
    assert_eq!(code, 0, "everything found was removed: {fixed:#?}\n{}", t.w.agent_log());
    assert_eq!(fixed.len(), rows.len());
    assert!(fixed.iter().all(|r| r["fixed"] == true && r.get("error").is_none()), "{fixed:#?}");

    let (code, rows) = t.run(false);
    assert_eq!((code, &rows), (0, &Vec::new()), "a second look finds nothing");
    // Each is gone, checked at its source.
    let tables = t.tables();
    let hosts: BTreeSet<u16> = tables.forward_keys().iter().map(|e| u16::from_be(e.port_be)).collect();
    assert_eq!(hosts, [8080].into(), "only the healthy pod's mapping stays");
    assert_eq!(tables.stray_counters(), Vec::<u32>::new(), "counters of removed mappings left");
    let flow_hosts: BTreeSet<u16> =
        tables.flows().iter().map(|(_, f)| u16::from_be(f.host.port_be)).collect();
    assert!(flow_hosts.is_empty(), "flows left: {flow_hosts:?}");
    assert!(Store::new(&state).load_all().unwrap().iter().all(|r| r.container_id == "c-healthy"));
    assert_eq!(t.w.state_files(), ["c-healthy@eth0.json"]);
    let held = plexus_testkit::files_in(&ipam_dir);
    assert!(!held.iter().any(|f| f == "10.66.0.98"), "the stray address stays: {held:?}");
    assert!(!temp.exists() && !vf_file.exists(), "the temporary file or the VF record stays");
    assert!(!t.w.node.has_link("plx0badc0de") && !t.w.node.has_link("dcpeer0"), "the link stays");
    let chains = t.w.nft_chains();
    assert_eq!(chains.len(), 1, "only the healthy pod's masquerading chain stays: {chains:?}");
    assert!(t.w.agent_log().contains("c-gone"), "the agent ran the DEL of the lost pod");

    // The healthy pod is untouched: its mapping, its record, and CHECK passes.
    let listed = t.portmap_list();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["container_id"], "c-healthy");
    let check = t.w.cni("CHECK", "c-healthy", &healthy, (NS, "healthy"));
    assert!(check.ok(), "CHECK of the healthy pod after --fix: {} {}", check.stdout, check.stderr);

    // Its DEL leaves nothing, as doctor agrees.
    assert!(t.w.del("c-healthy", &healthy, (NS, "healthy")).ok());
    assert_eq!(t.run(false), (0, Vec::new()));
    t.w.assert_nothing_left(&[&healthy]);
}

#[test]
fn kernel_doctor_without_an_agent_cannot_fix_a_record_and_says_so() {
    let mut w = World::new();
    let pins = w.pin_on_own_bpffs();
    w.start_agent();
    let mut t = Doctor::new(w, pins);
    let gone = Netns::new("dcgone");
    t.w.write_pod(NS, "gone", None);
    t.w.add("c-gone", &gone, (NS, "gone")).expect_ok();
    drop(gone);
    t.w.kill_agent();

    let (code, rows) = t.run(true);
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(kinds(&rows), ["record-without-netns".to_owned()].into());
    assert_eq!(rows[0]["fixed"], false);
    let error = rows[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("is the agent running with this --socket?"), "{error}");

    // With the agent back, the same command fixes it.
    t.w.start_agent();
    let (code, rows) = t.run(true);
    assert_eq!(code, 0, "{rows:#?}");
    assert_eq!(t.run(false), (0, Vec::new()));
    assert!(t.w.state_files().is_empty() && t.w.ipam_allocations().is_empty());
}

#[test]
fn kernel_doctor_keeps_the_addresses_of_sandboxes_the_runtime_lists_and_frees_the_others() {
    let w = World::new();
    let pins = w.path("no-pins");
    let mut t = Doctor::new(w, pins);
    // Two pods the default network attached before plexus: the runtime holds one of them.
    let dir =
        default_network_allocations(&mut t, &[("10.88.0.20", "c-old-live"), ("10.88.0.21", "c-old-gone")]);
    let cri = CriServer::start(&t.w.path(""), &["c-old-live", "c-other"]);
    t.runtime = cri.socket().to_owned();

    let (code, rows, said) = t.run_saying(false);
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(kinds(&rows), ["ipam-allocation".to_owned()].into(), "{rows:#?}");
    let what = whats(&rows);
    assert!(what.contains("address 10.88.0.21") && what.contains("c-old-gone"), "{what}");
    assert!(what.contains("the runtime does not list its sandbox"), "{what}");
    assert!(!what.contains("c-old-live"), "a live pod's address is listed:\n{what}");
    let socket = cri.socket().display().to_string();
    assert!(said.contains(&format!("runtime: 2 sandbox(es) listed by {socket}")), "{said}");
    assert!(
        cri.calls().iter().all(|c| c == "ListPodSandbox") && !cri.calls().is_empty(),
        "{:?}",
        cri.calls()
    );
    let (code, text) = t.table();
    assert_eq!(code, 1);
    assert!(text.contains("liveness of containers no record lists: runtime: 2 sandbox(es)"), "{text}");

    // --fix frees the gone pod's address only.
    let (code, fixed) = t.run(true);
    assert_eq!(code, 0, "{fixed:#?}");
    assert!(fixed.iter().all(|r| r["fixed"] == true), "{fixed:#?}");
    assert_eq!(held(&dir), ["10.88.0.20"], "the live pod's address stays, the other goes");
    assert_eq!(t.run(false), (0, Vec::new()));

    // It is the runtime's answer that keeps it: once its sandbox is gone, so is the address.
    cri.set(&["c-other"]);
    let (code, rows) = t.run(true);
    assert_eq!(code, 0, "{rows:#?}");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(whats(&rows).contains("address 10.88.0.20"), "{rows:#?}");
    assert_eq!(held(&dir), Vec::<String>::new(), "nothing is left");
    assert_eq!(t.run(false), (0, Vec::new()));
}

#[test]
fn kernel_doctor_without_a_runtime_keeps_addresses_whose_namespace_lives_and_frees_none_it_cannot_judge() {
    let w = World::new();
    let pins = w.path("no-pins");
    let mut t = Doctor::new(w, pins);
    // No runtime listens on t.runtime. Each pod's result cache file names its namespace, as
    // libcni writes it for the runtime's ADD: that ties its container ID to the namespace.
    let live = Netns::new("dcpre");
    let gone = Netns::new("dcpregone");
    let gone_path = gone.path_str();
    drop(gone);
    let dir = default_network_allocations(
        &mut t,
        &[("10.88.0.30", "c-ns-live"), ("10.88.0.31", "c-ns-gone"), ("10.88.0.32", "c-unknown")],
    );
    let live_cache = result_cache(&t, "cluster", "c-ns-live", Some(&live.path_str()));
    let gone_cache = result_cache(&t, "cluster", "c-ns-gone", Some(&gone_path));

    let (code, rows, said) = t.run_saying(false);
    assert_eq!(code, 1, "{rows:#?}");
    let expected = ["ipam-allocation", "ipam-allocation-unverified", "result-cache"];
    assert_eq!(kinds(&rows), expected.iter().map(|k| (*k).to_owned()).collect(), "{rows:#?}");
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let what = whats(&rows);
    assert!(what.contains(&format!("its network namespace {gone_path} is gone")), "{what}");
    assert!(what.contains("10.88.0.32") && what.contains("not freed"), "{what}");
    assert!(
        !what.contains("c-ns-live") && !what.contains("10.88.0.30"),
        "a live pod's address is listed:\n{what}"
    );
    let runtime = t.runtime.display().to_string();
    assert!(
        said.contains(&format!("no runtime reachable at {runtime}"))
            && said.contains("liveness by network namespace"),
        "{said}"
    );

    // --fix frees the gone pod's address and cache file; the unjudged address stays (exit 1).
    let (code, fixed) = t.run(true);
    assert_eq!(code, 1, "{fixed:#?}");
    for row in &fixed {
        let unverified = row["kind"] == "ipam-allocation-unverified";
        assert_eq!(row["fixed"], !unverified, "{row:#}");
        if unverified {
            assert!(row["error"].as_str().unwrap_or_default().contains("not freed"), "{row:#}");
        }
    }
    assert_eq!(held(&dir), ["10.88.0.30", "10.88.0.32"]);
    assert!(live_cache.exists() && !gone_cache.exists(), "the live pod's cache stays, the gone one's goes");

    // Once its namespace is gone, the live pod's address and cache go too.
    drop(live);
    let (code, _) = t.run(true);
    assert_eq!(code, 1, "the unjudged address still stays");
    assert_eq!(held(&dir), ["10.88.0.32"]);
    assert!(!live_cache.exists());
    std::fs::remove_file(dir.join("10.88.0.32")).unwrap();
    assert_eq!(t.run(false), (0, Vec::new()));
    assert_eq!(plexus_testkit::files_in(&t.cache_dir().join("results")), Vec::<String>::new());
}

#[test]
fn kernel_doctor_removes_result_caches_of_gone_containers_and_keeps_those_of_live_ones() {
    let mut w = World::new();
    let pins = w.pin_on_own_bpffs();
    w.start_agent();
    let mut t = Doctor::new(w, pins);
    // A pod attached through plexus: its record explains its cache file.
    let pod = Netns::new("dcrec");
    t.w.write_pod(NS, "rec", None);
    t.w.add("c-rec", &pod, (NS, "rec")).expect_ok();
    let cri = CriServer::start(&t.w.path(""), &["c-rec", "c-live"]);
    t.runtime = cri.socket().to_owned();
    // The network's name has dashes: doctor reads the container from the file, not its name.
    let recorded = result_cache(&t, "plexus", "c-rec", Some(&pod.path_str()));
    let live = result_cache(&t, "my-default-net", "c-live", None);
    let gone = result_cache(&t, "my-default-net", "c-gone", Some("/run/netns/cni-00000000-dead"));

    let (code, rows) = t.run(false);
    assert_eq!(code, 1, "{rows:#?}");
    assert_eq!(kinds(&rows), ["result-cache".to_owned()].into(), "{rows:#?}");
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let what = whats(&rows);
    assert!(what.contains(&gone.display().to_string()) && what.contains("container c-gone"), "{what}");
    assert!(what.contains("on network my-default-net"), "{what}");

    let (code, fixed) = t.run(true);
    assert_eq!(code, 0, "{fixed:#?}");
    assert!(!gone.exists() && live.exists() && recorded.exists());
    assert_eq!(t.run(false), (0, Vec::new()));

    // A runtime that does not list a recorded pod whose namespace lives is not the kubelet's:
    // its answer is not used, and what it alone kept alive is not judged gone.
    cri.set(&["c-live"]);
    let (code, rows, said) = t.run_saying(false);
    assert_eq!((code, &rows), (0, &Vec::new()), "{said}");
    assert!(said.contains("does not list sandbox c-rec of a recorded pod"), "{said}");
    assert!(live.exists());

    assert!(t.w.del("c-rec", &pod, (NS, "rec")).ok());
    t.w.assert_nothing_left(&[&pod]);
    for f in [&recorded, &live] {
        std::fs::remove_file(f).unwrap();
    }
    assert_eq!(t.run(false), (0, Vec::new()));
}
