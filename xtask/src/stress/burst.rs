//! `cargo xtask stress --burst N`: N pods' ADDs at once through the shim (each its own exec,
//! as a runtime starting N sandboxes would), the agent killed in the middle and restarted.
//! Every ADD must succeed or answer a CNI error; kubelet's retries (DEL, then ADD again) must
//! all succeed; the agent's memory is sampled throughout; after every DEL nothing is left.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::model::{self, Op};
use super::world::{self, Pod, Tree};
use crate::bench::runner::PLUGIN_DIR;
use crate::bench::{self, topology};

/// How often kubelet retries a pod whose ADD failed (a DEL, then the ADD again).
const RETRIES: u32 = 10;
/// The agent's resident memory may not exceed this during the burst (it holds a request,
/// a plan and a record per pod in flight, and at most --max-concurrent-adds (16) running).
pub const RSS_BOUND_MIB: u64 = 256;

pub struct BurstReport {
    pub pods: usize,
    pub first_ok: u64,
    pub first_failed: u64,
    pub retried_ok: u64,
    pub never_ok: Vec<String>,
    pub broken: Vec<String>,
    pub peak_rss_mib: u64,
    pub kill_at_ms: u64,
    pub took: Duration,
    pub leftovers: Vec<String>,
}

pub fn run(n: usize, bins: &bench::Bins, out: &Path) -> anyhow::Result<BurstReport> {
    let started = Instant::now();
    let lab = topology::Lab::new(out)?;
    let tree = Tree::new(&lab);
    let state_mount = tree.mount_state()?;
    let agent = tree.start_agent(&lab, bins)?;
    tree.write_networks(&agent)?;
    let socket = agent.socket.clone();
    let agent = Mutex::new(agent);
    let mut pods = Vec::with_capacity(n);
    for i in 0..n {
        let selections = if i % 2 == 0 { vec![json!({"name": world::MACVLAN_NET})] } else { Vec::new() };
        let pod = Pod::new(
            format!("burst{i}"),
            format!("00000000-0000-4000-8000-{i:012}"),
            format!("burst{i:060}"),
            selections,
        )?;
        tree.write_pod(&pod.name, &pod.uid, &pod.selections)?;
        pods.push(pod);
    }
    let first_ok = AtomicU64::new(0);
    let first_failed = AtomicU64::new(0);
    let broken = Mutex::new(Vec::new());
    let peak_kib = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    let mut kill_at_ms = 0;
    let failed: Vec<usize> = std::thread::scope(|s| -> anyhow::Result<Vec<usize>> {
        // Memory, sampled every 50 ms while the burst runs.
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                if let Ok(a) = agent.lock() {
                    if let Ok(kib) = a.rss_kib() {
                        peak_kib.fetch_max(kib, Ordering::SeqCst);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let handles: Vec<_> = pods
            .iter()
            .map(|pod| {
                let (socket, shim, answered) = (&socket, &bins.shim, &answered);
                let (first_ok, first_failed, broken) = (&first_ok, &first_failed, &broken);
                s.spawn(move || -> bool {
                    let out = shim_exec(shim, socket, Op::Add, pod);
                    answered.fetch_add(1, Ordering::SeqCst);
                    match out {
                        Ok((code, stdout)) => {
                            if let Err(why) = model::judge(Op::Add, code, &stdout, false) {
                                if let Ok(mut b) = broken.lock() {
                                    b.push(format!("pod {}: {why}", pod.name));
                                }
                            }
                            if code == 0 {
                                first_ok.fetch_add(1, Ordering::SeqCst);
                                return true;
                            }
                            first_failed.fetch_add(1, Ordering::SeqCst);
                            false
                        }
                        Err(e) => {
                            if let Ok(mut b) = broken.lock() {
                                b.push(format!("pod {}: running the shim: {e:#}", pod.name));
                            }
                            first_failed.fetch_add(1, Ordering::SeqCst);
                            false
                        }
                    }
                })
            })
            .collect();
        // The kill lands when a third of the pods have been answered.
        let t0 = Instant::now();
        while answered.load(Ordering::SeqCst) < (n as u64) / 3 && t0.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(5));
        }
        kill_at_ms = t0.elapsed().as_millis() as u64;
        agent.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.kill_and_restart(&lab.node)?;
        let mut failed = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            if !h.join().unwrap_or(false) {
                failed.push(i);
            }
        }
        done.store(true, Ordering::SeqCst);
        Ok(failed)
    })?;
    // kubelet's retries: DEL the failed sandbox, then ADD again.
    let mut retried_ok = 0;
    let mut never_ok = Vec::new();
    for i in failed {
        let pod = &pods[i];
        let mut ok = false;
        for _ in 0..RETRIES {
            let _ = shim_exec(&bins.shim, &socket, Op::Del, pod);
            if matches!(shim_exec(&bins.shim, &socket, Op::Add, pod), Ok((0, _))) {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if ok {
            retried_ok += 1;
        } else {
            never_ok.push(pod.name.clone());
        }
    }
    let mut del_failures = Vec::new();
    for pod in &pods {
        let mut ok = false;
        for _ in 0..RETRIES {
            if matches!(shim_exec(&bins.shim, &socket, Op::Del, pod), Ok((0, _))) {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if !ok {
            del_failures.push(format!("pod {}: DEL never succeeded", pod.name));
        }
        tree.remove_pod(&pod.name);
    }
    drop(pods);
    // The runtime's periodic GC, with no sandbox left.
    match gc(&bins.shim, &socket) {
        Ok((0, _)) => {}
        Ok((code, out)) => del_failures.push(format!("the final GC failed ({code}): {}", out.trim())),
        Err(e) => del_failures.push(format!("the final GC: {e:#}")),
    }
    let agent = agent.into_inner().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let leftovers = super::check::leftovers(&lab, &tree, &agent, bins)?;
    drop(agent);
    drop(state_mount);
    let mut broken = broken.into_inner().map_err(|_| anyhow::anyhow!("poisoned"))?;
    broken.extend(del_failures);
    Ok(BurstReport {
        pods: n,
        first_ok: first_ok.into_inner(),
        first_failed: first_failed.into_inner(),
        retried_ok,
        never_ok,
        broken,
        peak_rss_mib: peak_kib.into_inner().div_ceil(1024),
        kill_at_ms,
        took: started.elapsed(),
        leftovers,
    })
}

/// One exec of the shim for a pod, from this process's namespace (the socket is a path; the
/// agent runs the plugins in the node).
fn shim_exec(shim: &Path, socket: &Path, op: Op, pod: &Pod) -> anyhow::Result<(i32, String)> {
    let env = [
        ("CNI_COMMAND", op.verb().to_owned()),
        ("CNI_CONTAINERID", pod.cid.clone()),
        ("CNI_NETNS", pod.netns_path.clone()),
        ("CNI_IFNAME", "eth0".to_owned()),
        ("CNI_ARGS", pod.cni_args()),
    ];
    run_shim(
        shim,
        &env,
        &json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus", "socket": socket}),
    )
}

/// A GC with no valid attachment, as the runtime sends once no sandbox is left.
fn gc(shim: &Path, socket: &Path) -> anyhow::Result<(i32, String)> {
    let conf = json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus", "socket": socket,
                      "cni.dev/valid-attachments": []});
    run_shim(shim, &[("CNI_COMMAND", "GC".to_owned())], &conf)
}

/// Runs the shim with `env` (and CNI_PATH) and `conf` on stdin: its exit code and stdout.
fn run_shim(shim: &Path, env: &[(&str, String)], conf: &serde_json::Value) -> anyhow::Result<(i32, String)> {
    let mut child = Command::new(shim)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("CNI_PATH", PLUGIN_DIR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("running the shim")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("shim stdin")?;
        stdin.write_all(conf.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    Ok((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned()))
}

pub fn print(r: &BurstReport) {
    println!(
        "burst: {} concurrent ADDs in {:.1} s, the agent killed after {} ms and restarted",
        r.pods,
        r.took.as_secs_f64(),
        r.kill_at_ms
    );
    println!("  first ADD: {} succeeded, {} failed with a CNI error", r.first_ok, r.first_failed);
    println!("  kubelet's retries: {} succeeded, {} never did", r.retried_ok, r.never_ok.len());
    println!("  agent memory: peak {} MiB (bound {RSS_BOUND_MIB} MiB)", r.peak_rss_mib);
    println!("  broken answers: {}", r.broken.len());
    for b in &r.broken {
        println!("    {b}");
    }
    println!("  leftovers: {}", r.leftovers.len());
    for l in &r.leftovers {
        println!("    {l}");
    }
}

impl BurstReport {
    pub fn problems(&self) -> usize {
        self.broken.len()
            + self.never_ok.len()
            + self.leftovers.len()
            + usize::from(self.peak_rss_mib > RSS_BOUND_MIB)
    }
}
