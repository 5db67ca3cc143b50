//! The decision against a truth table: the NetworkPolicy cases users know, each a set of
//! policies and the probes whose verdicts it fixes, on one cluster of three namespaces and two
//! networks. Where multi-networkpolicy-iptables gets a case wrong, the case says so.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::{json, Value};

use super::compile::{allows as compiled_allows, compile};
use super::decide::{decide, Cluster, NamedPort, PodView, Probe, ProbeProtocol, Side};
use super::model::{NetworkName, Policy, Protocol};

const NET1: &str = "team-a/net1";
const NET2: &str = "team-a/net2";

pub(crate) fn network(text: &str) -> NetworkName {
    let (ns, name) = text.split_once('/').expect("ns/name");
    NetworkName::new(ns, name)
}

fn pod(
    namespace: &str,
    name: &str,
    labels: &[(&str, &str)],
    nets: &[(&str, &[&str])],
    ports: &[(&str, u16, Protocol)],
) -> PodView {
    PodView {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        addresses: nets
            .iter()
            .map(|(n, a)| (network(n), a.iter().map(|a| a.parse().expect("an address")).collect()))
            .collect(),
        ports: ports
            .iter()
            .map(|(n, number, protocol)| NamedPort {
                name: (*n).to_owned(),
                number: *number,
                protocol: *protocol,
            })
            .collect(),
    }
}

/// team-a and team-b are prod, team-c dev. Every pod is on team-a/net1 but a-nonet; a-web and
/// b-cli are on team-a/net2 too. a-web's port "http" is 8080, b-web's is 9090.
pub(crate) fn cluster() -> Cluster {
    use Protocol::*;
    let ns = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Cluster {
        namespaces: BTreeMap::from([
            ("team-a".to_owned(), ns(&[("team", "a"), ("env", "prod")])),
            ("team-b".to_owned(), ns(&[("team", "b"), ("env", "prod")])),
            ("team-c".to_owned(), ns(&[("team", "c"), ("env", "dev")])),
        ]),
        pods: vec![
            pod(
                "team-a",
                "a-web",
                &[("app", "web")],
                &[(NET1, &["10.1.0.10", "fd01::10"]), (NET2, &["10.2.0.10"])],
                &[("http", 8080, Tcp), ("dns", 53, Udp), ("diameter", 3868, Sctp)],
            ),
            pod(
                "team-a",
                "a-db",
                &[("app", "db")],
                &[(NET1, &["10.1.0.11", "fd01::11"])],
                &[("pg", 5432, Tcp)],
            ),
            pod("team-a", "a-cli", &[("app", "cli")], &[(NET1, &["10.1.0.12"])], &[]),
            pod("team-a", "a-debug", &[("app", "cli"), ("debug", "1")], &[(NET1, &["10.1.0.13"])], &[]),
            pod(
                "team-b",
                "b-cli",
                &[("app", "cli")],
                &[(NET1, &["10.1.0.20", "fd01::20"]), (NET2, &["10.2.0.20"])],
                &[],
            ),
            pod("team-b", "b-web", &[("app", "web")], &[(NET1, &["10.1.0.21"])], &[("http", 9090, Tcp)]),
            pod("team-c", "c-cli", &[("app", "cli")], &[(NET1, &["10.1.0.30"])], &[]),
            pod("team-a", "a-nonet", &[("app", "web")], &[(NET2, &["10.2.0.40"])], &[]),
        ],
    }
}

/// A pod's first address on a network, or an address itself (outside the cluster).
fn address(c: &Cluster, net: &NetworkName, who: &str) -> IpAddr {
    if let Ok(a) = who.parse() {
        return a;
    }
    let (name, v6) = who.strip_suffix("/6").map_or((who, false), |n| (n, true));
    let pod = c.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("no pod {name}"));
    let addrs = pod.addresses.get(net).unwrap_or_else(|| panic!("{name} is not on {net}"));
    *addrs.iter().find(|a| a.is_ipv6() == v6).unwrap_or_else(|| panic!("{name} has no such address on {net}"))
}

