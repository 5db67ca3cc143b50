//! ADD and DEL against the real kernel, with a veth standing in for the VF's netdev behind a
//! sysfs tree built in a temporary directory, in a "node" namespace of the test's own.
//!
//! The PF side goes through [`FakePf`]: no PF without SR-IOV hardware has VFs the kernel could
//! configure, so these tests check what would be sent and restored, while
//! `netlink_bytes` proves the messages themselves against iproute2.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use plexus_testkit::{unique_ifname, Netns};
use serde_json::{json, Value};

use super::fixture::FakePf;
use crate::cni::{CniCode, Command};
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::ipam::Ipam;
use crate::native::sriov::plugin::SriovPlugin;
use crate::native::sriov::sysfs::fake;
use crate::native::sriov::vf_netlink::{LinkState, SettingKind, VfAdmin, VlanProto};

const PF: &str = "ens1f0";
const PF_PCI: &str = "0000:81:00.0";
const VF_PCI: &str = "0000:81:02.3";
const VF_INDEX: u32 = 3;

/// A node namespace holding the VF's stand-in netdev, the fake sysfs tree, a state directory
/// and the fake PF.
struct Node {
    ns: Netns,
    vf_ifname: String,
    vf_mac: String,
    sysfs: tempfile::TempDir,
    state: tempfile::TempDir,
    pf: Arc<FakePf>,
}

/// What the VF looked like before any pod: every setting away from its default, so a restore
/// that forgets one shows.
fn original_admin() -> VfAdmin {
    VfAdmin {
        mac: "02:00:00:00:0f:03".parse().expect("a MAC"),
        vlan: 5,
        qos: 1,
        proto: VlanProto::Dot1Q,
        spoofchk: true,
        trust: false,
        link_state: LinkState::Auto,
        min_tx_rate: 0,
        max_tx_rate: 0,
    }
}

impl Node {
    /// `driver`: the VF's driver; a userspace one gets no netdev.
    fn new(driver: &str) -> Node {
        let ns = Netns::new("plx-sn");
        let vf_ifname = unique_ifname("vf");
        let vf_mac = "02:00:00:00:aa:03".to_owned();
        let sysfs = tempfile::tempdir().expect("tempdir");
        fake::pf(sysfs.path(), PF_PCI, PF);
        let userspace = driver == "vfio-pci";
        if !userspace {
            // The peer stays on the node, as the switch side of a VF would.
            ns.ip(&format!(
                "link add {vf_ifname} address {vf_mac} mtu 1500 type veth peer name {vf_ifname}p"
            ));
            ns.ip(&format!("link set {vf_ifname}p up"));
        }
        fake::vf(sysfs.path(), PF_PCI, VF_INDEX, VF_PCI, driver, (!userspace).then_some(vf_ifname.as_str()));
        Node {
            ns,
            vf_ifname,
            vf_mac,
            sysfs,
            state: tempfile::tempdir().expect("tempdir"),
            pf: FakePf::with_vf(PF, VF_INDEX, original_admin()),
        }
    }

    /// A plugin instance, as after an agent (re)start.
    fn plugin(&self) -> SriovPlugin {
        let ipam = Ipam { bin_dirs: vec![PathBuf::from("/usr/lib/cni")], timeout: Duration::from_secs(10) };
        SriovPlugin::new(ipam, self.state.path(), self.sysfs.path().to_path_buf())
            .with_host_netns(self.ns.path())
            .with_pf_control(self.pf.clone())
    }

    fn record_path(&self) -> PathBuf {
        self.state.path().join("sriov").join(format!("{VF_PCI}.json"))
    }

    fn record(&self) -> Option<Value> {
        let bytes = std::fs::read(self.record_path()).ok()?;
        Some(serde_json::from_slice(&bytes).expect("a JSON record"))
    }

    /// The PF reports the original settings and the record is gone.
    fn assert_restored_pf(&self) {
        assert_eq!(self.pf.admin(PF, VF_INDEX), original_admin());
        assert!(self.record().is_none(), "the record is gone");
    }

