//! Loading the embedded BPF object and attaching its programs, so that attachments survive the
//! agent: maps reuse their pins, and every attachment is a pinned BPF link.
//!
//! A restarted agent loads the object again. Its maps are the pinned ones (entries intact); its
//! programs are new kernel objects, but the links pinned by the previous run keep running the
//! old ones. When an old program has the same tag (the same instructions) as the new one, its
//! link is left alone: a restart changes nothing in the packet path. When it differs (an
//! upgrade), the new program is attached next to it first and the old link is replaced by the
//! new one in the pin directory (rename over it), so there is no moment without a program.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use aya::maps::ProgramArray;
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{qdisc_add_clsact, NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle};
use aya::programs::{CgroupAttachMode, CgroupSockAddr, LinkOrder, Program, SchedClassifier, TcAttachType};
use aya::{Ebpf, EbpfLoader};
use plexus_ebpf_common::{shape, MAPS, MAP_TAIL, TAIL_SCTP};

use super::pin::PinDir;
use super::portmap::topology::AttachPoint;

/// One BPF object built from `ebpf/programs` by build.rs and embedded in the agent: what it
/// holds and how its TC programs are attached. Objects are loaded independently, each with its
/// own pin directory.
#[derive(Debug)]
pub struct Object {
    pub bytes: &'static [u8],
    pub maps: &'static [&'static str],
    /// Maps it shares with another object: (name, the pin subdirectory of the object that owns
    /// it). Both objects load the one pinned map.
    pub shared_maps: &'static [(&'static str, &'static str)],
    /// Every program to load.
    pub programs: &'static [&'static str],
    /// The TC programs of the receive and transmit paths.
    pub tc_ingress: &'static str,
    pub tc_egress: &'static str,
    /// Whether its TC programs go first on a hook (port mappings, which rewrite what the
    /// others should see) or last (shaping, which should count what actually leaves).
    pub first: bool,
    /// Where its cls_bpf filters sit ([`Attach::Filter`]): priority (lower runs first) and
    /// handle, fixed so that a restarted agent finds and replaces them.
    pub filter_priority: u16,
    pub filter_handle: TcHandle,
}

/// How a TC program is attached to a hook.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Attach {
    /// A pinned TCX link: hooks many attachments share (a bridge, a macvlan master), attached
    /// once and kept across restarts and upgrades by their pins.
    #[default]
    Tcx,
    /// A cls_bpf filter (direct action, under clsact) at the object's fixed priority and
    /// handle: the hooks of one pod's host-side veth, which come and go with the pod. Attaching
    /// a filter is a netlink message (0.2 to 0.5 ms measured here); a TCX link waits for an RCU
    /// grace period in the kernel (10 to 25 ms), most of an ADD. Filters live on the device, so
    /// they outlive the agent without pins; a restarted agent replaces them in place.
    Filter,
}

/// Port mappings: TC and cgroup socket programs.
pub static PORTMAP: Object = Object {
    bytes: aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-ebpf.o")),
    maps: &MAPS,
    // Which pods' veths limit their ingress: the port mapping programs then deliver through
    // the veth's transmit path, where the limit applies.
    shared_maps: &[(shape::MAP_LIMITS, BANDWIDTH_PIN_SUBDIR)],
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
    first: true,
    filter_priority: 1,
    filter_handle: TcHandle::new(0, 0x504d),
};

/// Bandwidth shaping: TC programs only.
pub static BANDWIDTH: Object = Object {
    bytes: aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-bandwidth.o")),
    maps: &shape::MAPS,
    shared_maps: &[],
    programs: &[BW_INGRESS, BW_EGRESS],
    tc_ingress: BW_INGRESS,
    tc_egress: BW_EGRESS,
    first: false,
    filter_priority: 2,
    filter_handle: TcHandle::new(0, 0x4257),
};

/// Where the shaping object pins, under the agent's pin directory.
pub const BANDWIDTH_PIN_SUBDIR: &str = "bandwidth";

/// Shaping program of an interface's receive path.
pub const BW_INGRESS: &str = "bw_tc_in";
/// Shaping program of an interface's transmit path.
pub const BW_EGRESS: &str = "bw_tc_out";

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

/// Which path of an interface a TC program runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    Ingress,
    Egress,
}

