//! The durability rule (issue 17): wherever the agent dies during an ADD or a DEL, the
//! runtime's DEL after a restart leaves nothing behind, and the runtime's retry of the ADD
//! succeeds.
//!
//! The agent is started with `PLEXUS_FAILPOINT` (agent/src/failpoint.rs) naming each point of
//! the request in turn, and each time the point is reached (1st, 2nd, ... until the request
//! no longer reaches it): the real shim's ADD fails (the connection drops), the agent is
//! restarted without the failpoint, the runtime's DEL succeeds, and nothing is left (records,
//! addresses, links, port mappings, limits, flows, plugin state); then an ADD and a DEL run
//! clean. The points come from the agent's own list ([`Point::all`]), so a new phase is
//! crashed at too. The pod has the default network (native bridge), a native macvlan chaining
//! the exec'd reference `tuning` and plexus-portmap, with the pod's default route, and a native
//! bridge (with ipMasq and macspoofchk: nftables chains) chaining plexus-portmap and
//! plexus-bandwidth.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use plexus_agent::cni::Command as Verb;
use plexus_agent::dataplane::bandwidth::shaper::PIN_SUBDIR as BANDWIDTH_PIN_SUBDIR;
use plexus_agent::dataplane::bandwidth::table::Table;
use plexus_agent::dataplane::pin::PinDir;
use plexus_agent::dataplane::portmap::table::Tables;
use plexus_agent::failpoint::{Failpoint, Point, ENV};
use plexus_agent::phase::Phase;
use plexus_testkit::files_in;
use plexus_tests::traffic::{cid, no_dad, plain};
use plexus_tests::world::bin;
use plexus_tests::{Netns, World};
use serde_json::{json, Value};

const NS: &str = "default";
const POD: &str = "dur";

/// The world: the pod's namespace is dropped before the world (fields drop in order).
struct DurWorld {
    pod: Netns,
    w: World,
    pins: PathBuf,
    /// Agent starts so far, to wait for each one's dataplane.
    starts: usize,
}

impl DurWorld {
    fn new() -> DurWorld {
        let mut w = World::new();
        let pins = w.pin_on_own_bpffs();
        no_dad(&w.node);
        // The macvlan's master, with the node's address on it (the mappings' host IP there).
        w.master_link("durm0");
        w.node.ip(&["addr", "add", "10.81.0.1/24", "dev", "durm0"]);
        std::fs::create_dir_all(w.path("tuning")).expect("tuning data dir");
        w.write_nad(NS, "durmv", Some(&macvlan_nad(&w).to_string()));
        w.write_nad(NS, "durbr", Some(&bridge_nad(&w).to_string()));
        let selection = json!([
            {
                "name": "durmv",
                "interface": "net1",
                "default-route": ["10.81.0.1"],
                "portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]
            },
            {
                "name": "durbr",
                "interface": "net2",
                "portMappings": [{"hostPort": 18081, "containerPort": 80, "protocol": "udp"}],
                "bandwidth": {"ingressRate": 10_000_000, "ingressBurst": 1_000_000,
                              "egressRate": 10_000_000, "egressBurst": 1_000_000}
            }
        ]);
        w.write_pod(NS, POD, Some(&selection.to_string()));
        let pod = Netns::new("durpod");
        no_dad(&pod);
        DurWorld { pod, w, pins, starts: 0 }
    }

    /// (Re)starts the agent, with `failpoint` armed or none, and waits for its dataplane.
    fn start(&mut self, failpoint: Option<Failpoint>) {
        self.w.kill_agent();
        self.w.agent_env = failpoint.map(|f| (ENV.to_owned(), f.to_env())).into_iter().collect();
        self.w.start_agent();
        self.starts += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = plain(&self.w.agent_log());
            let ready = ["port mappings reconciled", "bandwidth limits reconciled"]
                .iter()
                .all(|line| log.matches(line).count() >= self.starts);
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "the agent's dataplane never loaded:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn cni(&self, verb: &str) -> plexus_tests::CniOutput {
        self.w.cni_with_runtime_config(verb, &cid(POD), &self.pod, (NS, POD), &json!({}))
    }

