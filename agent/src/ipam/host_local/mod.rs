//! The `host-local` IPAM type, in-process and interchangeable with the reference plugin
//! (containernetworking/plugins v1.1.1): same config, same allocation order, same files and
//! the same lock, so both can allocate from one range and dataDir, and each can release what
//! the other allocated.
//!
//! [`config`] reads the config, [`allocator`] decides, [`store`] does the file I/O (in
//! `spawn_blocking`) under the network's lock, held for the whole ADD, DEL or CHECK.

pub mod allocator;
pub mod config;
mod resolv;
pub mod store;

use std::time::{Duration, Instant};

use allocator::Owner;
pub use config::HostLocalConfig;
use store::{DiskStore, StoreError};

use super::claim::{self, ClaimRequest};
use super::IpamError;
use crate::cni::result::{CniResult, Dns};
use crate::delegate::InvocationEnv;

/// ADD: one address from each range set, or the requested ones; for an IPAMClaim, the
/// claim's (see [`allocator::allocate_for_claim`]).
pub async fn add(
    cfg: HostLocalConfig,
    env: &InvocationEnv,
    timeout: Duration,
    claim: Option<ClaimRequest>,
) -> Result<CniResult, IpamError> {
    let (id, ifname) = (env.container_id.clone(), env.ifname.clone());
    let deadline = Instant::now() + timeout;
    blocking(move || {
        let dns = match &cfg.resolv_conf {
            Some(path) => resolv::read(path)?,
            None => Dns::default(),
        };
        let mut store = DiskStore::open(&cfg.network_dir(), deadline).map_err(|e| store_error(e, timeout))?;
        let ips = match &claim {
            None => allocator::allocate(&mut store, &cfg.ranges, &cfg.requested, Owner::new(&id, &ifname))?,
            Some(claim) => {
                let owner_id = claim.owner_id();
                let owner = Owner::new(&owner_id, claim::OWNER_IFNAME);
                let named = format!("{}/{}", claim.namespace, claim.name);
                allocator::allocate_for_claim(&mut store, &cfg.ranges, &claim.addresses()?, owner, &named)?
            }
        };
        Ok(CniResult { cni_version: cfg.cni_version, interfaces: Vec::new(), ips, routes: cfg.routes, dns })
    })
    .await
}

/// Releases every address the IPAMClaim `namespace/name` holds in the network directory
/// `network_dir` (once the claim is gone); nothing to release is fine.
pub async fn release_claim(
    network_dir: std::path::PathBuf,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<(), IpamError> {
    let owner_id = claim::owner_id(namespace, name);
    let deadline = Instant::now() + timeout;
    blocking(move || {
        let Some(mut store) =
            DiskStore::open_existing(&network_dir, deadline).map_err(|e| store_error(e, timeout))?
        else {
            return Ok(());
        };
        allocator::release(&mut store, Owner::new(&owner_id, claim::OWNER_IFNAME))
            .map_err(|e| IpamError::io(format!("host-local: releasing in {}", network_dir.display()), e))
    })
    .await
}

/// DEL: releases every address of this container and interface; nothing to release is fine.
/// An IPAMClaim's addresses stay the claim's.
pub async fn del(
    cfg: HostLocalConfig,
    env: &InvocationEnv,
    timeout: Duration,
    claim: Option<ClaimRequest>,
) -> Result<(), IpamError> {
    if claim.is_some() {
        return Ok(());
    }
    let (id, ifname) = (env.container_id.clone(), env.ifname.clone());
    let deadline = Instant::now() + timeout;
    blocking(move || {
        let dir = cfg.network_dir();
        let Some(mut store) =
            DiskStore::open_existing(&dir, deadline).map_err(|e| store_error(e, timeout))?
        else {
            return Ok(());
        };
        allocator::release(&mut store, Owner::new(&id, &ifname))
            .map_err(|e| IpamError::io(format!("host-local: releasing in {}", dir.display()), e))
    })
    .await
}

/// CHECK: some address is recorded for this container and interface (for an IPAMClaim, for
/// the claim).
pub async fn check(
    cfg: HostLocalConfig,
    env: &InvocationEnv,
    timeout: Duration,
    claim: Option<ClaimRequest>,
) -> Result<(), IpamError> {
    let (id, ifname) = match &claim {
        Some(claim) => (claim.owner_id(), claim::OWNER_IFNAME.to_owned()),
        None => (env.container_id.clone(), env.ifname.clone()),
    };
    let deadline = Instant::now() + timeout;
    blocking(move || {
        let dir = cfg.network_dir();
        let found = match DiskStore::open_existing(&dir, deadline).map_err(|e| store_error(e, timeout))? {
            Some(store) => allocator::has_allocation(&store, Owner::new(&id, &ifname))
                .map_err(|e| IpamError::io(format!("host-local: reading {}", dir.display()), e))?,
            None => false,
        };
        if found {
            Ok(())
        } else {
            Err(IpamError::reference(format!("host-local: Failed to find address added by container {id}")))
        }
    })
    .await
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, IpamError> + Send + 'static,
) -> Result<T, IpamError> {
    tokio::task::spawn_blocking(work).await?
}

fn store_error(e: StoreError, timeout: Duration) -> IpamError {
    match e {
        StoreError::Busy(_) => IpamError::Locked { source: e, timeout },
        StoreError::Io { .. } => IpamError::Store(e),
    }
}
