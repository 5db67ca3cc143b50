//! Traffic control on a link, for the dataplane: the clsact qdisc its programs hang from, the
//! filters under it, and the root qdisc (which tells whether a device paces with EDT).

use futures::TryStreamExt;
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nix::errno::Errno;
use rtnetlink::packet_core::{NetlinkMessage, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST};

use super::error::errno_of;
use super::{LinkError, Netlink};

/// Which side of clsact a filter sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterHook {
    Ingress,
    Egress,
}

/// A filter on a clsact hook, as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcFilter {
    pub handle: u32,
    pub priority: u16,
    /// TCA_KIND: "bpf" for a cls_bpf filter.
    pub kind: Option<String>,
}

impl TcFilter {
    fn from_message(message: &TcMessage) -> TcFilter {
        TcFilter {
            handle: u32::from(message.header.handle),
            // tcm_info: the priority in the upper 16 bits, the protocol in the lower.
            priority: u16::try_from(message.header.info >> 16).unwrap_or(u16::MAX),
            kind: kind_of(message),
        }
    }
}

/// TCA_KIND of a qdisc or filter.
fn kind_of(message: &TcMessage) -> Option<String> {
    message.attributes.iter().find_map(|a| match a {
        TcAttribute::Kind(kind) => Some(kind.clone()),
        _ => None,
    })
}

/// `tc qdisc add dev IFINDEX clsact`: parent ffff:fff1, handle ffff:0.
fn clsact_message(ifindex: i32) -> NetlinkMessage<RouteNetlinkMessage> {
    let mut qdisc = TcMessage::with_index(ifindex);
    qdisc.header.parent = TcHandle::CLSACT;
    qdisc.header.handle = TcHandle { major: 0xffff, minor: 0 };
    qdisc.attributes.push(TcAttribute::Kind("clsact".to_owned()));
    let mut message = NetlinkMessage::from(RouteNetlinkMessage::NewQueueDiscipline(qdisc));
    message.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    message
}

impl Netlink {
    /// Adds the clsact qdisc to the link `ifindex`; one already there (ours, or someone
    /// else's: the kernel answers EEXIST) is fine.
    pub async fn add_clsact(&self, ifindex: u32) -> Result<(), LinkError> {
        let action = format!("adding the clsact qdisc to interface {ifindex}");
        let index = tc_index(self, &action, ifindex)?;
        match self.acknowledged(clsact_message(index)).await {
            Err(e) if errno_of(&e) != Some(Errno::EEXIST) => Err(self.error(action, e)),
            _ => Ok(()),
        }
    }

    /// The filters on `hook` of the link `ifindex` (under its clsact qdisc).
    pub async fn filters(&self, ifindex: u32, hook: FilterHook) -> Result<Vec<TcFilter>, LinkError> {
        let action = format!("listing the filters of interface {ifindex}");
        let index = tc_index(self, &action, ifindex)?;
        let request = self.handle().traffic_filter(index).get();
        let request = match hook {
            FilterHook::Ingress => request.ingress(),
            FilterHook::Egress => request.egress(),
        };
        let filters: Vec<TcMessage> =
            request.execute().try_collect().await.map_err(|e| self.error(action, e))?;
        Ok(filters.iter().map(TcFilter::from_message).collect())
    }

    /// The kind of the link's root qdisc ("fq", "noqueue", "pfifo_fast", ...), if it has one.
    pub async fn root_qdisc_kind(&self, ifindex: u32) -> Result<Option<String>, LinkError> {
        let action = format!("reading the qdiscs of interface {ifindex}");
        let index = tc_index(self, &action, ifindex)?;
        let qdiscs: Vec<TcMessage> = self
            .handle()
            .qdisc()
            .get()
            .index(index)
            .execute()
            .try_collect()
            .await
            .map_err(|e| self.error(action, e))?;
        Ok(qdiscs
            .iter()
            .filter(|q| q.header.index == index && q.header.parent == TcHandle::ROOT)
            .find_map(kind_of))
    }
}

/// Traffic control numbers links with a signed index.
fn tc_index(ns: &Netlink, action: &str, ifindex: u32) -> Result<i32, LinkError> {
    i32::try_from(ifindex)
        .map_err(|_| ns.refuse(action, Errno::EINVAL, "the interface index is out of range"))
}
