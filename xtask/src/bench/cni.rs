//! cni: what a pod's networks cost the runtime.
//!
//! - add_latency / del_latency: wall time of one pod's ADD and DEL with 1, 2 and 4 macvlan +
//!   host-local secondary networks, with 1, 2 and 4 bridge + host-local ones, and with two
//!   bridge networks chaining port mappings (two each) and a bandwidth limit (reference:
//!   `portmap` and `bandwidth`; plexus: `plexus-portmap` and `plexus-bandwidth`), each pod
//!   with the bridge default network too, through the same runtime helper for every side. The
//!   NAD configs are the same for all sides but for their address range, IPAM directory and
//!   the chain's plugin types. Targets (issue #17): ADD at most 0.6x the reference's with
//!   macvlan, 0.5x with bridge, 0.3x with the chain; DEL at most 0.6x.
//! - shim_roundtrip: the cheapest request that reaches the agent, a CHECK of a container the
//!   agent has no record of (it answers CNI error 3 from its state lookup; no plugin runs),
//!   against one exec of a reference plugin answering VERSION, and one exec of a trivial
//!   static binary (`fn main() {}`, the floor of an exec) given the shim's environment and
//!   stdin; issue #17 wants the shim at most 0.3 ms above that floor. Each exec is timed by
//!   the runtime helper from spawn to exit (outputs read), as a runtime sees it; the mean of
//!   `shim_calls` execs is a run's figure. The shim is measured as it ships: linked statically.
//! - the breakdown: for each agent side, each phase of its ADD and DEL per pod (from the
//!   agent's `plexus_cni_phase_duration_seconds`), printed after the table (issue #17).
//! - agent RSS (VmRSS): idle; with `rss_pods` x 4 attachments alive and after they are gone
//!   (each read once the agent has been quiet for [`SETTLE`]), the latter over the idle figure;
//!   the peak (VmHWM); and after each of [`CYCLES`] rounds of creating and deleting them again,
//!   the growth from the second round to the last. Targets (issue #38): at most 32 MiB loaded,
//!   at most 1.1x idle after DEL, at most 1 MiB of growth.

use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use serde_json::{json, Value};

use super::bins::trivial_static;
use super::macvlan_sides::{
    bridge_selections, bulk, chained_selections, macvlan_selections, pods, Op, Sides, BASELINE,
    CHAIN_MAPPINGS, PLEXUS,
};
use super::report::{Figure, Target};
use super::runner::{Call, Driver, PlexusDriver, Pod, Runtime, PLUGIN_DIR};
use super::stats::{load, mean};
use super::topology::Lab;
use super::{check_interrupt, Bench, Side};

const NO_DAEMON: &str = "the reference plugins run no daemon";
const ISSUE: &str = "issue #17";
const CHAIN: &str = "bridge+portmap+bandwidth";
/// Every pod's DEL, whatever its networks, at most this much of the reference's (issue #17).
const DEL_TARGET: f64 = 0.6;

/// One kind of pod the section times: its secondary attachments and the ADD target.
struct Workload {
    attachments: u32,
    kind: &'static str,
    /// plexus's ADD at most this much of the reference's (issue #17).
    add_target: f64,
}

impl Workload {
    fn label(&self) -> String {
        format!("{} {}", self.attachments, self.kind)
    }

    fn selections(&self) -> Vec<super::runner::Selection> {
        match self.kind {
            "macvlan" => macvlan_selections(self.attachments),
            "bridge" => bridge_selections(self.attachments),
            _ => chained_selections(),
        }
    }
}

/// 1, 2 and 4 macvlan attachments, 1, 2 and 4 bridge ones, and two bridge attachments with
/// port mappings and a bandwidth limit each; every pod also has the default network.
fn workloads() -> Vec<Workload> {
    let mut out = Vec::new();
    for (kind, add_target) in [("macvlan", 0.6), ("bridge", 0.5)] {
        out.extend([1, 2, 4].map(|attachments| Workload { attachments, kind, add_target }));
    }
    out.push(Workload { attachments: 2, kind: CHAIN, add_target: 0.3 });
    out
}

/// Pod names unique across the run.
fn pod_name(side: Side, tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{tag}-{}-{}", side.name(), NEXT.fetch_add(1, Ordering::SeqCst))
}

/// One pod's ADD and DEL, in ms. The DEL runs even when the ADD failed, so nothing stays.
fn add_del(driver: &dyn Driver, rt: &Runtime, pod: &Pod) -> anyhow::Result<(f64, f64)> {
    driver.prepare(pod)?;
    let t = Instant::now();
    let added = driver.add(rt, pod);
    let add_ms = t.elapsed().as_secs_f64() * 1e3;
    driver.finish(pod);
    let t = Instant::now();
    let deleted = driver.del(rt, pod);
    let del_ms = t.elapsed().as_secs_f64() * 1e3;
    added?;
    deleted?;
    Ok((add_ms, del_ms))
}

