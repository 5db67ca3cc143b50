//! SR-IOV hot-plug: a running pod's selection gains an `sriov` network and loses it again, as
//! live attachments apply it (`crate::live`), through the engine with the native sriov plugin
//! on the sysfs-backed VF stand-in (a veth behind a fake sysfs tree, the PF side a
//! [`FakePf`]): the VF moves into the pod and is published, then comes back restored.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use plexus_testkit::{unique_ifname, Netns};
use serde_json::{json, Value};

use super::fixture::FakePf;
use crate::catalog::files::FileCatalog;
use crate::cni::config::NetworkConfigList;
use crate::delegate::{Delegator, NativePlugins};
use crate::engine::{Engine, EngineConfig};
use crate::ipam::Ipam;
use crate::native::sriov::plugin::SriovPlugin;
use crate::native::sriov::sysfs::fake;
use crate::native::sriov::vf_netlink::{LinkState, VfAdmin, VlanProto};
use crate::spec::delegate_conf::DelegateConfig;
use crate::state::{AttachmentRecord, ContainerRecord, FrontEnd, PodRef, StateStore};

const PF: &str = "ens2f0";
const PF_PCI: &str = "0000:82:00.0";
const VF_PCI: &str = "0000:82:02.1";
const VF_INDEX: u32 = 1;
const CID: &str = "c-hotplug";

fn original_admin() -> VfAdmin {
    VfAdmin {
        mac: "02:00:00:00:0f:01".parse().expect("a MAC"),
        vlan: 7,
        qos: 0,
        proto: VlanProto::Dot1Q,
        spoofchk: true,
        trust: false,
        link_state: LinkState::Auto,
        min_tx_rate: 0,
        max_tx_rate: 0,
    }
}

fn nad(name: &str, config: &Value) -> Value {
    json!({
        "apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"config": config.to_string()},
    })
}

fn pod_manifest(networks: Option<&str>) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}});
    if let Some(n) = networks {
        pod["metadata"]["annotations"] = json!({"k8s.v1.cni.cncf.io/networks": n});
    }
    pod
}

