//! Loading an embedded BPF object (each feature describes its own, see [`Object`]) and attaching
//! its programs, so that attachments survive the agent: maps reuse their pins, and every
//! attachment is a pinned BPF link or a filter on the device.
//!
//! A restarted agent loads the object again. Its maps are the pinned ones (entries intact); its
//! programs are new kernel objects, but the links pinned by the previous run keep running the
//! old ones. When an old program has the same tag (the same instructions) as the new one, its
//! link is left alone: a restart changes nothing in the packet path. When it differs (an
//! upgrade), the new program is attached next to it first and the old link is replaced by the
//! new one in the pin directory (rename over it), so there is no moment without a program.
//!
//! The programs log their rare events with aya-log-ebpf into the object's `AYA_LOGS` ring
//! buffer, pinned with its maps: a restarted agent opens the same buffer, so the programs a
//! previous run attached (kept when their tag is the same) and this run's write where this
//! run reads ([`ProgramLog`]: the records become `tracing` events at debug, through the `log`
//! crate, under targets `plexus_ebpf::...`). Whether they log at all is fixed when they are
//! loaded (aya-log-ebpf's `AYA_LOG_LEVEL`, read-only data): debug when the agent shows the
//! programs' debug events, else off, and then the verifier prunes the logging code. The level
//! is not in a program's tag: a restart with another level keeps the programs attached with
//! theirs until an upgrade replaces them (or their pins are removed).

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use aya::programs::links::{FdLink, LinkError, PinnedLink};
use aya::programs::tc::{qdisc_add_clsact, NlOptions, SchedClassifierLink, TcAttachOptions, TcHandle};
use aya::programs::{CgroupAttachMode, CgroupSockAddr, LinkOrder, Program, ProgramError, SchedClassifier};
use aya::{Ebpf, EbpfError, EbpfLoader};

use super::attach::{Attach, AttachPoint, Hook};
use super::errno::{program_errno, tc_errno};
use super::maps::TableError;
use super::netdev::{self, NetdevError};
use super::pin::{PinDir, PinError};
use crate::cni::error::chain;

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
    /// The cgroup sock_addr programs (the attach type is in each program's section), attached
    /// by [`Loaded::attach_sockets`].
    pub sock_programs: &'static [&'static str],
    /// The XDP program of [`Attach::Xdp`] points, if the object has one (see [`super::xdp`]).
    pub xdp: Option<&'static str>,
    /// Another object whose XDP program does all this one's does and more, by its pin
    /// directory relative to this object's: an interface where that one runs is left to it.
    pub xdp_defers_to: Option<&'static str>,
    /// The converse: an object whose XDP program this one's replaces, by its pin directory
    /// relative to this object's: on an interface where that one runs, its link is removed
    /// before this one attaches (an interface holds one XDP program).
    pub xdp_displaces: Option<&'static str>,
    /// Whether its TC programs go first on a hook (port mappings, which rewrite what the
    /// others should see) or last (shaping, which should count what actually leaves).
    pub first: bool,
    /// Where its cls_bpf filters sit ([`Attach::Filter`]): priority (lower runs first) and
    /// handle, fixed so that a restarted agent finds and replaces them.
    pub filter_priority: u16,
    pub filter_handle: TcHandle,
}

impl Object {
    /// Whether every map of the object is pinned in `pins`. An agent loading the object pins
    /// its maps one at a time (and a shared map may come first, from the other object), so a
    /// reader that finds only some of them is looking at a load under way, or at one that a
    /// kill interrupted and the next start completes.
    pub fn pinned_in(&self, pins: &PinDir) -> bool {
        self.maps.iter().all(|m| pins.map(m).exists())
    }

    /// The TC program of a hook.
    fn program(&self, hook: Hook) -> &'static str {
        match hook {
            Hook::Ingress => self.tc_ingress,
            Hook::Egress => self.tc_egress,
        }
    }
}

/// The map aya-log-ebpf writes the programs' log records to.
pub const LOG_MAP: &str = "AYA_LOGS";

/// The global variable of aya-log-ebpf that says which levels the programs log.
const LOG_LEVEL: &str = "AYA_LOG_LEVEL";

/// aya-log's levels (aya_log_common::Level): nothing, and up to debug.
static LOG_OFF: u8 = 0;
static LOG_DEBUG: u8 = 4;

