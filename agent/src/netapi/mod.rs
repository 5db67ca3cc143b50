//! The networks of the CRI network API (`proto/network.proto`, docs/network-api.md), below the
//! wire ([`crate::server::netapi`]): [`proto`] (the generated messages), [`model`] (our own form
//! of a `NetworkConfig`) → [`config`] (pure: validation, conversion to a CNI configlist and
//! back) → [`generation`] (pure: may a set replace what is stored) → [`store`] (the durable
//! networks, which the catalog reads first: [`crate::catalog::api_networks`]).

pub mod config;
pub mod generation;
pub mod invalid;
pub mod model;
pub mod proto;
pub mod store;

/// The reserved name of the on-disk default network in the list (never set or removed
/// through the API), the name a sandbox's list uses for it too.
pub use crate::spec::sandbox_networks::FALLBACK_NETWORK;

/// The namespace of a network set without one, as for a namespaced Kubernetes object.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The socket the API is served on unless the operator says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/plexus/network.sock";
