//! The CustomResourceDefinitions of `deploy/`: structural schemas an API server accepts, CEL
//! rules that compile, and the KEP-3698 CRDs' rules doing what the KEP says through a real
//! kube client against the test API server (which enforces every CRD's
//! x-kubernetes-validations, see `plexus_tests::test_apiserver::validation`): a PodNetwork's
//! spec is immutable except `enabled`, a PodNetworkAttachment's spec is immutable.

use std::path::PathBuf;

use kube::api::{Api, Patch, PatchParams, PostParams};
use plexus_agent::kube::{build_client, ClientSource};
use plexus_agent::podnetwork::model::{
    AttachmentParameters, PodNetwork, PodNetworkAttachment, ATTACHMENT_KIND, ATTACHMENT_PLURAL, GROUP,
    PARAMETERS_KIND, PARAMETERS_PLURAL, POD_NETWORK_KIND, POD_NETWORK_PLURAL, PROVIDER, VERSION,
};
use plexus_tests::test_apiserver::validation::{compile_rule, prunes, schema_errors, schemas_of};
use plexus_tests::test_apiserver::{
    attachment_parameters, pod_network, pod_network_attachment, TestApiServer,
};
use serde_json::{json, Value};

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every CRD in deploy/, with the file it is in.
fn crds() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(deploy_dir()).expect("deploy/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("reading a manifest");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).expect("YAML");
            if v["kind"] == "CustomResourceDefinition" {
                out.push((path.file_name().unwrap().to_string_lossy().into_owned(), v));
            }
        }
    }
    out
}

/// Where `x-kubernetes-preserve-unknown-fields` is meant: free-form values (CNI arguments).
const PRESERVED: &[&str] = &["attachmentparameters.plexus.dev:spec.cni-args"];

/// The OpenAPI keywords a structural schema may use here.
const KEYWORDS: &[&str] = &[
    "type",
    "description",
    "properties",
    "additionalProperties",
    "items",
    "required",
    "enum",
    "default",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
];