pub fn run(b: &mut Bench, lab: &Lab) -> anyhow::Result<()> {
    let sides = Sides::start(b, lab, "cni")?;
    let drivers = sides.drivers(b)?;
    let rt = Runtime::spawn(&lab.node)?;
    let set = b.set.clone();

    // Idle memory first, before any pod, once start-up (loading the BPF object, reconciling
    // state) has settled and its memory was given back.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut idle = Figure::new("cni", "agent_rss_idle", "MiB", json!({})).sides([
        Ok(PLEXUS),
        Err(NO_DAEMON),
        Ok(BASELINE),
    ]);
    sides.mark_missing(std::slice::from_mut(&mut idle));
    let before = load();
    let mut idle_kib = Vec::new();
    for side in [Side::Plexus, Side::Baseline] {
        if let Some(a) = sides.agent(side) {
            let kib = a.rss_kib()?;
            idle.push(side, kib as f64 / 1024.0, json!({"vmrss_kib": kib}));
            idle_kib.push((side, kib));
        }
    }
    idle.set_load(&before, &load());

    // A first pod per side, not counted: bridges get created, binaries and pages cached.
    for (side, d) in &drivers {
        let pod = Pod::new(&pod_name(*side, "warm"), macvlan_selections(4))?;
        if let Err(e) = add_del(d.as_ref(), &rt, &pod) {
            bail!("warm-up pod of {}: {e:#}", side.name());
        }
    }

    for w in workloads() {
        let mut params =
            json!({"attachments": w.attachments, "kind": w.kind, "pods_per_run": set.cni_pods_per_repeat});
        if w.kind == CHAIN {
            params["mappings_per_attachment"] = json!(CHAIN_MAPPINGS);
        }
        let mut add = Figure::new("cni", "add_latency", "ms", params.clone())
            .sides(sides.what())
            .with_target(Target::at_most(Side::Reference, w.add_target, ISSUE));
        let mut del = Figure::new("cni", "del_latency", "ms", params)
            .sides(sides.what())
            .with_target(Target::at_most(Side::Reference, DEL_TARGET, ISSUE));
        sides.mark_missing(std::slice::from_mut(&mut add));
        sides.mark_missing(std::slice::from_mut(&mut del));
        let label = w.label();
        let before = load();
        for r in 1..=set.repeat {
            let mut line = Vec::new();
            for (side, d) in &drivers {
                check_interrupt()?;
                let agent = sides.agent(*side);
                let phases_before = agent.map(|a| (a.phase_totals("ADD"), a.phase_totals("DEL")));
                let mut runs = Vec::new();
                for _ in 0..set.cni_pods_per_repeat {
                    let pod = Pod::new(&pod_name(*side, "lat"), w.selections())?;
                    match add_del(d.as_ref(), &rt, &pod) {
                        Ok(t) => runs.push(t),
                        Err(e) => {
                            add.fail(*side, format!("{e:#}"));
                            del.fail(*side, format!("{e:#}"));
                        }
                    }
                }
                if let (Some(a), Some((Ok(add0), Ok(del0)))) = (agent, &phases_before) {
                    if let (Ok(add1), Ok(del1)) = (a.phase_totals("ADD"), a.phase_totals("DEL")) {
                        b.breakdown.push("ADD", &label, *side, add0.per_pod_ms(&add1, runs.len()));
                        b.breakdown.push("DEL", &label, *side, del0.per_pod_ms(&del1, runs.len()));
                    }
                }
                if !runs.is_empty() {
                    let adds: Vec<f64> = runs.iter().map(|t| t.0).collect();
                    let dels: Vec<f64> = runs.iter().map(|t| t.1).collect();
                    let (a, dl) = (mean(&adds).unwrap_or(0.0), mean(&dels).unwrap_or(0.0));
                    add.push(*side, a, json!({"per_pod_ms": adds}));
                    del.push(*side, dl, json!({"per_pod_ms": dels}));
                    line.push(format!("{} add {a:.1} ms del {dl:.1} ms", side.name()));
                } else {
                    line.push(format!("{} failed", side.name()));
                }
            }
            b.progress("cni", &format!("{label}, repeat {r}/{}: {}", set.repeat, line.join(", ")));
        }
        let after = load();
        add.set_load(&before, &after);
        del.set_load(&before, &after);
        b.figures.extend([add, del]);
    }

    b.figures.push(shim_roundtrip(b, &rt, &sides)?);
    b.figures.push(idle);
    rss_loaded(b, lab, &sides, &drivers, &idle_kib)?;
    Ok(())
}

