//! Whether a container that no record of plexus lists is alive (pure: what the runtime said
//! and which network namespaces exist in, verdicts out).
//!
//! Pods attached before plexus was installed hold addresses and result cache files with no
//! record of plexus; releasing a live pod's address hands it to the next pod. So doctor asks:
//!
//! 1. the runtime (CRI `ListPodSandbox` on `--runtime-socket`): a sandbox it lists is alive
//!    (in any state: a NOTREADY sandbox's network may still be torn down by its DEL). Its answer
//!    is used only when it lists every recorded pod whose namespace is alive; otherwise it is
//!    not the runtime of the node's kubelet (another containerd, say) and is not asked;
//! 2. the network namespaces the runtime's result cache names for the container (libcni writes
//!    `netns` in each cache file since v1.2, and results name it as their interfaces'
//!    `sandbox`): a container one of whose namespaces exists is alive, even when the runtime
//!    does not list it (a container of another runtime sharing the CNI directories).
//!
//! A container neither lists nor names is gone when the runtime was asked, and unknown
//! otherwise: what only a live container could still need is then never freed.

use std::collections::{BTreeMap, BTreeSet};

use super::views::{ContainerView, ResultCacheView};

/// What the container runtime said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeView {
    /// The IDs of the sandboxes it lists (the container IDs of their CNI calls).
    Listed { socket: String, sandboxes: BTreeSet<String> },
    /// It could not be asked, and why.
    Unreachable { socket: String, why: String },
}

impl Default for RuntimeView {
    fn default() -> Self {
        RuntimeView::Unreachable { socket: String::new(), why: "not asked".into() }
    }
}

/// Whether a container is alive, and how doctor knows (for people).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Alive(String),
    Gone(String),
    Unknown(String),
}

/// The judge of containers without a record, for one snapshot.
#[derive(Debug)]
pub struct Liveness<'a> {
    /// The runtime's sandboxes, when it answered and its answer is trusted.
    sandboxes: Option<&'a BTreeSet<String>>,
    /// The network namespaces the result cache names, by container: (path, exists).
    namespaces: BTreeMap<&'a str, BTreeSet<(&'a str, bool)>>,
    /// How liveness is decided, for people.
    pub method: String,
}

impl<'a> Liveness<'a> {
    pub fn new(runtime: &'a RuntimeView, records: &[ContainerView], caches: &'a [ResultCacheView]) -> Self {
        let mut namespaces: BTreeMap<&str, BTreeSet<(&str, bool)>> = BTreeMap::new();
        for c in caches {
            let known = namespaces.entry(c.container_id.as_str()).or_default();
            known.extend(c.namespaces.iter().map(|n| (n.path.as_str(), n.alive)));
        }
        const FALLBACK: &str = "liveness by network namespace (those the runtime's result cache names); \
                                an address of a container none is named for is not freed";
        let (sandboxes, method) = match runtime {
            RuntimeView::Listed { socket, sandboxes } => {
                let unlisted = records.iter().find(|r| r.netns_alive && !sandboxes.contains(&r.container_id));
                match unlisted {
                    None => (
                        Some(sandboxes),
                        format!(
                            "runtime: {} sandbox(es) listed by {socket}; a container it does not list is alive \
                             while a network namespace its result cache names exists",
                            sandboxes.len()
                        ),
                    ),
                    Some(r) => (
                        None,
                        format!(
                            "the runtime at {socket} does not list sandbox {} of a recorded pod whose network \
                             namespace is alive: it is not the node's kubelet's runtime (see --runtime-socket), \
                             {FALLBACK}",
                            r.container_id
                        ),
                    ),
                }
            }
            RuntimeView::Unreachable { socket, why } => {
                (None, format!("no runtime reachable at {socket} ({why}): {FALLBACK}"))
            }
        };
        Liveness { sandboxes, namespaces, method }
    }

    /// Whether the runtime was asked and its answer is used.
    pub fn runtime_asked(&self) -> bool {
        self.sandboxes.is_some()
    }

