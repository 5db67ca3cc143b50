//! What every program shares: Ethernet and IP constants, the TC verdicts, and the declaration of
//! maps under the names `plexus-ebpf-common` gives them ([`map!`](crate::map)).

use aya_ebpf::bindings::{TC_ACT_SHOT, TC_ACT_UNSPEC};

pub const ETH_HLEN: usize = 14;
pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86DD;

/// Returned for packets the program leaves as they are: the next TCX program (or the stack)
/// decides, so plexus composes with other programs on the same hook.
pub const NEXT: i32 = TC_ACT_UNSPEC;
/// The bindings' type of TC_ACT_SHOT differs between the BPF target's architectures.
#[allow(clippy::unnecessary_cast)]
pub const DROP: i32 = TC_ACT_SHOT as i32;

/// Declares a map under the name `plexus-ebpf-common` gives it, which the agent opens and pins
/// it by. aya-ebpf's `#[map(name = ...)]` takes only a literal: it is written once, here, and
/// checked against the common constant when the object compiles.
///
/// Maps are declared by the program binaries (`src/bin`), never in this library: a map is an
/// exported symbol, and every symbol the library exports lands in every object that links it.
#[macro_export]
macro_rules! map {
    ($name:tt == $common:path; $(#[$attr:meta])* $vis:vis static $id:ident: $ty:ty = $init:expr;) => {
        $(#[$attr])*
        #[aya_ebpf::macros::map(name = $name)]
        $vis static $id: $ty = $init;
        const _: () = assert!(
            plexus_ebpf_common::same_name($name, $common),
            concat!("the map ", $name, " has another name in plexus-ebpf-common")
        );
    };
}
