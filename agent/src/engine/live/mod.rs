//! Live attachments, the engine's part: a running pod's recorded attachments brought to the
//! selection its annotation holds now (`crate::live` decides when). The same delegates, the
//! same durable record and the same network-status as ADD; serialized with the runtime's
//! ADD/DEL/CHECK of the container by its lock.
//!
//! Order: everything that can be refused first (the annotation, the plan, every network to
//! attach), so a refusal changes nothing; then the detaches; then the bandwidth changes in
//! place; then the additions, all or none. Each addition is recorded (`live_pending`) before
//! its ADD runs, so an agent that dies during it undoes it on start and tries again.

pub mod diff;

use std::time::Instant;

use serde_json::Value;

use self::diff::{diff, Addition, Existing, LiveChange};
use crate::catalog::{confdir, PodInfo};
use crate::cni::{CniError, ErrorCode};
use crate::dataplane::bandwidth::config::{limits as parse_limits, Limits};
use crate::devices::inject::inject_device_id;
use crate::devices::pod_devices::PodDevices;
use crate::spec::delegate_conf::{bandwidth_runtime_config, DelegateConfig};
use crate::spec::plan::{plan_attachments, PlannedAttachment};
use crate::spec::selection::{parse_selection, Bandwidth, NetworkSelection};
use crate::spec::NETWORKS_ANNOTATION;
use crate::state::{AttachmentRecord, ContainerRecord, FrontEnd, Sync};

use super::front_end::{NotAttachable, Selected};
use super::request::CniEnv;
use super::{attachment_error, blocking, invocation, plugin_type, Engine};
use crate::devinfo::attachment as device_info;

/// The pod annotation that lets a changed NetworkAttachmentDefinition re-attach the pod's
/// attachments of it (`"true"`); without it, a config change reaches new attachments only.
pub const REATTACH_ANNOTATION: &str = "plexus.dev/reattach-on-config-change";

/// The pod event of a live change that failed (the pod is left as it was).
pub const FAILED_EVENT: &str = "LiveAttachmentFailed";

/// What a live reconcile of one container did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveOutcome {
    /// "network on ifname", per attachment.
    pub attached: Vec<String>,
    pub detached: Vec<String>,
    /// Attachments whose bandwidth limit changed in place.
    pub limited: Vec<String>,
    /// Nothing was tried: the request that failed last, not due again yet.
    pub waiting: bool,
}

impl LiveOutcome {
    pub fn is_empty(&self) -> bool {
        self.attached.is_empty() && self.detached.is_empty() && self.limited.is_empty()
    }
}

/// A live change that failed: the error (told on the pod too), and the pod's request it was
/// for, so the same request is not retried at once.
#[derive(Debug)]
pub struct LiveFailure {
    pub error: CniError,
    /// [`request_of`] the pod; empty when the pod could not be read.
    pub request: String,
}

/// The request of a pod whose live change failed last time.
#[derive(Debug, Clone, Copy)]
pub struct LastFailure<'a> {
    /// [`request_of`] the pod then.
    pub request: &'a str,
    /// Whether to try the same request again now.
    pub due: bool,
}

/// The part of a pod that asks for its live attachments: the selection annotation and the
/// re-attach annotation. A change to either is a new request.
pub fn request_of(pod: &PodInfo) -> String {
    let get = |key: &str| pod.annotations.get(key).map(String::as_str).unwrap_or_default();
    format!("{}\n{}", get(NETWORKS_ANNOTATION), get(REATTACH_ANNOTATION))
}

/// Whether a record is one live attachments apply to: a completed ADD of the NPWG front-end
/// (the default network first) for a named pod.
pub fn is_live(record: &ContainerRecord) -> bool {
    record.complete
        && record.pod.is_some()
        && record.front_end == FrontEnd::Npwg
        && record.attachments.first().is_some_and(|a| a.is_default)
}

/// A secondary attachment of the record: its index there.
fn secondary(e: usize) -> usize {
    e + 1
}

