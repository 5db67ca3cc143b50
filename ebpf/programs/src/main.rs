//! plexus's kernel-side programs, loaded and attached by the agent (agent/src/dataplane).
//!
//! - [`tc`]: port mappings on the host-side interfaces of secondary networks (TC, via TCX
//!   links): destination NAT of hostIP:hostPort to podIP:containerPort, and the reverse rewrite
//!   of the pod's replies, without conntrack.
//! - [`sock`]: the same translation for sockets of the node itself (cgroup sock_addr hooks),
//!   whose packets never cross those interfaces' ingress.

#![no_std]
#![no_main]

mod maps;
mod sock;
mod tc;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any reachable panic path; this only satisfies the compiler.
    loop {}
}

/// GPL-compatible: bpf_redirect and the socket lookups are GPL-only helpers on some kernels.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