/// The cost of reaching the agent at all, per call.
fn shim_roundtrip(b: &Bench, rt: &Runtime, sides: &Sides) -> anyhow::Result<Figure> {
    let calls = b.set.shim_calls;
    let linked = if b.bins.shim_static { "static" } else { "dynamic" };
    let what = format!(
        "plexus CHECK of an unknown container: shim ({linked}ally linked) -> agent -> CNI error 3 from its \
         state, no plugin runs"
    );
    let mut fig = Figure::new("cni", "shim_roundtrip", "ms", json!({"calls_per_run": calls}))
        .sides([
            Ok(what.as_str()),
            Ok("exec of the reference macvlan plugin answering VERSION"),
            Ok("exec of a trivial static binary (fn main() {}, built with crt-static), with the shim's env and stdin"),
        ])
        .with_target(Target::at_most_above(Side::Baseline, 0.3, "issue #17"));
    let trivial = trivial_static(&b.out.join("tools"))?;
    let plexus = PlexusDriver { agent: &sides.plexus, shim: b.bins.shim.clone() };
    let pod = Pod::new("roundtrip", Vec::new())?;
    let netns = pod.netns.path_str();
    let version_env = [("CNI_COMMAND", "VERSION".to_owned()), ("CNI_PATH", PLUGIN_DIR.to_owned())];
    let before = load();
    for r in 1..=b.set.repeat {
        check_interrupt()?;
        let mut line = Vec::new();
        for side in Side::ALL {
            // Each exec as the runtime helper times it, spawn to exit with the outputs read:
            // the bench's own bookkeeping around it (a debug build's JSON) differs by side.
            let mut total_ms = 0.0;
            for i in 0..calls {
                let cid = format!("cid-unknown-{r}-{i}");
                let call =
                    Call { command: "CHECK", container_id: &cid, netns: &netns, ifname: "eth0", args: "" };
                let out = match side {
                    Side::Plexus => {
                        let out = plexus.shim(rt, &call)?;
                        if out.cni_code() != Some(3) {
                            bail!(
                                "CHECK of an unknown container answered {} {}",
                                out.stdout.trim(),
                                out.stderr.trim()
                            );
                        }
                        out
                    }
                    Side::Reference => {
                        let out = rt.exec(
                            &Path::new(PLUGIN_DIR).join("macvlan"),
                            &version_env,
                            r#"{"cniVersion":"1.0.0"}"#,
                        )?;
                        if out.code != 0 {
                            bail!("macvlan VERSION: {} {}", out.stdout.trim(), out.stderr.trim());
                        }
                        out
                    }
                    Side::Baseline => {
                        // The shim's environment and stdin: a runtime hands every plugin both.
                        let out = rt.exec(&trivial, &call.env(), &plexus.config())?;
                        if out.code != 0 {
                            bail!("{} failed", trivial.display());
                        }
                        out
                    }
                };
                total_ms += out.elapsed_ms;
            }
            let ms = total_ms / f64::from(calls);
            fig.push(side, ms, json!({"calls": calls}));
            line.push(format!("{} {ms:.2} ms", side.name()));
        }
        b.progress("cni", &format!("shim round trip, repeat {r}/{}: {}", b.set.repeat, line.join(", ")));
    }
    fig.set_load(&before, &load());
    Ok(fig)
}

/// How long the agent is left alone before its memory is read after a burst of requests: it
/// gives what the burst freed back within two seconds of going quiet (agent/src/memory.rs:
/// its blocking threads end after 1 s idle, the trimmer looks every second), as after
/// start-up, which the idle figure waits for too.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// Creating and deleting the `rss_pods` pods again, this many times, for the cycle figure.
const CYCLES: usize = 10;

/// The memory targets (issue #38): with `rss_pods` × 4 attachments alive at most this many MiB;
/// after deleting them, at most this much of the idle figure; from the second cycle to the
/// last, growing at most this many MiB (the page-granular noise of RSS).
const LOADED_AT_MOST_MIB: f64 = 32.0;
const AFTER_DEL_AT_MOST_OF_IDLE: f64 = 1.10;
const CYCLE_GROWTH_AT_MOST_MIB: f64 = 1.0;
const MEMORY_ISSUE: &str = "issue #38";

