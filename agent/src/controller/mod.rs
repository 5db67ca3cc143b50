//! The PodNetwork controller (`plexus-agent controller`): the KEP's controller, run as a
//! Deployment of its own with leader election (docs/podnetwork-controller.md).
//!
//! - [`view`]: watches of PodNetworks, PodNetworkAttachments, NetworkAttachmentDefinitions,
//!   AttachmentParameters, and of pods metadata-only (`status.phase` neither Succeeded nor
//!   Failed), each pod kept as the names its `plexus.dev/pod-networks` list references;
//! - [`plan`]: the conditions, InUse finalizers and `default` PodNetwork the view calls for
//!   (pure), with [`params_check`] for ParamsReady;
//! - [`reconcile`]: the writes, each conditional on the resourceVersion it was decided from;
//! - [`lease`]: leader election on a coordination.k8s.io Lease: only the leader writes.
//!
//! A round is planned when a watch brings a change (bursts coalesced) and every
//! [`ControllerConfig::resync`] (retrying what failed), only while leading and while every
//! cache is current.

pub mod lease;
pub mod params_check;
pub mod plan;
pub mod reconcile;
pub mod view;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::kube::api::Api;
use ::kube::core::PartialObjectMeta;
use ::kube::runtime::watcher::{self, watcher, Event};
use ::kube::Client;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::kube::watch::{run_into, Settings, Sink};
use crate::kube::{nad, ApiAccess};
use crate::metrics::metrics;
use crate::podnetwork::model::{
    AttachmentParameters, PodNetwork, PodNetworkAttachment, ATTACHMENT_PLURAL, GROUP, PARAMETERS_PLURAL,
    POD_NETWORK_PLURAL,
};
use lease::{Elector, LeaseConfig};
use plan::PlanConfig;
use view::View;

/// Everything the controller does cluster-wide: `deploy/controller.yaml`'s ClusterRole grants
/// exactly these (a test checks both).
pub const CONTROLLER_API_ACCESS: &[ApiAccess] = &[
    // Watched; the default PodNetwork created; the InUse finalizer merge-patched.
    ApiAccess { group: GROUP, resource: POD_NETWORK_PLURAL, verbs: &["list", "watch", "create", "patch"] },
    ApiAccess { group: GROUP, resource: "podnetworks/status", verbs: &["patch"] },
    ApiAccess { group: GROUP, resource: ATTACHMENT_PLURAL, verbs: &["list", "watch", "patch"] },
    ApiAccess { group: GROUP, resource: "podnetworkattachments/status", verbs: &["patch"] },
    // Read to check ParamsReady.
    ApiAccess { group: GROUP, resource: PARAMETERS_PLURAL, verbs: &["list", "watch"] },
    ApiAccess { group: nad::GROUP, resource: nad::PLURAL, verbs: &["list", "watch"] },
    // Metadata only, to know which networks are in use.
    ApiAccess { group: "", resource: "pods", verbs: &["list", "watch"] },
];

/// What the controller does with its Lease, in its own namespace: `deploy/controller.yaml`'s
/// Role grants exactly these.
pub const CONTROLLER_LEASE_ACCESS: &[ApiAccess] =
    &[ApiAccess { group: "coordination.k8s.io", resource: "leases", verbs: &["get", "create", "patch"] }];

/// The pods' field selector: pods that are done do not hold a network (the KEP's InUse).
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// The code of an API server's answer.
pub(crate) fn api_code(e: &::kube::Error) -> Option<u16> {
    match e {
        ::kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub lease: LeaseConfig,
    pub plan: PlanConfig,
    /// Plan a round at least this often (retries failed writes).
    pub resync: Duration,
    pub watch: Settings,
}

/// Feeds one watch into the view and wakes the reconciler.
struct ViewSink<F> {
    apply: F,
    wake: Arc<Notify>,
    not_served: Option<&'static str>,
}

impl<K, F: FnMut(Event<K>) -> usize> Sink<K> for ViewSink<F> {
    fn apply(&mut self, event: Event<K>) -> usize {
        let n = (self.apply)(event);
        self.wake.notify_one();
        n
    }

    fn if_not_served(&self) -> Option<&'static str> {
        self.not_served
    }
}

/// A running controller.
pub struct Controller {
    view: Arc<Mutex<View>>,
    synced: Vec<watch::Receiver<bool>>,
    leading: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    watches: Vec<JoinHandle<()>>,
    main: Option<JoinHandle<()>>,
    /// Writes attempted (made, refused by a conflict, or failed).
    writes: Arc<AtomicUsize>,
}

fn lock(view: &Mutex<View>) -> std::sync::MutexGuard<'_, View> {
    view.lock().unwrap_or_else(|p| p.into_inner())
}

