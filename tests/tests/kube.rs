//! The Kubernetes catalog against the test API server: the agent's unchanged kube code
//! (client, watches, caches, network-status patches, events) over HTTP in the real wire
//! format, with a kubeconfig whose token file the tests rotate. The server authorizes with
//! the ClusterRole of `deploy/rbac.yaml`, so a request the manifests do not allow fails here.
//!
//! The engine runs in-process with a fake delegate plugin registered as a native plugin:
//! these tests are about the catalog, not about links in namespaces (lifecycle.rs covers
//! those with the reference plugins).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use plexus_agent::catalog::Catalog;
use plexus_agent::cni::{Command, ErrorCode};
use plexus_agent::delegate::native::native_error;
use plexus_agent::delegate::{DelegateError, Delegator, NativeCall, NativePlugin, NativePlugins};
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::kube::status_patch::PatchPolicy;
use plexus_agent::kube::watch::WatchBackoff;
use plexus_agent::kube::{build_client, ClientSource, KubeCatalog, KubeCatalogConfig, API_ACCESS};
use plexus_agent::state::StateStore;
use plexus_cni_shim::{Request, Response};
use plexus_tests::test_apiserver::{
    nad, pod, rbac, RequestRecord, ServerOptions, TestApiServer, EVENTS, NADS, PODS,
};
use plexus_tests::traffic::http_get;
use plexus_tests::Proc;
use serde_json::{json, Value};
use tempfile::TempDir;

const NODE: &str = "node-1";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";

fn server_with(watch_list: bool) -> TestApiServer {
    TestApiServer::start_with(ServerOptions {
        watch_list,
        rbac: Some(rbac::deploy_rules()),
        ..Default::default()
    })
}

/// A delegate plugin that answers with the `result` of its config (or a minimal one),
/// optionally after `sleepMs`, failing when `fail` is set; it counts concurrent ADDs.
#[derive(Default)]
struct FakePlugin {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    adds: AtomicUsize,
    /// The config of every ADD, in order.
    configs: std::sync::Mutex<Vec<Value>>,
}

impl NativePlugin for FakePlugin {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        async move {
            if call.command != Command::Add {
                return Ok(None);
            }
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            self.adds.fetch_add(1, Ordering::SeqCst);
            self.configs.lock().unwrap().push(call.config.clone());
            if let Some(ms) = call.config["sleepMs"].as_u64() {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if call.config["fail"] == true {
                return Err(native_error("fake", Command::Add, ErrorCode::TryAgainLater, "the fake plugin was told to fail"));
            }
            let mut result = match &call.config["result"] {
                Value::Null => json!({
                    "interfaces": [{"name": call.env.ifname, "mac": "02:00:00:00:00:01", "sandbox": call.env.netns}],
                    "ips": [{"address": "10.9.0.2/24", "interface": 0}]
                }),
                r => r.clone(),
            };
            result["cniVersion"] = call.config["cniVersion"].clone();
            Ok(Some(result))
        }
        .boxed()
    }
}

struct Harness {
    server: TestApiServer,
    catalog: Arc<KubeCatalog>,
    engine: Arc<Engine>,
    fake: Arc<FakePlugin>,
    dir: TempDir,
}

fn fast_patches() -> PatchPolicy {
    PatchPolicy {
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        deadline: Duration::from_secs(10),
        ..PatchPolicy::default()
    }
}

impl Harness {
    /// A synced catalog over `server`, an engine whose default network is the fake plugin
    /// answering `default_result` (None: a minimal result).
    async fn start(
        server: TestApiServer,
        allowed_namespaces: &[&str],
        default_result: Option<Value>,
    ) -> Self {
        let config = KubeCatalogConfig { status: fast_patches(), ..KubeCatalogConfig::new(NODE) };
        Self::start_with(server, allowed_namespaces, default_result, config).await
    }

    async fn start_with(
        server: TestApiServer,
        allowed_namespaces: &[&str],
        default_result: Option<Value>,
        config: KubeCatalogConfig,
    ) -> Self {
        let dir = tempfile::Builder::new().prefix("plexus-kube-").tempdir().expect("tempdir");
        let default_dir = dir.path().join("default");
        std::fs::create_dir_all(&default_dir).expect("default network dir");
        let mut plugin = json!({"type": "fake"});
        if let Some(r) = default_result {
            plugin["result"] = r;
        }
        let conflist = json!({"cniVersion": "1.0.0", "name": "cluster-wide-default", "plugins": [plugin]});
        std::fs::write(default_dir.join("10-default.conflist"), conflist.to_string())
            .expect("default network");
        let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
        let catalog = Arc::new(KubeCatalog::start(client, config));
        assert!(catalog.wait_synced(Duration::from_secs(20)).await, "the catalog did not sync");
        let fake = Arc::new(FakePlugin::default());
        let mut natives = NativePlugins::default();
        natives.register("fake", fake.clone());
        let engine = Arc::new(Engine::new(
            EngineConfig {
                default_network_dir: default_dir,
                network_conf_dirs: Vec::new(),
                allowed_namespaces: allowed_namespaces.iter().map(|s| (*s).to_owned()).collect(),
                strict_annotations: false,
                device_info_dir: dir.path().join("devinfo"),
                network_status_keys: plexus_agent::spec::status::StatusKeys::Spec,
            },
            catalog.clone(),
            Delegator { bin_dirs: Vec::new(), timeout: Duration::from_secs(10), natives },
            StateStore::new(&dir.path().join("state")),
        ));
        Harness { server, catalog, engine, fake, dir }
    }

    async fn add(&self, namespace: &str, name: &str, cid: &str, ifname: &str) -> Response {
        self.engine.handle(add_request(namespace, name, cid, ifname)).await
    }
}

