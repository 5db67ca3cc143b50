//! SR-IOV as a cluster hands it out: one NetworkAttachmentDefinition with the
//! `k8s.v1.cni.cncf.io/resourceName` annotation and no `deviceID` serves every VF of the pool;
//! each pod's attachment gets the VF the cluster allocated to that pod, learnt from
//!
//! - kubelet's PodResources API: a grpcio server generated at test time from
//!   `proto/podresources.proto` (`tests/py/podresources_server.py`), on a Unix socket;
//! - DRA: ResourceClaims and ResourceSlices (`resource.k8s.io/v1`) in the test API server, read
//!   with the ClusterRole of `deploy/rbac.yaml`.
//!
//! The engine runs in-process with the agent's unchanged Kubernetes catalog and its native
//! `sriov` type. No SR-IOV hardware: each VF is a veth in a "node" namespace behind a sysfs tree
//! built in a temporary directory (as `agent/src/native/sriov/tests/` does), and the PF side is a
//! recorder of the settings sent to each VF. What is checked is that the right VF (its netdev,
//! its PF-side settings, the record) lands in the right pod, and that a pod without a device is
//! refused, naming the resource, with nothing left behind.

use std::collections::HashMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use plexus_agent::cni::Command;
use plexus_agent::delegate::{DelegateError, Delegator, NativeCall, NativePlugin, NativePlugins};
use plexus_agent::devices::podresources::PodResources;
use plexus_agent::devices::DeviceSource;
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::ipam::Ipam;
use plexus_agent::kube::dra::DraDevices;
use plexus_agent::kube::{build_client, ClientSource, KubeCatalog, KubeCatalogConfig};
use plexus_agent::native::sriov::{PfControl, SriovError, SriovPlugin, VfAdmin, VfSetting};
use plexus_agent::state::{AllocatedDevice, ContainerRecord, StateStore};
use plexus_cni_shim::{Request, Response};
use plexus_tests::podresources::{pod_resources, PodResourcesServer};
use plexus_tests::test_apiserver::{
    nad, pod, rbac, resource_claim, resource_slice, ServerOptions, TestApiServer, EVENTS,
};
use plexus_tests::{Netns, Recorder};
use serde_json::{json, Value};
use tempfile::TempDir;

const NODE: &str = "node-1";
const NS: &str = "default";
const NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
const RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";
const RESOURCE: &str = "intel.com/sriov_vf";
const PF: &str = "ens1f0";
const PF_PCI: &str = "0000:81:00.0";
const DRA_DRIVER: &str = "sriov.example.com";

/// The VFs of the PF: (PCI address, index, MAC of the stand-in netdev).
const VFS: [(&str, u32, &str); 3] = [
    ("0000:81:02.1", 1, "02:00:00:00:aa:01"),
    ("0000:81:02.2", 2, "02:00:00:00:aa:02"),
    ("0000:81:02.3", 3, "02:00:00:00:aa:03"),
];

/// The PF side: every VF's settings, and what was sent to which VF.
#[derive(Default)]
struct RecordingPf {
    vfs: Mutex<HashMap<u32, VfAdmin>>,
    sent: Mutex<Vec<(u32, String)>>,
}

impl RecordingPf {
    fn sent_to(&self, vf: u32) -> Vec<String> {
        self.sent.lock().unwrap().iter().filter(|(n, _)| *n == vf).map(|(_, s)| s.clone()).collect()
    }
}

impl PfControl for RecordingPf {
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>> {
        let found = self.vfs.lock().unwrap().get(&vf).copied();
        async move {
            found.ok_or_else(|| SriovError::Netlink {
                what: format!("VF {vf} of {pf}"),
                detail: "no such VF".into(),
            })
        }
        .boxed()
    }

    fn apply<'a>(
        &'a self,
        pf: &'a str,
        vf: u32,
        setting: VfSetting,
    ) -> BoxFuture<'a, Result<(), SriovError>> {
        let mut vfs = self.vfs.lock().unwrap();
        let result = match vfs.get_mut(&vf) {
            Some(admin) => {
                admin.apply(&setting);
                self.sent.lock().unwrap().push((vf, setting.to_string()));
                Ok(())
            }
            None => {
                Err(SriovError::Netlink { what: format!("VF {vf} of {pf}"), detail: "no such VF".into() })
            }
        };
        async move { result }.boxed()
    }
}

