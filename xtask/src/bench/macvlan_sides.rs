//! The workload the cni and scale sections share: the three sides (plexus with its native
//! macvlan and bridge, the reference plugins, plexus exec'ing the reference macvlan and
//! bridge), pods with macvlan + host-local secondary networks (the cni section also with bridge
//! ones, and with the chain bridge + host-local + portmap + bandwidth), and adding or deleting
//! many pods at once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::report::{Figure, NOT_BUILT};
use super::runner::{Driver, PlexusDriver, Pod, ReferenceDriver, Runtime, Selection};
use super::topology::{chained_bridge_network, macvlan_network, secondary_bridge_network, Agent, Lab};
use super::{check_interrupt, Bench, Side};

pub const PLEXUS: &str =
    "plexus shim + agent: default network (bridge), macvlan, bridge, host-local, portmap and bandwidth native";
const REFERENCE: &str =
    "reference bridge, macvlan, host-local, portmap, bandwidth exec'd per configlist by a libcni-like runner";
pub const BASELINE: &str =
    "plexus shim + agent with --exec-plugin macvlan,bridge (the reference binaries exec'd by the agent)";

/// The pods' secondary networks: `bench-mv1` .. `bench-mv<m>`.
pub fn macvlan_selections(m: u32) -> Vec<Selection> {
    (1..=m).map(|k| Selection::plain(&format!("bench-mv{k}"))).collect()
}

/// Secondary bridge networks: `bench-br1` .. `bench-br<m>`.
pub fn bridge_selections(m: u32) -> Vec<Selection> {
    (1..=m).map(|k| Selection::plain(&format!("bench-br{k}"))).collect()
}

/// Port mappings per attachment of [`chained_selections`].
pub const CHAIN_MAPPINGS: u16 = 2;

/// `bench-chain1` and `bench-chain2`, each with [`CHAIN_MAPPINGS`] port mappings (host ports
/// unique in the run: the reference portmap does not refuse a taken one) and an ingress and
/// egress limit of 100 Mbit/s with kubelet's burst.
pub fn chained_selections() -> Vec<Selection> {
    static NEXT_PORT: AtomicUsize = AtomicUsize::new(20_000);
    (1..=2)
        .map(|k| {
            let first = NEXT_PORT.fetch_add(usize::from(CHAIN_MAPPINGS), Ordering::SeqCst);
            let mappings: Vec<serde_json::Value> = (0..usize::from(CHAIN_MAPPINGS))
                .map(|i| serde_json::json!({"hostPort": first + i, "containerPort": 8080 + i, "protocol": "tcp"}))
                .collect();
            let mut s = Selection::with(&format!("bench-chain{k}"), "portMappings", mappings.into());
            let limit = serde_json::json!({
                "ingressRate": 100_000_000u64, "ingressBurst": u64::from(u32::MAX),
                "egressRate": 100_000_000u64, "egressBurst": u64::from(u32::MAX),
            });
            s.requests.insert("bandwidth".into(), limit);
            s
        })
        .collect()
}

/// Registers every secondary network of the sections with a side: `bench-mv1..4`,
/// `bench-br1..4`, `bench-chain1..2` (`portmap` / `bandwidth` naming the chain's plugin types).
fn add_networks(
    add: &mut dyn FnMut(&serde_json::Value) -> anyhow::Result<()>,
    side: Side,
    ipam: &std::path::Path,
    portmap: &str,
    bandwidth: &str,
) -> anyhow::Result<()> {
    for k in 1..=4 {
        add(&macvlan_network(k, side, ipam))?;
        add(&secondary_bridge_network(k, side, ipam))?;
    }
    for k in 1..=2 {
        add(&chained_bridge_network(k, side, ipam, portmap, bandwidth))?;
    }
    Ok(())
}

/// The three sides of the cni and scale sections: plexus (native macvlan), the reference
/// plugins, and plexus exec'ing the reference macvlan (when the agent can).
pub struct Sides {
    pub plexus: Agent,
    pub baseline: Result<Agent, String>,
    reference_ipam: PathBuf,
}