/// The ways `node` (at `path`) is not structural, as apiextensions.k8s.io/v1 requires.
fn structural_errors(crd: &str, node: &Value, path: &str, errors: &mut Vec<String>) {
    let at = |what: String| format!("{crd}: {}: {what}", if path.is_empty() { "<root>" } else { path });
    let Some(map) = node.as_object() else {
        errors.push(at("a schema node must be an object".into()));
        return;
    };
    for k in map.keys() {
        if !KEYWORDS.contains(&k.as_str()) {
            errors.push(at(format!("keyword {k:?} is not allowed (structural schemas)")));
        }
    }
    let preserves = node["x-kubernetes-preserve-unknown-fields"] == true;
    if preserves && !PRESERVED.contains(&format!("{crd}:{path}").as_str()) {
        errors.push(at("x-kubernetes-preserve-unknown-fields where no free-form value is meant".into()));
    }
    let Some(t) = node["type"].as_str() else {
        errors.push(at("no type".into()));
        return;
    };
    if !["object", "array", "string", "integer", "number", "boolean"].contains(&t) {
        errors.push(at(format!("unknown type {t:?}")));
    }
    if node.get("properties").is_some() && node.get("additionalProperties").is_some() {
        errors.push(at("additionalProperties beside properties".into()));
    }
    if (node.get("properties").is_some() || node.get("additionalProperties").is_some()) && t != "object" {
        errors.push(at("properties on a node that is not an object".into()));
    }
    if t == "array" && node.get("items").is_none() {
        errors.push(at("an array without items".into()));
    }
    if node.get("items").is_some() && t != "array" {
        errors.push(at("items on a node that is not an array".into()));
    }
    for r in node["required"].as_array().into_iter().flatten() {
        let r = r.as_str().unwrap_or("");
        if node["properties"].get(r).is_none() {
            errors.push(at(format!("requires {r:?}, which it does not describe")));
        }
    }
    if let Some(d) = node.get("default") {
        for e in schema_errors(node, d) {
            errors.push(at(format!("the default {d} is invalid: {e}")));
        }
        if prunes(node, d) {
            errors.push(at(format!("the default {d} has fields the schema prunes")));
        }
    }
    if node["x-kubernetes-list-type"] == "map" {
        let keys = node["x-kubernetes-list-map-keys"].as_array().cloned().unwrap_or_default();
        if keys.is_empty() {
            errors.push(at("a map list without x-kubernetes-list-map-keys".into()));
        }
        for k in keys {
            let k = k.as_str().unwrap_or("");
            let item = &node["items"];
            let required = item["required"].as_array().is_some_and(|r| r.iter().any(|x| x == k));
            let scalar =
                item["properties"][k]["type"].as_str().is_some_and(|t| t != "object" && t != "array");
            if !scalar || !(required || item["properties"][k].get("default").is_some()) {
                errors.push(at(format!("map list key {k:?} must be a required (or defaulted) scalar")));
            }
        }
    }
    for v in node["x-kubernetes-validations"].as_array().into_iter().flatten() {
        match v["rule"].as_str() {
            Some(rule) => {
                if let Err(e) = compile_rule(rule) {
                    errors.push(at(format!("the rule {rule:?} does not compile: {e}")));
                }
                if v["message"].as_str().is_none_or(str::is_empty) {
                    errors.push(at(format!("the rule {rule:?} has no message")));
                }
            }
            None => errors.push(at("a validation without a rule".into())),
        }
    }
    if path == "metadata" {
        // The root's metadata is ObjectMeta's: a CRD may not describe it beyond its type.
        if map.keys().any(|k| k != "type") {
            errors.push(at("metadata must be left to the API server (type: object only)".into()));
        }
        return;
    }
    let join = |k: &str| if path.is_empty() { k.to_owned() } else { format!("{path}.{k}") };
    for (k, sub) in node["properties"].as_object().into_iter().flatten() {
        structural_errors(crd, sub, &join(k), errors);
    }
    if let Some(sub) = node.get("additionalProperties").filter(|s| s.is_object()) {
        structural_errors(crd, sub, &join("*"), errors);
    }
    if let Some(items) = node.get("items") {
        structural_errors(crd, items, &format!("{path}[]"), errors);
    }
}

#[test]
fn every_crd_in_deploy_is_a_structural_apiextensions_v1_schema() {
    let all = crds();
    assert!(all.len() >= 5, "the NAD, policy and three KEP CRDs: {}", all.len());
    let mut errors = Vec::new();
    for (file, crd) in &all {
        let name = crd["metadata"]["name"].as_str().unwrap_or("").to_owned();
        assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1", "{file}: {name}");
        let spec = &crd["spec"];
        let expected = format!(
            "{}.{}",
            spec["names"]["plural"].as_str().unwrap_or(""),
            spec["group"].as_str().unwrap_or("")
        );
        assert_eq!(name, expected, "{file}: a CRD's name is <plural>.<group>");
        assert!(
            ["Namespaced", "Cluster"].contains(&spec["scope"].as_str().unwrap_or("")),
            "{file}: {name}: scope"
        );
        let versions = spec["versions"].as_array().expect("versions");
        assert_eq!(
            versions.iter().filter(|v| v["storage"] == true).count(),
            1,
            "{name}: one storage version"
        );
        for v in versions {
            let schema = &v["schema"]["openAPIV3Schema"];
            assert_eq!(schema["type"], "object", "{name}: the root is an object");
            structural_errors(&name, schema, "", &mut errors);
            for col in v["additionalPrinterColumns"].as_array().into_iter().flatten() {
                let ok = col["name"].is_string()
                    && ["string", "boolean", "integer", "number", "date"]
                        .contains(&col["type"].as_str().unwrap_or(""))
                    && col["jsonPath"].as_str().is_some_and(|p| p.starts_with('.'));
                assert!(ok, "{name}: printer column {col}");
            }
        }
    }
    assert!(errors.is_empty(), "not structural:\n{}", errors.join("\n"));
}

