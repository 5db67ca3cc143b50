//! The link operations against the kernel: root, each test in network namespaces of its own
//! (made with `ip`, an oracle independent of the code under test).

use netlink_packet_route::link::{LinkAttribute, MacVlanMode};
use nix::errno::Errno;
use plexus_testkit::{run, Netns};

use super::*;
use crate::cni::result::{CniResult, Interface, IpConfig, Route};

/// A namespace of the test's own, as the kernel makes it (`lo` down).
fn empty() -> Netns {
    Netns::empty("lk-test")
}

/// A "host" with a veth x0 (peer x0p, which keeps it company) and a "pod" that already has a
/// link named x0, so nothing can travel under its own name.
fn host_and_pod() -> (Netns, Netns) {
    let (host, pod) = (empty(), empty());
    host.ip("link add x0 type veth peer name x0p");
    pod.ip("link add x0 type veth peer name x0q");
    (host, pod)
}

#[tokio::test]
async fn move_into_renames_inside_and_move_out_brings_the_link_back_under_its_name() {
    let (host, pod) = host_and_pod();
    let (from, to) = (Netlink::pod(&host.path()).await.unwrap(), Netlink::pod(&pod.path()).await.unwrap());
    let link = from.require("x0").await.unwrap();

    let inside = move_into(&from, &link, &to, "net5").await.unwrap();
    assert_eq!(inside.name, "net5");
    assert!(pod.has_link("net5") && pod.has_link("x0") && !host.has_link("x0"));
    assert!(!pod.ip("link").contains("plx"), "no temporary name left behind");

    let back = move_out(&to, &inside, &from, "x0").await.unwrap();
    assert_eq!(back.name, "x0");
    assert!(host.has_link("x0") && !pod.has_link("net5"));
}

#[tokio::test]
async fn a_renamed_link_is_what_the_kernel_reads_back() {
    let ns = empty();
    ns.ip("link add r0 type veth peer name r0p");
    let nl = Netlink::pod(&ns.path()).await.unwrap();
    let before = nl.require("r0").await.unwrap();
    let renamed = nl.rename(&before, "r9").await.unwrap();
    let read = nl.require("r9").await.unwrap();
    let fields = |l: &LinkSnapshot| {
        (l.index, l.name.clone(), l.kind.clone(), l.mac.clone(), l.mtu, l.up, l.parent_index, l.master)
    };
    assert_eq!(fields(&renamed), fields(&read));
    assert!(renamed.message.attributes.iter().any(|a| matches!(a, LinkAttribute::IfName(n) if n == "r9")));
    assert!(!ns.has_link("r0"));
}

#[tokio::test]
async fn move_into_a_taken_name_fails_and_leaves_the_link_where_it_was() {
    let (host, pod) = host_and_pod();
    let (from, to) = (Netlink::pod(&host.path()).await.unwrap(), Netlink::pod(&pod.path()).await.unwrap());
    let link = from.require("x0").await.unwrap();
    let err = move_into(&from, &link, &to, "x0").await.unwrap_err();
    assert!(err.is(Errno::EEXIST), "{err}");
    assert!(err.to_string().contains("an interface named x0 is already there"), "{err}");
    assert!(host.has_link("x0"), "the link stays on the host under its name");
}

#[tokio::test]
async fn a_link_created_in_another_namespace_exists_only_there() {
    let (host, pod) = host_and_pod();
    let (from, to) = (Netlink::pod(&host.path()).await.unwrap(), Netlink::pod(&pod.path()).await.unwrap());
    let master = from.require("x0").await.unwrap();
    let message = rtnetlink::LinkMacVlan::new("mv9", master.index, MacVlanMode::Bridge).build();
    from.create_in("macvlan mv9", message, &to).await.unwrap();
    let made = to.require("mv9").await.unwrap();
    assert!(made.is_macvlan() && made.parent_netnsid.is_some(), "{made:?}");
    assert_eq!(made.parent_index, Some(master.index));
    assert!(!host.has_link("mv9"));
}

