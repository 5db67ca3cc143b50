//! What every native type does the same way around its own work: a [`NativeCall`] run through
//! the type's verbs ([`NativeType`], [`invoke`]), its failure handed to the delegate layer (the
//! type's own error as the source, a delegate's error passed through as it came), the version
//! its result is printed in, and the pod it attaches, checked.

use std::future::Future;
use std::path::Path;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::cni::result::{is_supported_version, CniResult};
use crate::cni::{CniCode, Command, ErrorCode};
use crate::delegate::native::{unknown_command, CniFailure, NativeCall};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::netlink::{netns_exists, NamespaceError, Netlink};

/// A native type's verbs. [`invoke`] runs a call through them; STATUS and GC get no
/// environment (the runtime passes none).
pub trait NativeType: Send + Sync {
    /// The CNI `type` it answers to.
    const TYPE: &'static str;

    type Error: NativeFailure;

    /// ADD: the result, in the config's version.
    fn add(
        &self,
        config: &Value,
        env: &InvocationEnv,
    ) -> impl Future<Output = Result<Value, Self::Error>> + Send;

    fn del(
        &self,
        config: &Value,
        env: &InvocationEnv,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    fn check(
        &self,
        config: &Value,
        env: &InvocationEnv,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    fn status(&self, config: &Value) -> impl Future<Output = Result<(), Self::Error>> + Send;

    fn gc(&self, config: &Value) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// A native type's error: it knows its CNI code, and it may carry a delegate's error (IPAM's,
/// a reference binary's) that must reach the runtime as it came, with its plugin, code and
/// details.
pub trait NativeFailure: CniCode + Send + Sync + Sized + 'static {
    /// The delegate's error this carries; else the error itself.
    fn passed_through(self) -> Result<DelegateError, Self>;
}

/// Runs `call` through `plugin`'s verbs; a failure reaches the delegate layer as the plugin's
/// binary would have printed it.
pub fn invoke<'a, T: NativeType>(
    plugin: &'a T,
    call: NativeCall<'a>,
) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
    Box::pin(async move {
        let outcome = match call.command {
            Command::Add => plugin.add(call.config, call.env).await.map(Some),
            Command::Del => plugin.del(call.config, call.env).await.map(|()| None),
            Command::Check => plugin.check(call.config, call.env).await.map(|()| None),
            Command::Status => plugin.status(call.config).await.map(|()| None),
            Command::Gc => plugin.gc(call.config).await.map(|()| None),
            other => return Err(unknown_command(T::TYPE, other)),
        };
        outcome.map_err(|failure| match failure.passed_through() {
            Ok(delegated) => delegated,
            Err(own) => DelegateError::native(T::TYPE, call.command, own),
        })
    })
}

/// The version the result is printed in: the config's, when plexus can write it.
pub fn result_version(cni_version: &str) -> Result<String, CniFailure> {
    if !is_supported_version(cni_version) {
        return Err(CniFailure::new(
            ErrorCode::IncompatibleVersion,
            format!(
                "cniVersion {cni_version:?} is not supported; use one of {}",
                crate::cni::SUPPORTED_VERSIONS.join(", ")
            ),
        ));
    }
    Ok(cni_version.to_owned())
}

/// The result as the config's version writes it. 0.1.0 and 0.2.0 results consist of IP
/// addresses, so a layer-2 attachment cannot answer in them.
pub fn output(result: &CniResult, version: &str) -> Result<Value, CniFailure> {
    result.to_version(version).map_err(|e| {
        CniFailure::new(
            ErrorCode::IncompatibleVersion,
            format!("{e}; use cniVersion 0.3.0 or later for this network"),
        )
    })
}

/// The pod side of an invocation, checked.
#[derive(Debug, Clone, Copy)]
pub struct Pod<'a> {
    pub netns: &'a Path,
    pub ifname: &'a str,
}

/// The pod an ADD or CHECK works in: CNI_NETNS given and there, CNI_IFNAME a name the kernel
/// takes.
pub fn pod_of(env: &InvocationEnv) -> Result<Pod<'_>, CniFailure> {
    let invalid = |msg: String| CniFailure::new(ErrorCode::InvalidEnvironment, msg);
    if env.netns.is_empty() {
        return Err(invalid(
            "CNI_NETNS is missing: the runtime must pass the pod's network namespace".into(),
        ));
    }
    if !crate::spec::validate::is_kernel_ifname(&env.ifname) {
        return Err(invalid(format!(
            "CNI_IFNAME {:?} is not a valid interface name: 1 to 15 bytes, no '/', ':' or white space",
            env.ifname
        )));
    }
    let netns = Path::new(&env.netns);
    if !netns_exists(netns) {
        return Err(CniFailure::new(
            ErrorCode::ContainerUnknown,
            format!("network namespace {} does not exist (the pod's sandbox is gone)", env.netns),
        ));
    }
    Ok(Pod { netns, ifname: &env.ifname })
}

/// The pod's namespace a DEL cleans up in; `None` when there is nothing to clean: the runtime
/// passed no namespace or interface, or the sandbox is gone (its links went with it).
pub async fn pod_for_del(env: &InvocationEnv) -> Result<Option<Netlink>, NamespaceError> {
    let netns = Path::new(&env.netns);
    if env.netns.is_empty() || env.ifname.is_empty() || !netns_exists(netns) {
        return Ok(None);
    }
    Ok(Some(Netlink::pod(netns).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_versions_are_refused_with_code_1_naming_the_supported_ones() {
        let failure = result_version("0.5.0").unwrap_err();
        assert_eq!(failure.code.code(), 1);
        assert!(failure.msg.contains("1.1.0"), "{}", failure.msg);
        assert_eq!(result_version("1.0.0").unwrap(), "1.0.0");
    }

    #[test]
    fn a_pod_needs_a_namespace_that_is_there_and_a_kernel_interface_name() {
        let env = |netns: &str, ifname: &str| InvocationEnv {
            container_id: "c1".into(),
            netns: netns.into(),
            ifname: ifname.into(),
            args: String::new(),
        };
        let codes = [
            (env("", "net1"), 4, "CNI_NETNS is missing"),
            (env("/proc/self/ns/net", "a/b"), 4, "CNI_IFNAME \"a/b\" is not a valid interface name"),
            (env("/run/netns/plexus-no-such-pod", "net1"), 3, "does not exist"),
        ];
        for (env, code, words) in codes {
            let failure = pod_of(&env).unwrap_err();
            assert_eq!(failure.code.code(), code, "{failure}");
            assert!(failure.msg.contains(words), "{failure}");
        }
        let env = env("/proc/self/ns/net", "net1");
        let pod = pod_of(&env).unwrap();
        assert_eq!((pod.netns, pod.ifname), (Path::new("/proc/self/ns/net"), "net1"));
    }

    #[test]
    fn verbs_no_native_type_has_are_refused_with_code_4_naming_the_ones_it_has() {
        let failure = unknown_command("macvlan", Command::Version);
        assert_eq!(failure.cni_code().code(), 4);
        assert!(failure.to_string().contains("use ADD, DEL, CHECK, STATUS or GC"), "{failure}");
    }
}