/// `"a-cli -> a-web tcp/8080"`, on `net`: pods by name (`name/6` for its IPv6 address) or
/// addresses; `icmp` has no port.
pub(crate) fn probe(c: &Cluster, net: &str, text: &str) -> Probe {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [source, "->", destination, what] = parts[..] else { panic!("bad probe {text}") };
    let net = network(net);
    let (protocol, port) = match what.split_once('/') {
        Some(("tcp", p)) => (ProbeProtocol::Known(Protocol::Tcp), Some(p.parse().expect("a port"))),
        Some(("udp", p)) => (ProbeProtocol::Known(Protocol::Udp), Some(p.parse().expect("a port"))),
        Some(("sctp", p)) => (ProbeProtocol::Known(Protocol::Sctp), Some(p.parse().expect("a port"))),
        None if what == "icmp" => (ProbeProtocol::Other(1), None),
        _ => panic!("bad protocol in {text}"),
    };
    Probe {
        source: address(c, &net, source),
        destination: address(c, &net, destination),
        network: net,
        protocol,
        port,
    }
}

/// A policy in `namespace` for `networks` (comma-separated `ns/name`).
pub(crate) fn policy(namespace: &str, name: &str, networks: &str, spec: Value) -> Policy {
    let networks = networks.split(',').map(network).collect();
    let spec = serde_json::from_value(spec).expect("a NetworkPolicy spec");
    Policy::from_spec(namespace, name, networks, &spec).expect("a valid policy")
}

pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) policies: Vec<Policy>,
    /// (network, probe, allowed)
    pub(crate) probes: Vec<(&'static str, &'static str, bool)>,
}

fn case(name: &'static str, policies: Vec<Policy>, probes: &[(&'static str, bool)]) -> Case {
    Case { name, policies, probes: probes.iter().map(|(p, a)| (NET1, *p, *a)).collect() }
}

fn on(mut c: Case, probes: &[(&'static str, &'static str, bool)]) -> Case {
    c.probes.extend_from_slice(probes);
    c
}

