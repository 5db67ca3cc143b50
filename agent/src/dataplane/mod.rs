//! The eBPF dataplane: programs written in Rust (`ebpf/programs`, aya-ebpf), embedded in the
//! agent and loaded with aya.
//!
//! - [`pin`]: the bpffs directory holding maps, programs and links, so the dataplane outlives
//!   the agent (restarts and upgrades do not interrupt traffic).
//! - [`loader`]: loading the object, attaching programs as pinned links, replacing them on
//!   upgrade without a gap.
//! - [`portmap`]: `portMappings` (NPWG 4.1.2.1.7) in TC and cgroup programs, and the
//!   `plexus-portmap` plugin type that drives them.
//! - [`bandwidth`]: `bandwidth` (NPWG 4.1.2.1.8) in TC programs of their own object, and the
//!   `plexus-bandwidth` plugin type.
//! - [`capabilities`]: native plugin types (macvlan) serving both capabilities themselves.

pub mod bandwidth;
pub mod capabilities;
pub mod chained;
pub mod loader;
pub mod maps;
pub mod pin;
pub mod portmap;
pub mod records;
pub mod service;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use loader::{LoadError, Loaded};
use pin::{PinDir, PinError};
use portmap::table::{TableError, Tables};

/// Where the dataplane keeps its objects.
#[derive(Debug, Clone)]
pub struct DataplaneOptions {
    /// bpffs directory for pins (see [`pin`]).
    pub pin_dir: PathBuf,
    /// cgroup v2 directory the socket hooks attach to (the root: they filter by namespace).
    pub cgroup_root: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Table(#[from] TableError),
}

/// The loaded and pinned dataplane.
#[derive(Debug)]
pub struct Dataplane {
    pub loaded: Loaded,
    pub tables: Tables,
}

impl Dataplane {
    /// Loads the object with its maps and programs pinned under `pin_dir`, and attaches the
    /// socket hooks for the agent's network namespace.
    pub fn start(opts: &DataplaneOptions) -> Result<Dataplane, DataplaneError> {
        let pins = PinDir::prepare(&opts.pin_dir)?;
        let mut loaded = Loaded::load(Some(pins))?;
        let mut tables = Tables::take(loaded.ebpf_mut())?;
        // The socket hooks only serve node-local clients: without them, mappings still work for
        // everyone else, so their failure is logged, not fatal.
        let sockets = pin::netns_cookie()
            .and_then(|cookie| Ok((cookie, pin::open_cgroup_root(&opts.cgroup_root)?)))
            .map_err(DataplaneError::from)
            .and_then(|(cookie, cgroup)| {
                tables.set_netns_cookie(cookie)?;
                loaded.attach_sockets(&cgroup)?;
                Ok(())
            });
        if let Err(e) = sockets {
            tracing::warn!("port mappings will not translate the node's own connections (socket hooks): {e}");
        }
        Ok(Dataplane { loaded, tables })
    }
}
