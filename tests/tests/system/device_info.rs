//! NPWG v1.2: device information (spec 5.3.7 and the Device Information Specification) and the
//! `infiniband-guid` selection key (spec 4.1.2.1.10), through the engine and the catalog of
//! standalone mode, with real namespaces.
//!
//! The SR-IOV VF is the sriov type's own stand-in (see `agent/src/native/sriov/tests`): a veth
//! in a "node" namespace of the test's own is the VF's netdev, a sysfs tree in a temporary
//! directory names it a VF of a PF, and a recorder stands in for the PF's netlink (no PF
//! without SR-IOV hardware has VFs the kernel could configure). The cluster default network is
//! a fake in-process plugin that changes nothing: these tests are about the secondary network.

use std::collections::HashMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use plexus_agent::catalog::files::FileCatalog;
use plexus_agent::cni::Command;
use plexus_agent::delegate::{DelegateError, Delegator, NativeCall, NativePlugin, NativePlugins};
use plexus_agent::engine::{Engine, EngineConfig};
use plexus_agent::ipam::Ipam;
use plexus_agent::native::sriov::error::SriovError;
use plexus_agent::native::sriov::{PfControl, SriovPlugin, VfAdmin, VfSetting};
use plexus_agent::state::StateStore;
use plexus_cni_shim::{Request, Response};
use plexus_testkit::unique_ifname;
use plexus_tests::{Netns, REFERENCE_PLUGINS};
use serde_json::{json, Value};
use tempfile::TempDir;

const NS: &str = "team";
const PF: &str = "ens1f0";
const PF_PCI: &str = "0000:81:00.0";
const VF_PCI: &str = "0000:81:02.3";
const VF_INDEX: u32 = 3;
const VF_MAC: &str = "02:00:00:00:aa:03";

/// The PF's VFs in memory, as the kernel would hold them for a real NIC.
#[derive(Default)]
struct FakePf {
    vfs: Mutex<HashMap<(String, u32), VfAdmin>>,
}

impl PfControl for FakePf {
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>> {
        let found = self.vfs.lock().unwrap().get(&(pf.to_owned(), vf)).copied();
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
        if let Some(admin) = self.vfs.lock().unwrap().get_mut(&(pf.to_owned(), vf)) {
            admin.apply(&setting);
        }
        async { Ok(()) }.boxed()
    }
}

/// The cluster default network: answers ADD with a result and changes nothing.
struct DefaultNetwork;

impl NativePlugin for DefaultNetwork {
    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        async move {
            if call.command != Command::Add {
                return Ok(None);
            }
            Ok(Some(json!({
                "cniVersion": call.config["cniVersion"],
                "interfaces": [{"name": call.env.ifname, "mac": "02:00:00:00:00:01", "sandbox": call.env.netns}],
                "ips": [{"address": "10.9.0.2/24", "interface": 0}]
            })))
        }
        .boxed()
    }
}

