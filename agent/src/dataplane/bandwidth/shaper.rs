//! The shaping object: its TC programs, loaded with the maps of [`super::table`] and pinned
//! under their own subdirectory, and what the lifecycle of [`crate::dataplane::service`] asks of
//! it.

use aya::programs::tc::TcHandle;
use plexus_ebpf_common::shape::MAPS;

use super::plan::Entry;
use super::store::Record;
use super::table::{Table, TableError};
use crate::dataplane::loader::{Loaded, Object, ObjectError};
use crate::dataplane::pin::PinDir;
use crate::dataplane::service::Feature;
use crate::dataplane::DataplaneOptions;
use crate::netlink::Mac;

/// Where the shaping object pins, under the agent's pin directory.
pub const PIN_SUBDIR: &str = "bandwidth";

/// Shaping program of an interface's receive path.
pub const BW_INGRESS: &str = "bw_tc_in";
/// Shaping program of an interface's transmit path.
pub const BW_EGRESS: &str = "bw_tc_out";
/// The ingress limits of a macvlan master's pods, in XDP.
pub const BW_XDP: &str = "bw_xdp";

/// Bandwidth shaping: TC programs, and XDP on macvlan masters.
pub static OBJECT: Object = Object {
    bytes: aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-bandwidth.o")),
    maps: &MAPS,
    shared_maps: &[],
    programs: &[BW_INGRESS, BW_EGRESS, BW_XDP],
    tc_ingress: BW_INGRESS,
    tc_egress: BW_EGRESS,
    sock_programs: &[],
    xdp: Some(BW_XDP),
    // The port mapping object pins at the agent's pin directory, this one a level below: where
    // its `pm_xdp` runs (a master with port mappings too), it polices these limits already.
    xdp_defers_to: Some(".."),
    xdp_displaces: None,
    first: false,
    filter_priority: 2,
    filter_handle: TcHandle::new(0, 0x4257),
};

/// The loaded shaping object and its maps.
pub struct Shaper {
    pub loaded: Loaded,
    pub table: Table,
}

impl std::fmt::Debug for Shaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shaper").finish_non_exhaustive()
    }
}

impl Feature for Shaper {
    type Entry = Entry;
    const WHAT: &'static str = "bandwidth limits";
    const NONE_RECORDED: &'static str = "no limit is recorded";
    const OBJECT: &'static Object = &OBJECT;

    /// Loads the object with its maps, programs and links pinned under `<pin_dir>/bandwidth`.
    fn start(opts: &DataplaneOptions) -> Result<Shaper, ObjectError> {
        let pins = PinDir::prepare(&opts.pin_dir.join(PIN_SUBDIR))?;
        let mut loaded = Loaded::load_object(&OBJECT, Some(pins))?;
        loaded.set_xdp_enabled(opts.xdp.enabled());
        let table = Table::take(loaded.ebpf_mut())?;
        Ok(Shaper { loaded, table })
    }

    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn loaded_mut(&mut self) -> &mut Loaded {
        &mut self.loaded
    }

    fn install(&mut self, entry: &Entry) -> Result<(), TableError> {
        self.table.install(entry)
    }

    fn remove(&mut self, entry: &Entry) -> Result<(), TableError> {
        self.table.remove(entry)
    }

    fn verify(&self, entry: &Entry) -> Option<String> {
        self.table.verify(entry)
    }

    fn reconcile(&mut self, desired: &[Entry]) -> Result<(usize, usize), TableError> {
        self.table.reconcile(desired)
    }

    /// Another attachment limiting the same traffic (same device, hook and MAC): stale state,
    /// or two pods with one MAC on a master.
    fn conflict(record: &Record, other: &Record) -> Option<String> {
        let e = record.entries.iter().find(|e| other.entries.iter().any(|o| o.key() == e.key()))?;
        let what = match e.mac {
            Some(mac) => {
                format!("{} traffic of MAC {} on {}", e.direction.as_str(), Mac(mac), e.ifname)
            }
            None => format!("{} traffic of {}", e.direction.as_str(), e.ifname),
        };
        Some(format!("{what} is already limited for {}", other.owner()))
    }
}