/// Memory with `rss_pods` pods of 4 attachments alive, after they were deleted (and over the
/// idle figure of the same side, `idle_kib`), its peak, and after each of [`CYCLES`] rounds of
/// creating and deleting them again: how much it grew from the second round to the last.
fn rss_loaded(
    b: &mut Bench,
    lab: &Lab,
    sides: &Sides,
    drivers: &[(Side, Box<dyn Driver + '_>)],
    idle_kib: &[(Side, u64)],
) -> anyhow::Result<()> {
    let n = b.set.rss_pods;
    let params = json!({"pods": n, "attachments": n * 4, "parallel": b.set.parallel, "runs": 1});
    let figure = |metric: &'static str, unit: &'static str, params: Value, target: Option<Target>| {
        let mut f =
            Figure::new("cni", metric, unit, params).sides([Ok(PLEXUS), Err(NO_DAEMON), Ok(BASELINE)]);
        if let Some(t) = target {
            f = f.with_target(t);
        }
        sides.mark_missing(std::slice::from_mut(&mut f));
        f
    };
    let mut loaded = figure(
        "agent_rss_loaded",
        "MiB",
        params.clone(),
        Some(Target::at_most_value(LOADED_AT_MOST_MIB, MEMORY_ISSUE)),
    );
    let mut after_del = figure("agent_rss_after_del", "MiB", params.clone(), None);
    let mut over_idle = figure(
        "agent_rss_after_del_over_idle",
        "x",
        params.clone(),
        Some(Target::at_most_value(AFTER_DEL_AT_MOST_OF_IDLE, MEMORY_ISSUE)),
    );
    let mut peak = figure("agent_rss_peak", "MiB", params.clone(), None);
    let mut cycle_params = params;
    cycle_params["cycles"] = json!(CYCLES);
    let mut growth = figure(
        "agent_rss_cycle_growth",
        "MiB",
        cycle_params,
        Some(Target::at_most_value(CYCLE_GROWTH_AT_MOST_MIB, MEMORY_ISSUE)),
    );
    let runtimes: Vec<Runtime> =
        (0..b.set.parallel).map(|_| Runtime::spawn(&lab.node)).collect::<Result<_, _>>()?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let before = load();
    for (side, d) in drivers {
        let Some(agent) = sides.agent(*side) else { continue };
        check_interrupt()?;
        let pods = pods(*side, "rss", n, 4)?;
        let add = bulk(Op::Add, d.as_ref(), &runtimes, &pods);
        std::thread::sleep(SETTLE);
        let live = agent.rss_kib()?;
        let records = agent.state_files().len();
        let del = bulk(Op::Del, d.as_ref(), &runtimes, &pods);
        std::thread::sleep(SETTLE);
        let gone = agent.rss_kib()?;
        let failed = add.failures.len() + del.failures.len();
        b.progress(
            "cni",
            &format!(
                "{}: RSS {:.1} MiB with {n} pods x 4 attachments ({records} records, {failed} failures), \
                 {:.1} MiB after DEL",
                side.name(),
                mib(live),
                mib(gone)
            ),
        );
        let detail: Value = json!({"vmrss_kib": live, "records": records, "add_failures": add.failures.len(),
                                   "first_failure": add.failures.first()});
        loaded.push(*side, mib(live), detail);
        after_del.push(*side, mib(gone), json!({"vmrss_kib": gone, "del_failures": del.failures.len()}));
        if let Some((_, idle)) = idle_kib.iter().find(|(s, _)| s == side) {
            over_idle.push(
                *side,
                gone as f64 / *idle as f64,
                json!({"idle_kib": idle, "after_del_kib": gone}),
            );
        }

        let mut rounds = Vec::with_capacity(CYCLES);
        let mut kinds = Vec::with_capacity(CYCLES);
        let mut round_failures = 0;
        for _ in 0..CYCLES {
            check_interrupt()?;
            let add = bulk(Op::Add, d.as_ref(), &runtimes, &pods);
            let del = bulk(Op::Del, d.as_ref(), &runtimes, &pods);
            round_failures += add.failures.len() + del.failures.len();
            std::thread::sleep(SETTLE);
            rounds.push(agent.rss_kib()?);
            kinds.push(agent.rss_anon_file_kib()?);
        }
        let shown: Vec<String> = rounds
            .iter()
            .zip(&kinds)
            .map(|(k, (anon, _))| format!("{:.1} ({:.1} anon)", mib(*k), mib(*anon)))
            .collect();
        b.progress(
            "cni",
            &format!(
                "{}: RSS after each of {CYCLES} rounds of {n} pods created and deleted: {} MiB ({round_failures} failures)",
                side.name(),
                shown.join(", ")
            ),
        );
        let grew = mib(rounds[CYCLES - 1]) - mib(rounds[1]);
        growth.push(
            *side,
            grew,
            json!({"vmrss_kib_per_round": rounds, "rss_anon_file_kib_per_round": kinds, "failures": round_failures}),
        );
        let hwm = agent.rss_peak_kib()?;
        peak.push(*side, mib(hwm), json!({"vmhwm_kib": hwm}));
    }
    let after = load();
    let mut figures = [loaded, after_del, over_idle, peak, growth];
    figures.iter_mut().for_each(|f| f.set_load(&before, &after));
    b.figures.extend(figures);
    Ok(())
}
