//! Network policy in the dataplane (issue 40): the `plexus-policy` object ([`object`]; its
//! programs are `ebpf/programs/src/policy.rs`, its maps `plexus_ebpf_common::policy`), where
//! its programs run for an isolated attachment ([`hooks`]), the entries the compiled tables
//! make ([`entries`]) and their writing ([`table`]).
//!
//! The programs are checked against the decision (`crate::network_policy::decide`) on every
//! probe of the truth table, run by the kernel on crafted packets, and on real traffic between
//! pods as namespaces on a bridge and on a macvlan (`kernel_tests`). Keeping the maps and hooks
//! in step with policies and pods (the agent's watch of them) is still to come: nothing in the
//! agent loads the object yet.

pub mod entries;
pub mod hooks;
pub mod object;
pub mod table;

#[cfg(test)]
mod kernel_tests;