impl Sides {
    pub fn start(b: &Bench, lab: &Lab, tag: &str) -> anyhow::Result<Sides> {
        // With metrics: the cni section reads where their ADD and DEL time goes.
        let plexus = Agent::start_with_metrics(lab, &b.bins, &format!("{tag}-plexus"), Side::Plexus, &[])?;
        let baseline = if b.bins.exec_plugin_option {
            Ok(Agent::start_with_metrics(
                lab,
                &b.bins,
                &format!("{tag}-plexus-exec"),
                Side::Baseline,
                &["--exec-plugin", "macvlan,bridge"],
            )?)
        } else {
            Err("the agent has no --exec-plugin option yet".to_owned())
        };
        let reference_ipam = lab.path(&format!("{tag}-reference/ipam"));
        std::fs::create_dir_all(&reference_ipam)?;
        Ok(Sides { plexus, baseline, reference_ipam })
    }

    pub fn what(&self) -> [Result<&'static str, &'static str>; 3] {
        [Ok(PLEXUS), Ok(REFERENCE), Ok(BASELINE)]
    }

    pub fn mark_missing(&self, figs: &mut [Figure]) {
        if let Err(why) = &self.baseline {
            for f in figs {
                f.set_missing(Side::Baseline, NOT_BUILT, why.clone());
            }
        }
    }

    /// A driver per side, each knowing the four macvlan networks.
    pub fn drivers(&self, b: &Bench) -> anyhow::Result<Vec<(Side, Box<dyn Driver + '_>)>> {
        let mut out: Vec<(Side, Box<dyn Driver + '_>)> = Vec::new();
        let plexus = PlexusDriver { agent: &self.plexus, shim: b.bins.shim.clone() };
        let ipam = self.plexus.ipam_dir();
        add_networks(
            &mut |n| plexus.add_network(n),
            Side::Plexus,
            &ipam,
            "plexus-portmap",
            "plexus-bandwidth",
        )?;
        out.push((Side::Plexus, Box::new(plexus)));
        let mut reference = ReferenceDriver::new(Side::Reference, self.reference_ipam.clone())?;
        let ipam = self.reference_ipam.clone();
        add_networks(&mut |n| reference.add_network(n), Side::Reference, &ipam, "portmap", "bandwidth")?;
        out.push((Side::Reference, Box::new(reference)));
        if let Ok(agent) = &self.baseline {
            let baseline = PlexusDriver { agent, shim: b.bins.shim.clone() };
            let ipam = agent.ipam_dir();
            add_networks(
                &mut |n| baseline.add_network(n),
                Side::Baseline,
                &ipam,
                "plexus-portmap",
                "plexus-bandwidth",
            )?;
            out.push((Side::Baseline, Box::new(baseline)));
        }
        Ok(out)
    }

    /// The agent of `side`, if that side runs one.
    pub fn agent(&self, side: Side) -> Option<&Agent> {
        match side {
            Side::Plexus => Some(&self.plexus),
            Side::Baseline => self.baseline.as_ref().ok(),
            Side::Reference => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Del,
}

pub struct Bulk {
    pub secs: f64,
    pub failures: Vec<String>,
}

/// Adds or deletes every pod, one worker per runtime helper.
pub fn bulk(op: Op, driver: &dyn Driver, runtimes: &[Runtime], pods: &[Pod]) -> Bulk {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for rt in runtimes {
            let (next, failures) = (&next, &failures);
            s.spawn(move || {
                while let Some(pod) = pods.get(next.fetch_add(1, Ordering::SeqCst)) {
                    if check_interrupt().is_err() {
                        break;
                    }
                    let outcome = match op {
                        Op::Add => {
                            let r = driver.prepare(pod).and_then(|()| driver.add(rt, pod));
                            driver.finish(pod);
                            r
                        }
                        Op::Del => driver.del(rt, pod),
                    };
                    if let Err(e) = outcome {
                        if let Ok(mut f) = failures.lock() {
                            f.push(format!("{e:#}"));
                        }
                    }
                }
            });
        }
    });
    Bulk { secs: start.elapsed().as_secs_f64(), failures: failures.into_inner().unwrap_or_default() }
}

/// `n` pods with `m` macvlan attachments each, namespaces created.
pub fn pods(side: Side, tag: &str, n: u32, m: u32) -> anyhow::Result<Vec<Pod>> {
    (0..n).map(|i| Pod::new(&format!("{tag}-{}-{i}", side.name()), macvlan_selections(m))).collect()
}
