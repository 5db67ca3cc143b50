//! Tests of the sriov type that need root and a real kernel: network namespaces, veths, and
//! iproute2 under strace. Unit tests of the pure parts live next to the code.

mod fixture;
mod netlink_bytes;
mod vf_lifecycle;