fn add_request(namespace: &str, name: &str, cid: &str, ifname: &str) -> Request {
    Request {
        command: "ADD".into(),
        container_id: Some(cid.into()),
        netns: Some(format!("/var/run/netns/{cid}")),
        ifname: Some(ifname.into()),
        args: Some(format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={cid}")),
        path: None,
        config: json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus"}).to_string(),
    }
}

#[track_caller]
fn expect_ok(r: &Response) -> Value {
    assert_eq!(r.exit_code, 0, "ADD failed: {}", r.stdout);
    serde_json::from_str(&r.stdout).expect("result JSON")
}

/// Polls `f` every 20 ms until it holds, at most `within`.
async fn eventually(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn network_status(server: &TestApiServer, namespace: &str, name: &str) -> Option<Value> {
    let p = server.get(PODS, namespace, name)?;
    let text = p["metadata"]["annotations"][NETWORK_STATUS].as_str()?;
    Some(serde_json::from_str(text).expect("network-status is JSON"))
}

fn events_for(server: &TestApiServer, pod_name: &str) -> Vec<Value> {
    server.objects(EVENTS).into_iter().filter(|e| e["regarding"]["name"] == pod_name).collect()
}

fn count(requests: &[RequestRecord], verb: &str, resource: &str) -> usize {
    requests.iter().filter(|r| r.verb == verb && r.resource == resource).count()
}

/// Every request was one the kube module declares, and (with the deploy RBAC) allowed.
fn assert_declared(requests: &[RequestRecord]) {
    for r in requests {
        assert!(
            API_ACCESS.iter().any(|a| a.group == r.group
                && a.resource == r.resource
                && a.verbs.contains(&r.verb.as_str())),
            "undeclared API request: {} {} {:?}",
            r.verb,
            r.path,
            r.query
        );
        assert_ne!(r.status, 403, "the deploy ClusterRole refused {} {}", r.verb, r.path);
    }
}

const BRIDGE: &str = r#"{"cniVersion":"1.0.0","name":"net-a","type":"fake"}"#;

/// A phrase of three words said twice in `text`, if any.
fn repeated_phrase(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut seen = BTreeSet::new();
    words.windows(3).map(|w| w.join(" ")).find(|p| !seen.insert(p.clone()))
}

/// A message a person reads: no Rust debug dump of the server's Status, nothing said twice.
#[track_caller]
fn assert_readable(text: &str) {
    for dump in ["Status {", "Some(", "ApiError", "ServiceError"] {
        assert!(!text.contains(dump), "a debug dump ({dump}) in: {text}");
    }
    assert_eq!(repeated_phrase(text), None, "a phrase said twice in: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nads_added_changed_and_deleted_are_seen_without_restart() {
    let server = server_with(true);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    let h = Harness::start(server, &["default"], None).await;
    let cat = &h.catalog;
    assert_eq!(cat.nad("ns1", "net-a").await.unwrap().unwrap().config.as_deref(), Some(BRIDGE));
    // Bookmarks (every 500 ms) are understood: after changes elsewhere, the NAD watch
    // resumes from the bookmark's resourceVersion, not from its last NAD's.
    let watches = count(&h.server.requests(), "watch", NADS);
    let last = h.server.apply(pod("ns1", "unrelated", "node-2", &[]));
    let rv = last["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(count(&h.server.requests(), "watch", NADS), watches, "the NAD watch stayed up");
    h.server.drop_watches();
    eventually("the NAD watch resumes", Duration::from_secs(10), || {
        count(&h.server.requests(), "watch", NADS) > watches
    })
    .await;
    let resumed = h.server.requests().into_iter().rfind(|r| r.verb == "watch" && r.resource == NADS).unwrap();
    assert!(resumed.query.contains(&format!("resourceVersion={rv}")), "{} (bookmark {rv})", resumed.query);

    h.server.apply(nad("ns1", "net-b", Some(BRIDGE)));
    eventually("the new NAD is cached", Duration::from_secs(10), || cat.cached_nads() == 2).await;

    let changed = r#"{"cniVersion":"1.0.0","name":"net-a","type":"fake","mtu":1400}"#;
    h.server.apply(nad("ns1", "net-a", Some(changed)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while cat.nad("ns1", "net-a").await.unwrap().unwrap().config.as_deref() != Some(changed) {
        assert!(Instant::now() < deadline, "the changed NAD was not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    h.server.delete(NADS, "ns1", "net-b");
    eventually("the deleted NAD leaves the cache", Duration::from_secs(10), || cat.cached_nads() == 1).await;
    assert!(cat.nad("ns1", "net-b").await.unwrap().is_none());

    // Streaming lists: the initial state came from one watch, with no list request.
    let requests = h.server.requests();
    assert_eq!(count(&requests, "list", NADS), 0, "{requests:#?}");
    assert!(requests.iter().any(|r| r.resource == NADS && r.query.contains("sendInitialEvents=true")));
    assert_declared(&requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_streaming_lists_the_watch_falls_back_to_a_cached_list() {
    let server = server_with(false);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "p1", NODE, &[]));
    let h = Harness::start(server, &["default"], None).await;
    assert_eq!((h.catalog.cached_nads(), h.catalog.cached_pods()), (1, 1));
    let requests = h.server.requests();
    for resource in [NADS, PODS] {
        let refused = requests.iter().find(|r| r.resource == resource && r.verb == "watch").expect("a watch");
        assert_eq!(refused.status, 422, "the first watch asks for a streaming list and is refused");
        let list =
            requests.iter().find(|r| r.resource == resource && r.verb == "list").expect("a fallback list");
        // resourceVersion=0: answered from the API server's watch cache, not a quorum read.
        assert!(list.query.contains("resourceVersion=0&resourceVersionMatch=NotOlderThan"), "{}", list.query);
        assert!(!list.query.contains("limit="), "{}", list.query);
    }
    let pods_list = requests.iter().find(|r| r.resource == PODS && r.verb == "list").unwrap();
    assert!(pods_list.metadata_only && pods_list.query.contains("fieldSelector=spec.nodeName%3Dnode-1"));
    h.server.apply(nad("ns1", "net-b", None));
    eventually("a NAD added after the fallback", Duration::from_secs(10), || h.catalog.cached_nads() == 2)
        .await;
    assert_declared(&h.server.requests());
}

/// A server that silently drops `sendInitialEvents` sends the current state but never ends
/// it: the streaming list is given up after its time limit for list + watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_that_never_ends_falls_back_to_list_and_watch() {
    let server = TestApiServer::start_with(ServerOptions {
        ignore_initial_events: true,
        rbac: Some(rbac::deploy_rules()),
        ..Default::default()
    });
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "p1", NODE, &[]));
    let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
    let config = KubeCatalogConfig {
        streaming_init_limit: Duration::from_millis(500),
        ..KubeCatalogConfig::new(NODE)
    };
    let catalog = KubeCatalog::start(client, config);
    assert!(catalog.wait_synced(Duration::from_secs(20)).await, "the catalog did not sync");
    assert_eq!((catalog.cached_nads(), catalog.cached_pods()), (1, 1));
    let requests = server.requests();
    for resource in [NADS, PODS] {
        assert_eq!(count(&requests, "list", resource), 1, "{resource}: one fallback list");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_after_a_drop_and_relist_after_410() {
    let server = server_with(true);
    let h = Harness::start(server, &["default"], None).await;
    h.server.drop_watches();
    h.server.apply(nad("ns1", "after-drop", None));
    h.server.apply(pod("ns1", "after-drop", NODE, &[]));
    eventually("objects created while the watches reconnect", Duration::from_secs(15), || {
        h.catalog.cached_nads() == 1 && h.catalog.cached_pods() == 1
    })
    .await;

    // The history is compacted and the watches break: resuming gets 410 Gone, so the
    // watcher starts over; a pod deleted meanwhile must leave the cache.
    h.server.compact();
    h.server.drop_watches();
    h.server.delete(PODS, "ns1", "after-drop");
    h.server.apply(pod("ns1", "relisted-a", NODE, &[]));
    h.server.apply(pod("ns1", "relisted-b", NODE, &[]));
    eventually("the relisted state", Duration::from_secs(20), || h.catalog.cached_pods() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.catalog.cached_pods(), 2, "the pod deleted while the watch was down is gone");
    h.server.clear_requests();
    assert!(h.catalog.pod("ns1", "relisted-a").await.unwrap().is_some());
    assert!(h.catalog.pod("ns1", "after-drop").await.unwrap().is_none());
    assert_eq!(count(&h.server.requests(), "get", PODS), 1, "only the deleted pod costs a GET");
}

/// The watch's resourceVersion expired (the server compacted its history, as a restarted API
/// server has none): the caches relist at once, in either form a server says it: an ERROR
/// event with a 410 "Expired" Status in the watch, or HTTP 410 for the watch request (where
/// kube's watcher alone would retry the same resourceVersion forever).
async fn an_expired_watch_relists_at_once(expired_as_http: bool) {
    let server = TestApiServer::start_with(ServerOptions {
        rbac: Some(rbac::deploy_rules()),
        expired_as_http,
        // No bookmarks: the NAD watch's resourceVersion stays that of its last NAD.
        bookmark_every: Duration::from_secs(3600),
        ..Default::default()
    });
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    let h = Harness::start(server, &["default"], None).await;
    let relists_before = metric_sum("plexus_kube_relists_total", "reason=\"expired\"");
    // A change the NAD watch does not see, then the history is forgotten: resuming from the
    // NAD watch's resourceVersion gets 410.
    h.server.apply(pod("ns1", "elsewhere", "node-2", &[]));
    h.server.compact();
    h.server.clear_requests();
    h.server.end_watches();
    let is_relist = |r: &RequestRecord| r.verb == "list" || r.query.contains("sendInitialEvents=true");
    let nad_requests =
        || -> Vec<RequestRecord> { h.server.requests().into_iter().filter(|r| r.resource == NADS).collect() };
    eventually("a relist of the NADs", Duration::from_secs(10), || nad_requests().iter().any(is_relist))
        .await;
    let nads = nad_requests();
    let expired = nads
        .iter()
        .position(|r| r.watch_error == Some(410) || r.status == 410)
        .unwrap_or_else(|| panic!("no watch was answered 410: {nads:#?}"));
    let relist = nads[expired + 1..].iter().find(|r| is_relist(r)).expect("a relist after the 410");
    let waited = relist.at.duration_since(nads[expired].at);
    // kube's default backoff waits at least 800 ms after any error; a 410 is not one.
    assert!(waited < Duration::from_millis(400), "the relist came {waited:?} after the 410");
    eventually("the cache is current again", Duration::from_secs(5), || h.catalog.is_synced()).await;
    assert_eq!(h.catalog.cached_nads(), 1);
    assert!(metric_sum("plexus_kube_relists_total", "reason=\"expired\"") > relists_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_expired_by_an_error_event_relists_at_once() {
    an_expired_watch_relists_at_once(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_expired_by_http_410_relists_at_once() {
    an_expired_watch_relists_at_once(true).await;
}

/// The sum of a metric's series whose labels contain `labels`, from the process's registry.
fn metric_sum(name: &str, labels: &str) -> f64 {
    plexus_agent::metrics::encode()
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The API server goes away for a few seconds and comes back with its history started over
/// (a restart); a NAD changed right after it is back reaches an ADD within seconds, and the
/// catalog says it is not current (not ready) while it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_api_server_restart_a_changed_nad_reaches_the_next_add_within_seconds() {
    a_changed_nad_after_a_restart(true).await;
}

/// The same with list + watch: the retries are lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_api_server_restart_without_streaming_lists_the_caches_relist() {
    a_changed_nad_after_a_restart(false).await;
}

async fn a_changed_nad_after_a_restart(watch_list: bool) {
    let server = server_with(watch_list);
    let old = json!({"cniVersion": "1.0.0", "name": "net-a", "type": "fake", "result": {
        "interfaces": [{"name": "net1", "sandbox": "/var/run/netns/cid-r"}],
        "ips": [{"address": "10.1.0.2/24", "interface": 0}]}});
    let new = json!({"cniVersion": "1.0.0", "name": "net-a", "type": "fake", "result": {
        "interfaces": [{"name": "net1", "sandbox": "/var/run/netns/cid-r"}],
        "ips": [{"address": "10.2.0.2/24", "interface": 0}]}});
    server.apply(nad("ns1", "net-a", Some(&old.to_string())));
    server.apply(pod("ns1", "web", NODE, &[(NETWORKS, "net-a")]));
    let config = KubeCatalogConfig {
        status: fast_patches(),
        watch_backoff: WatchBackoff { first: Duration::from_millis(100), max: Duration::from_secs(1) },
        ..KubeCatalogConfig::new(NODE)
    };
    let mut h = Harness::start_with(server, &["default"], None, config).await;
    h.server.stop();
    eventually("not ready while the API server is away", Duration::from_secs(5), || !h.catalog.is_synced())
        .await;
    // Long enough for the retries to back off to their ceiling.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!h.catalog.is_synced());
    h.server.start_again();
    let back = Instant::now();
    h.server.apply(nad("ns1", "net-a", Some(&new.to_string())));
    eventually("ready again", Duration::from_secs(20), || h.catalog.is_synced()).await;
    // ADDs every 200 ms, as a runtime starting pods would: the first to get the new NAD.
    let mut served = None;
    for i in 0.. {
        if back.elapsed() > Duration::from_secs(20) {
            break;
        }
        expect_ok(&h.add("ns1", "web", &format!("cid-r{i}"), "eth0").await);
        let used = h.fake.configs.lock().unwrap().iter().rev().find(|c| c["name"] == "net-a").cloned();
        if used.is_some_and(|c| c["result"]["ips"][0]["address"] == "10.2.0.2/24") {
            served = Some(back.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let served = served.expect("the changed NAD never reached an ADD");
    assert!(served < Duration::from_secs(5), "the changed NAD reached an ADD {served:?} after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_reads_the_pod_and_nads_from_the_caches_without_api_requests() {
    let server = server_with(true);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "web", NODE, &[(NETWORKS, "net-a")]));
    let h = Harness::start(server, &["default"], None).await;
    h.server.clear_requests();

    let result = expect_ok(&h.add("ns1", "web", "cid-web", "eth0").await);
    assert_eq!(result["interfaces"][0]["name"], "eth0");
    assert_eq!(h.fake.adds.load(Ordering::SeqCst), 2, "default network + net-a");
    eventually("network-status published", Duration::from_secs(10), || {
        network_status(&h.server, "ns1", "web").is_some()
    })
    .await;
    let requests = h.server.requests();
    // The only request of the whole ADD is the network-status patch, after the answer.
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_eq!((requests[0].verb.as_str(), requests[0].resource.as_str()), ("patch", PODS));
    assert_eq!(requests[0].content_type.as_deref(), Some("application/merge-patch+json"));
    let status = network_status(&h.server, "ns1", "web").unwrap();
    assert_eq!(status[1]["name"], "ns1/net-a");
    assert_eq!(status[1]["interface"], "net1");
    assert_declared(&requests);
}

/// Every phase of an ADD and a DEL is timed (issue #17): the lock, the state, the catalog,
/// the plan, each network's plugins and the status each add to their series of
/// `plexus_cni_phase_duration_seconds`, labelled with the request's verb.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_phase_of_an_add_and_a_del_is_timed() {
    let server = server_with(true);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "timed", NODE, &[(NETWORKS, "net-a")]));
    let h = Harness::start(server, &["default"], None).await;
    // Tests share the process's metrics: each count must grow by at least what this pod did.
    let count = |verb: &str, phase: &str| {
        metric_sum("plexus_cni_phase_duration_seconds_count", &format!("verb=\"{verb}\",phase=\"{phase}\""))
    };
    let phases = ["lock", "state_read", "catalog", "plan", "state_write", "plugins", "status"];
    let before: Vec<f64> = phases.iter().map(|p| count("ADD", p)).collect();
    expect_ok(&h.add("ns1", "timed", "cid-timed", "eth0").await);
    for (phase, before) in phases.iter().zip(&before) {
        // Two state writes (the plan before anything is attached, then the completed record)
        // and two networks' plugins (the default network and net-a).
        let at_least = if matches!(*phase, "state_write" | "plugins") { 2.0 } else { 1.0 };
        assert!(count("ADD", phase) >= before + at_least, "ADD phase {phase} not timed {at_least} time(s)");
    }
    let del_phases = ["lock", "state_read", "plugins", "state_write"];
    let before: Vec<f64> = del_phases.iter().map(|p| count("DEL", p)).collect();
    let del = Request { command: "DEL".into(), ..add_request("ns1", "timed", "cid-timed", "eth0") };
    let answer = h.engine.handle(del).await;
    assert_eq!(answer.exit_code, 0, "{}", answer.stdout);
    for (phase, before) in del_phases.iter().zip(&before) {
        let at_least = if *phase == "plugins" { 2.0 } else { 1.0 };
        assert!(count("DEL", phase) >= before + at_least, "DEL phase {phase} not timed {at_least} time(s)");
    }
}

/// NPWG spec 5.4, the single-gateway example, produced from delegate results through the
/// engine and the API server. Differences from the example's text: `"default": false` is
/// present on every entry ("default" is a required key, 5.3.5); the network of the pod's own
/// namespace is named with its namespace (5.3.1: "The name may contain a namespace
/// reference"); and, as the NetworkAttachmentDefinition client library and Multus write it,
/// `ips` are bare addresses and the default route's gateway is also in `gateway`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_status_is_the_section_5_4_example() {
    let server = server_with(true);
    let some_network = json!({"cniVersion": "1.0.0", "name": "some-network", "type": "fake", "result": {
        "interfaces": [{"name": "eth1", "mac": "02:11:22:33:44:55", "sandbox": "/var/run/netns/cid-54"}],
        "ips": [{"address": "192.0.2.2/24", "interface": 0}, {"address": "2001:db8::2234/32", "interface": 0}],
        "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "search": ["eng.example.com", "example.com"]}
    }});
    let infiniband = json!({"cniVersion": "1.0.0", "name": "an-ip-over-infiniband-network", "type": "fake", "result": {
        "interfaces": [{"name": "ib0", "mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
                        "sandbox": "/var/run/netns/cid-54"}],
        "ips": [{"address": "198.51.100.1/24", "interface": 0}]
    }});
    server.apply(nad("my-namespace", "some-network", Some(&some_network.to_string())));
    server.apply(nad("other-ns", "an-ip-over-infiniband-network", Some(&infiniband.to_string())));
    let selection = json!([
        {"name": "some-network", "interface": "eth1"},
        {"name": "an-ip-over-infiniband-network", "namespace": "other-ns", "interface": "ib0"}
    ]);
    server.apply(pod("my-namespace", "my-pod", NODE, &[(NETWORKS, &selection.to_string())]));
    let default_result = json!({
        "interfaces": [{"name": "eth5", "mac": "02:11:22:33:44:54", "sandbox": "/var/run/netns/cid-54"}],
        "ips": [{"address": "192.0.2.2/24", "interface": 0, "gateway": "192.0.2.1"},
                {"address": "2001:db8::2230/32", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "192.0.2.1"}]
    });
    let h = Harness::start(server, &["default", "other-ns"], Some(default_result)).await;
    expect_ok(&h.add("my-namespace", "my-pod", "cid-54", "eth5").await);
    eventually("network-status published", Duration::from_secs(10), || {
        network_status(&h.server, "my-namespace", "my-pod").is_some()
    })
    .await;
    let expected = json!([
        {
            "name": "cluster-wide-default",
            "interface": "eth5",
            "ips": ["192.0.2.2", "2001:db8::2230"],
            "mac": "02:11:22:33:44:54",
            "default-route": ["192.0.2.1"],
            "default": true
        },
        {
            "name": "my-namespace/some-network",
            "interface": "eth1",
            "ips": ["192.0.2.2", "2001:db8::2234"],
            "mac": "02:11:22:33:44:55",
            "default": false,
            "dns": {
                "nameservers": ["192.0.2.1", "2001:db8:4860::8888"],
                "search": ["eng.example.com", "example.com"]
            }
        },
        {
            "name": "other-ns/an-ip-over-infiniband-network",
            "interface": "ib0",
            "ips": ["198.51.100.1"],
            "mac": "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
            "default": false
        }
    ]);
    assert_eq!(network_status(&h.server, "my-namespace", "my-pod").unwrap(), expected);
    // Exactly what the spec engine renders, byte for byte, in the annotation.
    let annotation = h.server.get(PODS, "my-namespace", "my-pod").unwrap()["metadata"]["annotations"]
        [NETWORK_STATUS]
        .as_str()
        .unwrap()
        .to_owned();
    let statuses: Vec<plexus_agent::spec::status::NetworkStatus> = serde_json::from_value(expected).unwrap();
    assert_eq!(
        annotation,
        plexus_agent::spec::status::annotation_value(&statuses, plexus_agent::spec::status::StatusKeys::Spec)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_patch_is_retried() {
    let server = server_with(true);
    server.apply(pod("ns1", "p", NODE, &[]));
    let h = Harness::start(server, &["default"], None).await;
    h.server.fail_next("patch", PODS, 409, 2);
    h.server.clear_requests();
    expect_ok(&h.add("ns1", "p", "cid-409", "eth0").await);
    eventually("network-status published after the conflicts", Duration::from_secs(10), || {
        network_status(&h.server, "ns1", "p").is_some()
    })
    .await;
    let patches: Vec<u16> =
        h.server.requests().iter().filter(|r| r.verb == "patch").map(|r| r.status).collect();
    assert_eq!(patches, [409, 409, 200]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_patch_is_reported_and_the_add_succeeds() {
    let server = server_with(true);
    server.apply(pod("ns1", "p", NODE, &[]));
    let h = Harness::start(server, &["default"], None).await;
    // A ClusterRole without pods/patch, as a cluster with an outdated RBAC would have.
    let mut rules = rbac::deploy_rules();
    for r in &mut rules {
        if r.resources.iter().any(|x| x == "pods") {
            r.verbs.retain(|v| v != "patch");
        }
    }
    h.server.set_rbac(Some(rules));
    h.server.clear_requests();
    expect_ok(&h.add("ns1", "p", "cid-403", "eth0").await);
    eventually("the refusal is reported on the pod", Duration::from_secs(10), || {
        events_for(&h.server, "p").iter().any(|e| e["reason"] == "NetworkStatusNotPublished")
    })
    .await;
    let requests = h.server.requests();
    let patches: Vec<u16> = requests.iter().filter(|r| r.verb == "patch").map(|r| r.status).collect();
    assert_eq!(patches, [403], "a 403 is not retried");
    let event =
        events_for(&h.server, "p").into_iter().find(|e| e["reason"] == "NetworkStatusNotPublished").unwrap();
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("forbidden"), "{event}");
    assert_readable(note);
    assert!(note.contains("(403 Forbidden); grant the agent's service account"), "{note}");
    assert!(network_status(&h.server, "ns1", "p").is_none());
    assert_eq!(h.catalog.pending_status_patches(), 0);
}

/// The API server refuses a lookup (RBAC without pods/get): the CNI error says what the
/// server said and what to do, once, without a debug dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lookup_reads_as_the_servers_answer_and_what_to_do() {
    let server = server_with(true);
    let h = Harness::start(server, &["default"], None).await;
    let mut rules = rbac::deploy_rules();
    for r in &mut rules {
        if r.resources.iter().any(|x| x == "pods") {
            r.verbs.retain(|v| v != "get");
        }
    }
    h.server.set_rbac(Some(rules));
    // Not in the cache (bound elsewhere as far as the watch knows): the lookup GETs it.
    h.server.apply(pod("ns1", "fresh", "node-2", &[]));
    let r = h.add("ns1", "fresh", "cid-refused", "eth0").await;
    let error: Value = serde_json::from_str(&r.stdout).expect("a CNI error");
    assert_eq!(error["code"], 11, "{error}");
    let msg = error["msg"].as_str().unwrap();
    assert!(
        msg.starts_with("reading pod ns1/fresh: the API server refused: pods \"fresh\" is forbidden"),
        "{msg}"
    );
    assert!(msg.contains("(403 Forbidden); grant the agent's service account"), "{msg}");
    assert_readable(msg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_replaces_the_expired_one() {
    let server = server_with(true);
    server.apply(pod("ns1", "before", NODE, &[]));
    let h = Harness::start(server, &["default"], None).await;
    // The old token expires: the server rejects it, and the watches reconnect (as they do
    // when an API server restarts) and are refused with 401.
    h.server.accept_only_token("token-2");
    h.server.drop_watches();
    eventually("the old token is refused", Duration::from_secs(10), || {
        h.server.requests().iter().any(|r| r.status == 401)
    })
    .await;
    // kubelet writes the rotated token: the agent picks it up without a restart.
    h.server.write_token_file("token-2");
    h.server.apply(pod("ns1", "after", NODE, &[]));
    eventually("the pod watch works again", Duration::from_secs(40), || h.catalog.cached_pods() == 2).await;
    expect_ok(&h.add("ns1", "after", "cid-rot", "eth0").await);
    eventually("network-status published with the new token", Duration::from_secs(10), || {
        network_status(&h.server, "ns1", "after").is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_this_nodes_pods_are_cached_and_only_their_metadata() {
    let server = server_with(true);
    for i in 0..3000 {
        server.apply(pod(
            &format!("ns{}", i % 50),
            &format!("other-{i}"),
            &format!("node-{}", 2 + i % 100),
            &[],
        ));
    }
    for i in 0..30 {
        server.apply(pod("ns1", &format!("mine-{i}"), NODE, &[(NETWORKS, "net-a")]));
    }
    let h = Harness::start(server, &["default"], None).await;
    assert_eq!(h.catalog.cached_pods(), 30);
    for r in h.server.requests().iter().filter(|r| r.resource == PODS) {
        assert!(r.query.contains("fieldSelector=spec.nodeName%3Dnode-1"), "{}", r.query);
        assert!(r.metadata_only, "pods are fetched as PartialObjectMetadata");
    }
    // A pod scheduled onto this node later enters the watch; one leaving it leaves the cache.
    h.server.apply(pod("ns7", "other-7", NODE, &[]));
    eventually("a pod bound to this node", Duration::from_secs(10), || h.catalog.cached_pods() == 31).await;
    h.server.apply(pod("ns1", "mine-0", "node-9", &[]));
    eventually("a pod moved off this node", Duration::from_secs(10), || h.catalog.cached_pods() == 30).await;
    // Trimmed: only plexus's annotations are kept.
    let cached = h.catalog.pod("ns1", "mine-1").await.unwrap().unwrap();
    assert_eq!(cached.annotations.keys().collect::<Vec<_>>(), [NETWORKS]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_not_cached_yet_costs_one_get_with_a_time_limit() {
    let server = server_with(true);
    let h = Harness::start(server, &["default"], None).await;
    // Bound elsewhere as far as the watch knows (the GET has no field selector): the
    // situation of a pod bound a moment ago whose watch event is still on its way.
    h.server.apply(pod("ns1", "fresh", "node-2", &[(NETWORKS, "net-a")]));
    h.server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    h.server.clear_requests();
    let found = h.catalog.pod("ns1", "fresh").await.unwrap().unwrap();
    assert_eq!(found.annotations[NETWORKS], "net-a");
    let requests = h.server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!((requests[0].verb.as_str(), requests[0].metadata_only), ("get", true));

    // Absent: the ADD is answered "try again later" (CNI 11), the runtime retries.
    let r = h.add("ns1", "absent", "cid-absent", "eth0").await;
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap()["code"], 11, "{}", r.stdout);

    // A slow API server costs at most the time limit, then "try again".
    h.server.delay("get", Duration::from_secs(5));
    let started = Instant::now();
    let r = h.add("ns1", "slow", "cid-slow", "eth0").await;
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap()["code"], 11, "{}", r.stdout);
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_declared(&h.server.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_events_for_an_invalid_annotation_a_refused_namespace_and_a_failed_attachment() {
    let server = server_with(true);
    server.apply(nad("secret-ns", "private", Some(BRIDGE)));
    server.apply(nad(
        "ns1",
        "broken",
        Some(r#"{"cniVersion":"1.0.0","name":"broken","type":"fake","fail":true}"#),
    ));
    server.apply(pod("ns1", "bad-annotation", NODE, &[(NETWORKS, "[{not json")]));
    server.apply(pod("ns1", "cross-ns", NODE, &[(NETWORKS, "secret-ns/private")]));
    server.apply(pod("ns1", "failing", NODE, &[(NETWORKS, "broken")]));
    let h = Harness::start(server, &["default"], None).await;

    // Ignored (default network only), but reported.
    expect_ok(&h.add("ns1", "bad-annotation", "cid-e1", "eth0").await);
    let r = h.add("ns1", "cross-ns", "cid-e2", "eth0").await;
    assert_eq!(serde_json::from_str::<Value>(&r.stdout).unwrap()["code"], 7);
    let r = h.add("ns1", "failing", "cid-e3", "eth0").await;
    assert_ne!(r.exit_code, 0);

    for (pod_name, reason) in [
        ("bad-annotation", "InvalidNetworksAnnotation"),
        ("cross-ns", "NetworkRefused"),
        ("failing", "AttachmentFailed"),
    ] {
        eventually(&format!("{reason} event on {pod_name}"), Duration::from_secs(10), || {
            events_for(&h.server, pod_name).iter().any(|e| e["reason"] == reason)
        })
        .await;
        let e = events_for(&h.server, pod_name).into_iter().find(|e| e["reason"] == reason).unwrap();
        assert_eq!(e["apiVersion"], "events.k8s.io/v1");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["regarding"]["kind"], "Pod");
        assert_eq!(e["regarding"]["namespace"], "ns1");
        assert_eq!(e["reportingController"], "plexus");
        assert!(!e["note"].as_str().unwrap_or_default().is_empty());
        assert!(e["regarding"]["uid"].as_str().is_some_and(|u| u.starts_with("uid-")));
    }
    let refused =
        events_for(&h.server, "cross-ns").into_iter().find(|e| e["reason"] == "NetworkRefused").unwrap();
    assert!(refused["note"].as_str().unwrap().contains("secret-ns"), "{refused}");
    assert_declared(&h.server.requests());
}

/// True in a child process running only `test`; otherwise runs that child, asserts it
/// passed, and returns false.
fn running_alone(test: &str) -> bool {
    const ALONE: &str = "PLEXUS_TEST_ALONE";
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test executable"))
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .expect("running the test alone");
    assert!(
        out.status.success(),
        "{test} failed when run alone:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child ran no test");
    false
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// 200 pods started at once through the agent's socket: at most `--max-concurrent-adds`
/// run, the others wait; every one succeeds, every network-status lands, and nothing grows
/// without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_200_adds_stays_within_the_concurrency_limit() {
    // The memory bound is read from this process's RSS: other tests of this file must not
    // allocate meanwhile, so the test runs alone in a child process.
    if !running_alone("a_burst_of_200_adds_stays_within_the_concurrency_limit") {
        return;
    }
    const PODS_N: usize = 200;
    const LIMIT: usize = 8;
    let server = server_with(true);
    server.apply(nad(
        "ns1",
        "slow-net",
        Some(r#"{"cniVersion":"1.0.0","name":"slow-net","type":"fake","sleepMs":20}"#),
    ));
    for i in 0..PODS_N {
        server.apply(pod("ns1", &format!("burst-{i}"), NODE, &[(NETWORKS, "slow-net")]));
    }
    let h = Harness::start(server, &["default"], None).await;
    let socket = h.dir.path().join("plexus.sock");
    let listener = plexus_agent::server::bind(&socket).expect("binding the agent socket");
    let served =
        tokio::spawn(plexus_agent::server::serve_limited(listener, h.engine.clone(), socket.clone(), LIMIT));
    h.server.clear_requests();
    let rss_before = rss_kib();

    let started = Instant::now();
    let clients: Vec<_> = (0..PODS_N)
        .map(|i| {
            let socket = socket.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let req = add_request("ns1", &format!("burst-{i}"), &format!("cid-burst-{i}"), "eth0");
                let mut s = tokio::net::UnixStream::connect(&socket).await.expect("connecting to the agent");
                s.write_all(&serde_json::to_vec(&req).unwrap()).await.unwrap();
                s.shutdown().await.unwrap();
                let mut out = Vec::new();
                s.read_to_end(&mut out).await.unwrap();
                serde_json::from_slice::<Response>(&out).expect("a response")
            })
        })
        .collect();
    for c in clients {
        expect_ok(&c.await.unwrap());
    }
    let elapsed = started.elapsed();
    let max = h.fake.max_in_flight.load(Ordering::SeqCst);
    assert!(max <= LIMIT, "{max} ADDs ran at once, the limit is {LIMIT}");
    assert!(max >= LIMIT / 2, "the ADDs did not run in parallel ({max})");
    assert_eq!(h.fake.adds.load(Ordering::SeqCst), 2 * PODS_N);
    // 200 ADDs of 20 ms each, 8 at a time: about half a second; far from serial (4 s).
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");

    eventually("every network-status published", Duration::from_secs(30), || {
        (0..PODS_N).all(|i| network_status(&h.server, "ns1", &format!("burst-{i}")).is_some())
    })
    .await;
    eventually("no patch left pending", Duration::from_secs(10), || h.catalog.pending_status_patches() == 0)
        .await;
    let requests = h.server.requests();
    assert_eq!(count(&requests, "get", PODS), 0, "every pod came from the cache");
    assert_eq!(count(&requests, "patch", PODS), PODS_N, "one patch per pod");
    assert_eq!(plexus_agent::metrics::metrics().adds_in_flight(), 0);
    let grown_mib = rss_kib().saturating_sub(rss_before) / 1024;
    assert!(grown_mib < 64, "the burst grew the process by {grown_mib} MiB");
    assert_eq!(h.catalog.cached_pods(), PODS_N);
    assert_declared(&requests);
    served.abort();
}

/// The agent's declared API access is what the deploy ClusterRole grants: no more, no less.
#[test]
fn declared_api_access_equals_the_deploy_cluster_role() {
    let granted: BTreeSet<(String, String, String)> = rbac::deploy_rules()
        .iter()
        .flat_map(|r| {
            r.api_groups.iter().flat_map(move |g| {
                r.resources
                    .iter()
                    .flat_map(move |res| r.verbs.iter().map(move |v| (g.clone(), res.clone(), v.clone())))
            })
        })
        .collect();
    let declared: BTreeSet<(String, String, String)> = API_ACCESS
        .iter()
        .flat_map(|a| {
            a.verbs.iter().map(move |v| (a.group.to_owned(), a.resource.to_owned(), (*v).to_owned()))
        })
        .collect();
    assert_eq!(granted, declared);
}

/// `plexus-agent run --catalog kube` as a process, as the DaemonSet runs it (with a
/// kubeconfig instead of the in-cluster service account): ready once the default network
/// exists and the caches are synced, metrics on its port, its CNI config left in place on
/// SIGTERM.
#[test]
fn kernel_the_agent_process_runs_with_the_kubernetes_catalog() {
    let server = server_with(true);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "p", NODE, &[]));
    server.apply(pod("ns1", "elsewhere", "node-2", &[]));
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["default", "runtime", "state"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("dirs");
    }
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let addr = format!("127.0.0.1:{port}");
    let cgroup = TestCgroup::new();
    let mut agent = spawn_agent(dir.path(), &addr, &server, &cgroup);
    let agent_log = || std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    let wait_for = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; agent log:\n{}", agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("the metrics endpoint", &|| {
        http_get(&addr, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    });
    let r = http_get(&addr, "/readyz").unwrap();
    assert!(r.starts_with("HTTP/1.1 503") && r.contains("default network"), "{r}");
    std::fs::write(
        dir.path().join("default/10-default.conflist"),
        r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"}]}"#,
    )
    .expect("default network");
    wait_for("readiness", &|| http_get(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    let metrics = http_get(&addr, "/metrics").unwrap();
    assert!(metrics.contains(r#"plexus_catalog_cached_objects{kind="pods"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"plexus_catalog_cached_objects{kind="nads"} 1"#), "{metrics}");
    let conf = dir.path().join("runtime/00-plexus.conflist");
    wait_for("plexus's CNI config", &|| conf.exists());
    let _ = std::process::Command::new("kill").args(["-TERM", &agent.0.id().to_string()]).status();
    let status = agent.0.wait().expect("agent exit");
    assert!(status.success(), "SIGTERM is a clean stop: {status}; log:\n{}", agent_log());
    assert!(conf.exists(), "the CNI config stays after the agent stops");
    assert_declared(&server.requests());
}

/// `plexus-agent run --catalog kube` with its directories under `dir` (`default`,
/// `runtime` and `state` exist), metrics on `addr`, its log in `dir/agent.log`.
fn spawn_agent(dir: &std::path::Path, addr: &str, server: &TestApiServer, cgroup: &TestCgroup) -> Proc {
    let log = std::fs::File::create(dir.join("agent.log")).expect("log");
    // The agent loads its eBPF dataplane: a private mount namespace keeps its bpffs (and so
    // every pin and link) to the agent's lifetime, and a cgroup of its own, with no process
    // in it, keeps its socket hooks away from the machine's processes. It stays in the
    // machine's network namespace to reach the test API server on loopback.
    Proc(
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private"])
            .arg(plexus_tests::world::bin("plexus-agent"))
            .args(["run", "--catalog", "kube", "--node-name", NODE, "--metrics-addr", addr])
            .arg("--bpf-pin-dir")
            .arg(dir.join("bpf"))
            .arg("--cgroup-root")
            .arg(&cgroup.0)
            .arg("--kubeconfig")
            .arg(server.kubeconfig())
            .arg("--socket")
            .arg(dir.join("plexus.sock"))
            // Without the network API: readiness then waits for the default network.
            .args(["--network-api-socket", ""])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--default-network-dir")
            .arg(dir.join("default"))
            .arg("--runtime-conf-dir")
            .arg(dir.join("runtime"))
            .env_remove("NODE_NAME")
            .env_remove("RUST_LOG")
            .stderr(log)
            .spawn()
            .expect("starting plexus-agent"),
    )
}

/// An API server outage as the agent process lives it: not ready while its caches are not
/// current, one WARN per watch for the whole outage (not one line per retry, and no ERROR
/// lines from kube's request tracing), and an INFO with the outage's length when the caches
/// are current again; the metrics count the outage and the relist.
#[test]
fn kernel_an_api_server_outage_is_logged_once_and_reported_by_readiness() {
    let mut server = server_with(true);
    server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(pod("ns1", "p", NODE, &[]));
    let dir = tempfile::tempdir().expect("tempdir");
    for sub in ["default", "runtime", "state"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("dirs");
    }
    std::fs::write(
        dir.path().join("default/10-default.conflist"),
        r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"}]}"#,
    )
    .expect("default network");
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let addr = format!("127.0.0.1:{port}");
    let cgroup = TestCgroup::new();
    let _agent = spawn_agent(dir.path(), &addr, &server, &cgroup);
    let agent_log = || std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    let wait_for = |what: &str, within: Duration, f: &dyn Fn() -> bool| {
        let deadline = Instant::now() + within;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; agent log:\n{}", agent_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let ready = || http_get(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"));
    wait_for("readiness", Duration::from_secs(60), &ready);
    let before = agent_log().len();

    server.stop();
    wait_for("not ready while the API server is away", Duration::from_secs(10), &|| {
        http_get(&addr, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 503") && r.contains("not current"))
    });
    // Several retries: the first waits are 0.4-0.8 s, 0.8-1.6 s, 1.6-3.2 s.
    std::thread::sleep(Duration::from_secs(5));
    server.start_again();
    wait_for("ready again", Duration::from_secs(20), &ready);

    let log = agent_log();
    let outage = &log[before..];
    let lines = |level: &str| outage.lines().filter(|l| l.contains(level)).collect::<Vec<_>>();
    assert_eq!(lines(" ERROR ").len(), 0, "ERROR lines in the outage:\n{outage}");
    // The Kubernetes side's warnings (the agent's kube module, kube's crates); the rest of
    // the agent (its dataplane finishing its start) may warn about other things meanwhile.
    let warns: Vec<&str> = lines(" WARN ")
        .into_iter()
        .filter(|l| l.contains(" WARN plexus_agent::kube") || l.contains(" WARN kube"))
        .collect();
    // The policy objects' watch (the agent's, in Kubernetes mode) is one of the watches, and
    // so are the PodNetwork kinds'.
    const WATCHES: [&str; 6] = [
        "NetworkAttachmentDefinitions",
        "pods",
        "NetworkAttachmentPolicies",
        "PodNetworks",
        "PodNetworkAttachments",
        "AttachmentParameters",
    ];
    for what in WATCHES {
        let n = warns.iter().filter(|l| l.contains(&format!("{what}: "))).count();
        assert_eq!(n, 1, "{what}: {n} WARN lines for one outage:\n{outage}");
        assert!(
            lines(" INFO ").iter().any(|l| l.contains(&format!("cache of {what} is current again"))
                && l.contains("the API server answered after")),
            "{what}: no INFO that the cache is current again:\n{outage}"
        );
    }
    assert_eq!(warns.len(), WATCHES.len(), "{outage}");
    assert_readable(warns[0].split_once(": ").map_or("", |(_, m)| m));
    let metrics = http_get(&addr, "/metrics").unwrap();
    for line in [
        r#"plexus_kube_cache_synced{watch="pods"} 1"#,
        r#"plexus_kube_cache_synced{watch="NetworkAttachmentDefinitions"} 1"#,
        r#"plexus_kube_watch_outages_total{watch="pods"} 1"#,
        r#"plexus_kube_relists_total{watch="pods",reason="outage"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    let errors = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"plexus_kube_watch_errors_total{watch="pods"} "#))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(errors >= 3, "the outage saw {errors} failed attempts: not the many retries this test needs");
}

/// A child of the root cgroup, removed on drop.
struct TestCgroup(std::path::PathBuf);

impl TestCgroup {
    fn new() -> Self {
        let path = std::path::PathBuf::from(format!("/sys/fs/cgroup/{}", plexus_tests::unique("pxkube")));
        std::fs::create_dir(&path).expect("creating a test cgroup");
        TestCgroup(path)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn the_kubernetes_catalog_needs_a_node_name() {
    let out = std::process::Command::new(plexus_tests::world::bin("plexus-agent"))
        .args(["run", "--catalog", "kube", "--metrics-addr", "off", "--kubeconfig", "/nonexistent"])
        .env_remove("NODE_NAME")
        .output()
        .expect("running plexus-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--node-name"), "{stderr}");
}

/// The test API server's answers decode with kube's own types: this is what makes the
/// tests above evidence about a real API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_api_server_speaks_the_kubernetes_wire_format() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, ListParams, Patch, PatchParams};
    let server = TestApiServer::start();
    server.apply(pod("ns1", "p", NODE, &[("a", "1")]));
    let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns1");

    let p = pods.get("p").await.expect("get");
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some(NODE));
    let list = pods.list(&ListParams::default().fields("spec.nodeName=node-1")).await.expect("list");
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    // Strategic merge patch and merge patch of annotations: merged, null removes.
    let smp = json!({"metadata": {"annotations": {"b": "2"}}});
    let p = pods.patch("p", &PatchParams::default(), &Patch::Strategic(&smp)).await.expect("strategic patch");
    assert_eq!(p.metadata.annotations.as_ref().unwrap().len(), 2);
    let merge = json!({"metadata": {"annotations": {"a": null}}});
    let p = pods.patch("p", &PatchParams::default(), &Patch::Merge(&merge)).await.expect("merge patch");
    assert_eq!(p.metadata.annotations.unwrap().keys().collect::<Vec<_>>(), ["b"]);

    // A stale resourceVersion precondition is a 409 Conflict Status.
    let stale = json!({"metadata": {"resourceVersion": "1", "annotations": {"c": "3"}}});
    match pods.patch("p", &PatchParams::default(), &Patch::Merge(&stale)).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a 409: {other:?}"),
    }
    match pods.get("absent").await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        other => panic!("expected a 404: {other:?}"),
    }
    // A token the server does not accept: 401 Unauthorized.
    server.accept_only_token("someone-else");
    match pods.get("p").await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("expected a 401: {other:?}"),
    }
}

/// Two ADDs of the same pod in a row (a sandbox recreated): the older status, still
/// retrying, must never land after the newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_network_status_supersedes_an_older_one_still_retrying() {
    let server = server_with(true);
    server.apply(pod("ns1", "p", NODE, &[]));
    let h = Harness::start(server, &["default"], None).await;
    let p = h.catalog.pod("ns1", "p").await.unwrap().unwrap();
    h.server.fail_next("patch", PODS, 409, 3);
    h.catalog.publish_network_status(&p, r#"["older"]"#).await.unwrap();
    h.catalog.publish_network_status(&p, r#"["newer"]"#).await.unwrap();
    eventually("both publishes done", Duration::from_secs(10), || h.catalog.pending_status_patches() == 0)
        .await;
    assert_eq!(network_status(&h.server, "ns1", "p").unwrap(), json!(["newer"]));
    let bodies: Vec<String> = h
        .server
        .requests()
        .iter()
        .filter(|r| r.verb == "patch" && r.status == 200)
        .filter_map(|r| {
            r.body.as_ref()?["metadata"]["annotations"][NETWORK_STATUS].as_str().map(str::to_owned)
        })
        .collect();
    assert_eq!(bodies, [r#"["newer"]"#], "the older status was never written");
}

/// The CRI network API in Kubernetes mode lists the cluster's NADs with their metadata (the
/// proposal's NAD-watching daemon, in-process): uid and generation as the API server keeps
/// them, a changed spec a higher generation. A network set through the API of the same
/// namespace and name shadows its NAD; the on-disk default network comes last as `_fallback`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_api_lists_the_clusters_nads_with_their_uid_and_generation() {
    use plexus_agent::netapi::proto::{
        CnIv1Config, CnIv1PluginConfig, NetworkConfig, NetworkMetadata, NetworkType, PodNetworkResponse,
    };
    use plexus_agent::netapi::store::NetworkStore;
    use plexus_agent::server::netapi::service::NetworkApi;
    use plexus_agent::server::netapi::status::Prober;

    let server = server_with(true);
    let first = server.apply(nad("ns1", "net-a", Some(BRIDGE)));
    server.apply(nad("ns2", "net-b", Some(BRIDGE)));
    let changed = r#"{"cniVersion":"1.0.0","name":"net-a","type":"fake","mtu":1400}"#;
    let applied = server.apply(nad("ns1", "net-a", Some(changed)));
    let h = Harness::start(server, &["default"], None).await;
    eventually("both NADs are cached", Duration::from_secs(10), || h.catalog.cached_nads() == 2).await;
    let api = NetworkApi {
        store: Arc::new(NetworkStore::new(&h.dir.path().join("state"))),
        catalog: h.catalog.clone(),
        default_network_dir: h.dir.path().join("default"),
        network_conf_dirs: Vec::new(),
        prober: Prober {
            delegator: Delegator {
                bin_dirs: Vec::new(),
                timeout: Duration::from_secs(5),
                natives: NativePlugins::default(),
            },
        },
        state: StateStore::new(&h.dir.path().join("state")),
    };
    let rows = |listed: &[PodNetworkResponse]| -> Vec<(String, String, String, u32)> {
        listed
            .iter()
            .map(|r| {
                let m = r.config.as_ref().and_then(|c| c.metadata.as_ref()).expect("metadata");
                (m.namespace.clone(), m.name.clone(), m.uid.clone(), m.generation)
            })
            .collect()
    };
    let uid = |v: &Value| v["metadata"]["uid"].as_str().expect("a uid").to_owned();
    let generation = applied["metadata"]["generation"].as_u64().expect("a generation") as u32;
    assert_eq!(uid(&first), uid(&applied), "the same object, changed");
    assert!(generation >= 2, "a changed spec is a new generation: {applied}");

    let listed = rows(&api.list().await.expect("list"));
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.contains(&("ns1".into(), "net-a".into(), uid(&applied), generation)), "{listed:?}");
    assert!(listed.iter().any(|(ns, n, u, g)| ns == "ns2" && n == "net-b" && !u.is_empty() && *g >= 1));
    assert_eq!(listed[2].1, "_fallback", "{listed:?}");

    let own = NetworkConfig {
        metadata: Some(NetworkMetadata {
            name: "net-a".into(),
            namespace: "ns1".into(),
            uid: "api-1".into(),
            generation: 7,
        }),
        ip_ranges: Vec::new(),
        network_type: NetworkType::CnIv1 as i32,
        cniv1_config: Some(CnIv1Config {
            cni_version: "1.0.0".into(),
            network_name: String::new(),
            disable_check: false,
            plugins: vec![CnIv1PluginConfig {
                r#type: "fake".into(),
                capabilities: Vec::new(),
                parameters: Default::default(),
            }],
        }),
    };
    api.set(Some(own)).await.expect("set");
    let listed = rows(&api.list().await.expect("list"));
    let net_a: Vec<_> = listed.iter().filter(|(ns, n, _, _)| ns == "ns1" && n == "net-a").collect();
    assert_eq!(
        net_a,
        [&("ns1".to_owned(), "net-a".to_owned(), "api-1".to_owned(), 7)],
        "shadowed: {listed:?}"
    );
}
