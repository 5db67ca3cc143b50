//! plexus's port mapping object, loaded and attached by the agent
//! (agent/src/dataplane/portmap): its maps and its entry points. What the programs do is the
//! library's ([`plexus_ebpf::portmap`], whose notes tell the whole story).

#![no_std]
#![no_main]

use aya_ebpf::macros::{cgroup_sock_addr, classifier, xdp};
use aya_ebpf::programs::{SockAddrContext, TcContext, XdpContext};
use plexus_ebpf::portmap::sock::{to_host, to_pod, ALLOW};
use plexus_ebpf::portmap::{fragments, icmp, nat, xdp};

plexus_ebpf::declare_portmap_maps!(Maps);

/// Port mappings on an interface's receive path.
#[classifier]
pub fn pm_tc_in(ctx: TcContext) -> i32 {
    nat::portmap::<Maps>(&ctx, true)
}

/// Port mappings on an interface's transmit path.
#[classifier]
pub fn pm_tc_out(ctx: TcContext) -> i32 {
    nat::portmap::<Maps>(&ctx, false)
}

/// SCTP's CRC32c update for the port rewrite `pm_tc_in`/`pm_tc_out` made. Tail-called only.
#[classifier]
pub fn pm_sctp(ctx: TcContext) -> i32 {
    nat::sctp(&ctx)
}

/// ICMP errors about mapped flows. Tail-called only.
#[classifier]
pub fn pm_icmp(ctx: TcContext) -> i32 {
    icmp::icmp::<Maps>(&ctx)
}

/// IP fragments after the first. Tail-called only.
#[classifier]
pub fn pm_fragment(ctx: TcContext) -> i32 {
    fragments::fragment::<Maps>(&ctx)
}

/// Mapped packets in XDP, then the ingress limits of the pods behind the interface.
#[xdp]
pub fn pm_xdp(ctx: XdpContext) -> u32 {
    xdp::xdp::<Maps>(&ctx)
}

#[cgroup_sock_addr(connect4)]
pub fn pm_connect4(ctx: SockAddrContext) -> i32 {
    to_pod::<Maps>(&ctx, false);
    ALLOW
}

#[cgroup_sock_addr(sendmsg4)]
pub fn pm_sendmsg4(ctx: SockAddrContext) -> i32 {
    to_pod::<Maps>(&ctx, false);
    ALLOW
}

#[cgroup_sock_addr(recvmsg4)]
pub fn pm_recvmsg4(ctx: SockAddrContext) -> i32 {
    to_host::<Maps>(&ctx, false);
    ALLOW
}

#[cgroup_sock_addr(getpeername4)]
pub fn pm_peername4(ctx: SockAddrContext) -> i32 {
    to_host::<Maps>(&ctx, false);
    ALLOW
}

#[cgroup_sock_addr(connect6)]
pub fn pm_connect6(ctx: SockAddrContext) -> i32 {
    to_pod::<Maps>(&ctx, true);
    ALLOW
}

#[cgroup_sock_addr(sendmsg6)]
pub fn pm_sendmsg6(ctx: SockAddrContext) -> i32 {
    to_pod::<Maps>(&ctx, true);
    ALLOW
}

#[cgroup_sock_addr(recvmsg6)]
pub fn pm_recvmsg6(ctx: SockAddrContext) -> i32 {
    to_host::<Maps>(&ctx, true);
    ALLOW
}

#[cgroup_sock_addr(getpeername6)]
pub fn pm_peername6(ctx: SockAddrContext) -> i32 {
    to_host::<Maps>(&ctx, true);
    ALLOW
}
