//! CNI configuration directories as libcni and kubelet read them: `.conf`, `.json` and
//! `.conflist` files in lexical order.

use std::io;
use std::path::{Path, PathBuf};

use crate::cni::config::{ConfigError, NetworkConfigList};
use crate::cni::{CniCode, ErrorCode};
use crate::spec::resolve::OnDiskConfig;

/// The CNI type of plexus's own config, which must never be picked as a delegate.
pub const PLEXUS_TYPE: &str = "plexus";

/// A file of a config directory and what became of it.
#[derive(Debug)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub parsed: Result<(OnDiskConfig, NetworkConfigList), ConfigFileError>,
}

/// Why a file of a config directory is not a usable config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("reading {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: {source}", path.display())]
    Invalid { path: PathBuf, source: ConfigError },
    #[error("{}: a .conflist must hold a \"plugins\" list and a .conf/.json a single plugin", path.display())]
    WrongShape { path: PathBuf },
}

/// Every config file of `dir`, sorted by file name. A missing directory has none.
pub fn read_dir(dir: &Path) -> Vec<ConfigFile> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            // Read as a directory without configs, as kubelet does; the warning says why.
            tracing::warn!(dir = %dir.display(), "reading the CNI config directory: {e}");
            return Vec::new();
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("conf" | "conflist" | "json")))
        .collect();
    paths.sort();
    paths.into_iter().map(|path| ConfigFile { parsed: parse_file(&path), path }).collect()
}

fn parse_file(path: &Path) -> Result<(OnDiskConfig, NetworkConfigList), ConfigFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigFileError::Read { path: path.to_owned(), source })?;
    let is_list = path.extension().is_some_and(|e| e == "conflist");
    let list = NetworkConfigList::parse(&text, None)
        .map_err(|source| ConfigFileError::Invalid { path: path.to_owned(), source })?;
    if is_list != text_has_plugins(&text) {
        return Err(ConfigFileError::WrongShape { path: path.to_owned() });
    }
    let on_disk = OnDiskConfig { path: path.to_owned(), is_list, name: list.name.clone(), text };
    Ok((on_disk, list))
}

fn text_has_plugins(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).ok().is_some_and(|v| v.get("plugins").is_some())
}

/// The valid configs of several directories, in directory order, for spec 3.4.1 rules 2
/// and 3.
pub fn on_disk_configs(dirs: &[PathBuf]) -> Vec<OnDiskConfig> {
    dirs.iter().flat_map(|d| read_dir(d)).filter_map(|f| f.parsed.ok().map(|(c, _)| c)).collect()
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the cluster default network is not ready: no valid CNI config in {}{}; install the default \
     network plugin (or fix its config) and retry",
    dir.display(),
    skipped(invalid)
)]
pub struct DefaultNetworkMissing {
    pub dir: PathBuf,
    /// The files passed over because they are not valid configs.
    pub invalid: Vec<ConfigFileError>,
}

fn skipped(invalid: &[ConfigFileError]) -> String {
    if invalid.is_empty() {
        return String::new();
    }
    let reasons: Vec<String> = invalid.iter().map(ToString::to_string).collect();
    format!(" (invalid: {})", reasons.join("; "))
}

/// The runtime may retry: the default network's plugin is usually still being installed.
impl CniCode for DefaultNetworkMissing {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::TryAgainLater
    }
}

/// The types of Multus's own configs (the thin plugin's, the thick daemon's shim): on a node
/// taken over from Multus one may stay behind; it delegates, and is no network itself.
pub const MULTUS_TYPES: [&str; 2] = ["multus", "multus-shim"];

/// The cluster default network: the first valid config of `dir` in lexical order, as
/// kubelet picks it, passing over plexus's own config and Multus's.
pub fn default_network(dir: &Path) -> Result<(OnDiskConfig, NetworkConfigList), DefaultNetworkMissing> {
    let mut invalid = Vec::new();
    for file in read_dir(dir) {
        match file.parsed {
            Ok((on_disk, list))
                if list.plugin_type(0) != PLEXUS_TYPE && !MULTUS_TYPES.contains(&list.plugin_type(0)) =>
            {
                return Ok((on_disk, list))
            }
            Ok(_) => {}
            Err(e) => invalid.push(e),
        }
    }
    Err(DefaultNetworkMissing { dir: dir.to_owned(), invalid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn default_network_is_the_first_valid_config_skipping_plexus() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "00-plexus.conflist",
            r#"{"cniVersion":"1.0.0","name":"plexus","plugins":[{"type":"plexus"}]}"#,
        );
        write(d.path(), "05-broken.conf", "{");
        // Left behind by Multus (thin, thick): they delegate, and are no network.
        write(
            d.path(),
            "00-multus.conf",
            r#"{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus"}"#,
        );
        write(
            d.path(),
            "01-multus.conf",
            r#"{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}"#,
        );
        write(
            d.path(),
            "10-cluster.conflist",
            r#"{"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"}]}"#,
        );
        write(d.path(), "20-later.conf", r#"{"cniVersion":"1.0.0","name":"later","type":"bridge"}"#);
        write(d.path(), "99-notes.txt", "not a config");
        let (on_disk, list) = default_network(d.path()).unwrap();
        assert_eq!(list.name, "cluster");
        assert!(on_disk.is_list);
    }

    #[test]
    fn no_default_network_explains_why() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "05-broken.conf", "{");
        let err = default_network(d.path()).unwrap_err().to_string();
        assert!(err.contains("not ready") && err.contains("05-broken.conf"), "{err}");
        assert!(default_network(&d.path().join("missing")).is_err());
    }

    #[test]
    fn list_and_single_files_must_match_their_extension() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "a.conflist", r#"{"cniVersion":"1.0.0","name":"a","type":"bridge"}"#);
        write(d.path(), "b.conf", r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"bridge"}]}"#);
        write(d.path(), "c.json", r#"{"cniVersion":"1.0.0","name":"c","type":"bridge"}"#);
        let names: Vec<String> =
            on_disk_configs(&[d.path().to_owned()]).into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["c"]);
    }
}
