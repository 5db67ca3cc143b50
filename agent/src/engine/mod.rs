//! The attachment engine: runs a pod's plan in order, undoes it on failure, records it
//! durably, and tears it down (spec 6.2, 7.2, 7.3).

mod default_route;
mod error;
mod front_end;
pub mod ipam_claim;
pub mod live;
pub mod locks;
mod pod_networks_status;
pub mod pod_uid;
pub mod request;
mod takeover;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use plexus_cni_shim::{Request, Response};
use serde_json::{json, Value};
use tracing::Instrument;

use crate::catalog::confdir;
use crate::catalog::{Catalog, CatalogError, PodInfo, StatusReport};
use crate::cni::result::CniResult;
use crate::cni::AttachmentKey;
use crate::cni::Command;
use crate::cni::{CniCode, CniError, ErrorCode, SUPPORTED_VERSIONS};
use crate::delegate::{DelegateError, Delegator, InvocationEnv};
use crate::devices::DeviceSource;
use crate::devinfo::attachment as device_info;
use crate::netapi::store::NetworkStore;
use crate::netlink::deletions;
use crate::phase::Phase;
use crate::policy::PolicyHandle;
use crate::spec::delegate_conf::{default_delegate, DelegateConfig};
use crate::spec::status::{
    annotation_value, default_gateways, network_status, NetworkStatus, StatusInput, StatusKeys,
};
use crate::state::{AttachmentRecord, ContainerRecord, FrontEnd, PodRef, StateError, StateStore, Sync};
use crate::takeover::MultusCache;
use error::{DetachError, DetachFailure};
use locks::ContainerLocks;
use request::{request_version, CniEnv, PlexusConf};

/// What the operator decides about the engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where the cluster default network's CNI config is found (spec 6).
    pub default_network_dir: PathBuf,
    /// Directories searched for on-disk configs named after a NAD (spec 3.4.1 rules 2, 3).
    pub network_conf_dirs: Vec<PathBuf>,
    /// Namespaces whose NADs any pod may select (spec 7.4); a pod's own is always allowed.
    pub allowed_namespaces: Vec<String>,
    /// Fail the ADD on an invalid selection annotation instead of ignoring it.
    pub strict_annotations: bool,
    /// The root of the device information files (Device Information Specification, section
    /// 4): the device plugins' under `dp/`, plexus's own under `cni/`.
    pub device_info_dir: PathBuf,
    /// The keys of the network-status annotation's maps (the spec's, or Multus's too).
    pub network_status_keys: StatusKeys,
}

/// Failed DELs after which an attachment whose ADD never answered is given up (see
/// `Engine::teardown`).
pub const UNCONFIRMED_DEL_ATTEMPTS: u32 = 3;

pub struct Engine {
    config: EngineConfig,
    catalog: Arc<dyn Catalog>,
    delegator: Delegator,
    state: StateStore,
    locks: ContainerLocks,
    policy: PolicyHandle,
    /// The CRI network API's networks, when it is served: while it holds one, STATUS needs no
    /// default network (a sandbox that names an API network needs none).
    api_networks: Option<Arc<NetworkStore>>,
    /// Where a pod's allocated devices are learnt, asked in order (`crate::devices`).
    device_sources: Vec<Arc<dyn DeviceSource>>,
    /// IPAMClaims (Kubernetes mode): without, a selection referencing one is refused.
    ipam_claims: Option<ipam_claim::IpamClaims>,
    /// The bandwidth dataplane, whose limits a live change of a selection's bandwidth changes
    /// in place.
    bandwidth: Option<Arc<crate::dataplane::bandwidth::Bandwidth>>,
    /// Multus's cache, read for the DEL and GC of containers Multus attached (`takeover`).
    multus: Option<MultusCache>,
}

impl From<StateError> for CniError {
    fn from(e: StateError) -> Self {
        CniError::new(e.cni_code(), format!("recording attachment state failed: {e}"))
    }
}

/// A delegate's failure as the runtime gets it: the delegate's code, the attachment named in
/// the message and as the details.
fn attachment_error(network: &str, e: &DelegateError) -> CniError {
    CniError::new(e.cni_code(), format!("attachment {network}: {e}")).with_details(network)
}

impl Engine {
    pub fn new(
        config: EngineConfig,
        catalog: Arc<dyn Catalog>,
        delegator: Delegator,
        state: StateStore,
    ) -> Self {
        Engine {
            config,
            catalog,
            delegator,
            state,
            locks: ContainerLocks::default(),
            policy: PolicyHandle::default(),
            api_networks: None,
            device_sources: Vec::new(),
            ipam_claims: None,
            bandwidth: None,
            multus: None,
        }
    }

