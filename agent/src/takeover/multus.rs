//! Multus's on-node cache of a container's delegates, read as Multus's current source writes
//! it (k8snetworkplumbingwg/multus-cni: `saveDelegates` at ADD; `CmdDel`, `delPlugins` and
//! `CreateCNIRuntimeConf` at DEL). Pure: the files' bytes in, the DELs Multus would run out.
//!
//! Under Multus's `cniDir` (`/var/lib/cni/multus` unless its config says otherwise; the thin
//! plugin writes it from the node, the thick daemon through its mount of the same path, in the
//! same format):
//! - `<cniDir>/<container ID>`: a JSON list of `DelegateNetConf`, the cluster default network
//!   first (Multus's "master plugin"), then each selected network in the annotation's order.
//!   Each carries its CNI config verbatim as `Bytes` (Go's base64 of a `[]byte`; a configlist
//!   rebuilt losslessly at ADD), its `Name` (`namespace/name` for a NAD) and the pod's requests
//!   (`ifnameRequest`, `macRequest`, `ipRequest`, `infinibandGUIDRequest`, `deviceID`). Port
//!   mappings and bandwidth are not written (`json:"-"`): Multus's own DEL passes none either.
//! - `<cniDir>/results/<network>-<container ID>-<ifname>`: libcni's cache of each delegate's
//!   ADD (`kind: cniCacheV1`), whose `result` is the `prevResult` of its DEL.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::cni::config::{ConfigError, NetworkConfigList};
use crate::cni::result::CniResult;
use crate::cni::{CniCode, ErrorCode};
use crate::spec::delegate_conf::DelegateConfig;

/// Why a container's delegates cache cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MultusCacheError {
    #[error("Multus's delegates cache is not a JSON list of delegates: {0}")]
    NotAList(#[source] serde_json::Error),
    #[error("Multus's delegates cache lists no delegate")]
    Empty,
    #[error("delegate {index} ({name}) of Multus's delegates cache has no \"Bytes\" (its CNI config)")]
    NoConfig { index: usize, name: String },
    #[error("delegate {index} ({name}) of Multus's delegates cache: its \"Bytes\" is not base64: {source}")]
    NotBase64 {
        index: usize,
        name: String,
        #[source]
        source: base64::DecodeError,
    },
    #[error("delegate {index} ({name}) of Multus's delegates cache: {source}")]
    Config {
        index: usize,
        name: String,
        #[source]
        source: ConfigError,
    },
}

/// A file the node holds that cannot be decoded.
impl CniCode for MultusCacheError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::DecodeFailure
    }
}

/// One delegate as Multus cached it.
#[derive(Debug, Clone, PartialEq)]
pub struct CachedDelegate {
    /// `namespace/name` of its NAD, or the config's name (the cluster default network's).
    pub name: String,
    pub list: NetworkConfigList,
    pub ifname_request: Option<String>,
    pub mac_request: Option<String>,
    pub ip_request: Vec<String>,
    pub infiniband_guid_request: Option<String>,
    pub device_id: Option<String>,
}

/// `types.DelegateNetConf` as Go's `encoding/json` writes it (field names as Multus tags them;
/// untagged ones under their Go names).
#[derive(Deserialize)]
struct RawDelegate {
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "Bytes", default)]
    bytes: Option<String>,
    #[serde(rename = "ifnameRequest", default)]
    ifname_request: Option<String>,
    #[serde(rename = "macRequest", default)]
    mac_request: Option<String>,
    #[serde(rename = "ipRequest", default)]
    ip_request: Option<Vec<String>>,
    #[serde(rename = "infinibandGUIDRequest", default)]
    infiniband_guid_request: Option<String>,
    #[serde(rename = "deviceID", default)]
    device_id: Option<String>,
}

