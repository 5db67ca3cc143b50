//! How pods get their networks, per side, exactly as a container runtime would do it.
//!
//! - [`Runtime`] stands in for containerd on the node: a helper process (this binary's hidden
//!   `bench-net runtime`) running inside the node namespace that execs CNI binaries with the
//!   CNI environment and stdin, and reports exit code and output. Both sides go through it,
//!   so both pay the same process creation and namespace costs.
//! - plexus ([`PlexusDriver`]): one exec of the `plexus` shim per pod and verb; the agent does
//!   the rest.
//! - reference ([`ReferenceDriver`]): what libcni does for each network of the pod (the
//!   default network on `eth0`, then each selected network on `net1`, `net2`, ...): every
//!   plugin of the configlist exec'd in order with the list's `name` and `cniVersion`
//!   injected, the previous plugin's result as `prevResult`, and `runtimeConfig` for the
//!   capabilities the plugin declares; DEL in reverse order with the ADD's result as
//!   `prevResult`, as libcni's result cache would give it. Each plugin's ADD is timed (spawn
//!   to exit, in the helper), so one step of a chain can be compared on its own.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use plexus_testkit::{host_local_allocations, Netns, Proc};
use serde_json::{json, Map, Value};

use super::topology::{self, Agent};
use super::Side;

pub const PLUGIN_DIR: &str = "/usr/lib/cni";

#[derive(Debug, Clone)]
pub struct ExecOut {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Spawn to exit of the program, as the helper timed it (no pipe round trip).
    pub elapsed_ms: f64,
}

impl ExecOut {
    /// The CNI error code of a failed call.
    pub fn cni_code(&self) -> Option<u64> {
        serde_json::from_str::<Value>(self.stdout.trim()).ok()?["code"].as_u64()
    }

    fn describe(&self) -> String {
        let v: Value = serde_json::from_str(self.stdout.trim()).unwrap_or(Value::Null);
        match v["code"].as_u64() {
            Some(code) => format!(
                "CNI error {code}: {} {}",
                v["msg"].as_str().unwrap_or(""),
                v["details"].as_str().unwrap_or("")
            ),
            None => format!("exit {}: {} {}", self.code, self.stdout.trim(), self.stderr.trim()),
        }
    }
}

/// The runtime helper in the node namespace. One request at a time: give each worker thread
/// its own.
pub struct Runtime {
    // Dropped first: closing its stdin ends the helper's loop.
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
    _proc: Proc,
}

impl Runtime {
    pub fn spawn(node: &Netns) -> anyhow::Result<Runtime> {
        let exe = topology::helper_exe()?;
        let mut child = node
            .command(exe)
            .args(["bench-net", "runtime"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting the runtime helper")?;
        let stdin = child.stdin.take().context("helper stdin")?;
        let stdout = child.stdout.take().context("helper stdout")?;
        Ok(Runtime { io: Mutex::new((stdin, BufReader::new(stdout))), _proc: Proc(child) })
    }

    pub fn exec(&self, program: &Path, env: &[(&str, String)], stdin: &str) -> anyhow::Result<ExecOut> {
        self.exec_killed(program, env, stdin, None)
    }

    /// [`Runtime::exec`], the program killed with SIGKILL `kill_after_ms` after its start when
    /// it still runs then (a runtime that gave up on it, a node under memory pressure).
    pub fn exec_killed(
        &self,
        program: &Path,
        env: &[(&str, String)],
        stdin: &str,
        kill_after_ms: Option<u64>,
    ) -> anyhow::Result<ExecOut> {
        let env: Map<String, Value> = env.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
        let request = json!({"program": program, "env": env, "stdin": stdin, "kill_after_ms": kill_after_ms});
        let mut io = self.io.lock().map_err(|_| anyhow!("runtime helper lock poisoned"))?;
        writeln!(io.0, "{request}").context("writing to the runtime helper")?;
        io.0.flush()?;
        let mut line = String::new();
        if io.1.read_line(&mut line).context("reading from the runtime helper")? == 0 {
            bail!("the runtime helper exited");
        }
        let v: Value = serde_json::from_str(&line).context("runtime helper answer")?;
        if let Some(e) = v["error"].as_str() {
            bail!("running {}: {e}", program.display());
        }
        Ok(ExecOut {
            code: v["code"].as_i64().and_then(|c| i32::try_from(c).ok()).unwrap_or(-1),
            stdout: v["stdout"].as_str().unwrap_or_default().to_owned(),
            stderr: v["stderr"].as_str().unwrap_or_default().to_owned(),
            elapsed_ms: v["elapsed_ms"].as_f64().unwrap_or(f64::NAN),
        })
    }
}

/// The helper's side: one JSON request per line on stdin, one answer per line on stdout.
pub fn serve_runtime() -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line?;
        let answer = match run_request(&line) {
            Ok(out) => json!({"code": out.code, "stdout": out.stdout, "stderr": out.stderr,
                              "elapsed_ms": out.elapsed_ms}),
            Err(e) => json!({"error": format!("{e:#}")}),
        };
        writeln!(stdout, "{answer}")?;
        stdout.flush()?;
    }
    Ok(())
}