    /// DELs and GCs of containers plexus has no record of read Multus's cache there first.
    pub fn with_multus_cache(mut self, cache: MultusCache) -> Self {
        self.multus = Some(cache);
        self
    }

    /// Live changes of a selection's bandwidth change `service`'s limits in place.
    pub fn with_bandwidth(mut self, service: Arc<crate::dataplane::bandwidth::Bandwidth>) -> Self {
        self.bandwidth = Some(service);
        self
    }

    /// Checks every secondary network against `policy` (without: everything is allowed).
    pub fn with_policy(mut self, policy: PolicyHandle) -> Self {
        self.policy = policy;
        self
    }

    /// The CRI network API is served beside, with `store`: STATUS without an on-disk default
    /// network is ready while the API holds a network (spec 6.1 still holds on a node with no
    /// network at all).
    pub fn with_network_api(mut self, store: Arc<NetworkStore>) -> Self {
        self.api_networks = Some(store);
        self
    }

    /// Learns which devices the cluster allocated to a pod from `sources`, asked in order, for
    /// the networks whose NAD has a `k8s.v1.cni.cncf.io/resourceName` (without: such a network
    /// cannot be attached).
    pub fn with_device_sources(mut self, sources: Vec<Arc<dyn DeviceSource>>) -> Self {
        self.device_sources = sources;
        self
    }

    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// Answers one request from the shim. Never fails: errors become CNI error results.
    pub async fn handle(&self, req: Request) -> Response {
        let version = request_version(&req.config);
        let span = tracing::info_span!(
            "cni",
            verb = %req.command,
            container = req.container_id.as_deref().unwrap_or(""),
            ifname = req.ifname.as_deref().unwrap_or(""),
        );
        let verb = Command::parse(&req.command).ok();
        // One netlink socket per namespace for the whole request, closed when it is done.
        let request = crate::netlink::shared::per_request(self.dispatch(&req));
        let outcome = match verb {
            Some(verb) => crate::phase::for_verb(verb, request).instrument(span.clone()).await,
            None => request.instrument(span.clone()).await,
        };
        crate::failpoint::reached(verb, crate::failpoint::Point::Answer);
        let _enter = span.enter();
        match outcome {
            Ok(Some(v)) => {
                tracing::info!("done");
                Response { exit_code: 0, stdout: v.to_string() }
            }
            Ok(None) => {
                tracing::info!("done");
                Response { exit_code: 0, stdout: String::new() }
            }
            Err(e) => {
                tracing::warn!(code = e.code.code(), "failed: {}", e.msg);
                Response { exit_code: 1, stdout: e.to_json(&version).to_string() }
            }
        }
    }

    async fn dispatch(&self, req: &Request) -> Result<Option<Value>, CniError> {
        let command = Command::parse(&req.command)?;
        if command == Command::Version {
            return Ok(Some(
                json!({"cniVersion": request_version(&req.config), "supportedVersions": SUPPORTED_VERSIONS}),
            ));
        }
        let env = CniEnv::from_request(req, command)?;
        let conf = PlexusConf::parse(&req.config)?;
        match command {
            Command::Add => self.add(&env, &conf).await.map(Some),
            Command::Del => self.del(&env, &conf).await.map(|()| None),
            Command::Check => self.check(&env, &conf).await.map(|()| None),
            Command::Status => {
                require_version(&conf, "1.1.0", "STATUS")?;
                self.status().await.map(|()| None)
            }
            Command::Gc => self.gc(&conf).await.map(|()| None),
            Command::Version => Ok(None),
        }
    }