/// The cluster default network's plugin: a minimal result, no link (these tests are about the
/// secondary VF attachments).
struct DefaultNetwork;

impl NativePlugin for DefaultNetwork {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        async move {
            if call.command != Command::Add {
                return Ok(None);
            }
            Ok(Some(json!({
                "cniVersion": call.config["cniVersion"],
                "interfaces": [{"name": call.env.ifname, "sandbox": call.env.netns}],
                "ips": [{"address": "10.88.0.2/24", "interface": 0}]
            })))
        }
        .boxed()
    }
}

/// A node with three VF stand-ins, the test API server, kubelet's PodResources API, and the
/// engine.
struct Harness {
    server: TestApiServer,
    kubelet: PodResourcesServer,
    node: Netns,
    /// The stand-in netdev of each VF, by PCI address.
    vf_ifnames: HashMap<&'static str, String>,
    pf: Arc<RecordingPf>,
    /// An exec'd plugin that records the config it is given (chain it after `sriov`).
    recorder: Recorder,
    engine: Engine,
    dir: TempDir,
    _catalog: Arc<KubeCatalog>,
}

impl Harness {
    async fn start() -> Harness {
        let dir = tempfile::Builder::new().prefix("plexus-sriov-res-").tempdir().expect("tempdir");
        let server = TestApiServer::start_with(ServerOptions {
            rbac: Some(rbac::deploy_rules()),
            ..Default::default()
        });
        let kubelet = PodResourcesServer::start(dir.path(), &[]);

        // The node: each VF's netdev is a veth whose peer stays behind, as the switch side.
        let node = Netns::new("plx-srn");
        let sysfs = dir.path().join("sys");
        fake_pf(&sysfs, PF_PCI, PF);
        let pf = Arc::new(RecordingPf::default());
        let mut vf_ifnames = HashMap::new();
        for (pci, index, mac) in VFS {
            // The node namespace is the test's own: plain names are unique in it.
            let ifname = format!("vf{index}");
            node.ip(&format!("link add {ifname} address {mac} type veth peer name {ifname}p"));
            node.ip(&format!("link set {ifname}p up"));
            fake_vf(&sysfs, PF_PCI, index, pci, &ifname);
            pf.vfs.lock().unwrap().insert(index, VfAdmin::default());
            vf_ifnames.insert(pci, ifname);
        }

        let default_dir = dir.path().join("default");
        std::fs::create_dir_all(&default_dir).expect("default network dir");
        let conflist =
            json!({"cniVersion": "1.0.0", "name": "cluster", "plugins": [{"type": "default-net"}]});
        std::fs::write(default_dir.join("10-default.conflist"), conflist.to_string())
            .expect("default network");

        let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
        let catalog = Arc::new(KubeCatalog::start(client.clone(), KubeCatalogConfig::new(NODE)));
        assert!(catalog.wait_synced(Duration::from_secs(20)).await, "the catalog did not sync");
        let state_dir = dir.path().join("state");
        let recorder = Recorder::new();
        let ipam = Ipam { bin_dirs: vec![PathBuf::from("/usr/lib/cni")], timeout: Duration::from_secs(10) };
        let sriov = SriovPlugin::new(ipam, &state_dir, sysfs)
            .with_host_netns(node.path())
            .with_pf_control(pf.clone());
        let mut natives = NativePlugins::default();
        natives.register("default-net", Arc::new(DefaultNetwork));
        natives.register("sriov", Arc::new(sriov));
        let sources: Vec<Arc<dyn DeviceSource>> = vec![
            Arc::new(PodResources::new(kubelet.socket(), Duration::from_secs(5))),
            Arc::new(DraDevices::new(client, Duration::from_secs(5))),
        ];
        let engine = Engine::new(
            EngineConfig {
                default_network_dir: default_dir,
                network_conf_dirs: Vec::new(),
                allowed_namespaces: Vec::new(),
                strict_annotations: false,
                device_info_dir: dir.path().join("devinfo"),
                network_status_keys: plexus_agent::spec::status::StatusKeys::Spec,
            },
            catalog.clone(),
            Delegator { bin_dirs: vec![recorder.bin_dir()], timeout: Duration::from_secs(10), natives },
            StateStore::new(&state_dir),
        )
        .with_device_sources(sources);

        // One NAD for the whole pool: a resourceName and no deviceID.
        let mut vfs =
            nad(NS, "vfs", Some(r#"{"cniVersion": "1.0.0", "type": "sriov", "vlan": 7, "spoofchk": "on"}"#));
        vfs["metadata"]["annotations"] = json!({RESOURCE_NAME: RESOURCE});
        server.apply(vfs);
        Harness { server, kubelet, node, vf_ifnames, pf, recorder, engine, dir, _catalog: catalog }
    }

    /// A pod of this node selecting `networks` (the catalog GETs a pod its watch has not
    /// delivered yet).
    fn pod(&self, name: &str, networks: &str) {
        self.server.apply(pod(NS, name, NODE, &[(NETWORKS, networks)]));
    }

    async fn call(&self, command: &str, name: &str, cid: &str, netns: &Netns) -> Response {
        let config = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus"});
        self.call_with(command, name, cid, netns, config).await
    }

    async fn call_with(
        &self,
        command: &str,
        name: &str,
        cid: &str,
        netns: &Netns,
        config: Value,
    ) -> Response {
        self.engine
            .handle(Request {
                command: command.into(),
                container_id: Some(cid.into()),
                netns: Some(netns.path_str()),
                ifname: Some("eth0".into()),
                args: Some(format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={name}")),
                path: None,
                config: config.to_string(),
            })
            .await
    }

    async fn add(&self, name: &str, cid: &str, netns: &Netns) -> Response {
        self.call("ADD", name, cid, netns).await
    }

    async fn del(&self, name: &str, cid: &str, netns: &Netns) {
        let r = self.call("DEL", name, cid, netns).await;
        assert_eq!(r.exit_code, 0, "DEL failed: {}", r.stdout);
    }

    async fn record(&self, cid: &str) -> ContainerRecord {
        self.engine.state().load(cid, "eth0").await.expect("reading the record").expect("a record")
    }

    /// The VF at `pci` is in `pod` as `ifname`, with its own MAC, and its PF-side settings were
    /// the NAD's.
    fn assert_vf_in(&self, pci: &str, pod: &Netns, ifname: &str) {
        let (_, index, mac) = VFS.iter().find(|(p, _, _)| *p == pci).copied().expect("a VF");
        let link = pod.link(ifname).unwrap_or_else(|| panic!("{ifname} in the pod"));
        assert_eq!(link["address"], mac, "{ifname} is VF {pci}");
        assert!(self.node.link(&self.vf_ifnames[pci]).is_none(), "VF {pci} left the node");
        let sent = self.pf.sent_to(index);
        assert!(sent.iter().any(|s| s.contains("vlan 7")), "VF {index} got the NAD's VLAN: {sent:?}");
        assert!(
            sent.iter().any(|s| s.contains("spoofchk on")),
            "VF {index} got the NAD's spoofchk: {sent:?}"
        );
    }

    /// Every VF is back on the node, no VF or attachment is recorded, and `pods` hold only `lo`.
    fn assert_nothing_left(&self, pods: &[&Netns]) {
        for (pci, ifname) in &self.vf_ifnames {
            assert!(self.node.link(ifname).is_some(), "VF {pci} is back on the node");
        }
        // A VF's claim is its record, `<pci>.json`; its lock file stays, as the sriov type keeps it.
        for sub in ["state/attachments", "state/sriov"] {
            let dir = self.dir.path().join(sub);
            let left: Vec<_> = std::fs::read_dir(&dir)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.ends_with(".json"))
                        .collect()
                })
                .unwrap_or_default();
            assert!(left.is_empty(), "{} holds {left:?}", dir.display());
        }
        for pod in pods {
            assert_eq!(pod.link_names(), ["lo"], "the pod holds nothing of plexus");
        }
    }

