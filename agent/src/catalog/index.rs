//! The manifests of some directories, indexed by namespace/name.
//!
//! A lookup asks inotify ([`DirWatch`]) whether anything changed in the directories since
//! the last one. Only then are the directories listed and every file's identity (device,
//! inode, size, modification and change times) compared with what was indexed; files that
//! are new or changed are read and parsed again. The answer is one map lookup. So a lookup
//! in unchanged directories costs the same however many files they hold or selections a pod
//! has, and a file written between two requests is seen by the second. Without inotify (its
//! limits reached), or when a manifest is a symbolic link (its target may change where no
//! watch sees it), every lookup lists and compares, still reading only changed files.
//!
//! A file that cannot be used (unreadable, not UTF-8, not a manifest, a name the API
//! server would refuse) is reported once per change, naming the file, and the other files
//! keep serving. When the objects of a broken file can still be made out (a pod manifest
//! with one stray non-UTF-8 byte), looking them up answers the file and the reason.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::manifest::{parse_objects, Objects};
use super::watch::DirWatch;
use super::PodInfo;
use crate::podnetwork::model::{AttachmentParameters, PodNetwork, PodNetworkAttachment};
use crate::spec::resolve::NetworkAttachmentDefinition;

/// A manifest file that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    pub file: PathBuf,
    pub reason: String,
}

/// The answer to a lookup.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Found(T),
    /// The object is in this file, which cannot be used.
    Broken(Arc<Broken>),
    /// No file holds it; these files could not be read and may be meant to.
    Missing {
        unreadable: Vec<Arc<Broken>>,
    },
}

/// The index of one set of directories (searched in order; the first file holding an
/// object wins, files sorted by name within a directory).
#[derive(Debug)]
pub struct ManifestIndex {
    dirs: Vec<PathBuf>,
    state: Mutex<State>,
    reads: AtomicU64,
    listings: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// In search order.
    files: Vec<(PathBuf, FileEntry)>,
    pods: HashMap<Key, Slot<PodInfo>>,
    nads: HashMap<Key, Slot<NetworkAttachmentDefinition>>,
    /// Keyed with an empty namespace (cluster-scoped).
    pod_networks: HashMap<Key, Slot<PodNetwork>>,
    attachments: HashMap<Key, Slot<PodNetworkAttachment>>,
    parameters: HashMap<Key, Slot<AttachmentParameters>>,
    /// Broken files whose objects could not be made out.
    unidentified: Vec<Arc<Broken>>,
    /// The last error of each unreadable directory, to warn once per change.
    dir_errors: HashMap<PathBuf, String>,
    /// What tells that nothing changed; `None` before the first lookup or without inotify.
    watch: Option<DirWatch>,
    /// Whether the last listing found a symbolic link, which the watch cannot see through.
    symlinks: bool,
    /// Whether the index reflects the directories as listed at least once.
    listed: bool,
}

type Key = (String, String);

#[derive(Debug, Clone)]
enum Slot<T> {
    Found(T),
    Broken(Arc<Broken>),
}

#[derive(Debug)]
struct FileEntry {
    stamp: Option<Stamp>,
    content: Content,
}

#[derive(Debug)]
enum Content {
    Parsed(Objects),
    /// `claims`: the objects still made out of it (none when nothing could be).
    Broken {
        broken: Arc<Broken>,
        claims: Objects,
    },
}

/// What tells a changed file from an unchanged one without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

impl ManifestIndex {
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        ManifestIndex { dirs, state: Mutex::default(), reads: AtomicU64::new(0), listings: AtomicU64::new(0) }
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// How many times a manifest file was read since the index was made.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many times the directories were listed since the index was made.
    pub fn listings(&self) -> u64 {
        self.listings.load(Ordering::Relaxed)
    }

    /// The pod `namespace/name`, after taking in the files changed since the last lookup.
    /// Blocking: it lists directories and may read files.
    pub fn pod(&self, namespace: &str, name: &str) -> Lookup<PodInfo> {
        self.lookup(namespace, name, |s| &s.pods)
    }

