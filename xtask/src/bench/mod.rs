//! `cargo xtask bench`: plexus against the reference CNI plugins, side by side.
//!
//! Everything runs in network namespaces this process creates (a node running the agent, a
//! client host, one namespace per pod) and removes again, also on failure or Ctrl-C. Each
//! figure is measured for up to three sides, alternately within one run so that background
//! load hits them alike:
//!
//! - **plexus**: the real `plexus` shim and `plexus-agent`;
//! - **reference**: the reference CNI plugins, exec'd per configlist exactly as a runtime's
//!   libcni would (see [`runner`]);
//! - **baseline**: what the section compares both against (per section: plexus exec'ing the
//!   reference binaries, or the dataplane without NAT or shaping).
//!
//! Results: a table on stdout, `results.json` (every raw run and a summary per figure) and
//! SVG plots in `target/bench/<timestamp>/`.

mod bandwidth;
mod bins;
mod cni;
mod live_frames;
mod macvlan_sides;
mod phases;
mod plot;
mod portmap;
mod prom;
mod report;
pub mod runner;
mod scale;
mod stats;
pub mod topology;
pub mod traffic;
mod wakeup;
mod xdp;
mod xdp_drops;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::util::{is_root, root};
pub use bins::{binaries, Bins};
use report::Figure;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    Cni,
    Portmap,
    Bandwidth,
    Scale,
    All,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Which section to run.
    #[arg(value_enum, default_value_t = Section::All)]
    pub section: Section,
    /// Smoke-check sizes: fewer repeats, fewer pods, short traffic runs (under two minutes).
    #[arg(long)]
    pub quick: bool,
    /// Repeats of each figure (default 5, 2 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// scale: pods created and deleted per side and repeat (default 200, 20 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub pods: Option<u32>,
    /// scale: secondary attachments per pod (default 2).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4))]
    pub attachments: Option<u32>,
    /// scale: pods attached or deleted at once, as a runtime starting many pods does.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: u32,
    /// Use the `plexus` and `plexus-agent` binaries in this directory instead of building
    /// release binaries (e.g. target/debug for a quick smoke check; figures are then not
    /// representative).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Where results go (default target/bench/<UTC timestamp>).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

/// The sides of every figure, in the order they are measured within a repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    Plexus,
    Reference,
    Baseline,
}

impl Side {
    pub const ALL: [Side; 3] = [Side::Plexus, Side::Reference, Side::Baseline];

