//! The port mapping object: its TC, XDP and cgroup socket programs, loaded with the maps of
//! [`super::table`], and what the lifecycle of [`crate::dataplane::service`] asks of it.

use std::os::fd::OwnedFd;

use aya::maps::ProgramArray;
use aya::programs::tc::TcHandle;
use aya::programs::Program;
use plexus_ebpf_common::flow::{Settings, DEFAULT_MAX_FLOWS, MAP_FLOWS};
use plexus_ebpf_common::shape::{MAP_CLOCK, MAP_LIMITS, MAP_STATS as MAP_SHAPE_STATS, MAP_UNLIMITED};
use plexus_ebpf_common::{MAPS, MAP_TAIL, RETIRED_MAPS, TAIL_FRAGMENT, TAIL_ICMP, TAIL_SCTP};

use super::entries::{endpoint_text, Entry};
use super::reaper::Reaper;
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
/// Translation of ICMP and ICMPv6 errors quoting a tracked flow, tail-called by the two above.
pub const TC_ICMP: &str = "pm_icmp";
/// Translation of IP fragments after the first, tail-called by the two above.
pub const TC_FRAGMENT: &str = "pm_fragment";
/// The forward translation in XDP, on the interfaces where clients' traffic enters the node.
pub const XDP: &str = "pm_xdp";
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
    // the veth's transmit path, where the limit applies (the interfaces marked unlimited are
    // not looked up). The XDP program enforces the ingress limits of the pods behind a macvlan
    // master with the same limits, counters and clock.
    shared_maps: &[
        (MAP_LIMITS, BANDWIDTH_PIN_SUBDIR),
        (MAP_UNLIMITED, BANDWIDTH_PIN_SUBDIR),
        (MAP_SHAPE_STATS, BANDWIDTH_PIN_SUBDIR),
        (MAP_CLOCK, BANDWIDTH_PIN_SUBDIR),
    ],
    programs: &[
        TC_INGRESS,
        TC_EGRESS,
        TC_SCTP,
        TC_ICMP,
        TC_FRAGMENT,
        XDP,
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
    xdp: Some(XDP),
    xdp_defers_to: None,
    // `bw_xdp` only polices, which `pm_xdp` does too.
    xdp_displaces: Some(BANDWIDTH_PIN_SUBDIR),
    first: true,
    filter_priority: 1,
    filter_handle: TcHandle::new(0, 0x504d),
};

/// Loads the port mapping object with its tail calls in place and a flow table of the default
/// size. With `pins`, maps and programs are pinned (see [`Loaded::load_object`]); without, they
/// live as long as the `Loaded` (tests).
pub fn load(pins: Option<PinDir>) -> Result<Loaded, LoadError> {
    load_with(pins, DEFAULT_MAX_FLOWS)
}

/// [`load`] with a flow table of `max_flows` entries (a pinned table keeps its size).
pub fn load_with(pins: Option<PinDir>, max_flows: u32) -> Result<Loaded, LoadError> {
    let mut loaded = Loaded::load_object_sized(&OBJECT, pins, &[(MAP_FLOWS, max_flows)])?;
    install_tail_calls(&mut loaded)?;
    loaded.remove_retired_maps(&RETIRED_MAPS)?;
    Ok(loaded)
}

/// The fd of TC program `name`, to put in a program array.
fn program_fd(loaded: &Loaded, name: &'static str) -> Result<aya::programs::ProgramFd, LoadError> {
    let fd = match loaded.ebpf().program(name) {
        Some(Program::SchedClassifier(p)) => {
            p.fd().map_err(|source| LoadError::Program { name, source: Box::new(source) })?.try_clone()
        }
        _ => return Err(LoadError::MissingProgram(name)),
    };
    fd.map_err(|source| LoadError::Io { action: "duplicating the fd of", path: name.into(), source })
}