/// The programs' log level for a load: debug when the agent's `tracing` shows debug events of
/// the programs (`RUST_LOG=info,plexus_ebpf=debug`), else nothing.
fn program_log_level() -> &'static u8 {
    if tracing::enabled!(target: "plexus_ebpf", tracing::Level::DEBUG) {
        &LOG_DEBUG
    } else {
        &LOG_OFF
    }
}

/// How long the log reader waits for records before it looks whether it should stop.
const LOG_POLL_MS: i32 = 250;

/// Reads the log records of an object's programs (aya-log) on a thread of its own, into the
/// `log` crate, which the agent's `tracing` subscriber takes in (tracing-subscriber's `init`
/// installs the `log` bridge): debug events under the programs' module paths
/// (`RUST_LOG=info,plexus_ebpf=debug` shows them). Stops when dropped.
struct ProgramLog {
    stop: Arc<AtomicBool>,
}

impl ProgramLog {
    /// Starts reading the object's `AYA_LOGS`; `None` (logged) when the object has none or it
    /// cannot be read: the programs then run unheard, which is no reason not to run them.
    fn start(ebpf: &mut Ebpf) -> Option<ProgramLog> {
        // An object without log calls has no buffer.
        ebpf.map(LOG_MAP)?;
        let mut logger = match aya_log::EbpfLogger::init(ebpf) {
            Ok(logger) => logger,
            Err(e) => {
                tracing::warn!("the BPF programs' log cannot be read, their rare events go unlogged: {e}");
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let spawned = std::thread::Builder::new().name("bpf-log".into()).spawn(move || {
            let fd = logger.as_raw_fd();
            while !stopped.load(Ordering::Relaxed) {
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd, valid for the call; the fd is the logger's, open while it lives.
                let ready = unsafe { libc::poll(&mut pfd, 1, LOG_POLL_MS) };
                if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                    tracing::warn!(
                        "waiting for the BPF programs' log records: {}; they go unlogged",
                        std::io::Error::last_os_error()
                    );
                    return;
                }
                if ready > 0 {
                    logger.flush();
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("starting the BPF programs' log reader: {e}; their rare events go unlogged");
            return None;
        }
        Some(ProgramLog { stop })
    }
}

impl Drop for ProgramLog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
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
    #[error("loading the BPF object: {}", chain(.0))]
    Object(#[source] Box<EbpfError>),
    #[error("reading the embedded BPF object's maps: {0}")]
    Parse(#[source] Box<aya_obj::ParseError>),
    #[error("the BPF object has no program or map {0} (an agent built from mismatched sources)")]
    MissingProgram(&'static str),
    #[error("BPF program {name}: {}", chain(.source))]
    Program {
        name: &'static str,
        #[source]
        source: Box<ProgramError>,
    },
    #[error("BPF program {name}: {action} {ifname}: {}", chain(.source))]
    Filter {
        name: &'static str,
        action: &'static str,
        ifname: String,
        #[source]
        source: Box<ProgramError>,
    },
    #[error("BPF program {name}: {ifname}: {source}")]
    FilterLookup {
        name: &'static str,
        ifname: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "BPF program {name}: attaching to {ifname}: {}; replacing a previous filter: {}",
        chain(.created),
        chain(.source)
    )]
    FilterReplace {
        name: &'static str,
        ifname: String,
        created: Box<ProgramError>,
        #[source]
        source: Box<ProgramError>,
    },
    #[error("adding the clsact qdisc to {ifname}: {}", chain(.source))]
    Clsact {
        ifname: String,
        #[source]
        source: Box<aya::programs::tc::TcError>,
    },
    #[error("BPF link {}: {}", .path.display(), chain(.source))]
    Link {
        path: PathBuf,
        #[source]
        source: Box<LinkError>,
    },
    #[error("pinning {}: {}", .path.display(), chain(.source))]
    Pin {
        path: PathBuf,
        #[source]
        source: Box<aya::pin::PinError>,
    },
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("attaching requires a pin directory (the link would die with the agent)")]
    NotPinned,
    #[error("BPF map {name}: {}", chain(.source))]
    Map {
        name: &'static str,
        #[source]
        source: Box<aya::maps::MapError>,
    },
    #[error(transparent)]
    Netdev(#[from] NetdevError),
    #[error(transparent)]
    Pins(#[from] PinError),
}

/// Why an object could not be started: its pin directory, the load, or its maps.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Table(#[from] TableError),
}

fn program_error(name: &'static str) -> impl FnOnce(ProgramError) -> LoadError {
    move |source| LoadError::Program { name, source: Box::new(source) }
}

fn link_error(path: &Path) -> impl Fn(LinkError) -> LoadError + '_ {
    move |source| LoadError::Link { path: path.to_owned(), source: Box::new(source) }
}

/// The loaded object: its maps (pinned ones when there is a pin directory) and programs.
pub struct Loaded {
    object: &'static Object,
    ebpf: Ebpf,
    pins: Option<PinDir>,
    /// Tags of our programs, by name.
    tags: HashMap<&'static str, u64>,
    /// How many instructions the verifier walked for each program of this load (the kernel's
    /// `verified_insns`), in the object's order; `None` where the kernel does not say.
    verified: Vec<(&'static str, Option<u32>)>,
    /// (name, program id) known to run that program's code: ours, and an earlier run's
    /// identical programs.
    equivalent: BTreeSet<(&'static str, u32)>,
    /// Whether [`Attach::Xdp`] points get the XDP program (`--no-xdp` turns it off).
    xdp_enabled: bool,
    /// The reader of the programs' log records, while the object is loaded.
    _log: Option<ProgramLog>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("pins", &self.pins).finish_non_exhaustive()
    }
}

impl Loaded {
    /// Loads an embedded object. With `pins`, maps are created at (or reused from) their pin
    /// paths and programs are pinned too; without, everything lives as long as the `Loaded`
    /// (tests).
    pub fn load_object(object: &'static Object, pins: Option<PinDir>) -> Result<Loaded, LoadError> {
        Loaded::load_object_sized(object, pins, &[])
    }

    /// [`Loaded::load_object`], with the `max_entries` of some maps chosen at load: `sizes`
    /// lists (map name, entries). A map already pinned keeps its size (and its entries): the
    /// kernel cannot resize a map. A different size is logged, and applies once the pin is
    /// removed.
    pub fn load_object_sized(
        object: &'static Object,
        pins: Option<PinDir>,
        sizes: &[(&'static str, u32)],
    ) -> Result<Loaded, LoadError> {
        let mut loader = EbpfLoader::new();
        // The programs need no CO-RE relocations: skip parsing the kernel's BTF.
        loader.btf(None);
        // Read-only data, which the verifier takes as a constant: with logging off, it prunes
        // the logging code, which then costs no verification (see the module's notes).
        loader.override_global(LOG_LEVEL, program_log_level(), false);
        for &(name, entries) in sizes {
            loader.map_max_entries(name, entries);
            if let Some(pins) = &pins {
                warn_if_pinned_differently(&pins.map(name), name, entries);
            }
        }
        let mut paths: Vec<(&'static str, PathBuf)> =
            pins.iter().flat_map(|p| object.maps.iter().map(move |m| (*m, p.map(m)))).collect();
        // The log ring buffer is pinned too (not one of `object.maps`, which say whether an
        // object is pinned): see the module's notes.
        if let Some(pins) = &pins {
            paths.push((LOG_MAP, pins.map(LOG_MAP)));
        }
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
        let mut ebpf = load_tolerating_other_loaders(&mut loader, object, &paths)?;

        let mut tags = HashMap::new();
        let mut own = BTreeSet::new();
        let mut verified = Vec::new();
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
                Program::Xdp(p) => {
                    p.load().map_err(program_error(name))?;
                    p.info()
                }
                _ => return Err(LoadError::MissingProgram(name)),
            }
            .map_err(program_error(name))?;
            tags.insert(name, info.tag());
            own.insert((name, info.id()));
            verified.push((name, info.verified_instruction_count()));
            if let Some(pins) = &pins {
                // Another agent may pin the same name at the same moment: pinned aside, then
                // renamed over, the last one wins and neither fails.
                let path = pins.prog(name);
                let tmp = pin_aside(&path);
                remove_pin(&tmp)?;
                program
                    .pin(&tmp)
                    .map_err(|source| LoadError::Pin { source: Box::new(source), path: tmp.clone() })?;
                rename_pin(&tmp, &path)?;
            }
        }
        let log = ProgramLog::start(&mut ebpf);
        Ok(Loaded { object, ebpf, pins, tags, verified, equivalent: own, xdp_enabled: true, _log: log })
    }

    /// Removes the pins of maps that earlier versions of the object had and this one has not
    /// (after a successful load: programs of the earlier run still attached keep their maps
    /// until they are replaced).
    pub fn remove_retired_maps(&self, names: &[&str]) -> Result<(), LoadError> {
        if let Some(pins) = &self.pins {
            for name in names {
                let path = pins.map(name);
                if path.exists() {
                    remove_pin(&path)?;
                    tracing::info!(map = %name, "removed the pin of a map this version no longer uses");
                }
            }
        }
        Ok(())
    }

    /// How many instructions the verifier walked for each program when this load loaded it
    /// (bpf_prog_info's `verified_insns`, kernel 5.16+), in the object's order: the measure of
    /// a program's verification cost that docs/dataplane.md records per program.
    pub fn verified_instructions(&self) -> &[(&'static str, Option<u32>)] {
        &self.verified
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

    pub fn object(&self) -> &'static Object {
        self.object
    }

    pub fn xdp_enabled(&self) -> bool {
        self.xdp_enabled
    }

    /// Turns the XDP program off (`--no-xdp`): [`Attach::Xdp`] points get nothing, and the
    /// services' reconciling detaches what an earlier run attached.
    pub fn set_xdp_enabled(&mut self, enabled: bool) {
        self.xdp_enabled = enabled;
    }

    pub(super) fn pins_or_err(&self) -> Result<PinDir, LoadError> {
        self.pins.clone().ok_or(LoadError::NotPinned)
    }

    /// Makes sure the TC program of `hook` runs on the interface (idempotent, cheap when it
    /// already does).
    pub fn attach_tc(&mut self, ifindex: u32, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        if self.tc_link_is_current(ifindex, hook)? {
            return Ok(());
        }
        let link = unpinned_tc_link(&self.pins_or_err()?, self.object, ifname, hook)?;
        self.pin_tc_link(ifindex, hook, link)
    }

    /// Makes sure the TC program of `hook` runs on the interface as a cls_bpf filter
    /// ([`Attach::Filter`]): created, or, when one of ours is there already (a previous run's),
    /// replaced in place by this run's program (atomic in cls_bpf: no packet misses it).
    pub fn attach_filter(&mut self, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        let name = self.object.program(hook);
        let (priority, handle) = (self.object.filter_priority, self.object.filter_handle);
        let program: &mut SchedClassifier = self.typed(name)?;
        attach_filter_program(program, name, ifname, hook, (priority, handle), None)
    }

    /// Removes our cls_bpf filter of `hook` from the interface; a device or filter that is gone
    /// already is fine.
    pub fn detach_filter(&self, ifname: &str, hook: Hook) -> Result<(), LoadError> {
        let (priority, handle) = (self.object.filter_priority, self.object.filter_handle);
        let name = self.object.program(hook);
        let link = match SchedClassifierLink::attached(ifname, hook.attach_type(), priority, handle, None) {
            Ok(link) => link,
            // The device is gone, and its filters with it.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Ok(()),
            Err(source) => return Err(LoadError::FilterLookup { name, ifname: ifname.to_owned(), source }),
        };
        match aya::programs::Link::detach(link) {
            Ok(()) => Ok(()),
            Err(e) if filter_gone(&e) => Ok(()),
            Err(source) => Err(LoadError::Filter {
                name,
                action: "detaching from",
                ifname: ifname.to_owned(),
                source: Box::new(source),
            }),
        }
    }

    /// Whether the TCX link pinned for (interface, hook), if any, runs this object's program
    /// (or an identical one).
    pub fn tc_link_is_current(&mut self, ifindex: u32, hook: Hook) -> Result<bool, LoadError> {
        let path = self.pins_or_err()?.link(&tc_link_name(ifindex, hook));
        self.pinned_link_is_current(&path, self.object.program(hook))
    }

    /// Pins a link made by [`unpinned_tc_link`] as the TCX link of (interface, hook), replacing
    /// whatever is pinned there.
    pub fn pin_tc_link(&self, ifindex: u32, hook: Hook, link: FdLink) -> Result<(), LoadError> {
        pin_over(link, &self.pins_or_err()?.link(&tc_link_name(ifindex, hook)))
    }

    /// Makes sure the program of an attach point runs there, as a TCX link or a filter; an XDP
    /// point's program is optional (see [`super::xdp`]): failing to attach it is logged, and
    /// TC does its work. A filter point whose hook already has a TCX link of this program
    /// (moved there after an earlier ADD, see [`Attach::Filter`]) is left as it is.
    pub fn attach_point(&mut self, p: &AttachPoint) -> Result<(), LoadError> {
        match p.attach {
            Attach::Tcx => self.attach_tc(p.ifindex, &p.ifname, p.hook),
            Attach::Filter => {
                if self.pins.is_some() && self.tc_link_is_current(p.ifindex, p.hook)? {
                    return Ok(());
                }
                self.attach_filter(&p.ifname, p.hook)
            }
            Attach::Xdp => {
                if let Err(e) = self.attach_xdp(p.ifindex, &p.ifname) {
                    tracing::warn!(interface = %p.ifname, "no XDP on {}, TC does all the work there: {e}", p.ifname);
                }
                Ok(())
            }
        }
    }

    /// Stops the program of an attach point running there (a filter point's TCX link too).
    pub fn detach_point(&self, p: &AttachPoint) -> Result<(), LoadError> {
        match p.attach {
            Attach::Tcx => self.detach_tc(p.ifindex, p.hook),
            Attach::Filter => {
                self.detach_filter(&p.ifname, p.hook)?;
                match self.pins {
                    Some(_) => self.detach_tc(p.ifindex, p.hook),
                    None => Ok(()),
                }
            }
            Attach::Xdp => self.detach_xdp(p.ifindex),
        }
    }

    /// Whether the program of an attach point runs there: its TCX link is pinned (`links`,
    /// from [`Loaded::tc_links`]) or, for a filter point, either its TCX link is or its filter
    /// is on the device. An XDP point always counts as running: the TC hooks carry everything
    /// it does.
    pub fn runs_at(&self, p: &AttachPoint, links: &[(u32, Hook)]) -> Result<bool, LoadError> {
        match p.attach {
            Attach::Xdp => Ok(true),
            Attach::Tcx => Ok(links.contains(&(p.ifindex, p.hook))),
            Attach::Filter if links.contains(&(p.ifindex, p.hook)) => Ok(true),
            Attach::Filter => Ok(netdev::bpf_filter_present(
                p.ifindex,
                p.hook,
                self.object.filter_priority,
                u32::from(self.object.filter_handle),
            )?),
        }
    }

    /// Removes the TC link of (interface, hook), if pinned: the program stops running there.
    pub fn detach_tc(&self, ifindex: u32, hook: Hook) -> Result<(), LoadError> {
        remove_pin(&self.pins_or_err()?.link(&tc_link_name(ifindex, hook)))
    }

    /// The (interface index, hook) of every pinned TC link.
    pub fn tc_links(&self) -> Result<Vec<(u32, Hook)>, LoadError> {
        let pins = self.pins_or_err()?;
        let names = pins.link_names()?;
        Ok(names.iter().filter_map(|n| parse_tc_link_name(n)).collect())
    }

    /// Makes sure every socket hook runs on the cgroup (the root one: the hooks filter by
    /// network namespace themselves).
    pub fn attach_sockets(&mut self, cgroup: &OwnedFd) -> Result<(), LoadError> {
        let pins = self.pins_or_err()?;
        for &name in self.object.sock_programs {
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

    pub(super) fn typed<'a, T>(&'a mut self, name: &'static str) -> Result<&'a mut T, LoadError>
    where
        &'a mut T: TryFrom<&'a mut Program>,
    {
        let program = self.ebpf.program_mut(name).ok_or(LoadError::MissingProgram(name))?;
        program.try_into().map_err(|_| LoadError::MissingProgram(name))
    }

    /// True when a link is pinned at `path` and runs our program `name`, or an identical one.
    pub(super) fn pinned_link_is_current(
        &mut self,
        path: &Path,
        name: &'static str,
    ) -> Result<bool, LoadError> {
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

/// A TCX link of `object`'s program for `hook` on `ifname`, first or last on the hook as the
/// object goes, attached but not pinned: the caller pins it ([`Loaded::pin_tc_link`]) or drops
/// it, which detaches it. Made from the program's pin (which the load wrote), a handle of its
/// own, so it needs nothing of the loaded object: the attach waits for an RCU grace period in
/// the kernel (5 to 50 ms measured here), which the service's move of a pod's hook spends
/// without holding its lock.
pub fn unpinned_tc_link(
    pins: &PinDir,
    object: &'static Object,
    ifname: &str,
    hook: Hook,
) -> Result<FdLink, LoadError> {
    let name = object.program(hook);
    let mut program = SchedClassifier::from_pin(pins.prog(name)).map_err(program_error(name))?;
    let order = if object.first { LinkOrder::first() } else { LinkOrder::last() };
    let id = program
        .attach_with_options(ifname, hook.attach_type(), TcAttachOptions::TcxOrder(order))
        .map_err(program_error(name))?;
    let link = program.take_link(id).map_err(program_error(name))?;
    let path = pins.prog(name);
    link.try_into().map_err(link_error(&path))
}

/// Makes sure `program` (named `name`) runs on `hook` of the interface `ifname` of the calling
/// thread's network namespace as a cls_bpf filter at (`priority`, `handle`), with `classid`
/// (which the program reads in `skb->tc_classid`): created, or, when a filter is there already
/// (a previous run's), replaced in place (atomic in cls_bpf: no packet misses it). The filter
/// lives on the device, not in this process.
pub fn attach_filter_program(
    program: &mut SchedClassifier,
    name: &'static str,
    ifname: &str,
    hook: Hook,
    (priority, handle): (u16, TcHandle),
    classid: Option<TcHandle>,
) -> Result<(), LoadError> {
    // clsact may already be there (ours, or someone else's): both are fine.
    match qdisc_add_clsact(ifname) {
        Err(e) if tc_errno(&e) != Some(libc::EEXIST) => {
            return Err(LoadError::Clsact { ifname: ifname.to_owned(), source: Box::new(e) })
        }
        _ => {}
    }
    let options = NlOptions { priority, handle, classid };
    let id = match program.attach_with_options(ifname, hook.attach_type(), TcAttachOptions::Netlink(options))
    {
        Ok(id) => id,
        Err(created) => {
            let existing = SchedClassifierLink::attached(ifname, hook.attach_type(), priority, handle, None)
                .map_err(|source| LoadError::FilterLookup { name, ifname: ifname.to_owned(), source })?;
            program.attach_to_link(existing).map_err(|source| LoadError::FilterReplace {
                name,
                ifname: ifname.to_owned(),
                created: Box::new(created),
                source: Box::new(source),
            })?
        }
    };
    // The filter stays when the link handle goes: it lives on the device, like a pin.
    let link = program.take_link(id).map_err(program_error(name))?;
    std::mem::forget(link);
    Ok(())
}

/// Logs when the map pinned at `path` has another size than `entries`: the pinned one is used.
fn warn_if_pinned_differently(path: &Path, name: &str, entries: u32) {
    let Ok(info) = aya::maps::MapInfo::from_pin(path) else { return };
    if info.max_entries() != entries {
        tracing::warn!(
            map = %name,
            pinned = info.max_entries(),
            asked = entries,
            "the pinned map {name} holds at most {} entries, not the {entries} asked: it is kept, with its \
             entries; the new size applies once {} is removed (which drops them) and the agent restarts",
            info.max_entries(),
            path.display()
        );
    }
}

/// True when a filter detach failed only because the filter or its device is gone: ENOENT
/// (no such filter), ENODEV (no such device), EINVAL (the device lost its clsact qdisc).
fn filter_gone(e: &ProgramError) -> bool {
    matches!(program_errno(e), Some(libc::ENOENT | libc::ENODEV | libc::EINVAL))
}

/// Pins `link` at `path`, replacing whatever is pinned there in one step: the new link is
/// pinned next to it and renamed over it, so the old one is released only once the new one
/// runs.
pub(super) fn pin_over(link: FdLink, path: &Path) -> Result<(), LoadError> {
    let tmp = pin_aside(path);
    remove_pin(&tmp)?;
    link.pin(&tmp).map_err(|source| LoadError::Pin { path: tmp.clone(), source: Box::new(source) })?;
    rename_pin(&tmp, path)
}

/// Where this process pins something before renaming it over `path`: a name of its own (the
/// process ID), so that two agents replacing one pin at once never pin the same temporary name.
/// bpffs refuses names with a dot.
fn pin_aside(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("pin");
    path.with_file_name(format!("{name}_new{}", std::process::id()))
}

fn rename_pin(tmp: &Path, path: &Path) -> Result<(), LoadError> {
    std::fs::rename(tmp, path).map_err(|source| LoadError::Io {
        action: "renaming a pin to",
        path: path.to_owned(),
        source,
    })
}

/// How many times a load is tried again when another loader pinned one of its maps between
/// aya's lookup of the pin and its own pin (each try finds more of the maps pinned).
const PIN_RACE_TRIES: usize = 8;

/// Loads `object`, its maps at `paths`, where other agents may be loading the same object
/// into the same pin directory at the same time (a DaemonSet update with `maxSurge`, a restart
/// that overlaps the old process). aya opens a map that is pinned and creates and pins one that
/// is not; when another loader pins it in between, aya's pin fails with EEXIST, and the load is
/// made again, now opening that pin. Before each try, a pinned map this object cannot use (an
/// older version's layout: another type, key, value or flags) is unpinned, so the load creates
/// a new one: the programs of the older version that still run keep theirs until their links
/// are replaced, as in any upgrade.
fn load_tolerating_other_loaders(
    loader: &mut EbpfLoader<'_>,
    object: &'static Object,
    paths: &[(&'static str, PathBuf)],
) -> Result<Ebpf, LoadError> {
    let declared = aya_obj::Object::parse(object.bytes).map_err(|e| LoadError::Parse(Box::new(e)))?;
    let mut tries = 0;
    loop {
        tries += 1;
        for (name, path) in paths {
            let Some(wanted) = declared.maps.get(*name) else { continue };
            let Ok(info) = aya::maps::MapInfo::from_pin(path) else { continue };
            if let Some(why) = pinned_layout_differs(&info, &MapLayout::of(wanted)) {
                tracing::warn!(
                    map = %name,
                    "the pinned map {} has {why}: an older version's, replaced by a new map (programs still \
                     using it keep it until theirs are replaced)",
                    path.display()
                );
                remove_pin(path)?;
            }
        }
        // One object at a time in this process: a shared map is created and pinned by
        // whichever comes first, and found by the other.
        static LOADING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = LOADING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let loaded = loader.load(object.bytes);
        drop(guard);
        match loaded {
            Err(e) if tries < PIN_RACE_TRIES && map_pinned_meanwhile(&e) => {
                tracing::debug!(
                    "another loader pinned a map of this object meanwhile: loading again, opening its pin"
                );
            }
            other => return other.map_err(|e| LoadError::Object(Box::new(e))),
        }
    }
}

/// What decides whether a pinned map can stand for a map of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLayout {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub flags: u32,
}

impl MapLayout {
    fn of(map: &aya_obj::Map) -> MapLayout {
        MapLayout {
            map_type: map.map_type(),
            key_size: map.key_size(),
            value_size: map.value_size(),
            flags: map.map_flags(),
        }
    }
}

/// Why the pinned map `info` cannot stand for a map of layout `wanted`, if it cannot.
fn pinned_layout_differs(info: &aya::maps::MapInfo, wanted: &MapLayout) -> Option<String> {
    let pinned_type = info.map_type().ok();
    let wanted_type = aya_obj::generated::bpf_map_type::try_from(wanted.map_type)
        .ok()
        .and_then(|t| aya::maps::MapType::try_from(t).ok());
    let pinned = MapLayout {
        map_type: wanted.map_type,
        key_size: info.key_size(),
        value_size: info.value_size(),
        flags: info.map_flags(),
    };
    if pinned_type.is_none() || pinned_type != wanted_type {
        return Some(format!("type {pinned_type:?}, not {wanted_type:?}"));
    }
    layout_differs(&pinned, wanted)
}

/// Why a map of layout `pinned` cannot stand for one of layout `wanted` (type compared by the
/// caller's reading of it), if it cannot.
pub fn layout_differs(pinned: &MapLayout, wanted: &MapLayout) -> Option<String> {
    let mut why = Vec::new();
    if pinned.map_type != wanted.map_type {
        why.push(format!("type {}, not {}", pinned.map_type, wanted.map_type));
    }
    if pinned.key_size != wanted.key_size {
        why.push(format!("{}-byte keys, not {}", pinned.key_size, wanted.key_size));
    }
    if pinned.value_size != wanted.value_size {
        why.push(format!("{}-byte values, not {}", pinned.value_size, wanted.value_size));
    }
    if pinned.flags != wanted.flags {
        why.push(format!("flags {:#x}, not {:#x}", pinned.flags, wanted.flags));
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// Whether a load failed only because a map's pin appeared after aya looked for it: another
/// loader pinned it first (EEXIST from BPF_OBJ_PIN).
fn map_pinned_meanwhile(e: &EbpfError) -> bool {
    let EbpfError::MapError(aya::maps::MapError::PinError {
        error: aya::pin::PinError::SyscallError(s), ..
    }) = e
    else {
        return false;
    };
    s.io_error.raw_os_error() == Some(libc::EEXIST)
}

pub fn remove_pin(path: &Path) -> Result<(), LoadError> {
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
    fn a_map_layout_differs_by_type_key_value_or_flags_and_says_how() {
        let wanted = MapLayout { map_type: 9, key_size: 16, value_size: 200, flags: 0 };
        assert_eq!(layout_differs(&wanted, &wanted), None);
        let cases = [
            (MapLayout { map_type: 1, ..wanted }, "type 1, not 9"),
            (MapLayout { key_size: 12, ..wanted }, "12-byte keys, not 16"),
            (MapLayout { value_size: 192, ..wanted }, "192-byte values, not 200"),
            (MapLayout { flags: 2, ..wanted }, "flags 0x2, not 0x0"),
        ];
        for (pinned, why) in cases {
            assert_eq!(layout_differs(&pinned, &wanted).as_deref(), Some(why));
        }
        let all = MapLayout { map_type: 1, key_size: 4, value_size: 8, flags: 1 };
        assert_eq!(
            layout_differs(&all, &wanted).as_deref(),
            Some("type 1, not 9, 4-byte keys, not 16, 8-byte values, not 200, flags 0x1, not 0x0")
        );
    }

    #[test]
    fn tc_link_names_round_trip() {
        for hook in [Hook::Ingress, Hook::Egress] {
            assert_eq!(parse_tc_link_name(&tc_link_name(42, hook)), Some((42, hook)));
        }
        assert_eq!(parse_tc_link_name("cg_pm_connect4"), None);
        assert_eq!(parse_tc_link_name("tc_x_in"), None);
        assert_eq!(parse_tc_link_name("tc_3_in_new"), None);
    }

    /// Loads both objects (no pins) and prints how many instructions the verifier walked for
    /// each program: the table of docs/dataplane.md, reproduced with
    /// `cargo test -p plexus-agent kernel_verifier_instruction_counts -- --nocapture`.
    #[test]
    fn kernel_verifier_instruction_counts() {
        let objects = [
            ("plexus-ebpf", &crate::dataplane::portmap::mapper::OBJECT),
            ("plexus-bandwidth", &crate::dataplane::bandwidth::shaper::OBJECT),
        ];
        println!("| object | program | verified instructions |");
        println!("|---|---|---:|");
        for (file, object) in objects {
            let loaded = Loaded::load_object(object, None).expect("the object loads");
            assert_eq!(loaded.verified_instructions().len(), object.programs.len());
            for (name, count) in loaded.verified_instructions() {
                let count = count.expect("this kernel reports verified_insns (5.16+)");
                assert!(count > 0, "{name}: no instruction verified");
                println!("| {file} | {name} | {count} |");
            }
        }
    }

    #[test]
    fn an_object_is_pinned_only_when_every_map_is() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let pins = PinDir::open(dir.path());
        let object = &crate::dataplane::bandwidth::shaper::OBJECT;
        assert!(!object.pinned_in(&pins), "nothing pinned");
        std::fs::create_dir_all(pins.maps()).expect("the maps directory");
        let (last, first) = object.maps.split_last().expect("the object has maps");
        for map in first {
            std::fs::write(pins.map(map), b"").expect("a stand-in pin");
        }
        assert!(!object.pinned_in(&pins), "{last} is not pinned yet");
        std::fs::write(pins.map(last), b"").expect("a stand-in pin");
        assert!(object.pinned_in(&pins));
    }
}
