//! Port mappings: what the port mapping object's programs run (its binary,
//! `src/bin/portmap.rs`, declares the maps and the entry points).
//!
//! - [`nat`]: port mappings on the host-side interfaces of secondary networks (TC, via TCX
//!   links): destination NAT of hostIP:hostPort to podIP:containerPort, and the reverse rewrite
//!   of the replies of the flows it made ([`flows`]), without conntrack;
//! - [`rewrite`]: the rewriting helpers on TC packets (addresses, ports, checksums, MACs,
//!   delivery), which [`nat`], [`icmp`] and [`fragments`] use and which import none of them;
//! - [`tail`]: the tail calls between the TC programs;
//! - [`icmp`]: ICMP errors about those flows, translated (path MTU discovery);
//! - [`fragments`]: IP fragments after the first, translated like their first;
//! - [`sock`]: the same translation for sockets of the node itself (cgroup sock_addr hooks),
//!   whose packets never cross those interfaces' ingress;
//! - [`xdp`]: the forward translation of mapped packets in XDP, on the interface where
//!   clients' traffic enters the node (a macvlan master), before the kernel builds an skb,
//!   and the ingress limits of the pods behind it;
//! - [`maps`]: the maps ([`maps::Maps`], declared by the binary) and their helpers.

pub mod flows;
pub mod fragments;
pub mod icmp;
pub mod maps;
pub mod nat;
pub mod rewrite;
pub mod sock;
pub mod tail;
pub mod xdp;