fn a(name: &str, spec: Value) -> Policy {
    policy("team-a", name, NET1, spec)
}

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case(
            "no policy: everything passes",
            vec![],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("b-cli -> a-db tcp/5432", true),
                ("192.0.2.1 -> a-web udp/53", true),
                ("a-web -> 192.0.2.1 tcp/443", true),
                ("a-cli -> a-web icmp", true),
            ],
        ),
        case(
            "deny all ingress to the web pods",
            vec![a(
                "deny",
                json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", false),
                ("b-cli -> a-web tcp/8080", false),
                ("a-web -> a-cli tcp/22", true),
                ("a-cli -> a-db tcp/5432", true),
                ("b-cli -> b-web tcp/9090", true),
            ],
        ),
        case(
            "deny all ingress in a namespace (empty podSelector)",
            vec![a("deny", json!({"podSelector": {}}))],
            &[
                ("a-cli -> a-db tcp/5432", false),
                ("192.0.2.1 -> a-db tcp/5432", false),
                ("a-db -> 192.0.2.1 tcp/443", true),
                ("a-db -> b-cli tcp/22", true),
                ("c-cli -> a-cli udp/53", false),
            ],
        ),
        case(
            "deny all egress in a namespace",
            vec![a("deny", json!({"podSelector": {}, "policyTypes": ["Egress"]}))],
            &[
                ("a-cli -> a-db tcp/5432", false),
                ("a-cli -> 192.0.2.1 tcp/443", false),
                ("b-cli -> a-db tcp/5432", true),
                ("b-cli -> b-web tcp/9090", true),
            ],
        ),
        case(
            "deny both directions",
            vec![a("deny", json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))],
            &[
                ("a-cli -> a-db tcp/5432", false),
                ("b-cli -> a-db tcp/5432", false),
                ("a-db -> b-cli tcp/22", false),
                ("b-cli -> c-cli tcp/22", true),
            ],
        ),
        case(
            "allow all ingress (one empty rule)",
            vec![a("all", json!({"podSelector": {}, "ingress": [{}]}))],
            &[
                ("c-cli -> a-web tcp/1", true),
                ("192.0.2.1 -> a-db sctp/9", true),
                ("b-cli -> a-web icmp", true),
            ],
        ),
        case(
            "allow all egress (one empty rule)",
            vec![a("all", json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))],
            &[("a-cli -> 192.0.2.1 tcp/443", true), ("a-db -> c-cli udp/5", true)],
        ),
        // multi-networkpolicy-iptables matches a podSelector-only peer in every namespace.
        case(
            "allow from pods of the policy's own namespace only (podSelector alone)",
            vec![a(
                "cli",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-debug -> a-web tcp/8080", true),
                ("b-cli -> a-web tcp/8080", false),
                ("c-cli -> a-web tcp/8080", false),
                ("a-db -> a-web tcp/8080", false),
            ],
        ),
        case(
            "allow from a namespace (namespaceSelector alone)",
            vec![a(
                "team-b",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
            )],
            &[
                ("b-cli -> a-web tcp/8080", true),
                ("b-web -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8080", false),
                ("c-cli -> a-web tcp/8080", false),
            ],
        ),
        case(
            "allow from pods in another namespace by both selectors",
            vec![a(
                "b-cli",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}, "podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
            )],
            &[
                ("b-cli -> a-web tcp/8080", true),
                ("b-web -> a-web tcp/8080", false),
                ("a-cli -> a-web tcp/8080", false),
                ("c-cli -> a-web tcp/8080", false),
            ],
        ),
        case(
            "two peers are a union (namespace OR pods)",
            vec![a(
                "either",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}, {"podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
            )],
            &[
                ("b-web -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8080", true),
                ("c-cli -> a-web tcp/8080", false),
                ("a-db -> a-web tcp/8080", false),
            ],
        ),
        case(
            "every namespace (empty namespaceSelector) but no outside address",
            vec![a(
                "pods",
                json!({
            "podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}),
            )],
            &[
                ("c-cli -> a-db tcp/5432", true),
                ("b-web -> a-db tcp/5432", true),
                ("10.1.0.200 -> a-db tcp/5432", false),
            ],
        ),
        case(
            "an empty podSelector peer is every pod of the policy's namespace",
            vec![a(
                "own",
                json!({
            "podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [{"podSelector": {}}]}]}),
            )],
            &[
                ("a-cli -> a-db tcp/5432", true),
                ("a-web -> a-db tcp/5432", true),
                ("b-cli -> a-db tcp/5432", false),
            ],
        ),
        case(
            "ipBlock with except",
            vec![a(
                "block",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": "10.1.0.0/24", "except": ["10.1.0.20/32"]}}]}]}),
            )],
            &[
                ("10.1.0.200 -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8080", true),
                ("b-cli -> a-web tcp/8080", false),
                ("192.0.2.1 -> a-web tcp/8080", false),
            ],
        ),
        // multi-networkpolicy-iptables lets an except override the rule's other peers.
        case(
            "an except does not override the rule's other peers",
            vec![a(
                "block",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [
                {"ipBlock": {"cidr": "10.1.0.0/24", "except": ["10.1.0.20/32"]}},
                {"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
            )],
            &[
                ("b-cli -> a-web tcp/8080", true),
                ("10.1.0.200 -> a-web tcp/8080", true),
                ("192.0.2.1 -> a-web tcp/8080", false),
            ],
        ),
        case(
            "one port",
            vec![a(
                "port",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": 8080}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8081", false),
                ("a-cli -> a-web udp/8080", false),
                ("a-cli -> a-web icmp", false),
            ],
        ),
        case(
            "a port range (endPort)",
            vec![a(
                "range",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": 8000, "endPort": 8100}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8000", true),
                ("a-cli -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8100", true),
                ("a-cli -> a-web tcp/7999", false),
                ("a-cli -> a-web tcp/8101", false),
            ],
        ),
        case(
            "a UDP port range",
            vec![a(
                "range",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"protocol": "UDP", "port": 5000, "endPort": 5010}]}]}),
            )],
            &[
                ("a-cli -> a-web udp/5005", true),
                ("a-cli -> a-web tcp/5005", false),
                ("a-cli -> a-web udp/5011", false),
            ],
        ),
        case(
            "UDP only",
            vec![a(
                "dns",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"protocol": "UDP", "port": 53}]}]}),
            )],
            &[("a-cli -> a-web udp/53", true), ("a-cli -> a-web tcp/53", false)],
        ),
        case(
            "SCTP",
            vec![a(
                "sctp",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"protocol": "SCTP", "port": 3868}]}]}),
            )],
            &[
                ("a-cli -> a-web sctp/3868", true),
                ("a-cli -> a-web tcp/3868", false),
                ("a-cli -> a-web sctp/3869", false),
            ],
        ),
        case(
            "every port of one protocol (no port)",
            vec![a(
                "udp",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"protocol": "UDP"}]}]}),
            )],
            &[
                ("a-cli -> a-web udp/1", true),
                ("a-cli -> a-web udp/65535", true),
                ("a-cli -> a-web tcp/80", false),
            ],
        ),
        // multi-networkpolicy-iptables fails to load a rule with a named port, leaving the pod open.
        case(
            "a named port on ingress is the selected pod's",
            vec![a(
                "named",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": "http"}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/9090", false),
                ("a-cli -> a-web udp/8080", false),
            ],
        ),
        case(
            "a named port resolves per pod",
            vec![policy(
                "team-b",
                "named",
                NET1,
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"ports": [{"port": "http"}]}]}),
            )],
            &[
                ("a-cli -> b-web tcp/9090", true),
                ("a-cli -> b-web tcp/8080", false),
                ("a-cli -> a-web tcp/1234", true),
            ],
        ),
        case(
            "a named port on egress is the destination's; an outside address has none",
            vec![a(
                "named",
                json!({
            "podSelector": {"matchLabels": {"app": "cli"}}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": "http"}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-cli -> b-web tcp/9090", true),
                ("a-cli -> b-web tcp/8080", false),
                ("a-cli -> 192.0.2.1 tcp/8080", false),
            ],
        ),
        case(
            "a named port the destination does not have",
            vec![a(
                "named",
                json!({
            "podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"ports": [{"port": "http"}]}]}),
            )],
            &[("a-cli -> a-db tcp/8080", false), ("a-cli -> a-db tcp/5432", false)],
        ),
        case(
            "egress to a CIDR only",
            vec![a(
                "out",
                json!({
            "podSelector": {"matchLabels": {"app": "cli"}}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}]}]}),
            )],
            &[
                ("a-cli -> 192.0.2.1 tcp/443", true),
                ("a-cli -> a-db tcp/5432", false),
                ("a-cli -> 198.51.100.1 tcp/443", false),
                ("a-db -> a-cli tcp/22", true),
            ],
        ),
        case(
            "egress denied but DNS allowed",
            vec![a(
                "dns",
                json!({
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}], "ports": [{"protocol": "UDP", "port": 53}]}]}),
            )],
            &[
                ("a-web -> b-cli udp/53", true),
                ("a-web -> b-cli tcp/53", false),
                ("a-web -> c-cli udp/53", false),
            ],
        ),
        case(
            "multiple policies are a union",
            vec![
                a(
                    "cli-http",
                    json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}], "ports": [{"port": 8080}]}]}),
                ),
                a(
                    "b-9000",
                    json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}], "ports": [{"port": 9000}]}]}),
                ),
            ],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/9000", false),
                ("b-web -> a-web tcp/9000", true),
                ("b-web -> a-web tcp/8080", false),
            ],
        ),
        case(
            "a deny-all and an allow together: the allow wins",
            vec![
                a("deny", json!({"podSelector": {}})),
                a(
                    "allow",
                    json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]}),
                ),
            ],
            &[
                ("a-web -> a-db tcp/5432", true),
                ("a-cli -> a-db tcp/5432", false),
                ("a-db -> a-web tcp/8080", false),
            ],
        ),
        // multi-networkpolicy-iptables enforces the implied Ingress only when ingress rules exist.
        case(
            "policyTypes omitted with egress rules only: ingress is isolated too",
            vec![a(
                "egress-only",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "egress": [{}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", false),
                ("a-web -> a-cli tcp/22", true),
                ("a-web -> 192.0.2.1 tcp/443", true),
            ],
        ),
        case(
            "policyTypes omitted and no rules: ingress denied, egress open",
            vec![a(
                "bare",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}}),
            )],
            &[("a-cli -> a-web tcp/8080", false), ("a-web -> a-cli tcp/22", true)],
        ),
        case(
            "Egress alone leaves ingress open",
            vec![a(
                "eg",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"], "ingress": [{"from": [{"podSelector": {}}]}]}),
            )],
            &[("c-cli -> a-web tcp/8080", true), ("a-web -> a-cli tcp/22", false)],
        ),
        // multi-networkpolicy-iptables drops new traffic on a pod's other secondary networks.
        on(
            case(
                "a policy for net1 leaves net2 alone",
                vec![a("deny", json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))],
                &[("b-cli -> a-web tcp/8080", false)],
            ),
            &[(NET2, "b-cli -> a-web tcp/8080", true), (NET2, "a-web -> b-cli tcp/22", true)],
        ),
        on(
            case(
                "a policy for net2 leaves net1 alone",
                vec![policy("team-a", "deny", NET2, json!({"podSelector": {}}))],
                &[("b-cli -> a-web tcp/8080", true)],
            ),
            &[(NET2, "b-cli -> a-web tcp/8080", false)],
        ),
        on(
            case(
                "a pod only on net2 is out of reach of a policy for net1",
                vec![a(
                    "deny",
                    json!({
            "podSelector": {"matchLabels": {"app": "web"}}}),
                )],
                &[("a-cli -> a-web tcp/8080", false)],
            ),
            &[(NET2, "b-cli -> a-nonet tcp/8080", true)],
        ),
        on(
            case(
                "a policy for both networks",
                vec![policy(
                    "team-a",
                    "deny",
                    &format!("{NET1},{NET2}"),
                    json!({"podSelector": {"matchLabels": {"app": "web"}}}),
                )],
                &[("a-cli -> a-web tcp/8080", false)],
            ),
            &[(NET2, "b-cli -> a-web tcp/8080", false), (NET2, "b-cli -> a-nonet tcp/8080", false)],
        ),
        case(
            "the source's egress and the destination's ingress must both allow",
            vec![
                a(
                    "cli-egress",
                    json!({"podSelector": {"matchLabels": {"app": "cli"}}, "policyTypes": ["Egress"]}),
                ),
                a(
                    "web-ingress",
                    json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
                ),
            ],
            &[
                ("a-cli -> a-web tcp/8080", false),
                ("a-db -> a-web tcp/8080", false),
                ("a-web -> a-cli tcp/22", true),
            ],
        ),
        case(
            "egress allowed, ingress denied",
            vec![
                a(
                    "db-egress",
                    json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Egress"], "egress": [{}]}),
                ),
                a("web-ingress", json!({"podSelector": {"matchLabels": {"app": "web"}}})),
            ],
            &[("a-db -> a-web tcp/8080", false), ("a-db -> a-cli tcp/8080", true)],
        ),
        case(
            "a policy selects pods of its own namespace only",
            vec![policy("team-b", "deny", NET1, json!({"podSelector": {}}))],
            &[
                ("a-cli -> b-web tcp/9090", false),
                ("a-cli -> a-web tcp/8080", true),
                ("b-cli -> a-web tcp/8080", true),
            ],
        ),
        case(
            "a policy in another namespace for this namespace's network",
            vec![policy(
                "team-b",
                "b-egress",
                NET1,
                json!({
            "podSelector": {"matchLabels": {"app": "cli"}}, "policyTypes": ["Egress"], "egress": [{"to": [{"podSelector": {}}]}]}),
            )],
            &[
                ("b-cli -> b-web tcp/9090", true),
                ("b-cli -> a-web tcp/8080", false),
                ("a-cli -> a-web tcp/8080", true),
            ],
        ),
        case(
            "IPv6 ipBlock with except",
            vec![a(
                "v6",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"ipBlock": {"cidr": "fd01::/64", "except": ["fd01::20/128"]}}]}]}),
            )],
            &[
                ("a-db/6 -> a-web/6 tcp/8080", true),
                ("b-cli/6 -> a-web/6 tcp/8080", false),
                ("a-db -> a-web tcp/8080", false),
                ("2001:db8::1 -> a-web/6 tcp/8080", false),
            ],
        ),
        case(
            "IPv6 pod peers by selector",
            vec![a(
                "v6",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "b"}}}]}]}),
            )],
            &[("b-cli/6 -> a-web/6 tcp/8080", true), ("a-db/6 -> a-web/6 tcp/8080", false)],
        ),
        case(
            "an IPv4 block does not match IPv6",
            vec![a(
                "all-v4",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}),
            )],
            &[("192.0.2.1 -> a-web tcp/8080", true), ("2001:db8::1 -> a-web/6 tcp/8080", false)],
        ),
        // multi-networkpolicy-iptables refuses In with several values, NotIn, Exists and DoesNotExist.
        case(
            "In with several values",
            vec![a(
                "in",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["cli", "db"]}]}}]}]}),
            )],
            &[
                ("a-cli -> a-web tcp/8080", true),
                ("a-db -> a-web tcp/8080", true),
                ("b-cli -> a-web tcp/8080", false),
            ],
        ),
        case(
            "NotIn",
            vec![a(
                "notin",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["cli"]}]}}]}]}),
            )],
            &[("a-db -> a-web tcp/8080", true), ("a-cli -> a-web tcp/8080", false)],
        ),
        case(
            "Exists",
            vec![a(
                "exists",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"podSelector": {"matchExpressions": [{"key": "debug", "operator": "Exists"}]}}]}]}),
            )],
            &[("a-debug -> a-web tcp/8080", true), ("a-cli -> a-web tcp/8080", false)],
        ),
        case(
            "DoesNotExist in the policy's own podSelector",
            vec![a(
                "no-debug",
                json!({
            "podSelector": {"matchExpressions": [{"key": "debug", "operator": "DoesNotExist"}]}}),
            )],
            &[("a-web -> a-debug tcp/22", true), ("a-debug -> a-cli tcp/22", false)],
        ),
        case(
            "namespaceSelector by expression",
            vec![a(
                "prod",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}}]}]}),
            )],
            &[
                ("b-cli -> a-web tcp/8080", true),
                ("a-cli -> a-web tcp/8080", true),
                ("c-cli -> a-web tcp/8080", false),
            ],
        ),
        case(
            "a protocol without ports passes only a rule without ports",
            vec![
                a(
                    "any",
                    json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}]}),
                ),
                a(
                    "port",
                    json!({"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [{"ports": [{"port": 5432}]}]}),
                ),
            ],
            &[("a-cli -> a-web icmp", true), ("a-db -> a-web icmp", false), ("a-cli -> a-db icmp", false)],
        ),
        case(
            "ingress and egress rules in one policy",
            vec![a(
                "web",
                json!({
            "podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}], "ports": [{"port": "pg"}]}]}),
            )],
            &[
                ("a-web -> a-db tcp/5432", true),
                ("a-web -> a-db tcp/5433", false),
                ("a-cli -> a-web tcp/8080", true),
                ("a-web -> a-cli tcp/22", false),
                ("a-db -> a-web tcp/8080", false),
            ],
        ),
    ]
}

