//! The `sriov` CNI type, in-process: attaches an SR-IOV virtual function (VF) to a pod with
//! the config and behaviour of k8snetworkplumbingwg/sriov-cni.
//!
//! A config names the VF by PCI address (`deviceID`, normally filled in by the SR-IOV device
//! plugin) and optionally sets its port VLAN (`vlan`, `vlanQoS`, `vlanProto`), `spoofchk`,
//! `trust`, `link_state`, `min_tx_rate`/`max_tx_rate` (Mbps), `mac`, and `ipam` (see
//! [`config`]). The VF's PF, index and driver come from sysfs ([`sysfs`]); its PF-side settings
//! change through RTM_SETLINK on the PF ([`vf_netlink`]); its netdev moves into the pod as
//! CNI_IFNAME ([`netdev`]). A VF bound to a userspace driver (vfio-pci, uio_pci_generic,
//! igb_uio) has no netdev: it only gets the PF-side settings, and IPAM's result is reported
//! for the application to use.
//!
//! Before the first change, the VF's original state is written to `<state_dir>/sriov/<pci>.json`
//! ([`state`]), which is also the claim on it: DEL restores from it even after an agent restart,
//! and a second pod asking for a claimed VF is refused, naming the pod holding it, without any
//! change (a per-VF lock, in-process and `flock`ed, makes check-and-claim atomic: [`lock`]).
//!
//! ## Capabilities
//!
//! - `mac`: `runtimeConfig.mac` wins over `CNI_ARGS` `MAC=`, which wins over the config's `mac`.
//! - `bandwidth`: a VF's only limiter is on what it transmits, i.e. the pod's egress.
//!   `egressRate` (bits/s) becomes `max_tx_rate`, rounded up to whole Mbps, and overrides the
//!   config's; bursts are ignored (VF rate limiters have none). A VF cannot limit what it
//!   receives, so any non-zero `ingressRate` fails the ADD (code 7) rather than leave a limit the
//!   user asked for silently unenforced; chain the bandwidth plugin for ingress shaping.
//!
//! ## Differences from sriov-cni
//!
//! - DEL restores every setting the ADD changed, trust and link state included, to the recorded
//!   original (sriov-cni resets trust to off and link state to its recorded value only).
//! - `mtu` (plexus's addition) sets the VF netdev's MTU; DEL restores the original.
//! - `vlan_trunk` is refused with a message; run the sriov-cni binary for it.
//! - A busy VF fails with code 11 (try again later): the usual cause is the previous pod's DEL
//!   still running.

pub mod config;
pub mod error;
pub mod lock;
pub mod netdev;
pub mod plugin;
pub mod state;
pub mod sysfs;
pub mod vf_netlink;

#[cfg(test)]
mod tests;

/// The CNI `type` this plugin answers to.
pub const TYPE: &str = "sriov";

pub use error::SriovError;
pub use plugin::{plugin, SriovPlugin};
pub use vf_netlink::{PfControl, VfAdmin, VfSetting};
