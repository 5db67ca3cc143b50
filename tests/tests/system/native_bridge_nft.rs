//! The native bridge's `ipMasq` and `macspoofchk` (nftables over netlink) against the
//! reference bridge binary (iptables for ipMasq, nft for macspoofchk), with real traffic.
//!
//! Each comparison runs the same pods on two worlds, one whose agent runs bridge natively and
//! one started with `--exec-plugin bridge`; both must behave alike:
//! - ipMasq: a pod's UDP to an "outside" namespace behind the node (which has no route back to
//!   the pods' subnet) arrives from the node's address there, and its answer comes back; a
//!   second pod on the same subnet sees the first one's own address (not masqueraded);
//! - macspoofchk: the pod reaches its gateway with its own MAC, not once it changed it, and
//!   again once it has it back.
//!
//! Every test ends with DEL and `World::assert_nothing_left`, which counts nftables chains of
//! plexus's tables and of the reference's rules too.

use plexus_tests::traffic::{cid, client_namespace, no_dad, run_until_ok, start_server};
use plexus_tests::{Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";
const NAD: &str = "br";
const BRIDGE: &str = "brn0";
const SCRIPT: &str = include_str!("../portmap/pm.py");
/// The node's end of the link to the outside, and the outside's address.
const UPLINK: &str = "up0";
const NODE_OUTSIDE: &str = "192.0.2.1";
const OUTSIDE: &str = "192.0.2.2";
const PORT: &str = "9000";

/// The NAD: a gateway bridge with host-local and a route to the outside, with `options`
/// (`"gc": true` makes it a CNI 1.1.0 network, which GC reaches).
fn nad(w: &World, options: Value) -> String {
    let mut plugin = json!({
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.30.0.0/24"}]],
            "routes": [{"dst": "192.0.2.0/24"}],
            "dataDir": w.path("ipam").join(NAD),
        },
    });
    for (k, v) in options.as_object().into_iter().flatten().filter(|(k, _)| *k != "gc") {
        plugin[k] = v.clone();
    }
    // 1.0.0 for the reference binary (v1.1.1 knows no later version); GC needs 1.1.0.
    let version = if options.get("gc").is_some() { "1.1.0" } else { "1.0.0" };
    json!({"cniVersion": version, "name": NAD, "plugins": [plugin]}).to_string()
}

/// A world running bridge natively or through the reference binary, with pods `p1`, `p2`
/// asking for the NAD.
fn world(native: bool, options: Value) -> World {
    let mut w = World::new();
    if !native {
        w.agent_args.extend(["--exec-plugin".to_owned(), "bridge".to_owned()]);
    }
    w.write_nad(NS, NAD, Some(&nad(&w, options)));
    for pod in ["p1", "p2"] {
        w.write_pod(NS, pod, Some(&json!([{"name": NAD, "interface": "net1"}]).to_string()));
    }
    std::fs::write(w.path("pm.py"), SCRIPT).expect("writing the traffic script");
    w.start_agent();
    w
}

fn add(w: &World, pod: &str) -> Netns {
    let ns = Netns::new("pxnf");
    no_dad(&ns);
    let out = w.add(&cid(pod), &ns, (NS, pod));
    assert!(out.ok(), "ADD {pod}: {} {}\n{}", out.stdout, out.stderr, w.agent_log());
    ns
}

fn delete(w: &World, pod: &str, ns: &Netns) {
    w.del(&cid(pod), ns, (NS, pod)).expect_ok();
}

fn net1_address(ns: &Netns) -> String {
    let addresses = ns.addresses("net1");
    let first = addresses.first().unwrap_or_else(|| panic!("no address on net1 in {}", ns.name));
    first.split('/').next().unwrap_or_default().to_owned()
}

