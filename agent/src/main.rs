use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use plexus_agent::catalog::files::FileCatalog;
use plexus_agent::delegate::{Delegator, NativePlugins};
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::ipam::Ipam;
use plexus_agent::native;
use plexus_agent::options::{AgentOptions, Cli, CliCommand};
use plexus_agent::readiness::{runtime_conf_path, Readiness};
use plexus_agent::server;
use plexus_agent::state::StateStore;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting runtime")?;
    match cli.command {
        CliCommand::Run(opts) => runtime.block_on(run(opts)),
    }
}

async fn run(opts: AgentOptions) -> anyhow::Result<()> {
    let catalog = Arc::new(FileCatalog {
        nad_dirs: opts.nad_dirs.clone(),
        pod_dirs: opts.pod_dirs.clone(),
        report_dir: opts.state_dir.join("pods"),
    });
    let mut natives = NativePlugins::default();
    if !opts.no_native {
        let ipam = Ipam { bin_dirs: opts.cni_bin_dirs.clone(), timeout: opts.delegate_timeout() };
        let types = native::register_all(&mut natives, ipam, &opts.state_dir, &opts.exec_plugins);
        tracing::info!(
            "plugin types run natively: {}",
            if types.is_empty() { "none".into() } else { types.join(", ") }
        );
    }
    let engine = Arc::new(Engine::new(
        EngineConfig {
            default_network_dir: opts.default_network_dir.clone(),
            network_conf_dirs: opts.network_conf_dirs.clone(),
            allowed_namespaces: opts.allowed_namespaces.clone(),
            strict_annotations: opts.strict_annotations,
        },
        catalog,
        Delegator { bin_dirs: opts.cni_bin_dirs.clone(), timeout: opts.delegate_timeout(), natives },
        StateStore::new(&opts.state_dir),
    ));
    let listener = server::bind(&opts.socket)?;
    if let Some(dir) = &opts.runtime_conf_dir {
        let readiness = Readiness {
            default_network_dir: opts.default_network_dir.clone(),
            runtime_conf_path: runtime_conf_path(dir, &opts.runtime_conf_name),
            socket: opts.socket.clone(),
            cni_version: opts.runtime_cni_version.clone(),
        };
        tokio::spawn(readiness.watch(Duration::from_secs(1)));
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        r = server::serve(listener, engine, opts.socket.clone()) => r,
        _ = term.recv() => { tracing::info!("SIGTERM: stopping (the CNI config stays: the shim answers try-again until restart)"); Ok(()) }
        _ = tokio::signal::ctrl_c() => { tracing::info!("interrupted: stopping"); Ok(()) }
    }
}
