//! The Unix socket the shim talks to: one request, one response, per connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use plexus_cni_shim::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::engine::Engine;

/// Requests are small; anything larger is not from the shim.
const MAX_REQUEST_BYTES: u64 = 4 << 20;

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
    tracing::info!(socket = %socket.display(), "serving CNI requests");
    loop {
        let (stream, _) =
            listener.accept().await.with_context(|| format!("accepting on {}", socket.display()))?;
        let engine = engine.clone();
        tokio::spawn(async move {
            if let Err(e) = handle_connection(stream, &engine).await {
                tracing::warn!("connection: {e:#}");
            }
        });
    }
}

async fn handle_connection(mut stream: UnixStream, engine: &Engine) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    (&mut stream).take(MAX_REQUEST_BYTES).read_to_end(&mut buf).await.context("reading request")?;
    if buf.is_empty() {
        // A connection probe (readiness checks, the shim's tests): nothing to answer.
        return Ok(());
    }
    let response = match serde_json::from_slice::<Request>(&buf) {
        Ok(req) => engine.handle(req).await,
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
