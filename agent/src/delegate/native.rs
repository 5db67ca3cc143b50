//! Plugins the agent runs in-process instead of exec'ing a binary.
//!
//! A native plugin honours the same contract as a CNI plugin binary (the plugin's config
//! JSON and the CNI variables in, a result or a CNI error out), so a configlist can mix
//! native and exec'd plugins, chain prevResult between them, and an operator can switch
//! native handling off per type and get the reference binary's behaviour back.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::env::InvocationEnv;
use super::exec::DelegateError;
use crate::cni::config::NetworkConfigList;
use crate::cni::{CniCode, Command, ErrorCode};

/// One invocation of a native plugin.
#[derive(Debug, Clone, Copy)]
pub struct NativeCall<'a> {
    /// ADD, DEL, CHECK, STATUS or GC.
    pub command: Command,
    /// The plugin's config exactly as a binary would read it on stdin.
    pub config: &'a Value,
    /// Empty for STATUS and GC.
    pub env: &'a InvocationEnv,
    /// The whole configlist the plugin runs in, when it runs in one: a chained plugin (such
    /// as plexus-portmap) learns from it what made the interface it works on.
    pub list: Option<&'a NetworkConfigList>,
}

pub trait NativePlugin: Send + Sync {
    /// Runs the command; `Ok(None)` for commands without output (DEL, CHECK, ...).
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>>;

    /// The runtimeConfig capabilities the plugin always honours, whether or not its config
    /// declares them: plexus's own implementation of a type knows what it supports, so a
    /// NetworkAttachmentDefinition written for the reference binary needs no change.
    fn capabilities(&self) -> &'static [&'static str] {
        &[]
    }
}

/// The native plugins by CNI `type`.
#[derive(Clone, Default)]
pub struct NativePlugins {
    by_type: BTreeMap<String, Arc<dyn NativePlugin>>,
}

impl NativePlugins {
    pub fn register(&mut self, plugin_type: &str, plugin: Arc<dyn NativePlugin>) {
        self.by_type.insert(plugin_type.to_owned(), plugin);
    }

    pub fn get(&self, plugin_type: &str) -> Option<&Arc<dyn NativePlugin>> {
        self.by_type.get(plugin_type)
    }

    pub fn types(&self) -> impl Iterator<Item = &str> {
        self.by_type.keys().map(String::as_str)
    }
}

impl std::fmt::Debug for NativePlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.types()).finish()
    }
}

/// A native plugin's CNI error of its own making: a code and a message, as a binary prints
/// them. Plugins whose failures have a type of their own give that to
/// [`DelegateError::native`] instead; this is for the ones that are only a code and words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct CniFailure {
    pub code: ErrorCode,
    pub msg: String,
}

impl CniFailure {
    pub fn new(code: ErrorCode, msg: impl Into<String>) -> CniFailure {
        CniFailure { code, msg: msg.into() }
    }
}

impl CniCode for CniFailure {
    fn cni_code(&self) -> ErrorCode {
        self.code
    }
}

/// A native plugin's [`CniFailure`] as the delegate layer reports it: the typed path,
/// [`DelegateError::native`], with the failure as its source.
pub fn native_error(
    plugin: &str,
    command: Command,
    code: ErrorCode,
    msg: impl Into<String>,
) -> DelegateError {
    DelegateError::native(plugin, command, CniFailure::new(code, msg))
}

/// A verb a native plugin does not have (VERSION is the shim's to answer): code 4, naming the
/// ones it has.
pub fn unknown_command(plugin: &str, command: Command) -> DelegateError {
    native_error(
        plugin,
        command,
        ErrorCode::InvalidEnvironment,
        format!("unknown CNI_COMMAND {:?}: use ADD, DEL, CHECK, STATUS or GC", command.as_str()),
    )
}