    /// The VF's netdev is back on the node under its name, with its MAC and MTU, and the PF
    /// reports the original settings.
    fn assert_restored(&self) {
        let link = self.ns.link(&self.vf_ifname).expect("the VF netdev is back on the node");
        assert_eq!(link["address"], self.vf_mac.as_str());
        assert_eq!(link["mtu"], 1500);
        assert_eq!(self.pf.admin(PF, VF_INDEX), original_admin());
        assert!(self.record().is_none(), "the record is gone");
    }
}

fn config(extra: Value) -> Value {
    let mut config = json!({
        // The reference static IPAM plugin of this distribution stops at 1.0.0.
        "cniVersion": "1.0.0",
        "name": "sriov-net",
        "type": "sriov",
        "deviceID": VF_PCI,
        "ipam": {
            "type": "static",
            "addresses": [{"address": "10.55.0.2/24", "gateway": "10.55.0.1"}],
            "routes": [{"dst": "10.56.0.0/16"}]
        }
    });
    for (key, value) in extra.as_object().expect("an object") {
        config[key] = value.clone();
    }
    config
}

fn env(pod: &Netns, container: &str, name: &str) -> InvocationEnv {
    InvocationEnv {
        container_id: container.to_owned(),
        netns: pod.path_str(),
        ifname: "net1".to_owned(),
        args: ["IgnoreUnknown=1", "K8S_POD_NAMESPACE=team", &format!("K8S_POD_NAME={name}")].join(";"),
    }
}

async fn call(
    plugin: &SriovPlugin,
    command: &str,
    config: &Value,
    env: &InvocationEnv,
) -> Result<Option<Value>, DelegateError> {
    let command = Command::parse(command).expect("a CNI verb");
    plugin.invoke(NativeCall { command, config, env, list: None }).await
}

fn code(err: &DelegateError) -> u32 {
    err.cni_code().code()
}

#[tokio::test]
async fn kernel_add_moves_the_vf_into_the_pod_and_del_gives_it_back() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let conf = config(json!({
        "vlan": 100, "vlanQoS": 2, "mac": "02:aa:bb:cc:dd:01", "spoofchk": "off", "trust": "on",
        "link_state": "enable", "max_tx_rate": 1000, "mtu": 1400
    }));
    let env = env(&pod, "c-one", "one");

    let result = call(&plugin, "ADD", &conf, &env).await.expect("ADD").expect("a result");
    assert_eq!(
        result["interfaces"],
        json!([{"name": "net1", "mac": "02:aa:bb:cc:dd:01", "sandbox": pod.path_str()}])
    );
    assert_eq!(result["ips"], json!([{"address": "10.55.0.2/24", "gateway": "10.55.0.1", "interface": 0}]));
    // In the pod: renamed, addressed, routed, up, with the config's MAC and MTU.
    let link = pod.link("net1").expect("net1 in the pod");
    assert_eq!(link["address"], "02:aa:bb:cc:dd:01");
    assert_eq!(link["mtu"], 1400);
    assert!(link["flags"].as_array().is_some_and(|f| f.contains(&json!("UP"))), "{link}");
    assert_eq!(pod.addresses("net1"), ["10.55.0.2/24"]);
    assert!(pod.ip("route show 10.56.0.0/16").contains("via 10.55.0.1 dev net1"));
    assert!(node.ns.link(&node.vf_ifname).is_none(), "gone from the node");
    // The PF was told, in sriov-cni's order; the original state is on disk.
    assert_eq!(
        node.pf.sent(),
        [
            "ens1f0 vf 3 vlan 100 qos 2 proto 802.1Q",
            "ens1f0 vf 3 mac 02:aa:bb:cc:dd:01",
            "ens1f0 vf 3 min_tx_rate 0 max_tx_rate 1000",
            "ens1f0 vf 3 spoofchk off",
            "ens1f0 vf 3 trust on",
            "ens1f0 vf 3 state enable",
        ]
    );
    let record = node.record().expect("a record");
    assert_eq!(record["owner"]["container_id"], "c-one");
    assert_eq!(record["original"]["vlan"], 5);
    assert_eq!(record["netdev"]["name"], node.vf_ifname.as_str());
    assert_eq!(record["netdev"]["mac"], node.vf_mac.as_str());
    assert_eq!(record["complete"], true);

    call(&plugin, "CHECK", &with_prev(&conf, &result), &env).await.expect("CHECK of a healthy attachment");

    call(&plugin, "DEL", &conf, &env).await.expect("DEL");
    node.assert_restored();
    assert_eq!(pod.link_names(), ["lo"]);
    let sent = node.pf.sent();
    assert_eq!(
        sent[6..],
        [
            "ens1f0 vf 3 state auto",
            "ens1f0 vf 3 trust off",
            "ens1f0 vf 3 spoofchk on",
            "ens1f0 vf 3 min_tx_rate 0 max_tx_rate 0",
            "ens1f0 vf 3 mac 02:00:00:00:0f:03",
            "ens1f0 vf 3 vlan 5 qos 1 proto 802.1Q",
        ]
    );
    // Idempotent: a second DEL finds nothing to do and says so by succeeding.
    call(&plugin, "DEL", &conf, &env).await.expect("second DEL");
    node.assert_restored();
    assert_eq!(node.pf.sent().len(), 12, "nothing more sent to the PF");
}

