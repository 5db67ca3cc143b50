//! IP fragments of mapped datagrams. Only the first fragment carries the ports, so it alone
//! decides (and its flow is tracked as any packet's); what its translation did is recorded in
//! `PM_FRAGS` under the datagram's identity (addresses, identification, protocol), and
//! `pm_fragment`, tail-called for every later fragment, applies the same address rewrite and
//! delivery (a later fragment carries no L4 checksum: [`set_ip_addr`] is all it needs). The L4 checksum sits in the first fragment and was updated there; later fragments
//! need their addresses (and the IPv4 header checksum) only.
//!
//! A later fragment that arrives before its first one (reordered) finds nothing and passes
//! untouched, as does one arriving after FRAGMENT_TIMEOUT_NS (the kernel's own reassembly
//! timeout): its datagram cannot be reassembled by the receiver then.

use aya_ebpf::programs::TcContext;
use plexus_ebpf_common::flow::{
    Fragment, FragmentKey, FRAGMENT_TIMEOUT_NS, FRAG_DST, FRAG_HAIRPIN, FRAG_REPLY, FRAG_SRC, FRAG_TO_POD,
};
use plexus_ebpf_common::{v4_mapped, Addr, Rewrite};

use crate::consts::{DROP, ETH_HLEN, ETH_P_IP, ETH_P_IPV6, NEXT};
use crate::packet::IPV6_HLEN;
use crate::portmap::maps::{count, now, settings, Direction, Maps};
use crate::portmap::rewrite::{deliver, set_ip_addr, Side};
use crate::portmap::tail::tail_called_ingress;

/// Records the first fragment's translation (built in this CPU's scratch entry: it does not
/// fit the calling program's stack).
#[inline(always)]
pub fn remember<M: Maps>(key: &FragmentKey, src: &Addr, dst: &Addr, rewrite: &Rewrite, flags: u8) {
    let Some(s) = settings::<M>() else { return };
    let Some(f) = M::frag_scratch().get_ptr_mut(0) else { return };
    // SAFETY: this CPU's scratch value; nothing else runs on this CPU meanwhile.
    let f: &mut Fragment = unsafe { &mut *f };
    f.src = *src;
    f.dst = *dst;
    f.rewrite = *rewrite;
    f.flags = flags;
    f.pad = [0; 3];
    f.pad2 = 0;
    f.created_ns = now(s);
    // A full table evicts the oldest datagram, whose reassembly has most likely ended.
    if let Err(e) = M::frags().insert(key, &*f, 0) {
        crate::rare!(
            "the fragment table refused a datagram (error {}): its later fragments pass untranslated",
            e
        );
    }
}

/// `pm_fragment`: a later fragment, tail-called from `pm_tc_in`/`pm_tc_out`.
#[inline(always)]
pub fn fragment<M: Maps>(ctx: &TcContext) -> i32 {
    match translate::<M>(ctx, tail_called_ingress(ctx)) {
        Ok(verdict) => verdict,
        // A helper failed halfway through a rewrite: the packet is inconsistent, drop it.
        Err(_) => DROP,
    }
}

/// The datagram a later fragment belongs to.
#[inline(always)]
fn parse(ctx: &TcContext) -> Option<(bool, FragmentKey)> {
    let ethertype = u16::from_be(ctx.load::<u16>(12).ok()?);
    if ethertype == ETH_P_IP {
        let id = u32::from(ctx.load::<u16>(ETH_HLEN + 4).ok()?);
        let proto: u8 = ctx.load(ETH_HLEN + 9).ok()?;
        let src: u32 = ctx.load(ETH_HLEN + 12).ok()?;
        let dst: u32 = ctx.load(ETH_HLEN + 16).ok()?;
        Some((false, FragmentKey { src: v4_mapped(src), dst: v4_mapped(dst), id, proto, pad: [0; 3] }))
    } else if ethertype == ETH_P_IPV6 {
        let src: Addr = ctx.load(ETH_HLEN + 8).ok()?;
        let dst: Addr = ctx.load(ETH_HLEN + 24).ok()?;
        // The fragment header follows the IPv6 header (the caller checked).
        let proto: u8 = ctx.load(ETH_HLEN + IPV6_HLEN).ok()?;
        let id: u32 = ctx.load(ETH_HLEN + IPV6_HLEN + 4).ok()?;
        Some((true, FragmentKey { src, dst, id, proto, pad: [0; 3] }))
    } else {
        None
    }
}

#[inline(always)]
fn translate<M: Maps>(ctx: &TcContext, ingress: bool) -> Result<i32, i64> {
    let Some((v6, key)) = parse(ctx) else { return Ok(NEXT) };
    // SAFETY: read in place; a map value stays valid while the program runs.
    let Some(f) = (unsafe { M::frags().get(&key) }) else { return Ok(NEXT) };
    let Some(s) = settings::<M>() else { return Ok(NEXT) };
    if now(s).saturating_sub(f.created_ns) > FRAGMENT_TIMEOUT_NS {
        return Ok(NEXT);
    }
    if f.flags & FRAG_SRC != 0 {
        set_ip_addr(ctx, v6, Side::Src, &key.src, &f.src)?;
    }
    if f.flags & FRAG_DST != 0 {
        set_ip_addr(ctx, v6, Side::Dst, &key.dst, &f.dst)?;
    }
    let to_pod = f.flags & FRAG_TO_POD != 0;
    if to_pod {
        ctx.store(0, &f.rewrite.pod_mac, 0)?;
    }
    if f.flags & FRAG_HAIRPIN != 0 {
        ctx.store(6, &f.rewrite.host_mac, 0)?;
    }
    let dir = if f.flags & FRAG_REPLY != 0 { Direction::Out } else { Direction::In };
    count::<M>(&f.rewrite, ctx.len(), dir);
    Ok(if to_pod { deliver::<M>(ctx, &f.rewrite, ingress) } else { NEXT })
}