/// What the outside (`whoami` on UDP) saw as the source of a datagram from `pod`.
fn source_seen(w: &World, pod: &Netns, host: &str) -> String {
    let script = w.path("pm.py").display().to_string();
    let words = run_until_ok(&pod.name, std::path::Path::new(&script), &["udp", host, PORT, "hello"])
        .unwrap_or_else(|e| panic!("UDP from {} to {host}: {e}\n{}", pod.name, w.agent_log()));
    words.first().cloned().unwrap_or_default()
}

fn native_ran(w: &World) {
    let log = w.agent_log();
    assert!(log.lines().any(|l| l.contains("run natively:") && l.contains("bridge")), "{log}");
    assert!(!log.contains("which plexus does not do natively"), "nothing handed to the binary: {log}");
}

/// ipMasq on one side: what the outside and a neighbour pod saw, after which all is deleted.
fn masquerading(native: bool) -> (String, bool) {
    let w = world(native, json!({"ipMasq": true}));
    let outside = client_namespace(&w.node, "pxout", UPLINK, &[&format!("{OUTSIDE}/24")]);
    w.node.ip(&["addr", "add", &format!("{NODE_OUTSIDE}/24"), "dev", UPLINK, "nodad"]);
    let script = w.path("pm.py");
    let _outside_server = start_server(&outside, &script, &["whoami", PORT]);

    let p1 = add(&w, "p1");
    let p2 = add(&w, "p2");
    let _neighbour_server = start_server(&p2, &script, &["whoami", PORT]);
    let seen_outside = source_seen(&w, &p1, OUTSIDE);
    let seen_by_neighbour = source_seen(&w, &p1, &net1_address(&p2));
    let neighbour_saw_pod = seen_by_neighbour == net1_address(&p1);
    if native {
        native_ran(&w);
        let chains = w.nft_chains();
        assert_eq!(chains.len(), 2, "one masquerading chain per pod: {chains:?}");
        assert!(chains.iter().all(|c| c.starts_with("inet plexus masq-")), "{chains:?}");
        assert!(w.cni("CHECK", &cid("p1"), &p1, (NS, "p1")).ok(), "CHECK after a native ADD");
    } else {
        let (_, rules) = w.node.exec(&["iptables", "-t", "nat", "-S", "POSTROUTING"]);
        assert!(rules.contains(&net1_address(&p1)), "the reference's rule: {rules}");
    }
    delete(&w, "p1", &p1);
    delete(&w, "p2", &p2);
    w.assert_nothing_left(&[&p1, &p2]);
    (seen_outside, neighbour_saw_pod)
}

#[test]
fn kernel_ip_masq_masquerades_what_leaves_the_subnet_as_the_reference_does() {
    let native = masquerading(true);
    let reference = masquerading(false);
    assert_eq!(reference, (NODE_OUTSIDE.to_owned(), true), "the reference's behaviour");
    assert_eq!(native, reference, "native (left) against the reference (right)");
}

/// Whether `pod` reaches its gateway (one ping).
fn reaches_gateway(pod: &Netns) -> bool {
    pod.exec(&["ping", "-c", "1", "-W", "1", "10.30.0.1"]).0
}

/// macspoofchk on one side: whether the pod reached its gateway with its own MAC, with another
/// one, and with its own again.
fn spoof_checking(native: bool) -> [bool; 3] {
    let w = world(native, json!({"macspoofchk": true}));
    let p1 = add(&w, "p1");
    let own_mac = p1.link("net1").and_then(|l| l["address"].as_str().map(str::to_owned)).expect("net1's MAC");
    let mut reached = [false; 3];
    // The first ping may wait for neighbour resolution.
    reached[0] = (0..3).any(|_| reaches_gateway(&p1));
    p1.ip(&["link", "set", "net1", "address", "0a:58:0a:1e:99:99"]);
    p1.ip(&["neigh", "flush", "dev", "net1"]);
    reached[1] = (0..2).any(|_| reaches_gateway(&p1));
    p1.ip(&["link", "set", "net1", "address", &own_mac]);
    reached[2] = (0..3).any(|_| reaches_gateway(&p1));
    if native {
        native_ran(&w);
        let chains = w.nft_chains();
        assert_eq!(chains.len(), 1, "{chains:?}");
        assert!(chains[0].starts_with("bridge plexus spoof-"), "{chains:?}");
    }
    delete(&w, "p1", &p1);
    w.assert_nothing_left(&[&p1]);
    reached
}

