//! The whole life of attachments, end to end: the real `plexus` shim, a running agent and
//! the reference plugins (bridge, macvlan, host-local), in network namespaces. Every test
//! ends by asking the world what is left behind, because a CNI implementation that leaks
//! interfaces, addresses or records only shows it long after the call that leaked.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;

use plexus_tests::addresses::{assert_in_subnet, bare, only_address};
use plexus_tests::world::{bin, run_cni};
use plexus_tests::{status_of, CniOutput, Netns, World, REFERENCE_PLUGINS};
use serde_json::{json, Value};

const NS: &str = "default";

/// The secondary bridge network most tests select. With isGateway the reference bridge
/// plugin pins the bridge's MAC; without, the kernel changes it as ports come and go and the
/// plugin's CHECK (which compares it with the ADD result) fails for reasons not plexus's.
fn blue(w: &World) -> String {
    w.bridge_config("blue", "br-blue", "10.10.1.0/24", true)
}

/// A macvlan network on `master` (a link of the node namespace) with host-local IPAM kept
/// in this world, so its allocations count as leftovers too.
fn macvlan_config(w: &World, name: &str, master: &str, subnet: &str) -> String {
    json!({
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [{
            "type": "macvlan",
            "master": master,
            "mode": "bridge",
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet}]],
                "dataDir": w.path("ipam").join(name),
            }
        }]
    })
    .to_string()
}

/// The host-local dataDir of a configlist as written in the NAD, read back from the config
/// itself so the test breaks exactly the directory the plugin uses.
fn host_local_data_dir(config: &str) -> PathBuf {
    let v: Value = serde_json::from_str(config).expect("NAD config JSON");
    PathBuf::from(v["plugins"][0]["ipam"]["dataDir"].as_str().expect("ipam.dataDir in the NAD config"))
}

/// A CNI error with `code` whose message holds every one of `needles` (what went wrong and
/// what to do about it).
#[track_caller]
fn assert_cni_error(out: &CniOutput, code: u64, needles: &[&str]) {
    assert!(!out.ok(), "expected CNI error {code}, got success: {}", out.stdout);
    assert_eq!(out.code(), Some(code), "stdout: {} stderr: {}", out.stdout, out.stderr);
    let v = out.json();
    assert!(v["cniVersion"].is_string(), "error without cniVersion: {v}");
    let text = format!("{} {}", out.msg(), v["details"].as_str().unwrap_or_default());
    for needle in needles {
        assert!(text.contains(needle), "error {code} does not mention {needle:?}: {text}");
    }
}

#[track_caller]
fn status_ips(entry: &Value) -> Vec<String> {
    entry["ips"]
        .as_array()
        .map(|a| a.iter().map(|i| bare(i.as_str().unwrap()).to_owned()).collect())
        .unwrap_or_default()
}

fn sorted_links(pod: &Netns) -> Vec<String> {
    let mut v = pod.link_names();
    v.sort();
    v
}

/// The CNI_* variables of a call for a pod, for calls that need to leave one out or point
/// at a namespace that is gone (`netns: None` leaves CNI_NETNS unset).
fn env_for(command: &str, cid: &str, netns: Option<&str>, args: &str) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("CNI_COMMAND", command.to_owned()),
        ("CNI_CONTAINERID", cid.to_owned()),
        ("CNI_IFNAME", "eth0".to_owned()),
        ("CNI_ARGS", args.to_owned()),
    ];
    if let Some(path) = netns {
        env.push(("CNI_NETNS", path.to_owned()));
    }
    env
}

fn pod_args(ns: &str, name: &str) -> String {
    format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={ns};K8S_POD_NAME={name}")
}

