//! plexus's port mapping object, loaded and attached by the agent
//! (agent/src/dataplane/portmap).
//!
//! - [`tc`]: port mappings on the host-side interfaces of secondary networks (TC, via TCX
//!   links): destination NAT of hostIP:hostPort to podIP:containerPort, and the reverse rewrite
//!   of the replies of the flows it made ([`flows`]), without conntrack;
//! - [`icmp`]: ICMP errors about those flows, translated (path MTU discovery);
//! - [`fragments`]: IP fragments after the first, translated like their first;
//! - [`sock`]: the same translation for sockets of the node itself (cgroup sock_addr hooks),
//!   whose packets never cross those interfaces' ingress;
//! - [`xdp`]: the forward translation of mapped packets in XDP, on the interface where
//!   clients' traffic enters the node (a macvlan master), before the kernel builds an skb,
//!   and the ingress limits of the pods behind it.

#![no_std]
#![no_main]
#![feature(core_intrinsics)]
#![feature(asm_experimental_arch)]
#![allow(internal_features)]

#[path = "../charge.rs"]
mod charge;
#[path = "../frame.rs"]
mod frame;
#[path = "../police.rs"]
mod police;
#[path = "../shared.rs"]
mod shared;

mod flows;
mod fragments;
mod headers;
mod icmp;
mod maps;
mod sock;
mod tc;
mod xdp;
