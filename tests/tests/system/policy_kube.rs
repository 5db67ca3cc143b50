//! The network attachment policy in Kubernetes mode: `NetworkAttachmentPolicy` objects served
//! by the test API server (with the ClusterRole of `deploy/rbac.yaml`), watched by the agent's
//! unchanged code, checked by the engine on ADD. The delegate is a fake plugin registered as
//! the native `macvlan` (these tests are about the policy, not about links).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use plexus_agent::cni::Command;
use plexus_agent::delegate::{DelegateError, Delegator, NativeCall, NativePlugin, NativePlugins};
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::kube::{build_client, ClientSource, KubeCatalog, KubeCatalogConfig};
use plexus_agent::policy::{HostLookup, PolicyHandle, PolicyState};
use plexus_agent::state::StateStore;
use plexus_cni_shim::{Request, Response};
use plexus_tests::test_apiserver::{
    nad, network_attachment_policy, pod, rbac, ServerOptions, TestApiServer, EVENTS, POLICIES,
};
use serde_json::{json, Value};
use tempfile::TempDir;

const NODE: &str = "node-1";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// Answers ADD with a minimal result and counts them.
#[derive(Default)]
struct FakePlugin {
    adds: AtomicUsize,
}

impl NativePlugin for FakePlugin {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        async move {
            if call.command != Command::Add {
                return Ok(None);
            }
            self.adds.fetch_add(1, Ordering::SeqCst);
            Ok(Some(json!({
                "cniVersion": call.config["cniVersion"],
                "interfaces": [{"name": call.env.ifname, "mac": "02:00:00:00:00:01", "sandbox": call.env.netns}],
                "ips": [{"address": "10.9.0.2/24", "interface": 0}]
            })))
        }
        .boxed()
    }
}

struct NoPfs;
impl HostLookup for NoPfs {
    fn sriov_pf(&self, _: &str) -> Option<String> {
        None
    }
}

struct Harness {
    server: TestApiServer,
    engine: Engine,
    policy: PolicyHandle,
    fake: Arc<FakePlugin>,
    _catalog: Arc<KubeCatalog>,
    _watch: tokio::task::JoinHandle<()>,
    _dir: TempDir,
}

impl Harness {
    async fn start(server: TestApiServer) -> Self {
        let dir = tempfile::Builder::new().prefix("plexus-policy-kube-").tempdir().expect("tempdir");
        let default_dir = dir.path().join("default");
        std::fs::create_dir_all(&default_dir).expect("default network dir");
        let conflist =
            json!({"cniVersion": "1.0.0", "name": "cluster-wide-default", "plugins": [{"type": "fake"}]});
        std::fs::write(default_dir.join("10-default.conflist"), conflist.to_string())
            .expect("default network");
        let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
        let catalog = Arc::new(KubeCatalog::start(client.clone(), KubeCatalogConfig::new(NODE)));
        assert!(catalog.wait_synced(Duration::from_secs(20)).await, "the catalog did not sync");
        let (policy, _current, watch) = plexus_agent::kube::policy::start(client, Arc::new(NoPfs));
        let watch = tokio::spawn(watch);
        let fake = Arc::new(FakePlugin::default());
        let mut natives = NativePlugins::default();
        natives.register("fake", fake.clone());
        natives.register("macvlan", fake.clone());
        let engine = Engine::new(
            EngineConfig {
                default_network_dir: default_dir,
                network_conf_dirs: Vec::new(),
                allowed_namespaces: vec!["default".into()],
                strict_annotations: false,
                device_info_dir: dir.path().join("devinfo"),
                network_status_keys: plexus_agent::spec::status::StatusKeys::Spec,
            },
            catalog.clone(),
            Delegator { bin_dirs: Vec::new(), timeout: Duration::from_secs(10), natives },
            StateStore::new(&dir.path().join("state")),
        )
        .with_policy(policy.clone());
        Harness { server, engine, policy, fake, _catalog: catalog, _watch: watch, _dir: dir }
    }

    async fn add(&self, namespace: &str, name: &str, cid: &str) -> Response {
        self.engine
            .handle(Request {
                command: "ADD".into(),
                container_id: Some(cid.into()),
                netns: Some(format!("/var/run/netns/{cid}")),
                ifname: Some("eth0".into()),
                args: Some(format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}")),
                path: None,
                config: json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus"}).to_string(),
            })
            .await
    }

    fn events(&self, pod_name: &str, reason: &str) -> Vec<Value> {
        self.server
            .objects(EVENTS)
            .into_iter()
            .filter(|e| e["regarding"]["name"] == pod_name && e["reason"] == reason)
            .collect()
    }
}

fn cni_error(r: &Response) -> (u64, String, String) {
    assert_ne!(r.exit_code, 0, "expected a CNI error, got {}", r.stdout);
    let v: Value = serde_json::from_str(&r.stdout).expect("error JSON");
    (
        v["code"].as_u64().unwrap_or(0),
        v["msg"].as_str().unwrap_or("").into(),
        v["details"].as_str().unwrap_or("").into(),
    )
}

