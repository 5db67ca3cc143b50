//! A pod's own hook (its veth's receive path, on a bridge): the ADD attaches a filter and
//! answers, and the agent then moves the hook to a pinned TCX link, which costs less per packet,
//! with no moment without a program: under a running stream, after an agent that finds a filter
//! (an earlier version's) starts, and with DELs racing the move.

use plexus_agent::dataplane::attach::{Attach, AttachPoint};
use plexus_agent::dataplane::portmap::mapper::{OBJECT, TC_INGRESS};

use super::*;

/// The filter points (pods' veth hooks) of the agent's records.
fn pod_hooks(t: &PmWorld) -> Vec<AttachPoint> {
    let records = Store::new(&t.w.path("state")).load_all().expect("records");
    records.into_iter().flat_map(|r| r.hooks).filter(|p| p.attach == Attach::Filter).collect()
}

/// The TC filters on the receive path of the node's interface `ifname`.
fn filters(t: &PmWorld, ifname: &str) -> String {
    let (ok, out) = t.w.node.exec(&["tc", "filter", "show", "dev", ifname, "ingress"]);
    assert!(ok, "tc filter show dev {ifname}: {out}");
    out
}

/// Waits until the hook `p` runs as a pinned TCX link and no longer as a filter.
fn wait_moved(t: &PmWorld, p: &AttachPoint) {
    let link = format!("tc_{}_in", p.ifindex);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.link_pins().contains(&link) || filters(t, &p.ifname).contains(TC_INGRESS) {
        assert!(
            Instant::now() < deadline,
            "{} never moved to a TCX link: pins {:?}, filters:\n{}\n{}",
            p.ifname,
            t.link_pins(),
            filters(t, &p.ifname),
            t.w.agent_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kernel_a_pods_filter_moves_to_a_tcx_link_under_a_stream_and_dels_racing_the_move_leave_nothing() {
    let mut t = PmWorld::new();
    t.w.write_nad(NS, "pmbr", Some(&bridge_nad(&t.w, "pmbr")));
    t.w.start_agent();
    t.pod("web", &mappings("pmbr", &[(8080, 80, "tcp")]), &[80]);
    let client = t.client("pmcl0", &["10.77.0.200/24"]);
    t.w.node.ip(&["link", "set", "pmcl0", "master", "pmbr0"]);
    let c = t.clients[client].name.clone();
    let hooks = pod_hooks(&t);
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    let veth = hooks[0].clone();

    // After the ADD, in the background.
    wait_moved(&t, &veth);
    assert_eq!(t.run(&c, &["tcp", "10.77.0.1", "8080", "moved"])[..2], ["web".to_owned(), "moved".into()]);

    // An agent finding the hook as a filter (an earlier version's, or one stopped before the
    // move) moves it while a stream runs through it. The agent is stopped 1 s in; the filter is
    // put back by hand (beside the link: no moment without a program), the link removed; the
    // agent starts again 1 s later.
    let stream = t.stream(&c, "10.77.0.1", "8080", "6");
    std::thread::sleep(Duration::from_millis(1000));
    t.w.kill_agent();
    let program = PinDir::open(&t.pins).prog(TC_INGRESS);
    let (priority, handle) =
        (OBJECT.filter_priority.to_string(), format!("{:#x}", u32::from(OBJECT.filter_handle)));
    let program = program.to_str().expect("a UTF-8 pin path");
    let filter = [
        "tc",
        "filter",
        "add",
        "dev",
        &veth.ifname,
        "ingress",
        "prio",
        &priority,
        "handle",
        &handle,
        "bpf",
        "object-pinned",
        program,
        "direct-action",
    ];
    let (ok, out) = t.w.node.exec(&filter);
    assert!(ok, "{filter:?}: {out}");
    std::fs::remove_file(t.pins.join("links").join(format!("tc_{}_in", veth.ifindex))).expect("unpinning");
    assert!(filters(&t, &veth.ifname).contains(TC_INGRESS), "{}", filters(&t, &veth.ifname));
    std::thread::sleep(Duration::from_millis(1000));
    t.w.start_agent();
    t.wait_reconciled(2);
    wait_moved(&t, &veth);
    let bytes = stream.finish();
    assert!(bytes > 100_000, "the stream moved {bytes} bytes");

    // Pods deleted as soon as they are added: a DEL comes while the hook is being moved (the
    // link's attach waits for an RCU grace period), or after. Either way, no link of a deleted
    // pod's veth stays pinned.
    for i in 0..4 {
        let name = format!("brief{i}");
        let ns = Netns::new("pmpod");
        t.w.write_pod(NS, &name, Some(&mappings("pmbr", &[(9000 + i, 80, "tcp")]).to_string()));
        t.w.add(&cid(&name), &ns, (NS, &name)).expect_ok();
        let out = t.w.del(&cid(&name), &ns, (NS, &name));
        assert!(out.ok(), "DEL {name}: {} {}", out.stdout, out.stderr);
        t.pods.push(ns);
    }
    let alive: Vec<String> = t.link_pins().into_iter().filter(|l| l.starts_with("tc_")).collect();
    let bridge = node_index(&t, "pmbr0");
    let mut expected = vec![format!("tc_{bridge}_in"), format!("tc_{}_in", veth.ifindex)];
    expected.sort();
    let mut got = alive.clone();
    got.sort();
    assert_eq!(got, expected, "links of deleted pods' veths left");

    t.del_all_and_expect_nothing_left(&["web", "brief0", "brief1", "brief2", "brief3"], &["pmcl0"]);
}
