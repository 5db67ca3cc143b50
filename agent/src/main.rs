use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use plexus_agent::catalog::api_networks::ApiNetworks;
use plexus_agent::catalog::confdir;
use plexus_agent::catalog::files::FileCatalog;
use plexus_agent::catalog::Catalog;
use plexus_agent::dataplane::bandwidth::{
    config::Limit, list as bandwidth_rows, plugin as bandwidth_plugin, Bandwidth,
};
use plexus_agent::dataplane::capabilities::WithCapabilities;
use plexus_agent::dataplane::portmap::{list as portmap_list_rows, plugin as portmap_plugin, Portmap};
use plexus_agent::dataplane::DataplaneOptions;
use plexus_agent::delegate::native::NativePlugin;
use plexus_agent::delegate::{Delegator, NativePlugins};
use plexus_agent::devices::podresources::PodResources;
use plexus_agent::devices::DeviceSource;
use plexus_agent::engine::ipam_claim::IpamClaims;
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::install::Installed;
use plexus_agent::ipam::claim::registry::ClaimRegistry;
use plexus_agent::ipam::Ipam;
use plexus_agent::kube::dra::DraDevices;
use plexus_agent::kube::ipamclaim::KubeIpamClaims;
use plexus_agent::kube::{build_client, ClientSource, KubeCatalog, KubeCatalogConfig};
use plexus_agent::netapi::store::NetworkStore;
use plexus_agent::options::{
    AgentOptions, BandwidthCommand, BandwidthSetOptions, CatalogSource, Cli, CliCommand, ControllerOptions,
    DoctorOptions, FlowsOptions, ListOptions, PortmapCommand,
};
use plexus_agent::policy::{self, PolicyHandle};
use plexus_agent::readiness::{runtime_conf_path, Readiness};
use plexus_agent::server;
use plexus_agent::server::netapi::client::NetworkCommand;
use plexus_agent::server::netapi::service::NetworkApi;
use plexus_agent::server::netapi::status::Prober;
use plexus_agent::state::StateStore;
use plexus_agent::takeover::MultusCache;
use plexus_agent::{metrics, native};

/// How long an idle thread of tokio's blocking pool stays (tokio's default: 10 s).
const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// The most threads the blocking pool starts (tokio's default: 512): ADDs are bounded by
/// `--max-concurrent-adds` (16), each with a few blocking steps in flight at most.
const MAX_BLOCKING_THREADS: usize = 64;

fn main() -> anyhow::Result<()> {
    // Before any thread starts (docs/architecture.md, "Memory").
    plexus_agent::memory::limit_arenas();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| format!("info,{}", plexus_agent::kube::QUIET_LOG_TARGETS).into()),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal; files and journald get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // The blocking pool's threads (file and netlink work of ADDs and DELs) go soon after a
        // burst instead of after tokio's 10 s: each holds a stack and allocator caches, which
        // otherwise stay with the threads a burst left (docs/architecture.md, "Memory").
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
        .context("starting runtime")?;
    match cli.command {
        CliCommand::Run(opts) => runtime.block_on(run(*opts)),
        CliCommand::Portmap(PortmapCommand::List(o)) => portmap_list(&o),
        CliCommand::Portmap(PortmapCommand::Flows(o)) => portmap_flows(&o),
        CliCommand::Bandwidth(BandwidthCommand::List(o)) => bandwidth_list(&o),
        CliCommand::Bandwidth(BandwidthCommand::Set(o)) => bandwidth_set(&o),
        CliCommand::Doctor(o) => std::process::exit(runtime.block_on(doctor(&o))),
        CliCommand::Controller(o) => runtime.block_on(controller(o)),
        CliCommand::Network(c) => std::process::exit(runtime.block_on(network(&c))),
        CliCommand::InstallShim(o) => {
            match plexus_agent::install::install_shim(&o.from, &o.to, &o.name)? {
                Installed::Written(path) => {
                    tracing::info!(path = %path.display(), "installed the plexus shim")
                }
                Installed::Unchanged(path) => {
                    tracing::info!(path = %path.display(), "the plexus shim is up to date")
                }
            }
            Ok(())
        }
    }
}

