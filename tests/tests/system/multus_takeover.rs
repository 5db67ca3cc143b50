//! Taking a node over from Multus (docs/migrating-from-multus.md): pods Multus attached (the
//! cluster default network and secondary networks, through the reference plugins, with
//! Multus's cache written as Multus writes it: `plexus_tests::multus`) are released by plexus,
//! which has no record of them: by the runtime's DEL, by a CNI GC, and by `plexus-agent doctor
//! --fix` once their sandbox is gone. Nothing is left: no interface, address, cache file.

use plexus_tests::multus::{self, Delegate, Sandbox};
use plexus_tests::world::bin;
use plexus_tests::{CniOutput, Netns, World};
use serde_json::{json, Value};

const NS: &str = "team-a";

/// A macvlan NAD whose config names no network (Multus names it after the NAD), CNI 0.4.0.
fn macvlan(w: &World) -> Delegate {
    Delegate::new(
        &format!("{NS}/mvnet"),
        json!({
            "cniVersion": "0.4.0",
            "type": "macvlan",
            "master": "mvmaster0",
            "mode": "bridge",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.71.0.0/24"}]],
                     "dataDir": w.path("ipam").join("mvnet")}
        }),
    )
}

/// A bridge configlist NAD.
fn blue(w: &World) -> Delegate {
    let config: Value =
        serde_json::from_str(&w.bridge_config("blue", "mtblue0", "10.72.0.0/24", false)).unwrap();
    Delegate::new(&format!("{NS}/blue"), config)
}

fn cluster(w: &World) -> Delegate {
    Delegate::new(
        "cluster",
        serde_json::from_str(&w.bridge_config("cluster", "cni0", "10.88.0.0/24", true)).unwrap(),
    )
}

struct Pod {
    cid: String,
    name: String,
    netns: Option<Netns>,
}

impl Pod {
    fn sandbox(&self) -> Sandbox<'_> {
        Sandbox {
            container_id: &self.cid,
            netns: self.netns.as_ref().expect("a live sandbox"),
            ifname: "eth0",
            namespace: NS,
            name: &self.name,
            uid: "uid-1",
        }
    }

    fn netns_path(&self) -> String {
        self.netns.as_ref().map(Netns::path_str).unwrap_or_default()
    }
}

/// The pod attached by Multus with `delegates`.
fn attached_by_multus(w: &World, name: &str, delegates: &[Delegate]) -> Pod {
    let pod = Pod { cid: format!("{name}-sandbox"), name: name.into(), netns: Some(Netns::new("pxmt")) };
    multus::add(&w.node, &w.path("multus"), &pod.sandbox(), delegates);
    pod
}

fn addresses(w: &World, network: &str) -> usize {
    w.ipam_allocations().iter().filter(|a| a.starts_with(&format!("{network}/"))).count()
}

/// Multus's cache files (the delegates files, and the result caches under `results/`).
fn multus_files(w: &World) -> Vec<String> {
    let dir = w.path("multus");
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "results")
        .collect();
    out.extend(
        std::fs::read_dir(dir.join("results"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| format!("results/{}", e.file_name().to_string_lossy())),
    );
    out.sort();
    out
}

fn runtime_del(w: &World, pod: &Pod) -> CniOutput {
    let args = pod.sandbox_args();
    let netns = pod.netns_path();
    w.shim(
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", &pod.cid),
            ("CNI_NETNS", &netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", &args),
        ],
        &w.plexus_config("1.0.0"),
    )
}

impl Pod {
    fn sandbox_args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={}",
            self.name, self.cid
        )
    }
}

fn doctor(w: &World, fix: bool) -> Vec<Value> {
    let mut cmd = w.node.command(bin("plexus-agent"));
    cmd.args(["doctor", "--json", "--bpf-pin-dir"])
        .arg(w.path("no-pins"))
        .arg("--state-dir")
        .arg(w.path("state"))
        .arg("--socket")
        .arg(w.socket())
        .arg("--runtime-socket")
        .arg(w.path("no-runtime.sock"))
        .arg("--cni-cache-dir")
        .arg(w.path("cni-cache"))
        .arg("--multus-cache-dir")
        .arg(w.path("multus"));
    if fix {
        cmd.arg("--fix");
    }
    let out = cmd.output().expect("running plexus-agent doctor");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor's JSON: {e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    rows.as_array().cloned().unwrap_or_default()
}

