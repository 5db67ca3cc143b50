//! Project automation: `cargo xtask <task>`.

mod bench;
mod demo;
mod fuzz;
mod setup;
mod stress;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "plexus project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building and testing plexus needs on this machine (root, Debian).
    Setup,
    /// The standalone demo: pods as network namespaces, networks from deploy/examples.
    Demo,
    /// Everything CI checks: format, lints, build, and every test (root).
    Test,
    /// plexus against the reference CNI plugins, side by side (root): cni, portmap,
    /// bandwidth, scale or all. Results in target/bench/<timestamp>/.
    Bench(bench::BenchArgs),
    /// A fault storm: randomized ADD/DEL/CHECK/GC/STATUS of pods through the real shim and
    /// agent while the agent, the shim, plugins, namespaces and the state directory fail at
    /// random points; then nothing may be left behind (root).
    Stress(stress::StressArgs),
    /// Every cargo-fuzz target of fuzz/ for a bounded time, from its committed corpus
    /// (cargo-fuzz and the nightly toolchain are installed when missing).
    Fuzz(fuzz::FuzzArgs),
    /// The bench's helpers inside network namespaces (servers, clients, runtime).
    #[command(hide = true)]
    BenchNet {
        #[command(subcommand)]
        command: bench::traffic::NetCommand,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Demo => {
            setup::run()?;
            util::cargo(&["build", "--quiet", "-p", "plexus-agent", "-p", "plexus-cni-shim"])?;
            demo::run()
        }
        Task::Test => {
            setup::run()?;
            // Every member, the fuzz targets included: a change that breaks them fails here
            // rather than in the fuzz step after the tests.
            util::cargo(&["fmt", "--all", "--check"])?;
            util::cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
            // The integration tests run the built binaries, so they are built first. The fuzz
            // targets are left to `cargo xtask fuzz` (instrumented), and out of the test build
            // too: they have no tests, and libfuzzer-sys turns on cc's `parallel` feature, which
            // would rebuild everything with a C part (ring, and on up to kube and the agent).
            util::cargo(&["build", "--workspace", "--exclude", "plexus-fuzz"])?;
            util::cargo(&["test", "--workspace", "--exclude", "plexus-fuzz"])
        }
        Task::Bench(args) => bench::run(&args),
        Task::Stress(args) => stress::run(&args),
        Task::Fuzz(args) => {
            setup::run()?;
            fuzz::run(&args)
        }
        Task::BenchNet { command } => bench::traffic::run(&command),
    }
}
