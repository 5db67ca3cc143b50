//! The `plexus-bandwidth` CNI plugin type: a drop-in replacement for the reference `bandwidth`
//! in a configlist, run inside the agent.
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "lan", "plugins": [
//!   {"type": "bridge", "bridge": "br1", "ipam": {...}},
//!   {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}]}
//! ```
//!
//! ADD finds where the pod's traffic crosses the host from prevResult and the configlist's
//! first plugin, installs the limits and attaches the programs; the rest is every chained
//! plugin's (see [`crate::dataplane::chained`]).

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::BandwidthConf;
use super::plan::{entries, place, Entry};
use super::shaper::Shaper;
use super::store::Record;
use super::BandwidthError;
use crate::cni::result::CniResult;
use crate::dataplane::attach::{Attach, AttachPoint, Hook};
use crate::dataplane::chained::{pod_name, ChainArgs, Chained, ChainedPlugin};
use crate::dataplane::{netdev, DataplaneOptions};
use crate::delegate::native::NativeCall;

/// The CNI `type` of the plugin.
pub const TYPE: &str = "plexus-bandwidth";

pub type BandwidthPlugin = ChainedPlugin<Shaper>;

impl Chained for Shaper {
    const TYPE: &'static str = TYPE;
    type Conf = BandwidthConf;
    type Error = BandwidthError;

    fn parse(config: &Value) -> Result<BandwidthConf, BandwidthError> {
        Ok(BandwidthConf::parse(config)?)
    }

    fn chain(conf: &BandwidthConf) -> &ChainArgs {
        &conf.chain
    }

    fn requested(conf: &BandwidthConf) -> bool {
        !conf.limits.is_empty()
    }

    /// Where the limits go, and whether the device paces with EDT.
    fn plan<'a>(
        conf: &'a BandwidthConf,
        prev: &'a CniResult,
        call: &'a NativeCall<'a>,
        _options: &'a DataplaneOptions,
    ) -> BoxFuture<'a, Result<Record, BandwidthError>> {
        Box::pin(async move {
            let (node, default_route) = netdev::snapshot().await?;
            let first = call.list.and_then(|l| l.plugins.first());
            let at = place(&conf.chain.network, first, prev, &call.env.ifname, &node, default_route)?;
            let planned = entries(&at, &conf.limits, paces(at.device().0).await);
            let hooks: BTreeSet<AttachPoint> = planned.iter().flat_map(hooks_of).collect();
            Ok(Record {
                container_id: call.env.container_id.clone(),
                ifname: call.env.ifname.clone(),
                network: conf.chain.network.clone(),
                pod: pod_name(&call.env.args),
                entries: planned,
                hooks: hooks.into_iter().collect(),
            })
        })
    }
}

/// Where the programs of a limit run: a pod's own veth gets a filter, cheap to attach; a
/// master is shared: a TCX link, and for the ingress limits of its pods (by MAC, on its receive
/// path) the XDP program too, which drops what is over the limit before the kernel builds an
/// skb (see `ebpf/programs/src/police.rs`).
fn hooks_of(e: &Entry) -> Vec<AttachPoint> {
    let point = |hook, attach| AttachPoint { ifindex: e.ifindex, ifname: e.ifname.clone(), hook, attach };
    match e.mac {
        None => vec![point(e.hook, Attach::Filter)],
        Some(_) if e.hook == Hook::Ingress => {
            vec![point(e.hook, Attach::Tcx), point(Hook::Ingress, Attach::Xdp)]
        }
        Some(_) => vec![point(e.hook, Attach::Tcx)],
    }
}

/// True when `ifindex` paces with EDT: its root qdisc is fq, which holds packets until their
/// `skb->tstamp`. Unknown counts as no: the token bucket works everywhere.
async fn paces(ifindex: u32) -> bool {
    match netdev::root_qdisc_kind(ifindex).await {
        Ok(kind) => kind.as_deref() == Some("fq"),
        Err(e) => {
            tracing::warn!("bandwidth: {e}; using the token bucket");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::bandwidth::plan::{Direction, Mechanism};

    #[test]
    fn a_masters_ingress_limits_get_the_xdp_program_and_a_veths_only_a_filter() {
        let entry = |ifindex, hook, mac| Entry {
            ifindex,
            ifname: format!("if{ifindex}"),
            hook,
            mac,
            direction: Direction::Ingress,
            mechanism: Mechanism::TokenBucket,
            rate_bps: 1_000_000,
            burst_bits: None,
            burst_ns: 0,
        };
        let hooks =
            |e: Entry| hooks_of(&e).into_iter().map(|p| (p.ifindex, p.hook, p.attach)).collect::<Vec<_>>();
        let mac = Some([2, 0, 0, 0, 0, 9]);
        assert_eq!(
            hooks(entry(5, Hook::Ingress, mac)),
            [(5, Hook::Ingress, Attach::Tcx), (5, Hook::Ingress, Attach::Xdp)]
        );
        assert_eq!(
            hooks(entry(5, Hook::Egress, mac)),
            [(5, Hook::Egress, Attach::Tcx)],
            "XDP sees only what enters"
        );
        assert_eq!(hooks(entry(7, Hook::Egress, None)), [(7, Hook::Egress, Attach::Filter)]);
    }
}
