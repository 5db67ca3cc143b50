//! `cargo xtask stress`: a fault storm. Pods come and go through the real shim and agent
//! (bridge + host-local + plexus-portmap + plexus-bandwidth, native macvlan with host-local
//! and static IPAM), several at once, as kubelet drives them (a failed ADD is followed by DELs
//! until one succeeds; GC names the sandboxes that exist), while faults land at random points:
//! the agent killed and restarted mid-operation, the shim killed, a plugin that rejects its
//! config or hangs past its timeout, a namespace deleted before its DEL, a pod the runtime
//! forgets, a full state directory. At the end every pod is deleted and the node must hold
//! nothing that no live pod owns.

mod burst;
mod check;
mod model;
mod rng;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::bench::runner::{Call, ExecOut, Runtime, PLUGIN_DIR};
use crate::bench::{self, topology};
use crate::util::is_root;
use model::{Fault, Op, Phase};
use rng::Rng;
use world::{Pod, Tree};

#[derive(clap::Args, Debug, Clone)]
pub struct StressArgs {
    /// Operations to run (ADD, DEL, CHECK, GC, STATUS), over all workers.
    #[arg(long, default_value_t = 300)]
    pub ops: u64,
    /// The seed of every random choice (printed; replays the operations and faults).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Pods alive at once.
    #[arg(long, default_value_t = 8)]
    pub pods: usize,
    /// Operations in flight at once (each worker drives its share of the pods).
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Share of operations that carry a fault, in percent.
    #[arg(long, default_value_t = 25)]
    pub fault_percent: u64,
    /// Instead of the storm: this many pods' ADDs at once, the agent killed in the middle.
    #[arg(long, value_name = "PODS")]
    pub burst: Option<usize>,
    /// Take plexus and plexus-agent from this directory instead of building release binaries.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
}

/// What happened, for the report.
#[derive(Default)]
struct Tally {
    /// (verb, outcome): `ok`, `error` (a CNI error), `killed` (the shim killed, no answer).
    ops: BTreeMap<(&'static str, &'static str), u64>,
    faults: BTreeMap<&'static str, u64>,
    /// Answers that broke a rule (a failure without a CNI error, ...).
    violations: Vec<String>,
}

/// Shared by the workers.
struct Storm<'a> {
    lab: &'a topology::Lab,
    tree: &'a Tree,
    agent: Mutex<topology::Agent>,
    socket: PathBuf,
    shim: PathBuf,
    /// Operations take it shared, GC exclusively: the runtime never collects while an ADD
    /// of a sandbox it has not listed may be running (CNI 1.1's GC contract).
    gc_gate: RwLock<()>,
    /// Every sandbox that exists, by container id (GC's valid list).
    sandboxes: Mutex<BTreeMap<String, ()>>,
    /// Pods the runtime forgot: their namespaces are deleted, only GC cleans them.
    tally: Mutex<Tally>,
    ops_left: Mutex<u64>,
    next_pod: Mutex<u64>,
    seed: u64,
    fault_percent: u64,
}

pub fn run(args: &StressArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("the storm creates network namespaces and mounts: run it as root");
    }
    if let Some(n) = args.burst {
        return run_burst(n, args);
    }
    let seed = args.seed.unwrap_or_else(rng::fresh_seed);
    println!("stress: seed {seed} (replay with --seed {seed}), {} operations, {} pods, {} workers, faults on {}% of operations",
        args.ops, args.pods, args.workers, args.fault_percent);
    bench::catch_signals();
    topology::sweep_stale();
    let bins = bench::binaries(args.bin_dir.as_ref())?;
    let out = tempfile::Builder::new().prefix("pxstress-").tempdir()?;
    std::fs::create_dir_all(out.path().join("logs"))?;
    let started = Instant::now();
    let outcome = storm(args, seed, &bins, out.path());
    let log_copy = std::env::temp_dir().join(format!("pxstress-{seed}.log"));
    let _ = std::fs::copy(out.path().join("logs/storm.log"), &log_copy);
    let (tally, leftovers) = outcome?;
    print_report(&tally, &leftovers, started.elapsed(), seed);
    if !tally.violations.is_empty() || !leftovers.is_empty() {
        bail!(
            "the storm (seed {seed}) found {} broken answers and {} leftovers; the agent's log: {}",
            tally.violations.len(),
            leftovers.len(),
            log_copy.display()
        );
    }
    let _ = std::fs::remove_file(&log_copy);
    Ok(())
}

