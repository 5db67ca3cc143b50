//! The agent's one netlink layer: every rtnetlink socket and every entry into a network
//! namespace goes through here, never by shelling out to `ip`.
//!
//! - [`run_in`]: the one way to work inside a namespace, on a thread that entered it; it opens
//!   pods' netlink sockets and runs blocking work such as sysctls ([`read_sysctl`],
//!   [`write_sysctl`]) and raw sockets. [`netns_exists`] tells a live namespace from a leftover.
//! - [`Netlink`]: one socket in one namespace, the agent's ([`Netlink::agent`]) or a pod's
//!   ([`Netlink::pod`]; [`Netlink::open`] picks one of the two). Its methods take and return
//!   plexus's types only: no type of rtnetlink, netlink-packet-* or netlink-sys is named
//!   outside this module, and the socket's handle never leaves it. By job:
//!   - reading (`snapshot`): [`Netlink::links`], [`Netlink::link`], [`Netlink::require`],
//!     [`Netlink::addresses`], [`Netlink::all_addresses`], [`Netlink::routes`],
//!     [`Netlink::default_route_interface`], each a [`LinkSnapshot`], [`AddressSnapshot`] or
//!     [`RouteSnapshot`];
//!   - changing one link (`change`): create, rename, MAC, MTU, up/down, delete, move;
//!   - macvlans (`macvlan`): [`Netlink::create_macvlan`] of a [`NewMacVlan`] in a
//!     [`MacVlanMode`];
//!   - deleting a pod's links together on DEL ([`deletions`]); every deletion is done when the
//!     kernel announces the links gone, sent from a blocking thread (`unregister`);
//!   - bridges (`bridge`): a bridge, a veth pair born a port of it with its other end in a
//!     pod ([`VethPair`]), promiscuous mode, a port's hairpin mode;
//!   - configuring IP (`configure`): [`Netlink::add_address`], [`Netlink::add_route`], and
//!     [`configure_ip`] for a whole CNI result as libcni's `ConfigureIface`;
//!   - moving between namespaces through a temporary name ([`move_into`], [`move_out`]);
//!   - CHECK ([`verify_ips`], [`verify_routes`]), as libcni's `ValidateExpected*`;
//!   - the main table's default routes for the NPWG default-route selection (`default_route`):
//!     [`Netlink::main_default_routes`], [`Netlink::delete_default_route`],
//!     [`Netlink::add_default_route`];
//!   - an SR-IOV PF's VFs ([`sriov_vf`]): [`Netlink::sriov_pf`] reads their settings,
//!     [`Netlink::set_vf`] changes one, with messages proven byte for byte against iproute2;
//!   - traffic control for the dataplane ([`Netlink::add_clsact`], [`Netlink::filters`] as
//!     [`TcFilter`]s, [`Netlink::root_qdisc_kind`]); a link's XDP program is in its
//!     [`LinkSnapshot`] ([`XdpProgram`]).
//! - [`shared`]: within one CNI request, one socket per namespace, shared by its plugins.
//! - [`Mac`]: the one MAC address type; `route_table`: tables above 255, handled once.
//!
//! Every [`LinkError`] names the action, the link and the namespace, so a failure reads as
//! "renaming plx1a2b3c4d to net1 in network namespace /run/netns/p: File exists (os error 17)",
//! and keeps the kernel's errno for callers to branch on ([`LinkError::is`]); the kernel's own
//! answer is a [`KernelError`], which leaves the layer as a sentence, never as the library's
//! type. Callers decide on the errno, never on the text.

mod bridge;
mod change;
mod configure;
mod default_route;
pub mod deletions;
mod error;
mod features;
mod handle;
mod mac;
mod macvlan;
mod moves;
mod namespace;
pub mod nftables;
mod route_table;
pub mod shared;
mod snapshot;
pub mod sriov_vf;
mod sysctl;
mod tc;
mod unregister;
mod verify;

#[cfg(test)]
mod kernel_tests;

pub use bridge::VethPair;
pub use configure::configure_ip;
pub use default_route::{DefaultRoute, IpFamily};
pub use error::{KernelError, LinkCause, LinkError, NamespaceError};
pub use features::gro_on;
pub use handle::Netlink;
pub use mac::{hardware_address, Mac, MacError};
pub use macvlan::{MacVlanMode, NewMacVlan};
pub use moves::{attachment_temp_name, move_into, move_out, temp_name};
pub use namespace::{netns_exists, run_in};
pub use snapshot::{AddressSnapshot, LinkSnapshot, RouteSnapshot, XdpProgram};
pub use sriov_vf::SriovPf;
pub use sysctl::{read_sysctl, write_sysctl};
pub use tc::{FilterHook, TcFilter};
pub use verify::{verify_ips, verify_routes};