    async fn add(&self, env: &CniEnv, conf: &PlexusConf) -> Result<Value, CniError> {
        let _serialized = self.locks.lock(&env.container_id).await;
        // Runtimes retry an ADD after a timeout without always sending DEL first; the old
        // attempt is undone so nothing of it lingers next to the new one.
        if let Some(previous) = self.state.load(&env.container_id, &env.ifname).await? {
            tracing::info!("ADD repeated without DEL: removing the previous attachments first");
            self.teardown(previous, env).await?;
        }
        let (pod, mut record, default_gw) = self.prepare_add(env, conf).await?;
        for a in &mut record.attachments {
            device_info::offer(a, &self.device_info_file(&record.container_id, &a.ifname));
        }
        // The write-ahead intent: everything this ADD may attempt, durable before the first
        // plugin runs, so a DEL after a crash anywhere below knows what to undo.
        self.state.save(&record, Sync::Durable).await?;

        for i in 0..record.attachments.len() {
            let file = self.device_info_file(&record.container_id, &record.attachments[i].ifname);
            if let Err(err) = device_info::before_add(&record.attachments[i], &file).await {
                // Nothing of this attachment was attempted: only the earlier ones are undone.
                record.attachments.truncate(i);
                return Err(self.rollback(record, env, err).await);
            }
            if let Err(err) = self.take_claim(&record, i).await {
                // A claim held by another attachment is the pod's request to change: told on it.
                let err = if err.code == ErrorCode::InvalidNetworkConfig {
                    self.refused(pod.as_ref(), err).await
                } else {
                    err
                };
                record.attachments.truncate(i);
                return Err(self.rollback(record, env, err).await);
            }
            let attachment = &record.attachments[i];
            tracing::info!(network = %attachment.network, ifname = %attachment.ifname, "attaching");
            let started = std::time::Instant::now();
            let added = self.delegator.add(&attachment.delegate, &invocation(env, &attachment.ifname)).await;
            crate::metrics::metrics().attachment(
                &attachment.network,
                plugin_type(&attachment.delegate),
                added.is_ok(),
                started.elapsed(),
            );
            match added {
                Ok(result) => {
                    record.attachments[i].result = result;
                    device_info::after_add(&mut record.attachments[i], &file).await;
                    let filled = self
                        .fill_claim(&record.attachments[i], parsed_result(&record.attachments[i]).as_ref())
                        .await;
                    if let Err(err) = filled {
                        return Err(self.rollback(record, env, err).await);
                    }
                    if default_gw == Some(i) {
                        if let Err(err) = default_route::take_from_result(&mut record.attachments[i]) {
                            return Err(self.rollback(record, env, err).await);
                        }
                    }
                }
                Err(e) => {
                    let err = attachment_error(&attachment.network, &e);
                    if let Some(pod) = &pod {
                        self.catalog.record_event(pod, "AttachmentFailed", &err.msg).await;
                    }
                    // The failed attachment is undone best effort and not kept recorded: a
                    // plugin rejecting its config (missing master, unknown type) fails its DEL
                    // the same way, so a record would fail every later DEL of the pod for good.
                    let failed = &record.attachments[i];
                    let failed_env = invocation(env, &failed.ifname);
                    if let Err(e) = self.delegator.del(&failed.delegate, &failed_env, None).await {
                        tracing::warn!(network = %failed.network, "undoing the failed attachment: {e}");
                    }
                    device_info::remove(failed, &file).await;
                    // Later attachments were never attempted (spec 7.2) and need no undo.
                    record.attachments.truncate(i);
                    return Err(self.rollback(record, env, err).await);
                }
            }
        }
        if let Err(err) = default_route::apply(&record, env).await {
            return Err(self.rollback(record, env, err).await);
        }
        record.complete = true;
        // The intent is durable and enough for DEL: this one need not survive a power loss.
        if let Err(e) = self.state.save(&record, Sync::Replacing).await {
            return Err(self.rollback(record, env, e.into()).await);
        }
        self.publish_status(pod.as_ref(), &record).await;
        default_result(&record, &conf.cni_version)
    }

    /// Everything that can be refused before anything is attached: a refusal here leaves
    /// nothing behind by construction. With the record, the index of the attachment whose
    /// result's gateways become the pod's default routes (`isDefaultGW`).
    async fn prepare_add(
        &self,
        env: &CniEnv,
        conf: &PlexusConf,
    ) -> Result<(Option<PodInfo>, ContainerRecord, Option<usize>), CniError> {
        let pod = crate::phase::timed(Phase::Catalog, self.lookup_pod(env)).await?;
        let planned = crate::phase::timed(Phase::Plan, self.plan_networks(pod.as_ref(), env, conf)).await?;
        let record = ContainerRecord {
            container_id: env.container_id.clone(),
            ifname: env.ifname.clone(),
            netns: env.netns.clone(),
            cni_args: env.args.clone(),
            pod: pod.as_ref().map(|p| PodRef {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                uid: p.uid.clone(),
            }),
            attachments: planned.attachments,
            complete: false,
            unconfirmed_del_failures: 0,
            front_end: planned.front_end,
        };
        Ok((pod, record, planned.default_gw))
    }

    async fn lookup_pod(&self, env: &CniEnv) -> Result<Option<PodInfo>, CniError> {
        let Some(args) = env.pod() else { return Ok(None) };
        match self.catalog.pod(&args.namespace, &args.name).await {
            Ok(Some(mut pod)) => {
                pod_uid::check(&pod, args.uid.as_deref()).map_err(|e| CniError::from_error(&e))?;
                if pod.uid.is_none() {
                    pod.uid = args.uid;
                }
                Ok(Some(pod))
            }
            Ok(None) => Err(CniError::try_again(format!(
                "pod {}/{} is not known to the agent's catalog yet; retry once it is",
                args.namespace, args.name
            ))),
            // The standalone catalog's manifest errors say "it": the pod is named here; the
            // others name it themselves.
            Err(e @ (CatalogError::BrokenManifest { .. } | CatalogError::NotFoundWithUnreadable { .. })) => {
                Err(CniError::new(e.cni_code(), format!("pod {}/{}: {e}", args.namespace, args.name)))
            }
            Err(e) => Err(CniError::from_error(&e)),
        }
    }

