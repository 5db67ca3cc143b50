//! A Kubernetes API server for tests, in-process: HTTP/1.1 on 127.0.0.1 speaking the real
//! wire format for the resources plexus uses (pods, NetworkAttachmentDefinitions,
//! cluster-scoped NetworkAttachmentPolicies, KEP-3698 PodNetworks (cluster-scoped),
//! PodNetworkAttachments and AttachmentParameters, coordination.k8s.io Leases,
//! events.k8s.io events, DRA's resource.k8s.io ResourceClaims and cluster-scoped
//! ResourceSlices), so the agent's unchanged Kubernetes code runs against it with a
//! kubeconfig as it would against a cluster.
//!
//! What it implements, as the API server does:
//! - list with `resourceVersion`, `limit`/`continue` pages, `fieldSelector`;
//! - watch from a `resourceVersion` (410 Gone once it is compacted away), synthetic ADDED
//!   events from "0", BOOKMARK events with `allowWatchBookmarks`, streaming lists
//!   (`sendInitialEvents`, ended by the `k8s.io/initial-events-end` bookmark) or their
//!   refusal (422) as on a server with the WatchList feature gate off, `timeoutSeconds`;
//!   objects entering or leaving a field selector are ADDED or DELETED;
//! - metadata-only answers (`Accept: ...;as=PartialObjectMetadata[List]`);
//! - get, create (`generateName` too), update (PUT, which needs the current
//!   `resourceVersion` — 409 otherwise — and, for custom resources, one at all), JSON merge
//!   patch, JSON patch (RFC 6902), strategic merge patch (built-in resources, maps only) and
//!   server-side apply (merged without field ownership, see [`patch::APPLY`]), with
//!   `resourceVersion` preconditions (409); a write that changes nothing writes nothing;
//! - the `status` subresource of pods, PodNetworks, PodNetworkAttachments and ResourceClaims: `/status`
//!   writes change only the status, writes of the object keep the stored status, a created
//!   custom resource has none;
//! - the metadata the API server owns ([`lifecycle`]): uid, creationTimestamp,
//!   `metadata.generation` (custom resources and pods: 1, +1 on each change of anything but
//!   metadata and a subresource's status);
//! - delete: an object with finalizers gets a `deletionTimestamp` (MODIFIED) and no new
//!   finalizer, and is deleted (DELETED) by the write that removes its last one; without
//!   finalizers it is gone at once, answering the pod itself or, for other resources, a
//!   `Success` Status, as the API server does; uid/resourceVersion preconditions (409).
//!   Pods go at once too (there is no kubelet to end a graceful deletion); propagation
//!   policies other than Background, `deletecollection` and dry runs are refused;
//! - the CustomResourceDefinitions of `deploy/` ([`validation`]): unknown fields pruned,
//!   defaults, the OpenAPI checks and every `x-kubernetes-validations` CEL rule, with `self`
//!   and `oldSelf`, a 422 `Invalid` Status on failure;
//! - `Status` objects for 400, 401, 403, 404, 405, 409, 410, 415, 422;
//! - bearer token authentication with a token that can be rotated, and optionally RBAC
//!   from ClusterRole rules (status writes are the `<resource>/status` resource).
//!
//! [`TestApiServer::apply`] and [`TestApiServer::delete`] write straight to the store (as
//! one would to etcd): no validation, no finalizers, status included.
//!
//! For tests it also counts every request (by verb, resource, path), injects failures and
//! delays, breaks or ends open watches, compacts the history, and stops and starts again on
//! the same address (a restart: the history starts over).
//!
//! It runs on its own thread and runtime, so it serves whatever the test's runtime does.

mod http;
pub mod lifecycle;
pub mod patch;
pub mod rbac;
pub mod resources;
pub mod selector;
mod store;
pub mod validation;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