#[test]
fn kernel_macspoofchk_drops_frames_with_another_source_mac_as_the_reference_does() {
    let native = spoof_checking(true);
    let reference = spoof_checking(false);
    assert_eq!(reference, [true, false, true], "the reference's behaviour");
    assert_eq!(native, reference, "native (left) against the reference (right)");
}

/// FNV-1a (64 bits) of the container ID, a NUL and the interface: how plexus names an
/// attachment's chains (agent/src/native/bridge/nft.rs), derived again here.
fn chain_id(container_id: &str, ifname: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[test]
fn kernel_a_refused_nftables_batch_undoes_the_add_and_leaves_nothing() {
    let w = world(true, json!({"ipMasq": true}));
    // A chain of the pod's name that is no NAT chain: the kernel refuses to make it one.
    let name = format!("masq-{}", chain_id(&cid("p1"), "net1"));
    let (ok, out) = w.node.exec(&[
        "nft",
        &format!(
            "add table inet plexus; add chain inet plexus {name} {{ type filter hook input priority 0; }}"
        ),
    ]);
    assert!(ok, "nft: {out}");
    let pod = Netns::new("pxnf");
    let out = w.add(&cid("p1"), &pod, (NS, "p1"));
    assert!(!out.ok(), "ADD must fail: {}", out.stdout);
    assert_eq!(out.code(), Some(999), "{}", out.stdout);
    assert!(out.msg().contains("IP masquerading") && out.msg().contains(&name), "{}", out.msg());
    // The pair, the address and the chain (the one in the way included: the table is plexus's).
    w.assert_nothing_left(&[&pod]);
}

#[test]
fn kernel_gc_removes_the_networks_chains_no_valid_attachment_owns() {
    let w = world(true, json!({"ipMasq": true, "macspoofchk": true, "gc": true}));
    let p1 = add(&w, "p1");
    // Chains of attachments gone without a DEL: one of this network, one of another.
    let orphan = format!("masq-{}", chain_id("gone", "net1"));
    let foreign = format!("masq-{}", chain_id("elsewhere", "net1"));
    for (name, comment) in
        [(&orphan, format!("{NAD} gone net1")), (&foreign, "other elsewhere net1".to_owned())]
    {
        let (ok, out) = w.node.exec(&[
            "nft",
            &format!(
                "add chain inet plexus {name} {{ type nat hook postrouting priority 100; comment \"{comment}\"; }}"
            ),
        ]);
        assert!(ok, "nft: {out}");
    }
    let before = w.nft_chains();
    assert_eq!(before.len(), 4, "p1's two chains and the two made here: {before:?}");

    let mut conf: Value = serde_json::from_str(&w.plexus_config("1.1.0")).unwrap();
    conf["cni.dev/valid-attachments"] =
        json!([{"containerID": cid("p1"), "ifname": "eth0"}, {"containerID": cid("p1"), "ifname": "net1"}]);
    let out = w.shim(&[("CNI_COMMAND", "GC")], &conf.to_string());
    assert!(out.ok() && out.stdout.is_empty(), "GC: {out:?}\n{}", w.agent_log());

    let after = w.nft_chains();
    let expected: Vec<String> = before.iter().filter(|c| !c.ends_with(&orphan)).cloned().collect();
    assert_eq!(after, expected, "only the orphan of this network went");
    w.node.exec(&["nft", &format!("delete chain inet plexus {foreign}")]);
    delete(&w, "p1", &p1);
    w.assert_nothing_left(&[&p1]);
}