/// A CNI plugin binary that logs its stdin per command and interface, writes a vhost-user
/// device's information to its `runtimeConfig.CNIDeviceInfoFile` when it is given one, and
/// answers ADD with its interface.
fn probe_plugin(bin: &Path, log: &Path) {
    let script = format!(
        r#"#!/bin/sh
conf=$(cat)
printf '%s' "$conf" > "{log}/$CNI_COMMAND-$CNI_IFNAME.json"
[ "$CNI_COMMAND" = ADD ] || exit 0
file=$(printf '%s' "$conf" | sed -n 's/.*"CNIDeviceInfoFile":"\([^"]*\)".*/\1/p')
if [ -n "$file" ]; then
  mkdir -p "$(dirname "$file")"
  printf '{{"type":"vhost-user","version":"1.1.0","vhost-user":{{"mode":"client","path":"/var/run/vhost/%s.sock"}}}}' "$CNI_IFNAME" > "$file"
fi
printf '{{"cniVersion":"1.0.0","interfaces":[{{"name":"%s","sandbox":"%s"}}]}}' "$CNI_IFNAME" "$CNI_NETNS"
"#,
        log = log.display()
    );
    let path = bin.join("probe");
    std::fs::write(&path, script).expect("writing the probe plugin");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A node: its namespace with the VF's netdev, the sysfs tree naming it, the PF, and an engine
/// over the standalone catalog's directories.
struct Node {
    ns: Netns,
    vf_ifname: String,
    dir: TempDir,
    pf: Arc<FakePf>,
    engine: Engine,
}

impl Node {
    /// `driver`: the VF's; a userspace one has no netdev.
    fn new(driver: &str) -> Node {
        let ns = Netns::new("plx-di");
        let dir = tempfile::Builder::new().prefix("plexus-devinfo-").tempdir().expect("tempdir");
        let path = |sub: &str| dir.path().join(sub);
        for sub in ["default", "nads", "pods", "state", "bin", "log"] {
            std::fs::create_dir_all(path(sub)).expect("node dirs");
        }
        let vf_ifname = unique_ifname("vf");
        let userspace = driver == "vfio-pci";
        if !userspace {
            ns.ip(&format!(
                "link add {vf_ifname} address {VF_MAC} mtu 1500 type veth peer name {vf_ifname}p"
            ));
            ns.ip(&format!("link set {vf_ifname}p up"));
        }
        fake_sysfs(&path("sys"), driver, (!userspace).then_some(vf_ifname.as_str()));
        let pf = Arc::new(FakePf::default());
        pf.vfs.lock().unwrap().insert(
            (PF.to_owned(), VF_INDEX),
            VfAdmin { mac: VF_MAC.parse().expect("MAC"), ..Default::default() },
        );
        probe_plugin(&path("bin"), &path("log"));
        std::fs::write(
            path("default").join("10-default.conflist"),
            json!({"cniVersion": "1.1.0", "name": "cluster-wide-default", "plugins": [{"type": "default-fake"}]})
                .to_string(),
        )
        .expect("default network");

        let ipam =
            Ipam { bin_dirs: vec![PathBuf::from(REFERENCE_PLUGINS)], timeout: Duration::from_secs(10) };
        let sriov = SriovPlugin::new(ipam, &path("state"), path("sys"))
            .with_host_netns(ns.path())
            .with_pf_control(pf.clone());
        let mut natives = NativePlugins::default();
        natives.register("sriov", Arc::new(sriov));
        natives.register("default-fake", Arc::new(DefaultNetwork));
        let catalog = FileCatalog::new(vec![path("nads")], vec![path("pods")], path("state").join("pods"));
        let engine = Engine::new(
            EngineConfig {
                default_network_dir: path("default"),
                network_conf_dirs: Vec::new(),
                allowed_namespaces: Vec::new(),
                strict_annotations: true,
                device_info_dir: path("devinfo"),
                network_status_keys: plexus_agent::spec::status::StatusKeys::Spec,
            },
            Arc::new(catalog),
            Delegator { bin_dirs: vec![path("bin")], timeout: Duration::from_secs(10), natives },
            StateStore::new(&path("state")),
        );
        Node { ns, vf_ifname, dir, pf, engine }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    fn nad(&self, name: &str, config: Value) {
        let nad = json!({
            "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS}, "spec": {"config": config.to_string()},
        });
        std::fs::write(self.path("nads").join(format!("{NS}_{name}.json")), nad.to_string()).expect("NAD");
    }

    fn pod(&self, name: &str, networks: &str) {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "namespace": NS,
                                      "annotations": {"k8s.v1.cni.cncf.io/networks": networks}}});
        std::fs::write(self.path("pods").join(format!("{NS}_{name}.json")), pod.to_string()).expect("pod");
    }

    async fn cni(&self, command: &str, pod: &str, cid: &str, netns: &Netns) -> Response {
        self.engine
            .handle(Request {
                command: command.into(),
                container_id: Some(cid.into()),
                netns: Some(netns.path_str()),
                ifname: Some("eth0".into()),
                args: Some(format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={pod}")),
                path: None,
                config: json!({"cniVersion": "1.1.0", "name": "plexus", "type": "plexus"}).to_string(),
            })
            .await
    }

    fn network_status(&self, pod: &str) -> Value {
        let path = self.path("state").join("pods").join(NS).join(format!("{pod}.network-status.json"));
        serde_json::from_slice(&std::fs::read(&path).expect("network-status")).expect("JSON")
    }

    fn device_info_files(&self) -> Vec<String> {
        plexus_testkit::files_in(&self.path("devinfo").join("cni"))
    }

    fn device_info_file(&self, name: &str) -> Value {
        let path = self.path("devinfo").join("cni").join(name);
        serde_json::from_slice(&std::fs::read(&path).expect("the device-info file")).expect("JSON")
    }

    /// The config `probe` read for an ADD or DEL on `ifname`.
    fn probe_config(&self, command: &str, ifname: &str) -> Value {
        let path = self.path("log").join(format!("{command}-{ifname}.json"));
        serde_json::from_slice(&std::fs::read(&path).expect("the probe's log")).expect("JSON")
    }
}