fn shim_env(w: &World, env: &[(&'static str, String)], stdin: &str) -> CniOutput {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    w.shim(&env, stdin)
}

/// Stdin that is not JSON has no "socket" key, so the shim can only use its compiled-in
/// default socket. It runs here in a private mount namespace whose /run/plexus is this
/// world's directory: the default socket is then this world's agent, and nothing of the
/// machine's own /run is touched.
fn shim_with_default_socket(w: &World, env: &[(&'static str, String)], stdin: &str) -> CniOutput {
    let script = "mount -t tmpfs plexus-test /run && mkdir /run/plexus && mount --bind \"$0\" /run/plexus \
                  && exec \"$1\"";
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script])
        .arg(w.dir.path())
        .arg(bin("plexus"))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_PATH", REFERENCE_PLUGINS)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    run_cni(&mut cmd, stdin)
}

fn state_record(w: &World, cid: &str) -> Value {
    let path = w.path("state").join("attachments").join(format!("{cid}@eth0.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("state record JSON")
}

// ---------------------------------------------------------------------------------------
// 1. The normal life of a multi-network pod.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_add_check_del_of_a_pod_on_two_bridges_and_a_macvlan_attaches_everything_and_leaves_nothing() {
    let mut w = World::new();
    w.master_link("up0");
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_nad(NS, "green", Some(&w.bridge_config("green", "br-green", "10.10.2.0/24", true)));
    w.write_nad(NS, "mac", Some(&macvlan_config(&w, "mac", "up0", "10.20.0.0/24")));
    w.write_pod(NS, "p1", Some("blue,green,mac"));
    w.write_pod(NS, "p2", Some("blue,mac"));
    w.start_agent();
    let pod1 = Netns::new("pxpod");
    let pod2 = Netns::new("pxpod");

    let result = w.add("c1", &pod1, (NS, "p1")).expect_ok();

    // Every selected network is an interface of its own, with an address of its subnet.
    assert_eq!(sorted_links(&pod1), ["eth0", "lo", "net1", "net2", "net3"]);
    let eth0 = only_address(&pod1, "eth0");
    let net1 = only_address(&pod1, "net1");
    let net2 = only_address(&pod1, "net2");
    let net3 = only_address(&pod1, "net3");
    assert_in_subnet(&eth0, "10.88.0.");
    assert_in_subnet(&net1, "10.10.1.");
    assert_in_subnet(&net2, "10.10.2.");
    assert_in_subnet(&net3, "10.20.0.");

    // The runtime reads the pod IP from the result: it is the default network's alone, in
    // the request's version.
    assert_eq!(result["cniVersion"], "1.0.0", "{result:#}");
    let ips = result["ips"].as_array().expect("ips in the result");
    assert_eq!(ips.len(), 1, "only the default network's addresses: {result:#}");
    assert_eq!(ips[0]["address"], eth0.as_str());
    assert!(ips[0].get("version").is_none(), "1.0.0 results carry no ips[].version: {result:#}");
    let sandbox: Vec<&Value> =
        result["interfaces"].as_array().unwrap().iter().filter(|i| i.get("sandbox").is_some()).collect();
    assert_eq!(sandbox.len(), 1, "{result:#}");
    assert_eq!(sandbox[0]["name"], "eth0");
    assert_eq!(sandbox[0]["sandbox"], pod1.path_str().as_str());

    // network-status: one entry per attachment, in order, the default one marked.
    let status = w.network_status(NS, "p1");
    let names: Vec<&str> = status.as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["cluster", "default/blue", "default/green", "default/mac"], "{status:#}");
    for (ifname, addr, default) in
        [("eth0", &eth0, true), ("net1", &net1, false), ("net2", &net2, false), ("net3", &net3, false)]
    {
        let entry = status_of(&status, ifname);
        assert_eq!(entry["default"], default, "{entry}");
        assert_eq!(status_ips(entry), [bare(addr)], "{entry}");
        let mac = pod1.links().into_iter().find(|l| l["ifname"] == ifname).unwrap()["address"].clone();
        assert_eq!(entry["mac"], mac, "{entry}");
    }

    // The detector sees live attachments, so an empty answer later means something.
    let live = w.leftovers(&[&pod1]);
    for expected in ["state file c1@eth0.json", "link eth0", "link net3", "IPAM allocation mac/"] {
        assert!(live.iter().any(|l| l.starts_with(expected)), "{expected} not detected in {live:?}");
    }

    let check = w.cni("CHECK", "c1", &pod1, (NS, "p1"));
    assert!(check.ok() && check.stdout.is_empty(), "CHECK: {check:?}");

    // Traffic crosses the secondary networks: a bridge and the macvlan.
    w.add("c2", &pod2, (NS, "p2")).expect_ok();
    let peer_blue = only_address(&pod2, "net1");
    let peer_mac = only_address(&pod2, "net2");
    assert!(pod1.ping(bare(&peer_blue)), "no ping over blue to {peer_blue}");
    assert!(pod2.ping(bare(&net1)), "no ping over blue to {net1}");
    assert!(pod1.ping(bare(&peer_mac)), "no ping over mac to {peer_mac}");

    w.del("c1", &pod1, (NS, "p1")).expect_ok();
    w.del("c2", &pod2, (NS, "p2")).expect_ok();
    w.assert_nothing_left(&[&pod1, &pod2]);
    // DEL is idempotent: nothing recorded, nothing to do, no error.
    w.del("c1", &pod1, (NS, "p1")).expect_ok();
}

// ---------------------------------------------------------------------------------------
// 2. One network selected twice.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_same_network_selected_twice_gives_two_interfaces_two_status_entries_and_two_addresses() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some("blue,blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    w.add("c1", &pod, (NS, "p")).expect_ok();

    assert_eq!(sorted_links(&pod), ["eth0", "lo", "net1", "net2"]);
    let a1 = only_address(&pod, "net1");
    let a2 = only_address(&pod, "net2");
    assert_in_subnet(&a1, "10.10.1.");
    assert_in_subnet(&a2, "10.10.1.");
    assert_ne!(a1, a2, "one address handed out twice");
    let status = w.network_status(NS, "p");
    let blue: Vec<&Value> =
        status.as_array().unwrap().iter().filter(|e| e["name"] == "default/blue").collect();
    assert_eq!(blue.len(), 2, "{status:#}");
    assert_eq!(status_ips(status_of(&status, "net1")), [bare(&a1)]);
    assert_eq!(status_ips(status_of(&status, "net2")), [bare(&a2)]);
    assert_eq!(w.ipam_allocations().iter().filter(|a| a.starts_with("blue/")).count(), 2);

    w.cni("CHECK", "c1", &pod, (NS, "p")).expect_ok();
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 3. Rollback of a failed ADD.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_failing_second_attachment_rolls_back_the_first_and_the_default_and_leaves_nothing() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_nad(NS, "bad", Some(&macvlan_config(&w, "bad", "nonexistent0", "10.20.0.0/24")));
    w.write_pod(NS, "p", Some("blue,bad"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    // The macvlan plugin's own error, attributed to the attachment that failed.
    assert!(!out.ok(), "ADD with a missing macvlan master succeeded: {}", out.stdout);
    let msg = out.msg();
    for needle in ["attachment default/bad", "macvlan", "Link not found"] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert!(!msg.contains("undoing the ADD also failed"), "{msg}");
    assert!(w.events(NS, "p").contains("AttachmentFailed"), "event: {:?}", w.events(NS, "p"));
    // The default network and blue were attached before the failure; all of it is undone.
    assert_eq!(sorted_links(&pod), ["lo"]);
    assert_eq!(w.ipam_allocations(), Vec::<String>::new());
    assert_eq!(w.state_files(), Vec::<String>::new());
    assert_eq!(w.node_veths(), Vec::<String>::new());
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_attachment_whose_plugin_fails_halfway_is_still_undone_by_the_rollback() {
    let mut w = World::new();
    // A /30 with the gateway taken holds one address: the second attachment's bridge ADD
    // creates its veth, then host-local runs out and the ADD fails with the veth in place.
    w.write_nad(NS, "tiny", Some(&w.bridge_config("tiny", "br-tiny", "10.30.0.0/30", true)));
    w.write_pod(NS, "p", Some("tiny,tiny"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert!(!out.ok(), "a /30 served two attachments: {}", out.stdout);
    assert!(out.msg().contains("attachment default/tiny"), "{}", out.msg());
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 4. A failing DEL of one delegate.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_failing_delegate_del_does_not_stop_the_others_stays_recorded_and_the_next_del_finishes() {
    let mut w = World::new();
    let green_config = w.bridge_config("green", "br-green", "10.10.2.0/24", true);
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_nad(NS, "green", Some(&green_config));
    w.write_pod(NS, "p", Some("blue,green"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, (NS, "p")).expect_ok();
    let green_addr = only_address(&pod, "net2");

    // host-local cannot open its store when the dataDir is a regular file: green's DEL fails
    // for real. The directory is kept aside so its allocation must really be released later.
    let data_dir = host_local_data_dir(&green_config);
    let aside = data_dir.with_extension("aside");
    std::fs::rename(&data_dir, &aside).unwrap();
    std::fs::write(&data_dir, "not a directory").unwrap();

    let out = w.del("c1", &pod, (NS, "p"));

    assert!(!out.ok(), "DEL succeeded although host-local could not release: {}", out.stdout);
    let msg = out.msg();
    let data_dir_text = data_dir.display().to_string();
    // "Not a directory" from the built-in host-local, "not a directory" from the binary.
    for needle in ["default/green (net2)", data_dir_text.as_str(), "a directory"] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    assert!(!msg.contains("default/blue") && !msg.contains("cluster"), "only green failed: {msg}");
    // Green was torn down first (reverse order); the others still went.
    let links = pod.link_names();
    assert!(!links.contains(&"eth0".to_owned()) && !links.contains(&"net1".to_owned()), "{links:?}");
    let allocations = w.ipam_allocations();
    assert_eq!(allocations, [format!("green/{}", bare(&green_addr))], "only green's address remains");
    // What failed stays recorded, and only that, so the next DEL retries exactly it.
    assert_eq!(w.state_files(), ["c1@eth0.json"]);
    let record = state_record(&w, "c1");
    let left: Vec<&str> =
        record["attachments"].as_array().unwrap().iter().map(|a| a["network"].as_str().unwrap()).collect();
    assert_eq!(left, ["default/green"], "{record:#}");

    std::fs::remove_file(&data_dir).unwrap();
    std::fs::rename(&aside, &data_dir).unwrap();
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 5. An agent crash between ADD and DEL.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_agent_killed_and_restarted_between_add_and_del_still_checks_and_deletes_everything() {
    let mut w = World::new();
    w.master_link("up0");
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_nad(NS, "mac", Some(&macvlan_config(&w, "mac", "up0", "10.20.0.0/24")));
    w.write_pod(NS, "p", Some("blue,mac"));
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, (NS, "p")).expect_ok();

    // SIGKILL: no shutdown code runs, only what is on disk survives.
    w.kill_agent();
    w.start_agent();

    w.cni("CHECK", "c1", &pod, (NS, "p")).expect_ok();
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

/// Plugin processes (any of /usr/lib/cni) whose environment names container `cid`.
fn plugins_of(cid: &str) -> Vec<u32> {
    let needle = format!("CNI_CONTAINERID={cid}");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe.starts_with(REFERENCE_PLUGINS))
        })
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
        })
        .collect()
}

#[test]
fn kernel_agent_killed_during_an_add_whose_later_plugin_rejects_its_config_does_not_fail_del_forever() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    // A real plugin that rejects its config: its ADD and its every DEL fail (no such master).
    let bad = json!({"cniVersion": "1.0.0", "name": "bad",
                     "plugins": [{"type": "vlan", "master": "pxnone0", "vlanId": 7}]});
    w.write_nad(NS, "bad", Some(&bad.to_string()));
    w.write_pod(NS, "p", Some("blue,bad"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    // blue's host-local waits on its lock while the test holds it: the agent is killed in
    // the middle of the ADD, with the record of the whole plan written and no result in it.
    let data_dir = host_local_data_dir(&blue(&w)).join("blue");
    std::fs::create_dir_all(&data_dir).unwrap();
    let lock = std::fs::File::create(data_dir.join("lock")).unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0);
    let add = {
        let (socket, netns) = (w.plexus_config("1.0.0"), pod.path_str());
        std::thread::spawn(move || {
            let env = env_for("ADD", "c1", Some(&netns), &pod_args(NS, "p"));
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut cmd = Command::new(bin("plexus"));
            cmd.env_clear().envs(env.iter().copied()).env("CNI_PATH", REFERENCE_PLUGINS);
            run_cni(&mut cmd, &socket)
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !w.agent_log().contains("network=default/blue") {
        assert!(std::time::Instant::now() < deadline, "blue's ADD never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    w.kill_agent();
    assert!(!add.join().unwrap().ok(), "the ADD cannot succeed: its agent was killed");
    // The plugins of the killed ADD finish on their own once the lock is free (nobody kills
    // them): blue is then really attached, which the DELs below must undo.
    drop(lock);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !plugins_of("c1").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the orphaned plugins never finished");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    w.start_agent();

    // Each DEL undoes what it can and reports bad's failure; after three, bad's DEL is given
    // up (its ADD never answered) and the pod's DEL succeeds: no retry storm forever.
    for attempt in 1..=2 {
        let out = w.del("c1", &pod, (NS, "p"));
        assert_cni_error(&out, 100, &["default/bad (net2)", "Link not found"]);
        assert_eq!(w.state_files(), ["c1@eth0.json"], "DEL {attempt} keeps bad recorded");
    }
    w.del("c1", &pod, (NS, "p")).expect_ok();
    assert!(w.agent_log().contains("giving up the DEL of an attachment whose ADD never answered"));
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_del_after_the_pod_namespace_is_gone_still_releases_everything() {
    let mut w = World::new();
    w.master_link("up0");
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_nad(NS, "mac", Some(&macvlan_config(&w, "mac", "up0", "10.20.0.0/24")));
    w.write_pod(NS, "p1", Some("blue,mac"));
    w.write_pod(NS, "p2", Some("blue,mac"));
    w.start_agent();
    let pod1 = Netns::new("pxpod");
    let pod2 = Netns::new("pxpod");
    w.add("c1", &pod1, (NS, "p1")).expect_ok();
    w.add("c2", &pod2, (NS, "p2")).expect_ok();
    let stale_path = pod1.path_str();

    // Runtimes may remove the namespace before DEL, and may then pass its old path or none
    // at all (CNI_NETNS is optional for DEL): addresses and records must still go.
    drop(pod1);
    drop(pod2);
    let del = env_for("DEL", "c1", Some(&stale_path), &pod_args(NS, "p1"));
    shim_env(&w, &del, &w.plexus_config("1.0.0")).expect_ok();
    let del = env_for("DEL", "c2", None, &pod_args(NS, "p2"));
    shim_env(&w, &del, &w.plexus_config("1.0.0")).expect_ok();

    // With the namespace gone, its veth pairs are the kernel's to destroy, which it does
    // asynchronously (cleanup_net): the node-side ends outlive the namespace for a moment,
    // longer on a loaded machine. Nothing of plexus's or the plugins' is waited for here.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !w.node_veths().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    w.assert_nothing_left(&[]);
}

// ---------------------------------------------------------------------------------------
// 6. Concurrency.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_fifty_concurrent_adds_get_distinct_addresses_and_fifty_concurrent_dels_leave_nothing() {
    const PODS: usize = 50;
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    let pods: Vec<(String, Netns)> = (0..PODS)
        .map(|i| {
            let name = format!("p{i}");
            w.write_pod(NS, &name, Some("blue"));
            (name, Netns::new("pxpod"))
        })
        .collect();
    w.start_agent();

    let results: Vec<CniOutput> = std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, (name, ns))| {
                let w = &w;
                s.spawn(move || w.add(&format!("c{i}"), ns, (NS, name)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("ADD thread")).collect()
    });

    let mut default_ips = HashSet::new();
    let mut blue_ips = HashSet::new();
    for (out, (name, ns)) in results.iter().zip(&pods) {
        let r = out.expect_ok();
        let ip = r["ips"][0]["address"].as_str().unwrap_or_else(|| panic!("{name}: {r}")).to_owned();
        assert_eq!(only_address(ns, "eth0"), ip, "{name}");
        default_ips.insert(ip);
        blue_ips.insert(only_address(ns, "net1"));
    }
    assert_eq!(default_ips.len(), PODS, "default network addresses handed out twice");
    assert_eq!(blue_ips.len(), PODS, "blue addresses handed out twice");
    assert_eq!(w.state_files().len(), PODS);

    let dels: Vec<CniOutput> = std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, (name, ns))| {
                let w = &w;
                s.spawn(move || w.del(&format!("c{i}"), ns, (NS, name)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("DEL thread")).collect()
    });
    for out in &dels {
        out.expect_ok();
    }
    let netns: Vec<&Netns> = pods.iter().map(|(_, ns)| ns).collect();
    w.assert_nothing_left(&netns);
}

// ---------------------------------------------------------------------------------------
// 7. STATUS.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_status_is_ok_with_the_default_network_and_fails_without_it_as_does_add() {
    let mut w = World::new();
    // Without the CRI network API, which makes no network at all a ready node.
    w.network_api = false;
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some("blue"));
    w.start_agent();
    let status = || w.shim(&[("CNI_COMMAND", "STATUS")], &w.plexus_config("1.1.0"));

    let ok = status();
    assert!(ok.ok() && ok.stdout.is_empty(), "STATUS: {ok:?}");

    let conf = w.path("default").join("10-cluster.conflist");
    let saved = std::fs::read_to_string(&conf).unwrap();
    std::fs::remove_file(&conf).unwrap();

    assert_cni_error(&status(), 50, &["default network", "install the default network plugin"]);
    let pod = Netns::new("pxpod");
    // A pod cannot start without the default network; the runtime should come back later.
    assert_cni_error(&w.add("c1", &pod, (NS, "p")), 11, &["default network is not ready"]);
    w.assert_nothing_left(&[&pod]);

    // The network coming back is seen without a restart.
    std::fs::write(&conf, saved).unwrap();
    assert!(status().ok());
}

// ---------------------------------------------------------------------------------------
// 8. GC.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_gc_tears_down_every_attachment_not_listed_and_keeps_the_listed_one_working() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    let pods: Vec<(String, String, Netns)> = (1..=3)
        .map(|i| {
            w.write_pod(NS, &format!("p{i}"), Some("blue"));
            (format!("c{i}"), format!("p{i}"), Netns::new("pxpod"))
        })
        .collect();
    w.start_agent();
    for (cid, name, ns) in &pods {
        w.add(cid, ns, (NS, name)).expect_ok();
    }
    let (kept_cid, kept_name, kept) = &pods[1];
    let kept_allocations: HashSet<String> = [
        format!("cluster/{}", bare(&only_address(kept, "eth0"))),
        format!("blue/{}", bare(&only_address(kept, "net1"))),
    ]
    .into();

    let mut conf: Value = serde_json::from_str(&w.plexus_config("1.1.0")).unwrap();
    conf["cni.dev/valid-attachments"] = json!([{"containerID": kept_cid, "ifname": "eth0"}]);
    let out = w.shim(&[("CNI_COMMAND", "GC")], &conf.to_string());
    assert!(out.ok() && out.stdout.is_empty(), "GC: {out:?}");

    for (cid, _, ns) in [&pods[0], &pods[2]] {
        assert_eq!(sorted_links(ns), ["lo"], "{cid} was not torn down");
    }
    assert_eq!(w.state_files(), [format!("{kept_cid}@eth0.json")]);
    assert_eq!(w.ipam_allocations().into_iter().collect::<HashSet<_>>(), kept_allocations);
    assert_eq!(w.node_veths().len(), 2, "the kept pod's two veths only: {:?}", w.node_veths());
    assert_eq!(sorted_links(kept), ["eth0", "lo", "net1"]);
    w.cni("CHECK", kept_cid, kept, (NS, kept_name)).expect_ok();

    w.del(kept_cid, kept, (NS, kept_name)).expect_ok();
    let all: Vec<&Netns> = pods.iter().map(|(_, _, ns)| ns).collect();
    w.assert_nothing_left(&all);
}

#[test]
fn kernel_gc_with_a_config_older_than_1_1_0_is_refused_and_removes_nothing() {
    let mut w = World::new();
    w.write_pod(NS, "p", None);
    w.start_agent();
    let pod = Netns::new("pxpod");
    w.add("c1", &pod, (NS, "p")).expect_ok();

    // GC exists from CNI 1.1.0 on (libcni's skel answers code 1 below it). An empty
    // valid-attachments list means "nothing is valid", so acting on it would tear down
    // every pod of the node.
    let mut conf: Value = serde_json::from_str(&w.plexus_config("1.0.0")).unwrap();
    conf["cni.dev/valid-attachments"] = json!([]);
    let out = w.shim(&[("CNI_COMMAND", "GC")], &conf.to_string());

    assert_cni_error(&out, 1, &["GC", "1.1.0"]);
    assert_eq!(sorted_links(&pod), ["eth0", "lo"]);
    assert_eq!(w.state_files(), ["c1@eth0.json"]);
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 9. Bad input: the right CNI error, a message that says what to fix, nothing left.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_invalid_annotation_in_strict_mode_fails_the_add_with_code_7() {
    let mut w = World::new();
    w.agent_args.push("--strict-annotations".into());
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some(r#"[{"name": "blue""#));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert_cni_error(
        &out,
        7,
        &["invalid k8s.v1.cni.cncf.io/networks annotation", "not valid JSON", "default/p"],
    );
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_invalid_annotation_in_default_mode_attaches_the_default_network_only_and_records_an_event() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some(r#"[{"name": "blue""#));
    w.start_agent();
    let pod = Netns::new("pxpod");

    w.add("c1", &pod, (NS, "p")).expect_ok();

    assert_eq!(sorted_links(&pod), ["eth0", "lo"]);
    let status = w.network_status(NS, "p");
    assert_eq!(status.as_array().unwrap().len(), 1, "{status:#}");
    assert_eq!(status[0]["default"], true);
    let events = w.events(NS, "p");
    assert!(events.contains("InvalidNetworksAnnotation") && events.contains("not valid JSON"), "{events}");
    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_selecting_a_network_without_nad_fails_with_code_7_naming_it() {
    let mut w = World::new();
    w.write_pod(NS, "p", Some("missing"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert_cni_error(&out, 7, &["network default/missing does not exist", "create it"]);
    assert!(w.events(NS, "p").contains("NetworkRefused"), "{}", w.events(NS, "p"));
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_requesting_ips_on_a_network_whose_plugins_lack_the_capability_fails_with_code_7() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some(r#"[{"name": "blue", "ips": ["10.10.1.50/24"]}]"#));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert_cni_error(&out, 7, &["default/blue", "\"ips\"", "\"capabilities\": {\"ips\": true}"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_invalid_cni_config_in_the_nad_fails_with_code_7_saying_what_is_wrong() {
    let mut w = World::new();
    w.write_nad(NS, "broken", Some("{not json"));
    w.write_nad(NS, "typeless", Some(r#"{"cniVersion": "1.0.0", "name": "typeless"}"#));
    w.write_pod(NS, "p1", Some("broken"));
    w.write_pod(NS, "p2", Some("typeless"));
    w.start_agent();
    let pod1 = Netns::new("pxpod");
    let pod2 = Netns::new("pxpod");

    let broken = w.add("c1", &pod1, (NS, "p1"));
    let typeless = w.add("c2", &pod2, (NS, "p2"));

    assert_cni_error(&broken, 7, &["default/broken", "spec.config is invalid", "not valid JSON"]);
    assert_cni_error(&typeless, 7, &["default/typeless", "no \"type\"", "say which plugin binary to run"]);
    w.assert_nothing_left(&[&pod1, &pod2]);
}

#[test]
fn kernel_agent_down_is_try_again_later_naming_the_socket() {
    let w = World::new();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    let socket = w.socket().display().to_string();
    assert_cni_error(&out, 11, &[&format!("not reachable at {socket}"), "start the plexus agent"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_nonexistent_plugin_type_fails_with_code_7_and_rolls_back_the_default_network() {
    let mut w = World::new();
    w.write_nad(
        NS,
        "ghost",
        Some(r#"{"cniVersion": "1.0.0", "name": "ghost", "type": "nonexistent-plugin"}"#),
    );
    w.write_pod(NS, "p", Some("ghost"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert_cni_error(&out, 7, &["default/ghost", "\"nonexistent-plugin\" was not found", "install it"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_stdin_that_is_not_json_is_a_decode_failure() {
    let mut w = World::new();
    w.write_pod(NS, "p", None);
    w.start_agent();
    let pod = Netns::new("pxpod");

    let env = env_for("ADD", "c1", Some(&pod.path_str()), &pod_args(NS, "p"));
    let out = shim_with_default_socket(&w, &env, "cniVersion: 1.0.0");

    assert_cni_error(&out, 6, &["not valid JSON"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_missing_cni_containerid_is_invalid_environment() {
    let mut w = World::new();
    w.write_pod(NS, "p", None);
    w.start_agent();
    let pod = Netns::new("pxpod");

    let mut env = env_for("ADD", "c1", Some(&pod.path_str()), &pod_args(NS, "p"));
    env.retain(|(k, _)| *k != "CNI_CONTAINERID");
    let out = shim_env(&w, &env, &w.plexus_config("1.0.0"));

    assert_cni_error(&out, 4, &["CNI_CONTAINERID is required"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_unsupported_cni_version_is_incompatible_version_listing_the_supported_ones() {
    let mut w = World::new();
    w.write_pod(NS, "p", None);
    w.start_agent();
    let pod = Netns::new("pxpod");

    let env = env_for("ADD", "c1", Some(&pod.path_str()), &pod_args(NS, "p"));
    let out = shim_env(&w, &env, &w.plexus_config("9.9.9"));

    assert_cni_error(&out, 1, &["\"9.9.9\" is not supported", "use one of", "1.1.0"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_pod_missing_from_the_catalog_is_try_again_later() {
    let mut w = World::new();
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "unknown-pod"));

    assert_cni_error(&out, 11, &["pod default/unknown-pod is not known", "retry"]);
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_network_of_a_namespace_not_allowed_fails_with_code_7_mentioning_allow_namespace() {
    let mut w = World::new();
    w.write_nad("other", "blue", Some(&blue(&w)));
    w.write_pod("team-a", "p", Some("other/blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, ("team-a", "p"));

    assert_cni_error(&out, 7, &["other/blue", "--allow-namespace"]);
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 10. Result conversion end to end.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_add_result_is_in_the_requested_cni_version_while_the_default_network_runs_at_1_0_0() {
    let mut w = World::new();
    w.write_pod(NS, "p", None);
    w.start_agent();
    let pod = Netns::new("pxpod");

    for (i, version) in
        ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"].into_iter().enumerate()
    {
        let cid = format!("c{i}");
        let r = w.cni_versioned("ADD", &cid, &pod, (NS, "p"), version).expect_ok();
        let eth0 = only_address(&pod, "eth0");
        assert_eq!(r["cniVersion"], version, "{r:#}");
        match version {
            "0.1.0" | "0.2.0" => {
                assert_eq!(r["ip4"]["ip"], eth0.as_str(), "{version}: {r:#}");
                assert_eq!(r["ip4"]["gateway"], "10.88.0.1", "{version}: {r:#}");
                assert!(r.get("ips").is_none() && r.get("interfaces").is_none(), "{version}: {r:#}");
            }
            _ => {
                let ip = &r["ips"][0];
                assert_eq!(ip["address"], eth0.as_str(), "{version}: {r:#}");
                let has_version = version.starts_with("0.");
                assert_eq!(ip.get("version").is_some(), has_version, "{version}: {r:#}");
                if has_version {
                    assert_eq!(ip["version"], "4", "{version}: {r:#}");
                }
                assert!(r.get("ip4").is_none(), "{version}: {r:#}");
                let sandbox = &r["interfaces"][ip["interface"].as_u64().unwrap() as usize];
                assert_eq!(sandbox["name"], "eth0", "{version}: {r:#}");
            }
        }
        // The delegate ran with its own config version, untouched by the runtime's.
        let record = state_record(&w, &cid);
        assert_eq!(record["attachments"][0]["delegate"]["list"]["cniVersion"], "1.0.0");
        assert_eq!(record["attachments"][0]["result"]["cniVersion"], "1.0.0");
        w.cni_versioned("DEL", &cid, &pod, (NS, "p"), version).expect_ok();
        w.assert_nothing_left(&[&pod]);
    }
}

// ---------------------------------------------------------------------------------------
// 11. ADD retried without DEL.
// ---------------------------------------------------------------------------------------

#[test]
fn kernel_add_repeated_without_del_leaves_exactly_one_set_of_interfaces_and_addresses() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "p", Some("blue"));
    w.start_agent();
    let pod = Netns::new("pxpod");

    w.add("c1", &pod, (NS, "p")).expect_ok();
    let second = w.add("c1", &pod, (NS, "p")).expect_ok();

    assert_eq!(sorted_links(&pod), ["eth0", "lo", "net1"]);
    let eth0 = only_address(&pod, "eth0");
    assert_eq!(second["ips"][0]["address"], eth0.as_str(), "{second:#}");
    let mut allocations = w.ipam_allocations();
    allocations.sort();
    assert_eq!(
        allocations,
        [format!("blue/{}", bare(&only_address(&pod, "net1"))), format!("cluster/{}", bare(&eth0))]
    );
    assert_eq!(w.state_files(), ["c1@eth0.json"]);
    assert_eq!(w.node_veths().len(), 2, "{:?}", w.node_veths());
    w.cni("CHECK", "c1", &pod, (NS, "p")).expect_ok();

    w.del("c1", &pod, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&pod]);
}

// ---------------------------------------------------------------------------------------
// 12. Found when tried from outside (issue 13).
// ---------------------------------------------------------------------------------------

/// Runs a configlist's ADD the way a runtime does without plexus (libcni): each plugin
/// exec'd in the node with the list's name and version, the capabilities' runtimeConfig and
/// the previous plugin's result. Returns the last result.
fn runtime_add(w: &World, list: &Value, cid: &str, pod: &Netns, args: &str, runtime_config: &Value) -> Value {
    let mut prev: Option<Value> = None;
    for plugin in list["plugins"].as_array().expect("a configlist") {
        let mut conf = plugin.clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        if let Some(caps) = plugin["capabilities"].as_object() {
            let rc: serde_json::Map<String, Value> = caps
                .keys()
                .filter_map(|cap| runtime_config.get(cap).map(|v| (cap.clone(), v.clone())))
                .collect();
            conf["runtimeConfig"] = Value::Object(rc);
        }
        if let Some(p) = &prev {
            conf["prevResult"] = p.clone();
        }
        let binary = PathBuf::from(REFERENCE_PLUGINS).join(plugin["type"].as_str().expect("a plugin type"));
        let mut cmd = w.node.command(binary);
        cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").envs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", pod.path_str().as_str()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
            ("CNI_PATH", REFERENCE_PLUGINS),
        ]);
        prev = Some(run_cni(&mut cmd, &conf.to_string()).expect_ok());
    }
    prev.expect("a configlist with plugins")
}

fn nat_rules(w: &World) -> String {
    let (ok, rules) = w.node.exec(&["iptables", "-t", "nat", "-S"]);
    assert!(ok, "iptables: {rules}");
    rules
}

/// plexus installed on a node with running pods: a pod attached by the default network
/// alone, before plexus's config existed, is DELeted through plexus, which has no record of
/// it. Its address, its host port's DNAT rule and the pod's interface must be released, as
/// the runtime's DEL would have without plexus (as Multus does), and repeating the DEL, with
/// or without the namespace, still succeeds.
#[test]
fn kernel_del_of_a_pod_attached_before_plexus_runs_the_default_networks_del() {
    let mut w = World::new();
    let mut default: Value =
        serde_json::from_str(&w.bridge_config("cluster", "cni0", "10.88.0.0/24", true)).unwrap();
    default["plugins"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "portmap", "capabilities": {"portMappings": true}}));
    w.write_default_network("10-cluster.conflist", &default.to_string());
    w.write_pod(NS, "p", None);
    let pod = Netns::new("pxpod");
    let args = pod_args(NS, "p");
    let runtime_config =
        json!({"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]});

    let result = runtime_add(&w, &default, "c1", &pod, &args, &runtime_config);
    let addr = only_address(&pod, "eth0");
    assert_eq!(result["ips"][0]["address"], addr.as_str(), "{result:#}");
    assert_eq!(w.ipam_allocations(), [format!("cluster/{}", bare(&addr))]);
    let dnat = format!("--to-destination {}:80", bare(&addr));
    assert!(nat_rules(&w).contains(&dnat), "no DNAT of the host port:\n{}", nat_rules(&w));

    // plexus takes over the node; the runtime DELs with its current config, plexus's, which
    // carries kubelet's runtimeConfig as any DEL does.
    w.start_agent();
    let mut conf: Value = serde_json::from_str(&w.plexus_config("1.0.0")).unwrap();
    conf["runtimeConfig"] = runtime_config;
    let conf = conf.to_string();
    shim_env(&w, &env_for("DEL", "c1", Some(&pod.path_str()), &args), &conf).expect_ok();

    assert_eq!(w.ipam_allocations(), Vec::<String>::new(), "the address is still allocated");
    let nat = nat_rules(&w);
    assert!(!nat.contains(&dnat) && !nat.contains("CNI-DN-"), "the host port's DNAT is left:\n{nat}");
    assert_eq!(sorted_links(&pod), ["lo"]);
    // DEL is idempotent: the plugins find nothing and say so by succeeding.
    shim_env(&w, &env_for("DEL", "c1", Some(&pod.path_str()), &args), &conf).expect_ok();
    shim_env(&w, &env_for("DEL", "c1", None, &args), &conf).expect_ok();
    assert!(w.agent_log().contains("no record of the container"), "{}", w.agent_log());
    w.assert_nothing_left(&[&pod]);
}

/// Writes a pod manifest with the given uid and annotations.
fn write_pod_with(w: &World, name: &str, uid: &str, annotations: Value) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "annotations": annotations},
    });
    std::fs::write(w.path("pods").join(format!("{NS}_{name}.json")), pod.to_string()).expect("writing pod");
}

fn status_file(w: &World, name: &str) -> PathBuf {
    w.path("state").join("pods").join(NS).join(format!("{name}.network-status.json"))
}

/// A StatefulSet pod re-created under its name has a new UID: a sandbox of the old pod (its
/// K8S_POD_UID) gets no networks and writes no network-status onto the new pod. A static
/// pod's mirror has another UID than kubelet's by design and is not compared.
#[test]
fn kernel_add_for_another_uid_of_the_pods_name_is_refused_and_a_mirror_pod_is_not() {
    let mut w = World::new();
    w.write_nad(NS, "blue", Some(&blue(&w)));
    write_pod_with(&w, "web-0", "uid-new", json!({"k8s.v1.cni.cncf.io/networks": "blue"}));
    write_pod_with(
        &w,
        "static-web",
        "uid-mirror",
        json!({"k8s.v1.cni.cncf.io/networks": "blue", "kubernetes.io/config.mirror": "5e1f0c"}),
    );
    w.start_agent();
    let (stale, current, mirror) = (Netns::new("pxpod"), Netns::new("pxpod"), Netns::new("pxpod"));
    let with_uid = |name: &str, uid: &str| format!("{};K8S_POD_UID={uid}", pod_args(NS, name));
    let conf = w.plexus_config("1.0.0");

    let out =
        shim_env(&w, &env_for("ADD", "c-old", Some(&stale.path_str()), &with_uid("web-0", "uid-old")), &conf);

    assert_cni_error(&out, 11, &["pod default/web-0", "UID uid-new", "UID uid-old", "re-created"]);
    assert!(!status_file(&w, "web-0").exists(), "network-status written for a stale sandbox");
    w.assert_nothing_left(&[&stale]);

    // The pod's own sandbox, and the static pod under kubelet's UID, are attached.
    shim_env(&w, &env_for("ADD", "c-new", Some(&current.path_str()), &with_uid("web-0", "uid-new")), &conf)
        .expect_ok();
    assert_eq!(sorted_links(&current), ["eth0", "lo", "net1"]);
    shim_env(
        &w,
        &env_for("ADD", "c-static", Some(&mirror.path_str()), &with_uid("static-web", "uid-kubelet")),
        &conf,
    )
    .expect_ok();
    assert_eq!(sorted_links(&mirror), ["eth0", "lo", "net1"]);
    assert!(status_file(&w, "static-web").exists());
    w.del("c-new", &current, (NS, "web-0")).expect_ok();
    w.del("c-static", &mirror, (NS, "static-web")).expect_ok();
    w.assert_nothing_left(&[&stale, &current, &mirror]);
}

fn route_dsts(result: &Value) -> Vec<String> {
    let mut v: Vec<String> = result["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["dst"].as_str().unwrap_or_default().to_owned())
        .collect();
    v.sort();
    v
}

/// After a `default-route` selection took the pod's IPv4 default route, the result the
/// runtime gets describes the pod: no `0.0.0.0/0` on eth0, while the IPv6 default route the
/// selection did not take stays, in the result as in the pod.
#[test]
fn kernel_add_result_leaves_out_the_default_route_a_selection_took() {
    let mut w = World::new();
    let default = json!({
        "cniVersion": "1.0.0",
        "name": "cluster",
        "plugins": [{
            "type": "bridge", "bridge": "cni0", "isGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.88.0.0/24"}], [{"subnet": "fd00:88::/64"}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
                "dataDir": w.path("ipam").join("cluster"),
            }
        }]
    });
    w.write_default_network("10-cluster.conflist", &default.to_string());
    w.write_nad(NS, "blue", Some(&blue(&w)));
    w.write_pod(NS, "plain", Some("blue"));
    w.write_pod(NS, "p", Some(r#"[{"name": "blue", "default-route": ["10.10.1.1"]}]"#));
    // Multus's keys too (`gateway`; `mtu` where a result gives one): the compatibility switch
    // for tools that read them.
    w.agent_args.push("--network-status-multus-keys".into());
    w.start_agent();
    let (a, b) = (Netns::new("pxpod"), Netns::new("pxpod"));

    let plain = w.add("c1", &a, (NS, "plain")).expect_ok();
    let moved = w.add("c2", &b, (NS, "p")).expect_ok();

    assert_eq!(route_dsts(&plain), ["0.0.0.0/0", "::/0"], "{plain:#}");
    assert_eq!(route_dsts(&moved), ["::/0"], "{moved:#}");
    let routes = b.default_routes();
    assert_eq!(routes[0], "net1 10.10.1.1", "{routes:?}");
    assert!(routes[1..].iter().all(|r| r.starts_with("eth0 fd00:88::")), "{routes:?}");
    // network-status says the same: the gateway each attachment holds.
    let status = w.network_status(NS, "p");
    assert_eq!(status_of(&status, "net1")["gateway"], json!(["10.10.1.1"]));
    assert_eq!(status_of(&status, "eth0")["gateway"], json!(["fd00:88::1"]));
    w.del("c1", &a, (NS, "plain")).expect_ok();
    w.del("c2", &b, (NS, "p")).expect_ok();
    w.assert_nothing_left(&[&a, &b]);
}

/// Two selections with one MAC would put two interfaces with one address on one bridge.
#[test]
fn kernel_two_selections_with_one_mac_are_refused_with_code_7() {
    let mut w = World::new();
    let mut config: Value = serde_json::from_str(&blue(&w)).unwrap();
    config["plugins"][0]["capabilities"] = json!({"mac": true});
    w.write_nad(NS, "blue", Some(&config.to_string()));
    w.write_pod(
        NS,
        "p",
        Some(
            r#"[{"name": "blue", "mac": "02:00:00:00:10:01"}, {"name": "blue", "mac": "02-00-00-00-10-01"}]"#,
        ),
    );
    w.start_agent();
    let pod = Netns::new("pxpod");

    let out = w.add("c1", &pod, (NS, "p"));

    assert_cni_error(
        &out,
        7,
        &["selections 0 (network default/blue) and 1 (network default/blue)", "02-00-00-00-10-01"],
    );
    assert!(w.events(NS, "p").contains("NetworkRefused"), "{}", w.events(NS, "p"));
    w.assert_nothing_left(&[&pod]);
}

/// GC after plexus took over a node: a pod the runtime lists but plexus has no record of
/// (attached by the default network before plexus's config existed) is still valid for the
/// default network, whose GC would otherwise release its address under the running pod.
#[test]
fn kernel_gc_tells_the_default_network_every_listed_attachment_recorded_or_not() {
    let rec = plexus_tests::Recorder::new();
    let mut w = World::new();
    w.agent_args.push(rec.agent_arg());
    let default =
        json!({"cniVersion": "1.1.0", "name": "cluster", "plugins": [plexus_tests::Recorder::plugin("gc")]});
    w.write_default_network("10-cluster.conflist", &default.to_string());
    w.start_agent();

    let mut conf: Value = serde_json::from_str(&w.plexus_config("1.1.0")).unwrap();
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "c-before-plexus", "ifname": "eth0"}]);
    let out = w.shim(&[("CNI_COMMAND", "GC")], &conf.to_string());

    assert!(out.ok() && out.stdout.is_empty(), "GC: {out:?}");
    let gcs: Vec<_> = rec.calls_of("gc").into_iter().filter(|c| c.command == "GC").collect();
    assert_eq!(gcs.len(), 1, "{gcs:?}");
    assert_eq!(
        gcs[0].config["cni.dev/valid-attachments"],
        json!([{"containerID": "c-before-plexus", "ifname": "eth0"}]),
        "{:#}",
        gcs[0].config
    );
}