/// `plexus-agent network ...`: prints the answer, or the error on stderr; the exit code.
async fn network(command: &NetworkCommand) -> i32 {
    match plexus_agent::server::netapi::client::run(command).await {
        Ok(out) => {
            print!("{out}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// Whether the catalog holds its initial state (always, for local files).
type SyncedCheck = Arc<dyn Fn() -> bool + Send + Sync>;

async fn catalog(
    opts: &AgentOptions,
) -> anyhow::Result<(Arc<dyn Catalog>, SyncedCheck, Option<kube::Client>)> {
    match opts.catalog {
        CatalogSource::Files => {
            let files =
                FileCatalog::new(opts.nad_dirs.clone(), opts.pod_dirs.clone(), opts.state_dir.join("pods"));
            // Indexed before serving, so the first ADD does not read every manifest.
            files.warm_up().await;
            Ok((Arc::new(files), Arc::new(|| true), None))
        }
        CatalogSource::Kube => {
            let node = opts.node_name.clone().filter(|n| !n.is_empty()).context(
                "--catalog kube needs --node-name (or NODE_NAME, from the downward API: spec.nodeName)",
            )?;
            let source = match &opts.kubeconfig {
                Some(path) => ClientSource::Kubeconfig(path.clone()),
                None => ClientSource::InCluster,
            };
            let client = build_client(&source).await?;
            let kube = Arc::new(KubeCatalog::start(client.clone(), KubeCatalogConfig::new(node)));
            let synced = kube.clone();
            Ok((kube, Arc::new(move || synced.is_synced()), Some(client)))
        }
    }
}

/// Where a pod's allocated devices are learnt: kubelet's PodResources API, then, in Kubernetes
/// mode, DRA's objects.
fn device_sources(opts: &AgentOptions, client: Option<kube::Client>) -> Vec<Arc<dyn DeviceSource>> {
    const TIMEOUT: Duration = Duration::from_secs(5);
    let mut sources: Vec<Arc<dyn DeviceSource>> =
        vec![Arc::new(PodResources::new(opts.pod_resources_socket.clone(), TIMEOUT))];
    if let Some(client) = client {
        sources.push(Arc::new(DraDevices::new(client, TIMEOUT)));
    }
    sources
}

/// The network attachment policy: the file of --nad-policy, else the cluster's objects in
/// Kubernetes mode, else none; and whether its source's view is current (the objects' watch,
/// as the catalog's caches; always for a file or none).
fn policy(opts: &AgentOptions, client: Option<kube::Client>) -> anyhow::Result<(PolicyHandle, SyncedCheck)> {
    let host = Arc::new(policy::host::Sysfs::default());
    let always: SyncedCheck = Arc::new(|| true);
    if let Some(path) = &opts.nad_policy {
        let (handle, follow) = policy::file::start(path.clone(), host)?;
        tokio::spawn(follow);
        return Ok((handle, always));
    }
    Ok(match client {
        Some(client) => {
            let (handle, current, watch) = plexus_agent::kube::policy::start(client, host);
            tokio::spawn(watch);
            (handle, Arc::new(move || *current.borrow()))
        }
        None => {
            tracing::info!("no network attachment policy (--nad-policy): every network is allowed");
            (PolicyHandle::unrestricted(), always)
        }
    })
}

async fn run(opts: AgentOptions) -> anyhow::Result<()> {
    // A test knob (docs/architecture.md#durability), never set in production: refused when malformed.
    if let Some(failpoint) = plexus_agent::failpoint::arm_from_env()? {
        tracing::warn!(failpoint = %failpoint.to_env(), "a failpoint is armed: the agent will kill itself there");
    }
    let mut server_config = opts.server_config();
    match server::fd_limit::raise_to_hard() {
        Ok((before, after)) => {
            if before != after {
                tracing::info!("raised the open file limit from {before} to {after}");
            }
            server_config.max_pending = server::fd_limit::pending_bound(after, server_config.max_pending);
        }
        Err(e) => tracing::warn!("could not raise the open file limit: {e}"),
    }
    sweep_interrupted_writes(&opts);
    if let Err(e) = plexus_agent::memory::Trimmer::start() {
        tracing::warn!("memory freed by bursts of requests stays resident, no thread to give it back: {e}");
    }
    let (nads, catalog_synced, client) = catalog(&opts).await?;
    // With the network API on, its networks come first in every NAD lookup.
    let network_api = opts.network_api_socket().map(ToOwned::to_owned);
    let network_store = Arc::new(NetworkStore::new(&opts.state_dir));
    let catalog: Arc<dyn Catalog> = match &network_api {
        Some(_) => Arc::new(ApiNetworks::new(network_store.clone(), nads.clone())),
        None => nads.clone(),
    };
    let claims_client = client.clone();
    let (policy, policy_current) = policy(&opts, client.clone())?;
    let policy_loaded = policy.clone();
    let synced: SyncedCheck =
        Arc::new(move || catalog_synced() && policy_loaded.is_loaded() && policy_current());
    // plexus's own plugin types: they have no binary to fall back to, so they are always native.
    let dataplane = DataplaneOptions {
        pin_dir: opts.bpf_pin_dir.clone(),
        cgroup_root: opts.cgroup_root.clone(),
        max_flows: opts.flow_table.portmap_max_flows,
        timeouts: opts.flow_table.timeouts(),
        xdp: opts.xdp_where(),
    };
    let portmap_service = Portmap::start(&dataplane, &opts.state_dir);
    let bandwidth_service = Bandwidth::start(&dataplane, &opts.state_dir);
    let warm = Arc::new(AtomicBool::new(false));
    if let Some(addr) = opts.metrics_socket_addr()? {
        let listener =
            metrics::bind(addr).await.with_context(|| format!("binding the metrics address {addr}"))?;
        let default_dir = opts.default_network_dir.clone();
        let warmed = warm.clone();
        let (portmap_loaded, bandwidth_loaded) = (portmap_service.clone(), bandwidth_service.clone());
        let needs_default_network = network_api.is_none();
        let ready: metrics::ReadyCheck = Arc::new(move || {
            // With the network API, no network at all is ready (an empty list).
            if needs_default_network {
                confdir::default_network(&default_dir)?;
            }
            if !warmed.load(Ordering::Relaxed) {
                return Err("warming up: the eBPF dataplane is still loading".into());
            }
            // Not ready while an object failed to load (it is loaded again in the background):
            // the pods the node would get could not have their port mappings or limits.
            portmap_loaded.loaded()?;
            bandwidth_loaded.loaded()?;
            if synced() {
                Ok(())
            } else {
                Err("the catalog's caches are not current (listing, relisting, or the API server is unreachable: see the \
                     agent's log), or the network attachment policy has not been read yet"
                    .into())
            }
        });
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(listener, ready).await {
                tracing::error!("metrics endpoint stopped: {e}");
            }
        });
    }
    let mut natives = NativePlugins::default();
    if !opts.no_native {
        let ipam = Ipam { bin_dirs: opts.cni_bin_dirs.clone(), timeout: opts.delegate_timeout() };
        let types = native::register_all(&mut natives, ipam, &opts.state_dir, &opts.exec_plugins);
        tracing::info!(
            "plugin types run natively: {}",
            if types.is_empty() { "none".into() } else { types.join(", ") }
        );
    }
    // An XDP hook the port mappings let go of goes back to the bandwidth limits they displaced
    // there, at once, off the port mapping service's lock.
    let (runtime, reclaimer) = (tokio::runtime::Handle::current(), bandwidth_service.clone());
    portmap_service.on_xdp_released(move |ifindex| {
        let bandwidth = reclaimer.clone();
        runtime.spawn_blocking(move || bandwidth.reclaim_xdp(ifindex));
    });
    let warmed_up = warm_up(portmap_service.clone(), bandwidth_service.clone(), warm);
    let portmap: Arc<dyn NativePlugin> = Arc::new(portmap_plugin::PortmapPlugin::new(portmap_service));
    let bandwidth: Arc<dyn NativePlugin> =
        Arc::new(bandwidth_plugin::BandwidthPlugin::new(bandwidth_service.clone()));
    natives.register(portmap_plugin::TYPE, portmap.clone());
    natives.register(bandwidth_plugin::TYPE, bandwidth.clone());
    // The native macvlan and bridge serve both capabilities themselves when their config
    // declares them.
    for plugin_type in [native::macvlan::TYPE, native::bridge::TYPE] {
        if let Some(plugin) = natives.get(plugin_type).cloned() {
            let capabilities = vec![("portMappings", portmap.clone()), ("bandwidth", bandwidth.clone())];
            natives.register(plugin_type, Arc::new(WithCapabilities::new(plugin, capabilities)));
        }
    }
    let delegator =
        Delegator { bin_dirs: opts.cni_bin_dirs.clone(), timeout: opts.delegate_timeout(), natives };
    let state = StateStore::new(&opts.state_dir);
    if let Some(socket) = &network_api {
        let listener = plexus_agent::server::netapi::bind(socket)?;
        let api = NetworkApi {
            store: network_store.clone(),
            catalog: nads.clone(),
            default_network_dir: opts.default_network_dir.clone(),
            network_conf_dirs: opts.network_conf_dirs.clone(),
            prober: Prober { delegator: delegator.clone() },
            state: state.clone(),
        };
        tracing::info!(socket = %socket.display(), "serving the CRI network API");
        tokio::spawn(async move {
            if let Err(e) = plexus_agent::server::netapi::serve(listener, api).await {
                tracing::error!("the CRI network API stopped: {e}");
            }
        });
    }
    let engine = Engine::new(
        EngineConfig {
            default_network_dir: opts.default_network_dir.clone(),
            network_conf_dirs: opts.network_conf_dirs.clone(),
            allowed_namespaces: opts.allowed_namespaces.clone(),
            strict_annotations: opts.strict_annotations,
            device_info_dir: opts.device_info_dir.clone(),
            network_status_keys: opts.network_status_keys(),
        },
        catalog,
        delegator,
        state,
    )
    .with_policy(policy)
    .with_device_sources(device_sources(&opts, client))
    .with_bandwidth(bandwidth_service.clone())
    .with_multus_cache(MultusCache::new(&opts.multus_cache_dir));
    let engine = match claims_client {
        Some(client) => engine.with_ipam_claims(IpamClaims {
            source: Arc::new(KubeIpamClaims::new(client, Duration::from_secs(5))),
            registry: ClaimRegistry::new(&opts.state_dir),
            release_timeout: opts.delegate_timeout(),
        }),
        None => engine,
    };
    let engine =
        Arc::new(if network_api.is_some() { engine.with_network_api(network_store.clone()) } else { engine });
    if opts.catalog == CatalogSource::Kube {
        let (engine, every) = (engine.clone(), Duration::from_secs(opts.ipam_claim_check_interval));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                engine.collect_ipam_claims().await;
            }
        });
    }
    if opts.no_live_attachments {
        tracing::info!("live attachments are off (--no-live-attachments)");
    } else {
        let changes = nads.pod_changes();
        let resync = Duration::from_secs(opts.live_resync_secs.max(1));
        tokio::spawn(plexus_agent::live::run(engine.clone(), changes, resync));
    }
    let listener = server::bind_for(&opts.socket, opts.socket_group)?;
    if let Some(dir) = &opts.runtime_conf_dir {
        let readiness = Readiness {
            default_network_dir: opts.default_network_dir.clone(),
            runtime_conf_path: runtime_conf_path(dir, &opts.runtime_conf_name),
            socket: opts.socket.clone(),
            cni_version: opts.runtime_cni_version.clone(),
            api_networks: network_api.is_some().then(|| network_store.clone()),
        };
        // The runtime is told plexus is ready once warm, so its first ADDs do not compete with
        // the dataplane's load; the socket serves meanwhile (after a restart the runtime
        // knows plexus already).
        tokio::spawn(async move {
            warmed_up.await;
            readiness.watch(Duration::from_secs(1)).await
        });
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        r = server::serve_with(listener, engine, server_config) => r,
        _ = term.recv() => { tracing::info!("SIGTERM: stopping (the CNI config stays: the shim answers try-again until restart)"); Ok(()) }
        _ = tokio::signal::ctrl_c() => { tracing::info!("interrupted: stopping"); Ok(()) }
    }
}

