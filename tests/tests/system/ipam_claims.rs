//! IPAMClaims (NPWG spec 4.1.2.1.11 and section 8) on a node, through the real shim and the
//! real agent in Kubernetes mode (`--catalog kube` against the in-process test API server,
//! authorized by `deploy/rbac.yaml`'s ClusterRole and validating objects against
//! `deploy/ipamclaim-crd.yaml`): the agent's native macvlan with its built-in host-local IPAM
//! allocates for the claim, writes the claim's status, keeps its addresses over pod DELs and
//! gives them back once the claim is deleted.
//!
//! The API server listens on the host's loopback; a forwarder on the same port of the node
//! namespace's loopback lets the agent reach it with the server's own kubeconfig.

use std::time::{Duration, Instant};

use plexus_tests::test_apiserver::{
    pod, rbac, ServerOptions, TestApiServer, EVENTS, IPAM_CLAIMS, NADS, PODS,
};
use plexus_tests::traffic::{cid, forward_into, plain};
use plexus_tests::{CniOutput, Netns, World};
use serde_json::{json, Value};

const NODE: &str = "node-1";
const NS: &str = "default";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
const MASTER: &str = "ipcm0";

/// Fields drop in order: pods first, then the world (its agent), then the API server.
struct ClaimWorld {
    pods: Vec<(String, Netns)>,
    w: World,
    api: TestApiServer,
}

