//! Netlink inside a pod's network namespace, without shelling out to `ip`.
//!
//! Every operation opens its own rtnetlink socket inside the target namespace (see [`netlink_in`]);
//! the agent's own threads never change namespace, so nothing here can leak the pod's view of the
//! network into the rest of the agent.

mod error;
mod links;
mod routes;
mod socket;

#[cfg(test)]
mod tests;

pub use error::NetnsError;
pub use links::link_names;
pub use routes::{default_routes, replace_default_routes};
pub use socket::{netlink_in, netns_exists};
