//! These tests need root and a real kernel: each builds its own network namespace with `ip`.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use plexus_testkit::Netns;

use super::in_pod::{default_routes, delete_route, main_defaults, replace_default_routes};
use super::links::links_by_index;
use super::*;
use crate::netlink::{IpFamily, Netlink};

/// A namespace as the kernel makes it (`lo` down).
fn empty() -> Netns {
    Netns::empty("plx-nt")
}

/// A pod with two attachments, each a veth whose peer stays in the pod to give it a carrier:
/// eth0 (10.0.0.2/24, fd00::2/64) holding both default routes, and net1 (10.1.0.2/24,
/// 10.1.1.2/24, fd01::2/64, fd02::2/64) with none.
fn pod() -> Netns {
    let ns = empty();
    for (ifname, peer) in [("eth0", "peer0"), ("net1", "peer1")] {
        ns.ip(&format!("link add {ifname} type veth peer name {peer}"));
        ns.ip(&format!("link set {ifname} up"));
        ns.ip(&format!("link set {peer} up"));
    }
    ns.ip("link set lo up");
    for address in ["10.0.0.2/24 dev eth0", "10.1.0.2/24 dev net1", "10.1.1.2/24 dev net1"] {
        ns.ip(&format!("addr add {address}"));
    }
    // nodad: duplicate address detection would leave the address tentative, and the kernel
    // refuses gateways behind a tentative address for a second or so.
    for address in ["fd00::2/64 dev eth0", "fd01::2/64 dev net1", "fd02::2/64 dev net1"] {
        ns.ip(&format!("addr add {address} nodad"));
    }
    ns.ip("-4 route add default via 10.0.0.1 dev eth0");
    ns.ip("-6 route add default via fd00::1 dev eth0");
    ns
}

/// (gateway, metric) of each default route as iproute2 sees it, an oracle independent of the
/// code under test.
fn ip_defaults(ns: &Netns, family: &str) -> Vec<(String, u32)> {
    ns.ip(&format!("{family} route show default"))
        .lines()
        .map(|line| (word_after(line, "via").unwrap_or_default(), metric_in(line)))
        .collect()
}

fn word_after(line: &str, key: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    words.by_ref().find(|word| *word == key)?;
    words.next().map(str::to_owned)
}

/// iproute2 leaves out "metric 0".
fn metric_in(line: &str) -> u32 {
    word_after(line, "metric").map_or(0, |metric| metric.parse().expect("metric is a number"))
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("test addresses are valid")
}

fn pair(ifname: &str, gateway: &str) -> (String, Option<IpAddr>) {
    (ifname.to_owned(), Some(ip(gateway)))
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|name| name.to_string()).collect()
}

/// Names of all links in that namespace.
async fn link_names(netns: &Path) -> Vec<String> {
    let ns = Netlink::pod(netns).await.expect("netlink in the namespace");
    links_by_index(&ns).await.expect("link dump").into_values().collect()
}

#[tokio::test]
async fn a_pods_socket_sees_the_namespace_links_not_the_hosts() {
    let ns = pod();
    let pod = Netlink::pod(&ns.path()).await.expect("netlink in the test netns");
    let links = pod.links().await.expect("link dump");
    assert_eq!(links.len(), 5, "lo, eth0, peer0, net1, peer1 and nothing from the host");
    let host: BTreeSet<String> = link_names(Path::new("/proc/self/ns/net")).await.into_iter().collect();
    assert_ne!(host, names(&["lo", "eth0", "peer0", "net1", "peer1"]), "the host's own namespace differs");
}

// A multi-threaded runtime moves tasks between workers; the socket must stay in the pod anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_names_lists_every_link_of_the_namespace() {
    let ns = pod();
    let found: BTreeSet<String> = link_names(&ns.path()).await.into_iter().collect();
    assert_eq!(found, names(&["lo", "eth0", "peer0", "net1", "peer1"]));
    let empty = empty();
    assert_eq!(link_names(&empty.path()).await, vec!["lo".to_owned()]);
}

#[tokio::test]
async fn default_routes_reports_interface_and_gateway_in_metric_order() {
    let ns = pod();
    ns.ip("-4 route add default dev net1 metric 50");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    let expected = vec![pair("eth0", "10.0.0.1"), ("net1".to_owned(), None), pair("eth0", "fd00::1")];
    assert_eq!(routes, expected);
}

#[tokio::test]
async fn default_routes_is_empty_without_default_routes() {
    let ns = empty();
    assert_eq!(default_routes(&ns.path()).await.expect("default routes"), vec![]);
}

#[tokio::test]
async fn replace_v4_leaves_v6_alone() {
    let ns = pod();
    replace_default_routes(&ns.path(), "net1", &[ip("10.1.0.1")]).await.expect("replace");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    assert_eq!(routes, vec![pair("net1", "10.1.0.1"), pair("eth0", "fd00::1")]);
}

#[tokio::test]
async fn replace_v6_leaves_v4_alone() {
    let ns = pod();
    replace_default_routes(&ns.path(), "net1", &[ip("fd01::1")]).await.expect("replace");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    assert_eq!(routes, vec![pair("eth0", "10.0.0.1"), pair("net1", "fd01::1")]);
}

#[tokio::test]
async fn replace_both_families() {
    let ns = pod();
    replace_default_routes(&ns.path(), "net1", &[ip("fd01::1"), ip("10.1.0.1")]).await.expect("replace");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    assert_eq!(routes, vec![pair("net1", "10.1.0.1"), pair("net1", "fd01::1")]);
}