    #[track_caller]
    fn expect_ok(&self, verb: &str, after: &str) {
        let out = self.cni(verb);
        assert!(
            out.ok(),
            "{verb} {after}: {} {}\nagent log:\n{}",
            out.stdout,
            out.stderr,
            self.w.agent_log()
        );
    }

    /// Runs `verb` under an agent armed with `failpoint`: true when the agent died there (the
    /// request failed and the log says why), false when the request never reached it.
    fn crash_at(&mut self, failpoint: Failpoint, verb: &str) -> bool {
        let said = format!("failpoint {} reached", failpoint.to_env());
        let out = self.cni(verb);
        let log = self.w.agent_log();
        if out.ok() {
            assert!(
                !log.contains(&said),
                "{verb} succeeded although the agent died at {}",
                failpoint.to_env()
            );
            return false;
        }
        assert!(
            log.contains(&said),
            "{verb} failed but not at {}: {} {}\nagent log:\n{log}",
            failpoint.to_env(),
            out.stdout,
            out.stderr
        );
        true
    }

    /// Everything an attachment of the pod may leave: the world's list (records, addresses,
    /// veths, the pod's links), port mappings, flows and counters, limits, the dataplane's
    /// records, the exec'd plugin's state.
    fn leftovers(&self) -> Vec<String> {
        let mut out = self.w.leftovers(&[&self.pod]);
        let pins = PinDir::open(&self.pins);
        let tables = Tables::open_pinned(&pins).expect("pinned port mapping maps");
        out.extend(tables.forward_keys().iter().map(|k| format!("port mapping {k:?}")));
        out.extend(tables.stray_counters().iter().map(|i| format!("port mapping counters {i}")));
        out.extend(tables.flows().iter().map(|(k, _)| format!("flow {k:?}")));
        let shaper = Table::open_pinned(&PinDir::open(&self.pins.join(BANDWIDTH_PIN_SUBDIR)))
            .expect("pinned bandwidth maps");
        out.extend(shaper.keys().iter().map(|k| format!("bandwidth limit {k:?}")));
        for (what, dir) in [
            ("port mapping record", self.w.path("state").join("portmap")),
            ("bandwidth record", self.w.path("state").join("bandwidth")),
            ("tuning state", self.w.path("tuning")),
        ] {
            out.extend(files_in(&dir).into_iter().map(|f| format!("{what} {f}")));
        }
        out.extend(list("portmap", &self.pins, &self.w).into_iter().map(|m| format!("listed mapping {m}")));
        out.extend(list("bandwidth", &self.pins, &self.w).into_iter().map(|m| format!("listed limit {m}")));
        out
    }

    #[track_caller]
    fn assert_nothing_left(&self, after: &str) {
        let left = self.leftovers();
        assert!(left.is_empty(), "left behind {after}: {left:#?}\nagent log:\n{}", self.w.agent_log());
    }

    /// A clean ADD and DEL, and nothing left.
    #[track_caller]
    fn add_then_del(&self, after: &str) {
        self.expect_ok("ADD", after);
        assert_eq!(self.pod.link_names().iter().filter(|n| *n != "lo").count(), 3, "eth0, net1, net2");
        self.expect_ok("DEL", after);
        self.assert_nothing_left(after);
    }
}

/// `plexus-agent <what> list --json`.
fn list(what: &str, pins: &std::path::Path, w: &World) -> Vec<Value> {
    let out = Command::new(bin("plexus-agent"))
        .args([what, "list", "--json", "--bpf-pin-dir"])
        .arg(pins)
        .arg("--state-dir")
        .arg(w.path("state"))
        .output()
        .unwrap_or_else(|e| panic!("{what} list: {e}"));
    assert!(out.status.success(), "{what} list: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what} list JSON: {e}"))
}

fn macvlan_nad(w: &World) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "durmv",
        "plugins": [
            {
                "type": "macvlan",
                "master": "durm0",
                "mode": "bridge",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.81.0.0/24", "rangeStart": "10.81.0.10",
                                 "rangeEnd": "10.81.0.99", "gateway": "10.81.0.1"}]],
                    "dataDir": w.path("ipam").join("durmv"),
                }
            },
            // Exec'd: plexus has no native tuning. It keeps a backup of what it changed.
            {"type": "tuning", "mtu": 1400, "dataDir": w.path("tuning")},
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

