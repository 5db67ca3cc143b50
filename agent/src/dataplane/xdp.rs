//! The object's XDP program on the interfaces where clients' traffic enters the node
//! ([`Attach::Xdp`](super::attach::Attach::Xdp)): attached as a pinned XDP link, native mode
//! where the driver supports it and generic otherwise, left alone when an identical program
//! runs there already (a restart), upgraded in place when it differs (`BPF_LINK_UPDATE` on the
//! pinned link: the interface never runs without a program), and detached by removing the pin.
//!
//! XDP only accelerates what the TC programs do anyway: where it cannot attach (another
//! program holds the interface's XDP hook, a driver refuses both modes, `--no-xdp`), the
//! failure is logged and TC does everything.
//!
//! Which mode an interface's program runs in is the kernel's to say (`IFLA_XDP`), read by
//! [`modes`] for `plexus-agent portmap list` and `bandwidth list`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::xdp::XdpLink;
use aya::programs::{Xdp, XdpMode};
use serde::Serialize;

use super::errno::program_errno;
use super::loader::{remove_pin, LoadError, Loaded};
use super::netdev::NetdevError;
use super::pin::PinDir;
use crate::netlink::{Netlink, XdpProgram};

/// How an XDP program runs on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// In the driver, before any socket buffer exists.
    Native,
    /// In the stack (`XDP_FLAGS_SKB_MODE`), for drivers without XDP support: after the skb is
    /// built, before everything else.
    Generic,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Generic => "generic",
        }
    }

    fn flags(self) -> XdpMode {
        match self {
            Mode::Native => XdpMode::Driver,
            Mode::Generic => XdpMode::Skb,
        }
    }
}

/// How long, at most, an attach waits for the link it displaced to be gone (see
/// [`Loaded::attach_xdp`]): `DISPLACED_RETRIES` times `DISPLACED_WAIT`.
const DISPLACED_RETRIES: u32 = 50;
const DISPLACED_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// Held while an object takes an interface's XDP hook: whether another object's program runs
/// there and the attach are one step, so two objects never both decide the hook is free (the
/// port mapping object taking it over while the shaping object takes it back).
static HOOK_OWNERSHIP: Mutex<()> = Mutex::new(());

/// The pin name of the XDP link of an interface.
pub fn link_name(ifindex: u32) -> String {
    format!("xdp_{ifindex}")
}

/// The interface index an XDP link pin name stands for.
pub fn parse_link_name(name: &str) -> Option<u32> {
    name.strip_prefix("xdp_")?.parse().ok()
}

/// The XDP program of a link as the kernel reports it, and its mode: `(program id, mode)`.
pub fn attached(program: Option<XdpProgram>) -> Option<(u32, Mode)> {
    program.map(|p| (p.id, if p.generic { Mode::Generic } else { Mode::Native }))
}

/// The XDP programs running on the node's interfaces: interface index → (program id, mode).
pub async fn modes() -> Result<BTreeMap<u32, (u32, Mode)>, NetdevError> {
    let links = Netlink::agent()?.links().await?;
    Ok(links.iter().filter_map(|l| attached(l.xdp).map(|a| (l.index, a))).collect())
}

/// [`modes`] from synchronous code (the listing subcommands).
pub fn modes_blocking() -> Result<BTreeMap<u32, (u32, Mode)>, NetdevError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NetdevError::Runtime)?
        .block_on(modes())
}

/// The interfaces running an object's XDP program (a link pinned in `pins`, the object's
/// directory) with their mode, as the kernel reports it; empty when netlink cannot
/// say (the listings then say TC).
pub fn pinned_modes(pins: &PinDir) -> BTreeMap<u32, Mode> {
    let ours: Vec<u32> =
        pins.link_names().unwrap_or_default().iter().filter_map(|n| parse_link_name(n)).collect();
    if ours.is_empty() {
        return BTreeMap::new();
    }
    match modes_blocking() {
        Ok(modes) => modes.into_iter().filter(|(i, _)| ours.contains(i)).map(|(i, (_, m))| (i, m)).collect(),
        Err(e) => {
            tracing::warn!("{e}; the XDP modes are unknown");
            BTreeMap::new()
        }
    }
}

impl Loaded {
    /// Makes sure the object's XDP program runs on `ifindex`: nothing to do when an identical
    /// one does, an in-place upgrade of the pinned link when another version does, else a new
    /// link, native mode first. Errors are the caller's to log: XDP is optional.
    pub fn attach_xdp(&mut self, ifindex: u32, ifname: &str) -> Result<Option<Mode>, LoadError> {
        self.take_xdp_hook(ifindex, ifname, false)
    }

    /// [`Loaded::attach_xdp`] on an interface whose XDP hook another object's program has just
    /// let go of: its link is freed a moment later, which this waits for.
    pub fn reclaim_xdp(&mut self, ifindex: u32, ifname: &str) -> Result<Option<Mode>, LoadError> {
        self.take_xdp_hook(ifindex, ifname, true)
    }