fn run_request(line: &str) -> anyhow::Result<ExecOut> {
    let req: Value = serde_json::from_str(line).context("request")?;
    let program = req["program"].as_str().context("request without program")?;
    let mut cmd = std::process::Command::new(program);
    let started = Instant::now();
    // The runtime's own environment (PATH: portmap runs iptables) plus the CNI variables.
    for (k, v) in req["env"].as_object().into_iter().flatten() {
        cmd.env(k, v.as_str().unwrap_or_default());
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {program}"))?;
    // Configs are far below a pipe's capacity, so writing before reading cannot block.
    let stdin = req["stdin"].as_str().unwrap_or_default().as_bytes();
    match child.stdin.take().context("stdin")?.write_all(stdin) {
        // A program may exit without reading its stdin (as a trivial binary does).
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        written => written?,
    }
    if let Some(ms) = req["kill_after_ms"].as_u64() {
        // Outputs are far below a pipe's capacity, so the child cannot block on them meanwhile.
        let deadline = started + std::time::Duration::from_millis(ms);
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                // It may exit between the check and the kill; either way it is gone after wait.
                let _ = child.kill();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let out = child.wait_with_output()?;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(ExecOut {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed_ms,
    })
}

/// One CNI invocation's variables.
pub struct Call<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: &'a str,
    pub ifname: &'a str,
    pub args: &'a str,
}

impl Call<'_> {
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", self.command.to_owned()),
            ("CNI_CONTAINERID", self.container_id.to_owned()),
            ("CNI_NETNS", self.netns.to_owned()),
            ("CNI_IFNAME", self.ifname.to_owned()),
            ("CNI_ARGS", self.args.to_owned()),
            ("CNI_PATH", PLUGIN_DIR.to_owned()),
        ]
    }
}

/// A CNI configlist (a single-plugin config is a list of one).
#[derive(Debug, Clone)]
pub struct ConfList {
    pub name: String,
    pub cni_version: String,
    pub plugins: Vec<Value>,
}

impl ConfList {
    pub fn parse(v: &Value) -> anyhow::Result<ConfList> {
        let name = v["name"].as_str().context("CNI config without \"name\"")?.to_owned();
        let cni_version = v["cniVersion"].as_str().context("CNI config without \"cniVersion\"")?.to_owned();
        let plugins = match v.get("plugins") {
            Some(Value::Array(p)) if !p.is_empty() => p.clone(),
            Some(_) => bail!("\"plugins\" of {name} must be a non-empty list"),
            None => vec![v.clone()],
        };
        if plugins.iter().any(|p| p["type"].as_str().is_none_or(|t| t.is_empty() || t.contains('/'))) {
            bail!("every plugin of {name} needs a plain \"type\"");
        }
        Ok(ConfList { name, cni_version, plugins })
    }

    /// One plugin's stdin, as libcni builds it.
    fn plugin_conf(&self, plugin: &Value, prev: Option<&Value>, runtime: &Map<String, Value>) -> Value {
        let mut c = plugin.clone();
        c["name"] = json!(self.name);
        c["cniVersion"] = json!(self.cni_version);
        if let Some(p) = prev {
            c["prevResult"] = p.clone();
        }
        let mut rc = Map::new();
        for (cap, on) in plugin["capabilities"].as_object().into_iter().flatten() {
            if on == &json!(true) {
                if let Some(v) = runtime.get(cap) {
                    rc.insert(cap.clone(), v.clone());
                }
            }
        }
        if !rc.is_empty() {
            c["runtimeConfig"] = Value::Object(rc);
        }
        c
    }

