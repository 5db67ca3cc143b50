//! Tests of the sriov type against a real kernel: network namespaces, veths, and iproute2 under
//! strace. Those that need root are named `kernel_*` (`--skip kernel` leaves them out). Unit
//! tests of the pure parts live next to the code.

mod fixture;
mod live_hotplug;
mod netlink_bytes;
mod vf_lifecycle;