fn with_prev(conf: &Value, result: &Value) -> Value {
    let mut conf = conf.clone();
    conf["prevResult"] = result.clone();
    conf
}

#[tokio::test]
async fn kernel_del_after_an_agent_restart_restores_from_the_record() {
    let node = Node::new("ixgbevf");
    let pod = Netns::new("plx-sp");
    let conf = config(json!({"vlan": 200, "mac": "02:aa:bb:cc:dd:02", "trust": "on"}));
    let env = env(&pod, "c-restart", "restart");
    {
        let before_restart = node.plugin();
        call(&before_restart, "ADD", &conf, &env).await.expect("ADD");
    }
    assert_eq!(pod.link("net1").expect("net1")["address"], "02:aa:bb:cc:dd:02");
    let after_restart = node.plugin();
    call(&after_restart, "DEL", &conf, &env).await.expect("DEL by a new instance");
    node.assert_restored();
    assert_eq!(pod.link_names(), ["lo"]);
}

#[tokio::test]
async fn kernel_del_after_the_pod_namespace_is_gone_restores_the_pf_side() {
    let node = Node::new("iavf");
    let conf = config(json!({"vlan": 300}));
    let pod = Netns::new("plx-sp");
    let env = env(&pod, "c-gone", "gone");
    let plugin = node.plugin();
    call(&plugin, "ADD", &conf, &env).await.expect("ADD");
    // A veth dies with its namespace; a real VF netdev would return to the node's.
    drop(pod);
    call(&plugin, "DEL", &conf, &env).await.expect("DEL without the pod");
    assert_eq!(node.pf.admin(PF, VF_INDEX), original_admin());
    assert!(node.record().is_none());
}