    /// The NAD `namespace/name`, as [`ManifestIndex::pod`].
    pub fn nad(&self, namespace: &str, name: &str) -> Lookup<NetworkAttachmentDefinition> {
        self.lookup(namespace, name, |s| &s.nads)
    }

    /// Every NAD a usable manifest holds, by namespace then name, after taking in the files
    /// changed since the last lookup. Blocking, as [`ManifestIndex::pod`].
    pub fn nads(&self) -> Vec<NetworkAttachmentDefinition> {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.refresh(&mut state);
        let mut found: Vec<NetworkAttachmentDefinition> = state
            .nads
            .values()
            .filter_map(|slot| match slot {
                Slot::Found(nad) => Some(nad.clone()),
                Slot::Broken(_) => None,
            })
            .collect();
        found.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        found
    }

    /// The PodNetwork `name` (cluster-scoped), as [`ManifestIndex::pod`].
    pub fn pod_network(&self, name: &str) -> Lookup<PodNetwork> {
        self.lookup("", name, |s| &s.pod_networks)
    }

    /// The PodNetworkAttachment `namespace/name`, as [`ManifestIndex::pod`].
    pub fn attachment(&self, namespace: &str, name: &str) -> Lookup<PodNetworkAttachment> {
        self.lookup(namespace, name, |s| &s.attachments)
    }

    /// The AttachmentParameters `namespace/name`, as [`ManifestIndex::pod`].
    pub fn parameters(&self, namespace: &str, name: &str) -> Lookup<AttachmentParameters> {
        self.lookup(namespace, name, |s| &s.parameters)
    }

    fn lookup<T: Clone>(
        &self,
        namespace: &str,
        name: &str,
        map: impl FnOnce(&State) -> &HashMap<Key, Slot<T>>,
    ) -> Lookup<T> {
        // A panic while holding the lock leaves a state that is still consistent enough
        // to refresh: every field is rebuilt from the files.
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.refresh(&mut state);
        match map(&state).get(&(namespace.to_owned(), name.to_owned())) {
            Some(Slot::Found(v)) => Lookup::Found(v.clone()),
            Some(Slot::Broken(b)) => Lookup::Broken(b.clone()),
            None => Lookup::Missing { unreadable: state.unidentified.clone() },
        }
    }

    fn refresh(&self, state: &mut State) {
        if !state.listed {
            // Watching starts before the first listing, so no change falls between them.
            state.watch = DirWatch::new(&self.dirs)
                .inspect_err(|e| {
                    tracing::info!("not watching the manifest directories ({e}): each lookup lists them")
                })
                .ok();
        }
        let changed = state.watch.as_mut().is_none_or(DirWatch::changed);
        if state.listed && !changed && !state.symlinks {
            return;
        }
        state.listed = true;
        self.listings.fetch_add(1, Ordering::Relaxed);
        let listed = self.list(&mut state.dir_errors);
        state.symlinks = listed.iter().any(|(path, _)| is_symlink(path));
        let mut previous: HashMap<PathBuf, FileEntry> =
            std::mem::take(&mut state.files).into_iter().collect();
        let mut changed = false;
        let mut files = Vec::with_capacity(listed.len());
        for (path, stamp) in listed {
            let entry = match previous.remove(&path) {
                Some(old) if unchanged(&old, &stamp) => old,
                _ => {
                    changed = true;
                    self.take_in(&path, stamp)
                }
            };
            files.push((path, entry));
        }
        // Files gone since the last lookup take their objects with them.
        changed |= !previous.is_empty();
        state.files = files;
        if changed {
            rebuild(state);
        }
    }