/// `<root>/bus/pci/devices` with the PF and its VF `VF_INDEX`, bound to `driver`.
fn fake_sysfs(root: &Path, driver: &str, vf_netdev: Option<&str>) {
    let devices = root.join("bus/pci/devices");
    std::fs::create_dir_all(devices.join(PF_PCI).join("net").join(PF)).expect("PF");
    let vf = devices.join(VF_PCI);
    std::fs::create_dir_all(&vf).expect("VF");
    symlink(format!("../{PF_PCI}"), vf.join("physfn")).expect("physfn");
    symlink(format!("../../../bus/pci/drivers/{driver}"), vf.join("driver")).expect("driver");
    if let Some(netdev) = vf_netdev {
        std::fs::create_dir_all(vf.join("net").join(netdev)).expect("VF netdev");
    }
    symlink(format!("../{VF_PCI}"), devices.join(PF_PCI).join(format!("virtfn{VF_INDEX}"))).expect("virtfn");
}

fn sriov_config() -> Value {
    json!({
        "cniVersion": "1.1.0", "name": "sriov-a", "type": "sriov", "deviceID": VF_PCI,
        "ipam": {"type": "static", "addresses": [{"address": "10.56.0.5/24"}]}
    })
}

#[track_caller]
fn ok(r: &Response) {
    assert_eq!(r.exit_code, 0, "CNI call failed: {}", r.stdout);
}

#[tokio::test]
async fn kernel_a_vfs_device_info_is_in_the_network_status_and_its_file_until_del() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-dp");
    node.nad("sriov-a", sriov_config());
    node.pod("vf-pod", "sriov-a");

    ok(&node.cni("ADD", "vf-pod", "c-vf", &pod).await);
    let device_info = json!({"type": "pci", "version": "1.1.0",
                             "pci": {"pci-address": VF_PCI, "pf-pci-address": PF_PCI}});
    assert_eq!(
        node.network_status("vf-pod"),
        json!([
            {"name": "cluster-wide-default", "interface": "eth0", "ips": ["10.9.0.2"],
             "mac": "02:00:00:00:00:01", "default": true},
            {"name": "team/sriov-a", "interface": "net1", "ips": ["10.56.0.5"], "mac": VF_MAC,
             "default": false, "device-info": device_info}
        ])
    );
    assert!(pod.has_link("net1"), "the VF's netdev is in the pod");
    // One file per attachment, unique by container and interface (spec 4.2.1); the default
    // network described no device, so it has none.
    assert_eq!(node.device_info_files(), ["c-vf-net1-device.json"]);
    assert_eq!(node.device_info_file("c-vf-net1-device.json"), device_info);

    ok(&node.cni("DEL", "vf-pod", "c-vf", &pod).await);
    assert_eq!(node.device_info_files(), Vec::<String>::new(), "DEL removes the file (spec 4.2.1)");
    assert!(node.ns.has_link(&node.vf_ifname), "the VF's netdev is back on the node");
    assert_eq!(node.pf.vfs.lock().unwrap()[&(PF.to_owned(), VF_INDEX)].mac.to_string(), VF_MAC);
}