#[test]
fn the_truth_table() {
    let c = cluster();
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        for (net, text, allowed) in &case.probes {
            let p = probe(&c, net, text);
            let decision = decide(&case.policies, &c, &p);
            if decision.allowed() != *allowed {
                wrong.push(format!(
                    "{}: {net} {text}: expected {}, {decision}",
                    case.name,
                    if *allowed { "allowed" } else { "denied" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{} probes decided wrong:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn a_decision_explains_itself() {
    let c = cluster();
    let policies = vec![
        a("deny", json!({"podSelector": {}})),
        a(
            "web",
            json!({"podSelector": {"matchLabels": {"app": "web"}}, "ingress": [{}, {"from": [{"podSelector": {}}]}]}),
        ),
    ];
    let allowed = decide(&policies, &c, &probe(&c, NET1, "a-cli -> a-web tcp/8080"));
    assert_eq!(allowed.ingress, Side::Allowed { policy: "team-a/web".into(), rule: "ingress[0]".into() });
    assert_eq!(
        allowed.to_string(),
        "allowed: the source is not isolated for egress on this network; ingress allowed by team-a/web ingress[0]"
    );
    let denied = decide(&policies, &c, &probe(&c, NET1, "a-web -> a-db tcp/5432"));
    assert_eq!(denied.ingress, Side::Denied { policies: vec!["team-a/deny".into()] });
    assert_eq!(
        denied.to_string(),
        "denied: the source is not isolated for egress on this network; ingress denied: isolated by team-a/deny and no rule matches"
    );
}

/// The compiled tables, read as the programs read them, agree with the decision on every probe
/// of the truth table.
#[test]
fn the_compiled_tables_agree_with_the_truth_table() {
    let c = cluster();
    let mut wrong = Vec::new();
    for case in cases() {
        let tables = compile(&case.policies, &c);
        for (net, text, _) in &case.probes {
            let p = probe(&c, net, text);
            let decided = decide(&case.policies, &c, &p);
            if compiled_allows(&tables, &p) != decided.allowed() {
                wrong.push(format!("{}: {net} {text}: the decision says {decided}", case.name));
            }
        }
    }
    assert!(wrong.is_empty(), "{} probes compiled wrong:\n{}", wrong.len(), wrong.join("\n"));
}

/// A small deterministic generator (xorshift), so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A random cluster: three namespaces, up to ten pods on two networks, v4 and v6, with named
/// ports that differ between pods.
fn random_cluster(rng: &mut Rng) -> Cluster {
    let mut c = Cluster::default();
    for ns in ["ns0", "ns1", "ns2"] {
        let labels = [
            ("team".to_owned(), ns.to_owned()),
            ("env".to_owned(), (*rng.pick(&["prod", "dev"])).to_owned()),
        ];
        c.namespaces.insert(ns.to_owned(), labels.into_iter().collect());
    }
    for i in 0..4 + rng.below(7) {
        let mut labels = vec![("app", *rng.pick(&["a", "b", "c"]))];
        if rng.below(2) == 0 {
            labels.push(("tier", *rng.pick(&["x", "y"])));
        }
        // Pods from 10.0.0.16 and fd00::10 up: the blocks and excepts hold some pod addresses
        // and some addresses outside the cluster.
        let mut addresses: Vec<String> = vec![format!("10.0.0.{}", i + 16)];
        if rng.below(2) == 0 {
            addresses.push(format!("fd00::{:x}", i + 16));
        }
        let a: Vec<&str> = addresses.iter().map(String::as_str).collect();
        let second = format!("10.9.0.{}", i + 1);
        let mut nets: Vec<(&str, &[&str])> = Vec::new();
        if rng.below(5) > 0 {
            nets.push(("ns0/net1", &a));
        }
        let s = [second.as_str()];
        if rng.below(2) == 0 {
            nets.push(("ns0/net2", &s));
        }
        let port = *rng.pick(&[8080u16, 9090]);
        let ports: Vec<(&str, u16, Protocol)> = match rng.below(3) {
            0 => vec![],
            1 => vec![("http", port, Protocol::Tcp)],
            _ => vec![("http", port, Protocol::Tcp), ("dns", 53, Protocol::Udp)],
        };
        let namespace = *rng.pick(&["ns0", "ns1", "ns2"]);
        c.pods.push(pod(namespace, &format!("p{i}"), &labels, &nets, &ports));
    }
    c
}

fn random_selector(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => json!({}),
        1 => json!({"matchLabels": {"app": rng.pick(&["a", "b", "c"])}}),
        2 => json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}),
        3 => {
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": [rng.pick(&["a", "c"])]}]})
        }
        4 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        _ => json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
    }
}

/// Blocks, each with the excepts it may have (inside it): around the pods' addresses
/// (10.0.0.16 and fd00::10 up) and the outside addresses probed.
type Blocks = &'static [(&'static str, &'static [&'static [&'static str]])];
const BLOCKS_V4: Blocks = &[
    ("10.0.0.0/27", &[&[], &["10.0.0.2/31"], &["10.0.0.4/30", "10.0.0.17/32"], &["10.0.0.16/29"]]),
    ("10.0.0.0/29", &[&[], &["10.0.0.2/31"]]),
    ("0.0.0.0/0", &[&[], &["10.0.0.0/28"]]),
];
const BLOCKS_V6: Blocks =
    &[("fd00::/120", &[&[], &["fd00::2/127"], &["fd00::10/125"]]), ("::/0", &[&[], &["fd00::/124"]])];

fn random_peer(rng: &mut Rng) -> Value {
    match rng.below(5) {
        0 => json!({"podSelector": random_selector(rng)}),
        1 => json!({"namespaceSelector": {"matchLabels": {"env": rng.pick(&["prod", "dev"])}}}),
        2 => {
            json!({"namespaceSelector": {"matchLabels": {"team": rng.pick(&["ns0", "ns1"])}}, "podSelector": random_selector(rng)})
        }
        3 => {
            let (cidr, excepts) = *rng.pick(BLOCKS_V4);
            json!({"ipBlock": {"cidr": cidr, "except": rng.pick(excepts)}})
        }
        _ => {
            let (cidr, excepts) = *rng.pick(BLOCKS_V6);
            json!({"ipBlock": {"cidr": cidr, "except": rng.pick(excepts)}})
        }
    }
}

fn random_port(rng: &mut Rng) -> Value {
    rng.pick(&[
        json!({"port": 8080}),
        json!({"protocol": "UDP", "port": 53}),
        json!({"port": 8000, "endPort": 8100}),
        json!({"port": "http"}),
        json!({"protocol": "UDP", "port": "dns"}),
        json!({"protocol": "SCTP"}),
    ])
    .clone()
}

fn random_rules(rng: &mut Rng, peers_key: &str) -> Value {
    let rules: Vec<Value> = (0..rng.below(3))
        .map(|_| {
            let mut rule = serde_json::Map::new();
            let peers: Vec<Value> = (0..rng.below(3)).map(|_| random_peer(rng)).collect();
            if !peers.is_empty() {
                rule.insert(peers_key.to_owned(), Value::Array(peers));
            }
            let ports: Vec<Value> = (0..rng.below(3)).map(|_| random_port(rng)).collect();
            if !ports.is_empty() {
                rule.insert("ports".to_owned(), Value::Array(ports));
            }
            Value::Object(rule)
        })
        .collect();
    Value::Array(rules)
}

fn random_policies(rng: &mut Rng) -> Vec<Policy> {
    (0..1 + rng.below(4))
        .map(|i| {
            let mut spec = json!({"podSelector": random_selector(rng)});
            match rng.below(4) {
                0 => {}
                1 => spec["policyTypes"] = json!(["Ingress"]),
                2 => spec["policyTypes"] = json!(["Egress"]),
                _ => spec["policyTypes"] = json!(["Ingress", "Egress"]),
            }
            if rng.below(4) > 0 {
                spec["ingress"] = random_rules(rng, "from");
            }
            if rng.below(2) == 0 {
                spec["egress"] = random_rules(rng, "to");
            }
            let networks = *rng.pick(&["ns0/net1", "ns0/net2", "ns0/net1,ns0/net2"]);
            let namespace = *rng.pick(&["ns0", "ns1", "ns2"]);
            policy(namespace, &format!("r{i}"), networks, spec)
        })
        .collect()
}

/// The compiled tables agree with the decision on random clusters and policies: every pair of
/// addresses on each network (and addresses outside the cluster), over ports that hit and miss
/// numbers, ranges and named ports, in every protocol.
#[test]
fn the_compiled_tables_agree_with_the_decision_on_random_clusters() {
    let outside = [
        "10.0.0.2",
        "10.0.0.3",
        "10.0.0.5",
        "10.0.0.200",
        "192.0.2.1",
        "fd00::3",
        "fd00::99",
        "2001:db8::1",
        "10.9.0.200",
    ];
    let what: [(ProbeProtocol, Option<u16>); 7] = [
        (ProbeProtocol::Known(Protocol::Tcp), Some(8080)),
        (ProbeProtocol::Known(Protocol::Tcp), Some(9090)),
        (ProbeProtocol::Known(Protocol::Tcp), Some(8050)),
        (ProbeProtocol::Known(Protocol::Udp), Some(53)),
        (ProbeProtocol::Known(Protocol::Udp), Some(8080)),
        (ProbeProtocol::Known(Protocol::Sctp), Some(1)),
        (ProbeProtocol::Other(1), None),
    ];
    let mut probes_run = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let c = random_cluster(&mut rng);
        let policies = random_policies(&mut rng);
        let tables = compile(&policies, &c);
        for net in ["ns0/net1", "ns0/net2"] {
            let net = network(net);
            let mut addresses: Vec<IpAddr> =
                c.pods.iter().flat_map(|p| p.addresses.get(&net).into_iter().flatten().copied()).collect();
            addresses.extend(outside.iter().map(|a| a.parse::<IpAddr>().expect("an address")));
            for &source in &addresses {
                for &destination in &addresses {
                    if source == destination || source.is_ipv4() != destination.is_ipv4() {
                        continue;
                    }
                    for (protocol, port) in what {
                        let p = Probe { network: net.clone(), source, destination, protocol, port };
                        let decided = decide(&policies, &c, &p);
                        probes_run += 1;
                        assert_eq!(
                            compiled_allows(&tables, &p),
                            decided.allowed(),
                            "seed {seed}: {p:?}: the decision says {decided}\npolicies: {policies:#?}\ncluster: {c:#?}"
                        );
                    }
                }
            }
        }
    }
    assert!(probes_run > 100_000, "only {probes_run} probes");
}