    /// ADD of every plugin in order; each exec's time goes to `timings`, also when it failed.
    pub fn add(
        &self,
        rt: &Runtime,
        call: &Call,
        runtime: &Map<String, Value>,
        timings: &mut Vec<PluginTime>,
    ) -> anyhow::Result<Value> {
        let mut prev: Option<Value> = None;
        for p in &self.plugins {
            let conf = self.plugin_conf(p, prev.as_ref(), runtime);
            let (out, ms) = exec_plugin(rt, &conf, call);
            timings.push(PluginTime {
                ifname: call.ifname.to_owned(),
                plugin: p["type"].as_str().unwrap_or_default().to_owned(),
                ms,
            });
            prev = Some(out?.context("ADD printed no result")?);
        }
        prev.context("empty plugin list")
    }

    pub fn del(
        &self,
        rt: &Runtime,
        call: &Call,
        runtime: &Map<String, Value>,
        prev: Option<&Value>,
    ) -> anyhow::Result<()> {
        for p in self.plugins.iter().rev() {
            exec_plugin(rt, &self.plugin_conf(p, prev, runtime), call).0?;
        }
        Ok(())
    }
}

/// One plugin exec of an ADD and how long it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginTime {
    pub ifname: String,
    pub plugin: String,
    /// Spawn to exit, NaN when the helper could not run it.
    pub ms: f64,
}

/// Execs one plugin: its parsed result for ADD, and its time (spawn to exit, NaN when it
/// could not be run).
fn exec_plugin(rt: &Runtime, conf: &Value, call: &Call) -> (anyhow::Result<Option<Value>>, f64) {
    let ty = conf["type"].as_str().unwrap_or_default();
    match rt.exec(&Path::new(PLUGIN_DIR).join(ty), &call.env(), &conf.to_string()) {
        Ok(out) => {
            let ms = out.elapsed_ms;
            (plugin_result(ty, call, &out), ms)
        }
        Err(e) => (Err(e), f64::NAN),
    }
}

fn plugin_result(ty: &str, call: &Call, out: &ExecOut) -> anyhow::Result<Option<Value>> {
    if out.code != 0 {
        bail!("{ty} {} on {}: {}", call.command, call.ifname, out.describe());
    }
    if call.command != "ADD" {
        return Ok(None);
    }
    let result = serde_json::from_str(out.stdout.trim())
        .with_context(|| format!("{ty} ADD printed no JSON result: {}", out.stdout.trim()))?;
    Ok(Some(result))
}

/// A network a pod selects, with its per-attachment requests (`portMappings`, `bandwidth`),
/// which become the plugins' `runtimeConfig`.
#[derive(Debug, Clone)]
pub struct Selection {
    pub network: String,
    pub requests: Map<String, Value>,
}

impl Selection {
    pub fn plain(network: &str) -> Selection {
        Selection { network: network.to_owned(), requests: Map::new() }
    }

    pub fn with(network: &str, key: &str, value: Value) -> Selection {
        let mut s = Selection::plain(network);
        s.requests.insert(key.to_owned(), value);
        s
    }
}

/// A pod: its namespace (deleted with it) and the networks it selects.
pub struct Pod {
    pub name: String,
    pub cid: String,
    pub netns: Netns,
    pub selections: Vec<Selection>,
}

impl Pod {
    pub fn new(name: &str, selections: Vec<Selection>) -> anyhow::Result<Pod> {
        Ok(Pod {
            name: name.to_owned(),
            cid: format!("cid-{name}"),
            netns: topology::netns("pod")?,
            selections,
        })
    }

    fn cni_args(&self) -> String {
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={}",
            self.name, self.cid
        )
    }

    /// The pod's address on its `k`-th secondary network (`net<k>`).
    pub fn secondary_ip(&self, k: usize) -> anyhow::Result<String> {
        topology::ipv4(&self.netns, &format!("net{k}"))
    }
}

/// One side's way of attaching and detaching pods.
pub trait Driver: Sync {
    /// Work before the clock starts (manifests a catalog would already hold).
    fn prepare(&self, _pod: &Pod) -> anyhow::Result<()> {
        Ok(())
    }
    fn add(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()>;
    fn del(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()>;
    /// Work after the clock stopped.
    fn finish(&self, _pod: &Pod) {}
    /// What stays on disk after every pod was deleted: IPAM allocations, state records.
    fn leftover_files(&self) -> Vec<String>;
}

pub struct PlexusDriver<'a> {
    pub agent: &'a Agent,
    pub shim: PathBuf,
}

impl PlexusDriver<'_> {
    pub fn shim(&self, rt: &Runtime, call: &Call) -> anyhow::Result<ExecOut> {
        rt.exec(&self.shim, &call.env(), &self.config())
    }

    /// The plexus CNI config the runtime hands the shim on stdin.
    pub fn config(&self) -> String {
        json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus", "socket": self.agent.socket})
            .to_string()
    }

