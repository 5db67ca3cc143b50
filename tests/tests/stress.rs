//! The fault storm and the burst (`cargo xtask stress`), bounded for CI, on the debug
//! binaries next to this test. Each fails on any broken answer or leftover and prints the
//! seed that replays it (`cargo xtask stress --seed S`). `PLEXUS_STRESS_SEED` pins the seed.
//!
//! Needs the workspace built (`cargo build --workspace`, which `cargo xtask test` does first):
//! it runs target/debug/xtask.

use std::path::Path;
use std::process::Command;

use plexus_testkit::{files_in, owner};
use plexus_tests::world::bin;

/// Operations of the bounded storm.
const CI_OPS: &str = "300";
/// Concurrent ADDs of the burst (the 500).
const CI_BURST: &str = "500";

fn xtask_stress(args: &[&str]) -> (bool, String, u32) {
    let bin_dir = bin("plexus-agent").parent().expect("binary directory").to_owned();
    assert!(bin_dir.join("plexus").exists(), "the plexus shim is missing: run `cargo build --workspace`");
    let child = Command::new(bin("xtask"))
        .arg("stress")
        .args(args)
        .arg("--bin-dir")
        .arg(&bin_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running xtask stress");
    let pid = child.id();
    let out = child.wait_with_output().expect("waiting for xtask stress");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    (out.status.success(), stdout, pid)
}

/// Nothing of the run is left: its namespaces (named after its pid) and mounts.
fn assert_run_removed_its_world(pid: u32) {
    let netns: Vec<String> =
        files_in(Path::new("/run/netns")).into_iter().filter(|n| owner(n) == Some(pid)).collect();
    assert_eq!(netns, Vec::<String>::new(), "namespaces left behind");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    assert!(!mounts.contains(&format!("pxbench-{pid}-")), "mounts left behind");
}

#[test]
fn kernel_bounded_fault_storm_leaves_nothing_behind() {
    let mut args = vec!["--ops", CI_OPS];
    let seed = std::env::var("PLEXUS_STRESS_SEED").unwrap_or_default();
    if !seed.is_empty() {
        args.extend(["--seed", seed.as_str()]);
    }
    let (ok, stdout, pid) = xtask_stress(&args);
    let seed_line = stdout.lines().next().unwrap_or("(no seed printed)");
    assert!(ok, "the storm failed; {seed_line}");
    assert!(stdout.contains("broken answers: 0") && stdout.contains("leftovers: 0"), "{seed_line}");
    // The storm did inject faults (a storm without them proves nothing).
    let injected: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("faults injected: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(injected >= 30, "only {injected} faults in {CI_OPS} operations; {seed_line}");
    assert_run_removed_its_world(pid);
}

#[test]
fn kernel_burst_with_an_agent_kill_loses_no_pod_and_leaks_nothing() {
    let (ok, stdout, pid) = xtask_stress(&["--burst", CI_BURST]);
    assert!(ok, "the burst failed");
    assert!(stdout.contains("never did") && stdout.contains(", 0 never did"), "a pod never came up");
    assert!(stdout.contains("leftovers: 0"));
    assert_run_removed_its_world(pid);
}