    pub fn verdict(&self, container_id: &str) -> Verdict {
        if self.sandboxes.is_some_and(|s| s.contains(container_id)) {
            return Verdict::Alive("the runtime lists its sandbox".into());
        }
        let known = self.namespaces.get(container_id);
        if let Some((path, _)) = known.into_iter().flatten().find(|(_, alive)| *alive) {
            return Verdict::Alive(format!("its network namespace {path} exists"));
        }
        let gone: Vec<&str> = known.into_iter().flatten().map(|(path, _)| *path).collect();
        let gone = (!gone.is_empty()).then(|| format!("its network namespace {} is gone", gone.join(", ")));
        match (self.sandboxes.is_some(), gone) {
            (true, Some(gone)) => Verdict::Gone(format!("the runtime does not list its sandbox and {gone}")),
            (true, None) => Verdict::Gone("the runtime does not list its sandbox".into()),
            (false, Some(gone)) => Verdict::Gone(gone),
            (false, None) => Verdict::Unknown(
                "whether its container is alive is unknown (no runtime answered, and no result cache names \
                 its network namespace)"
                    .into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::views::NamespaceView;
    use super::*;

    fn record(cid: &str, alive: bool) -> ContainerView {
        ContainerView {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: format!("/run/netns/{cid}"),
            netns_alive: alive,
            cni_args: String::new(),
            attachment_ifnames: vec!["eth0".into()],
            pod: None,
        }
    }

    fn cache(cid: &str, namespaces: &[(&str, bool)]) -> ResultCacheView {
        ResultCacheView {
            path: format!("/var/lib/cni/results/cluster-{cid}-eth0").into(),
            container_id: cid.into(),
            ifname: "eth0".into(),
            network: "cluster".into(),
            namespaces: namespaces
                .iter()
                .map(|(p, a)| NamespaceView { path: (*p).into(), alive: *a })
                .collect(),
        }
    }

    fn listed(ids: &[&str]) -> RuntimeView {
        RuntimeView::Listed {
            socket: "/run/containerd/containerd.sock".into(),
            sandboxes: ids.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn unreachable() -> RuntimeView {
        RuntimeView::Unreachable { socket: "/run/c.sock".into(), why: "no such file".into() }
    }

    fn is_alive(v: &Verdict) -> bool {
        matches!(v, Verdict::Alive(_))
    }

    #[test]
    fn the_runtime_decides_with_a_live_namespace_as_the_last_word() {
        let runtime = listed(&["live", "rec"]);
        let records = [record("rec", true), record("old", false)];
        let caches =
            [cache("other-runtime", &[("/run/netns/x", true)]), cache("gone", &[("/run/netns/g", false)])];
        let l = Liveness::new(&runtime, &records, &caches);
        assert!(l.runtime_asked());
        assert!(
            l.method.starts_with("runtime: 2 sandbox(es) listed by /run/containerd/containerd.sock"),
            "{}",
            l.method
        );
        assert_eq!(l.verdict("live"), Verdict::Alive("the runtime lists its sandbox".into()));
        assert_eq!(
            l.verdict("other-runtime"),
            Verdict::Alive("its network namespace /run/netns/x exists".into())
        );
        assert_eq!(
            l.verdict("gone"),
            Verdict::Gone(
                "the runtime does not list its sandbox and its network namespace /run/netns/g is gone".into()
            )
        );
        assert_eq!(l.verdict("never-seen"), Verdict::Gone("the runtime does not list its sandbox".into()));
    }

    #[test]
    fn without_a_runtime_the_namespaces_decide_and_the_rest_is_unknown() {
        let runtime = unreachable();
        let caches = [
            cache("live", &[("/run/netns/a", false), ("/run/netns/b", true)]),
            cache("gone", &[("/run/netns/g", false)]),
            cache("gone", &[("/proc/1234/ns/net", false)]),
            cache("nameless", &[]),
        ];
        let l = Liveness::new(&runtime, &[], &caches);
        assert!(!l.runtime_asked());
        assert!(l.method.starts_with(
            "no runtime reachable at /run/c.sock (no such file): liveness by network namespace"
        ));
        assert_eq!(l.verdict("live"), Verdict::Alive("its network namespace /run/netns/b exists".into()));
        assert_eq!(
            l.verdict("gone"),
            Verdict::Gone("its network namespace /proc/1234/ns/net, /run/netns/g is gone".into())
        );
        assert!(matches!(l.verdict("nameless"), Verdict::Unknown(_)));
        assert!(matches!(l.verdict("never-seen"), Verdict::Unknown(_)));
    }

    #[test]
    fn a_runtime_that_misses_a_live_recorded_pod_is_not_the_kubelets_and_is_not_used() {
        let runtime = listed(&["x"]);
        // A recorded pod whose namespace is gone need not be listed (the runtime removed it).
        let l = Liveness::new(&runtime, &[record("dead", false)], &[]);
        assert!(l.runtime_asked());
        let l = Liveness::new(&runtime, &[record("rec", true)], &[]);
        assert!(!l.runtime_asked());
        assert!(l.method.contains("does not list sandbox rec of a recorded pod"), "{}", l.method);
        assert!(l.method.contains("--runtime-socket"), "{}", l.method);
        assert!(matches!(l.verdict("never-seen"), Verdict::Unknown(_)));
        assert!(!is_alive(&l.verdict("x")), "an unused runtime's list says nothing");
    }
}