#[test]
fn the_structural_checker_finds_what_is_not_structural() {
    let mut errors = Vec::new();
    let bad = json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "untyped": {"description": "no type"},
            "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "list": {"type": "array"},
            "flag": {"type": "boolean", "default": "yes"},
            "conds": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                      "items": {"type": "object", "properties": {"type": {"type": "string"}}}},
            "ruled": {"type": "string", "x-kubernetes-validations": [{"rule": "self +", "message": "m"}, {"rule": "self == 'a'"}]},
            "odd": {"type": "string", "anyOf": [{"type": "string"}]}
        }
    });
    structural_errors("test", &bad, "", &mut errors);
    let all = errors.join("\n");
    for expected in [
        "metadata: metadata must be left to the API server",
        "untyped: no type",
        "both: additionalProperties beside properties",
        "free: x-kubernetes-preserve-unknown-fields where no free-form value is meant",
        "list: an array without items",
        "flag: the default \"yes\" is invalid",
        "conds: map list key \"type\" must be a required (or defaulted) scalar",
        "does not compile",
        "has no message",
        "odd: keyword \"anyOf\" is not allowed",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
}

fn crd(plural: &str) -> Value {
    crds()
        .into_iter()
        .map(|(_, c)| c)
        .find(|c| c["spec"]["names"]["plural"] == plural && c["spec"]["group"] == GROUP)
        .unwrap_or_else(|| panic!("no CRD {plural}.{GROUP} in deploy/"))
}

#[test]
fn the_kep_crds_are_what_the_agent_reads() {
    for (plural, kind, scope, status) in [
        (POD_NETWORK_PLURAL, POD_NETWORK_KIND, "Cluster", true),
        (ATTACHMENT_PLURAL, ATTACHMENT_KIND, "Namespaced", true),
        (PARAMETERS_PLURAL, PARAMETERS_KIND, "Namespaced", false),
    ] {
        let c = crd(plural);
        assert_eq!(
            (c["spec"]["names"]["kind"].as_str(), c["spec"]["scope"].as_str()),
            (Some(kind), Some(scope))
        );
        let schemas = schemas_of(&c);
        assert_eq!(schemas.len(), 1);
        assert_eq!(schemas[0].version, VERSION);
        let v = &c["spec"]["versions"][0];
        assert_eq!(v["subresources"]["status"].is_object(), status, "{plural}: status subresource");
        if status {
            let cols: Vec<&str> = v["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["name"].as_str())
                .collect();
            assert!(cols.contains(&"Ready"), "{plural}: {cols:?}");
            let conditions = &schemas[0].schema["properties"]["status"]["properties"]["conditions"];
            assert_eq!(conditions["maxItems"], 5);
            assert_eq!(
                (
                    conditions["x-kubernetes-list-type"].as_str(),
                    conditions["x-kubernetes-list-map-keys"].clone()
                ),
                (Some("map"), json!(["type"]))
            );
        }
    }
    let pn = &schemas_of(&crd(POD_NETWORK_PLURAL))[0].schema["properties"]["spec"]["properties"];
    assert_eq!(pn["enabled"]["default"], true);
    assert_eq!(
        (pn["provider"]["minLength"].as_u64(), pn["provider"]["maxLength"].as_u64()),
        (Some(1), Some(253))
    );
    let params = &schemas_of(&crd(PARAMETERS_PLURAL))[0].schema["properties"]["spec"]["properties"];
    let mut keys: Vec<&String> = params.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["bandwidth", "cni-args", "ips", "mac", "portMappings"],
        "the NPWG selection's keys, no others"
    );
}

async fn client(server: &TestApiServer) -> kube::Client {
    build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client")
}

fn invalid(result: Result<impl std::fmt::Debug, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(s)) if s.code == 422 && s.reason == "Invalid" => s.message,
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