/// `plexus-agent controller`: the PodNetwork controller, until SIGTERM or an interrupt; then
/// it stops writing and releases its Lease, so another replica takes over at once.
async fn controller(opts: ControllerOptions) -> anyhow::Result<()> {
    let identity =
        opts.identity().context("reading the host name for the Lease identity (or pass --identity)")?;
    let source = match &opts.kubeconfig {
        Some(path) => ClientSource::Kubeconfig(path.clone()),
        None => ClientSource::InCluster,
    };
    let client = build_client(&source).await?;
    let config = opts.config(identity);
    tracing::info!(
        identity = %config.lease.identity,
        lease = %format!("{}/{}", config.lease.namespace, config.lease.name),
        default_pod_network = if config.plan.manage_default { "created by the controller" } else { "managed by the operator" },
        "PodNetwork controller starting"
    );
    let running = plexus_agent::controller::Controller::start(client, config);
    if let Some(addr) = opts.metrics_socket_addr()? {
        let listener =
            metrics::bind(addr).await.with_context(|| format!("binding the metrics address {addr}"))?;
        let ready = running.ready_check();
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(listener, ready).await {
                tracing::error!("metrics endpoint stopped: {e}");
            }
        });
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
    }
    running.stop().await;
    Ok(())
}

/// How long readiness waits for the warm-up at most.
const WARM_UP_LIMIT: Duration = Duration::from_secs(10);