fn described(a: &AttachmentRecord) -> String {
    format!("{} on {}", a.network, a.ifname)
}

/// The limits a selection's bandwidth asks for (rates of 0 ask for none).
fn limits_of(bw: Option<&Bandwidth>) -> Limits {
    let Some(bw) = bw else { return Limits::default() };
    match bandwidth_runtime_config(bw) {
        Value::Object(m) => parse_limits(&m, "").unwrap_or_default(),
        _ => Limits::default(),
    }
}

/// A bandwidth change can be made in place when the same directions stay limited: the
/// attachment's hooks are placed at ADD, per direction.
fn same_directions(was: &Limits, now: &Limits) -> bool {
    !now.is_empty()
        && was.ingress.is_some() == now.ingress.is_some()
        && was.egress.is_some() == now.egress.is_some()
}

impl Engine {
    /// Brings the container's recorded attachments to its pod's selection now. `last_failure`:
    /// the pod's request whose change failed last: the same request is left alone unless it is
    /// due to be tried again, and failing again it records no second event.
    pub async fn apply_live(
        &self,
        container_id: &str,
        ifname: &str,
        last_failure: Option<LastFailure<'_>>,
    ) -> Result<LiveOutcome, LiveFailure> {
        let _serialized = self.locks.lock(container_id).await;
        let fail = |error: CniError| LiveFailure { error, request: String::new() };
        let Some(mut record) = self.state.load(container_id, ifname).await.map_err(|e| fail(e.into()))?
        else {
            return Ok(LiveOutcome::default());
        };
        let Some(pod_ref) = record.pod.clone().filter(|_| is_live(&record)) else {
            return Ok(LiveOutcome::default());
        };
        let pod = match self.catalog.pod(&pod_ref.namespace, &pod_ref.name).await {
            Ok(Some(pod)) => pod,
            // Gone: the runtime's DEL follows.
            Ok(None) => return Ok(LiveOutcome::default()),
            Err(e) => return Err(fail(CniError::from_error(&e))),
        };
        if pod_ref.uid.is_some() && pod.uid.is_some() && pod_ref.uid != pod.uid {
            // Another pod of that name: this container's DEL follows.
            return Ok(LiveOutcome::default());
        }
        let request = request_of(&pod);
        let repeated = last_failure.filter(|f| f.request == request);
        if repeated.is_some_and(|f| !f.due) {
            return Ok(LiveOutcome { waiting: true, ..LiveOutcome::default() });
        }
        let env = CniEnv {
            container_id: record.container_id.clone(),
            netns: record.netns.clone(),
            ifname: record.ifname.clone(),
            args: record.cni_args.clone(),
        };
        let mut outcome = LiveOutcome::default();
        let changed = self.live_change(&pod, &env, &mut record, &mut outcome).await;
        if !outcome.is_empty() {
            tracing::info!(
                pod = %format!("{}/{}", pod.namespace, pod.name),
                attached = ?outcome.attached, detached = ?outcome.detached, limited = ?outcome.limited,
                "live attachments changed"
            );
            self.publish_status(Some(&pod), &record).await;
        }
        match changed {
            Ok(()) => Ok(outcome),
            Err(error) => {
                tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), "live attachment change failed: {}", error.msg);
                if repeated.is_none() {
                    self.catalog.record_event(&pod, FAILED_EVENT, &error.msg).await;
                }
                Err(LiveFailure { error, request })
            }
        }
    }

    /// Makes the change, recording each step in `record` (saved) and `outcome`.
    async fn live_change(
        &self,
        pod: &PodInfo,
        env: &CniEnv,
        record: &mut ContainerRecord,
        outcome: &mut LiveOutcome,
    ) -> Result<(), CniError> {
        self.undo_interrupted(env, record, outcome).await?;
        if let Some(a) = record.attachments.iter().skip(1).find(|a| a.selection.is_none()) {
            tracing::debug!(network = %a.network, "attached before live attachments existed: left as it is");
            return Ok(());
        }
        let selections = match pod.annotations.get(NETWORKS_ANNOTATION) {
            Some(text) => parse_selection(text).map_err(|e| {
                CniError::from_error(&e).with_details(format!("pod {}/{}", pod.namespace, pod.name))
            })?,
            None => Vec::new(),
        };
        // Refused as a new pod's ADD would be (namespaces, names asked twice, MACs).
        plan_attachments(&pod.namespace, &record.ifname, &selections, &self.config.allowed_namespaces)
            .map_err(|e| CniError::from_error(&e))?;
        let existing: Vec<Existing<'_>> = record.attachments[1..]
            .iter()
            .filter_map(|a| a.selection.as_ref().map(|selection| Existing { ifname: &a.ifname, selection }))
            .collect();
        let mut change = diff(&pod.namespace, &record.ifname, &existing, &selections)
            .map_err(|e| CniError::from_error(&e))?;
        let dirs = self.config.network_conf_dirs.clone();
        let on_disk = blocking(move || confdir::on_disk_configs(&dirs)).await?;
        if pod.annotations.get(REATTACH_ANNOTATION).is_some_and(|v| v == "true") {
            for (e, d) in change.kept.clone() {
                let a = &record.attachments[secondary(e)];
                if let Ok(now) = self.current_config(pod, a, &selections[d], &on_disk).await {
                    if now != a.delegate.list {
                        tracing::info!(network = %a.network, ifname = %a.ifname, "network config changed: re-attaching");
                        change.reattach(e, &a.ifname.clone(), &selections[d]);
                    }
                }
            }
        }
        if change.is_empty() {
            return Ok(());
        }
        self.refuse_default_route_changes(record, &change)?;
        // Every network to attach, resolved before anything changes. A bandwidth change that
        // cannot be made in place is a re-attach, so those are resolved too.
        // The devices the pod's attachments hold now are never handed out again (a re-attach
        // of a device resource's attachment takes another free device of the pod's).
        let held: Vec<_> = record.attachments.iter().filter_map(|a| a.device.clone()).collect();
        let mut devices = self.pod_devices(Some(pod)).holding(&held);
        let mut additions = Vec::with_capacity(change.attach.len());
        for a in &change.attach {
            additions.push((
                a.clone(),
                self.live_delegate(pod, &a.ifname, &a.selection, &on_disk, &mut devices).await?,
            ));
        }
        let mut in_place = Vec::new();
        for (e, selection) in &change.bandwidth {
            let a = &record.attachments[secondary(*e)];
            let was = limits_of(a.selection.as_ref().and_then(|s| s.bandwidth.as_ref()));
            let now = limits_of(selection.bandwidth.as_ref());
            if same_directions(&was, &now) {
                in_place.push((a.ifname.clone(), selection.clone(), now));
            } else {
                change.detach.push(*e);
                let delegate = self.live_delegate(pod, &a.ifname, selection, &on_disk, &mut devices).await?;
                let addition = Addition { selection: selection.clone(), ifname: a.ifname.clone() };
                additions.push((addition, delegate));
            }
        }
        change.detach.sort_unstable();
        // Attachments detached to be attached again (changed parameters or config): put back
        // as they were if the change fails.
        let mut replaced: Vec<AttachmentRecord> = change
            .detach
            .iter()
            .map(|e| &record.attachments[secondary(*e)])
            .filter(|a| additions.iter().any(|(addition, _)| addition.ifname == a.ifname))
            .cloned()
            .collect();
        self.live_detach(env, record, &change.detach, outcome).await?;
        // Indices moved with the detaches: the bandwidth changes find theirs by interface.
        for (ifname, selection, limits) in in_place {
            match self.set_limits(env, record, &ifname, selection.clone(), &limits).await {
                Ok(()) => outcome.limited.push(ifname),
                Err(e) => {
                    tracing::info!(ifname = %ifname, "bandwidth cannot change in place ({}): re-attaching", e.msg);
                    let Some(i) = record.attachments.iter().skip(1).position(|a| a.ifname == ifname) else {
                        continue;
                    };
                    let delegate =
                        self.live_delegate(pod, &ifname, &selection, &on_disk, &mut devices).await?;
                    replaced.push(record.attachments[secondary(i)].clone());
                    self.live_detach(env, record, &[i], outcome).await?;
                    additions.push((Addition { selection, ifname }, delegate));
                }
            }
        }
        let attached = self.live_attach(pod, env, record, additions, outcome).await;
        if attached.is_err() && !replaced.is_empty() {
            self.restore_replaced(env, record, replaced, outcome).await;
        }
        attached
    }

    /// After a failed change, attaches again what it detached to re-attach, with the configs
    /// they had (best effort: what cannot be restored is logged, and the next look retries the
    /// pod's request).
    async fn restore_replaced(
        &self,
        env: &CniEnv,
        record: &mut ContainerRecord,
        replaced: Vec<AttachmentRecord>,
        outcome: &mut LiveOutcome,
    ) {
        for mut a in replaced {
            a.result = None;
            a.live_pending = true;
            record.attachments.push(a);
            let i = record.attachments.len() - 1;
            if let Err(e) = self.state.save(record, Sync::Durable).await {
                tracing::warn!("recording the restore of a replaced attachment: {e}");
            }
            let a = &record.attachments[i];
            match self.delegator.add(&a.delegate, &invocation(env, &a.ifname)).await {
                Ok(result) => {
                    tracing::info!(network = %a.network, ifname = %a.ifname, "restored after the failed change");
                    outcome.detached.retain(|d| *d != described(a));
                    record.attachments[i].result = result;
                    record.attachments[i].live_pending = false;
                }
                Err(e) => {
                    tracing::warn!(network = %a.network, ifname = %a.ifname, "restoring after the failed change: {e}");
                    if let Err(e) = self.delegator.del(&a.delegate, &invocation(env, &a.ifname), None).await {
                        tracing::warn!(network = %a.network, "undoing the failed restore: {e}");
                    }
                    record.attachments.truncate(i);
                }
            }
            if let Err(e) = self.state.save(record, Sync::Durable).await {
                tracing::warn!("recording the restore of a replaced attachment: {e}");
            }
        }
    }

    /// A selection attached live, resolved as ADD resolves it: its delegate, the device of the
    /// pod's it takes (`devices`), and its IPAMClaim.
    async fn live_delegate(
        &self,
        pod: &PodInfo,
        ifname: &str,
        selection: &NetworkSelection,
        on_disk: &[crate::spec::resolve::OnDiskConfig],
        devices: &mut PodDevices<'_>,
    ) -> Result<Resolved, CniError> {
        let planned = planned(pod, ifname, selection);
        let fix = format!("remove the selection from the pod's {NETWORKS_ANNOTATION} annotation");
        let Selected { mut delegate, device, device_info } =
            self.selected_delegate(&planned, on_disk, &fix, devices).await.map_err(refusal)?;
        let ipam_claim = self.claim_for(pod, &planned, &mut delegate).await.map_err(refusal)?;
        Ok(Resolved { delegate, device, device_info, ipam_claim })
    }

    /// The config a kept attachment would be attached with now (its device the same), to tell
    /// whether its NetworkAttachmentDefinition changed.
    async fn current_config(
        &self,
        pod: &PodInfo,
        attachment: &AttachmentRecord,
        selection: &NetworkSelection,
        on_disk: &[crate::spec::resolve::OnDiskConfig],
    ) -> Result<crate::cni::config::NetworkConfigList, CniError> {
        let planned = planned(pod, &attachment.ifname, selection);
        let fix = format!("remove the selection from the pod's {NETWORKS_ANNOTATION} annotation");
        let mut devices = self.pod_devices(Some(pod));
        let Selected { mut delegate, .. } =
            self.selected_delegate(&planned, on_disk, &fix, &mut devices).await.map_err(refusal)?;
        if let Some(device) = &attachment.device {
            inject_device_id(&mut delegate, &device.device_id);
        }
        Ok(delegate.list)
    }

    /// The pod's default routes were set at ADD from the selections of then: a live change
    /// cannot move them.
    fn refuse_default_route_changes(
        &self,
        record: &ContainerRecord,
        change: &LiveChange,
    ) -> Result<(), CniError> {
        let detached_holder = change
            .detach
            .iter()
            .map(|e| &record.attachments[secondary(*e)])
            .find(|a| a.default_route.is_some());
        let attached_holder = change.attach.iter().find(|a| a.selection.default_route.is_some());
        let network = match (detached_holder, attached_holder) {
            (Some(a), _) => a.network.clone(),
            (None, Some(a)) => a.selection.name.clone(),
            (None, None) => return Ok(()),
        };
        Err(CniError::invalid_config(format!(
            "the selection of network {network} has \"default-route\": the pod's default routes are set when it \
             starts and cannot move while it runs; re-create the pod to change them"
        )))
    }

    /// Live additions whose ADD never answered (the agent died): undone, so the change is
    /// made again from the start.
    async fn undo_interrupted(
        &self,
        env: &CniEnv,
        record: &mut ContainerRecord,
        outcome: &mut LiveOutcome,
    ) -> Result<(), CniError> {
        let interrupted: Vec<usize> =
            (1..record.attachments.len()).filter(|i| record.attachments[*i].live_pending).collect();
        if interrupted.is_empty() {
            return Ok(());
        }
        tracing::info!("undoing live attachments an earlier agent did not finish");
        let before = outcome.detached.len();
        let indices: Vec<usize> = interrupted.iter().map(|i| i - 1).collect();
        self.live_detach(env, record, &indices, outcome).await?;
        // Never attached as far as the pod is concerned.
        outcome.detached.truncate(before);
        Ok(())
    }

    /// Detaches secondary attachments `indices` (into the secondaries, ascending), newest
    /// first; each leaves the record once its DEL succeeded. A failed DEL keeps it recorded
    /// and stops the change.
    async fn live_detach(
        &self,
        env: &CniEnv,
        record: &mut ContainerRecord,
        indices: &[usize],
        outcome: &mut LiveOutcome,
    ) -> Result<(), CniError> {
        for e in indices.iter().rev() {
            let a = &record.attachments[secondary(*e)];
            self.delegator
                .del(&a.delegate, &invocation(env, &a.ifname), a.result.as_ref())
                .await
                .map_err(|err| attachment_error(&a.network, &err))?;
            tracing::info!(network = %a.network, ifname = %a.ifname, "detached live");
            device_info::remove(a, &self.device_info_file(&record.container_id, &a.ifname)).await;
            self.let_go_of_claim(&record.container_id, a).await;
            outcome.detached.push(described(a));
            record.attachments.remove(secondary(*e));
            self.state.save(record, Sync::Durable).await?;
        }
        Ok(())
    }

    /// Changes the bandwidth limit of the attachment on `ifname` in place, then its record.
    async fn set_limits(
        &self,
        env: &CniEnv,
        record: &mut ContainerRecord,
        ifname: &str,
        selection: NetworkSelection,
        limits: &Limits,
    ) -> Result<(), CniError> {
        let Some(service) = &self.bandwidth else {
            return Err(CniError::invalid_config("the agent runs no bandwidth dataplane"));
        };
        let key = crate::cni::AttachmentKey::new(&env.container_id, ifname);
        service.set_limits(&key, limits).map_err(|e| CniError::from_error(&e))?;
        if let Some(a) = record.attachments.iter_mut().find(|a| a.ifname == ifname) {
            if let Some(bw) = &selection.bandwidth {
                a.delegate.runtime_config.insert("bandwidth".into(), bandwidth_runtime_config(bw));
            }
            a.selection = Some(selection);
        }
        Ok(self.state.save(record, Sync::Durable).await?)
    }

    /// Attaches `additions` in order, all or none: a failure undoes this change's additions.
    async fn live_attach(
        &self,
        pod: &PodInfo,
        env: &CniEnv,
        record: &mut ContainerRecord,
        additions: Vec<(Addition, Resolved)>,
        outcome: &mut LiveOutcome,
    ) -> Result<(), CniError> {
        let first = record.attachments.len();
        for (addition, resolved) in additions {
            let network =
                format!("{}/{}", addition.selection.namespace_or(&pod.namespace), addition.selection.name);
            let mut attachment = AttachmentRecord {
                network: network.clone(),
                is_default: false,
                ifname: addition.ifname.clone(),
                delegate: resolved.delegate,
                result: None,
                default_route: None,
                pod_network: None,
                device: resolved.device,
                device_info: resolved.device_info,
                ipam_claim: resolved.ipam_claim,
                selection: Some(addition.selection),
                live_pending: true,
            };
            let file = self.device_info_file(&record.container_id, &attachment.ifname);
            device_info::offer(&mut attachment, &file);
            record.attachments.push(attachment);
            self.state.save(record, Sync::Durable).await?;
            let i = record.attachments.len() - 1;
            let a = &record.attachments[i];
            tracing::info!(network = %a.network, ifname = %a.ifname, "attaching live");
            let started = Instant::now();
            let added = match self.before_live_add(record, i, &file).await {
                Ok(()) => self.delegator.add(&a.delegate, &invocation(env, &a.ifname)).await,
                Err(refused) => {
                    record.attachments.truncate(i);
                    self.state.save(record, Sync::Durable).await?;
                    let earlier: Vec<usize> = (first..i).map(|j| j - 1).collect();
                    let mut undone = LiveOutcome::default();
                    self.live_detach(env, record, &earlier, &mut undone).await?;
                    outcome.attached.truncate(outcome.attached.len() - (i - first));
                    return Err(refused);
                }
            };
            crate::metrics::metrics().attachment(
                &a.network,
                plugin_type(&a.delegate),
                added.is_ok(),
                started.elapsed(),
            );
            match added {
                Ok(result) => {
                    record.attachments[i].result = result;
                    record.attachments[i].live_pending = false;
                    device_info::after_add(&mut record.attachments[i], &file).await;
                    let parsed = super::parsed_result(&record.attachments[i]);
                    if let Err(e) = self.fill_claim(&record.attachments[i], parsed.as_ref()).await {
                        tracing::warn!(network = %network, "writing the IPAMClaim's addresses: {}", e.msg);
                    }
                    self.state.save(record, Sync::Durable).await?;
                }
                Err(e) => {
                    let err = attachment_error(&a.network, &e);
                    let (failed, failed_env) = (a.clone(), invocation(env, &a.ifname));
                    if let Err(e) = self.delegator.del(&failed.delegate, &failed_env, None).await {
                        tracing::warn!(network = %failed.network, "undoing the failed live attachment: {e}");
                    }
                    device_info::remove(&failed, &file).await;
                    self.let_go_of_claim(&record.container_id, &failed).await;
                    record.attachments.truncate(i);
                    // This change's earlier additions go too.
                    let earlier: Vec<usize> = (first..i).map(|j| j - 1).collect();
                    let mut undone = LiveOutcome::default();
                    if let Err(undo) = self.live_detach(env, record, &earlier, &mut undone).await {
                        self.state.save(record, Sync::Durable).await?;
                        return Err(CniError {
                            msg: format!("{}; undoing this change also failed: {}", err.msg, undo.msg),
                            ..err
                        });
                    }
                    self.state.save(record, Sync::Durable).await?;
                    outcome.attached.truncate(outcome.attached.len() - (i - first));
                    return Err(err);
                }
            }
            outcome.attached.push(described(&record.attachments[i]));
        }
        Ok(())
    }
}

