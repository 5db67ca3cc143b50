//! Network policy in the dataplane (issue 40): the `plexus-policy` object (its programs are
//! `ebpf/programs/src/policy.rs`, its maps `plexus_ebpf_common::policy`) and the entries the
//! agent writes in its maps from the compiled tables ([`entries`]).
//!
//! The programs are checked against the decision (`crate::network_policy::decide`) on every
//! probe of the truth table, run by the kernel on crafted packets (`kernel_tests`). Hooking
//! them on attachments, and keeping their maps in step with policies and pods, is still to
//! come: nothing attaches the object yet.

pub mod entries;

#[cfg(test)]
mod kernel_tests;

/// The object, as agent/build.rs built it.
pub static BYTES: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-policy.o"));

/// The program of the packets leaving the pod.
pub const FROM_POD: &str = "np_from_pod";
/// The program of the packets entering the pod.
pub const TO_POD: &str = "np_to_pod";
