//! What the node must not hold once every pod is gone: host-side links, attachment records,
//! IPAM allocations, port mapping entries and flows, bandwidth limits, stray files in the state
//! directory, plugin processes still running. One line per leftover.

use std::path::Path;
use std::process::Command;

use anyhow::Context;
use plexus_testkit::{files_in, host_local_allocations};
use serde_json::Value;

use super::world::Tree;
use crate::bench::topology::{Agent, Lab};
use crate::bench::Bins;
use crate::util::output;

/// State subdirectories whose presence (empty) is the agent's normal layout.
const STATE_LAYOUT: &[&str] = &["attachments", "portmap", "bandwidth", "pods", "sriov", "ipam"];

pub fn leftovers(lab: &Lab, tree: &Tree, agent: &Agent, bins: &Bins) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    out.extend(lab.node_veths().into_iter().map(|l| format!("link {l} in the node")));
    for dir in [tree.ipam(), tree.slow_ipam()] {
        // With its owner: an empty file is an address nobody's DEL can release.
        out.extend(host_local_allocations(&dir).into_iter().map(|a| {
            let owner = std::fs::read_to_string(dir.join(&a)).unwrap_or_default();
            format!("IPAM allocation {a} (owner {owner:?})")
        }));
    }
    out.extend(state_files(&tree.state()).into_iter().map(|f| format!("state file {f}")));
    let pins = tree.root.join("bpffs");
    // (what, subcommand, whether it reads the records)
    for (what, args, records) in [
        ("port mapping", &["portmap", "list", "--json"][..], true),
        ("flow", &["portmap", "flows", "--json"][..], false),
        ("bandwidth limit", &["bandwidth", "list", "--json"][..], true),
    ] {
        let mut cmd = Command::new(&bins.agent);
        cmd.args(args).arg("--bpf-pin-dir").arg(&pins);
        if records {
            cmd.arg("--state-dir").arg(tree.state());
        }
        let text = output(&mut cmd).with_context(|| format!("plexus-agent {}", args.join(" ")))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("plexus-agent {}", args.join(" ")))?;
        for entry in entries(&v) {
            out.push(format!("{what} {entry}"));
        }
    }
    out.extend(
        plugin_processes(&agent.root).into_iter().map(|p| format!("plugin process still running: {p}")),
    );
    Ok(out)
}

/// Entries of a `--json` listing: a list, or an object holding one.
fn entries(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(Value::to_string).collect(),
        Value::Object(m) => m.values().filter(|x| x.is_array()).flat_map(entries).collect(),
        _ => Vec::new(),
    }
}

/// Every file under the state directory (paths relative to it), but the empty layout.
fn state_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        for name in files_in(&d) {
            let path = d.join(&name);
            let rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            if path.is_dir() {
                if !STATE_LAYOUT.contains(&rel.as_str()) && files_in(&path).is_empty() {
                    out.push(format!("{rel}/"));
                }
                stack.push((path, rel));
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// CNI plugins still running with this storm's configs (an exec the agent gave up on whose
/// children live on).
fn plugin_processes(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for pid in files_in(Path::new("/proc")).into_iter().filter(|p| p.chars().all(|c| c.is_ascii_digit())) {
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else { continue };
        if !exe.starts_with("/usr/lib/cni") {
            continue;
        }
        // Only ours: its environment names this storm's CNI_NETNS or the config carries
        // the tree's paths; a plugin of another run on this machine is not ours to judge.
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let root_text = root.to_string_lossy();
        let our_pods = format!("pxb-pod-{}-", std::process::id());
        let ours = String::from_utf8_lossy(&environ).contains(&our_pods)
            || String::from_utf8_lossy(&cmdline).contains(root_text.as_ref());
        if ours {
            out.push(format!("{} (pid {pid})", exe.display()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn listing_entries_are_found_in_lists_and_objects() {
        assert_eq!(entries(&json!([])), Vec::<String>::new());
        assert_eq!(entries(&json!([{"a": 1}])).len(), 1);
        assert_eq!(entries(&json!({"mappings": [1, 2], "note": "x"})).len(), 2);
    }

    #[test]
    fn state_files_skip_the_empty_layout() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("attachments")).expect("dir");
        std::fs::create_dir_all(dir.path().join("portmap/x")).expect("dir");
        std::fs::write(dir.path().join("attachments/.c@eth0.json.1.tmp"), "").expect("file");
        assert_eq!(state_files(dir.path()), ["attachments/.c@eth0.json.1.tmp", "portmap/x/"]);
    }
}
