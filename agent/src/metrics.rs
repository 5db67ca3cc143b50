//! Prometheus metrics and the health endpoints, on one local HTTP port (`--metrics-addr`).
//!
//! - `GET /metrics`: OpenMetrics text;
//! - `GET /healthz`: 200 while the agent runs (liveness);
//! - `GET /readyz`: 200 once the cluster default network's config exists, the catalog
//!   holds its initial state and the agent is warm (`main.rs`), 503 with the reason
//!   otherwise (readiness).
//!
//! The metrics are process-wide (one agent per process), so every layer records into
//! [`metrics()`] without being handed a registry.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpSocket};

use crate::cni::Command;

/// The default of `--metrics-addr`: local only, since the port tells about the node's pods.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9465";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    /// `ok`, or `error`.
    result: String,
    /// The CNI error code, `0` on success.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttachmentLabels {
    network: String,
    /// The CNI type of the network's first plugin.
    r#type: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabels {
    r#type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    /// The plugin's CNI type.
    r#type: String,
    /// The CNI command it ran (ADD, DEL, CHECK, STATUS, GC).
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LookupLabels {
    kind: String,
    /// `cache`, or `api` for a miss answered by a GET.
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    watch: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelistLabels {
    watch: String,
    /// `expired` (410 Gone: the resourceVersion was too old), `outage` (after failures).
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    /// `forward` (requests to the pod), `reverse` (replies), `icmp` (ICMP errors).
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    verb: String,
    phase: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 5 ms to about 80 s: a native plugin takes milliseconds, a delegate timing out a minute.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

fn plugin_histogram() -> Histogram {
    // 50 us to about 100 s: one plugin of a configlist can be a few BPF map updates (tens of
    // microseconds), an exec'd binary milliseconds, iptables work a hundred.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 22))
}

fn phase_histogram() -> Histogram {
    // 10 us to about 80 s: a state read is tens of microseconds, a delegate timing out a minute.
    Histogram::new(exponential_buckets(0.000_01, 2.0, 24))
}

/// Every metric of the agent.
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    request_seconds: Histograms<VerbLabels>,
    attachments: Family<AttachmentLabels, Counter>,
    attachment_seconds: Histograms<TypeLabels>,
    plugin_seconds: Histograms<PluginLabels>,
    phase_seconds: Histograms<PhaseLabels>,
    adds_in_flight: Gauge,
    adds_waiting: Gauge,
    cached: Family<KindLabels, Gauge>,
    lookups: Family<LookupLabels, Counter>,
    status_patches: Family<ResultLabels, Counter>,
    events: Family<ResultLabels, Counter>,
    watch_errors: Family<WatchLabels, Counter>,
    kube_cache_synced: Family<WatchLabels, Gauge>,
    kube_relists: Family<RelistLabels, Counter>,
    kube_outages: Family<WatchLabels, Counter>,
    portmap_flows: Gauge,
    portmap_flow_capacity: Gauge,
    portmap_flow_evictions: Counter,
    portmap_flows_created: Counter,
    portmap_flows_removed: Counter,
    portmap_translations: Family<DirectionLabels, Counter>,
    policy_loads: Family<ResultLabels, Counter>,
    policy_refusals: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    requests: Family::default(),
    request_seconds: Family::new_with_constructor(latency_histogram),
    attachments: Family::default(),
    attachment_seconds: Family::new_with_constructor(latency_histogram),
    plugin_seconds: Family::new_with_constructor(plugin_histogram),
    phase_seconds: Family::new_with_constructor(phase_histogram),
    adds_in_flight: Gauge::default(),
    adds_waiting: Gauge::default(),
    cached: Family::default(),
    lookups: Family::default(),
    status_patches: Family::default(),
    events: Family::default(),
    watch_errors: Family::default(),
    kube_cache_synced: Family::default(),
    kube_relists: Family::default(),
    kube_outages: Family::default(),
    portmap_flows: Gauge::default(),
    portmap_flow_capacity: Gauge::default(),
    portmap_flow_evictions: Counter::default(),
    portmap_flows_created: Counter::default(),
    portmap_flows_removed: Counter::default(),
    portmap_translations: Family::default(),
    policy_loads: Family::default(),
    policy_refusals: Counter::default(),
});

