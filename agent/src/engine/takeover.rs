//! DEL and GC of the containers Multus attached before plexus took the node over
//! ([`crate::takeover`]): each of Multus's delegates gets its DEL as Multus would have run it,
//! last first, with the config and the `prevResult` Multus recorded; the cache entry goes once
//! every DEL succeeded. While one fails the entry stays, and the runtime's next DEL (or GC, or
//! `plexus-agent doctor --fix`) runs them again: CNI DELs tolerate what is gone already. An
//! entry that cannot be read releases nothing and fails nothing: the DEL goes on as without one
//! (the default network's DEL), and doctor lists the file.

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::request::CniEnv;
use super::{blocking, invocation, Engine};
use crate::cni::{AttachmentKey, CniCode, CniError};
use crate::takeover::multus::{parse_delegates, prev_result, teardown, CachedDelegate};
use crate::takeover::MultusCache;

impl Engine {
    /// Runs the DELs of Multus's delegates of the container when Multus left a cache for it;
    /// false when it left none. `runtime_config` is the runtime's (kubelet's) of this DEL;
    /// `fallback_version` the version of a cached config without one (the request's, as
    /// Multus uses its own config's).
    pub(super) async fn del_from_multus_cache(
        &self,
        env: &CniEnv,
        runtime_config: &Map<String, Value>,
        fallback_version: &str,
    ) -> Result<bool, CniError> {
        let Some(cache) = self.multus.clone() else { return Ok(false) };
        let Some(delegates) = self.cached_delegates(&cache, &env.container_id, fallback_version).await?
        else {
            return Ok(false);
        };
        tracing::info!(
            container = %env.container_id, delegates = delegates.len(),
            "no record of the container, but Multus's cache lists its networks: running their DELs"
        );
        self.release_multus_delegates(cache, env, &delegates, runtime_config).await?;
        Ok(true)
    }

    /// The DELs of `delegates`, read from `cache` for `env`'s container; the cache entry goes
    /// once all succeeded.
    async fn release_multus_delegates(
        &self,
        cache: MultusCache,
        env: &CniEnv,
        delegates: &[CachedDelegate],
        runtime_config: &Map<String, Value>,
    ) -> Result<(), CniError> {
        let plan =
            teardown(delegates, &env.container_id, &env.ifname, runtime_config, &self.config.device_info_dir);
        let mut failures: Vec<CniError> = Vec::new();
        for t in plan {
            let (c, name) = (cache.clone(), t.result_cache.clone());
            let run = blocking(move || c.run(&name)).await?.map_err(|e| CniError::from_error(&e))?;
            let prev = run.as_ref().and_then(|r| prev_result(r, &t.delegate.list.cni_version));
            match self.delegator.del(&t.delegate, &invocation(env, &t.ifname), prev.as_ref()).await {
                Ok(()) => {
                    tracing::info!(network = %t.network, ifname = %t.ifname, "detached (Multus's attachment)");
                    let (c, file) = (cache.clone(), t.device_info_file.clone());
                    let forgotten = blocking(move || {
                        if let Some(file) = file {
                            crate::devinfo::file::remove(&file).map_err(|e| CniError::from_error(&e))?;
                        }
                        c.forget_run(&t.result_cache).map_err(|e| CniError::from_error(&e))
                    })
                    .await?;
                    if let Err(e) = forgotten {
                        failures.push(e);
                    }
                }
                Err(e) => failures.push(
                    CniError::new(
                        e.cni_code(),
                        format!("attachment {} on {} (attached by Multus): {e}", t.network, t.ifname),
                    )
                    .with_details(t.network.clone()),
                ),
            }
        }
        if failures.is_empty() {
            let (c, cid) = (cache, env.container_id.clone());
            return blocking(move || c.forget(&cid)).await?.map_err(|e| CniError::from_error(&e));
        }
        let first = failures.remove(0);
        let rest: Vec<String> = failures.into_iter().map(|f| f.msg).collect();
        let msg = [first.msg].into_iter().chain(rest).collect::<Vec<_>>().join("; ");
        Err(CniError {
            msg: format!(
                "plexus has no record of container {}; Multus's cache of it ({}) stays for the next DEL: {msg}",
                env.container_id,
                cache.delegates_file(&env.container_id).display()
            ),
            ..first
        })
    }

    async fn cached_delegates(
        &self,
        cache: &MultusCache,
        container_id: &str,
        fallback_version: &str,
    ) -> Result<Option<Vec<CachedDelegate>>, CniError> {
        let (c, cid) = (cache.clone(), container_id.to_owned());
        let Some(text) = blocking(move || c.delegates(&cid)).await?.map_err(|e| CniError::from_error(&e))?
        else {
            return Ok(None);
        };
        match parse_delegates(&text, fallback_version) {
            Ok(delegates) => Ok(Some(delegates)),
            Err(e) => {
                // Nothing can be released from it; failing would fail the runtime's DEL for good.
                // It stays for `plexus-agent doctor`, which lists it.
                tracing::warn!(
                    file = %cache.delegates_file(container_id).display(),
                    "Multus's cache of the container cannot be read, so its networks are not released \
                     (the default network's DEL runs as without a cache): {e}"
                );
                Ok(None)
            }
        }
    }

    /// GC (CNI 1.1): the containers of Multus's cache that no valid attachment names are torn
    /// down, each as the runtime's DEL would: on the interface and with the `CNI_ARGS` its
    /// default network's cached run recorded. Failures are added to `failures`.
    pub(super) async fn gc_multus_cache(
        &self,
        valid: &HashSet<AttachmentKey>,
        recorded: &HashSet<String>,
        fallback_version: &str,
        failures: &mut Vec<String>,
    ) {
        let Some(cache) = self.multus.clone() else { return };
        let c = cache.clone();
        let containers = match blocking(move || c.containers()).await {
            Ok(Ok(list)) => list,
            Ok(Err(e)) => return failures.push(format!("reading Multus's cache: {e}")),
            Err(e) => return failures.push(e.msg),
        };
        // plexus's own record wins: the runtime's DEL of it goes through the record.
        let stale = |cid: &String| !recorded.contains(cid) && !valid.iter().any(|k| &k.container_id == cid);
        for cid in containers.into_iter().filter(stale) {
            let _serialized = self.locks.lock(&cid).await;
            let released = match self.cached_delegates(&cache, &cid, fallback_version).await {
                Ok(Some(delegates)) => {
                    tracing::info!(container = %cid, "GC: removing the attachments of Multus's cache");
                    match self.multus_gc_env(&cache, &cid, &delegates).await {
                        Ok(env) => {
                            self.release_multus_delegates(cache.clone(), &env, &delegates, &Map::new()).await
                        }
                        Err(e) => Err(e),
                    }
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = released {
                failures.push(e.msg);
            }
        }
    }

    /// The runtime's DEL of a cached container, as far as Multus's cache tells it: the
    /// interface and `CNI_ARGS` of its default network's cached run (`eth0` and none without).
    async fn multus_gc_env(
        &self,
        cache: &MultusCache,
        container_id: &str,
        delegates: &[CachedDelegate],
    ) -> Result<CniEnv, CniError> {
        let (c, cid, name) = (cache.clone(), container_id.to_owned(), delegates[0].list.name.clone());
        let (ifname, args) = blocking(move || c.runtime_call(&cid, Some(&name)))
            .await?
            .map_err(|e| CniError::from_error(&e))?;
        Ok(CniEnv { container_id: container_id.to_owned(), netns: String::new(), ifname, args })
    }
}