    fn events(&self, pod_name: &str, reason: &str) -> Vec<Value> {
        self.server
            .objects(EVENTS)
            .into_iter()
            .filter(|e| e["regarding"]["name"] == pod_name && e["reason"] == reason)
            .collect()
    }
}

/// A PF at `pf_pci` with netdev `ifname` (the layout `native::sriov::sysfs` reads).
fn fake_pf(root: &Path, pf_pci: &str, ifname: &str) {
    std::fs::create_dir_all(root.join("bus/pci/devices").join(pf_pci).join("net").join(ifname)).expect("PF");
}

/// VF `index` of the PF at `pf_pci`, at `vf_pci`, bound to a kernel driver, with netdev `ifname`.
fn fake_vf(root: &Path, pf_pci: &str, index: u32, vf_pci: &str, ifname: &str) {
    let devices = root.join("bus/pci/devices");
    let dir = devices.join(vf_pci);
    std::fs::create_dir_all(dir.join("net").join(ifname)).expect("VF");
    symlink(format!("../{pf_pci}"), dir.join("physfn")).expect("physfn");
    symlink("../../../bus/pci/drivers/iavf", dir.join("driver")).expect("driver");
    symlink(format!("../{vf_pci}"), devices.join(pf_pci).join(format!("virtfn{index}"))).expect("virtfn");
}