/// Waits until what the first ADD would otherwise pay for is done (docs/architecture.md,
/// "Start-up"): the eBPF dataplane's background load, a few hundred milliseconds of
/// verifier CPU that an ADD arriving meanwhile competes with. Then sets `warm`.
async fn warm_up(portmap: Arc<Portmap>, bandwidth: Arc<Bandwidth>, warm: Arc<AtomicBool>) {
    let started = std::time::Instant::now();
    // STATUS waits for the load to be published; whether it loaded is reported elsewhere.
    let loaded = tokio::task::spawn_blocking(move || {
        let _ = portmap.status();
        let _ = bandwidth.status();
    });
    match tokio::time::timeout(WARM_UP_LIMIT, loaded).await {
        Ok(_) => tracing::info!(took_ms = started.elapsed().as_millis() as u64, "warmed up"),
        Err(_) => tracing::warn!("the eBPF dataplane is still loading after {WARM_UP_LIMIT:?}; ready anyway"),
    }
    warm.store(true, Ordering::Relaxed);
}

/// Removes the temporary files of writes a crash interrupted, before anything writes: in the
/// state directory, and those of the agent's own CNI config next to the runtime's configs.
fn sweep_interrupted_writes(opts: &AgentOptions) {
    plexus_agent::state::sweep_temp_files(&opts.state_dir, 4, None);
    if let Some(dir) = &opts.runtime_conf_dir {
        plexus_agent::state::sweep_temp_files(dir, 0, Some(&opts.runtime_conf_name));
    }
}