impl Hook {
    fn program(self, object: &Object) -> &'static str {
        match self {
            Hook::Ingress => object.tc_ingress,
            Hook::Egress => object.tc_egress,
        }
    }

    fn attach_type(self) -> TcAttachType {
        match self {
            Hook::Ingress => TcAttachType::Ingress,
            Hook::Egress => TcAttachType::Egress,
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Hook::Ingress => "in",
            Hook::Egress => "out",
        }
    }
}

/// The pin name of the TC link of (interface index, hook).
pub fn tc_link_name(ifindex: u32, hook: Hook) -> String {
    format!("tc_{ifindex}_{}", hook.suffix())
}

/// The (interface index, hook) a TC link pin name stands for.
pub fn parse_tc_link_name(name: &str) -> Option<(u32, Hook)> {
    let rest = name.strip_prefix("tc_")?;
    let (index, hook) = rest.split_once('_')?;
    let hook = match hook {
        "in" => Hook::Ingress,
        "out" => Hook::Egress,
        _ => return None,
    };
    Some((index.parse().ok()?, hook))
}

fn sock_link_name(program: &str) -> String {
    format!("cg_{program}")
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading the BPF object: {0}")]
    Object(String),
    #[error("the BPF object has no program or map {0} (an agent built from mismatched sources)")]
    MissingProgram(&'static str),
    #[error("BPF program {name}: {cause}")]
    Program { name: String, cause: String },
    #[error("BPF link {path}: {cause}")]
    Link { path: PathBuf, cause: String },
    #[error("pinning {path}: {cause}")]
    Pin { path: PathBuf, cause: String },
    #[error("{action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    #[error("attaching requires a pin directory (the link would die with the agent)")]
    NotPinned,
    #[error("BPF map {name}: {cause}")]
    Map { name: &'static str, cause: String },
}

/// An error with its causes: aya's syscall errors keep the errno in their source.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn program_error(name: &str) -> impl FnOnce(aya::programs::ProgramError) -> LoadError + '_ {
    move |e| LoadError::Program { name: name.to_owned(), cause: chain(&e) }
}

fn link_error(path: &Path) -> impl Fn(aya::programs::links::LinkError) -> LoadError + '_ {
    move |e| LoadError::Link { path: path.to_owned(), cause: chain(&e) }
}

/// The loaded object: its maps (pinned ones when there is a pin directory) and programs.
pub struct Loaded {
    object: &'static Object,
    ebpf: Ebpf,
    pins: Option<PinDir>,
    /// Tags of our programs, by name.
    tags: HashMap<&'static str, u64>,
    /// (name, program id) known to run that program's code: ours, and an earlier run's
    /// identical programs.
    equivalent: BTreeSet<(&'static str, u32)>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("pins", &self.pins).finish_non_exhaustive()
    }
}

impl Loaded {
    /// Loads the port mapping object (see [`Loaded::load_object`]).
    pub fn load(pins: Option<PinDir>) -> Result<Loaded, LoadError> {
        let mut loaded = Loaded::load_object(&PORTMAP, pins)?;
        install_tail_calls(&mut loaded.ebpf)?;
        Ok(loaded)
    }