fn bridge_nad(w: &World) -> Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "durbr",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "durbr0",
                "isGateway": true,
                "ipMasq": true,
                "macspoofchk": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [{"subnet": "10.82.0.0/24", "rangeStart": "10.82.0.10", "rangeEnd": "10.82.0.99"}],
                        [{"subnet": "fd00:82::/64", "rangeStart": "fd00:82::10", "rangeEnd": "fd00:82::99"}]
                    ],
                    "dataDir": w.path("ipam").join("durbr"),
                }
            },
            {"type": "plexus-portmap", "capabilities": {"portMappings": true}},
            {"type": "plexus-bandwidth", "capabilities": {"bandwidth": true}}
        ]
    })
}

/// Crashes `verb` at every reach of every point; `prepare` runs under the armed agent before
/// the request (DEL needs an ADD first). Returns the points reached, with their reach counts.
fn crash_everywhere(
    t: &mut DurWorld,
    verb: Verb,
    prepare: fn(&DurWorld),
    recover: fn(&DurWorld, &str),
) -> Vec<(Point, u32)> {
    let mut reached = Vec::new();
    for point in Point::all() {
        let mut nth = 1;
        loop {
            let failpoint = Failpoint { verb, point, nth };
            let at = failpoint.to_env();
            t.start(Some(failpoint));
            prepare(t);
            if !t.crash_at(failpoint, verb.as_str()) {
                // Never reached this often: the request completed; undo it.
                if verb == Verb::Add {
                    t.expect_ok("DEL", &format!("after an ADD that never reached {at}"));
                }
                t.assert_nothing_left(&format!("a request that never reached {at}"));
                break;
            }
            t.start(None);
            recover(t, &format!("after a crash at {at}"));
            t.add_then_del(&format!("after a crash at {at} and its recovery"));
            nth += 1;
        }
        eprintln!("{verb} {}: reached {} time(s)", point.as_str(), nth - 1);
        if nth > 1 {
            reached.push((point, nth - 1));
        }
    }
    reached
}

fn nothing(_: &DurWorld) {}

/// The runtime's DEL of the crashed ADD, then nothing may be left.
fn del_after_crash(t: &DurWorld, after: &str) {
    t.expect_ok("DEL", after);
    t.assert_nothing_left(after);
}

#[test]
fn kernel_an_add_killed_at_any_point_is_finished_by_del_after_a_restart() {
    let mut t = DurWorld::new();
    let reached = crash_everywhere(&mut t, Verb::Add, nothing, del_after_crash);
    // Every point is on an ADD's way (the pod's default route moved, the status published).
    let missed: Vec<&str> = Point::all()
        .into_iter()
        .filter(|p| !reached.iter().any(|(r, _)| r == p))
        .map(|p| p.as_str())
        .collect();
    assert!(missed.is_empty(), "points an ADD never reached: {missed:?}");
    let plugins = reached.iter().find(|(p, _)| *p == Point::End(Phase::Plugins)).map(|(_, n)| *n);
    assert_eq!(plugins, Some(7), "bridge; macvlan, tuning, portmap; bridge, portmap, bandwidth");
}

/// The runtime retries the ADD after the crash without a DEL in between: the retry undoes what
/// the crashed one made and succeeds.
#[test]
fn kernel_an_add_killed_at_any_point_is_retried_after_a_restart() {
    let mut t = DurWorld::new();
    crash_everywhere(&mut t, Verb::Add, nothing, |t, after| {
        t.expect_ok("ADD", after);
        t.expect_ok("DEL", after);
        t.assert_nothing_left(after);
    });
}

#[test]
fn kernel_a_del_killed_at_any_point_is_finished_by_del_after_a_restart() {
    let mut t = DurWorld::new();
    let reached =
        crash_everywhere(&mut t, Verb::Del, |t| t.expect_ok("ADD", "before the DEL"), del_after_crash);
    for point in [Point::End(Phase::Plugins), Point::End(Phase::StateWrite), Point::Answer] {
        assert!(reached.iter().any(|(p, _)| *p == point), "a DEL never reached {}", point.as_str());
    }
}
