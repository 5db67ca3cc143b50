//! What is a leftover, given what the node holds and what the records say (pure: snapshots in,
//! leftovers out).
//!
//! The records explain everything else: a container record (`<state-dir>/attachments/`)
//! explains its attachments (container ID + the runtime's interface, and each attachment's
//! interface); those explain the port mapping and bandwidth records, the VF records and the
//! IPAM allocations of their attachments and the native bridge's nftables chains (named after
//! their attachment); the port mapping and bandwidth records explain the map entries (and
//! flows) they list. Only a container record is judged by the node itself: it
//! is a leftover once its pod's network namespace is gone.
//!
//! What is keyed by a container no record lists (an address, a result cache file of the
//! runtime, or plexus's own records after a loss of state) is judged by that container's
//! liveness ([`super::liveness`]): nothing of a live container is a leftover; an address of a
//! container whose liveness is unknown is listed as unverified and never freed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use plexus_ebpf_common::shape::ShapeKey;
use plexus_ebpf_common::Endpoint;
use serde::Serialize;

use super::liveness::{Liveness, RuntimeView, Verdict};
pub use super::views::{ContainerView, MultusCacheView, NamespaceView, ResultCacheView};
use crate::native::bridge::nft::{chain_name, Guard};

/// A port mapping or bandwidth record: its attachment and the map keys it installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataplaneRecordView<K> {
    pub container_id: String,
    pub ifname: String,
    /// Who holds it, for people.
    pub owner: String,
    pub keys: Vec<K>,
}

/// A key of the port mapping maps (forward entry or counters) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingView {
    pub host: Endpoint,
    pub text: String,
}

/// The flows tracked for one host endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowsView {
    pub host: Endpoint,
    pub text: String,
    pub count: usize,
}

/// A key of the bandwidth limits map and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitView {
    pub key: ShapeKey,
    pub text: String,
}

/// One host-local allocation file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationView {
    /// The network's directory (`<dataDir>/<network>`).
    pub dir: PathBuf,
    /// The file name (the address).
    pub file: String,
    /// The file's content, as found: `<containerID>\r\n<ifname>`, or the ID alone.
    pub content: String,
}

impl AllocationView {
    /// The container ID and interface the file names (the interface is absent in files of
    /// older host-local versions).
    pub fn owner(&self) -> (&str, Option<&str>) {
        let mut lines = self.content.split("\r\n").map(str::trim);
        let container_id = lines.next().unwrap_or_default();
        (container_id, lines.next().filter(|i| !i.is_empty()))
    }
}

/// A temporary file of an atomic write (`.<name>.<pid>.tmp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TempFileView {
    pub path: PathBuf,
    pub pid: u32,
    /// Whether a process with that ID runs (it may be writing the file now).
    pub pid_alive: bool,
}

/// An SR-IOV VF record (`<state-dir>/sriov/<pci>.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfView {
    pub pci: String,
    pub container_id: String,
    pub ifname: String,
    pub owner: String,
}

/// A link of the node's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkView {
    pub index: u32,
    pub name: String,
    pub kind: Option<String>,
}

/// A chain of the native bridge's nftables tables (`ipMasq`, `macspoofchk`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftChainView {
    pub guard: Guard,
    pub name: String,
    /// Its comment: "<network> <container ID> <interface>" when plexus made it.
    pub comment: Option<String>,
}

/// Everything doctor read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub records: Vec<ContainerView>,
    pub portmap_records: Vec<DataplaneRecordView<Endpoint>>,
    pub bandwidth_records: Vec<DataplaneRecordView<ShapeKey>>,
    /// Host endpoints of the forward, counter and socket maps (each once).
    pub mappings: Vec<MappingView>,
    pub flows: Vec<FlowsView>,
    pub limits: Vec<LimitView>,
    pub allocations: Vec<AllocationView>,
    pub temp_files: Vec<TempFileView>,
    pub vfs: Vec<VfView>,
    pub links: Vec<LinkView>,
    pub nft_chains: Vec<NftChainView>,
    pub result_caches: Vec<ResultCacheView>,
    /// Multus's caches of the containers it attached.
    pub multus_caches: Vec<MultusCacheView>,
    /// What the runtime said (read last, with the records: it explains).
    pub runtime: RuntimeView,
}