#[tokio::test]
async fn kernel_a_userspace_driver_vf_gets_only_pf_settings() {
    let node = Node::new("vfio-pci");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let env = env(&pod, "c-dpdk", "dpdk");
    let node_links = node.ns.link_names();

    // CNI 1.1.0 results carry the VF's PCI address, which is how a DPDK application finds it.
    let conf = config(json!({"cniVersion": "1.1.0", "ipam": null, "vlan": 42, "mac": "02:aa:bb:cc:dd:03"}));
    let result = call(&plugin, "ADD", &conf, &env).await.expect("ADD").expect("a result");
    assert_eq!(
        result,
        json!({"cniVersion": "1.1.0", "interfaces": [
            {"name": "net1", "mac": "02:aa:bb:cc:dd:03", "sandbox": pod.path_str(), "pciID": VF_PCI}
        ]})
    );
    call(&plugin, "DEL", &conf, &env).await.expect("DEL");
    assert_eq!(node.pf.admin(PF, VF_INDEX), original_admin());
    node.pf.log.lock().unwrap().clear();

    let conf = config(json!({"vlan": 42, "mac": "02:aa:bb:cc:dd:03", "spoofchk": "off"}));
    let result = call(&plugin, "ADD", &conf, &env).await.expect("ADD").expect("a result");
    assert_eq!(
        result["interfaces"],
        json!([{"name": "net1", "mac": "02:aa:bb:cc:dd:03", "sandbox": pod.path_str()}])
    );
    assert_eq!(result["ips"][0]["address"], "10.55.0.2/24", "IPAM's answer is reported for the application");
    assert_eq!(pod.link_names(), ["lo"], "no netdev step");
    assert_eq!(node.ns.link_names(), node_links);
    assert_eq!(
        node.pf.sent(),
        [
            "ens1f0 vf 3 vlan 42 qos 0 proto 802.1Q",
            "ens1f0 vf 3 mac 02:aa:bb:cc:dd:03",
            "ens1f0 vf 3 spoofchk off"
        ]
    );
    let record = node.record().expect("a record");
    assert_eq!(record["netdev"], Value::Null);
    assert_eq!(record["device"]["driver"], "vfio-pci");
    assert_eq!(record["applied"], json!(["vlan", "mac", "spoof_check"]));

    call(&plugin, "DEL", &conf, &env).await.expect("DEL");
    assert_eq!(node.pf.admin(PF, VF_INDEX), original_admin());
    assert!(node.record().is_none());
}

/// With `runtimeConfig.CNIDeviceInfoFile` (which the engine always passes, the type honouring
/// the capability natively), the ADD describes the VF in that file, as the Device Information
/// Specification's CNI plugin does (5.1.2); a file already there (a device plugin's, copied
/// by the engine) is kept.
#[tokio::test]
async fn kernel_the_vf_is_described_in_the_device_info_file() {
    for driver in ["iavf", "vfio-pci"] {
        let node = Node::new(driver);
        let pod = Netns::new("plx-sp");
        let plugin = node.plugin();
        let env = env(&pod, "c-info", "info");
        let file = node.state.path().join("devinfo/cni/c-info-net1-device.json");
        let conf = config(json!({"runtimeConfig": {"CNIDeviceInfoFile": file}}));
        call(&plugin, "ADD", &conf, &env).await.expect("ADD");
        let written: Value = serde_json::from_slice(&std::fs::read(&file).expect("the file")).expect("JSON");
        let mut pci = json!({"pci-address": VF_PCI, "pf-pci-address": PF_PCI});
        if driver == "vfio-pci" {
            pci["plexus.dev/userspace-driver"] = json!("vfio-pci");
        }
        assert_eq!(written, json!({"type": "pci", "version": "1.1.0", "pci": pci}), "{driver}");
        call(&plugin, "DEL", &conf, &env).await.expect("DEL");
        node.assert_restored_pf();

        let allocated = json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": VF_PCI, "rdma-device": "mlx5_3"}});
        std::fs::write(&file, allocated.to_string()).expect("a device plugin's copy");
        call(&plugin, "ADD", &conf, &env).await.expect("ADD");
        let kept: Value = serde_json::from_slice(&std::fs::read(&file).expect("the file")).expect("JSON");
        assert_eq!(kept, allocated, "{driver}: the device plugin's information is kept");
        call(&plugin, "DEL", &conf, &env).await.expect("DEL");
    }
}

