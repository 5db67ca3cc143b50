//! The flow table's life with its mappings: DEL of a pod removes the flows of its mappings,
//! and only those.

use super::*;

/// The host ports of the flows in the pinned table, sorted, each once.
fn flow_host_ports(t: &PmWorld) -> Vec<u16> {
    let mut ports: Vec<u16> = t.tables().flows().iter().map(|(_, f)| u16::from_be(f.host.port_be)).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The host endpoints `portmap flows --json` lists.
fn listed_flow_hosts(t: &PmWorld) -> Vec<String> {
    t.flows_json().iter().filter_map(|f| f["host"].as_str().map(str::to_owned)).collect()
}

#[test]
fn kernel_del_removes_the_flows_of_its_mappings_only() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web-a", &mappings("pmbr", &[(8080, 80, "tcp"), (5353, 53, "udp")]), &[80, 53]);
    t.pod("web-b", &mappings("pmbr", &[(8081, 80, "tcp"), (5354, 53, "udp")]), &[80, 53]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    let hosts = ["10.77.0.1", "fd00:77::1"];
    assert_reaches(&t, &c, &hosts, 8080, 5353, "web-a");
    assert_reaches(&t, &c, &hosts, 8081, 5354, "web-b");

    // Closed TCP flows linger for their timeout (as conntrack's TIME_WAIT), UDP ones too: every
    // mapping has flows now, in the table, in `portmap flows` and in `portmap list`'s counts.
    assert_eq!(flow_host_ports(&t), [5353, 5354, 8080, 8081]);
    let listed = listed_flow_hosts(&t);
    for port in [8080, 5353, 8081, 5354] {
        for host in [format!("10.77.0.1:{port}"), format!("[fd00:77::1]:{port}")] {
            assert!(listed.contains(&host), "no flow of {host} listed: {listed:?}");
        }
    }
    let rows = t.list();
    assert_eq!(rows.len(), 8, "{rows:#?}");
    assert!(rows.iter().all(|r| r["flows"].as_u64() >= Some(1)), "a flow count per mapping: {rows:#?}");

    t.del("web-a", 0);
    assert_eq!(flow_host_ports(&t), [5354, 8081], "web-a's flows outlived its DEL, or web-b's went with it");
    let listed = listed_flow_hosts(&t);
    assert!(
        listed.iter().all(|h| h.ends_with(":8081") || h.ends_with(":5354")) && listed.len() >= 4,
        "flows listed after web-a's DEL: {listed:?}"
    );
    assert_reaches(&t, &c, &hosts, 8081, 5354, "web-b");
    t.del_all_and_expect_nothing_left(&["web-a", "web-b"], &["pmcl0"]);
}

/// The programs' rare events reach the agent's log through aya-log when the agent's filter
/// shows them (`plexus_ebpf=debug`, read when the programs load): a client that reuses its
/// source port for a second host port of the same pod port replaces the first one's flow.
#[test]
fn kernel_a_replaced_flow_reaches_the_agents_log_at_debug() {
    let mut t = PmWorld::new();
    t.w.agent_env.push(("RUST_LOG".into(), "info,plexus_ebpf=debug".into()));
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web-a", &mappings("pmbr", &[(5353, 53, "udp"), (5354, 53, "udp")]), &[53]);
    let client = t.client("pmcl0", &["10.77.0.200/24", "fd00:77::c8/64"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    for port in ["5353", "5354"] {
        let got = t.run(&c, &["from", "udp", "10.77.0.200", "40000", "10.77.0.1", port]);
        assert_eq!(
            got,
            ["web-a:who", "10.77.0.200", "40000"],
            "udp from 10.77.0.200:40000 to host port {port}"
        );
    }
    let wanted = "flow of host port 5353 replaced by one of host port 5354: the client reused its port";
    let deadline = Instant::now() + Duration::from_secs(10);
    while !plain(&t.w.agent_log()).lines().any(|l| l.contains("DEBUG") && l.contains(wanted)) {
        assert!(
            Instant::now() < deadline,
            "no debug record {wanted:?} in the agent's log:\n{}",
            t.w.agent_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    t.del_all_and_expect_nothing_left(&["web-a"], &["pmcl0"]);
}