    /// Undoes a failed ADD: every attachment that may have been attempted, newest first.
    /// When the undo itself fails the record stays, so the runtime's DEL retries it.
    async fn rollback(&self, record: ContainerRecord, env: &CniEnv, cause: CniError) -> CniError {
        tracing::warn!("ADD failed, undoing: {}", cause.msg);
        match self.teardown(record, env).await {
            Ok(()) => cause,
            Err(undo) => {
                CniError { msg: format!("{}; undoing the ADD also failed: {}", cause.msg, undo.msg), ..cause }
            }
        }
    }

    async fn del(&self, env: &CniEnv, conf: &PlexusConf) -> Result<(), CniError> {
        let _serialized = self.locks.lock(&env.container_id).await;
        match self.state.load(&env.container_id, &env.ifname).await? {
            Some(record) => self.teardown(record, env).await,
            None => self.del_unrecorded(env, conf).await,
        }
    }

    /// DEL of a container plexus holds no record of: it may have been attached by the
    /// cluster default network alone, before plexus's config existed (plexus installed on a
    /// running node, a lost state directory). The runtime now DELs through plexus, so plexus
    /// runs the default network's DEL as the runtime would have, as Multus does: its
    /// addresses, port mappings and the plugins' own state are released. The plugins
    /// tolerate what is already gone (CNI DEL semantics), so a repeated DEL succeeds too.
    ///
    /// A container Multus attached (plexus took the node over from it) has its networks in
    /// Multus's cache: their DELs run instead, the default network's among them.
    async fn del_unrecorded(&self, env: &CniEnv, conf: &PlexusConf) -> Result<(), CniError> {
        if self.del_from_multus_cache(env, &conf.runtime_config, &conf.cni_version).await? {
            return Ok(());
        }
        let dir = self.config.default_network_dir.clone();
        let list = match blocking(move || confdir::default_network(&dir)).await? {
            Ok((_, list)) => list,
            Err(e) => {
                // Nothing can be released without the config; failing would fail this DEL
                // for good, and the runtime could never remove the sandbox.
                tracing::warn!("no record of the container and no default network to release it with: {e}");
                return Ok(());
            }
        };
        tracing::info!(network = %list.name, "no record of the container: running the default network's DEL");
        let network = list.name.clone();
        let delegate = default_delegate(list, &conf.runtime_config);
        self.delegator.del(&delegate, &invocation(env, &env.ifname), None).await.map_err(|e| {
            CniError::new(
                e.cni_code(),
                format!(
                    "plexus has no record of container {}, so it ran the default network's DEL, which failed: \
                     attachment {network}: {e}",
                    env.container_id
                ),
            )
            .with_details(network)
        })
    }

