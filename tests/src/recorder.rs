//! A recording CNI plugin for observing what delegates receive.
//!
//! Chain it after a real plugin (`bridge`, `macvlan`, ...) in a configlist: the real plugin
//! does the attachment, the recorder logs its whole stdin and its `CNI_*` environment and
//! passes the previous result on unchanged, so the runtime sees the real plugin's result.
//! It is an observer, not a stand-in for the thing under test.
//!
//! Behaviour is driven by keys of its own plugin object in the config:
//! - `"tag"`: a label to tell several recorders apart in the log;
//! - `"sleepMs"`: sleep that long before answering (to observe overlap);
//! - `"failOn"`: a list of CNI commands (`["DEL"]`) to fail with a CNI error;
//! - `"failFlag"`: a path; with `failOn`, fail only while this file exists;
//! - `"failCode"`: the CNI error code to fail with (default 123).
//!
//! Every invocation, failed or not, writes one JSON file into the log directory, so
//! concurrent invocations never interleave their records.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::REFERENCE_PLUGINS;

/// The plugin `type` the recorder is installed as.
pub const RECORDER_TYPE: &str = "recorder";

/// One invocation of the recorder.
#[derive(Debug, Clone)]
pub struct Call {
    /// The `"tag"` of the plugin object ("" without one).
    pub tag: String,
    /// CNI_COMMAND.
    pub command: String,
    pub container_id: String,
    pub ifname: String,
    pub netns: String,
    /// CNI_ARGS.
    pub args: String,
    /// Wall-clock nanoseconds when the invocation started and ended.
    pub start_ns: u128,
    pub end_ns: u128,
    /// Whether it answered with an error (as `failOn` told it to).
    pub failed: bool,
    /// The exact configuration it read on stdin.
    pub config: Value,
}

impl Call {
    /// True when the two invocations ran at the same time for a while.
    pub fn overlaps(&self, other: &Call) -> bool {
        self.start_ns < other.end_ns && other.start_ns < self.end_ns
    }
}

/// A directory holding the recorder plugin binary, plus the directory it logs to.
pub struct Recorder {
    dir: TempDir,
}

impl Recorder {
    pub fn new() -> Self {
        let dir = tempfile::Builder::new().prefix("plexus-recorder-").tempdir().expect("recorder tempdir");
        let rec = Recorder { dir };
        std::fs::create_dir_all(rec.log_dir()).expect("recorder log dir");
        std::fs::create_dir_all(rec.bin_dir()).expect("recorder bin dir");
        let script = rec.bin_dir().join(RECORDER_TYPE);
        std::fs::write(&script, script_text(&rec.log_dir())).expect("writing recorder plugin");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod recorder");
        rec
    }

    /// The directory to add to the agent's plugin path.
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    /// The agent option that finds both the reference plugins and the recorder; push it
    /// onto `World::agent_args` before starting the agent.
    pub fn agent_arg(&self) -> String {
        format!("--cni-bin-dir={}:{}", REFERENCE_PLUGINS, self.bin_dir().display())
    }

    /// A plugin object for a configlist: `{"type": "recorder", "tag": tag}`.
    pub fn plugin(tag: &str) -> Value {
        json!({"type": RECORDER_TYPE, "tag": tag})
    }

    /// [`Recorder::plugin`] with more keys (`capabilities`, `sleepMs`, `failOn`, ...).
    pub fn plugin_with(tag: &str, extra: Value) -> Value {
        let mut p = Self::plugin(tag);
        if let (Some(p), Value::Object(extra)) = (p.as_object_mut(), extra) {
            p.extend(extra);
        }
        p
    }

    /// Every invocation so far, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        let mut calls: Vec<Call> = std::fs::read_dir(self.log_dir())
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .filter_map(|text| parse_call(&text))
                    .collect()
            })
            .unwrap_or_default();
        calls.sort_by_key(|c| (c.start_ns, c.end_ns));
        calls
    }

    /// The invocations of one tag, oldest first.
    pub fn calls_of(&self, tag: &str) -> Vec<Call> {
        self.calls().into_iter().filter(|c| c.tag == tag).collect()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

fn parse_call(text: &str) -> Option<Call> {
    let v: Value = serde_json::from_str(text).ok()?;
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    Some(Call {
        tag: v["config"]["tag"].as_str().unwrap_or_default().to_owned(),
        command: s("command"),
        container_id: s("containerId"),
        ifname: s("ifname"),
        netns: s("netns"),
        args: s("args"),
        start_ns: s("startNs").parse().ok()?,
        end_ns: s("endNs").parse().ok()?,
        failed: v["failed"].as_bool().unwrap_or(false),
        config: v["config"].clone(),
    })
}

/// The plugin: POSIX sh and jq. Timestamps travel as strings because jq's numbers are
/// doubles, which cannot hold nanoseconds since the epoch exactly.
fn script_text(log_dir: &Path) -> String {
    format!(
        r#"#!/bin/sh
# plexus test recorder: logs stdin and CNI_* and passes prevResult on.
LOG='{log}'
conf=$(cat)
start=$(date +%s%N)
key() {{ printf '%s' "$conf" | jq -r "$1"; }}
ms=$(key '.sleepMs // 0')
if [ "$ms" -gt 0 ]; then sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"; fi
failing=false
fail=$(printf '%s' "$conf" | jq -r --arg c "${{CNI_COMMAND-}}" '(.failOn // []) | any(. == $c)')
if [ "$fail" = true ]; then
  flag=$(key '.failFlag // ""')
  if [ -z "$flag" ] || [ -e "$flag" ]; then failing=true; fi
fi
end=$(date +%s%N)
printf '%s' "$conf" | jq -c \
  --arg command "${{CNI_COMMAND-}}" --arg cid "${{CNI_CONTAINERID-}}" --arg ifname "${{CNI_IFNAME-}}" \
  --arg netns "${{CNI_NETNS-}}" --arg args "${{CNI_ARGS-}}" --arg t0 "$start" --arg t1 "$end" \
  --argjson failed "$failing" \
  '{{command: $command, containerId: $cid, ifname: $ifname, netns: $netns, args: $args,
    startNs: $t0, endNs: $t1, failed: $failed, config: .}}' > "$LOG/.$start-$$.tmp"
mv "$LOG/.$start-$$.tmp" "$LOG/$start-$$.json"
if [ "$failing" = true ]; then
  printf '%s' "$conf" | jq -c --arg cmd "${{CNI_COMMAND-}}" \
    '{{cniVersion: .cniVersion, code: (.failCode // 123),
      msg: ("recorder " + (.tag // "") + " told to fail " + $cmd)}}'
  exit 1
fi
case "${{CNI_COMMAND-}}" in
  ADD) printf '%s' "$conf" | jq -c 'if .prevResult then .prevResult else {{cniVersion: .cniVersion}} end' ;;
  VERSION) echo '{{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}}' ;;
esac
exit 0
"#,
        log = log_dir.display()
    )
}
