//! What Multus's ADD leaves on a node, made the way its current source makes it
//! (k8snetworkplumbingwg/multus-cni: `CmdAdd`, `saveDelegates`, `CreateCNIRuntimeConf`, and
//! libcni's result cache), so that plexus taking a node over from Multus is tested on real
//! attachments: each delegate's ADD runs the reference plugins (a configlist chained as libcni
//! chains it) on the interface Multus gives it, libcni's result cache of each is written under
//! `<cniDir>/results/`, and the delegates file under `<cniDir>/<container ID>`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::world::run_cni;
use crate::{Netns, REFERENCE_PLUGINS};

/// One network of a pod as Multus resolved it.
#[derive(Debug, Clone)]
pub struct Delegate {
    /// `namespace/name` of the NAD; the config's name for the cluster default network.
    pub name: String,
    /// The CNI config (a configlist or a single config), as the NAD's `spec.config` holds it.
    pub config: Value,
    pub ifname_request: Option<String>,
    pub ip_request: Vec<String>,
    pub mac_request: Option<String>,
}

impl Delegate {
    pub fn new(name: &str, config: Value) -> Self {
        Delegate {
            name: name.into(),
            config,
            ifname_request: None,
            ip_request: Vec::new(),
            mac_request: None,
        }
    }

    fn is_list(&self) -> bool {
        self.config.get("plugins").is_some()
    }

    fn plugins(&self) -> Vec<Value> {
        match self.config["plugins"].as_array() {
            Some(p) => p.clone(),
            None => vec![self.config.clone()],
        }
    }

    fn network_name(&self) -> String {
        let own = self.config["name"].as_str().unwrap_or_default();
        if own.is_empty() {
            self.name.rsplit('/').next().unwrap_or_default().to_owned()
        } else {
            own.to_owned()
        }
    }
}

/// A pod's sandbox as the runtime calls Multus for it.
pub struct Sandbox<'a> {
    pub container_id: &'a str,
    pub netns: &'a Netns,
    /// The runtime's CNI_IFNAME.
    pub ifname: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

impl Sandbox<'_> {
    /// libcni's `RuntimeConf.Args` as Multus builds them.
    fn args(&self) -> Vec<[String; 2]> {
        [
            ("IgnoreUnknown", "true"),
            ("K8S_POD_NAMESPACE", self.namespace),
            ("K8S_POD_NAME", self.name),
            ("K8S_POD_INFRA_CONTAINER_ID", self.container_id),
            ("K8S_POD_UID", self.uid),
        ]
        .into_iter()
        .map(|(k, v)| [k.to_owned(), v.to_owned()])
        .collect()
    }

    /// `CNI_ARGS` as the plugins get them.
    pub fn cni_args(&self) -> String {
        self.args().iter().map(|[k, v]| format!("{k}={v}")).collect::<Vec<_>>().join(";")
    }
}

/// The interface Multus gives delegate `index` (`getIfname`).
pub fn ifname_of(d: &Delegate, index: usize, cni_ifname: &str) -> String {
    match (&d.ifname_request, index) {
        (Some(i), _) => i.clone(),
        (None, 0) => cni_ifname.to_owned(),
        (None, i) => format!("net{i}"),
    }
}

/// Multus's ADD of `sandbox` on the node: every delegate's ADD in order, node-side links in
/// `node`, its cache under `cache_dir`. Returns each delegate's result. Panics on a failure
/// (a fixture).
pub fn add(node: &Netns, cache_dir: &Path, sandbox: &Sandbox<'_>, delegates: &[Delegate]) -> Vec<Value> {
    std::fs::create_dir_all(cache_dir.join("results")).expect("Multus's cache dir");
    // Multus writes the delegates first, so that a DEL of a failed ADD finds them.
    std::fs::write(cache_dir.join(sandbox.container_id), delegates_file(delegates)).expect("delegates file");
    let mut results = Vec::new();
    for (index, d) in delegates.iter().enumerate() {
        let ifname = ifname_of(d, index, sandbox.ifname);
        let mut capability_args = Map::new();
        if index > 0 {
            if !d.ip_request.is_empty() {
                capability_args.insert("ips".into(), json!(d.ip_request));
            }
            if let Some(mac) = &d.mac_request {
                capability_args.insert("mac".into(), json!(mac));
            }
        }
        let result = chain_add(node, sandbox, d, &ifname, &capability_args);
        let cached = json!({
            "kind": "cniCacheV1",
            "containerId": sandbox.container_id,
            "config": base64::engine::general_purpose::STANDARD.encode(config_bytes(d)),
            "ifName": ifname,
            "networkName": d.network_name(),
            "netns": sandbox.netns.path_str(),
            "cniArgs": sandbox.args(),
            "capabilityArgs": capability_args,
            "result": result,
        });
        let file = result_cache_file(cache_dir, &d.network_name(), sandbox.container_id, &ifname);
        std::fs::write(file, cached.to_string()).expect("result cache");
        results.push(result);
    }
    results
}

