//! `cargo xtask fuzz`: every cargo-fuzz target of `fuzz/`, each for a bounded time, starting
//! from its committed corpus (`fuzz/corpus/<target>/`). A crash fails the task and prints the
//! input that caused it, ready to become a unit test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::SystemTime;

use anyhow::{bail, Context};

use crate::setup::rustup;
use crate::util::{self, root};

#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Only these targets (default: every target of fuzz/Cargo.toml).
    pub targets: Vec<String>,
}

pub fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    ensure_cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let targets = if args.targets.is_empty() { list_targets()? } else { args.targets.clone() };
    for target in &targets {
        let corpus = fuzz_dir.join("corpus").join(target);
        if !corpus.is_dir() {
            bail!("{target} has no committed corpus: add a few real inputs in {}", corpus.display());
        }
    }
    // One build for all targets, with the flags `run` uses (so `run` does not rebuild).
    util::run(&mut cargo_fuzz(&["build", "--sanitizer", "none", "--dev"]))?;
    // A libFuzzer run is one process on one core: as many targets at a time as there are
    // cores, each still fuzzed for the whole time asked.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let logs = fuzz_dir.join("target").join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut crashed = Vec::new();
    for wave in targets.chunks(cores) {
        let mut running = Vec::new();
        for target in wave {
            eprintln!("fuzzing {target} for {} s", args.seconds);
            running.push(Running::start(target, &fuzz_dir, &logs, args.seconds)?);
        }
        for run in running {
            let target = run.target.clone();
            if !run.finish()? {
                crashed.push(target);
            }
        }
    }
    if !crashed.is_empty() {
        bail!("fuzz targets failed: {} (the inputs are printed above)", crashed.join(", "));
    }
    eprintln!("fuzzed {} targets without a crash", targets.len());
    Ok(())
}

/// One target being fuzzed, its output going to its own log.
struct Running {
    target: String,
    child: Child,
    log: PathBuf,
    artifacts: PathBuf,
    started: SystemTime,
}

impl Running {
    fn start(target: &str, fuzz_dir: &Path, logs: &Path, seconds: u64) -> anyhow::Result<Running> {
        let corpus = fuzz_dir.join("corpus").join(target);
        // New inputs go to a scratch directory, so the committed corpus stays as committed.
        let scratch = fuzz_dir.join("target").join("scratch-corpus").join(target);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let log = logs.join(format!("{target}.log"));
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let started = SystemTime::now();
        let mut cmd = cargo_fuzz(&[
            "run",
            "--sanitizer",
            "none",
            "--dev",
            target,
            &scratch.to_string_lossy(),
            &corpus.to_string_lossy(),
            "--",
            &format!("-max_total_time={seconds}"),
            // An input that takes this long is a hang (or a quadratic parser): a failure too.
            "-timeout=10",
            "-print_final_stats=1",
        ]);
        let child =
            cmd.stdout(out.try_clone()?).stderr(out).spawn().with_context(|| format!("running {cmd:?}"))?;
        let artifacts = fuzz_dir.join("artifacts").join(target);
        Ok(Running { target: target.to_owned(), child, log, artifacts, started })
    }

    /// Waits for the run and prints what its log (whose path stays) says: its final stats, or
    /// its last lines, the crash, and the input that caused it. True when it ran clean.
    fn finish(mut self) -> anyhow::Result<bool> {
        let status =
            self.child.wait().with_context(|| format!("waiting for the fuzzing of {}", self.target))?;
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        eprintln!("--- {} ({}, {}) ---", self.target, status, self.log.display());
        if status.success() {
            for line in lines.iter().filter(|l| l.starts_with("Done ") || l.starts_with("stat::")) {
                eprintln!("{line}");
            }
        } else {
            for line in &lines[lines.len().saturating_sub(60)..] {
                eprintln!("{line}");
            }
            report_crash(&self.target, &self.artifacts, self.started);
        }
        Ok(status.success())
    }
}

/// `cargo fuzz <subcommand>` with the nightly toolchain (cargo-fuzz needs it for the sanitizer
/// flags), run from `fuzz/` so that cargo reads `fuzz/.cargo/config.toml`: its dev mode (debug
/// assertions and overflow checks on) at opt-level 1 for the code the targets run, opt-level 0
/// for the dependencies they only link (the file gives the figures). At opt-level 1 the targets
/// run 65 to 87% as many inputs a second as cargo's release profile, which takes twice as long
/// to build, and at opt-level 0 5 to 9%. `cargo +nightly fuzz run` by hand from the repository
/// root builds the release profile.
fn cargo_fuzz(args: &[&str]) -> Command {
    let fuzz_dir = root().join("fuzz");
    let (subcommand, rest) = args.split_first().map_or(("", &[][..]), |(s, r)| (*s, r));
    let mut cmd = Command::new(rustup());
    cmd.args(["run", "nightly", "cargo", "fuzz", subcommand, "--fuzz-dir"])
        .arg(&fuzz_dir)
        .args(rest)
        .current_dir(&fuzz_dir);
    cmd
}

fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let present = Command::new(rustup())
        .args(["run", "nightly", "cargo", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!("installing cargo-fuzz");
        util::cargo(&["install", "cargo-fuzz", "--locked"])?;
    }
    Ok(())
}

fn list_targets() -> anyhow::Result<Vec<String>> {
    let out = util::output(&mut cargo_fuzz(&["list"]))?;
    let targets: Vec<String> =
        out.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect();
    if targets.is_empty() {
        bail!("cargo fuzz list found no target in fuzz/");
    }
    Ok(targets)
}

/// Prints each input libFuzzer saved for `target` since `since`: where it is, its bytes, and
/// how to replay it.
fn report_crash(target: &str, artifacts: &Path, since: SystemTime) {
    let found: Vec<PathBuf> = std::fs::read_dir(artifacts)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since))
        .map(|e| e.path())
        .collect();
    if found.is_empty() {
        eprintln!("{target} failed without saving an input (a build error? see above)");
    }
    for path in found {
        let bytes = std::fs::read(&path).unwrap_or_default();
        eprintln!("--- {target}: {} ({} bytes) ---", path.display(), bytes.len());
        eprintln!("input: b\"{}\"", bytes.escape_ascii());
        eprintln!("replay: cargo +nightly fuzz run {target} {}", path.display());
    }
}