impl Controller {
    /// Starts the watches, the election and the reconciler on the current runtime.
    pub fn start(client: Client, config: ControllerConfig) -> Controller {
        let view = Arc::new(Mutex::new(View::default()));
        let wake = Arc::new(Notify::new());
        let mut synced = Vec::new();
        let mut watches = Vec::new();

        macro_rules! watch_kind {
            ($what:expr, $api:expr, $config:expr, $apply:ident, $metric:expr, $not_served:expr) => {{
                let (tx, rx) = watch::channel(false);
                synced.push(rx);
                let api = $api;
                let view = view.clone();
                let sink = ViewSink {
                    apply: move |event| {
                        let n = lock(&view).$apply(event);
                        metrics().set_cached($metric, n);
                        n
                    },
                    wake: wake.clone(),
                    not_served: $not_served,
                };
                watches.push(tokio::spawn(run_into(
                    $what,
                    $config,
                    config.watch,
                    move |c| watcher(api.clone(), c),
                    sink,
                    tx,
                )));
            }};
        }
        let any = watcher::Config::default;
        watch_kind!(
            "PodNetworks",
            Api::<PodNetwork>::all(client.clone()),
            any(),
            apply_pod_network,
            "podnetworks",
            None
        );
        watch_kind!(
            "PodNetworkAttachments",
            Api::<PodNetworkAttachment>::all(client.clone()),
            any(),
            apply_attachment,
            "podnetworkattachments",
            None
        );
        watch_kind!(
            "AttachmentParameters",
            Api::<AttachmentParameters>::all(client.clone()),
            any(),
            apply_parameters,
            "attachmentparameters",
            Some("install deploy/podnetwork-crds.yaml")
        );
        watch_kind!(
            "NetworkAttachmentDefinitions",
            Api::<nad::NetworkAttachmentDefinition>::all(client.clone()),
            any(),
            apply_nad,
            "nads",
            Some("install deploy/crd.yaml to use NADs as PodNetwork parameters")
        );
        // `PartialObjectMeta` makes every request metadata-only.
        watch_kind!(
            "pods (metadata)",
            Api::<PartialObjectMeta<Pod>>::all(client.clone()),
            any().fields(POD_FIELD_SELECTOR),
            apply_pod,
            "pods_referencing_networks",
            None
        );

        let (leading_tx, leading) = watch::channel(false);
        let (stop, stop_rx) = watch::channel(false);
        let elector = Elector::new(client.clone(), config.lease.clone());
        let election = tokio::spawn(elector.run(leading_tx, stop_rx.clone()));
        let writer = reconcile::Writer::new(client);
        let writes = Arc::new(AtomicUsize::new(0));
        let reconciler = tokio::spawn(reconcile_loop(
            view.clone(),
            synced.clone(),
            leading.clone(),
            stop_rx,
            wake,
            (writer, writes.clone()),
            config.clone(),
        ));
        let main = tokio::spawn(async move {
            let _ = reconciler.await;
            // The election releases the Lease after the reconciler stopped writing.
            let _ = election.await;
        });
        Controller { view, synced, leading, stop, watches, main: Some(main), writes }
    }

    /// Whether every cache holds the API server's current state.
    pub fn is_synced(&self) -> bool {
        self.synced.iter().all(|s| *s.borrow())
    }

    /// Whether this replica holds the Lease.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// How many writes of the KEP objects this replica attempted (the Lease's aside).
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::Relaxed)
    }

    /// The pods the view keeps (those that reference networks).
    pub fn pods_kept(&self) -> usize {
        lock(&self.view).pods.len()
    }

    /// A readiness check for `/readyz`.
    pub fn ready_check(&self) -> crate::metrics::ReadyCheck {
        let synced = self.synced.clone();
        Arc::new(move || {
            if synced.iter().all(|s| *s.borrow()) {
                Ok(())
            } else {
                Err("the controller's caches are not current (listing, relisting, or the API server is unreachable: see \
                     the log)"
                    .into())
            }
        })
    }

    /// Stops reconciling, releases the Lease when held, stops the watches.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(main) = self.main.take() {
            let _ = main.await;
        }
        for w in &self.watches {
            w.abort();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        for w in &self.watches {
            w.abort();
        }
    }
}

/// How long a burst of watch events is let settle before a round is planned.
const SETTLE: Duration = Duration::from_millis(50);

async fn reconcile_loop(
    view: Arc<Mutex<View>>,
    synced: Vec<watch::Receiver<bool>>,
    mut leading: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
    wake: Arc<Notify>,
    (writer, writes): (reconcile::Writer, Arc<AtomicUsize>),
    config: ControllerConfig,
) {
    let mut waiting_logged = false;
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(config.resync) => {}
            _ = leading.changed() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        if !*leading.borrow() {
            continue;
        }
        if !synced.iter().all(|s| *s.borrow()) {
            if !waiting_logged {
                tracing::info!("leading; waiting for every cache to be current before reconciling");
                waiting_logged = true;
            }
            continue;
        }
        waiting_logged = false;
        tokio::time::sleep(SETTLE).await;
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let actions = plan::plan(&lock(&view), config.plan, &now);
        if actions.is_empty() || !*leading.borrow() || *stop.borrow() {
            continue;
        }
        writes.fetch_add(actions.len(), Ordering::Relaxed);
        let outcome = writer.apply(&actions).await;
        tracing::debug!(?outcome, "reconciled");
    }
}