    /// Detaches every attachment of the record in reverse order, going on past failures
    /// (spec 7.2). What failed stays recorded for the next DEL; one error names them all.
    ///
    /// An attachment whose ADD never answered (the agent died during it, so no result was
    /// recorded) may have made nothing, and a plugin that rejects its config fails every DEL
    /// the same way: after [`UNCONFIRMED_DEL_ATTEMPTS`] failed DELs it is given up, loudly,
    /// rather than failing the pod's DEL forever (kubelet would retry it for good and the
    /// sandbox would never go). `plexus-agent doctor` lists whatever it may have left.
    async fn teardown(&self, mut record: ContainerRecord, env: &CniEnv) -> Result<(), CniError> {
        let netns = if env.netns.is_empty() { record.netns.clone() } else { env.netns.clone() };
        let base = CniEnv { netns, ..env.clone() };
        let mut failed = Vec::new();
        let mut failures = Vec::new();
        let mut detached = Vec::new();
        // The plugins' link deletions are deferred and done together after them, behind one
        // kernel wait per namespace rather than one per link (netlink::deletions).
        let ((), links) = deletions::deferring(async {
            while let Some(a) = record.attachments.pop() {
                match self.delegator.del(&a.delegate, &invocation(&base, &a.ifname), a.result.as_ref()).await
                {
                    Ok(()) => detached.push(a),
                    Err(source) => {
                        failures.push(DetachFailure {
                            network: a.network.clone(),
                            ifname: a.ifname.clone(),
                            source,
                        });
                        failed.push(a);
                    }
                }
            }
        })
        .await;
        // The plugins' own work, done late: timed with them.
        let mut undeleted = crate::phase::timed(Phase::Plugins, deletions::delete_deferred(links)).await;
        for a in detached {
            let pod_side = Path::new(&base.netns);
            // Under its name, or under the temporary one an ADD that died before renaming left.
            let temporary = crate::netlink::attachment_temp_name(&record.container_id, &a.ifname);
            let ours = |name: &str| name == a.ifname || name == temporary;
            match undeleted.iter().position(|(link, _)| ours(&link.name) && link.netns == pod_side) {
                Some(i) => {
                    let (_, error) = undeleted.swap_remove(i);
                    // The plugin that made the interface (the list's first) asked for its deletion.
                    let source = DelegateError::native(a.delegate.list.plugin_type(0), Command::Del, error);
                    failures.push(DetachFailure {
                        network: a.network.clone(),
                        ifname: a.ifname.clone(),
                        source,
                    });
                    failed.push(a);
                }
                None => {
                    tracing::info!(network = %a.network, ifname = %a.ifname, "detached");
                    device_info::remove(&a, &self.device_info_file(&record.container_id, &a.ifname)).await;
                    self.let_go_of_claim(&record.container_id, &a).await;
                }
            }
        }
        if failed.iter().any(|a| a.result.is_none()) {
            record.unconfirmed_del_failures += 1;
            if record.unconfirmed_del_failures >= UNCONFIRMED_DEL_ATTEMPTS {
                let (given_up, kept): (Vec<_>, Vec<_>) = failed.into_iter().partition(|a| a.result.is_none());
                for a in &given_up {
                    tracing::warn!(
                        network = %a.network, ifname = %a.ifname,
                        "giving up the DEL of an attachment whose ADD never answered, after {UNCONFIRMED_DEL_ATTEMPTS} \
                         failed DELs; `plexus-agent doctor` lists anything it left"
                    );
                }
                failures.retain(|f| kept.iter().any(|a| a.ifname == f.ifname && a.network == f.network));
                failed = kept;
            }
        }
        if failed.is_empty() {
            return Ok(self.state.remove(&record.container_id, &record.ifname).await?);
        }
        failed.reverse();
        record.attachments = failed;
        record.complete = false;
        // Fewer attachments than the durable record lists: losing this to a power loss only
        // repeats DELs.
        self.state.save(&record, Sync::Replacing).await?;
        let err = DetachError { container_id: record.container_id, failures };
        Err(CniError::from_error(&err).with_details(format!("container {}", err.container_id)))
    }

    async fn check(&self, env: &CniEnv, conf: &PlexusConf) -> Result<(), CniError> {
        require_version(conf, "0.4.0", "CHECK")?;
        let _serialized = self.locks.lock(&env.container_id).await;
        let record = self.state.load(&env.container_id, &env.ifname).await?.ok_or_else(|| {
            CniError::new(
                ErrorCode::ContainerUnknown,
                format!(
                    "no attachments are recorded for container {} interface {}",
                    env.container_id, env.ifname
                ),
            )
        })?;
        if !record.complete {
            return Err(CniError::new(ErrorCode::ContainerUnknown, "the container's ADD did not complete"));
        }
        for a in &record.attachments {
            self.delegator
                .check(&a.delegate, &invocation(env, &a.ifname), a.result.as_ref())
                .await
                .map_err(|e| attachment_error(&a.network, &e))?;
        }
        default_route::check(&record, env).await
    }

    async fn status(&self) -> Result<(), CniError> {
        let dir = self.config.default_network_dir.clone();
        let list = match blocking(move || confdir::default_network(&dir)).await? {
            Ok((_, list)) => list,
            Err(_) if self.api_networks.as_ref().is_some_and(|store| store.holds_any()) => return Ok(()),
            Err(e) => return Err(CniError::new(ErrorCode::PluginNotAvailable, e.to_string())),
        };
        let delegate = DelegateConfig { list, runtime_config: Default::default() };
        self.delegator.status(&delegate).await.map_err(|e| {
            CniError::new(
                ErrorCode::PluginNotAvailable,
                format!("the cluster default network is not ready: {e}"),
            )
        })
    }