fn cni_error(r: &Response) -> (u64, String) {
    assert_ne!(r.exit_code, 0, "expected a CNI error, got {}", r.stdout);
    let v: Value = serde_json::from_str(&r.stdout).expect("error JSON");
    (v["code"].as_u64().unwrap_or(0), v["msg"].as_str().unwrap_or("").into())
}

fn ok(r: &Response) {
    assert_eq!(r.exit_code, 0, "ADD failed: {}", r.stdout);
}

fn device(pci: &str) -> Option<AllocatedDevice> {
    Some(AllocatedDevice { resource_name: RESOURCE.into(), device_id: pci.into() })
}

#[tokio::test]
async fn kernel_two_pods_sharing_one_nad_each_get_the_vf_kubelet_gave_them() {
    let h = Harness::start().await;
    // kubelet gave pod-a the second VF and pod-b the first: not the order of the pool.
    h.kubelet.set(&[
        pod_resources(NS, "pod-a", &[(RESOURCE, &["0000:81:02.2"])]),
        pod_resources(NS, "pod-b", &[(RESOURCE, &["0000:81:02.1"])]),
    ]);
    // The device plugin described pod-a's VF (Device Information Specification 4.1).
    let info = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:81:02.2", "pf-pci-address": PF_PCI}});
    let dp = h.dir.path().join("devinfo/dp");
    std::fs::create_dir_all(&dp).unwrap();
    std::fs::write(dp.join("intel.com-sriov_vf-0000:81:02.2-device.json"), info.to_string()).unwrap();
    h.pod("pod-a", "vfs");
    h.pod("pod-b", "vfs");
    let (ns_a, ns_b) = (Netns::new("plx-sra"), Netns::new("plx-srb"));

    ok(&h.add("pod-a", "cid-a", &ns_a).await);
    ok(&h.add("pod-b", "cid-b", &ns_b).await);

    h.assert_vf_in("0000:81:02.2", &ns_a, "net1");
    h.assert_vf_in("0000:81:02.1", &ns_b, "net1");
    assert!(h.pf.sent_to(3).is_empty(), "the VF nobody was given is untouched");
    let (a, b) = (h.record("cid-a").await, h.record("cid-b").await);
    assert_eq!(a.attachments[1].device, device("0000:81:02.2"));
    assert_eq!(b.attachments[1].device, device("0000:81:02.1"));
    // The delegate ran, and DEL runs, with the allocated VF as its deviceID.
    assert_eq!(a.attachments[1].delegate.list.plugins[0]["deviceID"], "0000:81:02.2");
    assert_eq!(
        a.attachments[1].device_info,
        Some(info),
        "the device plugin's device-info is the attachment's"
    );
    // Where the device plugin wrote nothing, the native sriov type describes the VF itself.
    assert_eq!(
        b.attachments[1].device_info,
        Some(
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:81:02.1", "pf-pci-address": PF_PCI}})
        ),
        "the sriov type's own description of pod-b's VF"
    );
    // Device-info spec 4.2.1: the device plugin's file is copied into the attachment's CNI
    // device-info file, which lives until DEL.
    let cni_file = |cid: &str| h.dir.path().join(format!("devinfo/cni/{cid}-net1-device.json"));
    let copied: Value = serde_json::from_str(&std::fs::read_to_string(cni_file("cid-a")).unwrap_or_default())
        .unwrap_or(Value::Null);
    assert_eq!(
        copied,
        a.attachments[1].device_info.clone().unwrap_or(Value::Null),
        "pod-a's CNI device-info file"
    );
    assert!(h.kubelet.calls().iter().all(|c| c == "List"), "{:?}", h.kubelet.calls());

    h.del("pod-a", "cid-a", &ns_a).await;
    h.del("pod-b", "cid-b", &ns_b).await;
    assert!(
        !cni_file("cid-a").exists() && !cni_file("cid-b").exists(),
        "DEL removes the CNI device-info files"
    );
    h.assert_nothing_left(&[&ns_a, &ns_b]);
}

