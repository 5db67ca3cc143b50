//! The NPWG default-route selection inside a pod's network namespace, over the agent's netlink
//! layer ([`crate::netlink`]), which opens each socket inside the pod so the agent's own threads
//! never change namespace.

mod error;
mod links;
mod routes;

#[cfg(test)]
mod kernel_tests;

pub use error::NetnsError;
pub use routes::{default_routes, replace_default_routes};