    pub fn name(self) -> &'static str {
        match self {
            Side::Plexus => "plexus",
            Side::Reference => "reference",
            Side::Baseline => "baseline",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Sizes and durations of one run, derived from the options.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Settings {
    pub quick: bool,
    pub repeat: u32,
    /// cni: pods attached and deleted per side and repeat (their mean is one run).
    pub cni_pods_per_repeat: u32,
    /// cni: CNI calls timed per repeat for the shim round trip.
    pub shim_calls: u32,
    /// cni: pods of 4 attachments alive when the agent's RSS is read.
    pub rss_pods: u32,
    pub scale_pods: u32,
    pub scale_attachments: u32,
    pub parallel: u32,
    /// Seconds of each throughput, request/response and connection-rate run.
    pub traffic_secs: u32,
    /// Seconds of each shaped throughput run.
    pub shaping_secs: u32,
    /// Seconds of pings under saturation.
    pub ping_secs: u32,
}

impl Settings {
    fn from(a: &BenchArgs) -> Settings {
        let q = a.quick;
        Settings {
            quick: q,
            repeat: a.repeat.unwrap_or(if q { 2 } else { 5 }),
            cni_pods_per_repeat: if q { 1 } else { 4 },
            shim_calls: if q { 10 } else { 100 },
            rss_pods: if q { 10 } else { 250 },
            scale_pods: a.pods.unwrap_or(if q { 20 } else { 200 }),
            scale_attachments: a.attachments.unwrap_or(2),
            parallel: a.parallel,
            traffic_secs: if q { 1 } else { 5 },
            shaping_secs: if q { 1 } else { 20 },
            ping_secs: if q { 1 } else { 5 },
        }
    }
}

/// What every section gets: settings, binaries, where results go, and the figures so far.
pub struct Bench {
    pub set: Settings,
    pub bins: Bins,
    pub out: PathBuf,
    pub figures: Vec<Figure>,
    /// Where the agents' ADD and DEL time goes (cni section).
    pub breakdown: phases::Breakdown,
}

impl Bench {
    pub fn progress(&self, section: &str, what: &str) {
        eprintln!("[bench {section}] {what}");
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C or SIGTERM sets a flag the measurement loops check, so they stop between two steps
/// and every guard's destructor removes what it created (the default action would kill the
/// process and leave namespaces, mounts and cgroups behind).
pub fn catch_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Fails once the run was interrupted; called between steps.
pub fn check_interrupt() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(())
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if !is_root() {
        bail!("the bench creates network namespaces, cgroups and bpffs mounts: run it as root");
    }
    let sections: Vec<Section> = match args.section {
        Section::All => vec![Section::Cni, Section::Portmap, Section::Bandwidth, Section::Scale],
        s => vec![s],
    };
    check_tools(&sections)?;
    catch_signals();
    topology::sweep_stale();
    let bins = binaries(args.bin_dir.as_ref())?;
    let started = std::time::SystemTime::now();
    let out = match &args.out_dir {
        Some(d) => d.clone(),
        None => root().join("target/bench").join(stats::utc_stamp(started)),
    };
    std::fs::create_dir_all(out.join("logs")).with_context(|| format!("creating {}", out.display()))?;
    let mut bench =
        Bench { set: Settings::from(args), bins, out, figures: Vec::new(), breakdown: Default::default() };
    let clock = Instant::now();
    let machine = stats::machine();
    bench.progress(
        "start",
        &format!(
            "{} on {} ({} cores, load {}); binaries: {}; results in {}",
            section_names(&sections),
            machine["cpu_model"].as_str().unwrap_or("?"),
            machine["cores"],
            machine["loadavg"],
            bench.bins.origin,
            bench.out.display()
        ),
    );

    let mut errors = Vec::new();
    {
        let lab = topology::Lab::new(&bench.out)?;
        for s in &sections {
            if check_interrupt().is_err() {
                errors.push(format!("section {}: interrupted before it ran", section_name(*s)));
                break;
            }
            let outcome = match s {
                Section::Cni => cni::run(&mut bench, &lab),
                Section::Portmap => portmap::run(&mut bench, &lab),
                Section::Bandwidth => bandwidth::run(&mut bench, &lab),
                Section::Scale => scale::run(&mut bench, &lab),
                Section::All => Ok(()),
            };
            if let Err(e) = outcome {
                let msg = format!("section {}: {e:#}", section_name(*s));
                bench.progress("error", &msg);
                errors.push(msg);
            }
        }
        // The lab (agents, namespaces, mounts, cgroups) is gone before the report is written.
    }

    errors.extend(failed_runs(&bench.figures));
    let results = json!({
        "schema": 1,
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "started_utc": stats::utc_stamp(started),
        "duration_s": clock.elapsed().as_secs_f64(),
        "machine": machine,
        "settings": bench.set,
        "binaries": bench.bins,
        "errors": errors,
        "figures": bench.figures.iter().map(Figure::to_json).collect::<Vec<Value>>(),
        "summary": bench.figures.iter().map(Figure::summary).collect::<Vec<Value>>(),
        "breakdown": bench.breakdown.to_json(),
    });
    let path = bench.out.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let plots = plot::write_all(&bench.figures, &bench.out);
    println!("{}", report::table(&bench.figures));
    if !bench.breakdown.is_empty() {
        println!("\n{}", bench.breakdown.table());
    }
    println!("results: {}", path.display());
    match plots {
        Ok(files) => println!(
            "plots: {}",
            files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
        Err(e) => errors.push(format!("plots: {e:#}")),
    }
    if !errors.is_empty() {
        bail!("the bench finished with errors:\n  {}", errors.join("\n  "));
    }
    Ok(())
}

/// Runs that failed, and pods that scale could not attach or delete: the figures keep what
/// was measured, but the run is not clean, and the exit status says so. One line per
/// section, side and reason.
fn failed_runs(figures: &[Figure]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in figures {
        for side in Side::ALL {
            let d = &f.sides[side.index()];
            let mut first = d.failures.first().cloned();
            if f.section == "scale" && f.metric == "failures" && d.runs.iter().any(|r| r.value > 0.0) {
                first = Some(format!(
                    "pods failed to attach or detach: {}",
                    d.runs.iter().map(|r| r.detail.to_string()).collect::<Vec<_>>().join(" ")
                ));
            }
            if let Some(why) = first {
                let line = format!("{} {}: {why}", f.section, side.name());
                if !out.contains(&line) {
                    out.push(line);
                }
            }
        }
    }
    out
}

fn section_name(s: Section) -> &'static str {
    match s {
        Section::Cni => "cni",
        Section::Portmap => "portmap",
        Section::Bandwidth => "bandwidth",
        Section::Scale => "scale",
        Section::All => "all",
    }
}

fn section_names(s: &[Section]) -> String {
    s.iter().map(|s| section_name(*s)).collect::<Vec<_>>().join(", ")
}

/// The programs the sections run; `cargo xtask setup` installs them all.
fn check_tools(sections: &[Section]) -> anyhow::Result<()> {
    let mut need: Vec<&str> =
        vec!["/usr/sbin/ip", "/usr/lib/cni/bridge", "/usr/lib/cni/macvlan", "/usr/lib/cni/host-local"];
    if sections.contains(&Section::Portmap) {
        need.extend(["/usr/lib/cni/portmap", "/usr/sbin/iptables", "/usr/bin/iperf3"]);
    }
    if sections.contains(&Section::Bandwidth) {
        need.extend(["/usr/lib/cni/bandwidth", "/usr/bin/iperf3", "/usr/bin/ping"]);
    }
    let missing: Vec<&str> = need.into_iter().filter(|p| !Path::new(p).exists()).collect();
    if !missing.is_empty() {
        bail!("missing {}: run `cargo xtask setup` first", missing.join(", "));
    }
    Ok(())
}