/// The delegates of a container's cache file. `fallback_version` stands in for a config
/// without `cniVersion`, as Multus's DEL gives such a configlist its own config's version.
pub fn parse_delegates(text: &[u8], fallback_version: &str) -> Result<Vec<CachedDelegate>, MultusCacheError> {
    let raw: Vec<RawDelegate> = serde_json::from_slice(text).map_err(MultusCacheError::NotAList)?;
    if raw.is_empty() {
        return Err(MultusCacheError::Empty);
    }
    raw.into_iter().enumerate().map(|(index, d)| delegate(index, d, fallback_version)).collect()
}

fn delegate(
    index: usize,
    d: RawDelegate,
    fallback_version: &str,
) -> Result<CachedDelegate, MultusCacheError> {
    let name = d.name;
    let encoded = d
        .bytes
        .filter(|b| !b.is_empty())
        .ok_or_else(|| MultusCacheError::NoConfig { index, name: name.clone() })?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|source| MultusCacheError::NotBase64 { index, name: name.clone(), source })?;
    let config_error = |source| MultusCacheError::Config { index, name: name.clone(), source };
    let mut value: Value =
        serde_json::from_slice(&bytes).map_err(|e| config_error(ConfigError::NotJson(e)))?;
    if let Some(top) = value.as_object_mut() {
        if top.get("cniVersion").and_then(Value::as_str).is_none_or(str::is_empty) {
            top.insert("cniVersion".into(), Value::String(fallback_version.to_owned()));
        }
    }
    // A NAD's config without a name is named after the NAD.
    let nad_name = name.rsplit('/').next().filter(|n| !n.is_empty());
    let list = NetworkConfigList::from_value(value, nad_name).map_err(config_error)?;
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    Ok(CachedDelegate {
        name,
        list,
        ifname_request: nonempty(d.ifname_request),
        mac_request: nonempty(d.mac_request),
        ip_request: d.ip_request.unwrap_or_default(),
        infiniband_guid_request: nonempty(d.infiniband_guid_request),
        device_id: nonempty(d.device_id),
    })
}

/// One DEL to run, in the order given by [`teardown`].
#[derive(Debug, Clone, PartialEq)]
pub struct DelegateTeardown {
    /// Its position in the cache (0: the cluster default network).
    pub index: usize,
    /// `namespace/name` of its NAD, or the default network's name.
    pub network: String,
    pub ifname: String,
    pub delegate: DelegateConfig,
    /// The file name of its ADD's libcni result cache under `<cniDir>/results/`.
    pub result_cache: String,
    /// The device-information file Multus had the delegate write (with a device ID only).
    pub device_info_file: Option<PathBuf>,
}

/// The DELs of `delegates`, last first, as Multus's `delPlugins` runs them: each on the
/// interface Multus gave it (its `ifnameRequest`; the runtime's `CNI_IFNAME` for the default
/// network; else `net<position>`), with the runtime's runtimeConfig and, for the selected
/// networks, the pod's requests for them.
pub fn teardown(
    delegates: &[CachedDelegate],
    container_id: &str,
    cni_ifname: &str,
    runtime_config: &Map<String, Value>,
    device_info_dir: &Path,
) -> Vec<DelegateTeardown> {
    let mut out: Vec<DelegateTeardown> = delegates
        .iter()
        .enumerate()
        .map(|(index, d)| {
            let ifname = match (&d.ifname_request, index) {
                (Some(requested), _) => requested.clone(),
                (None, 0) => cni_ifname.to_owned(),
                (None, _) => format!("net{index}"),
            };
            let mut rc = runtime_config.clone();
            let mut device_info_file = None;
            if index > 0 {
                if !d.ip_request.is_empty() {
                    rc.insert("ips".into(), json!(d.ip_request));
                }
                if let Some(mac) = &d.mac_request {
                    rc.insert("mac".into(), json!(mac));
                }
                if let Some(guid) = &d.infiniband_guid_request {
                    rc.insert("infinibandGUID".into(), json!(guid));
                }
                if let Some(id) = &d.device_id {
                    rc.insert("deviceID".into(), json!(id));
                    let file = device_info_file_of(device_info_dir, &d.name, container_id, &ifname);
                    rc.insert(crate::devinfo::CAPABILITY.into(), json!(file.display().to_string()));
                    device_info_file = Some(file);
                }
            }
            DelegateTeardown {
                index,
                network: d.name.clone(),
                result_cache: result_cache_name(&d.list.name, container_id, &ifname),
                ifname,
                delegate: DelegateConfig { list: d.list.clone(), runtime_config: rc },
                device_info_file,
            }
        })
        .collect();
    out.reverse();
    out
}