/// Puts the tail-called programs (SCTP fixup, ICMP errors, later fragments) into the (pinned,
/// shared) program array. Programs of an earlier run still attached tail-call the new ones from now on: the
/// control-buffer protocol between them is part of the object's ABI, like the map layouts.
fn install_tail_calls(loaded: &mut Loaded) -> Result<(), LoadError> {
    let tails = [
        (TAIL_SCTP, program_fd(loaded, TC_SCTP)?),
        (TAIL_ICMP, program_fd(loaded, TC_ICMP)?),
        (TAIL_FRAGMENT, program_fd(loaded, TC_FRAGMENT)?),
    ];
    let map_err = |source| LoadError::Map { name: MAP_TAIL, source: Box::new(source) };
    let map = loaded.ebpf_mut().map_mut(MAP_TAIL).ok_or(LoadError::MissingProgram(MAP_TAIL))?;
    let mut array: ProgramArray<&mut aya::maps::MapData> = ProgramArray::try_from(map).map_err(map_err)?;
    for (index, fd) in &tails {
        array.set(*index, fd, 0).map_err(map_err)?;
    }
    Ok(())
}

/// The socket hooks only serve node-local clients: without them, mappings still work for
/// everyone else, so their failure is logged, not fatal.
fn warn_no_socket_hooks(e: &dyn std::fmt::Display) {
    tracing::warn!("port mappings will not translate the node's own connections (socket hooks): {e}");
}

/// The loaded and pinned port mapping object, its maps, and the reaper of its flow table.
#[derive(Debug)]
pub struct Mapper {
    pub loaded: Loaded,
    pub tables: Tables,
    /// Stops with the mapper.
    pub reaper: Option<Reaper>,
    /// The cgroup whose socket hooks the first reconcile attaches, once the forward entries
    /// are in place.
    sockets_pending: Option<OwnedFd>,
}

impl Feature for Mapper {
    type Entry = Entry;
    const WHAT: &'static str = "port mappings";
    const NONE_RECORDED: &'static str = "no mapping is recorded";
    const OBJECT: &'static Object = &OBJECT;