fn merge(v: Value) -> Patch<Value> {
    Patch::Merge(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podnetworks_spec_is_immutable_except_enabled() {
    let server = TestApiServer::start();
    let api: Api<PodNetwork> = Api::all(client(&server).await);
    let pp = PatchParams::default();
    let nad_ref = json!({"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "a", "namespace": "ns"});

    // Created without provider or parametersRefs: enabled defaults to true.
    let created: PodNetwork = serde_json::from_value(pod_network("bare", json!({}))).unwrap();
    let created = api.create(&PostParams::default(), &created).await.expect("create");
    assert!(created.spec.enabled);
    assert_eq!(
        server.get(POD_NETWORK_PLURAL, "", "bare").unwrap()["spec"],
        json!({"enabled": true}),
        "the default is stored"
    );

    // Adding a provider or parametersRefs is a mutation.
    let m = invalid(api.patch("bare", &pp, &merge(json!({"spec": {"provider": PROVIDER}}))).await);
    assert_eq!(m, "PodNetwork.plexus.dev \"bare\" is invalid: spec: Invalid value: \"object\": spec.provider is immutable: a PodNetwork's spec may change only in spec.enabled; create a new PodNetwork instead");
    let m =
        invalid(api.patch("bare", &pp, &merge(json!({"spec": {"parametersRefs": [nad_ref.clone()]}}))).await);
    assert!(m.contains("spec.parametersRefs is immutable"), "{m}");

    // Flipping enabled is allowed.
    let off = api.patch("bare", &pp, &merge(json!({"spec": {"enabled": false}}))).await.expect("disable");
    assert!(!off.spec.enabled);
    assert_eq!(off.metadata.generation, Some(2), "a spec change");
    api.patch("bare", &pp, &merge(json!({"spec": {"enabled": true}}))).await.expect("enable");

    // With both set: removing or changing either is a mutation; so is replacing the object.
    let full: PodNetwork = serde_json::from_value(pod_network(
        "full",
        json!({"provider": PROVIDER, "parametersRefs": [nad_ref.clone()]}),
    ))
    .unwrap();
    let full = api.create(&PostParams::default(), &full).await.expect("create");
    for (patch, field) in [
        (json!({"spec": {"provider": null}}), "spec.provider"),
        (json!({"spec": {"provider": "acme.io/other"}}), "spec.provider"),
        (json!({"spec": {"parametersRefs": null}}), "spec.parametersRefs"),
        (json!({"spec": {"parametersRefs": []}}), "spec.parametersRefs"),
        (
            json!({"spec": {"parametersRefs": [{"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "b", "namespace": "ns"}]}}),
            "spec.parametersRefs",
        ),
        (json!({"spec": {"parametersRefs": [nad_ref.clone(), nad_ref.clone()]}}), "spec.parametersRefs"),
    ] {
        let m = invalid(api.patch("full", &pp, &merge(patch.clone())).await);
        assert!(m.contains(&format!("{field} is immutable")), "{patch}: {m}");
    }
    let mut replaced = full.clone();
    replaced.spec.provider = Some("acme.io/other".into());
    replaced.spec.enabled = false;
    let m = invalid(api.replace("full", &PostParams::default(), &replaced).await);
    assert!(m.contains("spec.provider is immutable"), "{m}");
    let mut replaced = full.clone();
    replaced.spec.enabled = false;
    let stored =
        api.replace("full", &PostParams::default(), &replaced).await.expect("replace with enabled flipped");
    assert!(!stored.spec.enabled);
    assert_eq!(stored.spec.provider.as_deref(), Some(PROVIDER));

    // The KEP's provider form: domain-prefixed.
    for bad in ["plexus", "Plexus.dev/x", "plexus.dev/", "-a.dev/x"] {
        let pn: PodNetwork = serde_json::from_value(pod_network("bad", json!({"provider": bad}))).unwrap();
        let m = invalid(api.create(&PostParams::default(), &pn).await);
        assert!(m.contains("spec.provider in body should match"), "{bad}: {m}");
    }
    let long = format!("a.dev/{}", "x".repeat(250));
    let pn: PodNetwork = serde_json::from_value(pod_network("bad", json!({"provider": long}))).unwrap();
    assert!(invalid(api.create(&PostParams::default(), &pn).await).contains("spec.provider: Too long"));
    for good in ["acme.io/foo", "k8s.cni.cncf.io/multus", PROVIDER] {
        let pn: PodNetwork =
            serde_json::from_value(pod_network(&format!("p-{}", good.len()), json!({"provider": good})))
                .unwrap();
        api.create(&PostParams::default(), &pn).await.unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_podnetworkattachments_spec_is_immutable() {
    let server = TestApiServer::start();
    let api: Api<PodNetworkAttachment> = Api::namespaced(client(&server).await, "tenant");
    let pp = PatchParams::default();
    let pna: PodNetworkAttachment =
        serde_json::from_value(pod_network_attachment("tenant", "a", json!({"podNetworkName": "dataplane"})))
            .unwrap();
    api.create(&PostParams::default(), &pna).await.expect("create");
    let params_ref = json!([{"group": GROUP, "kind": PARAMETERS_KIND, "name": "p"}]);
    for patch in
        [json!({"spec": {"podNetworkName": "other"}}), json!({"spec": {"parametersRefs": params_ref}})]
    {
        let m = invalid(api.patch("a", &pp, &merge(patch.clone())).await);
        assert!(m.ends_with("spec: Invalid value: \"object\": spec is immutable: a PodNetworkAttachment cannot change; create a new one instead"), "{patch}: {m}");
    }
    // Without a podNetworkName it is refused before any rule runs.
    let m = invalid(api.patch("a", &pp, &merge(json!({"spec": {"podNetworkName": null}}))).await);
    assert!(m.contains("spec.podNetworkName: Required value"), "{m}");
    // Labels, annotations and finalizers still change.
    let labelled =
        api.patch("a", &pp, &merge(json!({"metadata": {"labels": {"team": "x"}}}))).await.expect("label");
    assert_eq!(labelled.metadata.generation, Some(1));
    // And the status, through its subresource.
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}});
    let s = api.patch_status("a", &pp, &merge(status)).await.expect("status");
    assert!(s.is_ready());
    // Conditions are checked too: at most five, the metav1.Condition shape.
    let bad = json!({"status": {"conditions": [{"type": "Ready", "status": "Yes", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    assert!(invalid(api.patch_status("a", &pp, &merge(bad)).await)
        .contains("status.conditions[0].status: Unsupported value"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_parameters_keep_the_npwg_selection_keys_only() {
    let server = TestApiServer::start();
    let api: Api<AttachmentParameters> = Api::namespaced(client(&server).await, "tenant");
    let spec = json!({"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:01",
                      "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                      "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000},
                      "cni-args": {"anything": {"nested": [1, 2]}},
                      "interface": "eth9", "name": "x", "namespace": "y", "default-route": ["10.0.0.1"]});
    let p: AttachmentParameters = serde_json::from_value(attachment_parameters("tenant", "p", spec)).unwrap();
    let stored = api.create(&PostParams::default(), &p).await.expect("create");
    assert_eq!(
        stored.spec,
        json!({"ips": ["10.1.1.5/24"], "mac": "02:00:00:00:00:01",
               "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
               "bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000},
               "cni-args": {"anything": {"nested": [1, 2]}}}),
        "keys outside the NPWG selection's per-attachment requests are pruned, cni-args kept whole"
    );
    let bad: AttachmentParameters = serde_json::from_value(attachment_parameters(
        "tenant",
        "q",
        json!({"portMappings": [{"hostPort": 0, "containerPort": 80}], "bandwidth": {"egressRate": "fast"}}),
    ))
    .unwrap();
    let m = invalid(api.create(&PostParams::default(), &bad).await);
    assert!(m.contains("spec.portMappings[0].hostPort") && m.contains("spec.bandwidth.egressRate"), "{m}");
}