fn run_burst(n: usize, args: &StressArgs) -> anyhow::Result<()> {
    bench::catch_signals();
    topology::sweep_stale();
    let bins = bench::binaries(args.bin_dir.as_ref())?;
    let out = tempfile::Builder::new().prefix("pxstress-").tempdir()?;
    std::fs::create_dir_all(out.path().join("logs"))?;
    let report = burst::run(n, &bins, out.path())?;
    burst::print(&report);
    if report.problems() > 0 {
        let log_copy = std::env::temp_dir().join("pxstress-burst.log");
        let _ = std::fs::copy(out.path().join("logs/storm.log"), &log_copy);
        bail!("the burst found {} problems; the agent's log: {}", report.problems(), log_copy.display());
    }
    Ok(())
}

fn storm(
    args: &StressArgs,
    seed: u64,
    bins: &bench::Bins,
    out: &std::path::Path,
) -> anyhow::Result<(Tally, Vec<String>)> {
    let lab = topology::Lab::new(out)?;
    let tree = Tree::new(&lab);
    let state_mount = tree.mount_state()?;
    let agent = tree.start_agent(&lab, bins)?;
    tree.write_networks(&agent)?;
    let storm = Storm {
        lab: &lab,
        tree: &tree,
        socket: agent.socket.clone(),
        agent: Mutex::new(agent),
        shim: bins.shim.clone(),
        gc_gate: RwLock::new(()),
        sandboxes: Mutex::new(BTreeMap::new()),
        tally: Mutex::new(Tally::default()),
        ops_left: Mutex::new(args.ops),
        next_pod: Mutex::new(0),
        seed,
        fault_percent: args.fault_percent,
    };
    let workers = args.workers.max(1);
    let pods_per_worker = args.pods.max(workers).div_ceil(workers);
    let results: Vec<anyhow::Result<Vec<Pod>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let storm = &storm;
                s.spawn(move || storm.worker(w as u64, pods_per_worker))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked"))))
            .collect()
    });
    let mut remaining = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(pods) => remaining.extend(pods),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    // The end: kubelet deletes every pod that is left, then collects with nothing valid.
    let rt = Runtime::spawn(&lab.node)?;
    for pod in remaining {
        storm.delete_for_good(&rt, pod)?;
    }
    storm.sandboxes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clear();
    let gc = storm.retry(&rt, Op::Gc, None, 20)?;
    if gc.code != 0 {
        errors.push(format!("the final GC never succeeded: {}", gc.stdout.trim()));
    }
    tree.empty_state_ballast();
    let agent = storm.agent.into_inner().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let mut tally = storm.tally.into_inner().map_err(|_| anyhow::anyhow!("poisoned"))?;
    tally.violations.extend(errors);
    let leftovers = check::leftovers(&lab, &tree, &agent, bins)?;
    drop(agent);
    drop(state_mount);
    Ok((tally, leftovers))
}

