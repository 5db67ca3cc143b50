//! The dataplane's chained plugin types (`plexus-portmap`, `plexus-bandwidth`), written once:
//! a drop-in replacement for the reference plugin in a configlist, run inside the agent on a
//! [`Service`]. ADD plans the attachment's record from prevResult and the configlist (the
//! feature's part, [`Chained::plan`]), installs it and passes prevResult through unchanged;
//! without anything requested it does nothing. DEL removes the attachment's record (no
//! prevResult needed); CHECK verifies it; GC removes the records of attachments no longer
//! valid; STATUS reports whether the object is loaded.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::records::Record;
use super::service::{Feature, Service, ServiceError};
use super::DataplaneOptions;
use crate::cni::attachment::valid_attachments;
use crate::cni::result::{CniResult, ResultError};
use crate::cni::{AttachmentKey, CniCode, Command, ErrorCode};
use crate::delegate::native::{native_error, unknown_command, NativeCall, NativePlugin};
use crate::delegate::DelegateError;

/// What a feature adds to the lifecycle to be a chained plugin type.
pub trait Chained: Feature<Entry: std::fmt::Display> {
    /// The CNI `type`.
    const TYPE: &'static str;
    /// The plugin's config.
    type Conf: Send + Sync + 'static;
    type Error: std::error::Error
        + CniCode
        + From<ServiceError>
        + From<PrevResultError>
        + Send
        + Sync
        + 'static;

    fn parse(config: &Value) -> Result<Self::Conf, Self::Error>;
    fn chain(conf: &Self::Conf) -> &ChainArgs;
    /// Whether the config asks for anything (mappings, limits).
    fn requested(conf: &Self::Conf) -> bool;
    /// The record an ADD installs for the attachment of `call`, on a service started with
    /// `options`.
    fn plan<'a>(
        conf: &'a Self::Conf,
        prev: &'a CniResult,
        call: &'a NativeCall<'a>,
        options: &'a DataplaneOptions,
    ) -> BoxFuture<'a, Result<Record<Self::Entry>, Self::Error>>;
}

/// What every chained plugin's config carries besides its own keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ChainArgs {
    /// The network (configlist name).
    pub network: String,
    pub cni_version: String,
    /// The previous plugin's result, which a chained plugin works on.
    pub prev_result: Option<Value>,
}

impl ChainArgs {
    pub fn read(config: &Map<String, Value>) -> ChainArgs {
        let text = |key: &str| config.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        ChainArgs {
            network: text("name"),
            cni_version: text("cniVersion"),
            prev_result: config.get("prevResult").filter(|v| !v.is_null()).cloned(),
        }
    }
}

/// The previous plugin's result, which a chained plugin works on.
#[derive(Debug, thiserror::Error)]
pub enum PrevResultError {
    #[error("{plugin} must be chained after the plugin that creates the pod's interface (no prevResult)")]
    Missing { plugin: &'static str },
    #[error("{plugin} cannot read the previous plugin's result: {source}")]
    Unreadable {
        plugin: &'static str,
        #[source]
        source: ResultError,
    },
}

/// A chained plugin type on its service.
pub struct ChainedPlugin<D: Feature> {
    service: Arc<Service<D>>,
}

impl<D: Chained> ChainedPlugin<D> {
    pub fn new(service: Arc<Service<D>>) -> Self {
        ChainedPlugin { service }
    }

    async fn add(&self, call: &NativeCall<'_>) -> Result<Option<Value>, D::Error> {
        let conf = D::parse(call.config)?;
        let Some(prev) = D::chain(&conf).prev_result.clone() else {
            if !D::requested(&conf) {
                return Ok(None);
            }
            return Err(PrevResultError::Missing { plugin: D::TYPE }.into());
        };
        if !D::requested(&conf) {
            return Ok(Some(prev));
        }
        let parsed = CniResult::parse(&prev, &D::chain(&conf).cni_version)
            .map_err(|source| PrevResultError::Unreadable { plugin: D::TYPE, source })?;
        let started = Instant::now();
        let record = D::plan(&conf, &parsed, call, self.service.options()).await?;
        let planned_us = started.elapsed().as_micros() as u64;
        let installed = record.entries.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
        self.blocking(move |s| s.add(record)).await?;
        tracing::info!(
            took_us = started.elapsed().as_micros() as u64,
            planned_us,
            "{} installed: {installed}",
            D::WHAT
        );
        Ok(Some(prev))
    }

    async fn del(&self, call: &NativeCall<'_>) -> Result<(), D::Error> {
        let key = AttachmentKey::new(&call.env.container_id, &call.env.ifname);
        self.blocking(move |s| s.del(&key)).await
    }

    async fn check(&self, call: &NativeCall<'_>) -> Result<(), D::Error> {
        let expect_some = D::requested(&D::parse(call.config)?);
        let key = AttachmentKey::new(&call.env.container_id, &call.env.ifname);
        self.blocking(move |s| s.check(&key, expect_some)).await
    }

    async fn gc(&self, call: &NativeCall<'_>) -> Result<(), D::Error> {
        let network = D::chain(&D::parse(call.config)?).network.clone();
        let valid = valid_attachments(call.config);
        self.blocking(move |s| s.gc(&network, &valid)).await
    }

    /// Map updates, attachments and record writes are syscalls: off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Service<D>) -> Result<T, ServiceError> + Send + 'static,
    ) -> Result<T, D::Error> {
        let service = self.service.clone();
        match tokio::task::spawn_blocking(move || f(&service)).await {
            Ok(r) => Ok(r?),
            Err(source) => Err(ServiceError::Task { what: D::WHAT, source }.into()),
        }
    }
}

impl<D: Chained> NativePlugin for ChainedPlugin<D> {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        Box::pin(async move {
            let failed = |e: D::Error| DelegateError::native(D::TYPE, call.command, e);
            match call.command {
                Command::Add => self.add(&call).await.map_err(failed),
                Command::Del => self.del(&call).await.map(|()| None).map_err(failed),
                Command::Check => self.check(&call).await.map(|()| None).map_err(failed),
                Command::Gc => self.gc(&call).await.map(|()| None).map_err(failed),
                Command::Status => self.service.status().map(|()| None).map_err(|e| {
                    native_error(D::TYPE, call.command, ErrorCode::PluginNotAvailable, e.to_string())
                }),
                Command::Version => Err(unknown_command(D::TYPE, call.command)),
            }
        })
    }
}

/// `namespace/name` of the pod, from CNI_ARGS.
pub fn pod_name(args: &str) -> Option<String> {
    let get = |key: &str| {
        args.split(';')
            .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| v.to_owned()))
    };
    Some(format!("{}/{}", get("K8S_POD_NAMESPACE")?, get("K8S_POD_NAME")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_come_from_cni_args() {
        assert_eq!(
            pod_name("IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=web-0;K8S_POD_UID=x").as_deref(),
            Some("team/web-0")
        );
        assert_eq!(pod_name("IgnoreUnknown=1"), None);
    }
}
