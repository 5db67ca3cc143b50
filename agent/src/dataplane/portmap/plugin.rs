//! The `plexus-portmap` CNI plugin type: a drop-in replacement for the reference `portmap` in a
//! configlist, run inside the agent.
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "storage", "plugins": [
//!   {"type": "macvlan", "master": "eth1", "ipam": {...}},
//!   {"type": "plexus-portmap", "capabilities": {"portMappings": true}}]}
//! ```
//!
//! - ADD reads the pod's interface, MAC and addresses from prevResult and the mappings from
//!   `runtimeConfig.portMappings`, installs the map entries and attaches the programs, and
//!   passes prevResult through unchanged. Without mappings it does nothing.
//! - DEL removes every entry of the attachment, from the agent's record (no prevResult needed).
//! - CHECK verifies the entries and programs; GC removes mappings of attachments no longer
//!   valid; STATUS reports whether the dataplane is loaded.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::PortmapConf;
use super::entries::plan;
use super::store::Record;
use super::topology::{pod_side, resolve, Attachment, TopologyError};
use super::{netdev, Portmap, PortmapError};
use crate::cni::config::NetworkConfigList;
use crate::cni::result::CniResult;
use crate::cni::{Command, ErrorCode};
use crate::dataplane::chained::{off_workers, pod_name, valid_attachments};
use crate::delegate::native::{native_error, NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};

/// The CNI `type` of the plugin.
pub const TYPE: &str = "plexus-portmap";

pub struct PortmapPlugin {
    portmap: Arc<Portmap>,
}

impl PortmapPlugin {
    pub fn new(portmap: Arc<Portmap>) -> PortmapPlugin {
        PortmapPlugin { portmap }
    }
}

impl NativePlugin for PortmapPlugin {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        Box::pin(async move {
            let outcome = match call.command {
                Command::Add => self.add(&call).await,
                Command::Del => self.del(&call).await.map(|()| None),
                Command::Check => self.check(&call).await.map(|()| None),
                Command::Gc => self.gc(&call).await.map(|()| None),
                Command::Status => {
                    self.portmap.status().map(|()| None).map_err(|e| (ErrorCode::PluginNotAvailable, e))
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

fn code_of(code: ErrorCode, e: &PortmapError) -> ErrorCode {
    match code {
        ErrorCode::PluginNotAvailable => code,
        _ if e.is_config() => ErrorCode::InvalidNetworkConfig,
        _ => ErrorCode::Internal,
    }
}

type Outcome<T> = Result<T, (ErrorCode, PortmapError)>;

fn plain<T>(r: Result<T, PortmapError>) -> Outcome<T> {
    r.map_err(|e| (ErrorCode::InvalidNetworkConfig, e))
}

/// The record an ADD installs: the attachment's topology on the node and the entries of its
/// mappings. Public so that native plugins offering `portMappings` themselves can build one.
pub async fn plan_record(
    conf: &PortmapConf,
    prev: &CniResult,
    list: Option<&NetworkConfigList>,
    env: &InvocationEnv,
) -> Result<Record, PortmapError> {
    let pod = pod_side(prev, &env.ifname)?;
    let (node, default_route) = netdev::snapshot().await?;
    let attachment = Attachment {
        network: &conf.network,
        first_plugin: list.and_then(|l| l.plugins.first()),
        prev,
        ifname: &env.ifname,
        host_interface: conf.host_interface.as_deref(),
    };
    let topology = resolve(&attachment, &node, default_route)?;
    let entries = plan(&conf.network, &conf.mappings, &pod, &topology)?;
    Ok(Record {
        container_id: env.container_id.clone(),
        ifname: env.ifname.clone(),
        network: conf.network.clone(),
        pod: pod_name(&env.args),
        hooks: topology.hooks_for(&entries),
        entries,
    })
}

impl PortmapPlugin {
    async fn add(&self, call: &NativeCall<'_>) -> Outcome<Option<Value>> {
        let conf = plain(PortmapConf::parse(call.config).map_err(PortmapError::from))?;
        let Some(prev) = conf.prev_result.clone() else {
            if conf.mappings.is_empty() {
                return Ok(None);
            }
            return plain(Err(TopologyError::NoPrevResult.into()));
        };
        if conf.mappings.is_empty() {
            return Ok(Some(prev));
        }
        let parsed = plain(
            CniResult::parse(&prev, &conf.cni_version)
                .map_err(|e| PortmapError::from(TopologyError::BadPrevResult(e.to_string()))),
        )?;
        let started = std::time::Instant::now();
        let record = plain(plan_record(&conf, &parsed, call.list, call.env).await)?;
        let planned_us = started.elapsed().as_micros() as u64;
        let installed = record.entries.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        self.blocking(move |p| p.add(record)).await?;
        tracing::info!(
            took_us = started.elapsed().as_micros() as u64,
            planned_us,
            "port mappings installed: {installed}"
        );
        Ok(Some(prev))
    }

    async fn del(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let (cid, ifname) = (call.env.container_id.clone(), call.env.ifname.clone());
        self.blocking(move |p| p.del(&cid, &ifname)).await
    }

    async fn check(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let conf = plain(PortmapConf::parse(call.config).map_err(PortmapError::from))?;
        let (cid, ifname) = (call.env.container_id.clone(), call.env.ifname.clone());
        let expect_some = !conf.mappings.is_empty();
        self.blocking(move |p| p.check(&cid, &ifname, expect_some)).await
    }

    async fn gc(&self, call: &NativeCall<'_>) -> Outcome<()> {
        let conf = plain(PortmapConf::parse(call.config).map_err(PortmapError::from))?;
        let valid = valid_attachments(call.config);
        let network = conf.network;
        self.blocking(move |p| p.gc(&network, &valid)).await
    }

    /// Map updates and record writes are syscalls and fsyncs: off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Portmap) -> Result<T, PortmapError> + Send + 'static,
    ) -> Outcome<T> {
        off_workers(&self.portmap, f, |e| {
            PortmapError::Unavailable(format!("the port mapping task failed: {e}"))
        })
        .await
        .map_err(|e| (ErrorCode::InvalidNetworkConfig, e))
    }
}