pub use rbac::Rule;
pub use resources::{
    ATTACHMENT_PARAMETERS, EVENTS, IPAM_CLAIMS, LEASES, NADS, PODS, POD_NETWORKS, POD_NETWORK_ATTACHMENTS,
    POLICIES, RESOURCE_CLAIMS, RESOURCE_SLICES,
};

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    /// get, list, watch, create, patch, update, delete, deletecollection, unknown.
    pub verb: String,
    pub group: String,
    pub resource: String,
    /// `status` for a request of the status subresource.
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// Asked for PartialObjectMetadata.
    pub metadata_only: bool,
    pub content_type: Option<String>,
    /// The request body, when it was JSON.
    pub body: Option<Value>,
    /// The HTTP status answered (a watch: the status it started with).
    pub status: u16,
    /// The code of the ERROR event a watch started with (410: its resourceVersion is older
    /// than the history).
    pub watch_error: Option<u16>,
    /// When it was answered.
    pub at: std::time::Instant,
}

impl RequestRecord {
    fn unknown(method: &hyper::Method, path: &str, query: &str) -> Self {
        RequestRecord {
            method: method.to_string(),
            path: path.to_owned(),
            query: query.to_owned(),
            verb: "unknown".into(),
            group: String::new(),
            resource: String::new(),
            subresource: None,
            namespace: None,
            name: None,
            metadata_only: false,
            content_type: None,
            body: None,
            status: 404,
            watch_error: None,
            at: std::time::Instant::now(),
        }
    }
}

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Serve streaming lists (`sendInitialEvents`); when false, refuse them with 422.
    pub watch_list: bool,
    /// Ignore `sendInitialEvents` and `resourceVersionMatch` on watches: the current state
    /// comes as synthetic ADDED events but the initial-events-end bookmark never does (a
    /// server or proxy that drops parameters it does not know).
    pub ignore_initial_events: bool,
    /// Authorize with these rules; `None` allows everything.
    pub rbac: Option<Vec<Rule>>,
    /// How often open watches that allow bookmarks get one.
    pub bookmark_every: Duration,
    /// The first accepted token (also written to the token file).
    pub token: String,
    /// Answer a watch from a resourceVersion older than the history with HTTP 410 rather
    /// than an ERROR event in a 200 response (API servers answer either way, depending on
    /// the version and on whether the watch cache serves the watch).
    pub expired_as_http: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            watch_list: true,
            ignore_initial_events: false,
            rbac: None,
            bookmark_every: Duration::from_millis(500),
            token: "token-1".into(),
            expired_as_http: false,
        }
    }
}

struct Failure {
    verb: String,
    resource: String,
    code: u16,
    remaining: usize,
}

struct Config {
    tokens: Vec<String>,
    watch_list: bool,
    ignore_initial_events: bool,
    rbac: Option<Vec<Rule>>,
    expired_as_http: bool,
    user: String,
    failures: Vec<Failure>,
    delays: Vec<(String, Duration)>,
}

impl Config {
    fn take_failure(&mut self, verb: &str, resource: &str) -> Option<u16> {
        let f =
            self.failures.iter_mut().find(|f| f.remaining > 0 && f.verb == verb && f.resource == resource)?;
        f.remaining -= 1;
        Some(f.code)
    }
}

pub struct Shared {
    store: Mutex<store::Store>,
    config: Mutex<Config>,
    log: Mutex<Vec<RequestRecord>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, store::Store> {
        lock(&self.store)
    }
    fn config(&self) -> MutexGuard<'_, Config> {
        lock(&self.config)
    }
    fn log(&self, r: RequestRecord) {
        lock(&self.log).push(r);
    }
}

