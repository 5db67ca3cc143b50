//! Network policy on secondary networks: the NPWG's `MultiNetworkPolicy` (NetworkPolicy's
//! schema, for the networks its `k8s.v1.cni.cncf.io/policy-for` annotation names), decided
//! per attachment (docs/network-policy.md).
//!
//! This layer is pure: [`object`] reads a `MultiNetworkPolicy` object (from the API server or a
//! file) into a [`model`] policy validated once, [`selector`] is label selectors as Kubernetes
//! matches them, and [`decide`] the decision (policies + what is known of the pods
//! → allowed or not, and by which rule), the reference every enforcement is tested against.
//! [`compile`] turns policies and pods into the tables the programs look up (addresses to
//! identities by longest prefix, per isolated pod the identities, protocols and ports it
//! allows), checked against [`decide`] on every probe of the truth table and of random
//! clusters.

pub mod compile;
pub mod decide;
pub mod model;
pub mod object;
pub mod selector;

#[cfg(test)]
pub(crate) mod tests;

pub use decide::{decide, Cluster, Decision, NamedPort, PodView, Probe, ProbeProtocol, Side};
pub use model::{parse_policy_for, NetworkName, Policy, PolicyError, Port, Protocol, POLICY_FOR_ANNOTATION};
pub use object::{policy_from_object, ObjectError};
pub use selector::{Labels, Selector, SelectorError};