impl ClaimWorld {
    /// A node whose agent checks the claims it holds every second, with the network
    /// `tenantred` (macvlan on `MASTER`, host-local 10.66.0.10-20) and, for the claims of
    /// another network, `bluenet`.
    fn start() -> ClaimWorld {
        let mut w = World::new();
        let api = TestApiServer::start_with(ServerOptions {
            rbac: Some(rbac::deploy_rules()),
            ..Default::default()
        });
        forward_into(&w.node, &api.url());
        w.master_link(MASTER);
        w.agent_args.extend(
            [
                "--catalog",
                "kube",
                "--kubeconfig",
                &api.kubeconfig().display().to_string(),
                "--node-name",
                NODE,
                "--strict-annotations",
                "--ipam-claim-check-interval",
                "1",
            ]
            .map(String::from),
        );
        let world = ClaimWorld { pods: Vec::new(), w, api };
        world.nad("tenantred");
        world.nad("bluenet");
        let mut world = world;
        world.w.start_agent();
        let deadline = Instant::now() + Duration::from_secs(20);
        let synced = |log: &str| {
            ["NetworkAttachmentDefinitions", "pods"]
                .iter()
                .all(|w| log.contains(&format!("{w}: initial state complete")))
        };
        while !synced(&plain(&world.w.agent_log())) {
            assert!(Instant::now() < deadline, "the agent never synced:\n{}", world.w.agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
        world
    }

    fn nad(&self, name: &str) {
        let config = json!({
            "cniVersion": "1.0.0", "name": name, "type": "macvlan", "master": MASTER, "mode": "bridge",
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.66.0.0/24", "rangeStart": "10.66.0.10", "rangeEnd": "10.66.0.20"}]],
                "dataDir": self.w.path("ipam").join(name),
            }
        });
        self.api.apply(plexus_tests::test_apiserver::nad(NS, name, Some(&config.to_string())));
        assert!(self.api.get(NADS, NS, name).is_some());
    }

    /// An IPAMClaim for `network`, with `ips` as its status when given.
    fn claim(&self, name: &str, network: &str, ips: Option<&[&str]>) {
        let mut claim = json!({
            "apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
            "metadata": {"name": name, "namespace": NS,
                         "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                              "name": name, "uid": "a0790345-4e84-4257-837a-e3d762d191ab"}]},
            "spec": {"network": network, "interface": "pod16367aacb67"},
        });
        if let Some(ips) = ips {
            claim["status"] = json!({"ips": ips});
        }
        self.api.apply(claim);
    }

    fn claim_ips(&self, name: &str) -> Value {
        self.api.get(IPAM_CLAIMS, NS, name).unwrap_or_else(|| panic!("no IPAMClaim {name}"))["status"]["ips"]
            .clone()
    }

    /// ADD of pod `name` (sandbox `cid(name)`) selecting `networks`.
    fn add(&mut self, name: &str, networks: &str) -> CniOutput {
        self.api.apply(pod(NS, name, NODE, &[(NETWORKS, networks)]));
        let ns = Netns::new("ipcpod");
        let out = self.w.add(&cid(name), &ns, (NS, name));
        self.pods.push((name.to_owned(), ns));
        out
    }

    fn netns(&self, name: &str) -> &Netns {
        &self.pods.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no pod {name}")).1
    }

    fn del(&self, name: &str) {
        let out = self.w.del(&cid(name), self.netns(name), (NS, name));
        assert!(out.ok(), "DEL {name}: {} {}", out.stdout, out.stderr);
    }

    /// The network-status the agent patched onto the pod, once it is there.
    fn network_status(&self, name: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .api
                .get(PODS, NS, name)
                .and_then(|p| p["metadata"]["annotations"][NETWORK_STATUS].as_str().map(str::to_owned));
            if let Some(text) = found {
                return serde_json::from_str(&text).expect("network-status JSON");
            }
            assert!(Instant::now() < deadline, "no network-status on pod {name}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// host-local's allocations of `tenantred` ("tenantred/10.66.0.11").
    fn allocations(&self) -> Vec<String> {
        self.w.ipam_allocations().into_iter().filter(|a| a.starts_with("tenantred/")).collect()
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}\n{}", self.w.agent_log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn events(&self, pod: &str) -> Vec<Value> {
        self.api.objects(EVENTS).into_iter().filter(|e| e["regarding"]["name"] == pod).collect()
    }

    #[track_caller]
    fn assert_nothing_left(&self) {
        let pods: Vec<&Netns> = self.pods.iter().map(|(_, ns)| ns).collect();
        self.w.assert_nothing_left(&pods);
    }
}

const CLAIMED: &str =
    r#"[{"name": "tenantred", "interface": "net1", "ipam-claim-reference": "vm-a.tenantred"}]"#;

#[test]
fn kernel_a_claim_keeps_its_addresses_for_the_re_created_pod_until_it_is_deleted() {
    let mut cw = ClaimWorld::start();
    cw.claim("vm-a.tenantred", "tenantred", None);
    // Another pod first, so the claim's address is not merely the range's first.
    cw.add("other", "tenantred").expect_ok();
    assert_eq!(cw.network_status("other")[1]["ips"], json!(["10.66.0.10"]));

    // No addresses in the claim: allocated, and written to its status (CIDR, as spec 8.2.1).
    cw.add("virt-launcher-a-1", CLAIMED).expect_ok();
    assert_eq!(cw.claim_ips("vm-a.tenantred"), json!(["10.66.0.11/24"]));
    let status = cw.network_status("virt-launcher-a-1");
    assert_eq!(
        (&status[1]["name"], &status[1]["ips"]),
        (&json!("default/tenantred"), &json!(["10.66.0.11"]))
    );
    assert_eq!(cw.netns("virt-launcher-a-1").addresses("net1"), ["10.66.0.11/24"]);

    // The pod goes: the address stays the claim's (spec 8: not released before the claim is).
    cw.del("virt-launcher-a-1");
    cw.del("other");
    assert_eq!(cw.allocations(), ["tenantred/10.66.0.11"]);

    // A fresh pod (another sandbox) takes the address round-robin would give next, and the
    // claim's is not it; the pod re-created with the claim gets the claim's again.
    cw.add("fresh", "tenantred").expect_ok();
    assert_eq!(cw.network_status("fresh")[1]["ips"], json!(["10.66.0.12"]));
    cw.add("virt-launcher-a-2", CLAIMED).expect_ok();
    assert_eq!(cw.network_status("virt-launcher-a-2")[1]["ips"], json!(["10.66.0.11"]));
    assert_eq!(cw.netns("virt-launcher-a-2").addresses("net1"), ["10.66.0.11/24"]);
    assert_eq!(cw.claim_ips("vm-a.tenantred"), json!(["10.66.0.11/24"]));

    // The claim is deleted while its pod runs: the address stays while the pod has it...
    assert!(cw.api.delete(IPAM_CLAIMS, NS, "vm-a.tenantred").is_some());
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(cw.allocations(), ["tenantred/10.66.0.11", "tenantred/10.66.0.12"]);
    // ...and is released once the pod is gone.
    cw.del("virt-launcher-a-2");
    cw.del("fresh");
    // The release is logged right after the allocations go: both are waited for.
    cw.wait_for("the deleted claim's address to be released, and said", || {
        cw.allocations().is_empty()
            && plain(&cw.w.agent_log()).contains("the IPAMClaim is gone: its addresses are released")
    });
    assert!(cw.w.path("state").join("ipam-claims").read_dir().is_ok_and(|mut d| d.next().is_none()));
    cw.assert_nothing_left();
}

#[test]
fn kernel_a_claims_conflicts_are_refused_clearly() {
    let mut cw = ClaimWorld::start();
    // A claim with addresses: the attachment gets exactly them, and the status is left as it is.
    cw.claim("vm-b", "tenantred", Some(&["10.66.0.15/24"]));
    let claim_b = r#"[{"name": "tenantred", "ipam-claim-reference": "vm-b"}]"#;
    cw.add("b-1", claim_b).expect_ok();
    assert_eq!(cw.network_status("b-1")[1]["ips"], json!(["10.66.0.15"]));
    assert_eq!(cw.claim_ips("vm-b"), json!(["10.66.0.15/24"]));

    // The claim is held by a pod that still runs: a second pod is refused, told on the pod,
    // and nothing of it is left.
    let refused = cw.add("b-2", claim_b);
    assert_eq!(refused.code(), Some(7), "{}", refused.stdout);
    assert!(
        refused.msg().contains(&format!(
            "IPAMClaim default/vm-b is in use by pod default/b-1 (container {}, interface net1)",
            cid("b-1")
        )),
        "{}",
        refused.msg()
    );
    // Events are posted in the background, after the answer may have gone.
    cw.wait_for("a NetworkRefused event on pod b-2", || {
        cw.events("b-2").iter().any(|e| e["reason"] == "NetworkRefused")
    });
    assert_eq!(cw.netns("b-2").link_names(), ["lo"]);

    // Claims this network cannot honour, each refused with code 7 and what to change.
    cw.claim("vm-far", "tenantred", Some(&["192.168.9.9/24"]));
    cw.claim("vm-blue", "bluenet", None);
    for (pod_name, networks, reason) in [
        (
            "far",
            r#"[{"name": "tenantred", "ipam-claim-reference": "vm-far"}]"#,
            "IPAMClaim default/vm-far holds 192.168.9.9, which is in no range of this network",
        ),
        (
            "blue",
            r#"[{"name": "tenantred", "ipam-claim-reference": "vm-blue"}]"#,
            "IPAMClaim default/vm-blue was created for network \"bluenet\", but the selection attaches network \
             default/tenantred",
        ),
        (
            "missing",
            r#"[{"name": "tenantred", "ipam-claim-reference": "vm-none"}]"#,
            "references IPAMClaim default/vm-none, which does not exist",
        ),
        (
            "both",
            r#"[{"name": "tenantred", "ipam-claim-reference": "vm-b", "ips": ["10.66.0.16/24"]}]"#,
            "\"ips\" and \"ipam-claim-reference\" are both set",
        ),
    ] {
        let out = cw.add(pod_name, networks);
        assert_eq!(out.code(), Some(7), "{pod_name}: {}", out.stdout);
        assert!(out.msg().contains(reason), "{pod_name}: {}", out.msg());
        assert_eq!(cw.netns(pod_name).link_names(), ["lo"], "{pod_name}");
    }
    assert_eq!(cw.claim_ips("vm-blue"), Value::Null, "a refused claim's status is not written");
    assert_eq!(cw.allocations(), ["tenantred/10.66.0.15"]);

    // A network whose IPAM is exec'd (the reference bridge and host-local) ignores the claim, as
    // the spec says: the pod is attached as without it, the claim's status stays empty, and the
    // pod is told why.
    let bridge = json!({
        "cniVersion": "1.0.0", "name": "ipvnet", "type": "bridge", "bridge": "ipcbr0",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.67.0.0/24"}]],
                 "dataDir": cw.w.path("ipam").join("ipvnet")}
    });
    cw.api.apply(plexus_tests::test_apiserver::nad(NS, "ipvnet", Some(&bridge.to_string())));
    cw.claim("vm-ipv", "ipvnet", None);
    cw.add("ipv", r#"[{"name": "ipvnet", "ipam-claim-reference": "vm-ipv"}]"#).expect_ok();
    assert_eq!(cw.network_status("ipv")[1]["ips"], json!(["10.67.0.2"]));
    assert_eq!(cw.claim_ips("vm-ipv"), Value::Null);
    cw.wait_for("an IPAMClaimIgnored event on pod ipv", || {
        cw.events("ipv").iter().any(|e| e["reason"] == "IPAMClaimIgnored")
    });
    let ignored: Vec<Value> =
        cw.events("ipv").into_iter().filter(|e| e["reason"] == "IPAMClaimIgnored").collect();
    assert_eq!(ignored.len(), 1, "{:?}", cw.events("ipv"));
    assert!(
        ignored[0]["note"].as_str().unwrap_or_default().contains(
            "IPAMClaim default/vm-ipv is ignored: no plugin of network default/ipvnet has IPAM that honours claims"
        ),
        "{}",
        ignored[0]
    );
    cw.del("ipv");

    // Once b-1 is gone, b-2 takes the claim, with its address.
    cw.del("b-1");
    cw.pods.retain(|(n, _)| n != "b-2");
    cw.add("b-2", claim_b).expect_ok();
    assert_eq!(cw.network_status("b-2")[1]["ips"], json!(["10.66.0.15"]));
    cw.del("b-2");
    for claim in ["vm-b", "vm-far", "vm-blue", "vm-ipv"] {
        cw.api.delete(IPAM_CLAIMS, NS, claim);
    }
    // The claims are forgotten just after their addresses go: both are waited for.
    let registry = cw.w.path("state").join("ipam-claims");
    cw.wait_for("the deleted claims' addresses to be released and the claims forgotten", || {
        cw.allocations().is_empty() && registry.read_dir().is_ok_and(|mut d| d.next().is_none())
    });
    cw.assert_nothing_left();
}

/// Standalone mode has no IPAMClaims: a selection referencing one is refused before anything
/// is attached, saying so.
#[test]
fn kernel_a_claim_in_standalone_mode_is_refused() {
    let mut w = World::new();
    w.master_link(MASTER);
    w.write_nad(
        NS,
        "tenantred",
        Some(
            &json!({"cniVersion": "1.0.0", "name": "tenantred", "type": "macvlan",
        "master": MASTER, "ipam": {"type": "static", "addresses": [{"address": "10.66.0.5/24"}]}})
            .to_string(),
        ),
    );
    w.write_pod(NS, "vm", Some(r#"[{"name": "tenantred", "ipam-claim-reference": "vm-a.tenantred"}]"#));
    w.start_agent();
    let pod = Netns::new("ipcpod");
    let out = w.add(&cid("vm"), &pod, (NS, "vm"));
    assert_eq!(out.code(), Some(7), "{}", out.stdout);
    assert_eq!(
        out.msg(),
        "network default/tenantred references IPAMClaim default/vm-a.tenantred, but IPAMClaims are Kubernetes \
         objects and this agent reads none (it runs without --catalog kube); remove \"ipam-claim-reference\""
    );
    assert!(w.events(NS, "vm").contains("NetworkRefused"), "{}", w.events(NS, "vm"));
    w.assert_nothing_left(&[&pod]);
}