/// The running server; it stops when dropped.
pub struct TestApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    dir: TempDir,
    bookmark_every: Duration,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestApiServer {
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(options: ServerOptions) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the test API server");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            store: Mutex::new(store::Store::new()),
            config: Mutex::new(Config {
                tokens: vec![options.token.clone()],
                watch_list: options.watch_list,
                ignore_initial_events: options.ignore_initial_events,
                rbac: options.rbac.clone(),
                expired_as_http: options.expired_as_http,
                user: "system:serviceaccount:kube-system:plexus".into(),
                failures: Vec::new(),
                delays: Vec::new(),
            }),
            log: Mutex::default(),
        });
        let dir = tempfile::Builder::new().prefix("plexus-apiserver-").tempdir().expect("tempdir");
        let mut server = TestApiServer {
            addr,
            shared,
            dir,
            bookmark_every: options.bookmark_every,
            stop: None,
            thread: None,
        };
        server.serve_on(listener);
        server.write_token_file(&options.token);
        server.write_kubeconfig();
        server
    }

    fn serve_on(&mut self, listener: std::net::TcpListener) {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let served = self.shared.clone();
        let bookmark_every = self.bookmark_every;
        let thread = std::thread::Builder::new()
            .name("test-apiserver".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                rt.block_on(serve(listener, served, stopped, bookmark_every));
            })
            .expect("starting the test API server thread");
        self.stop = Some(stop);
        self.thread = Some(thread);
    }

    /// Stops serving, as an API server going down does: open watches end, connections
    /// close, new connections are refused. [`Self::start_again`] brings it back.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Serves again on the same address after [`Self::stop`], as a restarted API server
    /// does: the objects are kept (they are in etcd) but the change history starts after
    /// the restart, so a watch resuming from before it gets 410 Gone.
    pub fn start_again(&mut self) {
        assert!(self.thread.is_none(), "the test API server is running");
        self.shared.store().restart();
        let listener = std::net::TcpListener::bind(self.addr).expect("binding the test API server again");
        listener.set_nonblocking(true).expect("non-blocking listener");
        self.serve_on(listener);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for the server whose user reads its token from [`Self::token_file`].
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn token_file(&self) -> PathBuf {
        self.dir.path().join("token")
    }

    fn write_kubeconfig(&self) {
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url()}}],
            "users": [{"name": "plexus", "user": {"tokenFile": self.token_file()}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "plexus", "namespace": "kube-system"}}],
            "current-context": "test",
        });
        std::fs::write(self.kubeconfig(), serde_yaml::to_string(&config).expect("kubeconfig YAML"))
            .expect("writing the kubeconfig");
    }

    /// Replaces the token file as kubelet does: a new file renamed over the old one.
    pub fn write_token_file(&self, token: &str) {
        let tmp = self.dir.path().join("token.tmp");
        std::fs::write(&tmp, token).expect("writing the token");
        std::fs::rename(&tmp, self.token_file()).expect("replacing the token file");
    }

    /// From now on only `token` is accepted: every other one gets 401.
    pub fn accept_only_token(&self, token: &str) {
        self.shared.config().tokens = vec![token.to_owned()];
    }

    pub fn set_watch_list(&self, on: bool) {
        self.shared.config().watch_list = on;
    }

    pub fn set_rbac(&self, rules: Option<Vec<Rule>>) {
        self.shared.config().rbac = rules;
    }

    /// The next `times` requests of `verb` on `resource` fail with `code` (and a Status);
    /// `resource` is as RBAC names it (`podnetworks`, `podnetworks/status`).
    pub fn fail_next(&self, verb: &str, resource: &str, code: u16, times: usize) {
        self.shared.config().failures.push(Failure {
            verb: verb.into(),
            resource: resource.into(),
            code,
            remaining: times,
        });
    }

    /// Every request of `verb` waits this long before it is answered.
    pub fn delay(&self, verb: &str, by: Duration) {
        let mut c = self.shared.config();
        c.delays.retain(|(v, _)| v != verb);
        c.delays.push((verb.into(), by));
    }

    /// Creates or replaces an object (its `kind` names the resource), status included and
    /// without validation, as a write straight to etcd would; returns it as stored. Its
    /// generation is kept as the API server keeps it (1 when new, +1 on a spec change).
    pub fn apply(&self, mut obj: Value) -> Value {
        let kind = obj["kind"].as_str().expect("objects need a kind");
        let def = resources::RESOURCES
            .iter()
            .find(|d| d.kind == kind)
            .unwrap_or_else(|| panic!("unknown kind {kind}"));
        let mut store = self.shared.store();
        if def.tracks_generation() {
            let namespace = obj["metadata"]["namespace"].as_str().unwrap_or("");
            let name = obj["metadata"]["name"].as_str().expect("objects need metadata.name");
            let old = store.get(def.plural, namespace, name);
            obj["metadata"]["generation"] = json!(lifecycle::generation_after(def, old, &obj));
        }
        store.put(def.plural, obj)
    }

    /// Removes an object at once, finalizers or not (a write straight to etcd); a client's
    /// DELETE goes through [`Self::url`] and honours them.
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared.store().delete(resource, namespace, name)
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared.store().get(resource, namespace, name).cloned()
    }

    /// Every object of a resource, across namespaces.
    pub fn objects(&self, resource: &str) -> Vec<Value> {
        self.shared.store().list(resource, None).cloned().collect()
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// Breaks every open watch connection mid-stream.
    pub fn drop_watches(&self) {
        self.shared.store().close_watches(true);
    }

    /// Ends every open watch cleanly, as a server-side timeout does.
    pub fn end_watches(&self) {
        self.shared.store().close_watches(false);
    }

    /// Open watch connections.
    pub fn open_watches(&self) -> usize {
        self.shared.store().watchers.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// Forgets the change history: watches resuming from an older resourceVersion get 410.
    pub fn compact(&self) {
        self.shared.store().compact();
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
    bookmark_every: Duration,
) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let mut bookmarks = tokio::time::interval(bookmark_every);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = bookmarks.tick() => shared.store().bookmark_all(),
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| http::handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
    shared.store().close_watches(false);
}

/// A pod object bound to `node`, with annotations.
pub fn pod(namespace: &str, name: &str, node: &str, annotations: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> =
        annotations.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "annotations": annotations,
            "labels": {"app": name},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:annotations": {}}}}]
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/app:1"}]},
        "status": {"phase": "Pending"}
    })
}

