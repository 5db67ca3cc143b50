//! The CRI network API (`proto/network.proto`, docs/network-api.md): the runtime, an operator
//! or a NAD-watching daemon sets, removes and lists networks through gRPC on a Unix socket of
//! the agent's own, and asks which IP of a sandbox is on which network.
//!
//! [`proto`] is the code generated from `proto/network.proto`.

pub mod proto;

/// The reserved name of the on-disk default network in the list (never set or removed
/// through the API).
pub const FALLBACK_NETWORK: &str = "_fallback";

/// The namespace of a network set without one, as for a namespaced Kubernetes object.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The socket the API is served on unless the operator says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/plexus/network.sock";
