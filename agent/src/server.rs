//! The Unix socket the shim talks to: one request, one response, per connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use plexus_cni_shim::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::engine::Engine;
use crate::metrics::{metrics, AddSlotGauge};

/// Requests are small; anything larger is not from the shim.
const MAX_REQUEST_BYTES: u64 = 4 << 20;

/// The default of `--max-concurrent-adds`.
pub const DEFAULT_MAX_CONCURRENT_ADDS: usize = 16;

/// Binds the socket, replacing a stale one left by a previous agent.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing stale socket {}", path.display())),
    }
    let listener = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    // Only root may ask for networks: the socket grants what the CNI plugins can do.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    Ok(listener)
}

/// Serves until the listener fails; each connection runs on its own task.
pub async fn serve(listener: UnixListener, engine: Arc<Engine>, socket: PathBuf) -> anyhow::Result<()> {
    serve_limited(listener, engine, socket, DEFAULT_MAX_CONCURRENT_ADDS).await
}

/// [`serve`], with at most `max_concurrent_adds` ADDs running at once. During a pod burst
/// the others wait in line (a fair queue), so delegate processes, netlink work and memory
/// stay bounded however many pods kubelet starts at once; DEL and the other verbs never
/// wait behind ADDs, so tearing down is not held up by a burst.
pub async fn serve_limited(
    listener: UnixListener,
    engine: Arc<Engine>,
    socket: PathBuf,
    max_concurrent_adds: usize,
) -> anyhow::Result<()> {
    tracing::info!(socket = %socket.display(), max_concurrent_adds, "serving CNI requests");
    let add_slots = Arc::new(tokio::sync::Semaphore::new(max_concurrent_adds.max(1)));
    loop {
        let (stream, _) =
            listener.accept().await.with_context(|| format!("accepting on {}", socket.display()))?;
        let engine = engine.clone();
        let add_slots = add_slots.clone();
        tokio::spawn(async move {
            if let Err(e) = handle_connection(stream, &engine, &add_slots).await {
                tracing::warn!("connection: {e:#}");
            }
        });
    }
}

async fn handle_connection(
    mut stream: UnixStream,
    engine: &Engine,
    add_slots: &tokio::sync::Semaphore,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    (&mut stream).take(MAX_REQUEST_BYTES).read_to_end(&mut buf).await.context("reading request")?;
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
                let _slot = add_slots.acquire().await.context("the ADD queue is closed")?;
                gauge.running();
                engine.handle(req).await
            } else {
                engine.handle(req).await
            };
            metrics().request(verb, error_code(&response), started.elapsed());
            response
        }
        Err(e) => {
            let err = crate::cni::CniError::new(
                crate::cni::ErrorCode::DecodeFailure,
                format!("the shim's request is not understood ({e}); the plexus binary and agent versions differ?"),
            );
            Response { exit_code: 1, stdout: err.to_json(crate::cni::CURRENT_VERSION).to_string() }
        }
    };
    let body = serde_json::to_vec(&response).context("encoding response")?;
    stream.write_all(&body).await.context("writing response")?;
    stream.shutdown().await.context("closing connection")?;
    Ok(())
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