/// A NetworkAttachmentDefinition with `spec.config` (or none).
pub fn nad(namespace: &str, name: &str, config: Option<&str>) -> Value {
    let mut n = json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": namespace},
    });
    if let Some(c) = config {
        n["spec"] = json!({"config": c});
    }
    n
}

/// A cluster-scoped NetworkAttachmentPolicy (plexus.dev/v1alpha1) with `spec`.
pub fn network_attachment_policy(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "plexus.dev/v1alpha1",
        "kind": "NetworkAttachmentPolicy",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// A cluster-scoped KEP-3698 PodNetwork (plexus.dev/v1alpha1) with `spec`.
pub fn pod_network(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "plexus.dev/v1alpha1",
        "kind": "PodNetwork",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// A KEP-3698 PodNetworkAttachment (plexus.dev/v1alpha1) with `spec`.
pub fn pod_network_attachment(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "plexus.dev/v1alpha1",
        "kind": "PodNetworkAttachment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// plexus's AttachmentParameters (plexus.dev/v1alpha1) with `spec` (NPWG selection keys).
pub fn attachment_parameters(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "plexus.dev/v1alpha1",
        "kind": "AttachmentParameters",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// A coordination.k8s.io/v1 Lease with `spec` (holderIdentity, leaseDurationSeconds, ...).
pub fn lease(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

/// A DRA ResourceClaim (resource.k8s.io/v1) asking for one device of `device_class` in request
/// `request`, allocated `devices` ((driver, pool, device) each), or not allocated when empty.
pub fn resource_claim(namespace: &str, name: &str, request: &str, devices: &[(&str, &str, &str)]) -> Value {
    let mut claim = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": "vf.example.com"}}]}},
    });
    if !devices.is_empty() {
        let results: Vec<Value> = devices
            .iter()
            .map(|(driver, pool, device)| json!({"request": request, "driver": driver, "pool": pool, "device": device}))
            .collect();
        claim["status"] = json!({"allocation": {"devices": {"results": results}}});
    }
    claim
}

/// A DRA ResourceSlice (resource.k8s.io/v1) of `driver`'s pool `pool` on `node`, generation 1,
/// with `devices` (each a `{"name", "attributes"}` object).
pub fn resource_slice(name: &str, driver: &str, pool: &str, node: &str, devices: Value) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    })
}