    /// The manifest files of the directories, in search order, with their stamps.
    fn list(
        &self,
        dir_errors: &mut HashMap<PathBuf, String>,
    ) -> Vec<(PathBuf, Result<Stamp, std::io::Error>)> {
        let mut out = Vec::new();
        for dir in &self.dirs {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => {
                    dir_errors.remove(dir);
                    entries
                }
                Err(e) => {
                    // A directory that cannot be read holds no manifests; the warning says why.
                    let text = e.to_string();
                    if e.kind() != std::io::ErrorKind::NotFound && dir_errors.get(dir) != Some(&text) {
                        tracing::warn!(dir = %dir.display(), "skipping manifest directory: {e}");
                    }
                    dir_errors.insert(dir.clone(), text);
                    continue;
                }
            };
            let mut paths: Vec<PathBuf> =
                entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| is_manifest(p)).collect();
            paths.sort();
            for path in paths {
                match std::fs::metadata(&path) {
                    // Gone between listing and looking: as if never listed.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound && !is_symlink(&path) => {}
                    Ok(m) if m.is_dir() => {}
                    found => out.push((path, found.map(|m| Stamp::of(&m)))),
                }
            }
        }
        out
    }

    /// Reads and parses one new or changed file, reporting it when it cannot be used.
    fn take_in(&self, path: &Path, stamp: Result<Stamp, std::io::Error>) -> FileEntry {
        let stamp = match stamp {
            Ok(s) => s,
            Err(e) => return broken_entry(path, None, unreadable(&e), Objects::default()),
        };
        self.reads.fetch_add(1, Ordering::Relaxed);
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return broken_entry(path, Some(stamp), unreadable(&e), Objects::default()),
        };
        match String::from_utf8(bytes) {
            Ok(text) => match parse_objects(&text) {
                Ok(objects) => FileEntry { stamp: Some(stamp), content: Content::Parsed(objects) },
                Err(e) => broken_entry(path, Some(stamp), e.to_string(), Objects::default()),
            },
            Err(e) => {
                let reason = format!("it is not valid UTF-8 ({})", e.utf8_error());
                // Which objects it was meant to hold, so looking them up names this file.
                let claims = parse_objects(&String::from_utf8_lossy(e.as_bytes())).unwrap_or_default();
                broken_entry(path, Some(stamp), reason, claims)
            }
        }
    }
}

/// Whether a file is as indexed: same identity, or the same error looking at it.
fn unchanged(old: &FileEntry, stamp: &Result<Stamp, std::io::Error>) -> bool {
    match (stamp, &old.content) {
        (Ok(s), _) => old.stamp == Some(*s),
        (Err(e), Content::Broken { broken, .. }) => old.stamp.is_none() && broken.reason == unreadable(e),
        (Err(_), Content::Parsed(_)) => false,
    }
}

fn unreadable(e: &std::io::Error) -> String {
    format!("cannot be read: {e}")
}

fn broken_entry(path: &Path, stamp: Option<Stamp>, reason: String, claims: Objects) -> FileEntry {
    tracing::warn!(file = %path.display(), "skipping manifest: {reason}; fix or remove the file");
    let broken = Arc::new(Broken { file: path.to_owned(), reason });
    FileEntry { stamp, content: Content::Broken { broken, claims } }
}

fn rebuild(state: &mut State) {
    state.pods.clear();
    state.nads.clear();
    state.pod_networks.clear();
    state.attachments.clear();
    state.parameters.clear();
    state.unidentified.clear();
    for (_, entry) in &state.files {
        let (objects, broken) = match &entry.content {
            Content::Parsed(o) => (o, None),
            Content::Broken { broken, claims } => {
                if claims.is_empty() {
                    state.unidentified.push(broken.clone());
                }
                (claims, Some(broken))
            }
        };
        // The first file holding an object wins; a broken file's claim answers its reason.
        fn index<T: Clone>(map: &mut HashMap<Key, Slot<T>>, k: Key, v: &T, broken: Option<&Arc<Broken>>) {
            map.entry(k).or_insert_with(|| match broken {
                Some(b) => Slot::Broken(b.clone()),
                None => Slot::Found(v.clone()),
            });
        }
        for p in &objects.pods {
            index(&mut state.pods, key(&p.namespace, &p.name), p, broken);
        }
        for n in &objects.nads {
            index(&mut state.nads, key(&n.namespace, &n.name), n, broken);
        }
        for pn in &objects.pod_networks {
            index(&mut state.pod_networks, key("", pn.name()), pn, broken);
        }
        for a in &objects.attachments {
            index(&mut state.attachments, key(a.namespace(), a.name()), a, broken);
        }
        for p in &objects.parameters {
            let (ns, name) = (p.metadata.namespace.as_deref(), p.metadata.name.as_deref());
            index(&mut state.parameters, key(ns.unwrap_or_default(), name.unwrap_or_default()), p, broken);
        }
    }
}

fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_owned(), name.to_owned())
}

fn is_manifest(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: &str, name: &str) -> String {
        format!("kind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\n")
    }

    fn found_pod(index: &ManifestIndex, ns: &str, name: &str) -> Option<PodInfo> {
        match index.pod(ns, name) {
            Lookup::Found(p) => Some(p),
            _ => None,
        }
    }

    #[test]
    fn lookups_read_only_new_and_changed_files() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..40 {
            std::fs::write(d.path().join(format!("p{i:02}.yaml")), pod("ns", &format!("p{i}"))).unwrap();
        }
        let index = ManifestIndex::new(vec![d.path().to_owned()]);
        assert_eq!(index.reads(), 0, "nothing is read before the first lookup");
        for round in 0..100 {
            assert!(found_pod(&index, "ns", &format!("p{}", round % 40)).is_some());
            assert!(matches!(index.pod("ns", "absent"), Lookup::Missing { .. }));
        }
        assert_eq!(index.reads(), 40, "each file read once for 200 lookups");
        assert_eq!(index.listings(), 1, "the directory listed once: inotify tells nothing changed");

        // A changed file is read again, and only it.
        std::fs::write(d.path().join("p07.yaml"), pod("ns", "renamed")).unwrap();
        assert!(found_pod(&index, "ns", "renamed").is_some());
        assert!(found_pod(&index, "ns", "p7").is_none());
        assert_eq!(index.reads(), 41);
        // A new file likewise; a removed one takes its objects with it, without a read.
        std::fs::write(
            d.path().join("zz.json"),
            r#"{"kind":"Pod","metadata":{"name":"new","namespace":"ns"}}"#,
        )
        .unwrap();
        assert!(found_pod(&index, "ns", "new").is_some());
        assert_eq!(index.reads(), 42);
        std::fs::remove_file(d.path().join("p00.yaml")).unwrap();
        assert!(found_pod(&index, "ns", "p0").is_none());
        assert!(found_pod(&index, "ns", "p1").is_some());
        assert_eq!(index.reads(), 42);
        // Replaced by rename (as editors and ConfigMap updates do), same size: still seen.
        let tmp = d.path().join(".p01.tmp");
        std::fs::write(&tmp, pod("ns", "px")).unwrap();
        std::fs::rename(&tmp, d.path().join("p01.yaml")).unwrap();
        assert!(found_pod(&index, "ns", "px").is_some());
        assert_eq!(index.reads(), 43);
        let listings = index.listings();
        for _ in 0..10 {
            assert!(found_pod(&index, "ns", "px").is_some());
        }
        assert_eq!(index.listings(), listings, "no listing while nothing changes");
    }

    #[test]
    fn symbolic_links_are_compared_at_every_lookup() {
        // The watch sees the directory, not where a link points: a target edited in place
        // elsewhere is still seen, by comparing at every lookup.
        let d = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("p.yaml");
        std::fs::write(&target, pod("ns", "before")).unwrap();
        std::os::unix::fs::symlink(&target, d.path().join("p.yaml")).unwrap();
        let index = ManifestIndex::new(vec![d.path().to_owned()]);
        assert!(found_pod(&index, "ns", "before").is_some());
        std::fs::write(&target, pod("ns", "after")).unwrap();
        assert!(found_pod(&index, "ns", "after").is_some());
        assert!(found_pod(&index, "ns", "before").is_none());
        assert_eq!(index.reads(), 2);
    }

    #[test]
    fn the_first_file_holding_an_object_wins_and_dirs_are_searched_in_order() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let with_annotation =
            |v: &str| format!("kind: Pod\nmetadata: {{name: p, namespace: ns, annotations: {{k: {v}}}}}\n");
        std::fs::write(a.path().join("2.yaml"), with_annotation("a2")).unwrap();
        std::fs::write(a.path().join("1.yaml"), with_annotation("a1")).unwrap();
        std::fs::write(b.path().join("0.yaml"), with_annotation("b0")).unwrap();
        let index = ManifestIndex::new(vec![a.path().to_owned(), b.path().to_owned()]);
        assert_eq!(found_pod(&index, "ns", "p").unwrap().annotations["k"], "a1");
    }

    #[test]
    fn broken_files_are_named_and_the_others_keep_serving() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("good.yaml"), pod("ns", "good")).unwrap();
        // A pod manifest with one stray Latin-1 byte in an annotation.
        let mut latin1 =
            b"kind: Pod\nmetadata:\n  name: latin\n  namespace: ns\n  annotations: {a: caf".to_vec();
        latin1.extend_from_slice(b"\xe9}\n");
        std::fs::write(d.path().join("latin.yaml"), &latin1).unwrap();
        std::fs::write(d.path().join("junk.yaml"), b"\xff\xfe\x00garbage: [").unwrap();
        std::fs::write(d.path().join("evil.yaml"), pod("ns", "../../../../x")).unwrap();
        let index = ManifestIndex::new(vec![d.path().to_owned()]);

        assert!(found_pod(&index, "ns", "good").is_some());
        let Lookup::Broken(b) = index.pod("ns", "latin") else { panic!("latin is broken") };
        assert_eq!(b.file, d.path().join("latin.yaml"));
        assert!(b.reason.contains("not valid UTF-8"), "{}", b.reason);
        let Lookup::Missing { unreadable } = index.pod("ns", "other") else { panic!("other is missing") };
        let files: Vec<_> = unreadable.iter().map(|b| b.file.file_name().unwrap().to_owned()).collect();
        assert_eq!(files, ["evil.yaml", "junk.yaml"]);
        assert!(unreadable[0].reason.contains("DNS-1123"), "{}", unreadable[0].reason);

        // Fixed in place: served again.
        std::fs::write(d.path().join("latin.yaml"), pod("ns", "latin")).unwrap();
        assert!(found_pod(&index, "ns", "latin").is_some());
    }

    #[test]
    fn every_usable_nad_is_listed_sorted_and_changes_are_seen() {
        let d = tempfile::tempdir().unwrap();
        let nad = |ns: &str, name: &str| {
            format!("kind: NetworkAttachmentDefinition\nmetadata: {{name: {name}, namespace: {ns}}}\n")
        };
        std::fs::write(d.path().join("a.yaml"), nad("zz", "blue")).unwrap();
        std::fs::write(d.path().join("b.yaml"), format!("{}---\n{}", nad("aa", "red"), nad("aa", "blue")))
            .unwrap();
        std::fs::write(d.path().join("c.yaml"), nad("zz", "blue").replace("kind", "\u{0}kind")).unwrap();
        let mut broken = nad("aa", "green").into_bytes();
        broken.extend_from_slice(b"# \xff\n");
        std::fs::write(d.path().join("d.yaml"), broken).unwrap();
        std::fs::write(d.path().join("p.yaml"), pod("aa", "pod")).unwrap();
        let index = ManifestIndex::new(vec![d.path().to_owned()]);
        let names = |index: &ManifestIndex| -> Vec<String> {
            index.nads().into_iter().map(|n| format!("{}/{}", n.namespace, n.name)).collect()
        };
        assert_eq!(names(&index), ["aa/blue", "aa/red", "zz/blue"], "no pods, no broken file's NAD");
        std::fs::remove_file(d.path().join("a.yaml")).unwrap();
        assert_eq!(names(&index), ["aa/blue", "aa/red"]);
    }

    #[test]
    fn missing_and_unreadable_directories_hold_nothing() {
        let d = tempfile::tempdir().unwrap();
        let later = d.path().join("later");
        let index = ManifestIndex::new(vec![later.clone()]);
        assert_eq!(index.pod("ns", "p"), Lookup::Missing { unreadable: vec![] });
        std::fs::create_dir(&later).unwrap();
        std::fs::write(later.join("p.yaml"), pod("ns", "p")).unwrap();
        assert!(found_pod(&index, "ns", "p").is_some(), "a directory made later is seen");
    }
}