    /// Loads the object with its maps and programs pinned under `pin_dir`, writes the
    /// programs' settings and starts reaping expired flows. The socket hooks for the agent's
    /// network namespace are attached by the first reconcile: until it has written the forward
    /// entries (after an upgrade that renamed the forward map, the new one starts empty), the
    /// hooks of the previous run go on translating with theirs.
    fn start(opts: &DataplaneOptions) -> Result<Mapper, ObjectError> {
        let pins = PinDir::prepare(&opts.pin_dir)?;
        let mut loaded = load_with(Some(pins.clone()), opts.max_flows)?;
        loaded.set_xdp_enabled(opts.xdp.enabled());
        let mut tables = Tables::take(loaded.ebpf_mut())?;
        let cookie = pin::netns_cookie();
        // The timeouts matter to the TC programs: the settings are written whether or not the
        // socket hooks can be (without a cookie, 0 keeps the hooks idle).
        let settings = Settings {
            netns_cookie: *cookie.as_ref().unwrap_or(&0),
            fixed_now_ns: 0,
            timeouts: opts.timeouts,
        };
        tables.set_settings(&settings)?;
        let sockets_pending = match cookie.and_then(|_| pin::open_cgroup_root(&opts.cgroup_root)) {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                warn_no_socket_hooks(&e);
                None
            }
        };
        // Expired flows are harmless to traffic (the programs treat them as gone): without the
        // reaper they only hold their slots until the table's LRU evicts them.
        let reaper = Tables::open_pinned(&pins)
            .map_err(|e| e.to_string())
            .and_then(|t| Reaper::spawn(t, opts.timeouts).map_err(|e| e.to_string()));
        let reaper = match reaper {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!("expired port mapping flows will not be reaped: {e}");
                None
            }
        };
        Ok(Mapper { loaded, tables, reaper, sockets_pending })
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
        let done = self.tables.reconcile(desired);
        if let Some(cgroup) = self.sockets_pending.take() {
            if let Err(e) = self.loaded.attach_sockets(&cgroup) {
                warn_no_socket_hooks(&e);
            }
        }
        let done = done?;
        if done.flows_removed > 0 {
            tracing::info!(flows = done.flows_removed, "removed the flows of port mappings that are gone");
        }
        Ok((done.removed, done.restored))
    }

    /// The first mapping of `record` that `other` (another attachment) holds: the same host
    /// endpoint, or the same pod endpoint (stale state: pod addresses are unique, so another
    /// attachment's record of it was never deleted). Two host ports of one record mapping to
    /// one container port are fine: each flow remembers the host port it came in on.
    fn conflict(record: &Record, other: &Record) -> Option<String> {
        record.entries.iter().find_map(|e| {
            other.entries.iter().find_map(|o| {
                if o.host_endpoint() == e.host_endpoint() {
                    Some(format!(
                        "host port {}/{} is already mapped for {}; choose another host port",
                        endpoint_text(e.host_ip, e.host_port),
                        e.protocol.as_str(),
                        other.owner()
                    ))
                } else if o.pod_endpoint() == e.pod_endpoint() {
                    Some(format!(
                        "pod port {}/{} is already mapped for {}, whose address this pod now has (a stale \
                         attachment: delete it)",
                        endpoint_text(e.pod_ip, e.container_port),
                        e.protocol.as_str(),
                        other.owner()
                    ))
                } else {
                    None
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::attach::Hook;
    use crate::spec::selection::Protocol;

    fn entry(host_port: u16, pod_ip: &str, container_port: u16) -> Entry {
        Entry {
            protocol: Protocol::Tcp,
            host_ip: "10.77.0.1".parse().unwrap(),
            host_port,
            pod_ip: pod_ip.parse().unwrap(),
            container_port,
            pod_mac: "0a:58:00:00:00:05".into(),
            host_mac: "02:00:00:00:00:01".into(),
            deliver_ifindex: 7,
            deliver: Hook::Egress,
            via_bridge: false,
            xdp_redirect: false,
        }
    }

    fn record(container_id: &str, pod: &str, entries: Vec<Entry>) -> Record {
        Record {
            container_id: container_id.into(),
            ifname: "net1".into(),
            network: "n".into(),
            pod: Some(pod.into()),
            entries,
            hooks: Vec::new(),
        }
    }

    #[test]
    fn two_host_ports_to_one_container_port_do_not_conflict() {
        let a = record("c1", "default/a", vec![entry(8080, "10.77.0.5", 80), entry(8081, "10.77.0.5", 80)]);
        let b = record("c2", "default/b", vec![entry(9090, "10.77.0.6", 80)]);
        assert_eq!(Mapper::conflict(&a, &b), None);
        assert_eq!(Mapper::conflict(&b, &a), None);
    }

    #[test]
    fn a_host_port_of_another_attachment_conflicts() {
        let a = record("c1", "default/a", vec![entry(8080, "10.77.0.5", 80)]);
        let b = record("c2", "default/b", vec![entry(8081, "10.77.0.6", 81), entry(8080, "10.77.0.6", 80)]);
        let why = Mapper::conflict(&a, &b).expect("a conflict");
        assert!(why.starts_with("host port 10.77.0.1:8080/tcp is already mapped for pod default/b"), "{why}");
    }

    #[test]
    fn a_pod_endpoint_in_another_attachments_record_conflicts() {
        // The same pod address and port under another attachment: that record is stale.
        let a = record("c1", "default/a", vec![entry(8080, "10.77.0.5", 80)]);
        let stale = record("c0", "default/old", vec![entry(9090, "10.77.0.5", 80)]);
        let why = Mapper::conflict(&a, &stale).expect("a conflict");
        assert!(why.starts_with("pod port 10.77.0.5:80/tcp is already mapped for pod default/old"), "{why}");
        // Another container port of that address is not the same endpoint.
        let other_port = record("c0", "default/old", vec![entry(9090, "10.77.0.5", 81)]);
        assert_eq!(Mapper::conflict(&a, &other_port), None);
    }
}