#[tokio::test]
async fn kernel_attachments_of_one_resource_get_distinct_vfs_in_order() {
    let h = Harness::start().await;
    h.kubelet.set(&[pod_resources(NS, "pod-two", &[(RESOURCE, &["0000:81:02.3", "0000:81:02.1"])])]);
    h.pod("pod-two", r#"[{"name": "vfs", "interface": "data0"}, {"name": "vfs", "interface": "data1"}]"#);
    let ns = Netns::new("plx-sr2");

    ok(&h.add("pod-two", "cid-two", &ns).await);

    h.assert_vf_in("0000:81:02.3", &ns, "data0");
    h.assert_vf_in("0000:81:02.1", &ns, "data1");
    let r = h.record("cid-two").await;
    assert_eq!(
        (r.attachments[1].device.clone(), r.attachments[2].device.clone()),
        (device("0000:81:02.3"), device("0000:81:02.1"))
    );
    h.del("pod-two", "cid-two", &ns).await;
    h.assert_nothing_left(&[&ns]);
}

#[tokio::test]
async fn kernel_dra_claims_give_the_pods_vfs_by_their_device_id_attribute() {
    let h = Harness::start().await;
    // A second NAD, for devices whose slice names no resource: "<pod claim>/<request>".
    let mut by_claim = nad(
        NS,
        "vfs-by-claim",
        Some(r#"{"cniVersion": "1.0.0", "type": "sriov", "vlan": 7, "spoofchk": "on"}"#),
    );
    by_claim["metadata"]["annotations"] = json!({RESOURCE_NAME: "nic2/vf"});
    h.server.apply(by_claim);
    let attrs = |pci: &str, resource: Option<&str>| {
        let mut a = json!({"k8s.cni.cncf.io/deviceID": {"string": pci}, "vfID": {"int": 1}});
        if let Some(r) = resource {
            a["k8s.cni.cncf.io/resourceName"] = json!({"string": r});
        }
        a
    };
    h.server.apply(resource_slice(
        "node-1-vfs",
        DRA_DRIVER,
        NODE,
        NODE,
        json!([
            {"name": "vf-1", "attributes": attrs("0000:81:02.1", Some(RESOURCE))},
            {"name": "vf-2", "attributes": attrs("0000:81:02.2", Some(RESOURCE))},
            {"name": "vf-3", "attributes": attrs("0000:81:02.3", None)},
        ]),
    ));
    // Another driver's slice with a device of the same name: not read for these claims.
    h.server.apply(resource_slice(
        "node-1-gpus",
        "gpu.example.com",
        NODE,
        NODE,
        json!([{"name": "vf-2", "attributes": {"k8s.cni.cncf.io/deviceID": {"string": "0000:99:00.0"}}}]),
    ));
    h.server.apply(resource_claim(NS, "pod-dra-nic-x7k2q", "vf", &[(DRA_DRIVER, NODE, "vf-2")]));
    h.server.apply(resource_claim(NS, "shared-nic", "vf", &[(DRA_DRIVER, NODE, "vf-3")]));
    let mut p = pod(NS, "pod-dra", NODE, &[(NETWORKS, "vfs,vfs-by-claim")]);
    p["spec"]["resourceClaims"] = json!([
        {"name": "nic", "resourceClaimTemplateName": "one-vf"},
        {"name": "nic2", "resourceClaimName": "shared-nic"}
    ]);
    p["status"]["resourceClaimStatuses"] = json!([{"name": "nic", "resourceClaimName": "pod-dra-nic-x7k2q"}]);
    h.server.apply(p);
    let ns = Netns::new("plx-srd");

    ok(&h.add("pod-dra", "cid-dra", &ns).await);

    h.assert_vf_in("0000:81:02.2", &ns, "net1");
    h.assert_vf_in("0000:81:02.3", &ns, "net2");
    let r = h.record("cid-dra").await;
    assert_eq!(r.attachments[1].device, device("0000:81:02.2"));
    assert_eq!(
        r.attachments[2].device,
        Some(AllocatedDevice { resource_name: "nic2/vf".into(), device_id: "0000:81:02.3".into() })
    );
    assert_eq!(h.kubelet.calls(), ["List"], "kubelet is asked first, once");
    h.del("pod-dra", "cid-dra", &ns).await;
    h.assert_nothing_left(&[&ns]);
}

#[tokio::test]
async fn kernel_a_pod_without_a_device_of_the_resource_is_refused_naming_it() {
    let h = Harness::start().await;
    // kubelet knows the pod, with another resource only; DRA has no claim of it.
    h.kubelet.set(&[pod_resources(NS, "pod-none", &[("example.com/gpu", &["gpu-0"])])]);
    h.pod("pod-none", "vfs");
    let ns = Netns::new("plx-srx");

    let r = h.add("pod-none", "cid-none", &ns).await;

    let (code, msg) = cni_error(&r);
    assert_eq!(code, 7, "the pod's request must change: {msg}");
    for needle in [
        "network default/vfs",
        "resource intel.com/sriov_vf",
        "the pod was allocated none",
        "(it has devices of example.com/gpu)",
        "limits: intel.com/sriov_vf: 1",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from {msg}");
    }
    assert!(h.pf.sent.lock().unwrap().is_empty(), "no VF was touched");
    assert!(h.engine.state().load("cid-none", "eth0").await.unwrap().is_none(), "no record");
    h.assert_nothing_left(&[&ns]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.events("pod-none", "NetworkRefused").is_empty() {
        assert!(Instant::now() < deadline, "no NetworkRefused event on the pod");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(h.events("pod-none", "NetworkRefused")[0]["note"].as_str().unwrap_or("").contains(RESOURCE));

    // Two attachments of the resource and one device: refused before anything is attached.
    h.kubelet.set(&[pod_resources(NS, "pod-short", &[(RESOURCE, &["0000:81:02.1"])])]);
    h.pod("pod-short", "vfs,vfs");
    let ns2 = Netns::new("plx-srs");
    let (code, msg) = cni_error(&h.add("pod-short", "cid-short", &ns2).await);
    assert_eq!(code, 7);
    assert!(msg.contains("the pod's 1 device(s) of it are taken by its earlier attachments"), "{msg}");
    h.assert_nothing_left(&[&ns, &ns2]);
}

#[tokio::test]
async fn kernel_kubelet_unreachable_is_try_again_later_naming_the_socket() {
    let h = Harness::start().await;
    h.pod("pod-later", "vfs");
    let ns = Netns::new("plx-srl");
    // kubelet restarting: its socket is gone.
    let socket = h.kubelet.socket().to_owned();
    std::fs::remove_file(&socket).unwrap();

    let (code, msg) = cni_error(&h.add("pod-later", "cid-later", &ns).await);

    assert_eq!(code, 11, "the device may be there once kubelet answers: {msg}");
    assert!(msg.contains("resource intel.com/sriov_vf"), "{msg}");
    assert!(msg.contains(&socket.display().to_string()), "{msg}");
    h.assert_nothing_left(&[&ns]);
}

#[tokio::test]
async fn kernel_a_pod_network_of_the_nad_gets_the_pods_vf_too() {
    let h = Harness::start().await;
    h.server.apply(json!({
        "apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "vf-pool"},
        "spec": {"enabled": true, "parametersRefs": [{"group": "k8s.cni.cncf.io",
                 "kind": "NetworkAttachmentDefinition", "name": "vfs", "namespace": NS}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "test",
                   "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}
    }));
    h.kubelet.set(&[pod_resources(NS, "pod-kep", &[(RESOURCE, &["0000:81:02.3"])])]);
    h.server.apply(pod(NS, "pod-kep", NODE, &[("plexus.dev/pod-networks", r#"[{"name": "vf-pool"}]"#)]));
    let ns = Netns::new("plx-srk");

    ok(&h.add("pod-kep", "cid-kep", &ns).await);

    h.assert_vf_in("0000:81:02.3", &ns, "net1");
    let r = h.record("cid-kep").await;
    assert_eq!(
        (r.attachments[1].pod_network.as_deref(), r.attachments[1].device.clone()),
        (Some("vf-pool"), device("0000:81:02.3"))
    );
    h.del("pod-kep", "cid-kep", &ns).await;
    h.assert_nothing_left(&[&ns]);
}

#[tokio::test]
async fn kernel_every_plugin_gets_the_device_and_a_capable_one_its_runtime_config() {
    let h = Harness::start().await;
    // sriov, then an exec'd plugin declaring the deviceID capability, then one not declaring it.
    let config = json!({"cniVersion": "1.0.0", "name": "vfs-chained", "plugins": [
        {"type": "sriov", "vlan": 7, "spoofchk": "on", "deviceID": "0000:00:00.0"},
        Recorder::plugin_with("capable", json!({"capabilities": {"deviceID": true}})),
        Recorder::plugin("plain"),
    ]});
    let mut chained = nad(NS, "vfs-chained", Some(&config.to_string()));
    chained["metadata"]["annotations"] = json!({RESOURCE_NAME: RESOURCE});
    h.server.apply(chained);
    h.kubelet.set(&[pod_resources(NS, "pod-chain", &[(RESOURCE, &["0000:81:02.2"])])]);
    h.pod("pod-chain", "vfs-chained");
    let ns = Netns::new("plx-src");

    ok(&h.add("pod-chain", "cid-chain", &ns).await);

    h.assert_vf_in("0000:81:02.2", &ns, "net1");
    let capable = h.recorder.calls_of("capable");
    assert_eq!(capable.len(), 1, "{capable:?}");
    assert_eq!(capable[0].config["deviceID"], "0000:81:02.2", "the NAD's own deviceID is replaced");
    assert_eq!(capable[0].config["pciBusID"], "0000:81:02.2");
    assert_eq!(capable[0].config["runtimeConfig"], json!({"deviceID": "0000:81:02.2"}));
    let plain = h.recorder.calls_of("plain");
    assert_eq!(plain[0].config["deviceID"], "0000:81:02.2");
    assert!(
        plain[0].config.get("runtimeConfig").is_none(),
        "no capability, no runtimeConfig: {}",
        plain[0].config
    );
    h.del("pod-chain", "cid-chain", &ns).await;
    let del = h.recorder.calls_of("capable").into_iter().find(|c| c.command == "DEL").expect("a DEL");
    assert_eq!(del.config["deviceID"], "0000:81:02.2", "DEL runs with the VF the ADD had");
    h.assert_nothing_left(&[&ns]);
}

#[tokio::test]
async fn kernel_a_runtimes_sandbox_list_naming_the_nad_gets_the_pods_vf_too() {
    let h = Harness::start().await;
    h.kubelet.set(&[pod_resources(NS, "pod-sandbox", &[(RESOURCE, &["0000:81:02.1"])])]);
    h.server.apply(pod(NS, "pod-sandbox", NODE, &[]));
    let ns = Netns::new("plx-srq");
    let config = json!({"cniVersion": "1.0.0", "name": "plexus", "type": "plexus", "runtimeConfig": {
    "podSandboxNetworks": [
        {"interfaceName": "eth0", "networkName": "_fallback"},
        {"interfaceName": "vf0", "networkName": "vfs"},
    ]}});

    ok(&h.call_with("ADD", "pod-sandbox", "cid-sandbox", &ns, config.clone()).await);

    h.assert_vf_in("0000:81:02.1", &ns, "vf0");
    assert_eq!(h.record("cid-sandbox").await.attachments[1].device, device("0000:81:02.1"));
    let r = h.call_with("DEL", "pod-sandbox", "cid-sandbox", &ns, config).await;
    assert_eq!(r.exit_code, 0, "DEL failed: {}", r.stdout);
    h.assert_nothing_left(&[&ns]);
}
