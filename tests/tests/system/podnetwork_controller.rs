//! The PodNetwork controller (`plexus-agent controller`) against the test API server, which
//! authorizes with the controller's ClusterRole and Role of `deploy/controller.yaml`: the
//! KEP's conditions and reasons through every transition, the InUse finalizer, the `default`
//! PodNetwork, other providers' objects, leader election between two replicas, and the
//! controller's memory for 10,000 pods.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use kube::api::{Api, DeleteParams};
use plexus_agent::controller::lease::LeaseConfig;
use plexus_agent::controller::plan::PlanConfig;
use plexus_agent::controller::{
    Controller, ControllerConfig, CONTROLLER_API_ACCESS, CONTROLLER_LEASE_ACCESS, POD_FIELD_SELECTOR,
};
use plexus_agent::kube::watch::{Settings, WatchBackoff};
use plexus_agent::kube::{build_client, ApiAccess, ClientSource};
use plexus_agent::options::{Cli, CliCommand};
use plexus_agent::podnetwork::model::{
    PodNetwork, PodNetworkAttachment, IN_USE_FINALIZER, POD_NETWORKS_ANNOTATION,
};
use plexus_tests::test_apiserver::{
    attachment_parameters, lease, nad, pod, pod_network, pod_network_attachment, rbac, ServerOptions,
    TestApiServer, LEASES, NADS, PODS, POD_NETWORKS, POD_NETWORK_ATTACHMENTS,
};
use serde_json::{json, Value};

const LEASE_NS: &str = "kube-system";
const LEASE_NAME: &str = "plexus-podnetwork-controller";
const VALID_CNI: &str = r#"{"cniVersion":"1.0.0","name":"blue-net","type":"bridge","bridge":"br-blue"}"#;

fn manifest() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/controller.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("controller.yaml is YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn one(kind: &str) -> Value {
    let found: Vec<Value> = manifest().into_iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "exactly one {kind} in deploy/controller.yaml");
    found.into_iter().next().unwrap()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

type Grants = BTreeSet<(String, String, String)>;

fn granted(role: &Value) -> Grants {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for g in strs(&rule["apiGroups"]) {
            for r in strs(&rule["resources"]) {
                for v in strs(&rule["verbs"]) {
                    assert!(g != "*" && r != "*" && v != "*", "no wildcards in a least-privilege role");
                    out.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    out
}

fn used(access: &[ApiAccess]) -> Grants {
    access
        .iter()
        .flat_map(|a| {
            a.verbs.iter().map(move |v| (a.group.to_owned(), a.resource.to_owned(), (*v).to_owned()))
        })
        .collect()
}

/// The rules the test API server authorizes with: the ClusterRole and the Lease's Role.
fn controller_rules() -> Vec<rbac::Rule> {
    let mut rules = rbac::rules_of(&one("ClusterRole"));
    rules.extend(rbac::rules_of(&one("Role")));
    rules
}

#[test]
fn rbac_grants_exactly_what_the_controller_calls_to_its_service_account() {
    let sa = one("ServiceAccount");
    let deployment = one("Deployment");
    assert_eq!(deployment["spec"]["template"]["spec"]["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(deployment["metadata"]["namespace"], sa["metadata"]["namespace"]);
    for (binding, role) in [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")] {
        let b = one(binding);
        assert_eq!(b["roleRef"]["kind"], role);
        assert_eq!(b["roleRef"]["name"], one(role)["metadata"]["name"]);
        let subjects = b["subjects"].as_array().expect("subjects");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0]["kind"], "ServiceAccount");
        assert_eq!(subjects[0]["name"], sa["metadata"]["name"]);
        assert_eq!(subjects[0]["namespace"], sa["metadata"]["namespace"]);
    }
    assert_eq!(granted(&one("ClusterRole")), used(CONTROLLER_API_ACCESS));
    assert_eq!(granted(&one("Role")), used(CONTROLLER_LEASE_ACCESS));
    assert_eq!(
        one("Role")["metadata"]["namespace"],
        sa["metadata"]["namespace"],
        "the Lease is in its own namespace"
    );
}

#[test]
fn the_deployment_runs_two_replicas_of_the_controller_with_identity_and_probes() {
    let deployment = one("Deployment");
    assert_eq!(deployment["apiVersion"], "apps/v1");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert!(pod["hostNetwork"].is_null(), "the controller needs no host network");
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"].as_str().and_then(|i| i.rsplit_once(':')).map(|(_, tag)| tag),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let mut args = strs(&c["command"]);
    args.extend(strs(&c["args"]));
    let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("the controller rejects its args: {e}"));
    let CliCommand::Controller(opts) = cli.command else {
        panic!("the container must run `plexus-agent controller`")
    };
    assert!(opts.kubeconfig.is_none(), "in-cluster service account");
    assert!(!opts.no_default_pod_network, "the controller creates the default PodNetwork");
    let env = c["env"].as_array().expect("env");
    let field = |name: &str| {
        env.iter().find(|e| e["name"] == name).map(|e| e["valueFrom"]["fieldRef"]["fieldPath"].clone())
    };
    assert_eq!(field("POD_NAME"), Some(json!("metadata.name")), "the identity is the pod's name");
    assert_eq!(
        field("POD_NAMESPACE"),
        Some(json!("metadata.namespace")),
        "the Lease is in the pod's namespace"
    );
    let addr = opts.metrics_socket_addr().unwrap().expect("metrics on");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path);
        assert_eq!(c[probe]["httpGet"]["port"].as_u64(), Some(u64::from(addr.port())), "{probe} port");
    }
    assert!(c["resources"]["limits"]["memory"].is_string(), "memory is bounded");
}