/// libcni's name of a result cache file: `<network>-<container ID>-<ifname>`.
pub fn result_cache_name(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{network}-{container_id}-{ifname}")
}

/// Multus's name of a delegate's device-information file (`GetCNIDeviceInfoPath` of
/// `<name>-<container ID>_<ifname>`, every `/` made `-`), under the Device Information
/// Specification's `cni/` directory.
pub fn device_info_file_of(root: &Path, name: &str, container_id: &str, ifname: &str) -> PathBuf {
    root.join("cni").join(format!("{name}-{container_id}_{ifname}").replace('/', "-"))
}

/// What a libcni result cache file (`kind: cniCacheV1`) says of the call it records.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CachedRun {
    pub container_id: String,
    pub ifname: String,
    pub network: String,
    pub netns: String,
    /// `CNI_ARGS` as the runtime passed them (`K=V;K=V`).
    pub cni_args: String,
    pub result: Option<Value>,
}

/// A libcni result cache file's content; None when it is not one.
pub fn parse_cached_run(text: &[u8]) -> Option<CachedRun> {
    let v: Value = serde_json::from_slice(text).ok()?;
    let field = |name: &str| v[name].as_str().unwrap_or_default().to_owned();
    let container_id = field("containerId");
    if container_id.is_empty() {
        return None;
    }
    let cni_args = v["cniArgs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pair| Some(format!("{}={}", pair.get(0)?.as_str()?, pair.get(1)?.as_str()?)))
        .collect::<Vec<_>>()
        .join(";");
    Some(CachedRun {
        container_id,
        ifname: field("ifName"),
        network: field("networkName"),
        netns: field("netns"),
        cni_args,
        result: v.get("result").filter(|r| r.is_object()).cloned(),
    })
}

/// The `prevResult` of a DEL from its ADD's cached result, in the config's version as libcni
/// converts it; None when there is none or it cannot be read (the DEL then runs without).
pub fn prev_result(run: &CachedRun, cni_version: &str) -> Option<Value> {
    let result = run.result.as_ref()?;
    CniResult::parse(result, cni_version).ok()?.to_version(cni_version).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delegates file as Go's `json.Marshal` of `[]*types.DelegateNetConf` writes it: the
    /// structured `Conf`/`ConfList` (unused by DEL) beside the verbatim `Bytes`.
    fn cache_file(delegates: &[Value]) -> Vec<u8> {
        serde_json::to_vec(&Value::Array(delegates.to_vec())).unwrap()
    }

    fn b64(v: &Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(v).unwrap())
    }

    fn default_network() -> Value {
        let conf = json!({"cniVersion":"1.0.0","name":"cluster","plugins":[
            {"type":"bridge","bridge":"cni0","ipam":{"type":"host-local","subnet":"10.244.0.0/24"}},
            {"type":"portmap","capabilities":{"portMappings":true}}]});
        json!({
            "Conf": {"cniVersion":"","type":""},
            "ConfList": {"cniVersion":"1.0.0","name":"cluster","plugins":[{"type":"bridge"},{"type":"portmap"}]},
            "Name": "cluster",
            "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
            "Bytes": b64(&conf),
        })
    }

    fn macvlan_nad() -> Value {
        let conf = json!({"cniVersion":"0.4.0","type":"macvlan","master":"eth1",
            "ipam":{"type":"host-local","subnet":"192.168.50.0/24"}});
        json!({
            "Conf": {"cniVersion":"0.4.0","type":"macvlan"},
            "ConfList": {"cniVersion":"","name":"","plugins":null},
            "Name": "team-a/macvlan-net",
            "ipRequest": ["192.168.50.7/24"], "macRequest": "02:00:00:00:00:07",
            "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
            "Bytes": b64(&conf),
        })
    }

    fn sriov_nad() -> Value {
        let conf = json!({"cniVersion":"1.0.0","name":"sriov-a","plugins":[{"type":"sriov","deviceID":"0000:03:02.0",
            "capabilities":{"ips":true,"deviceID":true,"CNIDeviceInfoFile":true}}]});
        json!({
            "ConfList": {"cniVersion":"1.0.0","name":"sriov-a","plugins":[{"type":"sriov"}]},
            "Name": "team-a/sriov-a", "ifnameRequest": "vf0",
            "deviceID": "0000:03:02.0", "resourceName": "intel.com/sriov",
            "IsFilterV4Gateway": false, "IsFilterV6Gateway": false,
            "Bytes": b64(&conf),
        })
    }

    /// Files Multus itself wrote (its thin plugin built from its source, attaching a pod of a
    /// real kubelet and containerd with a macvlan NAD on `net1` and a bridge NAD asked on
    /// `blue0`): read as its DEL reads them.
    #[test]
    fn the_files_multus_wrote_for_a_real_pod_give_the_dels_multus_would_run() {
        const CID: &str = "b382374d0cefa7eaab2d14336765adc50d41afc4a84d01d354682e2cf1f442b9";
        let d = parse_delegates(include_bytes!("testdata/multus-delegates-mp1.json"), "0.3.1").unwrap();
        let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["kube-node-default", "default/mvnet", "default/blue"]);
        assert_eq!(d[1].list.plugin_type(0), "macvlan");
        assert_eq!(d[1].list.plugins[0]["master"], "kn-mv0");
        assert_eq!(d[0].list.plugins.len(), 2, "bridge and portmap");
        let plan = teardown(&d, CID, "eth0", &Map::new(), Path::new("/d"));
        let caches: Vec<&str> = plan.iter().map(|t| t.result_cache.as_str()).collect();
        assert_eq!(
            caches,
            [
                format!("blue-{CID}-blue0"),
                format!("mvnet-{CID}-net1"),
                format!("kube-node-default-{CID}-eth0")
            ]
        );
        let run = parse_cached_run(include_bytes!("testdata/multus-result-mvnet-net1.json")).unwrap();
        assert_eq!(
            (run.container_id.as_str(), run.ifname.as_str(), run.network.as_str()),
            (CID, "net1", "mvnet")
        );
        assert!(run.cni_args.contains("K8S_POD_NAME=mp1"), "{}", run.cni_args);
        let prev = prev_result(&run, &plan[1].delegate.list.cni_version).unwrap();
        assert_eq!(prev["ips"][0]["address"], "10.71.0.2/24");
    }

    #[test]
    fn every_delegate_is_read_from_its_verbatim_bytes_with_the_pods_requests() {
        let text = cache_file(&[default_network(), macvlan_nad(), sriov_nad()]);
        let d = parse_delegates(&text, "1.1.0").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].name, "cluster");
        assert_eq!(d[0].list.plugins.len(), 2);
        assert_eq!(
            d[0].list.plugins[0]["ipam"]["subnet"], "10.244.0.0/24",
            "the config is Bytes', not ConfList's"
        );
        // A NAD config without a name is named after the NAD.
        assert_eq!(d[1].list.name, "macvlan-net");
        assert_eq!(d[1].list.cni_version, "0.4.0");
        assert_eq!(d[1].ip_request, ["192.168.50.7/24"]);
        assert_eq!(d[1].mac_request.as_deref(), Some("02:00:00:00:00:07"));
        assert_eq!(d[2].ifname_request.as_deref(), Some("vf0"));
        assert_eq!(d[2].device_id.as_deref(), Some("0000:03:02.0"));
    }

    #[test]
    fn a_config_without_a_version_gets_the_fallback_as_multus_gives_it_its_own() {
        let conf = json!({"name":"old","plugins":[{"type":"bridge"}]});
        let text = cache_file(&[json!({"Name":"old","Bytes": b64(&conf)})]);
        assert_eq!(parse_delegates(&text, "0.4.0").unwrap()[0].list.cni_version, "0.4.0");
    }

    #[test]
    fn what_is_not_multus_cache_says_which_delegate_and_why() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{}".to_vec(), "not a JSON list"),
            (b"[]".to_vec(), "lists no delegate"),
            (cache_file(&[json!({"Name":"a/b"})]), "delegate 0 (a/b)"),
            (cache_file(&[json!({"Name":"a/b","Bytes":"%%%"})]), "not base64"),
            (
                cache_file(&[
                    default_network(),
                    json!({"Name":"a/c","Bytes": b64(&json!({"cniVersion":"1.0.0"}))}),
                ]),
                "delegate 1 (a/c)",
            ),
        ];
        for (text, want) in cases {
            let e = parse_delegates(&text, "1.0.0").unwrap_err();
            assert!(e.to_string().contains(want), "{e} lacks {want:?}");
            assert_eq!(e.cni_code(), ErrorCode::DecodeFailure);
        }
    }

    #[test]
    fn the_dels_run_last_first_on_the_interfaces_multus_gave() {
        let text = cache_file(&[default_network(), macvlan_nad(), sriov_nad(), macvlan_nad()]);
        let d = parse_delegates(&text, "1.0.0").unwrap();
        let kubelet = json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]});
        let plan = teardown(&d, "c1", "eth0", kubelet.as_object().unwrap(), Path::new("/run/devinfo"));
        let order: Vec<(usize, &str)> = plan.iter().map(|t| (t.index, t.ifname.as_str())).collect();
        assert_eq!(order, [(3, "net3"), (2, "vf0"), (1, "net1"), (0, "eth0")]);
        assert_eq!(plan[3].result_cache, "cluster-c1-eth0");
        assert_eq!(plan[2].result_cache, "macvlan-net-c1-net1");
        // The default network gets the runtime's runtimeConfig alone.
        assert_eq!(Value::Object(plan[3].delegate.runtime_config.clone()), kubelet);
        // A selected network gets its requests too.
        let rc = &plan[2].delegate.runtime_config;
        assert_eq!(rc["ips"], json!(["192.168.50.7/24"]));
        assert_eq!(rc["mac"], "02:00:00:00:00:07");
        assert!(plan[2].device_info_file.is_none());
        let vf = &plan[1];
        assert_eq!(vf.delegate.runtime_config["deviceID"], "0000:03:02.0");
        let file = PathBuf::from("/run/devinfo/cni/team-a-sriov-a-c1_vf0");
        assert_eq!(vf.device_info_file.as_ref(), Some(&file));
        assert_eq!(vf.delegate.runtime_config["CNIDeviceInfoFile"], file.display().to_string());
    }

    #[test]
    fn a_result_cache_gives_the_call_and_its_result_in_the_configs_version() {
        let text = serde_json::to_vec(&json!({
            "kind": "cniCacheV1", "containerId": "c1", "config": "e30=", "ifName": "net1",
            "networkName": "macvlan-net", "netns": "/var/run/netns/p1",
            "cniArgs": [["IgnoreUnknown","true"],["K8S_POD_NAMESPACE","team-a"],["K8S_POD_NAME","p"]],
            "result": {"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/var/run/netns/p1"}],
                       "ips":[{"address":"192.168.50.7/24","interface":0}]}
        }))
        .unwrap();
        let run = parse_cached_run(&text).unwrap();
        assert_eq!(run.cni_args, "IgnoreUnknown=true;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=p");
        assert_eq!((run.ifname.as_str(), run.network.as_str()), ("net1", "macvlan-net"));
        let prev = prev_result(&run, "0.4.0").unwrap();
        assert_eq!(prev["cniVersion"], "0.4.0");
        assert_eq!(prev["ips"][0]["version"], "4", "0.4.0's shape");
        assert!(parse_cached_run(b"{\"kind\":\"cniCacheV1\"}").is_none());
        assert!(parse_cached_run(b"not json").is_none());
        let without = CachedRun { result: None, ..run };
        assert_eq!(prev_result(&without, "1.0.0"), None);
    }
}
