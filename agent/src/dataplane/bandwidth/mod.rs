//! Bandwidth limits (NPWG 4.1.2.1.8) of secondary attachments, in eBPF instead of tbf and ifb.
//!
//! The programs of `ebpf/programs/src/bandwidth` run on the host-side hooks of the attachment
//! (see [`plan`]) and enforce each limit with a token bucket (or EDT pacing where the device has
//! an fq qdisc), with the state in a map: an ADD is a netlink dump, two map updates and at most
//! two TCX attachments; a limit changes in place, without re-creating the pod.
//!
//! - [`config`]: the plugin's config and `runtimeConfig.bandwidth`;
//! - [`plan`]: where limits go and the bucket arithmetic's parameters (pure);
//! - [`shaper`]: the BPF object; [`table`]: its maps; [`store`]: durable records;
//! - [`plugin`]: the `plexus-bandwidth` CNI plugin type; [`list`]: `plexus-agent bandwidth`.
//!
//! The lifecycle (ADD, DEL, CHECK, GC, STATUS, the start) is the dataplane's one
//! ([`crate::dataplane::service`]), with [`shaper::Shaper`] as its feature; changing limits in
//! place ([`update_in_place`], `plexus-agent bandwidth set`) is the shaper's own.

pub mod config;
pub mod list;
pub mod plan;
pub mod plugin;
pub mod shaper;
pub mod store;
pub mod table;

#[cfg(test)]
mod kernel_tests;

use config::Limits;
use plan::Direction;
use shaper::Shaper;
use store::{Record, Store};
use table::{Table, TableError};

use crate::cni::{AttachmentKey, CniCode, ErrorCode};
use crate::dataplane::chained::PrevResultError;
use crate::dataplane::netdev::NetdevError;
use crate::dataplane::records::StoreError;
use crate::dataplane::service::{Service, ServiceError};

/// The bandwidth service of the agent (see [`crate::dataplane::service`]).
pub type Bandwidth = Service<Shaper>;

#[derive(Debug, thiserror::Error)]
pub enum BandwidthError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    PrevResult(#[from] PrevResultError),
    #[error(transparent)]
    Place(#[from] plan::PlaceError),
    #[error(transparent)]
    Netdev(#[from] NetdevError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("{attachment} has no bandwidth limits recorded")]
    NotFound { attachment: AttachmentKey },
    #[error(
        "{attachment} has no {direction} limit to change; a new direction needs the attachment re-created (its \
         hooks are attached at ADD)"
    )]
    NoSuchDirection { attachment: AttachmentKey, direction: &'static str },
}

impl CniCode for BandwidthError {
    /// The config and the pod's request are the user's to fix (CNI code 7); the rest is the
    /// node's (999, "internal").
    fn cni_code(&self) -> ErrorCode {
        match self {
            BandwidthError::Config(_) | BandwidthError::PrevResult(_) | BandwidthError::Place(_) => {
                ErrorCode::InvalidNetworkConfig
            }
            BandwidthError::Service(e) => e.cni_code(),
            BandwidthError::Netdev(_)
            | BandwidthError::Table(_)
            | BandwidthError::Store(_)
            | BandwidthError::NotFound { .. }
            | BandwidthError::NoSuchDirection { .. } => ErrorCode::Internal,
        }
    }
}

/// Rewrites the limits of an attachment's existing directions (map first: the record must not
/// claim a limit the programs do not enforce), with fresh buckets.
pub fn update_in_place(
    table: &mut Table,
    store: &Store,
    key: &AttachmentKey,
    limits: &Limits,
) -> Result<Record, BandwidthError> {
    let mut record = store.load(key)?.ok_or_else(|| BandwidthError::NotFound { attachment: key.clone() })?;
    for (direction, limit) in [(Direction::Ingress, limits.ingress), (Direction::Egress, limits.egress)] {
        let Some(limit) = limit else { continue };
        let Some(entry) = record.entries.iter_mut().find(|e| e.direction == direction) else {
            return Err(BandwidthError::NoSuchDirection {
                attachment: key.clone(),
                direction: direction.as_str(),
            });
        };
        let updated = entry.with_limit(limit);
        table.install(&updated)?;
        *entry = updated;
    }
    store.save(&record)?;
    Ok(record)
}

impl Bandwidth {
    /// Changes the limits of a recorded attachment in place ([`update_in_place`] on the running
    /// agent's own table and records). Only the directions it already limits can change.
    pub fn set_limits(&self, key: &AttachmentKey, limits: &Limits) -> Result<(), BandwidthError> {
        let changed = self.change_entries(key, |shaper, record| -> Result<(), BandwidthError> {
            for (direction, limit) in
                [(Direction::Ingress, limits.ingress), (Direction::Egress, limits.egress)]
            {
                let Some(limit) = limit else { continue };
                let Some(entry) = record.entries.iter_mut().find(|e| e.direction == direction) else {
                    return Err(BandwidthError::NoSuchDirection {
                        attachment: key.clone(),
                        direction: direction.as_str(),
                    });
                };
                let updated = entry.with_limit(limit);
                shaper.table.install(&updated)?;
                *entry = updated;
            }
            Ok(())
        })?;
        if changed {
            Ok(())
        } else {
            Err(BandwidthError::NotFound { attachment: key.clone() })
        }
    }
}
