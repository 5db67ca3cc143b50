//! `deploy/` parses and agrees with itself and with the agent: kinds and names, the RBAC
//! rules against what the kube module calls, the DaemonSet's mounts against the paths its
//! arguments use, its arguments against the agent's real command line, probes against the
//! metrics endpoint, and one version everywhere (the workspace's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Parser;
use plexus_agent::kube::{nad, API_ACCESS};
use plexus_agent::options::{CatalogSource, Cli, CliCommand};
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The workspace version: this crate inherits it (`version.workspace = true`).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every YAML document of every manifest in deploy/ (not deploy/examples/, the demo's).
fn manifests() -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir()).expect("deploy/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("reading a manifest");
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", path.display()));
            if !v.is_null() {
                docs.push(v);
            }
        }
        out.insert(path.file_name().unwrap().to_string_lossy().into_owned(), docs);
    }
    out
}

fn objects() -> Vec<Value> {
    manifests().into_iter().filter(|(f, _)| f != "kustomization.yaml").flat_map(|(_, d)| d).collect()
}

/// The one object of `kind` of the agent's manifests (the controller's, deploy/controller.yaml,
/// are checked by tests/tests/system/podnetwork_controller.rs).
fn one(kind: &str) -> Value {
    let found: Vec<Value> = manifests()
        .into_iter()
        .filter(|(f, _)| f != "kustomization.yaml" && f != "controller.yaml")
        .flat_map(|(_, d)| d)
        .filter(|o| o["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in deploy/");
    found.into_iter().next().unwrap()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

#[test]
fn every_manifest_is_listed_by_the_kustomization_and_has_a_known_kind() {
    let all = manifests();
    let kustomization = &all["kustomization.yaml"][0];
    assert_eq!(kustomization["kind"], "Kustomization");
    let listed: BTreeSet<String> = strs(&kustomization["resources"]).into_iter().collect();
    let files: BTreeSet<String> = all.keys().filter(|f| *f != "kustomization.yaml").cloned().collect();
    assert_eq!(listed, files, "kustomization.yaml lists every manifest and nothing else");
    let kinds: BTreeSet<String> =
        objects().iter().map(|o| o["kind"].as_str().unwrap_or("").to_owned()).collect();
    let expected: BTreeSet<String> = [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        // The PodNetwork controller's (deploy/controller.yaml).
        "Deployment",
        "Role",
        "RoleBinding",
    ]
    .map(String::from)
    .into();
    assert_eq!(kinds, expected);
    for o in objects() {
        assert!(o["apiVersion"].as_str().is_some_and(|v| !v.is_empty()), "{o}");
        assert!(o["metadata"]["name"].as_str().is_some_and(|n| !n.is_empty()), "{o}");
    }
}

#[test]
fn the_crd_is_what_the_agent_watches() {
    let crd = crd_of(nad::GROUP, nad::PLURAL);
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    let spec = &crd["spec"];
    assert_eq!(crd["metadata"]["name"], format!("{}.{}", nad::PLURAL, nad::GROUP));
    assert_eq!(spec["group"], nad::GROUP);
    assert_eq!(spec["names"]["plural"], nad::PLURAL);
    assert_eq!(spec["names"]["kind"], nad::KIND);
    assert_eq!(spec["scope"], "Namespaced");
    assert!(strs(&spec["names"]["shortNames"]).contains(&"net-attach-def".to_owned()));
    let versions = spec["versions"].as_array().expect("versions");
    let v1 = versions.iter().find(|v| v["name"] == nad::VERSION).expect("v1");
    assert_eq!((v1["served"].as_bool(), v1["storage"].as_bool()), (Some(true), Some(true)));
    // Structural: every level has a type; spec.config is a string.
    let schema = &v1["schema"]["openAPIV3Schema"];
    assert_eq!(schema["type"], "object");
    for (name, prop) in schema["properties"].as_object().expect("properties") {
        assert!(prop["type"].is_string(), "{name} has no type");
    }
    assert_eq!(schema["properties"]["spec"]["properties"]["config"]["type"], "string");
}

/// The CustomResourceDefinition of an API group.
fn crd_of(group: &str, plural: &str) -> Value {
    let found: Vec<Value> = objects()
        .into_iter()
        .filter(|o| {
            o["kind"] == "CustomResourceDefinition"
                && o["spec"]["group"] == group
                && o["spec"]["names"]["plural"] == plural
        })
        .collect();
    assert_eq!(found.len(), 1, "exactly one CustomResourceDefinition of {plural}.{group} in deploy/");
    found.into_iter().next().unwrap()
}

#[test]
fn the_policy_crd_is_what_the_agent_watches_and_reads() {
    use plexus_agent::kube::policy::PLURAL;
    use plexus_agent::policy::model::{PolicySpec, GROUP, KIND, VERSION};
    let crd = crd_of(GROUP, PLURAL);
    assert_eq!(crd["metadata"]["name"], format!("{PLURAL}.{GROUP}"));
    let spec = &crd["spec"];
    assert_eq!((spec["scope"].as_str(), spec["names"]["plural"].as_str()), (Some("Cluster"), Some(PLURAL)));
    assert_eq!(spec["names"]["kind"], KIND);
    let versions = spec["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], VERSION);
    // Every field of the schema is one the agent reads, and the other way round: a spec
    // using each of them is accepted (the agent refuses unknown fields).
    let rule =
        &versions[0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rules"]["items"];
    let mut example = serde_json::Map::new();
    for (field, prop) in rule["properties"].as_object().expect("rule properties") {
        let value = match prop["type"].as_str() {
            Some("string") => Value::from("x"),
            Some("array") => Value::from(vec!["x"]),
            Some("object") => Value::Object(
                prop["properties"]
                    .as_object()
                    .expect("interfaces properties")
                    .keys()
                    .map(|k| (k.clone(), Value::from(vec!["eth1"])))
                    .collect(),
            ),
            other => panic!("{field}: type {other:?}"),
        };
        example.insert(field.clone(), value);
    }
    let spec: PolicySpec = serde_json::from_value(serde_json::json!({"rules": [example]}))
        .expect("the agent reads every field of the CRD's schema");
    let round_trip = serde_json::to_value(&spec).expect("spec");
    assert_eq!(round_trip["rules"][0].as_object().map(|o| o.len()), Some(example.len()));
    assert_eq!(
        round_trip["rules"][0]["interfaces"].as_object().map(|o| o.len()),
        example["interfaces"].as_object().map(|o| o.len()),
        "the schema lists every interface kind the agent knows"
    );
}

#[test]
fn rbac_grants_exactly_what_the_agent_calls_to_the_daemonsets_service_account() {
    let sa = one("ServiceAccount");
    let role = one("ClusterRole");
    let binding = one("ClusterRoleBinding");
    let ds = one("DaemonSet");
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let subjects = binding["subjects"].as_array().expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], sa["metadata"]["name"]);
    assert_eq!(subjects[0]["namespace"], sa["metadata"]["namespace"]);
    assert_eq!(ds["spec"]["template"]["spec"]["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(ds["metadata"]["namespace"], sa["metadata"]["namespace"]);

    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    assert!(g != "*" && r != "*" && v != "*", "no wildcards in a least-privilege role");
                    granted.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    let used: BTreeSet<(String, String, String)> = API_ACCESS
        .iter()
        .flat_map(|a| {
            a.verbs.iter().map(move |v| (a.group.to_owned(), a.resource.to_owned(), (*v).to_owned()))
        })
        .collect();
    assert_eq!(granted, used);
}

/// (hostPath, mountPath) of every volume mount of a container.
fn mounts(pod: &Value, container: &Value) -> BTreeMap<String, String> {
    let host: BTreeMap<String, String> = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| {
            (v["name"].as_str().unwrap().to_owned(), v["hostPath"]["path"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    container["volumeMounts"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    let name = m["name"].as_str().unwrap();
                    let host = host.get(name).unwrap_or_else(|| panic!("mount of unknown volume {name}"));
                    (host.clone(), m["mountPath"].as_str().unwrap().to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

fn command_line(container: &Value) -> Vec<String> {
    let mut v = strs(&container["command"]);
    v.extend(strs(&container["args"]));
    v
}

/// True when `path` (inside the container) lies in a mount of `host` (on the node).
fn under(mounts: &BTreeMap<String, String>, host: &str, path: &Path) -> bool {
    mounts.get(host).is_some_and(|m| path.starts_with(m))
}

#[test]
fn the_daemonset_runs_the_agent_with_its_mounts_probes_and_identity() {
    let ds = one("DaemonSet");
    assert_eq!(ds["apiVersion"], "apps/v1");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"],
        "the selector selects the template"
    );
    let agent = &pod["containers"][0];
    assert_eq!(agent["securityContext"]["privileged"], true);
    assert!(
        agent["resources"]["requests"]["cpu"].is_string()
            && agent["resources"]["requests"]["memory"].is_string()
    );
    assert!(agent["resources"]["limits"]["memory"].is_string(), "memory is bounded");

    // The arguments are the agent's real command line.
    let cli = Cli::try_parse_from(command_line(agent))
        .unwrap_or_else(|e| panic!("the agent rejects its args: {e}"));
    let CliCommand::Run(opts) = cli.command else {
        panic!("the agent container must run `plexus-agent run`")
    };
    assert_eq!(opts.catalog, CatalogSource::Kube);
    assert!(opts.kubeconfig.is_none(), "in-cluster service account");
    // NODE_NAME comes from the downward API (the option's env variable).
    let env = agent["env"].as_array().expect("env");
    let node = env.iter().find(|e| e["name"] == "NODE_NAME").expect("NODE_NAME");
    assert_eq!(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName");

    let m = mounts(pod, agent);
    for host in [
        "/opt/cni/bin",
        "/etc/cni/net.d",
        "/run/plexus",
        "/var/lib/plexus",
        "/sys/fs/bpf",
        "/run/netns",
        "/var/lib/cni",
        "/var/lib/kubelet/pod-resources",
    ] {
        assert!(m.contains_key(host), "the agent mounts the node's {host}");
    }
    // Paths the shim and the runtime use on the node are the same inside the container.
    for host in [
        "/run/plexus",
        "/var/lib/plexus",
        "/run/netns",
        "/sys/fs/bpf",
        "/var/lib/cni",
        "/var/lib/kubelet/pod-resources",
    ] {
        assert_eq!(m[host], host, "{host} is mounted at the same path");
    }
    assert!(under(&m, "/run/plexus", &opts.socket), "the socket is on the node: {}", opts.socket.display());
    assert!(under(&m, "/var/lib/plexus", &opts.state_dir));
    assert!(under(&m, "/etc/cni/net.d", &opts.default_network_dir));
    assert!(under(&m, "/etc/cni/net.d", opts.runtime_conf_dir.as_deref().expect("--runtime-conf-dir")));
    assert!(under(&m, "/opt/cni/bin", &opts.cni_bin_dirs[0]), "delegates come from the node's CNI bin dir");
    assert!(under(&m, "/sys/fs/bpf", &opts.bpf_pin_dir), "BPF pins on the node's bpffs");
    assert!(under(&m, "/sys/fs/cgroup", &opts.cgroup_root), "hooks on the node's cgroup root");
    assert!(
        under(&m, "/var/lib/kubelet/pod-resources", &opts.pod_resources_socket),
        "kubelet's PodResources socket is mounted: {}",
        opts.pod_resources_socket.display()
    );
    assert!(
        under(&m, "/var/run/k8s.cni.cncf.io/devinfo", &opts.device_info_dir),
        "the device information files are the node's: {}",
        opts.device_info_dir.display()
    );
    let mounted =
        |v: &str| agent["volumeMounts"].as_array().unwrap().iter().find(|x| x["mountPath"] == v).cloned();
    let devinfo = mounted("/var/run/k8s.cni.cncf.io/devinfo").expect("the device-info mount");
    assert_ne!(devinfo["readOnly"], true, "plexus writes each attachment's device-info file");
    assert_eq!(mounted("/sys/fs/bpf").unwrap()["mountPropagation"], "Bidirectional");

    // Probes reach the metrics endpoint where the agent listens.
    let addr = opts.metrics_socket_addr().unwrap().expect("metrics on");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &agent[probe]["httpGet"];
        assert_eq!(get["path"], path);
        assert_eq!(get["port"].as_u64(), Some(u64::from(addr.port())), "{probe} port");
        assert_eq!(
            get["host"].as_str().unwrap_or("pod IP (the node's, with hostNetwork)"),
            addr.ip().to_string()
        );
    }

    // The init container installs the shim into the node's CNI bin dir.
    let init = &pod["initContainers"][0];
    let cli = Cli::try_parse_from(command_line(init))
        .unwrap_or_else(|e| panic!("install-shim rejects its args: {e}"));
    let CliCommand::InstallShim(install) = cli.command else {
        panic!("the init container runs install-shim")
    };
    assert!(under(&mounts(pod, init), "/opt/cni/bin", &install.to));
    assert_eq!(install.name, "plexus");
}

#[test]
fn one_version_everywhere() {
    let root =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml")).unwrap();
    assert!(root.contains(&format!("version = \"{VERSION}\"")), "the workspace version is {VERSION}");
    let ds = one("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    for c in pod["containers"].as_array().unwrap().iter().chain(pod["initContainers"].as_array().unwrap()) {
        let image = c["image"].as_str().unwrap();
        assert_eq!(image.rsplit_once(':').map(|(_, tag)| tag), Some(VERSION), "{image}");
    }
    let kustomization = &manifests()["kustomization.yaml"][0];
    let image = &kustomization["images"][0];
    assert_eq!(image["newTag"], VERSION);
    let ds_image = pod["containers"][0]["image"].as_str().unwrap();
    assert_eq!(Some(image["name"].as_str().unwrap()), ds_image.rsplit_once(':').map(|(n, _)| n));
    let containerfile =
        std::fs::read_to_string(deploy_dir().join("Containerfile")).expect("deploy/Containerfile");
    assert!(containerfile.contains(&format!("org.opencontainers.image.version=\"{VERSION}\"")));
    assert!(
        containerfile.contains(&format!("{}:{VERSION}", image["name"].as_str().unwrap())),
        "build command tag"
    );
    assert_eq!(containerfile.lines().filter(|l| l.starts_with("FROM ")).count(), 2, "multi-stage");
    for bin in ["/usr/local/bin/plexus-agent", "/usr/local/bin/plexus"] {
        assert!(containerfile.contains(bin), "the image holds {bin}");
    }
}

/// The IPAMClaim CRD is the NPWG spec's (v1.3 section 8.1, with the `apiVersion` and `kind`
/// lines its text lost restored), and names what the agent reads and writes.
#[test]
fn the_ipamclaim_crd_is_the_specs_and_what_the_agent_reads() {
    use plexus_agent::kube::ipamclaim::{GROUP, KIND, PLURAL, VERSION};
    let crd = crd_of(GROUP, PLURAL);
    let string = serde_json::json!({"type": "string"});
    let expected = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ipamclaims.k8s.cni.cncf.io"},
        "spec": {
            "group": "k8s.cni.cncf.io",
            "names": {"kind": "IPAMClaim", "listKind": "IPAMClaimList", "plural": "ipamclaims", "singular": "ipamclaim"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "schema": {"openAPIV3Schema": {
                    "properties": {
                        "apiVersion": string,
                        "kind": string,
                        "metadata": {"type": "object"},
                        "spec": {
                            "properties": {
                                "interface": {"description": "The pod interface name for which this allocation was created", "type": "string"},
                                "network": {"description": "The network name for which this persistent allocation was created", "type": "string"},
                            },
                            "required": ["interface", "network"],
                            "type": "object",
                        },
                        "status": {
                            "properties": {
                                "ips": {"description": "The list of IP addresses (v4, v6) that were allocated for the pod interface",
                                        "items": {"type": "string"}, "type": "array"},
                            },
                            "required": ["ips"],
                            "type": "object",
                        },
                    },
                    "type": "object",
                }},
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
            }],
        },
    });
    assert_eq!(crd, expected);
    assert_eq!((KIND, VERSION), ("IPAMClaim", "v1alpha1"));
}