/// libcni's result cache file of a delegate's ADD.
pub fn result_cache_file(cache_dir: &Path, network: &str, container_id: &str, ifname: &str) -> PathBuf {
    cache_dir.join("results").join(format!("{network}-{container_id}-{ifname}"))
}

/// The config bytes Multus caches as `Bytes`: the NAD's config, with the NAD's name when it
/// names none.
fn config_bytes(d: &Delegate) -> Vec<u8> {
    let mut config = d.config.clone();
    if config["name"].as_str().unwrap_or_default().is_empty() {
        config["name"] = json!(d.network_name());
    }
    serde_json::to_vec(&config).expect("config bytes")
}

/// `json.Marshal` of `[]*types.DelegateNetConf`: Go's field order, the structured copies of
/// the config beside its verbatim bytes (a zero `NetConfList` for a single config).
pub fn delegates_file(delegates: &[Delegate]) -> Vec<u8> {
    let entries: Vec<Value> = delegates
        .iter()
        .map(|d| {
            let net_conf = |c: &Value| {
                json!({"cniVersion": c["cniVersion"], "name": c["name"], "type": c["type"], "ipam": {"type": c["ipam"]["type"]}, "dns": {}})
            };
            let (conf, conf_list) = if d.is_list() {
                (
                    json!({"type": "", "ipam": {}, "dns": {}}),
                    json!({"cniVersion": d.config["cniVersion"], "name": d.network_name(),
                           "plugins": d.plugins().iter().map(net_conf).collect::<Vec<_>>()}),
                )
            } else {
                (net_conf(&d.config), json!({"cniVersion": "", "name": "", "plugins": null}))
            };
            let mut e = Map::new();
            e.insert("Conf".into(), conf);
            e.insert("ConfList".into(), conf_list);
            e.insert("Name".into(), json!(d.name));
            if let Some(i) = &d.ifname_request {
                e.insert("ifnameRequest".into(), json!(i));
            }
            if let Some(m) = &d.mac_request {
                e.insert("macRequest".into(), json!(m));
            }
            if !d.ip_request.is_empty() {
                e.insert("ipRequest".into(), json!(d.ip_request));
            }
            e.insert("IsFilterV4Gateway".into(), json!(false));
            e.insert("IsFilterV6Gateway".into(), json!(false));
            e.insert("Bytes".into(), json!(base64::engine::general_purpose::STANDARD.encode(config_bytes(d))));
            Value::Object(e)
        })
        .collect();
    serde_json::to_vec(&entries).expect("delegates")
}

/// libcni's ADD of a delegate's configlist: each plugin in order, chained by `prevResult`,
/// with the runtimeConfig of the capabilities it declares.
fn chain_add(
    node: &Netns,
    sandbox: &Sandbox<'_>,
    d: &Delegate,
    ifname: &str,
    capability_args: &Map<String, Value>,
) -> Value {
    let mut prev: Option<Value> = None;
    for plugin in d.plugins() {
        let mut conf = plugin.clone();
        conf["name"] = json!(d.network_name());
        conf["cniVersion"] = d.config["cniVersion"].clone();
        if let Some(caps) = plugin["capabilities"].as_object() {
            let rc: Map<String, Value> = caps
                .keys()
                .filter_map(|cap| capability_args.get(cap).map(|v| (cap.clone(), v.clone())))
                .collect();
            if !rc.is_empty() {
                conf["runtimeConfig"] = Value::Object(rc);
            }
        }
        if let Some(p) = &prev {
            conf["prevResult"] = p.clone();
        }
        let binary = PathBuf::from(REFERENCE_PLUGINS).join(plugin["type"].as_str().expect("a plugin type"));
        let mut cmd = node.command(binary);
        cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").envs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", sandbox.container_id),
            ("CNI_NETNS", sandbox.netns.path_str().as_str()),
            ("CNI_IFNAME", ifname),
            ("CNI_ARGS", sandbox.cni_args().as_str()),
            ("CNI_PATH", REFERENCE_PLUGINS),
        ]);
        prev = Some(run_cni(&mut cmd, &conf.to_string()).expect_ok());
    }
    prev.expect("a config with plugins")
}
