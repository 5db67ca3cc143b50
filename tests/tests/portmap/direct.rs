//! A mapped port hides nothing: peers still reach the pod's own address and port, the pod's
//! own connections from its mapped port go out as they are, and several host ports may map to
//! one container port, each answering as itself.

use super::*;

/// Direct and mapped clients of one pod port at once, and the pod's own connections from that
/// port, on the network the client `c` (addresses `peer`) shares with pod 0 ("web", port 80
/// mapped from 8080 on `hosts`).
fn bypass_cases(t: &PmWorld, c: &str, hosts: [&str; 2], peer: [&str; 2]) {
    let (v4, v6) = t.pod_ips(0);
    for (host, pod_ip, peer) in [(hosts[0], v4.as_str(), peer[0]), (hosts[1], v6.as_str(), peer[1])] {
        // The peer talks to podIP:80 directly: the answers come from podIP:80 (a reply
        // rewritten to hostIP:8080 would not even reach the socket), TCP and UDP.
        assert_reaches(t, c, &[pod_ip], 80, 80, "web");
        // A mapped and a direct connection (and datagrams) open at once, used in turns.
        let got = t.run(c, &["pair", host, "8080", pod_ip, "80"]);
        assert_eq!(
            got,
            ["web", host, "8080", "web", pod_ip, "80", "web:m4", host, "8080", "web:d4", pod_ip, "80"],
            "mapped ({host}:8080) and direct ({pod_ip}:80) at once from {c}"
        );
        // The pod's own connections from its mapped port: the peer sees podIP:80.
        for proto in ["tcp", "udp"] {
            let got = t.run(&t.pods[0].name, &["from", proto, pod_ip, "80", peer, "9000"]);
            assert_eq!(got, [pod_ip, "80", pod_ip, "80"], "{proto} from {pod_ip}:80 to {peer}:9000");
        }
    }
    // Only the mapped ones are flows (the direct ones and the pod's own pass untracked).
    let flows = t.flows_json();
    assert!(!flows.is_empty(), "the mapped connections made no flow");
    for f in &flows {
        assert!(
            hosts.iter().any(|h| f["host"] == format!("{h}:8080") || f["host"] == format!("[{h}]:8080")),
            "{f}"
        );
    }
}

#[test]
fn kernel_bridge_direct_peers_and_the_pods_own_connections_bypass_the_mapping() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web", &mappings("pmbr", &[(8080, 80, "tcp"), (8080, 80, "udp")]), &[80]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    let whoami = t.start(&t.clients[client], &["whoami", "9000"]);
    t.servers.push(whoami);
    let hosts = ["10.77.0.1", "fd00:77::1"];
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web");
    bypass_cases(&t, &c, hosts, ["10.77.0.200", "fd00:77::c8"]);
    // Mapped access still works after all that.
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web");
    t.del_all_and_expect_nothing_left(&["web"], &["pmcl0"]);
}

#[test]
fn kernel_macvlan_direct_peers_and_the_pods_own_connections_bypass_the_mapping() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmmv", Some(&macvlan_nad(&t.w, "pmmv")));
    let client = t.client("pmm0", &["10.78.0.200/24", "fd00:78::c8/64"]);
    t.w.node.ip(&["addr", "add", "10.78.0.1/24", "dev", "pmm0"]);
    t.w.node.ip(&["addr", "add", "fd00:78::1/64", "dev", "pmm0", "nodad"]);
    t.w.start_agent();
    t.pod("web", &mappings("pmmv", &[(8080, 80, "tcp"), (8080, 80, "udp")]), &[80]);
    let c = t.clients[client].name.clone();
    let whoami = t.start(&t.clients[client], &["whoami", "9000"]);
    t.servers.push(whoami);
    let hosts = ["10.78.0.1", "fd00:78::1"];
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web");
    bypass_cases(&t, &c, hosts, ["10.78.0.200", "fd00:78::c8"]);
    assert_reaches(&t, &c, &hosts, 8080, 8080, "web");
    t.del_all_and_expect_nothing_left(&["web"], &["pmm0"]);
}

#[test]
fn kernel_two_host_ports_to_one_container_port_each_answer_as_themselves() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    let ports = [(8080, 80, "tcp"), (8080, 80, "udp"), (8081, 80, "tcp"), (8081, 80, "udp")];
    t.pod("web", &mappings("pmbr", &ports), &[80]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let (c, node, pod) = (t.clients[client].name.clone(), t.w.node.name.clone(), t.pods[0].name.clone());
    let hosts = ["10.77.0.1", "fd00:77::1"];
    // From a peer, from the node (the socket hooks) and from the pod itself (hairpin): TCP's
    // peer and UDP's reply source are the host port each client used.
    for from in [&c, &node, &pod] {
        assert_reaches(&t, from, &hosts, 8080, 8080, "web");
        assert_reaches(&t, from, &hosts, 8081, 8081, "web");
    }
    // Both host ports at once from one client, used in turns.
    for host in hosts {
        let got = t.run(&c, &["pair", host, "8080", host, "8081"]);
        assert_eq!(
            got,
            ["web", host, "8080", "web", host, "8081", "web:m4", host, "8080", "web:d4", host, "8081"],
            "{host}:8080 and {host}:8081 at once"
        );
    }
    // Each flow remembers the host port it came in on; `portmap list` shows both mappings.
    let flows = t.flows_json();
    for host in ["10.77.0.1:8080", "10.77.0.1:8081", "[fd00:77::1]:8080", "[fd00:77::1]:8081"] {
        assert!(
            flows.iter().any(|f| f["host"] == host && f["client"].as_str().is_some()),
            "{host}: {flows:#?}"
        );
    }
    let listed = t.list();
    assert_eq!(listed.len(), 8, "2 host ports x 2 protocols x 2 families: {listed:#?}");
    assert!(listed.iter().all(|r| r["flows"].as_u64().is_some()), "a flow count per mapping: {listed:#?}");
    t.del_all_and_expect_nothing_left(&["web"], &["pmcl0"]);
}
