//! The `plexus-bandwidth` CNI plugin type: a drop-in replacement for the reference `bandwidth`
//! in a configlist, run inside the agent.
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "lan", "plugins": [
//!   {"type": "bridge", "bridge": "br1", "ipam": {...}},
//!   {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}]}
//! ```
//!
//! - ADD finds where the pod's traffic crosses the host from prevResult and the configlist's
//!   first plugin, installs the limits and attaches the programs, and passes prevResult through
//!   unchanged. Without limits it does nothing.
//! - DEL removes the attachment's limits from the agent's record (no prevResult needed).
//! - CHECK verifies limits and programs; GC removes limits of attachments no longer valid;
//!   STATUS reports whether the shaping object is loaded.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::BandwidthConf;
use super::plan::{entries, place, PlaceError};
use super::store::Record;
use super::{qdisc, Bandwidth, BandwidthError};
use crate::cni::result::CniResult;
use crate::cni::{Command, ErrorCode};
use crate::dataplane::chained::{off_workers, pod_name, valid_attachments};
use crate::dataplane::loader::Attach;
use crate::dataplane::portmap::netdev;
use crate::dataplane::portmap::topology::AttachPoint;
use crate::delegate::native::{native_error, NativeCall, NativePlugin};
use crate::delegate::DelegateError;

/// The CNI `type` of the plugin.
pub const TYPE: &str = "plexus-bandwidth";

pub struct BandwidthPlugin {
    bandwidth: Arc<Bandwidth>,
}

impl BandwidthPlugin {
    pub fn new(bandwidth: Arc<Bandwidth>) -> BandwidthPlugin {
        BandwidthPlugin { bandwidth }
    }
}

type Outcome<T> = Result<T, (ErrorCode, BandwidthError)>;

fn config<T>(r: Result<T, BandwidthError>) -> Outcome<T> {
    r.map_err(|e| (ErrorCode::InvalidNetworkConfig, e))
}

fn code_of(code: ErrorCode, e: &BandwidthError) -> ErrorCode {
    match code {
        ErrorCode::PluginNotAvailable => code,
        _ if e.is_config() => ErrorCode::InvalidNetworkConfig,
        _ => ErrorCode::Internal,
    }
}

impl NativePlugin for BandwidthPlugin {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        Box::pin(async move {
            let outcome = match call.command {
                Command::Add => self.add(&call).await,
                Command::Del => self.del(&call).await.map(|()| None),
                Command::Check => self.check(&call).await.map(|()| None),
                Command::Gc => self.gc(&call).await.map(|()| None),
                Command::Status => {
                    self.bandwidth.status().map(|()| None).map_err(|e| (ErrorCode::PluginNotAvailable, e))
                }
                other => {
                    return Err(native_error(
                        TYPE,
                        other,
                        ErrorCode::InvalidEnvironment,
                        format!(
                            "unknown CNI_COMMAND {:?}: use ADD, DEL, CHECK, STATUS or GC",
                            other.as_str()
                        ),
                    ))
                }
            };
            outcome.map_err(|(code, e)| native_error(TYPE, call.command, code_of(code, &e), e.to_string()))
        })
    }
}

impl BandwidthPlugin {
    async fn add(&self, call: &NativeCall<'_>) -> Outcome<Option<Value>> {
        let conf = config(BandwidthConf::parse(call.config).map_err(BandwidthError::from))?;
        let Some(prev) = conf.prev_result.clone() else {
            if conf.limits.is_empty() {
                return Ok(None);
            }
            return config(Err(PlaceError::NoPrevResult.into()));
        };
        if conf.limits.is_empty() {
            return Ok(Some(prev));
        }
        let parsed = config(
            CniResult::parse(&prev, &conf.cni_version)
                .map_err(|e| BandwidthError::from(PlaceError::BadPrevResult(e.to_string()))),
        )?;
        let started = std::time::Instant::now();
        let (node, default_route) = netdev::snapshot()
            .await
            .map_err(|e| (ErrorCode::InvalidNetworkConfig, BandwidthError::Netdev(e.to_string())))?;
        let first = call.list.and_then(|l| l.plugins.first());
        let at = config(
            place(&conf.network, first, &parsed, &call.env.ifname, &node, default_route)
                .map_err(BandwidthError::from),
        )?;
        let paces = qdisc::paces(at.device().0).await;
        let planned = entries(&at, &conf.limits, paces);
        let hooks: BTreeSet<AttachPoint> = planned
            .iter()
            .map(|e| AttachPoint {
                ifindex: e.ifindex,
                ifname: e.ifname.clone(),
                hook: e.hook,
                // A pod's own veth: a filter, cheap to attach; a master is shared: a TCX link.
                attach: if e.mac.is_none() { Attach::Filter } else { Attach::Tcx },
            })
            .collect();
        let record = Record {
            container_id: call.env.container_id.clone(),
            ifname: call.env.ifname.clone(),
            network: conf.network.clone(),
            pod: pod_name(&call.env.args),
            entries: planned,
            hooks: hooks.into_iter().collect(),
        };
        let installed = record.entries.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        self.blocking(move |b| b.add(record)).await?;
        tracing::info!(
            took_us = started.elapsed().as_micros() as u64,
            "bandwidth limits installed: {installed}"
        );
        Ok(Some(prev))
    }

    async fn del(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let (cid, ifname) = (call.env.container_id.clone(), call.env.ifname.clone());
        self.blocking(move |b| b.del(&cid, &ifname)).await
    }

    async fn check(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let conf = config(BandwidthConf::parse(call.config).map_err(BandwidthError::from))?;
        let (cid, ifname) = (call.env.container_id.clone(), call.env.ifname.clone());
        let expect_some = !conf.limits.is_empty();
        self.blocking(move |b| b.check(&cid, &ifname, expect_some)).await
    }

    async fn gc(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let conf = config(BandwidthConf::parse(call.config).map_err(BandwidthError::from))?;
        let valid = valid_attachments(call.config);
        let network = conf.network;
        self.blocking(move |b| b.gc(&network, &valid)).await
    }

    /// Map updates, attachments and record writes are syscalls and fsyncs: off the workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Bandwidth) -> Result<T, BandwidthError> + Send + 'static,
    ) -> Outcome<T> {
        off_workers(&self.bandwidth, f, |e| {
            BandwidthError::Unavailable(format!("the bandwidth task failed: {e}"))
        })
        .await
        .map_err(|e| (ErrorCode::InvalidNetworkConfig, e))
    }
}