/// `plexus-agent bandwidth list`.
fn bandwidth_list(o: &ListOptions) -> anyhow::Result<()> {
    let dirs = &o.dirs;
    let rows = bandwidth_rows::limits(&dirs.bpf_pin_dir, &dirs.state_dir).with_context(|| {
        format!("reading the bandwidth limits pinned under {}", dirs.bpf_pin_dir.display())
    })?;
    if o.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", bandwidth_rows::render(&rows));
    }
    Ok(())
}

/// `plexus-agent bandwidth set`.
fn bandwidth_set(o: &BandwidthSetOptions) -> anyhow::Result<()> {
    let limit = |rate: Option<u64>, burst| rate.map(|rate_bps| Limit { rate_bps, burst_bits: burst });
    let limits = plexus_agent::dataplane::bandwidth::config::Limits {
        ingress: limit(o.ingress_rate, o.ingress_burst),
        egress: limit(o.egress_rate, o.egress_burst),
    };
    if limits.is_empty() {
        anyhow::bail!("give --ingress-rate and/or --egress-rate (bits per second, non-zero)");
    }
    let record =
        bandwidth_rows::set(&o.dirs.bpf_pin_dir, &o.dirs.state_dir, &o.container_id, &o.ifname, &limits)?;
    for e in &record.entries {
        println!("{e}");
    }
    Ok(())
}