#[tokio::test]
async fn kernel_a_second_pod_cannot_take_a_vf_in_use() {
    let node = Node::new("iavf");
    let first = Netns::new("plx-sp");
    let second = Netns::new("plx-sp");
    let plugin = node.plugin();
    let conf = config(json!({"vlan": 10, "mac": "02:aa:bb:cc:dd:04"}));
    let (env1, env2) = (env(&first, "c-first", "first"), env(&second, "c-second", "second"));
    call(&plugin, "ADD", &conf, &env1).await.expect("first ADD");
    let record = node.record();
    let sent = node.pf.sent();

    let err = call(&plugin, "ADD", &conf, &env2).await.expect_err("the VF is taken");
    assert_eq!(code(&err), 11, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(VF_PCI) && text.contains("pod team/first (container c-first, interface net1)"),
        "{text}"
    );
    // The runtime undoes a failed ADD with DEL; that must not touch the first pod's VF.
    call(&plugin, "DEL", &conf, &env2).await.expect("DEL of the refused attachment");
    assert_eq!(second.link_names(), ["lo"], "nothing of the second pod");
    assert_eq!(node.record(), record, "the claim is the first pod's, unchanged");
    assert_eq!(node.pf.sent(), sent, "nothing sent to the PF for the second pod");
    assert_eq!(first.addresses("net1"), ["10.55.0.2/24"], "the first pod is intact");
    assert_eq!(first.link("net1").expect("net1")["address"], "02:aa:bb:cc:dd:04");

    // A second agent (its own in-process locks, same state directory) is refused the same way.
    let other_agent = node.plugin();
    let err = call(&other_agent, "ADD", &conf, &env2).await.expect_err("taken for every agent");
    assert_eq!(code(&err), 11, "{err}");

    call(&plugin, "DEL", &conf, &env1).await.expect("DEL of the first");
    node.assert_restored();
    // Now the second pod can have it.
    call(&plugin, "ADD", &conf, &env2).await.expect("ADD once free");
    call(&plugin, "DEL", &conf, &env2).await.expect("DEL");
    node.assert_restored();
}

#[tokio::test]
async fn kernel_of_two_concurrent_adds_for_one_vf_exactly_one_wins() {
    let node = Node::new("iavf");
    let (a, b) = (Netns::new("plx-sp"), Netns::new("plx-sp"));
    let plugin = node.plugin();
    let conf = config(json!({}));
    let (env_a, env_b) = (env(&a, "c-a", "a"), env(&b, "c-b", "b"));
    let (ra, rb) = tokio::join!(call(&plugin, "ADD", &conf, &env_a), call(&plugin, "ADD", &conf, &env_b));
    assert_eq!(ra.is_ok() as u8 + rb.is_ok() as u8, 1, "{ra:?} / {rb:?}");
    let (winner, loser, loser_ns) = if ra.is_ok() { (&env_a, &env_b, &b) } else { (&env_b, &env_a, &a) };
    assert_eq!(loser_ns.link_names(), ["lo"]);
    call(&plugin, "DEL", &conf, loser).await.expect("DEL of the loser");
    call(&plugin, "DEL", &conf, winner).await.expect("DEL of the winner");
    node.assert_restored();
}

#[tokio::test]
async fn kernel_a_failed_add_leaves_the_vf_as_it_was() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let env = env(&pod, "c-fail", "fail");

    // The driver refuses a setting: the PF settings made before it are undone, nothing moved.
    *node.pf.refuse.lock().unwrap() = Some(SettingKind::Trust);
    let conf = config(json!({"vlan": 10, "spoofchk": "off", "trust": "on"}));
    let err = call(&plugin, "ADD", &conf, &env).await.expect_err("trust refused");
    assert!(err.to_string().contains("vf 3 trust on: Operation not supported"), "{err}");
    assert_eq!(code(&err), 999);
    *node.pf.refuse.lock().unwrap() = None;
    node.assert_restored();
    assert_eq!(pod.link_names(), ["lo"]);

    // IPAM fails after the netdev is in the pod: it comes back.
    let conf = config(json!({"vlan": 10, "ipam": {"type": "no-such-ipam"}}));
    let err = call(&plugin, "ADD", &conf, &env).await.expect_err("no IPAM plugin");
    assert!(err.to_string().contains("no-such-ipam"), "{err}");
    node.assert_restored();
    assert_eq!(pod.link_names(), ["lo"]);

    // The pod already has an interface of that name: refused before the move.
    pod.ip("link add net1 type veth peer name net1p");
    let err = call(&plugin, "ADD", &config(json!({})), &env).await.expect_err("net1 taken");
    assert!(err.to_string().contains("net1"), "{err}");
    node.assert_restored();
}

