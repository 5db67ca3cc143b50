//! The wire: the Unix socket the shim talks to (this module), and the CRI network API's gRPC
//! socket ([`netapi`]).
//!
//! The shim's socket: one request, one response, per connection.
//! Before a request reaches the engine, a connection passes three guards: the peer's
//! credentials ([`access`]), a bound on connections still sending their request
//! ([`pending`]), and a request bounded in size and time ([`framing`]). The accept loop
//! itself never waits on a client, so whatever one connection does, the next is served.

pub mod access;
pub mod fd_limit;
pub mod framing;
pub mod netapi;
pub mod pending;
mod tally;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use plexus_cni_shim::{Request, Response};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::time::Instant;

use crate::cni::CniError;
use crate::engine::Engine;
use crate::metrics::{metrics, AddSlotGauge};
use access::{Access, Peer};
use framing::{discard_rest, read_request, ReadError, MAX_DISCARD_BYTES};
use pending::{Pending, Ticket};
use tally::Tally;

pub use framing::{DEFAULT_READ_TIMEOUT, MAX_REQUEST_BYTES};

/// The default of `--max-concurrent-adds`.
pub const DEFAULT_MAX_CONCURRENT_ADDS: usize = 16;

/// Connections still sending their request, at most; past it the oldest is closed.
pub const MAX_PENDING_CONNECTIONS: usize = 256;

/// How long writing an answer may take (answers are small: a stuck reader is dropped).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after an accept that failed for want of resources (descriptors, memory).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How the socket serves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Its path, for messages.
    pub socket: PathBuf,
    pub max_concurrent_adds: usize,
    pub access: Access,
    /// Time a connection has to deliver its whole request.
    pub read_timeout: Duration,
    pub max_pending: usize,
}

impl ServerConfig {
    /// The defaults: root only, 16 ADDs at once, 5 s to send a request.
    pub fn new(socket: PathBuf) -> Self {
        ServerConfig {
            socket,
            max_concurrent_adds: DEFAULT_MAX_CONCURRENT_ADDS,
            access: Access::new(None),
            read_timeout: DEFAULT_READ_TIMEOUT,
            max_pending: MAX_PENDING_CONNECTIONS,
        }
    }
}

/// Binds the socket for root alone (mode 0600), replacing a stale one.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    bind_for(path, None)
}

/// Binds the socket, replacing a stale one left by a previous agent. With a `group`, the
/// socket belongs to it with mode 0660, else it is 0600: only root may ask for networks, as
/// the socket grants what the CNI plugins can do.
pub fn bind_for(path: &Path, group: Option<u32>) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing stale socket {}", path.display())),
    }
    let listener = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    let mode = match group {
        Some(gid) => {
            std::os::unix::fs::chown(path, None, Some(gid))
                .with_context(|| format!("giving {} to group {gid}", path.display()))?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("restricting {}", path.display()))?;
    Ok(listener)
}

/// Serves until the listener fails; each connection runs on its own task.
pub async fn serve(listener: UnixListener, engine: Arc<Engine>, socket: PathBuf) -> anyhow::Result<()> {
    serve_with(listener, engine, ServerConfig::new(socket)).await
}

/// [`serve`], with at most `max_concurrent_adds` ADDs running at once.
pub async fn serve_limited(
    listener: UnixListener,
    engine: Arc<Engine>,
    socket: PathBuf,
    max_concurrent_adds: usize,
) -> anyhow::Result<()> {
    serve_with(listener, engine, ServerConfig { max_concurrent_adds, ..ServerConfig::new(socket) }).await
}

/// Serves until the listener fails for good. During a pod burst at most
/// `max_concurrent_adds` ADDs run and the others wait in line (a fair queue), so delegate
/// processes, netlink work and memory stay bounded however many pods kubelet starts at once;
/// DEL and the other verbs never wait behind ADDs, so tearing down is not held up by a burst.
pub async fn serve_with(
    listener: UnixListener,
    engine: Arc<Engine>,
    config: ServerConfig,
) -> anyhow::Result<()> {
    tracing::info!(
        socket = %config.socket.display(),
        max_concurrent_adds = config.max_concurrent_adds,
        group = ?config.access.group,
        read_timeout_secs = config.read_timeout.as_secs(),
        "serving CNI requests"
    );
    let shared = Arc::new(Shared {
        engine,
        add_slots: tokio::sync::Semaphore::new(config.max_concurrent_adds.max(1)),
        pending: Pending::new(config.max_pending),
        access: config.access,
        read_timeout: config.read_timeout,
        tallies: Tallies::new(),
    });
    tokio::spawn(flush_tallies(Arc::downgrade(&shared)));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if is_fatal_accept_error(&e) => {
                return Err(e).with_context(|| format!("accepting on {}", config.socket.display()))
            }
            Err(e) => {
                // Out of descriptors or memory: what is open now closes in time (answers,
                // read deadlines), so wait a little instead of spinning or giving up.
                shared.tallies.accept_errors.add(1, e.to_string());
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let (ticket, evicted) = shared.pending.register();
        if evicted > 0 {
            shared.tallies.evictions.add(evicted as u64, shared.pending.max().to_string());
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = handle_connection(stream, &shared, ticket).await {
                tracing::warn!("connection: {e:#}");
            }
        });
    }
}

