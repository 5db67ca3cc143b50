//! The flow table on the packet path: made or refreshed by requests, found by replies.
//! Keys, values, timeouts and the TCP state rules are plexus_ebpf_common::flow's, shared with
//! the agent's reaper.
//!
//! Entries are updated in place through the map's value pointer: a flow's packets run on one
//! CPU at a time in the common case, and a torn update of `seen_ns` or `state` by two CPUs at
//! once only shortens or lengthens one flow's life by a packet. A packet writes only what it
//! changes (see [`refresh`]): a connection's requests and replies run on different CPUs, and
//! each line one of them writes, the other then reads from afar.

use aya_ebpf::bindings::BPF_NOEXIST;
use plexus_ebpf_common::flow::{next_state, seen_is_stale, Flow, FlowKey, Settings, FLOW_SNAT};
use plexus_ebpf_common::{Addr, Endpoint, Rewrite};

/// The error of an insert with `BPF_NOEXIST` that found the key taken.
const EEXIST: i32 = -17;

use crate::portmap::maps::{flow_count, now, settings, FlowEvent, Maps};

/// What a request tells the flow table.
pub struct Request<'a> {
    pub key: FlowKey,
    pub host: &'a Endpoint,
    /// The client as it sent the request.
    pub client: Addr,
    pub client_port: u16,
    /// Its source was rewritten to the host IP (the pod reached its own host port).
    pub snat: bool,
    pub rewrite: &'a Rewrite,
    pub tcp_flags: u8,
}

/// Makes or refreshes the flow of a request translated forward. A flow that expired, or that
/// another host port made on the same tuple (the client reused its port for another mapping of
/// the same container port), is started anew.
///
/// The flow is looked up first, a TCP SYN's too: a client that opens connections fast reuses
/// its ports within the closed flows' timeout (conntrack's 120 s), and an insert that finds a
/// flow there has taken a free entry, filled it and handed it back before failing, which costs
/// more than the lookup a new tuple's insert follows (its bucket is then warm).
#[inline(always)]
pub fn track_request<M: Maps>(r: &Request, s: &Settings, now: u64) {
    if let Some(f) = M::flows().get_ptr_mut(&r.key) {
        // SAFETY: the map's value, valid while the program runs (see the module's notes).
        let f = unsafe { &mut *f };
        let same_host = f.host.same(r.host);
        if same_host && !s.timeouts.expired(f, now) {
            refresh(f, next_state(f.state, r.key.proto, r.tcp_flags, true), now);
            return;
        }
        if !same_host && !s.timeouts.expired(f, now) {
            crate::rare!(
                "flow of host port {} replaced by one of host port {}: the client reused its port",
                u16::from_be(f.host.port_be),
                u16::from_be(r.host.port_be)
            );
        }
        fill(f, r, now);
        return;
    }
    insert::<M>(r, now);
}

/// Writes a packet's news into its flow: the state, if it changed, and the time seen, once
/// [`seen_is_stale`]. A state change alone leaves the time seen as it is (at most a second
/// old), so most of a short connection's packets write one cache line of its flow, or none.
#[inline(always)]
fn refresh(f: &mut Flow, state: u8, now: u64) {
    if f.state != state {
        f.state = state;
    }
    if seen_is_stale(f.seen_ns, now) {
        f.seen_ns = now;
    }
}

/// Inserts the flow of request `r`, unless the table has one on its key (another CPU made it
/// since the lookup: that one stays).
#[inline(always)]
fn insert<M: Maps>(r: &Request, now: u64) {
    // The new value is built in this CPU's scratch entry, then copied into the table.
    let Some(scratch) = M::scratch().get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch value; nothing else runs on this CPU meanwhile.
    let scratch = unsafe { &mut *scratch };
    fill(scratch, r, now);
    match M::flows().insert(&r.key, &*scratch, u64::from(BPF_NOEXIST)) {
        Ok(()) => flow_count::<M>(FlowEvent::Created),
        // Another CPU made it since the lookup: that one stays.
        Err(EEXIST) => {}
        Err(e) => {
            crate::rare!("the flow table refused a new flow (error {}): its replies go untranslated", e)
        }
    }
}

/// Writes a new flow of request `r` into `f`, field by field (no copy on the stack).
#[inline(always)]
fn fill(f: &mut Flow, r: &Request, now: u64) {
    let base = if r.snat { FLOW_SNAT } else { 0 };
    f.host = *r.host;
    f.client = r.client;
    f.client_port = r.client_port;
    f.state = next_state(base, r.key.proto, r.tcp_flags, true);
    f.pad = 0;
    f.rewrite = *r.rewrite;
    f.created_ns = now;
    f.seen_ns = now;
}

/// The flow a packet from the pod with this tuple is a reply of, refreshed; `None` for
/// untracked packets. An expired flow is removed here and its packet is untracked. The flow is
/// read in place (a copy would not fit the program's stack next to the packet's state); the
/// map value stays valid while the program runs, even if another CPU removes the entry.
#[inline(always)]
pub fn track_reply<M: Maps>(key: &FlowKey, tcp_flags: u8) -> Option<&'static Flow> {
    let f = M::flows().get_ptr_mut(key)?;
    // SAFETY: as in `track_request`.
    let f = unsafe { &mut *f };
    // The clock and the settings only for tracked packets: most packets from a pod are not.
    let s = settings::<M>()?;
    let now = now(s);
    if s.timeouts.expired(f, now) {
        if M::flows().remove(key).is_ok() {
            flow_count::<M>(FlowEvent::Removed);
        }
        return None;
    }
    refresh(f, next_state(f.state, key.proto, tcp_flags, false), now);
    Some(f)
}

/// The live flow of `key`, untouched (ICMP errors quote flows, they do not refresh them).
#[inline(always)]
pub fn find<M: Maps>(key: &FlowKey, s: &Settings, now: u64) -> Option<&'static Flow> {
    // SAFETY: read in place, as in `track_reply`.
    let f = unsafe { M::flows().get(key) }?;
    if s.timeouts.expired(f, now) {
        return None;
    }
    Some(f)
}