    /// GC (CNI 1.1.0): removes every recorded attachment the runtime no longer lists, then
    /// lets each delegate network collect its own leaks against what remains.
    async fn gc(&self, conf: &PlexusConf) -> Result<(), CniError> {
        // GC exists from CNI 1.1.0 on (libcni refuses it below); acting on an older config
        // with an empty valid list would tear down every pod of the node.
        require_version(conf, "1.1.0", "GC")?;
        // Likewise a GC without the list: "nothing is valid" must be said, not assumed.
        let Some(listed) = conf.valid_attachments.clone() else {
            return Err(CniError::invalid_config(
                "GC needs \"cni.dev/valid-attachments\" in the config (an empty list when no attachment is valid)",
            ));
        };
        let valid: HashSet<AttachmentKey> = listed.into_iter().collect();
        let mut failures = Vec::new();
        let records = self.state.list().await?;
        let recorded: HashSet<String> = records.iter().map(|r| r.container_id.clone()).collect();
        let mut kept = Vec::new();
        for record in records {
            let key =
                AttachmentKey { container_id: record.container_id.clone(), ifname: record.ifname.clone() };
            if valid.contains(&key) {
                kept.push(record);
                continue;
            }
            let env = CniEnv {
                container_id: record.container_id.clone(),
                netns: String::new(),
                ifname: record.ifname.clone(),
                args: record.cni_args.clone(),
            };
            let _serialized = self.locks.lock(&env.container_id).await;
            tracing::info!(container = %env.container_id, "GC: removing stale attachments");
            if let Err(e) = self.teardown(record, &env).await {
                failures.push(e.msg);
            }
        }
        self.gc_multus_cache(&valid, &recorded, &conf.cni_version, &mut failures).await;
        let live: Vec<(String, String)> = kept
            .iter()
            .filter_map(|r| r.pod.as_ref())
            .map(|p| (p.namespace.clone(), p.name.clone()))
            .collect();
        self.catalog.collect_reports(&live).await;
        for (delegate, still_valid) in networks_in_use(&kept, self.current_default().await, &valid) {
            if let Err(e) = self.delegator.gc(&delegate, &still_valid).await {
                failures.push(format!("GC of network {}: {e}", delegate.list.name));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CniError::new(ErrorCode::DelegateFailed, format!("GC incomplete: {}", failures.join("; "))))
        }
    }

    async fn current_default(&self) -> Option<DelegateConfig> {
        let dir = self.config.default_network_dir.clone();
        let found = blocking(move || confdir::default_network(&dir)).await.ok()?.ok()?;
        Some(DelegateConfig { list: found.1, runtime_config: Default::default() })
    }

    /// The device-info file of the container's attachment on `ifname` (Device Information
    /// Specification 4.2).
    fn device_info_file(&self, container_id: &str, ifname: &str) -> PathBuf {
        device_info::file_of(&self.config.device_info_dir, container_id, ifname)
    }

    /// Publishes what a completed ADD made: network-status, and the KEP status when the pod
    /// asked for PodNetworks, together.
    async fn publish_status(&self, pod: Option<&PodInfo>, record: &ContainerRecord) {
        let statuses = network_statuses(record);
        tracing::info!(network_status = %serde_json::to_string(&statuses).unwrap_or_default(), "attached");
        let pod_networks_status = (record.front_end == FrontEnd::PodNetworks)
            .then(|| pod_networks_status::annotation(record, &statuses));
        if let Some(kep) = &pod_networks_status {
            tracing::info!(pod_networks_status = %kep, "PodNetworks attached");
        }
        if let Some(pod) = pod {
            let _timer = crate::phase::start(Phase::Status);
            let report = StatusReport {
                network_status: annotation_value(&statuses, self.config.network_status_keys),
                pod_networks_status,
            };
            if let Err(e) = self.catalog.publish_status(pod, report).await {
                tracing::warn!("publishing the status annotations: {e}");
            }
        }
    }
}

/// The delegate networks of the kept records (and the current default), each with the
/// attachments of it that are still valid. Every attachment the runtime lists is one of the
/// current default network's, recorded or not: a pod attached by the default network before
/// plexus's config existed has no record, and GC must not release its address.
fn networks_in_use(
    kept: &[ContainerRecord],
    current_default: Option<DelegateConfig>,
    listed: &HashSet<AttachmentKey>,
) -> Vec<(DelegateConfig, Vec<AttachmentKey>)> {
    let mut by_name: BTreeMap<String, (DelegateConfig, BTreeSet<AttachmentKey>)> = BTreeMap::new();
    if let Some(d) = current_default {
        by_name.insert(d.list.name.clone(), (d, listed.iter().cloned().collect()));
    }
    for r in kept {
        for a in &r.attachments {
            let entry = by_name
                .entry(a.delegate.list.name.clone())
                .or_insert_with(|| (a.delegate.clone(), BTreeSet::new()));
            entry.1.insert(AttachmentKey { container_id: r.container_id.clone(), ifname: a.ifname.clone() });
        }
    }
    by_name.into_values().map(|(d, keys)| (d, keys.into_iter().collect())).collect()
}

/// Commands newer than the request's config version are refused, as libcni's skel does.
fn require_version(conf: &PlexusConf, min: &str, verb: &str) -> Result<(), CniError> {
    if crate::cni::result::compare_versions(&conf.cni_version, min).is_ok_and(|o| o.is_lt()) {
        return Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!("{verb} needs cniVersion {min} or later; the config says {}", conf.cni_version),
        ));
    }
    Ok(())
}

