//! Which devices pace with EDT: those whose root qdisc is fq, which holds packets until their
//! `skb->tstamp`. Read over netlink at attach time.

use futures::TryStreamExt;
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};

/// The kind of `ifindex`'s root qdisc ("fq", "noqueue", "pfifo_fast", ...), if it has one.
pub async fn root_kind(ifindex: u32) -> Result<Option<String>, String> {
    let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| format!("netlink: {e}"))?;
    let driver = tokio::spawn(connection);
    let index = i32::try_from(ifindex).map_err(|_| format!("interface index {ifindex} out of range"))?;
    let qdiscs: Result<Vec<TcMessage>, _> = handle.qdisc().get().index(index).execute().try_collect().await;
    driver.abort();
    let qdiscs =
        qdiscs.map_err(|e| format!("reading the qdiscs of interface {ifindex} over netlink: {e}"))?;
    Ok(qdiscs.iter().filter(|q| q.header.index == index && q.header.parent == TcHandle::ROOT).find_map(|q| {
        q.attributes.iter().find_map(|a| match a {
            TcAttribute::Kind(k) => Some(k.clone()),
            _ => None,
        })
    }))
}

/// True when `ifindex` paces with EDT (its root qdisc is fq). Unknown counts as no: the token
/// bucket works everywhere.
pub async fn paces(ifindex: u32) -> bool {
    match root_kind(ifindex).await {
        Ok(kind) => kind.as_deref() == Some("fq"),
        Err(e) => {
            tracing::warn!("bandwidth: {e}; using the token bucket");
            false
        }
    }
}
