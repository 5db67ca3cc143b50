//! Where an attachment's limits go and what the programs get (pure).
//!
//! - veth-based attachments (bridge, ptp, ...): the pod's host-side veth carries all of its
//!   traffic. The pod's egress enters that veth (its TC ingress), the pod's ingress leaves
//!   through it (its TC egress). The limit keys on the device alone.
//! - macvlan: the pod's traffic crosses the host on the master: what comes in for the pod on
//!   the master's receive path (TC ingress runs before macvlan hands it to the pod, keyed by the
//!   pod's MAC as destination), what the pod sends on the master's transmit path (keyed by the
//!   pod's MAC as source). Traffic between macvlans of one master never reaches the master and
//!   is not limited.
//! - SR-IOV: the VF's traffic bypasses the host; the VF limits itself (`max_tx_rate`).
//!
//! Bursts: the programs keep the bucket as time at the rate (`burst_ns`), and a policer's
//! bucket has a floor that a shaper's does not. A TCP flow faster than its limit (on a short
//! path, any flow: two segments per microseconds-long round trip) loses whole windows to the
//! policer and stalls in a retransmission timeout, 200 ms at least. A bucket shorter than that
//! stall throws away the tokens of its end, and one flow then gets a fraction of its rate
//! (half, measured, with 100 ms); a bucket at least as long finds them all when the flow
//! resumes, and the flow gets its rate. A longer bucket lets the rate drift: whatever it holds
//! can go out on top of the rate in any window. So the bucket is [`BUCKET_NS`] of the rate,
//! whatever burst is configured (kubelet's "unlimited" 2^31 bits included), and at least two
//! 64 KiB GSO packets, which a smaller bucket could never pass. The configured burst is
//! recorded and shown, not enforced.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::config::{Limit, Limits};
use crate::cni::result::CniResult;
use crate::dataplane::attach::Hook;
use crate::dataplane::netdev::NodeInterface;
use crate::netlink::Mac;
use plexus_ebpf_common::shape::{Shape, ShapeKey, HOOK_EGRESS, HOOK_INGRESS, NSEC_PER_SEC, SHAPE_EDT};

/// The bucket, as time at the rate: TCP's minimum retransmission timeout (200 ms) and a margin
/// for the timer's slack and the round trip.
pub const BUCKET_NS: u64 = 300_000_000;
/// The smallest bucket, in bytes: two of the largest (GSO) packets.
pub const MIN_BURST_BYTES: u64 = 2 * 65536;

/// A direction of the pod's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// To the pod.
    Ingress,
    /// From the pod.
    Egress,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// How a limit is enforced on its hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// Policing in the program: drop (or CE-mark) past the bucket.
    TokenBucket,
    /// Earliest Departure Time: the program stamps, the device's fq qdisc waits.
    Edt,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::TokenBucket => "token-bucket",
            Mechanism::Edt => "edt",
        }
    }
}

/// The node device whose hooks see the pod's traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    HostVeth { ifindex: u32, ifname: String },
    Master { ifindex: u32, ifname: String, pod_mac: [u8; 6] },
}

impl Place {
    pub fn device(&self) -> (u32, &str) {
        match self {
            Place::HostVeth { ifindex, ifname } | Place::Master { ifindex, ifname, .. } => (*ifindex, ifname),
        }
    }

    /// The hook a direction's traffic crosses, and the MAC keying it (none: the whole device).
    fn hook(&self, direction: Direction) -> (Hook, Option<[u8; 6]>) {
        match (self, direction) {
            (Place::HostVeth { .. }, Direction::Egress) => (Hook::Ingress, None),
            (Place::HostVeth { .. }, Direction::Ingress) => (Hook::Egress, None),
            (Place::Master { pod_mac, .. }, Direction::Ingress) => (Hook::Ingress, Some(*pod_mac)),
            (Place::Master { pod_mac, .. }, Direction::Egress) => (Hook::Egress, Some(*pod_mac)),
        }
    }
}

/// One limited direction of an attachment, as installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub direction: Direction,
    pub ifindex: u32,
    pub ifname: String,
    pub hook: Hook,
    /// The pod's MAC, when the device carries other traffic too.
    #[serde(default)]
    pub mac: Option<[u8; 6]>,
    pub rate_bps: u64,
    /// As configured (None: the default).
    #[serde(default)]
    pub burst_bits: Option<u64>,
    /// As enforced.
    pub burst_ns: u64,
    pub mechanism: Mechanism,
}