fn server() -> TestApiServer {
    TestApiServer::start_with(ServerOptions { rbac: Some(controller_rules()), ..Default::default() })
}

fn config(identity: &str, manage_default: bool, lease_duration: Duration) -> ControllerConfig {
    ControllerConfig {
        lease: LeaseConfig {
            namespace: LEASE_NS.into(),
            name: LEASE_NAME.into(),
            identity: identity.into(),
            lease_duration,
        },
        plan: PlanConfig { manage_default },
        resync: Duration::from_secs(2),
        watch: Settings {
            backoff: WatchBackoff { first: Duration::from_millis(100), max: Duration::from_millis(500) },
            ..Settings::default()
        },
    }
}

async fn start(server: &TestApiServer, identity: &str, manage_default: bool) -> Controller {
    let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
    Controller::start(client, config(identity, manage_default, Duration::from_secs(3)))
}

/// Waits up to 15 s for `check` to answer `Some`.
async fn within<T>(mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits for `check` to answer `Some`, failing with `what` after 15 s.
async fn eventually<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    within(check).await.unwrap_or_else(|| panic!("timed out waiting for: {what}"))
}

fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

/// (status, reason) of a condition, or None when absent.
fn cond(obj: &Value, type_: &str) -> Option<(String, String)> {
    let c = condition(obj, type_)?;
    Some((c["status"].as_str()?.to_owned(), c["reason"].as_str()?.to_owned()))
}

fn pair(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_owned(), reason.to_owned()))
}

fn get_pn(server: &TestApiServer, name: &str) -> Option<Value> {
    server.get(POD_NETWORKS, "", name)
}

fn get_pna(server: &TestApiServer, ns: &str, name: &str) -> Option<Value> {
    server.get(POD_NETWORK_ATTACHMENTS, ns, name)
}

/// Waits until the object's Ready and ParamsReady are these.
async fn conditions_become(
    what: &str,
    get: impl Fn() -> Option<Value>,
    ready: Option<(String, String)>,
    params_ready: Option<(String, String)>,
) -> Value {
    let mut last = Value::Null;
    let found = within(|| {
        let obj = get()?;
        last = obj.clone();
        (cond(&obj, "Ready") == ready && cond(&obj, "ParamsReady") == params_ready).then_some(obj)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!("{what}: want Ready {ready:?} ParamsReady {params_ready:?}, last seen {last:#}")
    })
}

/// Waits until the message of the object's condition `type_` contains `needle`.
async fn message_becomes(what: &str, get: impl Fn() -> Option<Value>, type_: &str, needle: &str) -> String {
    let mut last = String::new();
    let found = within(|| {
        last = condition(&get()?, type_)?["message"].as_str()?.to_owned();
        last.contains(needle).then(|| last.clone())
    })
    .await;
    found.unwrap_or_else(|| panic!("{what}: want a {type_} message with {needle:?}, last seen {last:?}"))
}