    /// Loads an embedded object. With `pins`, maps are created at (or reused from) their pin
    /// paths and programs are pinned too; without, everything lives as long as the `Loaded`
    /// (tests).
    pub fn load_object(object: &'static Object, pins: Option<PinDir>) -> Result<Loaded, LoadError> {
        let mut loader = EbpfLoader::new();
        // The programs need no CO-RE relocations: skip parsing the kernel's BTF.
        loader.btf(None);
        let mut paths: Vec<(&'static str, PathBuf)> =
            pins.iter().flat_map(|p| object.maps.iter().map(move |m| (*m, p.map(m)))).collect();
        for (name, subdir) in object.shared_maps {
            if let Some(pins) = &pins {
                let owner = PinDir::open(&pins.root().join(subdir));
                let dir = owner.maps();
                std::fs::create_dir_all(&dir).map_err(|source| LoadError::Io {
                    action: "creating",
                    path: dir.clone(),
                    source,
                })?;
                paths.push((name, owner.map(name)));
            }
        }
        for (name, path) in &paths {
            loader.map_pin_path(name, path.as_path());
        }
        // One object at a time: a shared map is created and pinned by whichever comes first,
        // and found by the other.
        static LOADING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = LOADING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let loaded = loader.load(object.bytes).map_err(|e| LoadError::Object(chain(&e)));
        drop(guard);
        let mut ebpf = loaded?;

        let mut tags = HashMap::new();
        let mut own = BTreeSet::new();
        for &name in object.programs {
            let program = ebpf.program_mut(name).ok_or(LoadError::MissingProgram(name))?;
            let info = match program {
                Program::SchedClassifier(p) => {
                    p.load().map_err(program_error(name))?;
                    p.info()
                }
                Program::CgroupSockAddr(p) => {
                    p.load().map_err(program_error(name))?;
                    p.info()
                }
                _ => return Err(LoadError::MissingProgram(name)),
            }
            .map_err(program_error(name))?;
            tags.insert(name, info.tag());
            own.insert((name, info.id()));
            if let Some(pins) = &pins {
                let path = pins.prog(name);
                remove_pin(&path)?;
                program.pin(&path).map_err(|e| LoadError::Pin { cause: chain(&e), path })?;
            }
        }
        Ok(Loaded { object, ebpf, pins, tags, equivalent: own })
    }

    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    pub fn pins(&self) -> Option<&PinDir> {
        self.pins.as_ref()
    }

    fn pins_or_err(&self) -> Result<PinDir, LoadError> {
        self.pins.clone().ok_or(LoadError::NotPinned)
    }

    /// Makes sure the TC program of `hook` runs on the interface (idempotent, cheap when it
    /// already does).
    pub fn attach_tc(&mut self, ifindex: u32, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        let path = self.pins_or_err()?.link(&tc_link_name(ifindex, hook));
        let name = hook.program(self.object);
        if self.pinned_link_is_current(&path, name)? {
            return Ok(());
        }
        let order = if self.object.first { LinkOrder::first() } else { LinkOrder::last() };
        let program: &mut SchedClassifier = self.typed(name)?;
        let id = program
            .attach_with_options(ifname, hook.attach_type(), TcAttachOptions::TcxOrder(order))
            .map_err(program_error(name))?;
        let link = program.take_link(id).map_err(program_error(name))?;
        let link: FdLink = link.try_into().map_err(link_error(&path))?;
        pin_over(link, &path)
    }

    /// Makes sure the TC program of `hook` runs on the interface as a cls_bpf filter
    /// ([`Attach::Filter`]): created, or, when one of ours is there already (a previous run's),
    /// replaced in place by this run's program (atomic in cls_bpf: no packet misses it).
    pub fn attach_filter(&mut self, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        let name = hook.program(self.object);
        let (priority, handle) = (self.object.filter_priority, self.object.filter_handle);
        // clsact may already be there (ours, or someone else's): both are fine.
        let _ = qdisc_add_clsact(ifname);
        let program: &mut SchedClassifier = self.typed(name)?;
        let options = NlOptions { priority, handle, classid: None };
        let id = match program.attach_with_options(
            ifname,
            hook.attach_type(),
            TcAttachOptions::Netlink(options),
        ) {
            Ok(id) => id,
            Err(created) => {
                let existing =
                    SchedClassifierLink::attached(ifname, hook.attach_type(), priority, handle, None)
                        .map_err(|e| LoadError::Program {
                            name: name.to_owned(),
                            cause: format!("{ifname}: {e}"),
                        })?;
                program.attach_to_link(existing).map_err(|replaced| LoadError::Program {
                    name: name.to_owned(),
                    cause: format!(
                        "attaching to {ifname}: {}; replacing a previous filter: {}",
                        chain(&created),
                        chain(&replaced)
                    ),
                })?
            }
        };
        // The filter stays when the link handle goes: it lives on the device, like a pin.
        let link = program.take_link(id).map_err(program_error(name))?;
        std::mem::forget(link);
        Ok(())
    }

    /// Removes our cls_bpf filter of `hook` from the interface; a device or filter that is gone
    /// already is fine.
    pub fn detach_filter(&self, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        let (priority, handle) = (self.object.filter_priority, self.object.filter_handle);
        let Ok(link) = SchedClassifierLink::attached(ifname, hook.attach_type(), priority, handle, None)
        else {
            return Ok(());
        };
        match aya::programs::Link::detach(link) {
            Ok(()) => Ok(()),
            Err(e) if filter_gone(&e) => Ok(()),
            Err(e) => Err(LoadError::Program {
                name: hook.program(self.object).to_owned(),
                cause: format!("detaching from {ifname}: {}", chain(&e)),
            }),
        }
    }

    /// Makes sure the program of an attach point runs there, as a TCX link or a filter.
    pub fn attach_point(&mut self, p: &AttachPoint) -> Result<(), LoadError> {
        match p.attach {
            Attach::Tcx => self.attach_tc(p.ifindex, &p.ifname, p.hook),
            Attach::Filter => self.attach_filter(&p.ifname, p.hook),
        }
    }

    /// Stops the program of an attach point running there.
    pub fn detach_point(&self, p: &AttachPoint) -> Result<(), LoadError> {
        match p.attach {
            Attach::Tcx => self.detach_tc(p.ifindex, p.hook),
            Attach::Filter => self.detach_filter(&p.ifname, p.hook),
        }
    }

    /// Whether the program of an attach point runs there: its TCX link is pinned (`links`,
    /// from [`Loaded::tc_links`]) or its filter is on the device.
    pub fn runs_at(&self, p: &AttachPoint, links: &[(u32, Hook)]) -> Result<bool, LoadError> {
        match p.attach {
            Attach::Tcx => Ok(links.contains(&(p.ifindex, p.hook))),
            Attach::Filter => filter_attached(self.object, p.ifindex, p.hook)
                .map_err(|cause| LoadError::Program { name: p.hook.program(self.object).to_owned(), cause }),
        }
    }

    /// Removes the TC link of (interface, hook), if pinned: the program stops running there.
    pub fn detach_tc(&self, ifindex: u32, hook: Hook) -> Result<(), LoadError> {
        remove_pin(&self.pins_or_err()?.link(&tc_link_name(ifindex, hook)))
    }

    /// The (interface index, hook) of every pinned TC link.
    pub fn tc_links(&self) -> Result<Vec<(u32, Hook)>, LoadError> {
        let pins = self.pins_or_err()?;
        let names = pins.link_names().map_err(|e| LoadError::Io {
            action: "listing",
            path: pins.links(),
            source: std::io::Error::other(e),
        })?;
        Ok(names.iter().filter_map(|n| parse_tc_link_name(n)).collect())
    }

    /// Makes sure every socket hook runs on the cgroup (the root one: the hooks filter by
    /// network namespace themselves).
    pub fn attach_sockets(&mut self, cgroup: &OwnedFd) -> Result<(), LoadError> {
        let pins = self.pins_or_err()?;
        for name in SOCK_PROGRAMS {
            let path = pins.link(&sock_link_name(name));
            if self.pinned_link_is_current(&path, name)? {
                continue;
            }
            let program: &mut CgroupSockAddr = self.typed(name)?;
            // A BPF link (kernel 5.7+), which always coexists with other programs on the cgroup
            // (other agents' in tests, other tools); link_create refuses the attach flags, so
            // the mode must be the flag-less Single.
            let id = program.attach(cgroup, CgroupAttachMode::Single).map_err(program_error(name))?;
            let link = program.take_link(id).map_err(program_error(name))?;
            let link: FdLink = link.try_into().map_err(link_error(&path))?;
            pin_over(link, &path)?;
        }
        Ok(())
    }

    fn typed<'a, T>(&'a mut self, name: &'static str) -> Result<&'a mut T, LoadError>
    where
        &'a mut T: TryFrom<&'a mut Program>,
    {
        let program = self.ebpf.program_mut(name).ok_or(LoadError::MissingProgram(name))?;
        program.try_into().map_err(|_| LoadError::MissingProgram(name))
    }

    /// True when a link is pinned at `path` and runs our program `name`, or an identical one.
    fn pinned_link_is_current(&mut self, path: &Path, name: &'static str) -> Result<bool, LoadError> {
        if !path.exists() {
            return Ok(false);
        }
        let link: FdLink = PinnedLink::from_pin(path).map_err(link_error(path))?.into();
        let program_id = link.info().map_err(link_error(path))?.program_id();
        if self.equivalent.contains(&(name, program_id)) {
            return Ok(true);
        }
        let Some(tag) = self.tags.get(name).copied() else { return Ok(false) };
        let same = aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .find(|p| p.id() == program_id)
            .is_some_and(|p| p.tag() == tag && p.name_as_str() == Some(name));
        if same {
            self.equivalent.insert((name, program_id));
        }
        Ok(same)
    }
}

/// Whether our filter of `hook` is on the interface, asked over netlink (blocking: callers
/// run off the async workers).
fn filter_attached(object: &Object, ifindex: u32, hook: Hook) -> Result<bool, String> {
    use futures::TryStreamExt;
    use netlink_packet_route::tc::{TcAttribute, TcMessage};
    let index = i32::try_from(ifindex).map_err(|_| format!("interface index {ifindex} out of range"))?;
    let query = async move {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
        let driver = tokio::spawn(connection);
        let request = handle.traffic_filter(index).get();
        let request = match hook {
            Hook::Ingress => request.ingress(),
            Hook::Egress => request.egress(),
        };
        let filters: Result<Vec<TcMessage>, _> = request.execute().try_collect().await;
        driver.abort();
        filters.map_err(|e| format!("listing the filters of interface {ifindex}: {e}"))
    };
    let filters = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.block_on(query),
        Err(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for netlink: {e}"))?
            .block_on(query),
    }?;
    let handle = u32::from(object.filter_handle);
    Ok(filters.iter().any(|f| {
        u32::from(f.header.handle) == handle
            && f.header.info >> 16 == u32::from(object.filter_priority)
            && f.attributes.iter().any(|a| matches!(a, TcAttribute::Kind(k) if k == "bpf"))
    }))
}

/// True when a filter detach failed only because the filter or its device is gone.
fn filter_gone(e: &aya::programs::ProgramError) -> bool {
    let text = chain(e);
    ["No such file or directory", "No such device", "Invalid argument"].iter().any(|m| text.contains(m))
}

/// Puts the SCTP fixup program into the (pinned, shared) program array. Programs of an earlier
/// run still attached tail-call the new one from now on: the control-buffer protocol between
/// them is part of the object's ABI, like the map layouts.
fn install_tail_calls(ebpf: &mut Ebpf) -> Result<(), LoadError> {
    let fd = match ebpf.program(TC_SCTP) {
        Some(Program::SchedClassifier(p)) => p.fd().map_err(program_error(TC_SCTP))?.try_clone(),
        _ => return Err(LoadError::MissingProgram(TC_SCTP)),
    }
    .map_err(|source| LoadError::Io { action: "duplicating the fd of", path: TC_SCTP.into(), source })?;
    let map = ebpf.map_mut(MAP_TAIL).ok_or(LoadError::MissingProgram(MAP_TAIL))?;
    let mut tail: ProgramArray<&mut aya::maps::MapData> =
        ProgramArray::try_from(map).map_err(|e| LoadError::Map { name: MAP_TAIL, cause: chain(&e) })?;
    tail.set(TAIL_SCTP, &fd, 0).map_err(|e| LoadError::Map { name: MAP_TAIL, cause: chain(&e) })
}

/// Pins `link` at `path`, replacing whatever is pinned there in one step: the new link is
/// pinned next to it and renamed over it, so the old one is released only once the new one
/// runs.
fn pin_over(link: FdLink, path: &Path) -> Result<(), LoadError> {
    // bpffs refuses names with a dot.
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("link");
    let tmp = path.with_file_name(format!("{name}_new"));
    remove_pin(&tmp)?;
    link.pin(&tmp).map_err(|e| LoadError::Pin { path: tmp.clone(), cause: chain(&e) })?;
    std::fs::rename(&tmp, path).map_err(|source| LoadError::Io {
        action: "renaming a pin to",
        path: path.to_owned(),
        source,
    })
}

fn remove_pin(path: &Path) -> Result<(), LoadError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LoadError::Io { action: "removing", path: path.to_owned(), source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_link_names_round_trip() {
        for hook in [Hook::Ingress, Hook::Egress] {
            assert_eq!(parse_tc_link_name(&tc_link_name(42, hook)), Some((42, hook)));
        }
        assert_eq!(parse_tc_link_name("cg_pm_connect4"), None);
        assert_eq!(parse_tc_link_name("tc_x_in"), None);
        assert_eq!(parse_tc_link_name("tc_3_in_new"), None);
    }
}