#[tokio::test]
async fn replace_with_no_gateway_clears_both_families() {
    let ns = pod();
    ns.ip("-4 route add default via 10.1.0.1 dev net1 metric 10");
    replace_default_routes(&ns.path(), "net1", &[]).await.expect("replace");
    assert_eq!(default_routes(&ns.path()).await.expect("default routes"), vec![]);
    assert_eq!(ns.ip("-4 route show default") + &ns.ip("-6 route show default"), "");
}

#[tokio::test]
async fn replace_removes_default_routes_on_every_interface() {
    let ns = pod();
    ns.ip("-4 route add default via 10.1.1.1 dev net1 metric 7");
    ns.ip("-6 route add default via fd02::1 dev net1 metric 7");
    replace_default_routes(&ns.path(), "net1", &[ip("10.1.0.1"), ip("fd01::1")]).await.expect("replace");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    assert_eq!(routes, vec![pair("net1", "10.1.0.1"), pair("net1", "fd01::1")]);
}

#[tokio::test]
async fn multiple_gateways_get_increasing_metrics_so_the_first_wins() {
    let ns = pod();
    let gateways = [ip("10.1.0.1"), ip("10.1.1.1"), ip("fd01::1"), ip("fd02::1")];
    replace_default_routes(&ns.path(), "net1", &gateways).await.expect("replace");
    let v4 = vec![("10.1.0.1".to_owned(), 0), ("10.1.1.1".to_owned(), 1)];
    assert_eq!(ip_defaults(&ns, "-4"), v4);
    // IPv6 metrics are shifted by one: the kernel would turn 0 into 1024.
    let v6 = vec![("fd01::1".to_owned(), 3), ("fd02::1".to_owned(), 4)];
    assert_eq!(ip_defaults(&ns, "-6"), v6);
    let routes = default_routes(&ns.path()).await.expect("default routes");
    let expected = vec![
        pair("net1", "10.1.0.1"),
        pair("net1", "10.1.1.1"),
        pair("net1", "fd01::1"),
        pair("net1", "fd02::1"),
    ];
    assert_eq!(routes, expected);
}

#[tokio::test]
async fn replace_is_idempotent() {
    let ns = pod();
    let gateways = [ip("10.1.0.1"), ip("fd01::1"), ip("10.1.1.1")];
    replace_default_routes(&ns.path(), "net1", &gateways).await.expect("first replace");
    let first =
        (ns.ip("-4 route show"), ns.ip("-6 route show"), default_routes(&ns.path()).await.expect("routes"));
    replace_default_routes(&ns.path(), "net1", &gateways).await.expect("second replace");
    let second =
        (ns.ip("-4 route show"), ns.ip("-6 route show"), default_routes(&ns.path()).await.expect("routes"));
    assert_eq!(first, second);
}

#[tokio::test]
async fn unreachable_v4_gateway_is_reported_clearly() {
    let ns = pod();
    let err =
        replace_default_routes(&ns.path(), "net1", &[ip("192.168.77.1")]).await.expect_err("unreachable");
    assert!(matches!(err, NetnsError::GatewayUnreachable { .. }), "{err:?}");
    let text = err.to_string();
    let expected = format!(
        "gateway 192.168.77.1 is not reachable through net1 in network namespace {}: ",
        ns.path().display()
    );
    assert!(text.starts_with(&expected), "{text}");
}

#[tokio::test]
async fn unreachable_v6_gateway_is_reported_clearly() {
    let ns = pod();
    // fd00::1 is on eth0's subnet, not net1's.
    let err = replace_default_routes(&ns.path(), "net1", &[ip("fd00::1")]).await.expect_err("unreachable");
    assert!(matches!(err, NetnsError::GatewayUnreachable { .. }), "{err:?}");
    assert!(err.to_string().starts_with("gateway fd00::1 is not reachable through net1 in "), "{err}");
}

#[tokio::test]
async fn unknown_interface_leaves_routes_untouched() {
    let ns = pod();
    let err = replace_default_routes(&ns.path(), "net9", &[ip("10.1.0.1")]).await.expect_err("no net9");
    assert!(matches!(&err, NetnsError::LinkNotFound { ifname, .. } if ifname == "net9"), "{err:?}");
    let routes = default_routes(&ns.path()).await.expect("default routes");
    assert_eq!(routes, vec![pair("eth0", "10.0.0.1"), pair("eth0", "fd00::1")]);
}

#[tokio::test]
async fn removing_a_route_that_vanished_meanwhile_is_fine() {
    let ns = pod();
    let pod = Netlink::pod(&ns.path()).await.expect("netlink");
    let links = links_by_index(&pod).await.expect("links");
    let mut stale = main_defaults(&pod, &ns.path(), IpFamily::V4).await.expect("v4 defaults");
    stale.extend(main_defaults(&pod, &ns.path(), IpFamily::V6).await.expect("v6 defaults"));
    assert_eq!(stale.len(), 2);
    ns.ip("-4 route flush default");
    ns.ip("-6 route flush default");
    for route in stale {
        delete_route(&pod, &ns.path(), &links, route).await.expect("already gone is fine");
    }
}

#[test]
fn netns_exists_only_for_network_namespaces() {
    use crate::netlink::netns_exists;

    let ns = empty();
    assert!(netns_exists(&ns.path()));
    assert!(netns_exists(Path::new("/proc/self/ns/net")));
    assert!(!netns_exists(Path::new("/var/run/netns/plx-nt-does-not-exist")));
    assert!(!netns_exists(Path::new("/proc/self/ns/mnt")), "a namespace, but not a network one");
    assert!(!netns_exists(Path::new("/proc/self/status")), "a plain file");
    let path = ns.path();
    drop(ns);
    assert!(!netns_exists(&path), "deleted");
}
