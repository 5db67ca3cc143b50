//! `plexus-agent doctor [--fix]`: what the node holds that no record explains, and with `--fix`
//! its removal.
//!
//! - [`find`] (pure): snapshots of the records and of the node in, leftovers out;
//! - [`liveness`] (pure): whether a container no record lists is alive, by the runtime's list
//!   of sandboxes or by its network namespaces;
//! - [`gather`]: reads the snapshot through the layers that write it (state store, dataplane
//!   records and pinned maps, host-local store, VF store, netlink), the runtime's result cache
//!   and the runtime (CRI `ListPodSandbox`);
//! - [`fix`]: removes one leftover as the agent would (a record whose namespace is gone is
//!   torn down by the running agent itself, through its socket).
//!
//! With `--fix` the node is looked at twice and only what both looks found is removed: an ADD
//! in flight holds a link under a temporary name for a moment, a leftover stays.

pub mod find;
pub mod fix;
pub mod gather;
pub mod liveness;
pub mod views;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::dataplane::maps::{columns, TableError};
use crate::dataplane::records::StoreError;
use crate::ipam::host_local::store::StoreError as IpamStoreError;
use crate::native::sriov::SriovError;
use crate::netlink::nftables::NftError;
use crate::netlink::LinkError;
use crate::state::StateError;
use find::{leftovers, liveness_method, still_there, Fix, Kind, Leftover};
use fix::Fixer;

#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Records(#[from] StoreError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Ipam(#[from] IpamStoreError),
    #[error(transparent)]
    Sriov(#[from] SriovError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Nft(#[from] NftError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "the agent's DEL of container {container_id} through {} failed: {msg} (is the agent running with \
         this --socket?)",
        socket.display()
    )]
    AgentDel { container_id: String, socket: PathBuf, msg: String },
    #[error("releasing VF {pci}: {msg}")]
    Vf { pci: String, msg: String },
    #[error(
        "link {name} is a device, not a virtual link, and cannot be deleted: rename it (ip link set {name} \
         name <name>) or give its VF back (fix its VF record)"
    )]
    Device { name: String },
    #[error(
        "not freed: {} may be held by a live container (ask the runtime: --runtime-socket)",
        path.display()
    )]
    Unverified { path: PathBuf },
    #[error("a doctor task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub kind: Kind,
    pub what: String,
    /// With `--fix`: whether it is gone now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixed: Option<bool>,
    /// With `--fix`: why it could not be removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Row {
    fn found(l: &Leftover) -> Row {
        Row { kind: l.kind, what: l.what.clone(), fixed: None, error: None }
    }

    /// Whether the row leaves something behind (exit status 1).
    pub fn remains(&self) -> bool {
        self.fixed != Some(true)
    }
}

/// How long apart the two looks of `--fix` are at least, when a link is among the leftovers
/// (an ADD keeps a link under its temporary name for milliseconds).
const SECOND_LOOK: Duration = Duration::from_secs(1);

/// What doctor found (and with `--fix`, did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub rows: Vec<Row>,
    /// How the liveness of containers without a record was decided (at the first look).
    pub liveness: String,
}

/// Lists the leftovers; with `fixer`, removes them.
pub async fn run(sources: &gather::Sources, fixer: Option<&Fixer>) -> Result<Report, DoctorError> {
    let looked = Instant::now();
    let snapshot = gather::snapshot(sources).await?;
    let liveness = liveness_method(&snapshot);
    let first = leftovers(&snapshot);
    let Some(fixer) = fixer else {
        return Ok(Report { rows: first.iter().map(Row::found).collect(), liveness });
    };
    if first.is_empty() {
        return Ok(Report { rows: Vec::new(), liveness });
    }
    if first.iter().any(|l| l.kind == Kind::Link) {
        tokio::time::sleep(SECOND_LOOK.saturating_sub(looked.elapsed())).await;
    }
    let later = leftovers(&gather::snapshot(sources).await?);
    // An address whose container's liveness could not be decided at the second look (the
    // runtime stopped answering) stays, and is not fixed.
    let undecided = |path: &PathBuf| later.iter().any(|s| s.fix == Fix::Unverified(path.clone()));
    let second = still_there(&first, later.clone());
    let mut rows = Vec::with_capacity(first.len());
    for l in &first {
        let mut row = Row::found(l);
        if second.iter().any(|s| s.fix == l.fix) {
            match fixer.fix(&l.fix).await {
                Ok(()) => row.fixed = Some(true),
                Err(e) => (row.fixed, row.error) = (Some(false), Some(e.to_string())),
            }
        } else if let Some(path) = l.fix.allocation_path().filter(undecided) {
            let e = DoctorError::Unverified { path };
            (row.fixed, row.error) = (Some(false), Some(e.to_string()));
        } else {
            // Gone by itself between the two looks (a DEL or an ADD in flight).
            row.fixed = Some(true);
        }
        rows.push(row);
    }
    Ok(Report { rows, liveness })
}

/// A table for people.
pub fn render(rows: &[Row], fixing: bool) -> String {
    if rows.is_empty() {
        return "nothing left behind: every record's network namespace is alive, and every map entry, \
                allocation, VF record, temporary file and link is explained"
            .into();
    }
    let mut header = vec!["KIND".to_owned(), "WHAT".to_owned()];
    if fixing {
        header.push("FIXED".to_owned());
    }
    let mut lines = vec![header];
    for r in rows {
        let mut line = vec![r.kind.as_str().to_owned(), r.what.clone()];
        if fixing {
            line.push(match (&r.fixed, &r.error) {
                (Some(true), _) => "yes".into(),
                (_, Some(e)) => format!("no: {e}"),
                _ => "no".into(),
            });
        }
        lines.push(line);
    }
    columns(&lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_render_as_a_table_and_say_when_all_is_clean() {
        assert!(render(&[], false).starts_with("nothing left behind"));
        let rows = [
            Row {
                kind: Kind::TempFile,
                what: "temporary file /s/.x.1.tmp".into(),
                fixed: Some(true),
                error: None,
            },
            Row {
                kind: Kind::Link,
                what: "link plx00000000".into(),
                fixed: Some(false),
                error: Some("busy".into()),
            },
        ];
        let text = render(&rows, true);
        assert!(text.lines().next().unwrap().starts_with("KIND"), "{text}");
        assert!(text.contains("temp-file") && text.contains("yes") && text.contains("no: busy"), "{text}");
        assert!(!render(&rows, false).contains("FIXED"));
        assert!(!rows[0].remains() && rows[1].remains());
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "temp-file", "what": "temporary file /s/.x.1.tmp", "fixed": true})
        );
        let listed = Row { fixed: None, ..rows[0].clone() };
        assert!(listed.remains());
        assert_eq!(serde_json::to_value(&listed).unwrap().as_object().unwrap().len(), 2);
    }
}