    fn pod_call(&self, rt: &Runtime, command: &str, pod: &Pod) -> anyhow::Result<()> {
        let (netns, args) = (pod.netns.path_str(), pod.cni_args());
        let call = Call { command, container_id: &pod.cid, netns: &netns, ifname: "eth0", args: &args };
        let out = self.shim(rt, &call)?;
        if out.code != 0 {
            bail!("plexus {command} of {}: {}", pod.name, out.describe());
        }
        Ok(())
    }

    pub fn add_network(&self, config: &Value) -> anyhow::Result<()> {
        let name = config["name"].as_str().context("network without name")?;
        self.agent.write_nad(name, config)
    }
}

impl Driver for PlexusDriver<'_> {
    fn prepare(&self, pod: &Pod) -> anyhow::Result<()> {
        let networks: Vec<Value> = pod
            .selections
            .iter()
            .map(|s| {
                let mut sel = s.requests.clone();
                sel.insert("name".into(), json!(s.network));
                Value::Object(sel)
            })
            .collect();
        self.agent.write_pod(&pod.name, &Value::Array(networks))
    }

    fn add(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()> {
        self.pod_call(rt, "ADD", pod)
    }

    fn del(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()> {
        self.pod_call(rt, "DEL", pod)
    }

    fn finish(&self, pod: &Pod) {
        self.agent.remove_pod(&pod.name);
    }

    fn leftover_files(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.agent.state_files().into_iter().map(|f| format!("state record {f}")).collect();
        out.extend(host_local_allocations(&self.agent.ipam_dir()).into_iter().map(|a| format!("IPAM {a}")));
        out
    }
}

/// One attachment of a pod: interface name, configlist, per-attachment requests.
type Attachment<'a> = (String, &'a ConfList, Map<String, Value>);

/// The reference plugins through the libcni-like runner.
pub struct ReferenceDriver {
    ipam_dir: PathBuf,
    default: ConfList,
    networks: BTreeMap<String, ConfList>,
    /// Each pod's ADD results, per attachment (libcni's result cache).
    results: Mutex<HashMap<String, Vec<Value>>>,
    /// Each pod's plugin execs of its ADD, in order (until [`ReferenceDriver::take_add_timings`]
    /// or its DEL).
    add_timings: Mutex<HashMap<String, Vec<PluginTime>>>,
}

impl ReferenceDriver {
    /// `side` picks the address ranges; the default network is bridge + host-local.
    pub fn new(side: Side, ipam_dir: PathBuf) -> anyhow::Result<ReferenceDriver> {
        let default = ConfList::parse(&topology::default_network(side, &ipam_dir))?;
        Ok(ReferenceDriver {
            ipam_dir,
            default,
            networks: BTreeMap::new(),
            results: Mutex::default(),
            add_timings: Mutex::default(),
        })
    }

    /// The plugin execs of the pod's last ADD, each with its time.
    pub fn take_add_timings(&self, pod: &Pod) -> Vec<PluginTime> {
        self.add_timings.lock().ok().and_then(|mut t| t.remove(&pod.cid)).unwrap_or_default()
    }

    pub fn add_network(&mut self, config: &Value) -> anyhow::Result<()> {
        let list = ConfList::parse(config)?;
        self.networks.insert(list.name.clone(), list);
        Ok(())
    }

    /// (ifname, configlist, requests) of each attachment, in ADD order.
    fn attachments<'a>(&'a self, pod: &'a Pod) -> anyhow::Result<Vec<Attachment<'a>>> {
        let mut out = vec![("eth0".to_owned(), &self.default, Map::new())];
        for (i, s) in pod.selections.iter().enumerate() {
            let list =
                self.networks.get(&s.network).with_context(|| format!("unknown network {}", s.network))?;
            out.push((format!("net{}", i + 1), list, s.requests.clone()));
        }
        Ok(out)
    }
}