#[tokio::test]
async fn kernel_config_errors_change_nothing() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let env = env(&pod, "c-bad", "bad");
    for (extra, expected) in [
        (
            json!({"runtimeConfig": {"bandwidth": {"ingressRate": 1000000, "egressRate": 1000000}}}),
            "ingressRate",
        ),
        (json!({"vlan": 5000}), "\"vlan\" must be an integer from 0 to 4094, found 5000"),
        (json!({"deviceID": "0000:81:00.0"}), "not an SR-IOV VF"),
    ] {
        let err = call(&plugin, "ADD", &config(extra), &env).await.expect_err("invalid");
        assert_eq!(code(&err), 7, "{err}");
        assert!(err.to_string().contains(expected), "{err}");
        // The runtime's DEL of the failed ADD succeeds and touches nothing either.
        call(&plugin, "DEL", &config(json!({})), &env).await.expect("DEL");
    }
    // A VF on a kernel driver without a netdev in the node's namespace: someone else has it.
    std::fs::remove_dir_all(node.sysfs.path().join("bus/pci/devices").join(VF_PCI).join("net")).expect("rm");
    let err = call(&plugin, "ADD", &config(json!({})), &env).await.expect_err("no netdev");
    assert_eq!(code(&err), 7, "{err}");
    assert!(err.to_string().contains("has no network interface in the node's namespace"), "{err}");
    assert!(node.pf.sent().is_empty());
    node.assert_restored();
}

#[tokio::test]
async fn kernel_gc_releases_vfs_of_attachments_the_runtime_forgot() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let conf = config(json!({"vlan": 11}));
    let env = env(&pod, "c-gc", "gc");
    call(&plugin, "ADD", &conf, &env).await.expect("ADD");
    let mut gc = config(json!({}));
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c-gc", "ifname": "net1"}]);
    call(&plugin, "GC", &gc, &InvocationEnv::default()).await.expect("GC keeping it");
    assert!(node.record().is_some());
    // The list of another network says nothing about this one's attachments.
    let mut other = config(json!({"name": "other-net"}));
    other["cni.dev/valid-attachments"] = json!([]);
    call(&plugin, "GC", &other, &InvocationEnv::default()).await.expect("GC of another network");
    assert!(node.record().is_some());
    gc["cni.dev/valid-attachments"] = json!([]);
    call(&plugin, "GC", &gc, &InvocationEnv::default()).await.expect("GC releasing it");
    node.assert_restored();
    assert_eq!(pod.link_names(), ["lo"]);
}

#[tokio::test]
async fn kernel_add_again_for_the_same_attachment_starts_from_the_original_vf() {
    let node = Node::new("iavf");
    let pod = Netns::new("plx-sp");
    let plugin = node.plugin();
    let conf = config(json!({"vlan": 12, "mac": "02:aa:bb:cc:dd:05"}));
    let env = env(&pod, "c-again", "again");
    call(&plugin, "ADD", &conf, &env).await.expect("ADD");
    // As after a crash in the middle of the first ADD, or a runtime retrying it.
    call(&plugin, "ADD", &conf, &env).await.expect("ADD again");
    assert_eq!(pod.link("net1").expect("net1")["address"], "02:aa:bb:cc:dd:05");
    assert_eq!(pod.addresses("net1"), ["10.55.0.2/24"]);
    let record = node.record().expect("a record");
    assert_eq!(record["original"]["vlan"], 5, "the original is the VF before the first ADD");
    assert_eq!(record["netdev"]["name"], node.vf_ifname.as_str());
    call(&plugin, "DEL", &conf, &env).await.expect("DEL");
    node.assert_restored();
}