impl Entry {
    pub fn key(&self) -> ShapeKey {
        ShapeKey {
            ifindex: self.ifindex,
            hook: match self.hook {
                Hook::Ingress => HOOK_INGRESS,
                Hook::Egress => HOOK_EGRESS,
            },
            pad: 0,
            mac: self.mac.unwrap_or_default(),
        }
    }

    /// The map value, with a fresh clock.
    pub fn shape(&self) -> Shape {
        Shape {
            rate_bps: self.rate_bps,
            burst_ns: self.burst_ns,
            flags: if self.mechanism == Mechanism::Edt { SHAPE_EDT } else { 0 },
            pad: 0,
            tat: 0,
        }
    }

    /// The enforced burst in bits.
    pub fn effective_burst_bits(&self) -> u64 {
        (u128::from(self.burst_ns) * u128::from(self.rate_bps) / u128::from(NSEC_PER_SEC)) as u64
    }

    /// The same limit with another rate and burst (an update in place).
    pub fn with_limit(&self, limit: Limit) -> Entry {
        Entry {
            rate_bps: limit.rate_bps,
            burst_bits: limit.burst_bits,
            burst_ns: burst_ns(limit.rate_bps, limit.burst_bits),
            ..self.clone()
        }
    }
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} bit/s (burst {} bit) on {} {:?}, {}",
            self.direction.as_str(),
            self.rate_bps,
            self.effective_burst_bits(),
            self.ifname,
            self.hook,
            self.mechanism.as_str()
        )
    }
}

/// The time `bytes` take at `rate_bps`, rounded up.
fn time_ns(bytes: u64, rate_bps: u64) -> u64 {
    let ns = (u128::from(bytes) * 8 * u128::from(NSEC_PER_SEC)).div_ceil(u128::from(rate_bps.max(1)));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// The enforced bucket of a limit, in nanoseconds at its rate (see the module docs: the
/// configured burst does not change it).
pub fn burst_ns(rate_bps: u64, _burst_bits: Option<u64>) -> u64 {
    BUCKET_NS.max(time_ns(MIN_BURST_BYTES, rate_bps.max(1)))
}

/// The entries of `limits` at `place`; `paces` says whether the place's device has an fq root
/// qdisc (then its transmit path paces with EDT).
pub fn entries(place: &Place, limits: &Limits, paces: bool) -> Vec<Entry> {
    let (ifindex, ifname) = place.device();
    [(Direction::Ingress, limits.ingress), (Direction::Egress, limits.egress)]
        .into_iter()
        .filter_map(|(direction, limit)| {
            let limit = limit?;
            let (hook, mac) = place.hook(direction);
            let mechanism =
                if hook == Hook::Egress && paces { Mechanism::Edt } else { Mechanism::TokenBucket };
            Some(Entry {
                direction,
                ifindex,
                ifname: ifname.to_owned(),
                hook,
                mac,
                rate_bps: limit.rate_bps,
                burst_bits: limit.burst_bits,
                burst_ns: burst_ns(limit.rate_bps, limit.burst_bits),
                mechanism,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error(
        "network {0}: SR-IOV VF traffic bypasses the host, so plexus-bandwidth cannot shape it; \
         the VF limits itself: set max_tx_rate (Mbit/s) in the sriov plugin's config"
    )]
    Sriov(String),
    #[error(
        "network {network}: plexus-bandwidth shapes veth-based (bridge, ptp, ...) and macvlan attachments; \
         {plugin:?} gives the host no per-pod hook: use the reference bandwidth plugin or none"
    )]
    Unsupported { network: String, plugin: String },
    #[error("plexus-bandwidth cannot shape a macvlan whose master is in the pod (linkInContainer)")]
    LinkInContainer,
    #[error("the previous plugin's result has no MAC address for the pod interface {0}")]
    NoPodMac(String),
    #[error(
        "the previous plugin's result names no host-side interface for the pod (a veth); \
         plexus-bandwidth needs one to shape the attachment"
    )]
    NoHostInterface,
    #[error("the node has no interface {0}")]
    MissingInterface(String),
    #[error("the macvlan config names no master and the node has no default route to take it from")]
    NoMaster,
}