fn invocation(env: &CniEnv, ifname: &str) -> InvocationEnv {
    InvocationEnv {
        container_id: env.container_id.clone(),
        netns: env.netns.clone(),
        ifname: ifname.to_owned(),
        args: env.args.clone(),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, CniError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| CniError::io(format!("agent task failed: {e}")))
}

/// The CNI type of a network's first plugin, for metrics.
fn plugin_type(d: &DelegateConfig) -> &str {
    d.list.plugins.first().and_then(|p| p.get("type")).and_then(Value::as_str).unwrap_or("")
}

fn parsed_result(a: &AttachmentRecord) -> Option<CniResult> {
    a.result.as_ref().and_then(|v| CniResult::parse(v, &a.delegate.list.cni_version).ok())
}

/// The network-status of a completed ADD (spec 5): one entry per attachment, the default
/// network's marked `default: true`, each with the default routes it holds in the pod.
pub fn network_statuses(record: &ContainerRecord) -> Vec<NetworkStatus> {
    let taken = default_route::taken(record);
    record
        .attachments
        .iter()
        .map(|a| {
            let result = parsed_result(a);
            // A `default-route` selection's gateways are the routes plexus set; any other
            // attachment keeps the default routes of its result that no selection took.
            let (default_route, gateways): (Option<Vec<IpAddr>>, Vec<IpAddr>) = match &a.default_route {
                Some(gws) if !a.is_default => (Some(gws.clone()), gws.clone()),
                _ => {
                    let kept = result
                        .as_ref()
                        .map(|r| default_gateways(&default_route::without_taken_defaults(r, taken)))
                        .unwrap_or_default();
                    // Spec 5.3.6.4 sets "default-route" for the selection that asked; plexus
                    // also sets it on the default network's entry while it holds the route.
                    (Some(kept.clone()).filter(|g| a.is_default && !g.is_empty()), kept)
                }
            };
            network_status(StatusInput {
                name: &a.network,
                ifname: &a.ifname,
                result: result.as_ref(),
                is_default: a.is_default,
                default_route: default_route.as_deref(),
                gateways: &gateways,
                device_info: a.device_info.as_ref(),
            })
        })
        .collect()
}

