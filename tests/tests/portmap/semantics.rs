//! One suite of port mapping semantics, run against plexus-portmap and against the reference
//! `portmap` plugin (containernetworking-plugins: iptables DNAT, and masquerade of clients of
//! the pod's own subnet), on the same network: a bridge with the node as gateway, the plugin
//! chained after it. Users switching from the reference must lose nothing: every case below
//! passes with both.
//!
//! The network is what the reference needs on a bridge, and plexus runs on the same:
//! - bridged traffic through netfilter (`br_netfilter`, on by default in a new namespace): the
//!   replies of a client behind a router cross the node bridged (see `pmtu`), and only then
//!   does conntrack undo the DNAT on them;
//! - the bridge plugin's `hairpinMode`: with `br_netfilter` on, the DNAT of a pod reaching its
//!   own host port happens at the bridge's PREROUTING, and the packet is bridged back out the
//!   port it came in on, which a bridge port refuses unless in hairpin mode.
//!
//! What differs and the suite does not assert: the address the pod sees. The reference
//! masquerades clients of the pod's subnet (its hairpin rule matches the whole subnet), so the
//! pod sees the host IP; plexus keeps the client's address except for a pod reaching itself.

use super::*;

fn suite(plugin: Plugin) {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad_for(&t.w, "pmbr", plugin, true)));
    bridge_netfilter(&t.w.node, true);
    t.w.start_agent();
    let web_a = [(8080, 80, "tcp"), (8080, 80, "udp"), (8081, 80, "tcp"), (8081, 80, "udp")];
    t.pod("web-a", &mappings("pmbr", &web_a), &[80]);
    t.pod("web-b", &mappings("pmbr", &[(9090, 90, "tcp"), (9090, 90, "udp")]), &[90]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let whoami = t.start(&t.clients[client], &["whoami", "9000"]);
    t.servers.push(whoami);
    let (c, node) = (t.clients[client].name.clone(), t.w.node.name.clone());
    let (a, b) = (t.pods[0].name.clone(), t.pods[1].name.clone());
    let hosts = ["10.77.0.1", "fd00:77::1"];
    let (a4, a6) = t.pod_ips(0);

    // Mapped, from a peer on the network: TCP and UDP, IPv4 and IPv6, answered as hostIP:hostPort.
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web-a");
    // Two host ports to one container port: each answers as itself, also both at once.
    assert_reaches(&t, &c, &hosts, 8081, 8081, "web-a");
    for host in hosts {
        let got = t.run(&c, &["pair", host, "8080", host, "8081"]);
        assert_eq!(
            got,
            [
                "web-a", host, "8080", "web-a", host, "8081", "web-a:m4", host, "8080", "web-a:d4", host,
                "8081"
            ],
            "{plugin:?}: {host}:8080 and {host}:8081 at once"
        );
    }
    // A datagram larger than the MTU, both ways: every fragment is translated (the reference
    // reassembles them in conntrack first).
    let big = "f".repeat(4000);
    for host in hosts {
        let got = t.run(&c, &["udp", host, "8080", &big]);
        assert_eq!(
            got,
            [format!("web-a:{big}"), host.to_owned(), "8080".to_owned()],
            "{plugin:?}: a datagram of 4000 bytes to {host}:8080"
        );
    }
    // Direct: the pod's own address and port, alone and next to a mapped connection.
    assert_reaches(&t, &c, &[a4.as_str(), a6.as_str()], 80, 80, "web-a");
    for (host, ip) in [(hosts[0], a4.as_str()), (hosts[1], a6.as_str())] {
        let got = t.run(&c, &["pair", host, "8080", ip, "80"]);
        assert_eq!(
            got,
            ["web-a", host, "8080", "web-a", ip, "80", "web-a:m4", host, "8080", "web-a:d4", ip, "80"],
            "{plugin:?}: {host}:8080 and {ip}:80 at once"
        );
    }
    // The pod's own connections from its mapped port: the peer sees podIP:80.
    for (ip, peer) in [(a4.as_str(), "10.77.0.200"), (a6.as_str(), "fd00:77::c8")] {
        for proto in ["tcp", "udp"] {
            let got = t.run(&a, &["from", proto, ip, "80", peer, "9000"]);
            assert_eq!(got, [ip, "80", ip, "80"], "{plugin:?}: {proto} from {ip}:80 to {peer}:9000");
        }
    }
    // Another pod's host port, through the bridge, both ways.
    assert_reaches(&t, &b, &hosts, 8080, 8081, "web-a");
    assert_reaches(&t, &a, &hosts, 9090, 9090, "web-b");
    // A pod's own host port (hairpin).
    assert_reaches(&t, &a, &hosts, 8081, 8080, "web-a");
    // The node itself.
    assert_reaches(&t, &node, &hosts, 8080, 8081, "web-a");

    // Who did the work.
    let rows = t.list();
    let (ok, nat) = t.w.node.exec(&["iptables", "-t", "nat", "-S"]);
    assert!(ok, "iptables: {nat}");
    match plugin {
        Plugin::Plexus => {
            assert_eq!(rows.len(), 12, "(4 + 2 mappings) x 2 families: {rows:#?}");
            assert!(!nat.contains("CNI-DN-"), "{nat}");
        }
        Plugin::Reference => {
            assert!(rows.is_empty(), "plexus mapped ports of the reference's network: {rows:#?}");
            assert!(nat.contains("--to-destination 10.77.0.") && nat.contains("CNI-DN-"), "{nat}");
        }
    }
    t.del_all_and_expect_nothing_left(&["web-a", "web-b"], &["pmcl0"]);
}

#[test]
fn kernel_semantics_suite_plexus_portmap() {
    suite(Plugin::Plexus);
}

#[test]
fn kernel_semantics_suite_reference_portmap() {
    suite(Plugin::Reference);
}
