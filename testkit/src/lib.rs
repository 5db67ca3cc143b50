//! Guards and assertions shared by plexus's tests and its bench: network namespaces, bpffs
//! mounts and processes that go away on drop (also when a test panics), unique names, and the
//! checks every test ends with (nothing left behind; the network-status of an interface).
//!
//! It depends on no plexus crate, so that the agent can take it as a dev-dependency.
//!
//! # Names
//!
//! [`unique`] names carry this process's id and a counter (`pxpod-4711-3`): tests running in
//! parallel never collide, and what a killed run left behind can be told from what a live one
//! holds ([`owner`], [`Netns::sweep_stale`]). [`unique_ifname`] is the short variant that fits
//! an interface name (15 characters).
//!
//! # Tests that need root and a kernel
//!
//! A test that needs root and a real kernel (network namespaces, links, bpffs, eBPF) has
//! `kernel` in its name: its function is named `kernel_*`, or it sits in a module named
//! `kernel`. Without root, `cargo test -- --skip kernel` runs all the others:
//!
//! ```text
//! cargo test --workspace -- --skip kernel
//! ```
//!
//! As root, `cargo test` runs everything, and `cargo test kernel` only the kernel's share.

mod bpffs;
mod command;
mod error;
mod leftovers;
mod name;
mod netns;
mod process;
mod status;

pub use bpffs::Bpffs;
pub use command::{ip, output, run, try_ip, Words};
pub use error::{Error, Result};
pub use leftovers::{assert_nothing_left, files_in, host_local_allocations};
pub use name::{owner, unique, unique_ifname};
pub use netns::{Entered, Netns};
pub use process::Proc;
pub use status::status_of;