/// The agent's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// Counts an ADD waiting for, then holding, a slot of `--max-concurrent-adds`.
pub struct AddSlotGauge {
    running: bool,
}

impl AddSlotGauge {
    pub fn waiting() -> Self {
        metrics().adds_waiting.inc();
        AddSlotGauge { running: false }
    }

    pub fn running(&mut self) {
        if !self.running {
            metrics().adds_waiting.dec();
            metrics().adds_in_flight.inc();
            self.running = true;
        }
    }
}

impl Drop for AddSlotGauge {
    fn drop(&mut self) {
        if self.running {
            metrics().adds_in_flight.dec();
        } else {
            metrics().adds_waiting.dec();
        }
    }
}

impl Metrics {
    /// One CNI request answered; `code` is the CNI error code, 0 on success.
    pub fn request(&self, verb: Option<Command>, code: u64, elapsed: Duration) {
        crate::memory::note_request();
        // The verb comes from the runtime: unknown ones (`None`) share a label, so they cannot
        // grow the series without bound.
        let verb = verb.map_or("other", Command::as_str);
        let result = if code == 0 { "ok" } else { "error" };
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.into(),
                result: result.into(),
                code: code.to_string(),
            })
            .inc();
        self.request_seconds.get_or_create(&VerbLabels { verb: verb.into() }).observe(elapsed.as_secs_f64());
    }

    /// One attachment attempted by an ADD.
    pub fn attachment(&self, network: &str, plugin_type: &str, ok: bool, elapsed: Duration) {
        let labels = AttachmentLabels {
            network: network.into(),
            r#type: plugin_type.into(),
            result: if ok { "ok" } else { "error" }.into(),
        };
        self.attachments.get_or_create(&labels).inc();
        self.attachment_seconds
            .get_or_create(&TypeLabels { r#type: plugin_type.into() })
            .observe(elapsed.as_secs_f64());
    }

    /// One plugin of a configlist run (natively or exec'd), whatever its outcome.
    pub fn plugin(&self, plugin_type: &str, command: Command, elapsed: Duration) {
        self.plugin_seconds
            .get_or_create(&PluginLabels { r#type: plugin_type.into(), command: command.as_str().into() })
            .observe(elapsed.as_secs_f64());
    }

    /// One phase of a CNI request (`crate::phase`, by its label); `verb` is `None` outside a
    /// request.
    pub fn phase(&self, verb: Option<Command>, phase: &str, elapsed: Duration) {
        let labels = PhaseLabels { verb: verb.map_or("other", Command::as_str).into(), phase: phase.into() };
        self.phase_seconds.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    /// Objects held by a catalog cache (`pods`, `nads`).
    pub fn set_cached(&self, kind: &str, n: usize) {
        self.cached.get_or_create(&KindLabels { kind: kind.into() }).set(n.try_into().unwrap_or(i64::MAX));
    }

    pub fn lookup(&self, kind: &str, source: &str) {
        self.lookups.get_or_create(&LookupLabels { kind: kind.into(), source: source.into() }).inc();
    }

    pub fn status_patch(&self, result: &str) {
        self.status_patches.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn event(&self, result: &str) {
        self.events.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub fn watch_errors(&self, watch: &str) {
        self.watch_errors.get_or_create(&WatchLabels { watch: watch.into() }).inc();
    }

    /// Whether a watch's cache holds the API server's current state.
    pub fn kube_cache_synced(&self, watch: &str, synced: bool) {
        self.kube_cache_synced.get_or_create(&WatchLabels { watch: watch.into() }).set(i64::from(synced));
    }

    /// A watch's cache relisted to become current again.
    pub fn kube_relist(&self, watch: &str, reason: &str) {
        self.kube_relists.get_or_create(&RelistLabels { watch: watch.into(), reason: reason.into() }).inc();
    }

    /// A watch lost the API server (its first failure since it last worked).
    pub fn kube_outage(&self, watch: &str) {
        self.kube_outages.get_or_create(&WatchLabels { watch: watch.into() }).inc();
    }

    /// The port mapping flow table's figures, read by its reaper after each pass: `live`
    /// entries of `capacity`, and the counters of the programs and the agent (kept in the
    /// pinned maps, so they continue across restarts of the agent).
    pub fn portmap_flow_table(&self, live: u64, capacity: u64, stats: &plexus_ebpf_common::flow::FlowStats) {
        let gauge = |g: &Gauge, v: u64| g.set(v.try_into().unwrap_or(i64::MAX));
        let counter = |c: &Counter, v: u64| c.inner().store(v, std::sync::atomic::Ordering::Relaxed);
        gauge(&self.portmap_flows, live);
        gauge(&self.portmap_flow_capacity, capacity);
        counter(&self.portmap_flow_evictions, stats.evicted(live));
        counter(&self.portmap_flows_created, stats.created);
        counter(&self.portmap_flows_removed, stats.removed);
        for (direction, v) in [("forward", stats.forward), ("reverse", stats.reverse), ("icmp", stats.icmp)] {
            counter(
                &self.portmap_translations.get_or_create(&DirectionLabels { direction: direction.into() }),
                v,
            );
        }
    }

    /// A version of the network attachment policy read: `ok`, or `invalid` (the last valid
    /// version stays in force).
    pub fn policy_load(&self, result: &str) {
        self.policy_loads.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    /// An attachment the network attachment policy refused.
    pub fn policy_refusal(&self) {
        self.policy_refusals.inc();
    }

    /// ADDs holding a slot right now.
    pub fn adds_in_flight(&self) -> i64 {
        self.adds_in_flight.get()
    }
}

/// The registry of every metric, with their names and help.
pub fn registry() -> Registry {
    let m = metrics();
    let mut r = Registry::default();
    r.register("plexus_cni_requests", "CNI requests answered, by verb and result", m.requests.clone());
    r.register(
        "plexus_cni_request_duration_seconds",
        "Time to answer a CNI request, by verb",
        m.request_seconds.clone(),
    );
    r.register(
        "plexus_attachments",
        "Attachments attempted by ADDs, by network, plugin type and result",
        m.attachments.clone(),
    );
    r.register(
        "plexus_attachment_duration_seconds",
        "Time to attach one network (its delegate's ADD), by plugin type",
        m.attachment_seconds.clone(),
    );
    r.register(
        "plexus_plugin_duration_seconds",
        "Time of one plugin of a configlist (native or exec'd), by plugin type and CNI command",
        m.plugin_seconds.clone(),
    );
    r.register(
        "plexus_cni_phase_duration_seconds",
        "Time of one phase of a CNI request, by verb and phase (netns and ipam are within plugins)",
        m.phase_seconds.clone(),
    );
    r.register(
        "plexus_adds_in_flight",
        "ADDs running (at most --max-concurrent-adds)",
        m.adds_in_flight.clone(),
    );
    r.register(
        "plexus_adds_waiting",
        "ADDs queued for a slot of --max-concurrent-adds",
        m.adds_waiting.clone(),
    );
    r.register("plexus_catalog_cached_objects", "Objects in the catalog's caches, by kind", m.cached.clone());
    r.register(
        "plexus_catalog_lookups",
        "Catalog lookups, by kind and where they were answered (cache, or one API GET on a miss)",
        m.lookups.clone(),
    );
    r.register(
        "plexus_network_status_patches",
        "network-status patch attempts and outcomes (ok, retried, refused, gave_up, pod_gone, superseded, dropped)",
        m.status_patches.clone(),
    );
    r.register("plexus_pod_events", "Pod events (published, failed, dropped)", m.events.clone());
    r.register(
        "plexus_kube_watch_errors",
        "Errors of the Kubernetes watches, by watch",
        m.watch_errors.clone(),
    );
    r.register(
        "plexus_kube_cache_synced",
        "1 while a watch's cache holds the API server's current state, 0 while it lists, relists or cannot reach the server",
        m.kube_cache_synced.clone(),
    );
    r.register(
        "plexus_kube_relists",
        "Relists of a watch's cache, by reason (expired: 410 Gone, the resourceVersion was too old; outage: after failures)",
        m.kube_relists.clone(),
    );
    r.register(
        "plexus_kube_watch_outages",
        "Times a watch lost the API server (each logged once at WARN; the retries at DEBUG)",
        m.kube_outages.clone(),
    );
    r.register("plexus_portmap_flows", "Flows in the port mapping flow table", m.portmap_flows.clone());
    r.register(
        "plexus_portmap_flow_capacity",
        "Size of the port mapping flow table (--portmap-max-flows, or the pinned table's)",
        m.portmap_flow_capacity.clone(),
    );
    r.register(
        "plexus_portmap_flow_evictions",
        "Flows the kernel evicted from the full port mapping flow table (least recently used first)",
        m.portmap_flow_evictions.clone(),
    );
    r.register(
        "plexus_portmap_flows_created",
        "Flows made by the port mapping programs",
        m.portmap_flows_created.clone(),
    );
    r.register(
        "plexus_portmap_flows_removed",
        "Flows removed: expired (by the programs or the agent's reaper) or of deleted mappings",
        m.portmap_flows_removed.clone(),
    );
    r.register(
        "plexus_portmap_translations",
        "Packets translated by the port mapping programs, by direction (forward, reverse, icmp)",
        m.portmap_translations.clone(),
    );
    r.register(
        "plexus_network_policy_loads",
        "Versions of the network attachment policy read, by result (ok, invalid: the last valid one stays)",
        m.policy_loads.clone(),
    );
    r.register(
        "plexus_network_policy_refusals",
        "Attachments refused by the network attachment policy",
        m.policy_refusals.clone(),
    );
    r
}

/// The `/metrics` body.
pub fn encode() -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry()) {
        tracing::warn!("encoding metrics: {e}");
    }
    out
}

/// How many times `phase` of `verb` was observed, as /metrics says.
#[cfg(test)]
pub fn phase_count(verb: &str, phase: &str) -> u64 {
    let series = format!("plexus_cni_phase_duration_seconds_count{{verb=\"{verb}\",phase=\"{phase}\"}} ");
    encode().lines().find_map(|l| l.strip_prefix(&series)).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Whether the agent is ready, or why not (any error: its text is the answer's body). Runs on
/// a blocking thread (it may read files).
pub type ReadyCheck = Arc<dyn Fn() -> Result<(), Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// How long [`bind`] waits for an address another process still listens on.
pub const BIND_PATIENCE: Duration = Duration::from_secs(5);

/// Binds the endpoint's address, so that an agent restarted right after a crash binds: with
/// SO_REUSEADDR, while the connections of the one before linger (TIME_WAIT and the like);
/// and waiting up to [`BIND_PATIENCE`] while that one, killed but not gone yet, still
/// listens. An address taken for longer is an error.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    bind_within(addr, BIND_PATIENCE).await
}

async fn bind_within(addr: SocketAddr, patience: Duration) -> std::io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + patience;
    let mut told = false;
    loop {
        match bind_once(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tokio::time::Instant::now() < deadline => {
                if !told {
                    tracing::info!(%addr, "the metrics address is in use (by an agent still exiting?); waiting up to {patience:?}");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            bound => return bound,
        }
    }
}

fn bind_once(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Serves `/metrics`, `/healthz` and `/readyz` until the listener fails.
pub async fn serve(listener: TcpListener, ready: ReadyCheck) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    }
    loop {
        let (stream, _) = listener.accept().await?;
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| respond(req, ready.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}

async fn respond(
    req: Request<hyper::body::Incoming>,
    ready: ReadyCheck,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let text = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r
    };
    if req.method() != Method::GET {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into()));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            let mut r = text(StatusCode::OK, encode());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            r
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match tokio::task::spawn_blocking(move || ready()).await {
            Ok(Ok(())) => text(StatusCode::OK, "ready\n".into()),
            Ok(Err(why)) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("readiness check failed: {e}\n")),
        },
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_flow_tables_figures_are_published_as_read() {
        let stats = plexus_ebpf_common::flow::FlowStats {
            created: 10,
            removed: 4,
            forward: 30,
            reverse: 28,
            icmp: 2,
        };
        metrics().portmap_flow_table(5, 131_072, &stats);
        let body = encode();
        for line in [
            "plexus_portmap_flows 5",
            "plexus_portmap_flow_capacity 131072",
            "plexus_portmap_flow_evictions_total 1",
            "plexus_portmap_flows_created_total 10",
            "plexus_portmap_flows_removed_total 4",
            r#"plexus_portmap_translations_total{direction="forward"} 30"#,
            r#"plexus_portmap_translations_total{direction="reverse"} 28"#,
            r#"plexus_portmap_translations_total{direction="icmp"} 2"#,
        ] {
            assert!(body.lines().any(|l| l == line), "{line} in {body}");
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn rebinds_at_once_while_closed_connections_linger() {
        use tokio::io::AsyncReadExt;
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        // The agent's side closes first, as a crash does: its end of the connection lingers
        // on the port in TIME_WAIT once the client has closed too.
        drop(server_side);
        drop(listener);
        assert_eq!(client.read(&mut [0u8; 1]).await.unwrap(), 0);
        drop(client);
        let again = bind_within(addr, Duration::ZERO).await;
        assert!(again.is_ok(), "rebinding {addr}: {again:?}");
        // A live listener still owns its address.
        let other = bind_within(addr, Duration::from_millis(120)).await.unwrap_err();
        assert_eq!(other.kind(), std::io::ErrorKind::AddrInUse);
    }

    #[tokio::test]
    async fn waits_for_an_address_still_held_by_an_exiting_agent() {
        // The agent killed a moment ago: its listener goes when its exit completes.
        let previous = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = previous.local_addr().unwrap();
        let exiting = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(previous);
        });
        let bound = bind(addr).await;
        exiting.join().unwrap();
        assert!(bound.is_ok(), "binding {addr} once the previous agent is gone: {bound:?}");
    }

    #[tokio::test]
    async fn serves_metrics_and_health() {
        metrics().request(Some(Command::Add), 0, Duration::from_millis(20));
        metrics().attachment("ns/net-a", "macvlan", true, Duration::from_millis(3));
        metrics().set_cached("pods", 3);
        metrics().plugin("metrics-test-plugin", Command::Add, Duration::from_micros(120));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ready: ReadyCheck = Arc::new(|| Err("no default network".into()));
        let server = tokio::spawn(serve(listener, ready));
        let body = get(addr, "/metrics").await;
        assert!(body.starts_with("HTTP/1.1 200"), "{body}");
        assert!(body.contains(r#"plexus_cni_requests_total{verb="ADD",result="ok",code="0"}"#), "{body}");
        assert!(body.contains(r#"plexus_attachments_total{network="ns/net-a",type="macvlan",result="ok"} 1"#));
        assert!(body.contains(r#"plexus_catalog_cached_objects{kind="pods"} 3"#));
        assert!(body.contains("plexus_attachment_duration_seconds_bucket"));
        assert!(
            body.contains(
                r#"plexus_plugin_duration_seconds_count{type="metrics-test-plugin",command="ADD"} 1"#
            ),
            "{body}"
        );
        assert!(
            body.contains(r#"plexus_plugin_duration_seconds_bucket{le="0.0002",type="metrics-test-plugin",command="ADD"} 1"#)
                || body.contains(r#"plexus_plugin_duration_seconds_bucket{type="metrics-test-plugin",command="ADD",le="0.0002"} 1"#),
            "the first buckets are finer than a millisecond: {body}"
        );
        assert!(body.contains("# TYPE plexus_portmap_flow_evictions counter"), "{body}");
        assert!(body.contains("# TYPE plexus_portmap_flows gauge"), "{body}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let r = get(addr, "/readyz").await;
        assert!(r.starts_with("HTTP/1.1 503") && r.contains("no default network"), "{r}");
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        server.abort();
    }
}