/// Deletes through the API as a user would (not the controller: RBAC is lifted meanwhile),
/// so finalizers are honoured.
async fn delete_as_user(server: &TestApiServer, namespace: Option<&str>, name: &str, attachment: bool) {
    let client = build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client");
    server.set_rbac(None);
    let deleted = match (attachment, namespace) {
        (true, Some(ns)) => Api::<PodNetworkAttachment>::namespaced(client, ns)
            .delete(name, &DeleteParams::default())
            .await
            .map(drop),
        _ => Api::<PodNetwork>::all(client).delete(name, &DeleteParams::default()).await.map(drop),
    };
    server.set_rbac(Some(controller_rules()));
    deleted.unwrap_or_else(|e| panic!("deleting {name}: {e}"));
}

/// Changes a stored object as a user's update would (the server bumps its resourceVersion).
fn update(server: &TestApiServer, resource: &str, ns: &str, name: &str, change: impl FnOnce(&mut Value)) {
    let mut obj = server.get(resource, ns, name).unwrap_or_else(|| panic!("{resource} {ns}/{name} exists"));
    change(&mut obj);
    server.apply(obj);
}

fn nad_ref(ns: &str, name: &str) -> Value {
    json!({"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": name, "namespace": ns})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_network_conditions_follow_enabled_and_the_nad_through_every_reason() {
    let server = server();
    let c = start(&server, "c1", false).await;
    let pn = || get_pn(&server, "blue");

    // No parameters: Ready, no ParamsReady.
    server.apply(pod_network("blue", json!({"enabled": true})));
    let ready = conditions_become("plain network Ready", pn, pair("True", "Ready"), None).await;
    let first_transition = condition(&ready, "Ready").unwrap()["lastTransitionTime"].clone();
    assert!(first_transition.is_string());

    // Disabled: AdministrativelyDisabled, then back.
    update(&server, POD_NETWORKS, "", "blue", |o| o["spec"]["enabled"] = json!(false));
    conditions_become("disabled", pn, pair("False", "AdministrativelyDisabled"), None).await;
    update(&server, POD_NETWORKS, "", "blue", |o| o["spec"]["enabled"] = json!(true));
    conditions_become("enabled again", pn, pair("True", "Ready"), None).await;

    // A NAD reference: missing, invalid config, valid config, config-less, another kind.
    server.apply(pod_network("green", json!({"parametersRefs": [nad_ref("ns1", "green-nad")]})));
    let green = || get_pn(&server, "green");
    let missing = conditions_become(
        "NAD missing",
        green,
        pair("False", "ParamsNotReady"),
        pair("False", "ParametersNotFound"),
    )
    .await;
    let message = condition(&missing, "ParamsReady").unwrap()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("ns1/green-nad"), "{message}");

    server.apply(nad("ns1", "green-nad", Some("{not json")));
    conditions_become(
        "NAD invalid",
        green,
        pair("False", "ParamsNotReady"),
        pair("False", "InvalidParameters"),
    )
    .await;
    server.apply(nad("ns1", "green-nad", Some(VALID_CNI)));
    let valid =
        conditions_become("NAD valid", green, pair("True", "Ready"), pair("True", "ParametersValid")).await;
    // Nothing changes: nothing is written, the transition times stay.
    let rv = valid["metadata"]["resourceVersion"].clone();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(green().unwrap()["metadata"]["resourceVersion"], rv, "an unchanged object is not written");

    // A NAD without spec.config: valid (each node's file), said in the message.
    server.apply(nad("ns1", "green-nad", None));
    conditions_become("NAD without config", green, pair("True", "Ready"), pair("True", "ParametersValid"))
        .await;
    message_becomes("NAD without config", green, "ParamsReady", "green-nad.conflist").await;

    // Disabled wins over the parameters; the NAD deleted: ParamsReady False, Ready still disabled.
    update(&server, POD_NETWORKS, "", "green", |o| o["spec"]["enabled"] = json!(false));
    server.delete(NADS, "ns1", "green-nad");
    conditions_become(
        "disabled, NAD gone",
        green,
        pair("False", "AdministrativelyDisabled"),
        pair("False", "ParametersNotFound"),
    )
    .await;

    // A reference of a kind plexus does not serve.
    server.apply(pod_network(
        "odd",
        json!({"parametersRefs": [{"group": "example.com", "kind": "Thing", "name": "x", "namespace": "ns1"}]}),
    ));
    conditions_become(
        "unsupported reference",
        || get_pn(&server, "odd"),
        pair("False", "ParamsNotReady"),
        pair("False", "UnsupportedParameters"),
    )
    .await;
    let gen = get_pn(&server, "odd").unwrap();
    assert_eq!(
        condition(&gen, "Ready").unwrap()["observedGeneration"],
        gen["metadata"]["generation"],
        "observedGeneration is the object's generation"
    );
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_conditions_follow_their_parameters_and_their_pod_network() {
    let server = server();
    let c = start(&server, "c1", false).await;
    let pna = || get_pna(&server, "ns1", "blue-1");

    server.apply(pod_network_attachment("ns1", "blue-1", json!({"podNetworkName": "blue"})));
    conditions_become("network missing", pna, pair("False", "PodNetworkNotReady"), None).await;
    server.apply(pod_network("blue", json!({"enabled": false})));
    conditions_become("network disabled", pna, pair("False", "PodNetworkNotReady"), None).await;
    message_becomes("network disabled", pna, "Ready", "AdministrativelyDisabled").await;
    update(&server, POD_NETWORKS, "", "blue", |o| o["spec"]["enabled"] = json!(true));
    conditions_become("network Ready", pna, pair("True", "Ready"), None).await;

    // Parameters: missing, invalid, valid; another namespace's refused.
    let params_ref = |ns: Option<&str>| {
        let mut r = json!({"group": "plexus.dev", "kind": "AttachmentParameters", "name": "bw"});
        if let Some(ns) = ns {
            r["namespace"] = json!(ns);
        }
        r
    };
    server.apply(pod_network_attachment(
        "ns1",
        "blue-2",
        json!({"podNetworkName": "blue", "parametersRefs": [params_ref(None)]}),
    ));
    let pna2 = || get_pna(&server, "ns1", "blue-2");
    conditions_become(
        "params missing",
        pna2,
        pair("False", "ParamsNotReady"),
        pair("False", "ParametersNotFound"),
    )
    .await;
    server.apply(attachment_parameters("ns1", "bw", json!({"bandwidth": "fast"})));
    conditions_become(
        "params invalid",
        pna2,
        pair("False", "ParamsNotReady"),
        pair("False", "InvalidParameters"),
    )
    .await;
    server.apply(attachment_parameters(
        "ns1",
        "bw",
        json!({"bandwidth": {"ingressRate": 1000000, "ingressBurst": 100000}}),
    ));
    conditions_become("params valid", pna2, pair("True", "Ready"), pair("True", "ParametersValid")).await;
    // Valid parameters, network disabled: PodNetworkNotReady with ParamsReady True.
    update(&server, POD_NETWORKS, "", "blue", |o| o["spec"]["enabled"] = json!(false));
    conditions_become(
        "params valid, network off",
        pna2,
        pair("False", "PodNetworkNotReady"),
        pair("True", "ParametersValid"),
    )
    .await;

    server.apply(pod_network_attachment(
        "ns1",
        "blue-3",
        json!({"podNetworkName": "blue", "parametersRefs": [params_ref(Some("ns2"))]}),
    ));
    conditions_become(
        "another namespace's parameters",
        || get_pna(&server, "ns1", "blue-3"),
        pair("False", "ParamsNotReady"),
        pair("False", "InvalidParameters"),
    )
    .await;
    c.stop().await;
}

fn pod_in_phase(ns: &str, name: &str, networks: &str, phase: &str) -> Value {
    let mut p = pod(ns, name, "node-1", &[(POD_NETWORKS_ANNOTATION, networks)]);
    p["status"] = json!({"phase": phase});
    p
}

fn finalizers(obj: &Option<Value>) -> Vec<String> {
    obj.as_ref().map(|o| strs(&o["metadata"]["finalizers"])).unwrap_or_default()
}

fn holds(obj: &Option<Value>) -> bool {
    finalizers(obj).iter().any(|f| f == IN_USE_FINALIZER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_use_finalizer_is_held_while_a_running_pod_or_an_attachment_references_the_object() {
    let server = server();
    let c = start(&server, "c1", false).await;
    server.apply(pod_network("blue", json!({})));
    server.apply(pod_network("red", json!({})));
    server.apply(pod_network_attachment("ns1", "red-1", json!({"podNetworkName": "red"})));
    // Done pods reference nothing.
    server.apply(pod_in_phase("ns1", "done", r#"[{"name":"blue"},{"attachmentName":"red-1"}]"#, "Succeeded"));
    server.apply(pod_in_phase("ns1", "failed", r#"[{"name":"blue"}]"#, "Failed"));
    eventually("red held by its attachment", || holds(&get_pn(&server, "red")).then_some(())).await;
    conditions_become("blue Ready", || get_pn(&server, "blue"), pair("True", "Ready"), None).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!holds(&get_pn(&server, "blue")), "Succeeded/Failed pods do not hold blue");
    assert!(!holds(&get_pna(&server, "ns1", "red-1")), "nor red-1");

    // A running pod holds both.
    server.apply(pod_in_phase("ns1", "p", r#"[{"name":"blue"},{"attachmentName":"red-1"}]"#, "Running"));
    eventually("blue held", || holds(&get_pn(&server, "blue")).then_some(())).await;
    eventually("red-1 held", || holds(&get_pna(&server, "ns1", "red-1")).then_some(())).await;

    // Deleting blue while in use: it stays, with a deletionTimestamp.
    delete_as_user(&server, None, "blue", false).await;
    let deleting = get_pn(&server, "blue").expect("blue is kept while in use");
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());

    // The pod finishes: blue's deletion completes, red-1 is released.
    update(&server, PODS, "ns1", "p", |o| o["status"]["phase"] = json!("Succeeded"));
    eventually("blue gone", || get_pn(&server, "blue").is_none().then_some(())).await;
    eventually("red-1 released", || (!holds(&get_pna(&server, "ns1", "red-1"))).then_some(())).await;

    // A pod deleted releases what it held.
    server.apply(pod_in_phase("ns1", "q", r#"[{"attachmentName":"red-1"}]"#, "Pending"));
    eventually("red-1 held again", || holds(&get_pna(&server, "ns1", "red-1")).then_some(())).await;
    server.delete(PODS, "ns1", "q");
    eventually("red-1 released again", || (!holds(&get_pna(&server, "ns1", "red-1"))).then_some(())).await;

    // The attachment deleted: red is released and can go.
    delete_as_user(&server, Some("ns1"), "red-1", true).await;
    eventually("red-1 gone", || get_pna(&server, "ns1", "red-1").is_none().then_some(())).await;
    eventually("red released", || (!holds(&get_pn(&server, "red"))).then_some(())).await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_pod_network_is_created_and_recreated_unless_the_operator_manages_it() {
    let server = server();
    let c = start(&server, "c1", true).await;
    let created = eventually("default created", || get_pn(&server, "default")).await;
    assert_eq!(created["spec"], json!({"enabled": true}), "the KEP's exact object");
    let ready =
        conditions_become("default Ready", || get_pn(&server, "default"), pair("True", "Ready"), None).await;
    let uid = ready["metadata"]["uid"].clone();
    // Referenced by a pod: still no finalizer, so deleting it never leaves a deletionTimestamp.
    server.apply(pod_in_phase("ns1", "p", r#"[{"name":"default"}]"#, "Running"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!holds(&get_pn(&server, "default")));
    delete_as_user(&server, None, "default", false).await;
    let again = eventually("default recreated", || {
        get_pn(&server, "default").filter(|o| o["metadata"]["uid"] != uid)
    })
    .await;
    assert_eq!(again["spec"], json!({"enabled": true}));
    c.stop().await;

    // The operator manages it: never created; theirs is served like any other, finalizer included.
    let server = self::server();
    let c = start(&server, "c1", false).await;
    server.apply(pod_network("other", json!({})));
    conditions_become("other Ready", || get_pn(&server, "other"), pair("True", "Ready"), None).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(get_pn(&server, "default").is_none(), "--no-default-pod-network: not created");
    server.apply(pod_network("default", json!({"enabled": true})));
    server.apply(pod_in_phase("ns1", "p", r#"[{"name":"default"}]"#, "Running"));
    eventually("the operator's default held", || holds(&get_pn(&server, "default")).then_some(())).await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_providers_objects_are_left_alone() {
    let server = server();
    let c = start(&server, "c1", false).await;
    server.apply(pod_network("theirs", json!({"provider": "acme.io/net", "enabled": false})));
    server.apply(pod_network_attachment("ns1", "theirs-1", json!({"podNetworkName": "theirs"})));
    server.apply(pod_in_phase("ns1", "p", r#"[{"name":"theirs"},{"attachmentName":"theirs-1"}]"#, "Running"));
    server.apply(pod_network("ours", json!({"provider": "plexus.dev/plexus"})));
    conditions_become("ours Ready", || get_pn(&server, "ours"), pair("True", "Ready"), None).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let theirs = get_pn(&server, "theirs").unwrap();
    assert!(theirs["status"].is_null() && !holds(&Some(theirs.clone())), "{theirs:#}");
    let theirs_1 = get_pna(&server, "ns1", "theirs-1").unwrap();
    assert!(theirs_1["status"].is_null() && !holds(&Some(theirs_1.clone())), "{theirs_1:#}");
    let writes: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.verb == "patch" && r.name.as_deref().is_some_and(|n| n.starts_with("theirs")))
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
    c.stop().await;
}

fn holder(server: &TestApiServer) -> Option<String> {
    server.get(LEASES, LEASE_NS, LEASE_NAME)?["spec"]["holderIdentity"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_elect_one_leader_and_the_other_takes_over_when_it_stops() {
    let server = server();
    let a = start(&server, "replica-a", true).await;
    let leader = eventually("a leader", || holder(&server)).await;
    let b = start(&server, "replica-b", true).await;
    eventually("both caches current", || (a.is_synced() && b.is_synced()).then_some(())).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(holder(&server).as_deref(), Some(leader.as_str()), "the holder keeps the Lease");
    assert_eq!(usize::from(a.is_leading()) + usize::from(b.is_leading()), 1, "exactly one leads");
    let (leading, standby) = if a.is_leading() { (a, b) } else { (b, a) };

    // Exactly one writes: every write of a change comes while only the leader leads.
    eventually("default created", || get_pn(&server, "default")).await;
    let lease = server.get(LEASES, LEASE_NS, LEASE_NAME).unwrap();
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 3);
    assert!(lease["spec"]["renewTime"].is_string() && lease["spec"]["acquireTime"].is_string());
    server.apply(pod_network("blue", json!({})));
    conditions_become("blue Ready", || get_pn(&server, "blue"), pair("True", "Ready"), None).await;
    assert!(!standby.is_leading());
    assert!(leading.writes() >= 2, "the leader created default and wrote blue's conditions");
    assert_eq!(standby.writes(), 0, "the standby wrote nothing");

    // The leader stops (releasing the Lease): the other takes over and acts.
    let transitions = lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
    leading.stop().await;
    let new_holder = eventually("the standby leads", || holder(&server).filter(|h| *h != leader)).await;
    eventually("the standby says it leads", || standby.is_leading().then_some(())).await;
    assert_ne!(new_holder, leader);
    let lease = server.get(LEASES, LEASE_NS, LEASE_NAME).unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"].as_i64(), Some(transitions + 1));
    update(&server, POD_NETWORKS, "", "blue", |o| o["spec"]["enabled"] = json!(false));
    conditions_become(
        "the new leader acts",
        || get_pn(&server, "blue"),
        pair("False", "AdministrativelyDisabled"),
        None,
    )
    .await;
    assert!(standby.writes() >= 1, "the new leader wrote");
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_vanishes_without_releasing_is_replaced_after_the_lease_duration() {
    let server = server();
    // A holder that stopped renewing (a crashed replica): its Lease stays as it was.
    server.apply(lease(
        LEASE_NS,
        LEASE_NAME,
        json!({"holderIdentity": "crashed", "leaseDurationSeconds": 2, "renewTime": "2026-01-01T00:00:00.000000Z",
               "acquireTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 4}),
    ));
    let started = Instant::now();
    let c = start(&server, "replica-a", false).await;
    server.apply(pod_network("blue", json!({})));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(holder(&server).as_deref(), Some("crashed"), "not before the lease duration");
    assert!(get_pn(&server, "blue").unwrap()["status"].is_null(), "no writes while another holds the Lease");
    eventually("taken over", || (holder(&server).as_deref() == Some("replica-a")).then_some(())).await;
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(server.get(LEASES, LEASE_NS, LEASE_NAME).unwrap()["spec"]["leaseTransitions"], 5);
    conditions_become("the new leader acts", || get_pn(&server, "blue"), pair("True", "Ready"), None).await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_watched_metadata_only_without_finished_ones() {
    let server = server();
    let c = start(&server, "c1", false).await;
    eventually("caches current", || c.is_synced().then_some(())).await;
    let pod_requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.resource == PODS && matches!(r.verb.as_str(), "list" | "watch"))
        .collect();
    assert!(!pod_requests.is_empty());
    for r in &pod_requests {
        assert!(r.metadata_only, "pods are read metadata-only: {r:?}");
        let query = urldecode(&r.query);
        assert!(query.contains(&format!("fieldSelector={POD_FIELD_SELECTOR}")), "{query}");
    }
    c.stop().await;
}

/// A query string with its %XX escapes decoded.
fn urldecode(s: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hex: Vec<u8> = bytes.by_ref().take(2).collect();
        let decoded = std::str::from_utf8(&hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
        out.push(decoded.expect("a valid %XX escape"));
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The text of `/metrics` at `addr` (empty when it does not answer).
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return String::new() };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn rss_kib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the controller's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The controller's memory for 10,000 pods, each naming two networks: the `plexus-agent
/// controller` process's RSS once its caches hold no pods, then once they hold 10,000
/// (docs/podnetwork-controller.md states the figure). Prints both; fails if the pods cost more
/// than 64 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_for_10000_pods() {
    let server = TestApiServer::start();
    server.apply(pod_network("blue", json!({})));
    let metrics_addr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        free.local_addr().unwrap().to_string()
    };
    let mut child = std::process::Command::new(plexus_tests::world::bin("plexus-agent"))
        .args(["controller", "--kubeconfig"])
        .arg(server.kubeconfig())
        .args(["--identity", "measure", "--lease-namespace", LEASE_NS, "--metrics-addr", &metrics_addr])
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("starting plexus-agent controller");
    let pid = child.id();
    let leading = || (holder(&server).as_deref() == Some("measure")).then_some(());
    eventually("the controller leads", leading).await;
    eventually("blue Ready", || cond(&get_pn(&server, "blue")?, "Ready").filter(|c| c.0 == "True")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = rss_kib(pid);
    const PODS_N: usize = 10_000;
    for i in 0..PODS_N {
        let mut p = pod_in_phase(
            &format!("ns{}", i % 100),
            &format!("pod-{i:05}"),
            r#"[{"name":"blue","interfaceName":"net1"},{"attachmentName":"blue-1","interfaceName":"net2"}]"#,
            "Running",
        );
        // What a real pod's metadata carries besides: labels, owner, other annotations.
        p["metadata"]["labels"] = json!({"app": "load", "pod-template-hash": "5d8f7c9b6d"});
        p["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = json!("2026-11-24T10:00:00Z");
        server.apply(p);
    }
    // Every pod is in the controller's view (its own gauge says so).
    let kept = format!("plexus_catalog_cached_objects{{kind=\"pods_referencing_networks\"}} {PODS_N}");
    eventually("the controller holds every pod", || scrape(&metrics_addr).contains(&kept).then_some(()))
        .await;
    eventually("blue held", || holds(&get_pn(&server, "blue")).then_some(())).await;
    // Let the allocator settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(pid);
    let _ = child.kill();
    let _ = child.wait();
    let per_pod = (after.saturating_sub(before)) as f64 * 1024.0 / PODS_N as f64;
    println!("controller RSS: {before} KiB with no pods, {after} KiB with {PODS_N} pods ({per_pod:.0} bytes per pod)");
    assert!(after.saturating_sub(before) < 64 * 1024, "{PODS_N} pods cost {} KiB", after - before);
}