async fn eventually(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The value of a metric line (`name{labels} value`) of the agent's metrics (process-wide:
/// other tests of this binary add to them, so only "at least" can be asserted).
fn metric(line_start: &str) -> f64 {
    let text = plexus_agent::metrics::encode();
    text.lines()
        .find_map(|l| l.strip_prefix(line_start).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no metric {line_start} in:\n{text}"))
}

fn macvlan(name: &str, master: &str) -> String {
    json!({"cniVersion": "1.0.0", "name": name, "type": "macvlan", "master": master}).to_string()
}

fn tenants_policy(masters: &[&str]) -> Value {
    network_attachment_policy(
        "tenants",
        json!({"rules": [{"name": "ns1-macvlan", "namespaces": ["ns1"], "plugins": ["macvlan"],
                          "interfaces": {"macvlanMasters": masters}}]}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_object_refuses_a_nad_on_another_master_with_an_event_and_follows_changes() {
    let server =
        TestApiServer::start_with(ServerOptions { rbac: Some(rbac::deploy_rules()), ..Default::default() });
    server.apply(nad("ns1", "ok-net", Some(&macvlan("ok-net", "eth1"))));
    server.apply(nad("ns1", "node-nic", Some(&macvlan("node-nic", "eth0"))));
    server.apply(pod("ns1", "good", NODE, &[(NETWORKS, "ok-net")]));
    server.apply(pod("ns1", "bad", NODE, &[(NETWORKS, "node-nic")]));
    server.apply(pod("ns2", "other", NODE, &[(NETWORKS, "ns2/net")]));
    server.apply(nad("ns2", "net", Some(&macvlan("net", "eth1"))));
    server.apply(tenants_policy(&["eth1"]));
    let h = Harness::start(server).await;
    eventually("the policy is read", Duration::from_secs(10), || h.policy.is_loaded()).await;

    // Allowed: attached.
    let r = h.add("ns1", "good", "c-good").await;
    assert_eq!(r.exit_code, 0, "{}", r.stdout);
    assert_eq!(h.fake.adds.load(Ordering::SeqCst), 2, "default + ok-net");

    // Refused before anything is attached: code 7, the rule, the interface, the namespace.
    let r = h.add("ns1", "bad", "c-bad").await;
    let (code, msg, details) = cni_error(&r);
    assert_eq!(code, 7, "{msg}");
    for needle in [
        r#"rule "ns1-macvlan" of NetworkAttachmentPolicy "tenants""#,
        r#""eth0""#,
        "namespace ns1",
        "macvlanMasters",
    ] {
        assert!(msg.contains(needle), "{needle:?} not in {msg}");
    }
    assert_eq!(details, "pod ns1/bad");
    assert!(metric("plexus_network_policy_refusals_total") >= 1.0);
    assert_eq!(h.fake.adds.load(Ordering::SeqCst), 2, "nothing attached for the refused pod");
    eventually("the NetworkRefused event", Duration::from_secs(10), || {
        !h.events("bad", "NetworkRefused").is_empty()
    })
    .await;
    let event = &h.events("bad", "NetworkRefused")[0];
    assert!(event["note"].as_str().unwrap_or_default().contains("eth0"), "{event}");

    // A namespace no rule covers is refused, naming it.
    let (code, msg, _) = cni_error(&h.add("ns2", "other", "c-other").await);
    assert_eq!(code, 7);
    assert!(msg.contains("no rule covers namespace ns2"), "{msg}");

    // The object changes: the next ADD sees it, without a restart.
    h.server.apply(tenants_policy(&["eth1", "eth0"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = h.add("ns1", "bad", "c-bad").await;
        if r.exit_code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the changed policy was not applied: {}", r.stdout);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Deleted: no policy, everything allowed again.
    h.server.delete(POLICIES, "", "tenants");
    eventually("no policy", Duration::from_secs(10), || {
        matches!(h.policy.state(), PolicyState::Unrestricted)
    })
    .await;
    let r = h.add("ns2", "other", "c-other").await;
    assert_eq!(r.exit_code, 0, "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_refuses_everything_and_an_unserved_resource_allows_everything() {
    let server =
        TestApiServer::start_with(ServerOptions { rbac: Some(rbac::deploy_rules()), ..Default::default() });
    server.apply(nad("ns1", "net", Some(&macvlan("net", "eth1"))));
    server.apply(pod("ns1", "p", NODE, &[(NETWORKS, "net")]));
    // The CRD's schema would catch most mistakes; this one gets past it.
    server
        .apply(network_attachment_policy("broken", json!({"rules": [{"namespaces": ["Not A Namespace"]}]})));
    let h = Harness::start(server).await;
    eventually("the policy is read", Duration::from_secs(10), || h.policy.is_loaded()).await;
    let (code, msg, _) = cni_error(&h.add("ns1", "p", "c1").await);
    assert_eq!(code, 7);
    assert!(msg.contains("NetworkAttachmentPolicy broken is invalid"), "{msg}");
    assert!(metric(r#"plexus_network_policy_loads_total{result="invalid"}"#) >= 1.0);

    // Not served (the CRD is not installed): no policy.
    let server =
        TestApiServer::start_with(ServerOptions { rbac: Some(rbac::deploy_rules()), ..Default::default() });
    // Both ways a watch starts: a streaming list (a watch) and list + watch.
    server.fail_next("watch", POLICIES, 404, 1_000);
    server.fail_next("list", POLICIES, 404, 1_000);
    server.apply(nad("ns1", "net", Some(&macvlan("net", "eth0"))));
    server.apply(pod("ns1", "p", NODE, &[(NETWORKS, "net")]));
    let h = Harness::start(server).await;
    eventually("no policy", Duration::from_secs(10), || {
        matches!(h.policy.state(), PolicyState::Unrestricted)
    })
    .await;
    let r = h.add("ns1", "p", "c1").await;
    assert_eq!(r.exit_code, 0, "{}", r.stdout);
    assert!(
        h.server.requests().iter().any(|r| r.resource == POLICIES && r.status == 404),
        "the policies were not answered 404"
    );
}

/// The policy watch's resourceVersion expired (the server compacted its history, as a
/// restarted API server has none) and the server says so with HTTP 410, where kube's watcher
/// alone would retry the expired resourceVersion forever: the watch relists at once, and a
/// policy changed meanwhile is enforced within a second or two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_policy_watch_relists_at_once_and_a_change_made_meanwhile_is_enforced() {
    let server = TestApiServer::start_with(ServerOptions {
        rbac: Some(rbac::deploy_rules()),
        expired_as_http: true,
        // No bookmarks: the policy watch's resourceVersion stays that of its object.
        bookmark_every: Duration::from_secs(3600),
        ..Default::default()
    });
    server.apply(nad("ns1", "node-nic", Some(&macvlan("node-nic", "eth0"))));
    server.apply(pod("ns1", "bad", NODE, &[(NETWORKS, "node-nic")]));
    server.apply(tenants_policy(&["eth1"]));
    let h = Harness::start(server).await;
    eventually("the policy is read", Duration::from_secs(10), || h.policy.is_loaded()).await;
    let (code, msg, _) = cni_error(&h.add("ns1", "bad", "c-bad").await);
    assert_eq!(code, 7, "{msg}");

    // A change the policy watch does not see, then the history is forgotten: resuming from
    // the policy watch's resourceVersion gets 410. The policy changes meanwhile.
    h.server.apply(pod("ns1", "elsewhere", "node-2", &[]));
    h.server.compact();
    h.server.clear_requests();
    h.server.end_watches();
    h.server.apply(tenants_policy(&["eth1", "eth0"]));
    let changed = Instant::now();
    let enforced = loop {
        let r = h.add("ns1", "bad", "c-bad").await;
        if r.exit_code == 0 {
            break changed.elapsed();
        }
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the policy changed during the expired watch was not enforced: {}",
            r.stdout
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        enforced < Duration::from_secs(3),
        "the changed policy was enforced {enforced:?} after the change"
    );

    let policies: Vec<_> = h.server.requests().into_iter().filter(|r| r.resource == POLICIES).collect();
    let expired = policies
        .iter()
        .position(|r| r.status == 410)
        .unwrap_or_else(|| panic!("no policy watch was answered 410: {policies:#?}"));
    let relist = policies[expired + 1..]
        .iter()
        .find(|r| r.verb == "list" || r.query.contains("sendInitialEvents=true"))
        .expect("a relist after the 410");
    let waited = relist.at.duration_since(policies[expired].at);
    assert!(waited < Duration::from_millis(400), "the relist came {waited:?} after the 410");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_that_cannot_be_read_make_adds_wait() {
    // A ClusterRole without the policy rule (an old rbac.yaml): the list is forbidden.
    let rules: Vec<rbac::Rule> =
        rbac::deploy_rules().into_iter().filter(|r| !r.resources.contains(&POLICIES.to_owned())).collect();
    let server = TestApiServer::start_with(ServerOptions { rbac: Some(rules), ..Default::default() });
    server.apply(nad("ns1", "net", Some(&macvlan("net", "eth1"))));
    server.apply(pod("ns1", "p", NODE, &[(NETWORKS, "net")]));
    server.apply(pod("ns1", "plain", NODE, &[]));
    let h = Harness::start(server).await;
    eventually("the forbidden list", Duration::from_secs(10), || {
        h.server.requests().iter().any(|r| r.resource == POLICIES && r.status == 403)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (code, msg, _) = cni_error(&h.add("ns1", "p", "c1").await);
    assert_eq!(code, 11, "{msg}");
    assert!(msg.contains("has not been read") && msg.contains("forbidden"), "{msg}");
    assert_eq!(h.fake.adds.load(Ordering::SeqCst), 0);
    // A pod without secondary networks is not held up.
    let r = h.add("ns1", "plain", "c2").await;
    assert_eq!(r.exit_code, 0, "{}", r.stdout);
}