/// A completed ADD of the pod with the default network alone (never run here: a live change
/// never touches it).
fn recorded_pod(netns: &str) -> ContainerRecord {
    let list = NetworkConfigList::parse(r#"{"cniVersion":"1.0.0","name":"cluster","type":"bridge"}"#, None)
        .expect("a config");
    ContainerRecord {
        container_id: CID.into(),
        ifname: "eth0".into(),
        netns: netns.into(),
        cni_args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=p".into(),
        pod: Some(PodRef { namespace: "team".into(), name: "p".into(), uid: None }),
        attachments: vec![AttachmentRecord {
            network: "cluster".into(),
            is_default: true,
            ifname: "eth0".into(),
            delegate: DelegateConfig { list, runtime_config: Default::default() },
            result: Some(json!({"cniVersion": "1.0.0"})),
            default_route: None,
            pod_network: None,
            device: None,
            device_info: None,
            ipam_claim: None,
            selection: None,
            live_pending: false,
        }],
        complete: true,
        unconfirmed_del_failures: 0,
        front_end: FrontEnd::Npwg,
    }
}

#[tokio::test]
async fn kernel_a_running_pod_gains_a_vf_and_gives_it_back() {
    let node = Netns::new("plx-hn");
    let pod = Netns::new("plx-hp");
    let vf_ifname = unique_ifname("vf");
    let vf_mac = "02:00:00:00:bb:01";
    node.ip(&format!("link add {vf_ifname} address {vf_mac} mtu 1500 type veth peer name {vf_ifname}p"));
    node.ip(&format!("link set {vf_ifname}p up"));
    let sysfs = tempfile::tempdir().expect("tempdir");
    fake::pf(sysfs.path(), PF_PCI, PF);
    fake::vf(sysfs.path(), PF_PCI, VF_INDEX, VF_PCI, "iavf", Some(&vf_ifname));
    let pf = FakePf::with_vf(PF, VF_INDEX, original_admin());

    let dir = tempfile::tempdir().expect("tempdir");
    let (nads, pods, state_dir) =
        (dir.path().join("nads"), dir.path().join("pods"), dir.path().join("state"));
    for d in [&nads, &pods, &state_dir] {
        std::fs::create_dir_all(d).expect("dirs");
    }
    let config = json!({
        "cniVersion": "1.0.0", "name": "vfnet", "type": "sriov", "deviceID": VF_PCI, "vlan": 100,
        "ipam": {"type": "static", "addresses": [{"address": "10.57.0.2/24"}]}
    });
    std::fs::write(nads.join("vfnet.json"), nad("vfnet", &config).to_string()).expect("NAD");
    let write_pod = |networks: Option<&str>| {
        std::fs::write(pods.join("p.json"), pod_manifest(networks).to_string()).expect("pod")
    };
    write_pod(None);

    let ipam = Ipam { bin_dirs: vec![PathBuf::from("/usr/lib/cni")], timeout: Duration::from_secs(10) };
    let plugin = SriovPlugin::new(ipam, &state_dir, sysfs.path().to_path_buf())
        .with_host_netns(node.path())
        .with_pf_control(pf.clone());
    let mut natives = NativePlugins::default();
    natives.register("sriov", Arc::new(plugin));
    let delegator = Delegator {
        bin_dirs: vec![PathBuf::from("/usr/lib/cni")],
        timeout: Duration::from_secs(10),
        natives,
    };
    let catalog = Arc::new(FileCatalog::new(vec![nads.clone()], vec![pods.clone()], state_dir.join("pods")));
    let state = StateStore::new(&state_dir);
    let engine = Engine::new(
        EngineConfig {
            default_network_dir: dir.path().join("default"),
            network_conf_dirs: Vec::new(),
            allowed_namespaces: Vec::new(),
            strict_annotations: false,
            device_info_dir: dir.path().join("devinfo"),
            network_status_keys: crate::spec::status::StatusKeys::Spec,
        },
        catalog,
        delegator,
        state.clone(),
    );
    state.save(&recorded_pod(&pod.path_str()), crate::state::Sync::Durable).await.expect("the pod's record");
    let status_path = state_dir.join("pods/team/p.network-status.json");
    let status = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(&status_path).expect("network-status")).expect("JSON")
    };

    // Hot-plug: the VF is the pod's net1, addressed, tagged, and published.
    write_pod(Some(r#"[{"name":"vfnet"}]"#));
    let outcome = engine.apply_live(CID, "eth0", None).await.expect("the live change");
    assert_eq!(outcome.attached, ["team/vfnet on net1"]);
    assert_eq!(pod.addresses("net1"), ["10.57.0.2/24"]);
    assert!(node.link(&vf_ifname).is_none(), "the VF left the node");
    assert_eq!(pf.admin(PF, VF_INDEX).vlan, 100);
    let published = status();
    assert_eq!(published[1]["name"], "team/vfnet");
    assert_eq!(published[1]["interface"], "net1");
    assert_eq!(published[1]["ips"], json!(["10.57.0.2"]));
    let record = state.load(CID, "eth0").await.expect("load").expect("the record");
    assert_eq!(record.attachments.len(), 2);
    assert!(!record.attachments[1].live_pending && record.attachments[1].result.is_some());

    // Nothing changed: nothing done.
    let again = engine.apply_live(CID, "eth0", None).await.expect("no change");
    assert!(again.is_empty(), "{again:?}");

    // Hot-unplug: the VF comes back to the node as it was.
    write_pod(None);
    let outcome = engine.apply_live(CID, "eth0", None).await.expect("the live change");
    assert_eq!(outcome.detached, ["team/vfnet on net1"]);
    assert!(pod.link("net1").is_none());
    let link = node.link(&vf_ifname).expect("the VF netdev is back on the node");
    assert_eq!(link["address"], vf_mac);
    assert_eq!(pf.admin(PF, VF_INDEX), original_admin());
    assert_eq!(status().as_array().map(Vec::len), Some(1));
    let record = state.load(CID, "eth0").await.expect("load").expect("the record");
    assert_eq!(record.attachments.len(), 1);
}
