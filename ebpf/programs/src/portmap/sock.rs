//! Port mappings for the node's own sockets (cgroup sock_addr hooks on the root cgroup: the
//! object's `pm_connect4` ... `pm_peername6` call [`to_pod`] or [`to_host`]).
//!
//! A process on the node connecting to hostIP:hostPort sends its packets through the local
//! output path, never through the ingress hooks of [`super::nat`]. So the translation happens
//! on the socket: `connect`/`sendmsg` see podIP:containerPort instead of the host endpoint, and
//! `getpeername`/`recvmsg` report the host endpoint back, so the application never notices.
//! Which host endpoint is remembered per socket (its cookie) and pod endpoint in `PM_SOCKETS`,
//! since several host ports may map to one container port. Replies from the pod are addressed
//! to the node and belong to no flow, so the TC programs leave them alone.
//!
//! cgroup hooks see every network namespace; only the agent's own (its cookie in PM_CONFIG) is
//! translated, so pods and other agents on the machine are never touched.

use aya_ebpf::helpers::{bpf_get_netns_cookie, bpf_get_socket_cookie};
use aya_ebpf::programs::SockAddrContext;
use aya_ebpf::EbpfContext;
use plexus_ebpf_common::flow::SockKey;
use plexus_ebpf_common::{is_v4_mapped, v4_mapped, Addr, Endpoint};

use crate::portmap::maps::{count, forward, netns_cookie, Direction, Maps};

/// sock_addr programs must allow the call (1) or it fails with EPERM.
pub const ALLOW: i32 = 1;

#[inline(always)]
fn ours<M: Maps>(ctx: &SockAddrContext) -> bool {
    let cookie = netns_cookie::<M>();
    // SAFETY: a helper call with the program's own context.
    cookie != 0 && unsafe { bpf_get_netns_cookie(ctx.as_ptr()) } == cookie
}

/// The user address of the call (v4 as v4-mapped; a v6 socket may use a v4-mapped address,
/// which then matches IPv4 mappings as it should), port and protocol.
#[inline(always)]
fn user_endpoint(ctx: &SockAddrContext, v6: bool) -> Endpoint {
    // SAFETY: the context pointer is the program's bpf_sock_addr; these fields are readable in
    // every sock_addr hook.
    unsafe {
        let sa = ctx.sock_addr;
        let addr: Addr = if v6 { (*sa).user_ip6 } else { v4_mapped((*sa).user_ip4) };
        // user_port holds the network-order port in its first two bytes.
        Endpoint::new(addr, (*sa).user_port as u16, (*sa).protocol as u8)
    }
}

#[inline(always)]
fn set_user_endpoint(ctx: &SockAddrContext, v6: bool, addr: &Addr, port_be: u16) {
    // SAFETY: as in `user_endpoint`; these hooks may write the user address and port.
    unsafe {
        let sa = ctx.sock_addr;
        if v6 {
            (*sa).user_ip6[0] = addr[0];
            (*sa).user_ip6[1] = addr[1];
            (*sa).user_ip6[2] = addr[2];
            (*sa).user_ip6[3] = addr[3];
        } else {
            (*sa).user_ip4 = addr[3];
        }
        (*sa).user_port = u32::from(port_be);
    }
}

/// connect/sendmsg: hostIP:hostPort → podIP:containerPort.
#[inline(always)]
pub fn to_pod<M: Maps>(ctx: &SockAddrContext, v6: bool) {
    if !ours::<M>(ctx) {
        return;
    }
    let host = user_endpoint(ctx, v6);
    let Some(rw) = forward::<M>(&host) else { return };
    // An IPv4 socket cannot reach an IPv6 pod address.
    if !v6 && !is_v4_mapped(&rw.addr) {
        return;
    }
    let pod = Endpoint::new(rw.addr, rw.port_be, host.proto);
    // Without the entry (an LRU table full of busier sockets) the application would see the
    // pod's endpoint as its peer: the connection itself still works.
    let _ = M::sockets().insert(&sock_key(ctx, &pod), &host, 0);
    set_user_endpoint(ctx, v6, &rw.addr, rw.port_be);
    count::<M>(rw, 0, Direction::Local);
}

#[inline(always)]
fn sock_key(ctx: &SockAddrContext, pod: &Endpoint) -> SockKey {
    // SAFETY: a helper call with the program's own context.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    SockKey { cookie, pod: *pod, pad: 0 }
}

/// recvmsg/getpeername: podIP:containerPort → hostIP:hostPort.
#[inline(always)]
pub fn to_host<M: Maps>(ctx: &SockAddrContext, v6: bool) {
    if !ours::<M>(ctx) {
        return;
    }
    let pod = user_endpoint(ctx, v6);
    // SAFETY: the value is copied before the program can be preempted by an update.
    let Some(host) = (unsafe { M::sockets().get(&sock_key(ctx, &pod)).copied() }) else { return };
    if !v6 && !is_v4_mapped(&host.addr) {
        return;
    }
    set_user_endpoint(ctx, v6, &host.addr, host.port_be);
}
