//! The agent's Kubernetes client: in-cluster service account, or a kubeconfig.
//!
//! A token file (the in-cluster service account token, or a kubeconfig's `tokenFile`) is
//! re-read as soon as it changes on disk. kube's own token-file handling re-reads it only
//! every minute, so after kubelet rotates a projected token and the old one is revoked,
//! requests would fail "Unauthorized" for up to a minute; checking the file's identity
//! (inode, size, mtime) costs one stat per request and closes that window. The same code
//! runs against a real cluster and the tests' API server: only the kubeconfig differs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use ::kube::client::{Body, ClientBuilder};
use ::kube::config::{Config, KubeConfigOptions, Kubeconfig};
use ::kube::Client;
use http::header::{HeaderValue, AUTHORIZATION};

use super::KubeError;

/// Where the agent's credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientSource {
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the mounted token and CA).
    InCluster,
    /// A kubeconfig file, its current context.
    Kubeconfig(PathBuf),
}

/// Builds the client. A stray `KUBECONFIG` in the environment is deliberately ignored: the
/// agent acts with its own service account unless told otherwise.
pub async fn build_client(source: &ClientSource) -> Result<Client, KubeError> {
    let mut config = match source {
        ClientSource::InCluster => Config::incluster().map_err(KubeError::InCluster)?,
        ClientSource::Kubeconfig(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|source| KubeError::Kubeconfig { path: path.clone(), source })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeError::Kubeconfig { path: path.clone(), source })?
        }
    };
    // A static token wins over a token file (kubeconfig semantics): only take the file over
    // when it is what kube would use.
    let token_file = match config.auth_info.token {
        Some(_) => None,
        None => config.auth_info.token_file.take().map(|f| Arc::new(TokenFile::new(PathBuf::from(f)))),
    };
    let builder = ClientBuilder::try_from(config).map_err(KubeError::Client)?;
    Ok(match token_file {
        Some(tokens) => builder
            .with_layer(&tower::util::MapRequestLayer::new(move |mut req: http::Request<Body>| {
                if let Some(value) = tokens.header() {
                    req.headers_mut().insert(AUTHORIZATION, value);
                }
                req
            }))
            .build(),
        None => builder.build(),
    })
}

/// Re-read at least this often even when the file looks unchanged (belt and braces for
/// file systems with coarse timestamps).
const MAX_TOKEN_AGE: Duration = Duration::from_secs(60);

/// A bearer token file, re-read when it changes.
pub struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<CachedToken>>,
}

struct CachedToken {
    stamp: FileStamp,
    read_at: Instant,
    header: HeaderValue,
}

/// What identifies one version of the file: kubelet swaps a `..data` symlink (new inode),
/// a plain rewrite changes size or mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)?;
    Ok(FileStamp { dev: m.dev(), ino: m.ino(), len: m.len(), modified: m.modified().ok() })
}

impl TokenFile {
    pub fn new(path: PathBuf) -> Self {
        TokenFile { path, cached: Mutex::new(None) }
    }

    /// The `Authorization` header for the current token. When the file cannot be read, the
    /// last good token is kept (the server decides whether it is still valid).
    pub fn header(&self) -> Option<HeaderValue> {
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        let current = stamp(&self.path);
        let fresh = match (&*cached, &current) {
            (Some(c), Ok(s)) => c.stamp == *s && c.read_at.elapsed() < MAX_TOKEN_AGE,
            (Some(_), Err(_)) => true,
            (None, _) => false,
        };
        if !fresh {
            match current.and_then(|s| Ok((s, std::fs::read_to_string(&self.path)?))) {
                Ok((stamp, text)) => match HeaderValue::from_str(&format!("Bearer {}", text.trim())) {
                    Ok(mut header) => {
                        header.set_sensitive(true);
                        if cached.is_some() {
                            tracing::info!(path = %self.path.display(), "service account token changed: using the new one");
                        }
                        *cached = Some(CachedToken { stamp, read_at: Instant::now(), header });
                    }
                    Err(_) => {
                        tracing::warn!(path = %self.path.display(), "token file holds characters not allowed in a header")
                    }
                },
                Err(e) => tracing::warn!(path = %self.path.display(), "reading the token file: {e}"),
            }
        }
        cached.as_ref().map(|c| c.header.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_reread_when_it_changes_and_kept_when_it_vanishes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let t = TokenFile::new(path.clone());
        assert_eq!(t.header().unwrap(), "Bearer one");
        assert!(t.header().unwrap().is_sensitive());
        // kubelet's projected volumes swap the file (new inode), as rename does.
        std::fs::write(d.path().join("token.new"), "two").unwrap();
        std::fs::rename(d.path().join("token.new"), &path).unwrap();
        assert_eq!(t.header().unwrap(), "Bearer two");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(t.header().unwrap(), "Bearer two");
    }

    #[test]
    fn a_missing_token_file_gives_no_header() {
        let t = TokenFile::new("/nonexistent/plexus/token".into());
        assert!(t.header().is_none());
    }

    #[tokio::test]
    async fn a_broken_kubeconfig_names_the_file() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("kubeconfig");
        std::fs::write(&path, "not: [a kubeconfig").unwrap();
        let Err(err) = build_client(&ClientSource::Kubeconfig(path.clone())).await else {
            panic!("a broken kubeconfig was accepted");
        };
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    }
}