/// The kind of a leftover, as `--json` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A container record whose network namespace is gone.
    RecordWithoutNetns,
    /// Multus's cache of a container it attached, no record lists, and that is gone.
    MultusCache,
    /// A port mapping record of an attachment no container record lists.
    PortmapRecord,
    /// A bandwidth record of an attachment no container record lists.
    BandwidthRecord,
    /// A port mapping in the maps that no record lists.
    PortmapMapping,
    /// Flows of a port mapping that no record lists.
    PortmapFlows,
    /// A bandwidth limit in the map that no record lists.
    BandwidthLimit,
    /// A host-local allocation of an attachment no container record lists, whose container is
    /// gone.
    IpamAllocation,
    /// A host-local allocation of a container no record lists, whose liveness is unknown: never
    /// freed.
    IpamAllocationUnverified,
    /// A result cache file of the runtime whose container is gone.
    ResultCache,
    /// A temporary file whose writer is gone.
    TempFile,
    /// An SR-IOV VF claimed by an attachment no container record lists.
    VfRecord,
    /// A link under plexus's temporary name (`plx` + 8 hex digits) in the node's namespace.
    Link,
    /// A native bridge's nftables chain of an attachment no container record lists.
    NftChain,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::RecordWithoutNetns => "record-without-netns",
            Kind::MultusCache => "multus-cache",
            Kind::PortmapRecord => "portmap-record",
            Kind::BandwidthRecord => "bandwidth-record",
            Kind::PortmapMapping => "portmap-mapping",
            Kind::PortmapFlows => "portmap-flows",
            Kind::BandwidthLimit => "bandwidth-limit",
            Kind::IpamAllocation => "ipam-allocation",
            Kind::IpamAllocationUnverified => "ipam-allocation-unverified",
            Kind::ResultCache => "result-cache",
            Kind::TempFile => "temp-file",
            Kind::VfRecord => "vf-record",
            Kind::Link => "link",
            Kind::NftChain => "nft-chain",
        }
    }
}

/// What removing a leftover takes (also its identity between two looks at the node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// The agent's DEL of the runtime attachment (see [`super::fix`]).
    AgentDel {
        container_id: String,
        ifname: String,
        netns: String,
        cni_args: String,
    },
    PortmapRecord {
        container_id: String,
        ifname: String,
    },
    BandwidthRecord {
        container_id: String,
        ifname: String,
    },
    PortmapMapping(Endpoint),
    PortmapFlows(Endpoint),
    BandwidthLimit(ShapeKey),
    IpamAllocation {
        dir: PathBuf,
        file: String,
        content: String,
    },
    /// Nothing: what it names may be a live container's (see [`Kind::IpamAllocationUnverified`]).
    Unverified(PathBuf),
    ResultCache(PathBuf),
    /// A delegates file of Multus that cannot be read.
    MultusCacheFile(PathBuf),
    TempFile(PathBuf),
    VfRecord {
        pci: String,
    },
    Link {
        index: u32,
        name: String,
    },
    NftChain {
        guard: Guard,
        name: String,
    },
}

impl Fix {
    /// The file of an address's fix (that of [`Fix::Unverified`] when its container's liveness
    /// is not decided).
    pub fn allocation_path(&self) -> Option<PathBuf> {
        match self {
            Fix::IpamAllocation { dir, file, .. } => Some(dir.join(file)),
            _ => None,
        }
    }
}

/// One thing the node holds that no record explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub kind: Kind,
    /// For people: what it is and why it is a leftover.
    pub what: String,
    pub fix: Fix,
}