#[tokio::test]
async fn kernel_a_vf_held_by_a_userspace_driver_says_so() {
    let node = Node::new("vfio-pci");
    let pod = Netns::new("plx-dp");
    node.nad("sriov-a", sriov_config());
    node.pod("dpdk-pod", r#"[{"name": "sriov-a", "interface": "dpdk0"}]"#);

    ok(&node.cni("ADD", "dpdk-pod", "c-dpdk", &pod).await);
    let device_info = json!({"type": "pci", "version": "1.1.0", "pci": {
        "pci-address": VF_PCI, "pf-pci-address": PF_PCI, "plexus.dev/userspace-driver": "vfio-pci"}});
    assert_eq!(
        node.network_status("dpdk-pod")[1],
        json!({"name": "team/sriov-a", "interface": "dpdk0", "ips": ["10.56.0.5"], "mac": VF_MAC,
               "default": false, "device-info": device_info})
    );
    assert_eq!(node.device_info_file("c-dpdk-dpdk0-device.json"), device_info, "for the DPDK application");
    ok(&node.cni("DEL", "dpdk-pod", "c-dpdk", &pod).await);
    assert_eq!(node.device_info_files(), Vec::<String>::new());
}

/// A plugin binary that declares the `CNIDeviceInfoFile` capability gets its attachment's path
/// (Device Information Specification 5.1.1) and what it writes there is the status'
/// `device-info` (6.1.1); one that does not declare it gets no path.
#[tokio::test]
async fn kernel_a_plugin_declaring_the_capability_writes_the_device_info() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-dp");
    node.nad(
        "vhost",
        json!({"cniVersion": "1.0.0", "name": "vhost", "type": "probe", "capabilities": {"CNIDeviceInfoFile": true}}),
    );
    node.nad("plain", json!({"cniVersion": "1.0.0", "name": "plain", "type": "probe"}));
    node.pod("vhost-pod", "vhost@vhu0,plain@net2");

    ok(&node.cni("ADD", "vhost-pod", "c-vhost", &pod).await);
    let file = node.path("devinfo").join("cni").join("c-vhost-vhu0-device.json");
    assert_eq!(
        node.probe_config("ADD", "vhu0")["runtimeConfig"],
        json!({"CNIDeviceInfoFile": file.display().to_string()})
    );
    assert_eq!(node.probe_config("ADD", "net2").get("runtimeConfig"), None);
    let status = node.network_status("vhost-pod");
    assert_eq!(
        status[1],
        json!({"name": "team/vhost", "interface": "vhu0", "default": false, "device-info": {
            "type": "vhost-user", "version": "1.1.0",
            "vhost-user": {"mode": "client", "path": "/var/run/vhost/vhu0.sock"}}})
    );
    assert_eq!(status[2], json!({"name": "team/plain", "interface": "net2", "default": false}));
    ok(&node.cni("DEL", "vhost-pod", "c-vhost", &pod).await);
    assert_eq!(node.device_info_files(), Vec::<String>::new());
}

/// `infiniband-guid` reaches the plugins as `runtimeConfig.infinibandGUID` (spec 4.1.2.1.10.2);
/// a network none of whose plugins declares the capability fails the attachment, naming it.
#[tokio::test]
async fn kernel_infiniband_guid_is_the_infiniband_guid_capability_and_is_checked() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-dp");
    node.nad(
        "ib",
        json!({"cniVersion": "1.0.0", "name": "ib", "type": "probe", "capabilities": {"infinibandGUID": true}}),
    );
    node.nad("eth-only", json!({"cniVersion": "1.0.0", "name": "eth-only", "type": "probe"}));
    node.pod(
        "ib-pod",
        r#"[{"name": "ib", "interface": "ib0", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}]"#,
    );
    ok(&node.cni("ADD", "ib-pod", "c-ib", &pod).await);
    assert_eq!(
        node.probe_config("ADD", "ib0")["runtimeConfig"],
        json!({"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"})
    );
    ok(&node.cni("DEL", "ib-pod", "c-ib", &pod).await);
    assert_eq!(
        node.probe_config("DEL", "ib0")["runtimeConfig"],
        json!({"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"})
    );

    node.pod("eth-pod", r#"[{"name": "eth-only", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}]"#);
    let refused = node.cni("ADD", "eth-pod", "c-eth", &pod).await;
    assert_eq!(refused.exit_code, 1);
    let err: Value = serde_json::from_str(&refused.stdout).expect("a CNI error");
    assert_eq!(err["code"], 7, "{err}");
    assert_eq!(
        err["msg"],
        "network team/eth-only cannot honour the pod's \"infiniband-guid\" request: no plugin in its CNI config \
         declares \"capabilities\": {\"infinibandGUID\": true}; add a plugin that does, or do not request \
         \"infiniband-guid\" of this network"
    );
    assert!(!node.path("log").join("ADD-net1.json").exists(), "nothing was attempted");

    node.pod("bad-pod", r#"[{"name": "ib", "infiniband-guid": "24:8a:07:03:00:8d:ae"}]"#);
    let invalid = node.cni("ADD", "bad-pod", "c-bad", &pod).await;
    let err: Value = serde_json::from_str(&invalid.stdout).expect("a CNI error");
    assert_eq!(err["code"], 7, "{err}");
    assert!(err["msg"].as_str().unwrap().contains("not an 8-byte InfiniBand GUID"), "{err}");
    assert_eq!(node.device_info_files(), Vec::<String>::new());
    assert_eq!(plexus_testkit::files_in(&node.path("state").join("attachments")), Vec::<String>::new());
}
