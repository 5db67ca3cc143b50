//! The integration tests that need no machine to themselves, folded into one binary: one link of
//! the agent instead of one per file, and tests of different files run side by side.
//!
//! Each module was a test file of its own and keeps its world: its own namespaces, state
//! directory, agent and test API server. None reads a process-wide figure that another module
//! moves. The tests that do stay binaries of their own: `kube` (it counts the process's ADDs in
//! flight and its memory) and the traffic measurements (`bandwidth`, `portmap`, `bench_quick`,
//! `stress`), whose rates and timings need the machine.

mod apiserver_writes;
mod crds;
mod deploy_manifests;
mod device_info;
mod docs_reference;
mod doctor;
mod durability;
mod hostile_input;
mod ipam_claims;
mod layers;
mod lifecycle;
mod live_attachments;
mod multus_takeover;
mod native_bridge;
mod native_bridge_nft;
mod native_macvlan;
mod network_api;
mod podnetwork_controller;
mod podnetwork_node;
mod policy;
mod policy_kube;
mod sandbox_networks;
mod socket_guard;
mod spec_conformance;
mod sriov_resources;