/// The ADD result plexus returns: the cluster default network's, in the request's version,
/// which is what kubelet reads the pod IP from. It describes the pod: the default routes a
/// `default-route` selection took from the default network are not in it.
fn default_result(record: &ContainerRecord, version: &str) -> Result<Value, CniError> {
    let Some(default) = record.attachments.first() else { return Ok(json!({"cniVersion": version})) };
    let Some(result) = parsed_result(default) else {
        return Ok(json!({"cniVersion": version}));
    };
    let result = default_route::without_taken_defaults(&result, default_route::taken(record));
    result.to_version(version).map_err(|e| {
        CniError::new(
            ErrorCode::IncompatibleVersion,
            format!("the default network's result cannot be expressed in cniVersion {version}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::files::FileCatalog;
    use crate::cni::config::NetworkConfigList;
    use crate::delegate::NativePlugins;

    /// A request's future is built, and in debug builds moved, on the stack of the thread
    /// that polls it (a test's, or a runtime worker's 2 MiB): a wrapper that doubles it (an
    /// `async fn` awaiting a future it was given keeps that future twice) overflowed a test
    /// thread's stack once, at 63 KB. Today's debug size is 8.7 KB; past twice that, the
    /// growing part wants boxing, or a wrapper fixing.
    #[test]
    fn a_requests_future_stays_small_enough_for_a_threads_stack() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::new(
            EngineConfig {
                default_network_dir: dir.path().join("net.d"),
                network_conf_dirs: Vec::new(),
                allowed_namespaces: Vec::new(),
                strict_annotations: false,
                device_info_dir: dir.path().join("devinfo"),
                network_status_keys: StatusKeys::Spec,
            },
            Arc::new(FileCatalog::new(Vec::new(), Vec::new(), dir.path().join("report"))),
            Delegator {
                bin_dirs: Vec::new(),
                timeout: std::time::Duration::from_secs(1),
                natives: NativePlugins::default(),
            },
            StateStore::new(&dir.path().join("state")),
        );
        let request = Request {
            command: "ADD".into(),
            container_id: None,
            netns: None,
            ifname: None,
            args: None,
            path: None,
            config: String::new(),
        };
        let future = engine.handle(request);
        let size = std::mem::size_of_val(&future);
        assert!(size <= 16 * 1024, "a request's future is {size} bytes");
    }

    /// A bridge attachment with `result`, the default network's when on `eth0`.
    pub(super) fn attachment(
        network: &str,
        ifname: &str,
        result: Value,
        default_route: Option<&[&str]>,
    ) -> AttachmentRecord {
        let list = NetworkConfigList::parse(
            &json!({"cniVersion": "1.0.0", "name": network, "type": "bridge"}).to_string(),
            None,
        )
        .unwrap();
        AttachmentRecord {
            network: network.into(),
            is_default: ifname == "eth0",
            ifname: ifname.into(),
            delegate: DelegateConfig { list, runtime_config: Default::default() },
            result: Some(result),
            default_route: default_route.map(|g| g.iter().map(|s| s.parse().unwrap()).collect()),
            pod_network: None,
            device: None,
            device_info: None,
            ipam_claim: None,
            selection: None,
            live_pending: false,
        }
    }

    /// A dual-stack default network and a secondary whose selection takes `default_route`.
    fn record(default_route: Option<&[&str]>) -> ContainerRecord {
        let default = attachment(
            "cluster",
            "eth0",
            json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": "/p"}],
                "ips": [{"address": "10.88.0.5/24", "gateway": "10.88.0.1", "interface": 0},
                        {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0}],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.88.0.1"}, {"dst": "::/0", "gw": "fd00::1"},
                           {"dst": "10.96.0.0/12"}]
            }),
            None,
        );
        let secondary = attachment(
            "ns/blue",
            "net1",
            json!({
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "net1", "sandbox": "/p"}],
                "ips": [{"address": "10.10.2.5/24", "interface": 0}]
            }),
            default_route,
        );
        ContainerRecord {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            netns: "/p".into(),
            cni_args: String::new(),
            pod: None,
            attachments: vec![default, secondary],
            complete: true,
            unconfirmed_del_failures: 0,
            front_end: FrontEnd::Npwg,
        }
    }

    /// A completed NPWG record of pod ns/p with the default network and one selection.
    pub(super) fn record_for_live() -> ContainerRecord {
        let mut r = record(None);
        r.pod = Some(PodRef { namespace: "ns".into(), name: "p".into(), uid: None });
        r
    }

    fn route_dsts(result: &Value) -> Vec<&str> {
        result["routes"].as_array().unwrap().iter().map(|r| r["dst"].as_str().unwrap()).collect()
    }

    fn key(cid: &str, ifname: &str) -> AttachmentKey {
        AttachmentKey { container_id: cid.into(), ifname: ifname.into() }
    }

    #[test]
    fn gc_keeps_every_listed_attachment_of_the_default_network_recorded_or_not() {
        let kept = record(None);
        let default = kept.attachments[0].delegate.clone();
        // c1 is recorded; c0 was attached before plexus's config existed.
        let listed: HashSet<AttachmentKey> = [key("c0", "eth0"), key("c1", "eth0")].into();
        let networks = networks_in_use(&[kept], Some(default), &listed);
        let by_name: BTreeMap<&str, &Vec<AttachmentKey>> =
            networks.iter().map(|(d, keys)| (d.list.name.as_str(), keys)).collect();
        assert_eq!(by_name["cluster"], &vec![key("c0", "eth0"), key("c1", "eth0")]);
        assert_eq!(by_name["ns/blue"], &vec![key("c1", "net1")]);
    }

    #[test]
    fn the_result_drops_the_default_routes_a_selection_took_and_only_those() {
        let all = default_result(&record(None), "1.0.0").unwrap();
        assert_eq!(route_dsts(&all), ["0.0.0.0/0", "::/0", "10.96.0.0/12"]);
        let v4 = default_result(&record(Some(&["10.10.2.1"])), "1.0.0").unwrap();
        assert_eq!(route_dsts(&v4), ["::/0", "10.96.0.0/12"], "{v4:#}");
        let both = default_result(&record(Some(&[])), "1.0.0").unwrap();
        assert_eq!(route_dsts(&both), ["10.96.0.0/12"], "{both:#}");
        // The addresses, which kubelet reads the pod IP from, stay.
        assert_eq!(v4["ips"][0]["address"], "10.88.0.5/24");
    }

    #[test]
    fn each_status_entry_lists_the_default_routes_its_attachment_holds() {
        let st = network_statuses(&record(None));
        assert_eq!(st[0].gateway, ["10.88.0.1", "fd00::1"]);
        assert_eq!(st[0].default_route.as_deref(), Some(&["10.88.0.1".to_owned(), "fd00::1".to_owned()][..]));
        assert!(st[1].gateway.is_empty() && st[1].default_route.is_none(), "{:?}", st[1]);

        let st = network_statuses(&record(Some(&["10.10.2.1"])));
        assert_eq!(st[0].gateway, ["fd00::1"], "the default network keeps its IPv6 default");
        assert_eq!(st[1].gateway, ["10.10.2.1"]);
        assert_eq!(st[1].default_route.as_deref(), Some(&["10.10.2.1".to_owned()][..]));
        assert_eq!(st[0].ips, ["10.88.0.5", "fd00::5"]);
    }
}