/// `plexus-agent portmap list`.
fn portmap_list(o: &ListOptions) -> anyhow::Result<()> {
    let dirs = &o.dirs;
    let rows = portmap_list_rows::mappings(&dirs.bpf_pin_dir, Some(&dirs.state_dir))
        .with_context(|| format!("reading the port mappings pinned under {}", dirs.bpf_pin_dir.display()))?;
    if o.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{}", portmap_list_rows::render(&rows));
    }
    Ok(())
}

/// `plexus-agent portmap flows`.
fn portmap_flows(o: &FlowsOptions) -> anyhow::Result<()> {
    let listing = portmap_list_rows::flows(&o.bpf_pin_dir).with_context(|| {
        format!("reading the port mapping flows pinned under {}", o.bpf_pin_dir.display())
    })?;
    if o.json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
    } else {
        println!("{}", plexus_agent::dataplane::portmap::flows::render(&listing));
    }
    Ok(())
}

/// `plexus-agent doctor`: its exit status (0 clean, 1 leftovers remain, 2 the node could not be
/// read).
async fn doctor(o: &DoctorOptions) -> i32 {
    use plexus_agent::doctor::{fix::Fixer, gather::Sources, render, run};
    let sources = Sources {
        state_dir: o.dirs.state_dir.clone(),
        pin_dir: o.dirs.bpf_pin_dir.clone(),
        ipam_dirs: o.ipam_dirs.clone(),
        runtime_socket: o.runtime_socket.clone(),
        cni_cache_dir: o.cni_cache_dir.clone(),
        multus_cache_dir: o.multus_cache_dir.clone(),
    };
    let fixer = Fixer {
        sources: sources.clone(),
        socket: o.socket.clone(),
        cni_bin_dirs: o.cni_bin_dirs.clone(),
        timeout: Duration::from_secs(60),
    };
    let report = match run(&sources, o.fix.then_some(&fixer)).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("plexus-agent doctor: {e}");
            return 2;
        }
    };
    let liveness = format!("liveness of containers no record lists: {}", report.liveness);
    if o.json {
        match serde_json::to_string_pretty(&report.rows) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("plexus-agent doctor: encoding the report: {e}");
                return 2;
            }
        }
        eprintln!("plexus-agent doctor: {liveness}");
    } else {
        println!("{}\n\n{liveness}", render(&report.rows, o.fix));
    }
    i32::from(report.rows.iter().any(|r| r.remains()))
}