fn result_for(ifname: &str, netns: &Netns) -> CniResult {
    let ip = |address: &str, gateway: &str| IpConfig {
        address: address.parse().unwrap(),
        gateway: Some(gateway.parse().unwrap()),
        interface: Some(0),
    };
    let route = |dst: &str| Route {
        dst: dst.parse().unwrap(),
        gw: None,
        mtu: None,
        advmss: None,
        priority: None,
        table: None,
        scope: None,
    };
    CniResult {
        interfaces: vec![Interface {
            name: ifname.into(),
            sandbox: Some(netns.path().display().to_string()),
            ..Default::default()
        }],
        ips: vec![ip("10.70.0.5/24", "10.70.0.1"), ip("fd70::5/64", "fd70::1")],
        routes: vec![route("0.0.0.0/0"), route("10.71.0.0/16"), route("fd71::/64")],
        ..Default::default()
    }
}

#[tokio::test]
async fn configure_ip_applies_addresses_and_routes_that_verify_then_checks() {
    let pod = empty();
    pod.ip("link add net1 type veth peer name peer1");
    pod.ip("link set peer1 up");
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let result = result_for("net1", &pod);
    configure_ip(&ns, "net1", &result).await.unwrap();

    let addresses = pod.ip("-o addr show dev net1");
    assert!(addresses.contains("inet 10.70.0.5/24 brd 10.70.0.255"), "{addresses}");
    assert!(addresses.contains("inet6 fd70::5/64"), "{addresses}");
    // -d: iproute2 shows "proto boot" only in detail.
    let routes = pod.ip("-d route show dev net1") + &pod.ip("-d -6 route show dev net1");
    for want in [
        "default via 10.70.0.1 proto boot",
        "10.71.0.0/16 via 10.70.0.1 proto boot",
        "fd71::/64 via fd70::1 proto boot",
    ] {
        assert!(routes.contains(want), "{want:?} missing:\n{routes}");
    }
    verify_ips(&ns, "net1", &result.ips).await.unwrap();
    verify_routes(&ns, &result.routes).await.unwrap();

    // Applying it again changes nothing and fails on the addresses already there, as libcni does.
    assert!(configure_ip(&ns, "net1", &result).await.unwrap_err().is(Errno::EEXIST));

    pod.ip("route del 10.71.0.0/16");
    let err = verify_routes(&ns, &result.routes).await.unwrap_err();
    assert!(err.to_string().contains("checking route 10.71.0.0/16"), "{err}");
    pod.ip("addr del 10.70.0.5/24 dev net1");
    let err = verify_ips(&ns, "net1", &result.ips).await.unwrap_err();
    assert!(
        err.to_string().contains("10.70.0.5/24") && err.to_string().contains("not on the interface"),
        "{err}"
    );
}

#[tokio::test]
async fn an_ip_for_another_interface_is_refused_before_anything_changes() {
    let pod = empty();
    pod.ip("link add net1 type veth peer name peer1");
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let result = result_for("eth9", &pod);
    let err = configure_ip(&ns, "net1", &result).await.unwrap_err();
    assert!(err.to_string().contains("which is not net1"), "{err}");
    assert!(!pod.ip("addr show dev net1").contains("10.70.0.5"));
}

#[tokio::test]
async fn the_default_route_interface_is_the_first_default_routes() {
    let pod = empty();
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    assert_eq!(ns.default_route_interface().await.unwrap(), None);
    pod.ip("link add uplink type veth peer name uplinkp");
    pod.ip("link set uplink up");
    pod.ip("link set uplinkp up");
    pod.ip("addr add 10.80.0.2/24 dev uplink");
    pod.ip("route add default via 10.80.0.1");
    assert_eq!(ns.default_route_interface().await.unwrap().as_deref(), Some("uplink"));
}

