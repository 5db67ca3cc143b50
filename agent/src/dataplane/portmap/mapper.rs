//! The port mapping object: its TC and cgroup socket programs, loaded with the maps of
//! [`super::table`], and what the lifecycle of [`crate::dataplane::service`] asks of it.

use aya::maps::ProgramArray;
use aya::programs::tc::TcHandle;
use aya::programs::Program;
use plexus_ebpf_common::shape::MAP_LIMITS;
use plexus_ebpf_common::{MAPS, MAP_TAIL, TAIL_SCTP};

use super::entries::{endpoint_text, Entry};
use super::store::Record;
use super::table::{TableError, Tables};
use crate::dataplane::bandwidth::shaper::PIN_SUBDIR as BANDWIDTH_PIN_SUBDIR;
use crate::dataplane::loader::{LoadError, Loaded, Object, ObjectError};
use crate::dataplane::pin::{self, PinDir};
use crate::dataplane::service::Feature;
use crate::dataplane::DataplaneOptions;

/// TC program run on an interface's receive path.
pub const TC_INGRESS: &str = "pm_tc_in";
/// TC program run on an interface's transmit path.
pub const TC_EGRESS: &str = "pm_tc_out";
/// SCTP checksum fixup, tail-called by the two above.
pub const TC_SCTP: &str = "pm_sctp";
/// The cgroup sock_addr programs (the attach type is in each program's section).
pub const SOCK_PROGRAMS: [&str; 8] = [
    "pm_connect4",
    "pm_connect6",
    "pm_sendmsg4",
    "pm_sendmsg6",
    "pm_recvmsg4",
    "pm_recvmsg6",
    "pm_peername4",
    "pm_peername6",
];

/// Port mappings: TC and cgroup socket programs.
pub static OBJECT: Object = Object {
    bytes: aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-ebpf.o")),
    maps: &MAPS,
    // Which pods' veths limit their ingress: the port mapping programs then deliver through
    // the veth's transmit path, where the limit applies.
    shared_maps: &[(MAP_LIMITS, BANDWIDTH_PIN_SUBDIR)],
    programs: &[
        TC_INGRESS,
        TC_EGRESS,
        TC_SCTP,
        SOCK_PROGRAMS[0],
        SOCK_PROGRAMS[1],
        SOCK_PROGRAMS[2],
        SOCK_PROGRAMS[3],
        SOCK_PROGRAMS[4],
        SOCK_PROGRAMS[5],
        SOCK_PROGRAMS[6],
        SOCK_PROGRAMS[7],
    ],
    tc_ingress: TC_INGRESS,
    tc_egress: TC_EGRESS,
    sock_programs: &SOCK_PROGRAMS,
    first: true,
    filter_priority: 1,
    filter_handle: TcHandle::new(0, 0x504d),
};

/// Loads the port mapping object with its tail calls in place. With `pins`, maps and programs
/// are pinned (see [`Loaded::load_object`]); without, they live as long as the `Loaded` (tests).
pub fn load(pins: Option<PinDir>) -> Result<Loaded, LoadError> {
    let mut loaded = Loaded::load_object(&OBJECT, pins)?;
    install_tail_calls(&mut loaded)?;
    Ok(loaded)
}

/// Puts the SCTP fixup program into the (pinned, shared) program array. Programs of an earlier
/// run still attached tail-call the new one from now on: the control-buffer protocol between
/// them is part of the object's ABI, like the map layouts.
fn install_tail_calls(loaded: &mut Loaded) -> Result<(), LoadError> {
    let ebpf = loaded.ebpf_mut();
    let fd = match ebpf.program(TC_SCTP) {
        Some(Program::SchedClassifier(p)) => p
            .fd()
            .map_err(|source| LoadError::Program { name: TC_SCTP, source: Box::new(source) })?
            .try_clone(),
        _ => return Err(LoadError::MissingProgram(TC_SCTP)),
    }
    .map_err(|source| LoadError::Io { action: "duplicating the fd of", path: TC_SCTP.into(), source })?;
    let map = ebpf.map_mut(MAP_TAIL).ok_or(LoadError::MissingProgram(MAP_TAIL))?;
    let mut tail: ProgramArray<&mut aya::maps::MapData> = ProgramArray::try_from(map)
        .map_err(|source| LoadError::Map { name: MAP_TAIL, source: Box::new(source) })?;
    tail.set(TAIL_SCTP, &fd, 0).map_err(|source| LoadError::Map { name: MAP_TAIL, source: Box::new(source) })
}

/// The loaded and pinned port mapping object and its maps.
#[derive(Debug)]
pub struct Mapper {
    pub loaded: Loaded,
    pub tables: Tables,
}

impl Feature for Mapper {
    type Entry = Entry;
    const WHAT: &'static str = "port mappings";
    const NONE_RECORDED: &'static str = "no mapping is recorded";

    /// Loads the object with its maps and programs pinned under `pin_dir`, and attaches the
    /// socket hooks for the agent's network namespace.
    fn start(opts: &DataplaneOptions) -> Result<Mapper, ObjectError> {
        let pins = PinDir::prepare(&opts.pin_dir)?;
        let mut loaded = load(Some(pins))?;
        let mut tables = Tables::take(loaded.ebpf_mut())?;
        // The socket hooks only serve node-local clients: without them, mappings still work for
        // everyone else, so their failure is logged, not fatal.
        let sockets = pin::netns_cookie()
            .and_then(|cookie| Ok((cookie, pin::open_cgroup_root(&opts.cgroup_root)?)))
            .map_err(ObjectError::from)
            .and_then(|(cookie, cgroup)| {
                tables.set_netns_cookie(cookie)?;
                loaded.attach_sockets(&cgroup)?;
                Ok(())
            });
        if let Err(e) = sockets {
            tracing::warn!("port mappings will not translate the node's own connections (socket hooks): {e}");
        }
        Ok(Mapper { loaded, tables })
    }

    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn loaded_mut(&mut self) -> &mut Loaded {
        &mut self.loaded
    }

    fn install(&mut self, entry: &Entry) -> Result<(), TableError> {
        self.tables.install(entry)
    }

    fn remove(&mut self, entry: &Entry) -> Result<(), TableError> {
        self.tables.remove(entry)
    }

    fn verify(&self, entry: &Entry) -> Option<String> {
        self.tables.verify(entry)
    }

    fn reconcile(&mut self, desired: &[Entry]) -> Result<(usize, usize), TableError> {
        self.tables.reconcile(desired).map(|done| (done.removed, done.restored))
    }

    /// The first mapping of `record` that `other` holds: the same host endpoint, or the same
    /// pod endpoint (stale state: pod addresses are unique).
    fn conflict(record: &Record, other: &Record) -> Option<String> {
        record.entries.iter().find_map(|e| {
            let what = other.entries.iter().find_map(|o| {
                if o.host_endpoint() == e.host_endpoint() {
                    Some(format!(
                        "host port {}/{}",
                        endpoint_text(e.host_ip, e.host_port),
                        e.protocol.as_str()
                    ))
                } else if o.pod_endpoint() == e.pod_endpoint() {
                    Some(format!(
                        "pod port {}/{}",
                        endpoint_text(e.pod_ip, e.container_port),
                        e.protocol.as_str()
                    ))
                } else {
                    None
                }
            })?;
            Some(format!("{what} is already mapped for {}; choose another host port", other.owner()))
        })
    }
}