impl Storm<'_> {
    /// One worker: its own runtime helper and pods, operations until the budget is spent.
    fn worker(&self, index: u64, pods: usize) -> anyhow::Result<Vec<Pod>> {
        let rt = Runtime::spawn(&self.lab.node)?;
        let mut rng = Rng::fork(self.seed, index);
        let mut slots: Vec<(Pod, Phase)> = Vec::new();
        for _ in 0..pods {
            slots.push((self.new_pod(&mut rng)?, Phase::Created));
        }
        while self.take_op()? {
            bench::check_interrupt()?;
            let k = rng.below(slots.len() as u64) as usize;
            let phase = slots[k].1;
            let (op, fault) = model::next(phase, &mut rng, self.fault_percent);
            let ok = self.operate(&rt, &mut slots[k].0, op, fault)?;
            match model::after(phase, op, ok) {
                Some(p) => slots[k].1 = p,
                None => {
                    let fresh = self.new_pod(&mut rng)?;
                    let done = std::mem::replace(&mut slots[k], (fresh, Phase::Created));
                    self.retire(done.0)?;
                }
            }
        }
        Ok(slots.into_iter().map(|(p, _)| p).collect())
    }

    fn take_op(&self) -> anyhow::Result<bool> {
        let mut left = self.ops_left.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        if *left == 0 {
            return Ok(false);
        }
        *left -= 1;
        Ok(true)
    }

    fn new_pod(&self, rng: &mut Rng) -> anyhow::Result<Pod> {
        let n = {
            let mut next = self.next_pod.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            *next += 1;
            *next
        };
        let mut selections = Vec::new();
        if rng.chance(50) {
            // A host port of its own: a pod that the runtime forgot may hold its old one
            // until GC.
            let host_port = 20_000 + (n % 20_000);
            selections.push(json!({
                "name": world::BRIDGE_NET,
                "portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"},
                                 {"hostPort": host_port, "containerPort": 53, "protocol": "udp"}],
                "bandwidth": {"ingressRate": 100_000_000, "ingressBurst": 1_000_000,
                              "egressRate": 50_000_000, "egressBurst": 1_000_000},
            }));
        }
        if rng.chance(40) {
            selections.push(json!({"name": world::MACVLAN_NET}));
        }
        if rng.chance(30) {
            let ip = format!("10.66.{}.{}/16", (n / 250) % 250, n % 250 + 1);
            selections.push(json!({"name": world::STATIC_NET, "ips": [ip]}));
        }
        let cid = format!("{:016x}{:016x}", rng.next_u64(), n);
        let u = rng.next_u64();
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            u >> 32,
            (u >> 16) & 0xffff,
            u & 0xfff,
            n & 0xfff,
            n
        );
        let pod = Pod::new(format!("st{n}"), uid, cid, selections)?;
        self.tree.write_pod(&pod.name, &pod.uid, &pod.selections)?;
        self.sandboxes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.insert(pod.cid.clone(), ());
        Ok(pod)
    }

    /// The pod's sandbox is gone (its DEL succeeded): namespace, manifest, GC entry.
    fn retire(&self, pod: Pod) -> anyhow::Result<()> {
        self.sandboxes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.remove(&pod.cid);
        self.tree.remove_pod(&pod.name);
        drop(pod);
        Ok(())
    }

    /// One operation with its fault; whether it succeeded.
    fn operate(&self, rt: &Runtime, pod: &mut Pod, op: Op, fault: Option<Fault>) -> anyhow::Result<bool> {
        let gate = if op == Op::Gc {
            Gate::Exclusive(self.gc_gate.write().map_err(|_| anyhow::anyhow!("poisoned"))?)
        } else {
            Gate::Shared(self.gc_gate.read().map_err(|_| anyhow::anyhow!("poisoned"))?)
        };
        if let Some(f) = fault {
            *self
                .tally
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .faults
                .entry(f.kind())
                .or_default() += 1;
        }
        let mut selections = pod.selections.clone();
        let mut lock = None;
        let mut kill_shim = None;
        let mut ballast = false;
        match fault {
            Some(Fault::PluginRejects) => selections.push(json!({"name": world::REJECTED_NET})),
            Some(Fault::PluginHangs) => {
                selections.push(json!({"name": world::SLOW_NET}));
                lock = Some(self.tree.hold_slow_lock()?);
            }
            Some(Fault::StateFull) => {
                self.tree.fill_state()?;
                ballast = true;
            }
            Some(Fault::KillShim { after_ms }) => kill_shim = Some(after_ms),
            Some(Fault::NetnsGone { keep_path }) => {
                pod.netns = None;
                if !keep_path {
                    pod.netns_path = String::new();
                }
            }
            Some(Fault::Forgotten) => {
                // No DEL comes: the sandbox disappears with its namespace, only GC cleans it.
                pod.netns = None;
                self.sandboxes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.remove(&pod.cid);
                self.tree.remove_pod(&pod.name);
                drop(gate);
                return Ok(true);
            }
            Some(Fault::KillAgent { .. }) | None => {}
        }
        if op == Op::Add {
            self.tree.write_pod(&pod.name, &pod.uid, &selections)?;
        }
        let out = std::thread::scope(|s| -> anyhow::Result<ExecOut> {
            if let Some(Fault::KillAgent { after_ms }) = fault {
                s.spawn(move || self.kill_agent(after_ms));
            }
            self.call(rt, op, Some(pod), kill_shim)
        })?;
        drop(lock);
        if ballast {
            self.tree.empty_state_ballast();
        }
        drop(gate);
        let ok = out.code == 0;
        let mut tally = self.tally.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let outcome = match (ok, kill_shim.is_some() && out.stdout.trim().is_empty()) {
            (true, _) => "ok",
            (false, true) => "killed",
            (false, false) => "error",
        };
        *tally.ops.entry((op.verb(), outcome)).or_default() += 1;
        if let Err(why) = model::judge(op, out.code, &out.stdout, kill_shim.is_some()) {
            tally.violations.push(format!("pod {} ({}): {why}", pod.name, pod.cid));
        }
        Ok(ok)
    }

    fn kill_agent(&self, after_ms: u64) {
        std::thread::sleep(Duration::from_millis(after_ms));
        let outcome = match self.agent.lock() {
            Ok(mut agent) => agent.kill_and_restart(&self.lab.node),
            Err(_) => Err(anyhow::anyhow!("poisoned")),
        };
        if let Err(e) = outcome {
            if let Ok(mut t) = self.tally.lock() {
                t.violations.push(format!("restarting the agent: {e:#}"));
            }
        }
    }

    /// Runs the shim for `op` as the runtime would.
    fn call(
        &self,
        rt: &Runtime,
        op: Op,
        pod: Option<&Pod>,
        kill_after_ms: Option<u64>,
    ) -> anyhow::Result<ExecOut> {
        let mut conf =
            json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus", "socket": self.socket});
        if op == Op::Gc {
            let valid: Vec<Value> = self
                .sandboxes
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .keys()
                .map(|cid| json!({"containerID": cid, "ifname": "eth0"}))
                .collect();
            conf["cni.dev/valid-attachments"] = Value::Array(valid);
        }
        let (cid, netns, args) = match (op, pod) {
            (Op::Gc | Op::Status, _) | (_, None) => (String::new(), String::new(), String::new()),
            (_, Some(p)) => (p.cid.clone(), p.netns_path.clone(), p.cni_args()),
        };
        let call =
            Call { command: op.verb(), container_id: &cid, netns: &netns, ifname: "eth0", args: &args };
        let mut env = call.env();
        env.retain(|(k, v)| !(v.is_empty() && *k != "CNI_COMMAND" && *k != "CNI_PATH"));
        if env.iter().all(|(k, _)| *k != "CNI_PATH") {
            env.push(("CNI_PATH", PLUGIN_DIR.to_owned()));
        }
        rt.exec_killed(&self.shim, &env, &conf.to_string(), kill_after_ms)
    }

    /// `op` until it succeeds (at most `tries` times, a short pause between).
    fn retry(&self, rt: &Runtime, op: Op, pod: Option<&Pod>, tries: u32) -> anyhow::Result<ExecOut> {
        let mut last = None;
        for _ in 0..tries {
            let out = self.call(rt, op, pod, None)?;
            if out.code == 0 {
                return Ok(out);
            }
            last = Some(out);
            std::thread::sleep(Duration::from_millis(200));
        }
        last.context("no try")
    }

    /// kubelet deleting a pod at the end: DEL until it succeeds.
    fn delete_for_good(&self, rt: &Runtime, pod: Pod) -> anyhow::Result<()> {
        if self.sandboxes.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.contains_key(&pod.cid) {
            let out = self.retry(rt, Op::Del, Some(&pod), 20)?;
            if out.code != 0 {
                self.tally.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.violations.push(format!(
                    "pod {}: DEL never succeeded: {}",
                    pod.name,
                    out.stdout.trim()
                ));
            }
        }
        self.retire(pod)
    }
}

enum Gate<'a> {
    Shared(#[allow(dead_code)] std::sync::RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] std::sync::RwLockWriteGuard<'a, ()>),
}

fn print_report(tally: &Tally, leftovers: &[String], took: Duration, seed: u64) {
    let total: u64 = tally.ops.values().sum();
    println!("stress: {total} operations in {:.1} s (seed {seed})", took.as_secs_f64());
    for op in Op::ALL {
        let n = |outcome| tally.ops.get(&(op.verb(), outcome)).copied().unwrap_or(0);
        println!(
            "  {:<7} {:>5} succeeded  {:>5} failed with a CNI error  {:>5} shim killed",
            op.verb(),
            n("ok"),
            n("error"),
            n("killed")
        );
    }
    let injected: u64 = tally.faults.values().sum();
    println!("  faults injected: {injected}");
    for kind in Fault::KINDS {
        println!("    {:<42} {:>5}", kind, tally.faults.get(kind).copied().unwrap_or(0));
    }
    println!("  broken answers: {}", tally.violations.len());
    for v in &tally.violations {
        println!("    {v}");
    }
    println!("  leftovers: {}", leftovers.len());
    for l in leftovers {
        println!("    {l}");
    }
}