    fn take_xdp_hook(
        &mut self,
        ifindex: u32,
        ifname: &str,
        released: bool,
    ) -> Result<Option<Mode>, LoadError> {
        let Some(name) = self.object().xdp else { return Ok(None) };
        if !self.xdp_enabled() {
            return Ok(None);
        }
        let pins = self.pins_or_err()?;
        // A poisoned lock guards nothing broken: it only orders the attaches.
        let _owner = HOOK_OWNERSHIP.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let sibling = |dir: &str| PinDir::open(&pins.root().join(dir)).link(&link_name(ifindex));
        if let Some(dir) = self.object().xdp_defers_to {
            if sibling(dir).exists() {
                return Ok(None);
            }
        }
        let mut displaced = false;
        if let Some(dir) = self.object().xdp_displaces {
            let theirs = sibling(dir);
            if theirs.exists() {
                remove_pin(&theirs)?;
                displaced = true;
                tracing::info!(interface = %ifname, "took the interface's XDP hook over from the shaping object's program");
            }
        }
        let path = pins.link(&link_name(ifindex));
        if path.exists() {
            if self.pinned_link_is_current(&path, name)? {
                return Ok(None);
            }
            // Another version's program: replace it in the link (atomic in the kernel).
            let link: FdLink = PinnedLink::from_pin(&path)
                .map_err(|source| LoadError::Link { path: path.clone(), source: Box::new(source) })?
                .into();
            let link = XdpLink::try_from(link)
                .map_err(|source| LoadError::Link { path: path.clone(), source: Box::new(source) })?;
            let program: &mut Xdp = self.typed(name)?;
            let id = program.attach_to_link(link).map_err(program_error(name, ifname))?;
            // The link stays pinned where it was; our handle of it only closes.
            let link = program.take_link(id).map_err(program_error(name, ifname))?;
            let _fd: FdLink = link
                .try_into()
                .map_err(|source| LoadError::Link { path: path.clone(), source: Box::new(source) })?;
            tracing::info!(interface = %ifname, "upgraded the XDP program in place");
            return Ok(None);
        }
        let program: &mut Xdp = self.typed(name)?;
        let mut first_error = None;
        // A link whose last pin went is freed by a kernel work item, a moment later: until
        // then the hook is still busy with the program displaced.
        let mut busy_retries = if displaced || released { DISPLACED_RETRIES } else { 0 };
        let mut modes = [Mode::Native, Mode::Generic].into_iter().peekable();
        while let Some(&mode) = modes.peek() {
            match program.attach_to_if_index(ifindex, mode.flags()) {
                Ok(id) => {
                    let link = program.take_link(id).map_err(program_error(name, ifname))?;
                    let link: FdLink = link
                        .try_into()
                        .map_err(|source| LoadError::Link { path: path.clone(), source: Box::new(source) })?;
                    super::loader::pin_over(link, &path)?;
                    tracing::info!(interface = %ifname, mode = mode.as_str(), "attached the XDP program");
                    return Ok(Some(mode));
                }
                Err(e) => {
                    // Busy: someone else's program holds the hook; generic would be refused too.
                    let busy = program_errno(&e) == Some(libc::EBUSY);
                    if busy && busy_retries > 0 {
                        busy_retries -= 1;
                        std::thread::sleep(DISPLACED_WAIT);
                        continue;
                    }
                    first_error.get_or_insert(e);
                    if busy {
                        break;
                    }
                    modes.next();
                }
            }
        }
        Err(first_error.map(program_error(name, ifname)).unwrap_or(LoadError::MissingProgram(name)))
    }

    /// Stops the object's XDP program on `ifindex` (its pinned link goes; nothing pinned is fine).
    pub fn detach_xdp(&self, ifindex: u32) -> Result<(), LoadError> {
        remove_pin(&self.pins_or_err()?.link(&link_name(ifindex)))
    }

    /// The interface indexes of every pinned XDP link.
    pub fn xdp_links(&self) -> Result<Vec<u32>, LoadError> {
        let pins = self.pins_or_err()?;
        Ok(pins.link_names()?.iter().filter_map(|n| parse_link_name(n)).collect())
    }

    /// Whether the XDP link pinned for `ifindex` runs our program (or an identical one).
    pub fn xdp_current(&mut self, ifindex: u32) -> Result<bool, LoadError> {
        let Some(name) = self.object().xdp else { return Ok(false) };
        let path = self.pins_or_err()?.link(&link_name(ifindex));
        if !path.exists() {
            return Ok(false);
        }
        self.pinned_link_is_current(&path, name)
    }
}

fn program_error(name: &'static str, ifname: &str) -> impl FnOnce(aya::programs::ProgramError) -> LoadError {
    let ifname = ifname.to_owned();
    move |source| LoadError::Filter { name, action: "attaching XDP to", ifname, source: Box::new(source) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_names_round_trip() {
        assert_eq!(parse_link_name(&link_name(42)), Some(42));
        assert_eq!(parse_link_name("tc_42_in"), None);
        assert_eq!(parse_link_name("xdp_42_new"), None);
    }

    /// Which program runs in which mode is read from IFLA_XDP by the netlink layer
    /// (`netlink::snapshot`'s `the_xdp_mode_is_the_kernels`); here, only the naming of its modes.
    #[test]
    fn the_mode_is_the_kernels() {
        assert_eq!(attached(None), None);
        assert_eq!(attached(Some(XdpProgram { id: 7, generic: false })), Some((7, Mode::Native)));
        assert_eq!(attached(Some(XdpProgram { id: 9, generic: true })), Some((9, Mode::Generic)));
    }
}
