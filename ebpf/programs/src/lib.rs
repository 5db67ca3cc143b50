//! The library every BPF object of plexus links (the binaries in `src/bin`: `plexus-ebpf`, port
//! mappings; `plexus-bandwidth`, shaping; `plexus-policy`, network policy). The binaries hold
//! what must be in them: the maps (declared with [`map!`]; each object creates and pins its
//! own) and the entry points, each a line or two calling in here. The pure logic (flows,
//! shaping arithmetic, checksums, policy keys) is `plexus_ebpf_common`'s, tested on the host.
//!
//! - [`ctx`]: the context trait TC and XDP programs both implement ([`ctx::Buff`]);
//! - [`packet`]: the one packet reader and header parser over it, for TC and XDP alike;
//! - [`charge`], [`police`], [`shaping`]: bandwidth limits (a packet charged to a limit's
//!   clock; XDP policing; the TC shaping programs);
//! - [`log`]: the programs' rare events, logged with aya-log-ebpf ([`rare!`]);
//! - [`policy`]: network policy on an isolated pod's attachment (`plexus-policy`);
//! - [`portmap`]: port mappings (TC translation, its rewriting helpers, ICMP errors, fragments,
//!   XDP, node-local sockets, the flow table).
//!
//! Nothing here declares a map or a program: every exported symbol of the library lands in
//! every object that links it.

#![no_std]
#![feature(core_intrinsics)]
#![feature(asm_experimental_arch)]
#![allow(internal_features)]

pub mod charge;
pub mod consts;
pub mod ctx;
pub mod log;
pub mod packet;
pub mod police;
pub mod policy;
pub mod portmap;
pub mod shaping;

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