fn kinds(rows: &[Value]) -> Vec<String> {
    rows.iter().map(|r| r["kind"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The whole takeover on one node: three pods Multus attached, plexus installed in Multus's
/// place; one pod DELeted by the runtime, one collected by GC and one by doctor after their
/// sandboxes went. Every secondary network's address is released with the default network's,
/// and Multus's cache goes with them.
#[test]
fn kernel_pods_multus_attached_are_released_by_del_gc_and_doctor_leaving_nothing() {
    let mut w = World::new();
    w.master_link("mvmaster0");
    let (cluster, macvlan, mut blue) = (cluster(&w), macvlan(&w), blue(&w));
    blue.ifname_request = Some("blue0".into());

    let p1 = attached_by_multus(&w, "p1", &[cluster.clone(), macvlan.clone(), blue.clone()]);
    let mut p2 = attached_by_multus(&w, "p2", &[cluster.clone(), blue.clone()]);
    let mut p3 = attached_by_multus(&w, "p3", &[cluster.clone(), macvlan.clone()]);
    let links = |p: &Pod| {
        let mut l = p.netns.as_ref().unwrap().link_names();
        l.sort();
        l
    };
    assert_eq!(links(&p1), ["blue0", "eth0", "lo", "net1"]);
    assert_eq!((addresses(&w, "cluster"), addresses(&w, "mvnet"), addresses(&w, "blue")), (3, 2, 2));
    assert_eq!(multus_files(&w).len(), 3 + 7, "{:?}", multus_files(&w));

    // plexus replaces Multus: its agent starts, its config is what the runtime calls.
    w.start_agent();

    // 1. The runtime's DEL of p1.
    runtime_del(&w, &p1).expect_ok();
    assert_eq!(links(&p1), ["lo"]);
    assert_eq!((addresses(&w, "cluster"), addresses(&w, "mvnet"), addresses(&w, "blue")), (2, 1, 1));
    assert!(!multus_files(&w).iter().any(|f| f.contains("p1-sandbox")), "{:?}", multus_files(&w));
    assert!(w.agent_log().contains("Multus's cache lists its networks"), "{}", w.agent_log());
    // A DEL again (the runtime retries) finds nothing of Multus's and succeeds.
    runtime_del(&w, &p1).expect_ok();

    // 2. p2's sandbox goes without a DEL; the runtime's GC lists p3 only.
    p2.netns.take();
    let mut gc: Value = serde_json::from_str(&w.plexus_config("1.1.0")).unwrap();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": p3.cid, "ifname": "eth0"}]);
    let out = w.shim(&[("CNI_COMMAND", "GC")], &gc.to_string());
    assert!(out.ok(), "GC: {out:?}");
    assert_eq!((addresses(&w, "cluster"), addresses(&w, "mvnet"), addresses(&w, "blue")), (1, 1, 0));
    assert!(!multus_files(&w).iter().any(|f| f.contains("p2-sandbox")), "{:?}", multus_files(&w));
    assert_eq!(links(&p3), ["eth0", "lo", "net1"], "GC left the valid pod alone");

    // 3. p3 is alive: doctor lists nothing of it. Then its sandbox goes, no runtime is there to
    // say so, and its namespace (named by Multus's result caches) decides.
    assert_eq!(doctor(&w, false), Vec::<Value>::new());
    p3.netns.take();
    let found = doctor(&w, false);
    assert_eq!(kinds(&found)[0], "multus-cache", "{found:#?}");
    assert!(found[0]["what"].as_str().unwrap().contains("networks cluster, team-a/mvnet"), "{found:#?}");
    let fixed = doctor(&w, true);
    assert!(fixed.iter().all(|r| r["fixed"] == true), "{fixed:#?}");
    assert_eq!(doctor(&w, false), Vec::<Value>::new());

    assert_eq!(multus_files(&w), Vec::<String>::new());
    w.assert_nothing_left(&[p1.netns.as_ref().unwrap()]);
}

/// A delegates file that cannot be read releases nothing: the runtime's DEL still succeeds (as
/// the default network's DEL without a cache; failing would keep the sandbox for good), says
/// which file, and leaves it for doctor, which lists it and removes it alone.
#[test]
fn kernel_an_unreadable_multus_cache_does_not_fail_the_del_and_doctor_removes_it() {
    let mut w = World::new();
    let file = w.path("multus").join("p9-sandbox");
    std::fs::write(&file, b"[{\"Name\":\"team-a/blue\",\"Bytes\":\"%%%\"}]").unwrap();
    w.start_agent();
    let pod = Pod { cid: "p9-sandbox".into(), name: "p9".into(), netns: None };
    runtime_del(&w, &pod).expect_ok();
    let log = w.agent_log();
    assert!(log.contains("cannot be read") && log.contains(&file.display().to_string()), "{log}");
    assert!(file.exists());
    let found = doctor(&w, false);
    assert_eq!(kinds(&found), ["multus-cache"], "{found:#?}");
    assert!(found[0]["what"].as_str().unwrap().contains("not base64"), "{found:#?}");
    doctor(&w, true);
    assert!(!file.exists());
    assert_eq!(multus_files(&w), Vec::<String>::new());
    w.assert_nothing_left(&[]);
}