/// A selection attached live, resolved before anything changes.
pub(super) struct Resolved {
    delegate: DelegateConfig,
    device: Option<crate::state::AllocatedDevice>,
    device_info: Option<Value>,
    ipam_claim: Option<crate::state::ClaimUse>,
}

/// A selection's planned attachment on `ifname` of `pod`, as ADD plans it.
fn planned(pod: &PodInfo, ifname: &str, selection: &NetworkSelection) -> PlannedAttachment {
    PlannedAttachment {
        selection: selection.clone(),
        namespace: selection.namespace_or(&pod.namespace).to_owned(),
        name: selection.name.clone(),
        ifname: ifname.to_owned(),
    }
}

/// A network that cannot be attached, as the live change's error.
fn refusal(e: NotAttachable) -> CniError {
    match e {
        NotAttachable::Refused(e) | NotAttachable::Failed(e) => e,
    }
}

impl Engine {
    /// Before a live addition's ADD, as before an ADD's: its device information written for
    /// its plugins, and its IPAMClaim taken (refused while another pod holds it).
    async fn before_live_add(
        &self,
        record: &ContainerRecord,
        i: usize,
        file: &std::path::Path,
    ) -> Result<(), CniError> {
        device_info::before_add(&record.attachments[i], file).await?;
        self.take_claim(record, i).await.map_err(|e| {
            if e.code == ErrorCode::InvalidNetworkConfig {
                CniError { msg: format!("{} (live change)", e.msg), ..e }
            } else {
                e
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::bandwidth::config::Limit;

    fn bw(ingress: Option<u64>, egress: Option<u64>) -> Bandwidth {
        Bandwidth { ingress_rate: ingress, ingress_burst: None, egress_rate: egress, egress_burst: None }
    }

    #[test]
    fn limits_follow_the_selection_and_a_zero_rate_is_none() {
        assert!(limits_of(None).is_empty());
        let l = limits_of(Some(&bw(Some(1_000_000), None)));
        assert_eq!(l.ingress.map(|l: Limit| l.rate_bps), Some(1_000_000));
        assert!(l.ingress.is_some_and(|l| l.burst_bits.is_some()), "a default burst");
        assert!(l.egress.is_none());
        assert!(limits_of(Some(&bw(Some(0), Some(0)))).is_empty());
    }

    #[test]
    fn in_place_only_with_the_same_directions_limited() {
        let both = limits_of(Some(&bw(Some(1_000_000), Some(1_000_000))));
        let faster = limits_of(Some(&bw(Some(5_000_000), Some(2_000_000))));
        let ingress = limits_of(Some(&bw(Some(1_000_000), None)));
        assert!(same_directions(&both, &faster));
        assert!(!same_directions(&both, &ingress), "a direction removed");
        assert!(!same_directions(&ingress, &both), "a direction added");
        assert!(!same_directions(&both, &Limits::default()), "every limit removed");
    }

    #[test]
    fn the_request_is_the_selection_and_the_reattach_annotation() {
        let mut pod = PodInfo { namespace: "ns".into(), name: "p".into(), ..PodInfo::default() };
        let empty = request_of(&pod);
        pod.annotations.insert("other".into(), "x".into());
        assert_eq!(request_of(&pod), empty, "other annotations are not the request");
        pod.annotations.insert(NETWORKS_ANNOTATION.into(), "blue".into());
        let blue = request_of(&pod);
        assert_ne!(blue, empty);
        pod.annotations.insert(REATTACH_ANNOTATION.into(), "true".into());
        assert_ne!(request_of(&pod), blue);
    }

    #[test]
    fn only_completed_npwg_records_of_a_pod_are_live() {
        let mut record = crate::engine::tests::record_for_live();
        assert!(is_live(&record));
        record.complete = false;
        assert!(!is_live(&record), "an ADD still running");
        record.complete = true;
        record.front_end = FrontEnd::PodNetworks;
        assert!(!is_live(&record), "PodNetworks are immutable");
        record.front_end = FrontEnd::Sandbox;
        assert!(!is_live(&record), "the runtime's list");
        record.front_end = FrontEnd::Npwg;
        record.pod = None;
        assert!(!is_live(&record), "no pod to read the selection of");
    }
}