/// Where the attachment made by `first_plugin` (the configlist's first) is shaped.
pub fn place(
    network: &str,
    first_plugin: Option<&Map<String, Value>>,
    prev: &CniResult,
    ifname: &str,
    node: &[NodeInterface],
    default_route: Option<u32>,
) -> Result<Place, PlaceError> {
    let plugin_type = first_plugin.and_then(|p| p.get("type")).and_then(Value::as_str).unwrap_or_default();
    let key = |k: &str| first_plugin.and_then(|p| p.get(k)).and_then(Value::as_str).filter(|s| !s.is_empty());
    let by_name = |name: &str| {
        node.iter().find(|i| i.name == name).ok_or_else(|| PlaceError::MissingInterface(name.to_owned()))
    };
    match plugin_type {
        "sriov" => Err(PlaceError::Sriov(network.to_owned())),
        "macvlan" => {
            if first_plugin.and_then(|p| p.get("linkInContainer")).and_then(Value::as_bool) == Some(true) {
                return Err(PlaceError::LinkInContainer);
            }
            let master = match key("master") {
                Some(name) => by_name(name)?,
                None => default_route
                    .and_then(|index| node.iter().find(|i| i.index == index))
                    .ok_or(PlaceError::NoMaster)?,
            };
            let in_sandbox =
                |i: &&crate::cni::result::Interface| i.sandbox.as_deref().is_some_and(|s| !s.is_empty());
            let pod = prev
                .interfaces
                .iter()
                .filter(in_sandbox)
                .find(|i| i.name == ifname)
                .or_else(|| prev.interfaces.iter().find(in_sandbox));
            let pod_mac = pod
                .and_then(|i| i.mac.as_deref())
                .and_then(|text| text.parse::<Mac>().ok().map(|m| m.0))
                .ok_or_else(|| PlaceError::NoPodMac(ifname.to_owned()))?;
            Ok(Place::Master { ifindex: master.index, ifname: master.name.clone(), pod_mac })
        }
        "ipvlan" | "host-device" | "vlan" | "dummy" => {
            Err(PlaceError::Unsupported { network: network.to_owned(), plugin: plugin_type.to_owned() })
        }
        _ => {
            let bridge = if plugin_type == "bridge" { Some(key("bridge").unwrap_or("cni0")) } else { None };
            let host = prev
                .interfaces
                .iter()
                .filter(|i| i.sandbox.as_deref().is_none_or(str::is_empty))
                .filter(|i| Some(i.name.as_str()) != bridge)
                .find(|i| node.iter().any(|n| n.name == i.name))
                .ok_or(PlaceError::NoHostInterface)?;
            let veth = by_name(&host.name)?;
            Ok(Place::HostVeth { ifindex: veth.index, ifname: veth.name.clone() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MBIT: u64 = 1_000_000;

    fn node() -> Vec<NodeInterface> {
        let i = |index: u32, name: &str| NodeInterface {
            index,
            name: name.into(),
            mac: Some([2, 0, 0, 0, 0, index as u8]),
            macvlan_lower: None,
            addrs: Vec::new(),
            master: None,
            wire: true,
        };
        vec![i(2, "eth0"), i(3, "br0"), i(4, "veth1234"), i(5, "lan0")]
    }

    fn prev(v: Value) -> CniResult {
        CniResult::parse(&v, "1.0.0").unwrap()
    }

    fn plugin(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn the_bucket_covers_a_retransmission_timeout_whatever_the_burst() {
        for burst in [None, Some(1), Some(1_000_000), Some(2_147_483_647), Some(u64::MAX)] {
            assert_eq!(burst_ns(10_000 * MBIT, burst), BUCKET_NS);
            assert_eq!(burst_ns(100 * MBIT, burst), BUCKET_NS);
        }
        // Very low rates: two full GSO packets, however long that takes (the spec's 2 kbit/s).
        assert_eq!(burst_ns(2048, Some(300)), time_ns(MIN_BURST_BYTES, 2048));
        assert_eq!(burst_ns(MBIT, None), 1_048_576_000);
        assert_eq!(burst_ns(0, None), time_ns(MIN_BURST_BYTES, 1));
    }

    #[test]
    fn effective_bursts_read_back_in_bits() {
        let e = entries(
            &Place::HostVeth { ifindex: 4, ifname: "veth1234".into() },
            &Limits {
                ingress: Some(Limit { rate_bps: 1000 * MBIT, burst_bits: Some(2_147_483_647) }),
                egress: None,
            },
            false,
        );
        assert_eq!(e[0].effective_burst_bits(), 300_000_000);
        assert_eq!(
            e[0].to_string(),
            "ingress 1000000000 bit/s (burst 300000000 bit) on veth1234 Egress, token-bucket"
        );
    }

    #[test]
    fn veth_limits_key_on_the_device_and_macvlan_limits_on_the_pods_mac() {
        let limits = Limits {
            ingress: Some(Limit { rate_bps: 10 * MBIT, burst_bits: None }),
            egress: Some(Limit { rate_bps: 20 * MBIT, burst_bits: Some(400_000) }),
        };
        let veth = entries(&Place::HostVeth { ifindex: 4, ifname: "veth1234".into() }, &limits, false);
        assert_eq!(
            veth.iter().map(|e| (e.direction, e.hook, e.mac, e.mechanism)).collect::<Vec<_>>(),
            [
                (Direction::Ingress, Hook::Egress, None, Mechanism::TokenBucket),
                (Direction::Egress, Hook::Ingress, None, Mechanism::TokenBucket),
            ]
        );
        assert_eq!(veth[0].key(), ShapeKey { ifindex: 4, hook: HOOK_EGRESS, pad: 0, mac: [0; 6] });
        let mac = [0x0a, 0x58, 0, 0, 0, 5];
        let master =
            entries(&Place::Master { ifindex: 5, ifname: "lan0".into(), pod_mac: mac }, &limits, true);
        assert_eq!(
            master.iter().map(|e| (e.direction, e.hook, e.mac, e.mechanism)).collect::<Vec<_>>(),
            [
                (Direction::Ingress, Hook::Ingress, Some(mac), Mechanism::TokenBucket),
                (Direction::Egress, Hook::Egress, Some(mac), Mechanism::Edt),
            ]
        );
        assert_eq!(master[1].shape().flags, SHAPE_EDT);
        assert_eq!(master[1].shape().rate_bps, 20 * MBIT);
    }

    #[test]
    fn places_come_from_the_first_plugin_and_prev_result() {
        let bridged = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "br0"}, {"name": "veth1234"}, {"name": "net1", "mac": "0a:58:00:00:00:05", "sandbox": "/x"}],
            "ips": [{"address": "10.1.0.5/24", "interface": 2}]}));
        let first = plugin(json!({"type": "bridge", "bridge": "br0"}));
        assert_eq!(
            place("n", Some(&first), &bridged, "net1", &node(), None).unwrap(),
            Place::HostVeth { ifindex: 4, ifname: "veth1234".into() }
        );
        let ptp = plugin(json!({"type": "ptp"}));
        let r = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "veth1234"}, {"name": "net1", "sandbox": "/x"}]}));
        assert_eq!(place("n", Some(&ptp), &r, "net1", &node(), None).unwrap().device(), (4, "veth1234"));

        let mac = prev(json!({"cniVersion": "1.0.0",
            "interfaces": [{"name": "net1", "mac": "0a:58:00:00:00:05", "sandbox": "/x"}]}));
        let first = plugin(json!({"type": "macvlan", "master": "lan0"}));
        assert_eq!(
            place("n", Some(&first), &mac, "net1", &node(), None).unwrap(),
            Place::Master { ifindex: 5, ifname: "lan0".into(), pod_mac: [0x0a, 0x58, 0, 0, 0, 5] }
        );
        let first = plugin(json!({"type": "macvlan"}));
        assert_eq!(place("n", Some(&first), &mac, "net1", &node(), Some(2)).unwrap().device(), (2, "eth0"));
        assert_eq!(place("n", Some(&first), &mac, "net1", &node(), None), Err(PlaceError::NoMaster));
    }

    #[test]
    fn unshapeable_attachments_are_refused_saying_why() {
        let r = prev(json!({"cniVersion": "1.0.0", "interfaces": [{"name": "net1", "sandbox": "/x"}]}));
        let at = |t: Value| place("n", Some(&plugin(t)), &r, "net1", &node(), None).unwrap_err();
        assert!(at(json!({"type": "sriov"})).to_string().contains("max_tx_rate"));
        assert!(matches!(at(json!({"type": "ipvlan"})), PlaceError::Unsupported { .. }));
        assert_eq!(at(json!({"type": "macvlan", "master": "lan0"})), PlaceError::NoPodMac("net1".into()));
        assert_eq!(
            at(json!({"type": "macvlan", "master": "lan0", "linkInContainer": true})),
            PlaceError::LinkInContainer
        );
        assert_eq!(
            at(json!({"type": "macvlan", "master": "eth9"})),
            PlaceError::MissingInterface("eth9".into())
        );
        assert_eq!(at(json!({"type": "bridge", "bridge": "br0"})), PlaceError::NoHostInterface);
    }
}