/// What every connection's task needs.
struct Shared {
    engine: Arc<Engine>,
    add_slots: tokio::sync::Semaphore,
    pending: Arc<Pending>,
    access: Access,
    read_timeout: Duration,
    tallies: Tallies,
}

/// The warnings a flood of connections repeats (see [`tally`]).
struct Tallies {
    accept_errors: Tally,
    evictions: Tally,
    refusals: Tally,
    stalls: Tally,
}

impl Tallies {
    fn new() -> Self {
        Tallies {
            accept_errors: Tally::new(|n, e| {
                format!("accepting a connection failed {n} time(s), the last: {e}; retrying")
            }),
            evictions: Tally::new(|n, max| {
                format!(
                    "closed {n} connection(s) that had sent no complete request while more than {max} \
                     were waiting; something connects to the socket without sending"
                )
            }),
            refusals: Tally::new(|n, last| format!("refused {n} connection(s); the last: {last}")),
            stalls: Tally::new(|n, last| format!("closed {n} connection(s) that got no service: {last}")),
        }
    }

    fn flush(&self) {
        for tally in [&self.accept_errors, &self.evictions, &self.refusals, &self.stalls] {
            tally.flush();
        }
    }
}

/// Logs the tallies' counts every [`tally::EVERY`], for as long as the server runs.
async fn flush_tallies(shared: std::sync::Weak<Shared>) {
    let mut ticks = tokio::time::interval(tally::EVERY);
    loop {
        ticks.tick().await;
        match shared.upgrade() {
            Some(shared) => shared.tallies.flush(),
            None => return,
        }
    }
}

/// Accept errors that say the listener itself is broken, not that the node is busy.
fn is_fatal_accept_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP | libc::EFAULT)
    )
}

async fn handle_connection(mut stream: UnixStream, shared: &Shared, ticket: Ticket) -> anyhow::Result<()> {
    let deadline = Instant::now() + shared.read_timeout;
    let peer = Peer::of(&stream).context("reading the peer's credentials")?;
    if let Err(refused) = shared.access.check(&peer) {
        shared.tallies.refusals.add(1, refused.to_string());
        let err = CniError::from_error(&refused).with_details(refused.remedy());
        answer(&mut stream, &error_response(&err)).await?;
        discard_rest(&mut stream, MAX_REQUEST_BYTES, deadline, &ticket).await;
        return Ok(());
    }
    let buf = match read_request(&mut stream, MAX_REQUEST_BYTES, deadline, shared.read_timeout, &ticket).await
    {
        Ok(buf) => buf,
        // The peer went away: nobody to answer.
        Err(ReadError::Io(e)) => return Err(e).context("reading the request"),
        Err(e) => {
            match e {
                ReadError::Evicted(_) => {} // counted where it happened
                ReadError::TimedOut(_) => shared.tallies.stalls.add(1, e.to_string()),
                _ => tracing::warn!("a connection got no service: {e}"),
            }
            answer(&mut stream, &error_response(&CniError::from_error(&e))).await?;
            if matches!(e, ReadError::TooLarge) {
                discard_rest(&mut stream, MAX_DISCARD_BYTES, deadline, &ticket).await;
            }
            return Ok(());
        }
    };
    drop(ticket);
    if buf.is_empty() {
        // A connection probe (readiness checks, the shim's tests): nothing to answer.
        return Ok(());
    }
    let response = match serde_json::from_slice::<Request>(&buf) {
        Ok(req) => {
            let started = std::time::Instant::now();
            // Unknown verbs are answered by the engine; the metric counts them as "other".
            let verb = crate::cni::Command::parse(&req.command).ok();
            let response = if verb == Some(crate::cni::Command::Add) {
                let mut gauge = AddSlotGauge::waiting();
                let _slot = shared.add_slots.acquire().await.context("the ADD queue is closed")?;
                gauge.running();
                shared.engine.handle(req).await
            } else {
                shared.engine.handle(req).await
            };
            metrics().request(verb, error_code(&response), started.elapsed());
            response
        }
        Err(e) => error_response(&CniError::new(
            crate::cni::ErrorCode::DecodeFailure,
            format!(
                "the shim's request is not understood ({e}); the plexus binary and agent versions differ?"
            ),
        )),
    };
    answer(&mut stream, &response).await
}

/// A CNI error as the shim relays it.
fn error_response(err: &CniError) -> Response {
    Response { exit_code: 1, stdout: err.to_json(crate::cni::CURRENT_VERSION).to_string() }
}

/// Writes the answer and half-closes; a peer that does not take it in time is dropped.
async fn answer(stream: &mut UnixStream, response: &Response) -> anyhow::Result<()> {
    let body = serde_json::to_vec(response).context("encoding response")?;
    let write = async {
        stream.write_all(&body).await.context("writing response")?;
        stream.shutdown().await.context("closing connection")
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .with_context(|| format!("the peer did not read its answer within {} s", WRITE_TIMEOUT.as_secs()))?
}

/// The CNI error code of a response, 0 for success.
fn error_code(r: &Response) -> u64 {
    if r.exit_code == 0 {
        return 0;
    }
    serde_json::from_str::<serde_json::Value>(&r.stdout)
        .ok()
        .and_then(|v| v.get("code").and_then(serde_json::Value::as_u64))
        .unwrap_or(999)
}