impl Driver for ReferenceDriver {
    fn add(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()> {
        let (netns, args) = (pod.netns.path_str(), pod.cni_args());
        let attachments = self.attachments(pod)?;
        let mut results: Vec<Value> = Vec::new();
        let mut timings = Vec::new();
        for (ifname, list, requests) in &attachments {
            let call = Call { command: "ADD", container_id: &pod.cid, netns: &netns, ifname, args: &args };
            let added = list.add(rt, &call, requests, &mut timings);
            if let Ok(mut t) = self.add_timings.lock() {
                t.insert(pod.cid.clone(), timings.clone());
            }
            match added {
                Ok(r) => results.push(r),
                Err(e) => {
                    // A runtime undoes a half-attached pod before reporting the failure.
                    for ((ifname, list, requests), r) in attachments.iter().zip(&results).rev() {
                        let call = Call {
                            command: "DEL",
                            container_id: &pod.cid,
                            netns: &netns,
                            ifname,
                            args: &args,
                        };
                        let _ = list.del(rt, &call, requests, Some(r));
                    }
                    return Err(e.context(format!("reference ADD of {}", pod.name)));
                }
            }
        }
        self.results.lock().map_err(|_| anyhow!("result cache poisoned"))?.insert(pod.cid.clone(), results);
        Ok(())
    }

    fn del(&self, rt: &Runtime, pod: &Pod) -> anyhow::Result<()> {
        let (netns, args) = (pod.netns.path_str(), pod.cni_args());
        let cached = self.results.lock().map_err(|_| anyhow!("result cache poisoned"))?.remove(&pod.cid);
        if let Ok(mut t) = self.add_timings.lock() {
            t.remove(&pod.cid);
        }
        let cached = cached.unwrap_or_default();
        let mut errors = Vec::new();
        for (i, (ifname, list, requests)) in self.attachments(pod)?.iter().enumerate().rev() {
            let call = Call { command: "DEL", container_id: &pod.cid, netns: &netns, ifname, args: &args };
            if let Err(e) = list.del(rt, &call, requests, cached.get(i)) {
                errors.push(format!("{e:#}"));
            }
        }
        if !errors.is_empty() {
            bail!("reference DEL of {}: {}", pod.name, errors.join("; "));
        }
        Ok(())
    }

    fn leftover_files(&self) -> Vec<String> {
        host_local_allocations(&self.ipam_dir).into_iter().map(|a| format!("IPAM {a}")).collect()
    }
}

/// Whether the agent runs a plexus plugin type (`plexus-portmap`, `plexus-bandwidth`): one
/// pod selecting a network that uses it is attached and deleted. `Err((label, note))` says
/// why not: the agent has no such type yet, or it failed.
pub fn probe(
    driver: &PlexusDriver,
    rt: &Runtime,
    plugin: &str,
    pod: &Pod,
) -> Result<(), (&'static str, String)> {
    let outcome = driver.prepare(pod).and_then(|()| driver.add(rt, pod));
    driver.finish(pod);
    // Whatever part of the ADD happened is undone; a failing DEL changes nothing to the answer.
    let _ = driver.del(rt, pod);
    match outcome {
        Ok(()) => Ok(()),
        Err(e) => {
            let msg = format!("{e:#}");
            if msg.contains("was not found") || msg.contains("not found in") {
                Err((super::report::NOT_BUILT, format!("the agent has no {plugin} plugin type yet ({msg})")))
            } else {
                Err(("unavailable", format!("{plugin} failed its probe: {msg}")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_configs_are_built_like_libcni() {
        let list = ConfList::parse(&json!({
            "cniVersion": "1.0.0", "name": "net",
            "plugins": [
                {"type": "bridge", "bridge": "b0"},
                {"type": "portmap", "capabilities": {"portMappings": true, "bandwidth": false}},
            ]
        }))
        .expect("valid list");
        let runtime: Map<String, Value> =
            json!({"portMappings": [{"hostPort": 1}], "bandwidth": {"ingressRate": 1}})
                .as_object()
                .cloned()
                .unwrap_or_default();
        let first = list.plugin_conf(&list.plugins[0], None, &runtime);
        assert_eq!(first, json!({"type": "bridge", "bridge": "b0", "name": "net", "cniVersion": "1.0.0"}));
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let second = list.plugin_conf(&list.plugins[1], Some(&prev), &runtime);
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 1}]}),
            "declared capabilities only"
        );
        assert_eq!(second["name"], "net");
    }

    #[test]
    fn single_configs_are_lists_of_one_and_bad_types_are_refused() {
        let single =
            ConfList::parse(&json!({"cniVersion": "0.4.0", "name": "n", "type": "macvlan"})).expect("conf");
        assert_eq!(single.plugins.len(), 1);
        assert!(
            ConfList::parse(&json!({"cniVersion": "1.0.0", "name": "n", "type": "../../bin/sh"})).is_err()
        );
        assert!(ConfList::parse(&json!({"cniVersion": "1.0.0", "name": "n", "plugins": []})).is_err());
        assert!(ConfList::parse(&json!({"name": "n", "type": "x"})).is_err());
    }
}