#[tokio::test]
async fn clsact_is_added_once_and_a_second_add_is_fine() {
    let pod = empty();
    pod.ip("link add br0 type bridge");
    pod.ip("link add x0 type veth peer name x0p");
    pod.ip("link set x0 master br0");
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let x0 = ns.require("x0").await.unwrap();
    let bridge = ns.require("br0").await.unwrap();
    assert_eq!(x0.master, Some(bridge.index), "IFLA_MASTER is read");
    assert!(x0.ethernet_mac().is_some_and(|mac| mac.to_string() == x0.mac.clone().unwrap_or_default()));

    ns.add_clsact(x0.index).await.unwrap();
    ns.add_clsact(x0.index).await.expect("EEXIST counts as done");
    let qdiscs = run(&["tc", "-n", pod.name.as_str(), "qdisc", "show", "dev", "x0"]);
    assert!(qdiscs.contains("qdisc clsact ffff:"), "{qdiscs}");
    assert!(ns.filters(x0.index, FilterHook::Ingress).await.unwrap().is_empty());
    let root = ns.root_qdisc_kind(x0.index).await.unwrap();
    assert_ne!(root.as_deref(), Some("clsact"), "clsact hangs off ffff:fff1, not the root");
    let err = ns.add_clsact(9999).await.unwrap_err();
    assert!(err.is(Errno::ENODEV), "{err}");
}

/// A pod with veth pairs a0/a0p .. and nothing else but `lo`.
fn pod_with_veths(names: &[&str]) -> Netns {
    let pod = empty();
    for name in names {
        pod.ip(&format!("link add {name} type veth peer name {name}p"));
    }
    pod
}

#[tokio::test]
async fn deferred_deletions_wait_for_the_flush_then_go_together() {
    let pod = pod_with_veths(&["a0", "a1", "a2", "keep"]);
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let ((), pending) = deletions::deferring(async {
        for name in ["a0", "a1", "a2"] {
            ns.delete_soon(&ns.require(name).await.unwrap()).await.unwrap();
        }
    })
    .await;
    assert_eq!(pending.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a0", "a1", "a2"]);
    assert!(
        pod.has_link("a0") && pod.has_link("a1") && pod.has_link("a2"),
        "nothing deleted before the flush"
    );

    let failures = deletions::delete_deferred(pending).await;
    assert!(failures.is_empty(), "{failures:?}");
    for name in ["a0", "a0p", "a1", "a1p", "a2", "a2p"] {
        assert!(!pod.has_link(name), "{name} deleted with its peer");
    }
    assert!(pod.has_link("keep") && pod.has_link("keepp"), "a link nobody asked for stays");
    assert!(!pod.ip("-d link").contains(&format!("group {}", deletions::DELETION_GROUP)));
}

#[tokio::test]
async fn a_foreign_link_in_the_deletion_group_is_spared_and_the_batch_goes_one_by_one() {
    let pod = pod_with_veths(&["b0", "b1", "other"]);
    pod.ip(&format!("link set other group {}", deletions::DELETION_GROUP));
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let ((), pending) = deletions::deferring(async {
        for name in ["b0", "b1"] {
            ns.delete_soon(&ns.require(name).await.unwrap()).await.unwrap();
        }
    })
    .await;
    let failures = deletions::delete_deferred(pending).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(!pod.has_link("b0") && !pod.has_link("b1"));
    assert!(pod.has_link("other"), "the link the batch did not put in the group is not deleted");
}

#[tokio::test]
async fn outside_deferring_delete_soon_deletes_at_once_and_gone_links_count_as_deleted() {
    let pod = pod_with_veths(&["c0"]);
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let link = ns.require("c0").await.unwrap();
    ns.delete_soon(&link).await.unwrap();
    assert!(!pod.has_link("c0"));

    let ((), pending) = deletions::deferring(async { ns.delete_soon(&link).await.unwrap() }).await;
    assert!(deletions::delete_deferred(pending).await.is_empty(), "an already deleted link is no failure");
}

#[tokio::test]
async fn a_deletion_is_done_when_it_returns_and_one_the_kernel_refuses_keeps_its_errno() {
    let pod = pod_with_veths(&["d0"]);
    let ns = Netlink::pod(&pod.path()).await.unwrap();
    let link = ns.require("d0").await.unwrap();
    ns.delete(&link).await.unwrap();
    assert!(!pod.has_link("d0") && !pod.has_link("d0p"), "gone with its peer by the answer");
    ns.delete(&link).await.expect("an index already gone counts as deleted");

    let lo = ns.require("lo").await.unwrap();
    let refused = ns.delete(&lo).await.expect_err("the kernel does not delete lo");
    assert!(refused.is(Errno::EOPNOTSUPP), "{refused}");
    assert!(refused.to_string().contains("deleting lo in network namespace"), "{refused}");
    assert!(pod.has_link("lo"));
}
