//! Fixtures for plexus's integration tests: real network namespaces, a real agent process,
//! the real `plexus` shim and the reference CNI plugins. Every fixture tears down on drop,
//! also when a test panics. The guards themselves (namespaces, bpffs, processes) are
//! `plexus-testkit`'s, re-exported here; so is its naming of root-only tests (`kernel`).
//!
//! A test world is a "node" network namespace the agent runs in (so bridges and host-side
//! veths of delegates live there, never in the machine's own namespace), plus pod
//! namespaces, plus a temporary directory tree for configs and state.

pub mod addresses;
pub mod cri;
pub mod multus;
pub mod podresources;
pub mod recorder;
pub mod test_apiserver;
pub mod traffic;
pub mod world;

pub use plexus_testkit::{ip, status_of, unique, Bpffs, Netns, Proc};
pub use recorder::{Call, Recorder, RECORDER_TYPE};
pub use world::{Agent, CniOutput, World};

/// Where the reference CNI plugins are (Debian's containernetworking-plugins).
pub const REFERENCE_PLUGINS: &str = "/usr/lib/cni";