/// Whether `name` is one of plexus's temporary link names: "plx" and 8 lowercase hex digits
/// (see `netlink::temp_name`).
pub fn is_temp_link_name(name: &str) -> bool {
    name.strip_prefix("plx").is_some_and(|hex| {
        hex.len() == 8 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The attachments the container records list: (container ID, interface), with both the
/// runtime's interface and each attachment's.
fn explained_attachments(records: &[ContainerView]) -> BTreeSet<(&str, &str)> {
    let mut out = BTreeSet::new();
    for r in records {
        out.insert((r.container_id.as_str(), r.ifname.as_str()));
        for i in &r.attachment_ifnames {
            out.insert((r.container_id.as_str(), i.as_str()));
        }
    }
    out
}

/// How the liveness of containers without a record is decided in `s`, for people.
pub fn liveness_method(s: &Snapshot) -> String {
    Liveness::new(&s.runtime, &s.records, &s.result_caches).method
}

/// The container ID and interface a native bridge chain's comment names ("<network>
/// <container ID> <interface>"), when its name is theirs.
fn chain_owner(c: &NftChainView) -> Option<&str> {
    let mut words = c.comment.as_deref()?.rsplit(' ');
    let (ifname, cid) = (words.next()?, words.next()?);
    (chain_name(c.guard, cid, ifname) == c.name).then_some(cid)
}

/// Everything in `s` that no record explains, in the order of [`Kind`].
pub fn leftovers(s: &Snapshot) -> Vec<Leftover> {
    let attachments = explained_attachments(&s.records);
    let containers: BTreeSet<&str> = s.records.iter().map(|r| r.container_id.as_str()).collect();
    let liveness = Liveness::new(&s.runtime, &s.records, &s.result_caches);
    // A container no record lists is alive: nothing of it is a leftover (plexus's own records
    // of it too: its state was lost, and its pod still uses what they hold).
    let unrecorded_alive =
        |cid: &str| !containers.contains(cid) && matches!(liveness.verdict(cid), Verdict::Alive(_));
    let listed = |cid: &str, ifname: &str| attachments.contains(&(cid, ifname)) || unrecorded_alive(cid);
    let mut out = Vec::new();

    for r in s.records.iter().filter(|r| !r.netns_alive) {
        let pod = r.pod.as_ref().map(|p| format!("pod {p}, ")).unwrap_or_default();
        let netns = if r.netns.is_empty() { "(none recorded)" } else { &r.netns };
        out.push(Leftover {
            kind: Kind::RecordWithoutNetns,
            what: format!(
                "record of {pod}container {} interface {}: its network namespace {netns} is gone",
                r.container_id, r.ifname
            ),
            fix: Fix::AgentDel {
                container_id: r.container_id.clone(),
                ifname: r.ifname.clone(),
                netns: r.netns.clone(),
                cni_args: r.cni_args.clone(),
            },
        });
    }
    // Released by the agent's DEL, which runs the DELs Multus recorded (Multus's result
    // caches of the container among what they need: not listed on their own below).
    let multus: BTreeSet<&str> = s.multus_caches.iter().map(|m| m.container_id.as_str()).collect();
    for m in s.multus_caches.iter().filter(|m| !containers.contains(m.container_id.as_str())) {
        // One that cannot be read is of no use to anyone, its container alive or not.
        let verdict = match m.unreadable {
            Some(_) => Verdict::Gone("it cannot be read".into()),
            None => liveness.verdict(&m.container_id),
        };
        if let Verdict::Gone(why) = verdict {
            let networks = match &m.unreadable {
                Some(e) => format!("unreadable: {e}"),
                None => format!("networks {}", m.networks.join(", ")),
            };
            out.push(Leftover {
                kind: Kind::MultusCache,
                what: format!(
                    "Multus's cache {} of container {} ({networks}): no container record lists it, and {why}",
                    m.path.display(),
                    m.container_id
                ),
                // What cannot be read releases nothing: only the file goes.
                fix: match m.unreadable {
                    Some(_) => Fix::MultusCacheFile(m.path.clone()),
                    None => Fix::AgentDel {
                        container_id: m.container_id.clone(),
                        ifname: m.ifname.clone(),
                        netns: String::new(),
                        cni_args: m.cni_args.clone(),
                    },
                },
            });
        }
    }
    for r in s.portmap_records.iter().filter(|r| !listed(&r.container_id, &r.ifname)) {
        out.push(Leftover {
            kind: Kind::PortmapRecord,
            what: format!("port mappings of {}: no container record lists the attachment", r.owner),
            fix: Fix::PortmapRecord { container_id: r.container_id.clone(), ifname: r.ifname.clone() },
        });
    }
    for r in s.bandwidth_records.iter().filter(|r| !listed(&r.container_id, &r.ifname)) {
        out.push(Leftover {
            kind: Kind::BandwidthRecord,
            what: format!("bandwidth limits of {}: no container record lists the attachment", r.owner),
            fix: Fix::BandwidthRecord { container_id: r.container_id.clone(), ifname: r.ifname.clone() },
        });
    }
    // Entries of every record count as explained, an orphan record's too: they go with it.
    let hosts: BTreeSet<Endpoint> = s.portmap_records.iter().flat_map(|r| r.keys.iter().copied()).collect();
    for m in s.mappings.iter().filter(|m| !hosts.contains(&m.host)) {
        out.push(Leftover {
            kind: Kind::PortmapMapping,
            what: format!("port mapping {}: no record lists it", m.text),
            fix: Fix::PortmapMapping(m.host),
        });
    }
    for f in s.flows.iter().filter(|f| !hosts.contains(&f.host)) {
        out.push(Leftover {
            kind: Kind::PortmapFlows,
            what: format!("{} flow(s) of port mapping {}: no record lists the mapping", f.count, f.text),
            fix: Fix::PortmapFlows(f.host),
        });
    }
    let limits: BTreeSet<ShapeKey> =
        s.bandwidth_records.iter().flat_map(|r| r.keys.iter().copied()).collect();
    for l in s.limits.iter().filter(|l| !limits.contains(&l.key)) {
        out.push(Leftover {
            kind: Kind::BandwidthLimit,
            what: format!("bandwidth limit on {}: no record lists it", l.text),
            fix: Fix::BandwidthLimit(l.key),
        });
    }
    for a in &s.allocations {
        let (cid, ifname) = a.owner();
        let explained = match ifname {
            Some(ifname) => attachments.contains(&(cid, ifname)),
            None => containers.contains(cid),
        };
        if explained {
            continue;
        }
        let path = a.dir.join(&a.file);
        let held = format!(
            "address {} ({}) held for container {cid}{}: no container record lists it",
            a.file,
            path.display(),
            ifname.map(|i| format!(" interface {i}")).unwrap_or_default()
        );
        // A recorded container's record is the truth of its attachments; the others' liveness.
        let verdict = if containers.contains(cid) {
            Verdict::Gone("its record does not list the interface".into())
        } else {
            liveness.verdict(cid)
        };
        match verdict {
            Verdict::Alive(_) => {}
            Verdict::Gone(why) => out.push(Leftover {
                kind: Kind::IpamAllocation,
                what: format!("{held}, and {why}"),
                fix: Fix::IpamAllocation {
                    dir: a.dir.clone(),
                    file: a.file.clone(),
                    content: a.content.clone(),
                },
            }),
            Verdict::Unknown(why) => out.push(Leftover {
                kind: Kind::IpamAllocationUnverified,
                what: format!("{held}, but {why}: not freed"),
                fix: Fix::Unverified(path),
            }),
        }
    }
    for c in s.result_caches.iter().filter(|c| {
        !containers.contains(c.container_id.as_str()) && !multus.contains(c.container_id.as_str())
    }) {
        // Unknown: not listed (a small file, harmless; only a live container's DEL needs it).
        if let Verdict::Gone(why) = liveness.verdict(&c.container_id) {
            out.push(Leftover {
                kind: Kind::ResultCache,
                what: format!(
                    "result cache {} of container {} interface {} on network {}: no container record lists it, \
                     and {why}",
                    c.path.display(),
                    c.container_id,
                    c.ifname,
                    c.network
                ),
                fix: Fix::ResultCache(c.path.clone()),
            });
        }
    }
    for t in s.temp_files.iter().filter(|t| !t.pid_alive) {
        out.push(Leftover {
            kind: Kind::TempFile,
            what: format!("temporary file {}: its writer (process {}) is gone", t.path.display(), t.pid),
            fix: Fix::TempFile(t.path.clone()),
        });
    }
    for v in s.vfs.iter().filter(|v| !listed(&v.container_id, &v.ifname)) {
        out.push(Leftover {
            kind: Kind::VfRecord,
            what: format!("VF {} claimed by {}: no container record lists the attachment", v.pci, v.owner),
            fix: Fix::VfRecord { pci: v.pci.clone() },
        });
    }
    for l in s.links.iter().filter(|l| is_temp_link_name(&l.name)) {
        out.push(Leftover {
            kind: Kind::Link,
            what: format!(
                "link {} ({}) in the node's namespace under a temporary name: no attachment ends there",
                l.name,
                l.kind.as_deref().unwrap_or("unknown kind")
            ),
            fix: Fix::Link { index: l.index, name: l.name.clone() },
        });
    }
    let owned: BTreeSet<String> = attachments
        .iter()
        .flat_map(|(cid, ifname)| Guard::ALL.map(|guard| chain_name(guard, cid, ifname)))
        .collect();
    for c in s
        .nft_chains
        .iter()
        .filter(|c| !owned.contains(&c.name) && !chain_owner(c).is_some_and(unrecorded_alive))
    {
        let family = c.guard.family().name();
        out.push(Leftover {
            kind: Kind::NftChain,
            what: format!(
                "nftables chain {family} {} {} ({}): no container record lists its attachment",
                crate::native::bridge::nft::TABLE,
                c.name,
                c.comment.as_deref().unwrap_or("no comment")
            ),
            fix: Fix::NftChain { guard: c.guard, name: c.name.clone() },
        });
    }
    out
}

/// The leftovers of `later` that `earlier` found too: what stayed between two looks at the node
/// (an ADD in flight holds some of these for a moment; a leftover stays).
pub fn still_there(earlier: &[Leftover], later: Vec<Leftover>) -> Vec<Leftover> {
    later.into_iter().filter(|l| earlier.iter().any(|e| e.fix == l.fix)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(port: u16) -> Endpoint {
        Endpoint::new([0, 0, 0xffff, 0x0a00_0001u32.to_be()], port.to_be(), 6)
    }

    fn shape(ifindex: u32) -> ShapeKey {
        ShapeKey { ifindex, hook: 0, pad: 0, mac: [0; 6] }
    }

    fn record(cid: &str, alive: bool, attachments: &[&str]) -> ContainerView {
        ContainerView {
            container_id: cid.into(),
            ifname: "eth0".into(),
            netns: format!("/run/netns/{cid}"),
            netns_alive: alive,
            cni_args: "K8S_POD_NAME=p".into(),
            attachment_ifnames: attachments.iter().map(|s| (*s).to_owned()).collect(),
            pod: Some(format!("default/{cid}")),
        }
    }

    fn dataplane<K>(cid: &str, ifname: &str, keys: Vec<K>) -> DataplaneRecordView<K> {
        DataplaneRecordView {
            container_id: cid.into(),
            ifname: ifname.into(),
            owner: format!("{cid}/{ifname}"),
            keys,
        }
    }

    fn allocation(file: &str, content: &str) -> AllocationView {
        AllocationView { dir: "/ipam/net".into(), file: file.into(), content: content.into() }
    }

    fn cache(cid: &str, netns: &str, alive: bool) -> ResultCacheView {
        ResultCacheView {
            path: format!("/var/lib/cni/results/cluster-{cid}-eth0").into(),
            container_id: cid.into(),
            ifname: "eth0".into(),
            network: "cluster".into(),
            namespaces: vec![NamespaceView { path: netns.into(), alive }],
        }
    }

    fn runtime(ids: &[&str]) -> RuntimeView {
        RuntimeView::Listed {
            socket: "/run/cri.sock".into(),
            sandboxes: ids.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn no_runtime() -> RuntimeView {
        RuntimeView::Unreachable { socket: "/run/cri.sock".into(), why: "absent".into() }
    }

    fn kinds(s: &Snapshot) -> Vec<Kind> {
        leftovers(s).into_iter().map(|l| l.kind).collect()
    }

    /// A node with one healthy pod holding one of everything.
    fn healthy() -> Snapshot {
        Snapshot {
            records: vec![record("c1", true, &["eth0", "net1"])],
            portmap_records: vec![dataplane("c1", "net1", vec![host(8080)])],
            bandwidth_records: vec![dataplane("c1", "net1", vec![shape(7)])],
            mappings: vec![MappingView { host: host(8080), text: "10.0.0.1:8080/tcp".into() }],
            flows: vec![FlowsView { host: host(8080), text: "10.0.0.1:8080/tcp".into(), count: 2 }],
            limits: vec![LimitView { key: shape(7), text: "ifindex 7".into() }],
            allocations: vec![allocation("10.1.0.2", "c1\r\nnet1"), allocation("10.88.0.2", "c1\r\neth0")],
            temp_files: vec![TempFileView { path: "/s/.x.json.1.tmp".into(), pid: 1, pid_alive: true }],
            vfs: vec![VfView {
                pci: "0000:03:02.1".into(),
                container_id: "c1".into(),
                ifname: "net1".into(),
                owner: "c1".into(),
            }],
            links: vec![
                LinkView { index: 1, name: "lo".into(), kind: None },
                LinkView { index: 5, name: "veth1234abcd".into(), kind: Some("veth".into()) },
                LinkView { index: 6, name: "plxnotours".into(), kind: Some("dummy".into()) },
            ],
            nft_chains: vec![
                NftChainView {
                    guard: Guard::Masquerade,
                    name: chain_name(Guard::Masquerade, "c1", "eth0"),
                    comment: Some("cluster c1 eth0".into()),
                },
                NftChainView {
                    guard: Guard::SpoofCheck,
                    name: chain_name(Guard::SpoofCheck, "c1", "net1"),
                    comment: Some("blue c1 net1".into()),
                },
            ],
            result_caches: vec![cache("c1", "/run/netns/c1", true)],
            multus_caches: Vec::new(),
            runtime: runtime(&["c1"]),
        }
    }

    /// A pod Multus attached before plexus took the node over: its cache, its runs and its
    /// addresses, no record of plexus.
    fn taken_over(alive: bool) -> Snapshot {
        Snapshot {
            allocations: vec![allocation("10.1.0.9", "m1\r\nnet1")],
            result_caches: vec![
                ResultCacheView {
                    path: "/var/lib/cni/multus/results/blue-m1-net1".into(),
                    ..cache("m1", "/run/netns/m1", alive)
                },
                ResultCacheView {
                    path: "/var/lib/cni/multus/results/cluster-m1-eth0".into(),
                    ..cache("m1", "/run/netns/m1", alive)
                },
            ],
            multus_caches: vec![MultusCacheView {
                path: "/var/lib/cni/multus/m1".into(),
                container_id: "m1".into(),
                networks: vec!["cluster".into(), "default/blue".into()],
                unreadable: None,
                ifname: "eth0".into(),
                cni_args: "K8S_POD_NAME=m".into(),
            }],
            runtime: runtime(if alive { &["m1"] } else { &[] }),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_healthy_pod_explains_everything_it_holds() {
        assert_eq!(leftovers(&healthy()), []);
        assert_eq!(leftovers(&Snapshot::default()), []);
    }

    #[test]
    fn a_gone_container_multus_attached_is_released_by_the_agents_del_before_its_addresses() {
        assert_eq!(leftovers(&taken_over(true)), []);
        let found = leftovers(&taken_over(false));
        // Multus's runs are what the DEL needs: not listed on their own; the address stays
        // listed, after the DEL that releases it (a fix of what is gone is fine).
        assert_eq!(
            found.iter().map(|l| l.kind).collect::<Vec<_>>(),
            [Kind::MultusCache, Kind::IpamAllocation]
        );
        assert_eq!(
            found[0].fix,
            Fix::AgentDel {
                container_id: "m1".into(),
                ifname: "eth0".into(),
                netns: String::new(),
                cni_args: "K8S_POD_NAME=m".into()
            }
        );
        assert!(found[0].what.contains("networks cluster, default/blue"), "{}", found[0].what);
        // Without its delegates file, Multus's runs are plain result caches of a gone container.
        let mut s = taken_over(false);
        s.multus_caches.clear();
        assert_eq!(kinds(&s), [Kind::IpamAllocation, Kind::ResultCache, Kind::ResultCache]);
        // One that cannot be read releases nothing: the file is removed alone.
        let mut s = taken_over(true);
        s.multus_caches[0].unreadable = Some("not a list".into());
        let found = leftovers(&s);
        assert_eq!(found[0].fix, Fix::MultusCacheFile("/var/lib/cni/multus/m1".into()));
        assert!(found[0].what.contains("unreadable: not a list"), "{}", found[0].what);
        // A container plexus holds a record of is judged by its record.
        let mut s = taken_over(false);
        s.records = vec![record("m1", true, &["eth0"])];
        assert!(!kinds(&s).contains(&Kind::MultusCache));
    }

    #[test]
    fn a_record_whose_namespace_is_gone_is_torn_down_by_the_agent() {
        let mut s = healthy();
        s.records[0].netns_alive = false;
        let found = leftovers(&s);
        // Only the record: what it explains goes with its DEL.
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::RecordWithoutNetns);
        assert_eq!(
            found[0].fix,
            Fix::AgentDel {
                container_id: "c1".into(),
                ifname: "eth0".into(),
                netns: "/run/netns/c1".into(),
                cni_args: "K8S_POD_NAME=p".into()
            }
        );
        assert!(found[0].what.contains("pod default/c1") && found[0].what.contains("/run/netns/c1 is gone"));
        s.records[0].netns.clear();
        assert!(leftovers(&s)[0].what.contains("(none recorded)"));
    }

    #[test]
    fn without_the_container_record_everything_of_a_gone_pod_is_a_leftover() {
        let mut s = healthy();
        s.records.clear();
        s.runtime = runtime(&[]);
        s.result_caches[0].namespaces[0].alive = false;
        // The map entries and flows are the orphan records' to remove, not listed twice.
        assert_eq!(
            kinds(&s),
            [
                Kind::PortmapRecord,
                Kind::BandwidthRecord,
                Kind::IpamAllocation,
                Kind::IpamAllocation,
                Kind::ResultCache,
                Kind::VfRecord,
                Kind::NftChain,
                Kind::NftChain
            ]
        );
    }

    #[test]
    fn nothing_of_a_live_container_without_a_record_is_a_leftover() {
        // Alive by the runtime, by its namespace alone, or by both: its state was lost (or it
        // predates plexus), and its pod still uses what it holds.
        for (listed, netns_alive) in [(true, true), (true, false), (false, true)] {
            let mut s = healthy();
            s.records.clear();
            s.runtime = runtime(if listed { &["c1"] } else { &[] });
            s.result_caches[0].namespaces[0].alive = netns_alive;
            assert_eq!(leftovers(&s), [], "listed {listed}, namespace alive {netns_alive}");
        }
        // The same without a runtime to ask: its namespace decides.
        let mut s = healthy();
        s.records.clear();
        s.runtime = no_runtime();
        assert_eq!(leftovers(&s), []);
    }

    #[test]
    fn an_address_of_a_container_of_unknown_liveness_is_listed_unverified_and_never_freed() {
        let mut s = healthy();
        s.records.clear();
        s.runtime = no_runtime();
        s.result_caches.clear();
        let found = leftovers(&s);
        // plexus's own records are written under a container record and removed after it: they
        // stay leftovers; the addresses (anyone's) and the cache (none left) do not.
        assert_eq!(
            found.iter().map(|l| l.kind).collect::<Vec<_>>(),
            [
                Kind::PortmapRecord,
                Kind::BandwidthRecord,
                Kind::IpamAllocationUnverified,
                Kind::IpamAllocationUnverified,
                Kind::VfRecord,
                Kind::NftChain,
                Kind::NftChain
            ]
        );
        assert_eq!(found[2].fix, Fix::Unverified("/ipam/net/10.1.0.2".into()));
        assert!(found[2].what.ends_with("is unknown (no runtime answered, and no result cache names its network namespace): not freed"), "{}", found[2].what);
        // A cache naming no namespace does not help; one naming a gone namespace decides.
        s.result_caches = vec![ResultCacheView { namespaces: Vec::new(), ..cache("c1", "", false) }];
        assert_eq!(kinds(&s).iter().filter(|k| **k == Kind::IpamAllocationUnverified).count(), 2);
        assert_eq!(
            kinds(&s).iter().filter(|k| **k == Kind::ResultCache).count(),
            0,
            "an undecided cache is kept"
        );
        s.result_caches = vec![cache("c1", "/run/netns/c1", false)];
        let found = leftovers(&s);
        assert_eq!(found.iter().filter(|l| l.kind == Kind::IpamAllocation).count(), 2, "{found:#?}");
        assert!(found.iter().any(|l| l.kind == Kind::ResultCache));
        assert!(
            found[2].what.ends_with("and its network namespace /run/netns/c1 is gone"),
            "{}",
            found[2].what
        );
    }

    #[test]
    fn result_caches_of_gone_containers_are_leftovers_and_of_recorded_or_live_ones_are_not() {
        let mut s = healthy();
        s.result_caches = vec![
            cache("c1", "/run/netns/c1", false),     // recorded: its record explains it
            cache("live", "/run/netns/live", false), // listed by the runtime
            cache("other", "/run/netns/other", true), // another runtime's, namespace alive
            cache("gone", "/run/netns/gone", false),
        ];
        s.runtime = runtime(&["c1", "live"]);
        let found = leftovers(&s);
        assert_eq!(
            found.iter().map(|l| &l.fix).collect::<Vec<_>>(),
            [&Fix::ResultCache("/var/lib/cni/results/cluster-gone-eth0".into())]
        );
        assert_eq!(
            found[0].what,
            "result cache /var/lib/cni/results/cluster-gone-eth0 of container gone interface eth0 on network \
             cluster: no container record lists it, and the runtime does not list its sandbox and its network \
             namespace /run/netns/gone is gone"
        );
        assert!(liveness_method(&s).starts_with("runtime: 2 sandbox(es) listed by /run/cri.sock"));
    }

    #[test]
    fn nft_chains_of_a_live_container_without_a_record_are_not_leftovers() {
        let mut s = healthy();
        s.runtime = runtime(&["c1", "c7"]);
        let live = chain_name(Guard::Masquerade, "c7", "eth0");
        let gone = chain_name(Guard::Masquerade, "c8", "eth0");
        for (name, comment) in
            [(&live, "a net c7 eth0"), (&gone, "a net c8 eth0"), (&live.clone(), "forged c7 net9")]
        {
            s.nft_chains.push(NftChainView {
                guard: Guard::Masquerade,
                name: name.clone(),
                comment: Some(comment.into()),
            });
        }
        let found: Vec<_> = leftovers(&s).into_iter().map(|l| l.fix).collect();
        // The third names c7 in its comment, but its name is not c7/net9's: not trusted.
        assert_eq!(
            found,
            [
                Fix::NftChain { guard: Guard::Masquerade, name: gone },
                Fix::NftChain { guard: Guard::Masquerade, name: live }
            ]
        );
    }

    #[test]
    fn map_entries_and_flows_without_a_record_are_leftovers() {
        let mut s = healthy();
        s.portmap_records.clear();
        s.bandwidth_records.clear();
        let found = leftovers(&s);
        assert_eq!(
            found.iter().map(|l| &l.fix).collect::<Vec<_>>(),
            [
                &Fix::PortmapMapping(host(8080)),
                &Fix::PortmapFlows(host(8080)),
                &Fix::BandwidthLimit(shape(7))
            ]
        );
        assert_eq!(found[1].what, "2 flow(s) of port mapping 10.0.0.1:8080/tcp: no record lists the mapping");
        // Flows of a mapping whose forward entry is gone already are leftovers too.
        let mut s = healthy();
        s.flows.push(FlowsView { host: host(9090), text: "10.0.0.1:9090/tcp".into(), count: 1 });
        assert_eq!(kinds(&s), [Kind::PortmapFlows]);
    }

    #[test]
    fn dataplane_records_are_explained_by_any_interface_of_a_container_record() {
        let mut s = healthy();
        s.portmap_records.push(dataplane("c1", "eth0", vec![]));
        s.bandwidth_records.push(dataplane("c1", "net2", vec![]));
        s.portmap_records.push(dataplane("c2", "net1", vec![]));
        assert_eq!(kinds(&s), [Kind::PortmapRecord, Kind::BandwidthRecord]);
        let found = leftovers(&s);
        assert_eq!(found[0].fix, Fix::PortmapRecord { container_id: "c2".into(), ifname: "net1".into() });
        assert_eq!(found[1].fix, Fix::BandwidthRecord { container_id: "c1".into(), ifname: "net2".into() });
    }

    #[test]
    fn allocations_are_explained_by_container_and_interface_or_the_container_alone() {
        let mut s = healthy();
        s.allocations = vec![
            allocation("10.1.0.3", "c1\r\nnet9"),
            allocation("10.1.0.4", "c2\r\nnet1"),
            allocation("10.1.0.5", "c1"),
            allocation("10.1.0.6", "c2\n"),
            allocation("10.1.0.7", "c1\r\n"),
        ];
        let found = leftovers(&s);
        let files: Vec<_> = found
            .iter()
            .map(|l| match &l.fix {
                Fix::IpamAllocation { file, .. } => file.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(files, ["10.1.0.3", "10.1.0.4", "10.1.0.6"]);
        assert_eq!(
            found[0].what,
            "address 10.1.0.3 (/ipam/net/10.1.0.3) held for container c1 interface net9: no container record lists \
             it, and its record does not list the interface"
        );
        assert_eq!(
            found[1].what,
            "address 10.1.0.4 (/ipam/net/10.1.0.4) held for container c2 interface net1: no container record lists \
             it, and the runtime does not list its sandbox"
        );
        assert_eq!(allocation("x", "c2\n").owner(), ("c2", None));
    }

    #[test]
    fn temp_files_of_live_writers_are_not_leftovers() {
        let mut s = healthy();
        s.temp_files.push(TempFileView { path: "/s/.y.json.99.tmp".into(), pid: 99, pid_alive: false });
        let found = leftovers(&s);
        assert_eq!(found.iter().map(|l| l.kind).collect::<Vec<_>>(), [Kind::TempFile]);
        assert_eq!(found[0].fix, Fix::TempFile("/s/.y.json.99.tmp".into()));
    }

    #[test]
    fn vfs_of_unlisted_attachments_are_leftovers() {
        let mut s = healthy();
        s.vfs[0].ifname = "net2".into();
        let found = leftovers(&s);
        assert_eq!(
            found.iter().map(|l| &l.fix).collect::<Vec<_>>(),
            [&Fix::VfRecord { pci: "0000:03:02.1".into() }]
        );
    }

    #[test]
    fn links_under_temporary_names_are_leftovers() {
        for (name, ours) in [
            ("plx0a1b2c3d", true),
            ("plxdeadbeef", true),
            ("plx0A1B2C3D", false),
            ("plx0a1b2c3", false),
            ("plx0a1b2c3d4", false),
            ("xplx0a1b2c3d", false),
            ("plxghijklmn", false),
            ("plx", false),
        ] {
            assert_eq!(is_temp_link_name(name), ours, "{name}");
        }
        let mut s = healthy();
        s.links.push(LinkView { index: 9, name: "plx0a1b2c3d".into(), kind: Some("macvlan".into()) });
        let found = leftovers(&s);
        assert_eq!(
            found.iter().map(|l| &l.fix).collect::<Vec<_>>(),
            [&Fix::Link { index: 9, name: "plx0a1b2c3d".into() }]
        );
        assert!(found[0].what.contains("(macvlan)"), "{}", found[0].what);
    }

    #[test]
    fn nft_chains_of_attachments_no_record_lists_are_leftovers() {
        let mut s = healthy();
        let orphan = chain_name(Guard::Masquerade, "c9", "net1");
        s.nft_chains.push(NftChainView {
            guard: Guard::Masquerade,
            name: orphan.clone(),
            comment: Some("blue c9 net1".into()),
        });
        s.nft_chains.push(NftChainView { guard: Guard::SpoofCheck, name: "handmade".into(), comment: None });
        let found = leftovers(&s);
        assert_eq!(
            found.iter().map(|l| &l.fix).collect::<Vec<_>>(),
            [
                &Fix::NftChain { guard: Guard::Masquerade, name: orphan.clone() },
                &Fix::NftChain { guard: Guard::SpoofCheck, name: "handmade".into() },
            ]
        );
        assert!(found[0].what.contains(&format!("inet plexus {orphan} (blue c9 net1)")), "{}", found[0].what);
        assert!(found[1].what.contains("bridge plexus handmade (no comment)"), "{}", found[1].what);
        // A chain of the right kind but another kind's name is not explained either.
        let mut s = healthy();
        s.nft_chains[0].guard = Guard::SpoofCheck;
        assert_eq!(leftovers(&s).len(), 0, "names are per kind, and both kinds are owned");
    }

    #[test]
    fn only_what_stayed_between_two_looks_is_fixed() {
        let mut s = healthy();
        s.links.push(LinkView { index: 9, name: "plx0a1b2c3d".into(), kind: None });
        s.temp_files.push(TempFileView { path: "/s/.y.json.99.tmp".into(), pid: 99, pid_alive: false });
        let first = leftovers(&s);
        // The link was an ADD's in flight: renamed since; another appeared meanwhile.
        s.links[3] = LinkView { index: 10, name: "plx11111111".into(), kind: None };
        let second = leftovers(&s);
        assert_eq!(still_there(&first, second).iter().map(|l| l.kind).collect::<Vec<_>>(), [Kind::TempFile]);
        // A link renamed back to the same name under another index is another link.
        s.links[3] = LinkView { index: 11, name: "plx0a1b2c3d".into(), kind: None };
        assert_eq!(still_there(&first, leftovers(&s)).len(), 1);
    }

    #[test]
    fn kinds_are_written_as_json_names() {
        for k in [
            Kind::RecordWithoutNetns,
            Kind::PortmapRecord,
            Kind::BandwidthRecord,
            Kind::PortmapMapping,
            Kind::PortmapFlows,
            Kind::BandwidthLimit,
            Kind::IpamAllocation,
            Kind::IpamAllocationUnverified,
            Kind::ResultCache,
            Kind::TempFile,
            Kind::VfRecord,
            Kind::Link,
            Kind::NftChain,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
