//! The test API server's writes, through kube's own client, as a real API server answers
//! them: the status subresource, metadata.generation, PUT with a resourceVersion
//! precondition, DELETE with and without finalizers (deletionTimestamp, MODIFIED, DELETED when
//! the last finalizer goes), JSON patch and apply, and the pod `status.phase` field selector
//! a metadata-only watch uses. These are what the PodNetwork controller's tests rely on.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::PartialObjectMeta;
use plexus_agent::kube::{build_client, ClientSource};
use plexus_agent::podnetwork::model::{PodNetwork, IN_USE_FINALIZER, POD_NETWORK_PLURAL};
use plexus_tests::test_apiserver::{lease, pod, pod_network, Rule, TestApiServer, LEASES, PODS};
use serde_json::{json, Value};

async fn client(server: &TestApiServer) -> kube::Client {
    build_client(&ClientSource::Kubeconfig(server.kubeconfig())).await.expect("client")
}

fn api_error<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.reason),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn new_pod_network(name: &str, finalizers: &[&str]) -> PodNetwork {
    let mut v = pod_network(name, json!({"provider": "plexus.dev/plexus"}));
    v["metadata"]["finalizers"] = json!(finalizers);
    serde_json::from_value(v).unwrap()
}

/// The next watch event (type and object name), waiting at most two seconds.
async fn next_event<S, K>(events: &mut S) -> (String, String, Option<String>)
where
    S: futures::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Unpin,
    K: kube::Resource,
{
    let e = tokio::time::timeout(Duration::from_secs(2), events.try_next())
        .await
        .expect("an event within 2s")
        .expect("a watch event")
        .expect("the watch is open");
    let (t, o) = match e {
        WatchEvent::Added(o) => ("ADDED", o),
        WatchEvent::Modified(o) => ("MODIFIED", o),
        WatchEvent::Deleted(o) => ("DELETED", o),
        other => panic!("unexpected {other:?}"),
    };
    let name = o.meta().name.clone().unwrap_or_default();
    let deleting = o.meta().deletion_timestamp.as_ref().map(|t| t.0.to_string());
    (t.to_owned(), name, deleting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_a_deleted_object_until_the_last_one_is_removed() {
    let server = TestApiServer::start();
    let api: Api<PodNetwork> = Api::all(client(&server).await);
    let mut events = api.watch(&WatchParams::default(), "0").await.expect("watch").boxed();
    let created = api
        .create(&PostParams::default(), &new_pod_network("held", &[IN_USE_FINALIZER]))
        .await
        .expect("create");
    assert_eq!(next_event(&mut events).await.0, "ADDED");
    assert_eq!(created.metadata.generation, Some(1));

    // DELETE: the object stays, marked, and watchers see it MODIFIED.
    let marked = api
        .delete("held", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("kept: it has a finalizer");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(marked.metadata.generation, Some(2), "marking for deletion bumps the generation");
    let (t, name, deleting) = next_event(&mut events).await;
    assert_eq!((t.as_str(), name.as_str()), ("MODIFIED", "held"));
    assert!(deleting.is_some());
    // A second DELETE changes nothing.
    let again =
        api.delete("held", &DeleteParams::default()).await.expect("delete again").left().expect("the object");
    assert_eq!(again.metadata.resource_version, marked.metadata.resource_version);

    // No finalizer can be added now; the object still reads.
    let add = json!({"metadata": {"finalizers": [IN_USE_FINALIZER, "other/x"]}});
    let (code, reason) = api_error(api.patch("held", &PatchParams::default(), &Patch::Merge(&add)).await);
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(api.get("held").await.expect("still there").metadata.deletion_timestamp.is_some());

    // Removing the last finalizer deletes it: DELETED, then 404.
    let release = json!({"metadata": {"finalizers": null}});
    let last = api.patch("held", &PatchParams::default(), &Patch::Merge(&release)).await.expect("release");
    assert!(last.metadata.finalizers.is_none_or(|f| f.is_empty()));
    let (t, name, _) = next_event(&mut events).await;
    assert_eq!((t.as_str(), name.as_str()), ("DELETED", "held"));
    assert_eq!(api_error(api.get("held").await).0, 404);
    assert!(server.get(POD_NETWORK_PLURAL, "", "held").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_without_finalizers_removes_at_once_and_answers_as_the_api_server() {
    let server = TestApiServer::start();
    let c = client(&server).await;
    let networks: Api<PodNetwork> = Api::all(c.clone());
    let mut events = networks.watch(&WatchParams::default(), "0").await.expect("watch").boxed();
    networks.create(&PostParams::default(), &new_pod_network("free", &[])).await.expect("create");
    assert_eq!(next_event(&mut events).await.0, "ADDED");
    // A custom resource answers a Success Status.
    let s =
        networks.delete("free", &DeleteParams::default()).await.expect("delete").right().expect("a Status");
    assert_eq!(s.status, Some(kube::core::response::StatusSummary::Success));
    assert_eq!(s.details.map(|d| (d.name, d.kind)), Some(("free".into(), POD_NETWORK_PLURAL.into())));
    assert_eq!(next_event(&mut events).await.0, "DELETED");
    assert_eq!(api_error(networks.delete("free", &DeleteParams::default()).await), (404, "NotFound".into()));

    // A pod answers itself; preconditions are checked.
    server.apply(pod("ns1", "p", "node-1", &[]));
    let pods: Api<Pod> = Api::namespaced(c, "ns1");
    let stale = DeleteParams {
        preconditions: Some(kube::api::Preconditions { resource_version: Some("1".into()), uid: None }),
        ..Default::default()
    };
    assert_eq!(api_error(pods.delete("p", &stale).await).0, 409);
    let gone = pods.delete("p", &DeleteParams::default()).await.expect("delete").left().expect("the pod");
    assert_eq!(gone.metadata.name.as_deref(), Some("p"));
    assert!(server.get(PODS, "ns1", "p").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_subresource_and_generation() {
    let server = TestApiServer::start();
    let api: Api<PodNetwork> = Api::all(client(&server).await);
    let pp = PatchParams::default();
    let mut with_status = new_pod_network("s", &[]);
    with_status.status = Some(
        serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "True",
        "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap(),
    );
    let created = api.create(&PostParams::default(), &with_status).await.expect("create");
    assert!(created.status.is_none(), "a create drops the status of a resource with a status subresource");

    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}});
    // Through the object: the status is ignored.
    let o = api.patch("s", &pp, &Patch::Merge(&ready)).await.expect("patch");
    assert!(o.status.is_none());
    assert_eq!(
        o.metadata.resource_version, created.metadata.resource_version,
        "nothing changed: nothing written"
    );
    // Through /status: only the status changes, the generation stays.
    let spec_too =
        json!({"spec": {"enabled": false}, "metadata": {"labels": {"a": "b"}}, "status": ready["status"]});
    let o = api.patch_status("s", &pp, &Patch::Merge(&spec_too)).await.expect("patch status");
    assert!(o.is_ready() && o.spec.enabled && o.metadata.labels.is_none());
    assert_eq!(o.metadata.generation, Some(1));
    let got = api.get_status("s").await.expect("get status");
    assert!(got.is_ready());

    // replace_status: PUT of /status with a resourceVersion precondition.
    let mut stale = got.clone();
    stale.metadata.resource_version = Some("1".into());
    stale.status = None;
    assert_eq!(
        api_error(api.replace_status("s", &PostParams::default(), &stale).await),
        (409, "Conflict".into())
    );
    let mut cleared = got.clone();
    cleared.status = None;
    let o = api.replace_status("s", &PostParams::default(), &cleared).await.expect("replace status");
    assert!(o.status.is_none());

    // A spec change counts.
    let o = api.patch("s", &pp, &Patch::Merge(json!({"spec": {"enabled": false}}))).await.expect("disable");
    assert_eq!(o.metadata.generation, Some(2));
    let o = api
        .patch("s", &pp, &Patch::Merge(json!({"metadata": {"annotations": {"x": "y"}}})))
        .await
        .expect("annotate");
    assert_eq!(o.metadata.generation, Some(2), "metadata is not the spec");
}

fn named_again(name: &str) -> PodNetwork {
    new_pod_network(name, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_needs_the_current_resource_version() {
    let server = TestApiServer::start();
    let c = client(&server).await;
    let api: Api<PodNetwork> = Api::all(c.clone());
    let v1 = api.create(&PostParams::default(), &new_pod_network("u", &[])).await.expect("create");
    let mut next = v1.clone();
    next.spec.enabled = false;
    let v2 = api.replace("u", &PostParams::default(), &next).await.expect("replace");
    assert_ne!(v2.metadata.resource_version, v1.metadata.resource_version);
    // The old resourceVersion: 409 Conflict.
    assert_eq!(api_error(api.replace("u", &PostParams::default(), &next).await), (409, "Conflict".into()));
    // A custom resource needs one; a Lease (built in) does not.
    let mut unconditional = v2.clone();
    unconditional.metadata.resource_version = None;
    assert_eq!(api_error(api.replace("u", &PostParams::default(), &unconditional).await).0, 422);
    assert_eq!(
        api_error(api.replace("absent", &PostParams::default(), &new_pod_network("absent", &[])).await).0,
        404
    );
    // A create names the object from generateName; another create of a taken name is 409.
    let mut unnamed = new_pod_network("", &[]);
    unnamed.metadata.name = None;
    unnamed.metadata.generate_name = Some("net-".into());
    let named = api.create(&PostParams::default(), &unnamed).await.expect("create with generateName");
    let name = named.metadata.name.clone().unwrap();
    assert!(name.starts_with("net-") && name.len() == "net-".len() + 5, "{name}");
    let (code, reason) = api_error(api.create(&PostParams::default(), &named_again(&name)).await);
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    let leases: Api<Lease> = Api::namespaced(c, "kube-system");
    let l: Lease = serde_json::from_value(lease(
        "kube-system",
        "plexus-controller",
        json!({"holderIdentity": "a", "leaseDurationSeconds": 15}),
    ))
    .unwrap();
    let l = leases.create(&PostParams::default(), &l).await.expect("create lease");
    assert!(l.metadata.generation.is_none(), "leases keep no generation");
    let mut taken = l.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let taken = leases.replace("plexus-controller", &PostParams::default(), &taken).await.expect("take over");
    assert_eq!(taken.spec.unwrap().holder_identity.as_deref(), Some("b"));
    // Two candidates racing from the same version: one wins, the other gets 409.
    let mut late = l.clone();
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    assert_eq!(api_error(leases.replace("plexus-controller", &PostParams::default(), &late).await).0, 409);
    assert_eq!(server.objects(LEASES).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_and_apply() {
    let server = TestApiServer::start();
    let api: Api<PodNetwork> = Api::all(client(&server).await);
    // Apply creates, and needs a field manager.
    let applied = json!({"apiVersion": "plexus.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "a"},
                         "spec": {"enabled": true}});
    assert_eq!(api_error(api.patch("a", &PatchParams::default(), &Patch::Apply(&applied)).await).0, 422);
    let o = api
        .patch("a", &PatchParams::apply("plexus-controller"), &Patch::Apply(&applied))
        .await
        .expect("apply");
    assert_eq!(o.metadata.generation, Some(1));
    let mut with_finalizer = applied.clone();
    with_finalizer["metadata"]["finalizers"] = json!([IN_USE_FINALIZER]);
    api.patch("a", &PatchParams::apply("plexus-controller"), &Patch::Apply(&with_finalizer))
        .await
        .expect("apply");

    // JSON patch, sent raw (kube's jsonpatch feature is not enabled): test then remove.
    let raw = |ops: Value| {
        hyper::Request::patch(format!("{}/apis/plexus.dev/v1alpha1/podnetworks/a", server.url()))
            .header("content-type", "application/json-patch+json")
            .body(serde_json::to_vec(&ops).unwrap())
            .unwrap()
    };
    let c = client(&server).await;
    let wrong = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "someone/else"},
                       {"op": "remove", "path": "/metadata/finalizers/0"}]);
    match c.request::<PodNetwork>(raw(wrong)).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("a failed test op is 422: {other:?}"),
    }
    let right = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": IN_USE_FINALIZER},
                       {"op": "remove", "path": "/metadata/finalizers/0"}]);
    let o = c.request::<PodNetwork>(raw(right)).await.expect("json patch");
    assert!(o.metadata.finalizers.unwrap_or_default().is_empty());
    // Strategic merge patch is for built-in resources only.
    let smp = json!({"metadata": {"labels": {"a": "b"}}});
    assert_eq!(api_error(api.patch("a", &PatchParams::default(), &Patch::Strategic(&smp)).await).0, 415);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_watch_of_pods_not_finished_sees_them_leave() {
    let server = TestApiServer::start();
    server.apply(pod("ns1", "running", "node-1", &[]));
    let pods: Api<Pod> = Api::all(client(&server).await);
    let wp = WatchParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
    let mut events = pods.watch_metadata(&wp, "0").await.expect("watch").boxed();
    let (t, name, _) = next_event::<_, PartialObjectMeta<Pod>>(&mut events).await;
    assert_eq!((t.as_str(), name.as_str()), ("ADDED", "running"));
    let ns1: Api<Pod> = Api::namespaced(client(&server).await, "ns1");
    let pp = PatchParams::default();
    ns1.patch_status("running", &pp, &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .expect("running");
    assert_eq!(next_event::<_, PartialObjectMeta<Pod>>(&mut events).await.0, "MODIFIED");
    let done = ns1
        .patch_status("running", &pp, &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))
        .await
        .expect("succeeded");
    assert_eq!(done.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"));
    let (t, name, _) = next_event::<_, PartialObjectMeta<Pod>>(&mut events).await;
    assert_eq!((t.as_str(), name.as_str()), ("DELETED", "running"), "leaving the selection is DELETED");
    let listed = pods
        .list_metadata(
            &kube::api::ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
        )
        .await
        .expect("list");
    assert!(listed.items.is_empty());
    // A pod's spec does not change through /status, nor its status through the object.
    let o = ns1
        .patch("running", &pp, &Patch::Merge(json!({"status": {"phase": "Failed"}})))
        .await
        .expect("patch");
    assert_eq!(o.status.and_then(|s| s.phase).as_deref(), Some("Succeeded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_need_the_status_subresource_in_rbac() {
    let server = TestApiServer::start();
    server.apply(pod_network("n", json!({})));
    let rule = |resources: &[&str]| Rule {
        api_groups: vec!["plexus.dev".into()],
        resources: resources.iter().map(|r| (*r).to_owned()).collect(),
        verbs: vec!["get".into(), "patch".into(), "update".into()],
    };
    server.set_rbac(Some(vec![rule(&["podnetworks"])]));
    let api: Api<PodNetwork> = Api::all(client(&server).await);
    let status = Patch::Merge(json!({"status": {}}));
    assert_eq!(api_error(api.patch_status("n", &PatchParams::default(), &status).await).0, 403);
    server.set_rbac(Some(vec![rule(&["podnetworks", "podnetworks/status"])]));
    api.patch_status("n", &PatchParams::default(), &status).await.expect("allowed");
    let last = server.requests().pop().unwrap();
    assert_eq!(
        (last.resource.as_str(), last.subresource.as_deref(), last.verb.as_str()),
        ("podnetworks", Some("status"), "patch")
    );
}

/// The API server refuses a body written whole that does not say what it is: the controller's
/// create of `default` failed on a real API server this way while this server took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_api_version_and_kind_is_refused_as_the_api_server_refuses_it() {
    let server = TestApiServer::start();
    let client = client(&server).await;
    let raw = |body: Value| {
        let request = http::Request::post(format!("/apis/plexus.dev/v1alpha1/{POD_NETWORK_PLURAL}"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let client = client.clone();
        async move { client.request::<Value>(request).await }
    };
    let bare = json!({"metadata": {"name": "default"}, "spec": {"enabled": true}});
    let (code, reason) = api_error(raw(bare).await);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    let other = json!({"apiVersion": "plexus.dev/v1", "kind": "PodNetwork", "metadata": {"name": "x"}});
    assert_eq!(api_error(raw(other).await).0, 400);
    assert!(server.objects(POD_NETWORK_PLURAL).is_empty(), "nothing was stored");
}

/// Every write of the PodNetwork controller, through its own writer, against the test API
/// server that checks what a real one checks (type meta, the CRDs' schemas, the status
/// subresource): each is accepted and stored as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_the_controller_makes_is_accepted_by_the_strict_server() {
    use plexus_agent::controller::plan::{Action, Target};
    use plexus_agent::controller::reconcile::Writer;
    use plexus_tests::test_apiserver::pod_network_attachment;

    let server = TestApiServer::start();
    let writer = Writer::new(client(&server).await);
    let outcome = writer.apply(&[Action::CreateDefault]).await;
    assert_eq!((outcome.written, outcome.failed), (1, 0), "{outcome:?}");
    let stored = server.get(POD_NETWORK_PLURAL, "", "default").expect("default created");
    assert_eq!(stored["spec"], json!({"enabled": true}));

    server.apply(pod_network_attachment("ns1", "a", json!({"podNetworkName": "default"})));
    let condition = |type_: &str| {
        serde_json::from_value(json!({"type": type_, "status": "True", "reason": type_, "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}))
        .unwrap()
    };
    let pn = Target::PodNetwork { name: "default".into() };
    let pna = Target::Attachment { namespace: "ns1".into(), name: "a".into() };
    let writes = [
        Action::Conditions {
            target: pn.clone(),
            resource_version: None,
            conditions: vec![condition("Ready")],
        },
        Action::Finalizers { target: pn, resource_version: None, finalizers: vec![IN_USE_FINALIZER.into()] },
        Action::Conditions {
            target: pna.clone(),
            resource_version: None,
            conditions: vec![condition("Ready")],
        },
        Action::Finalizers { target: pna, resource_version: None, finalizers: vec![IN_USE_FINALIZER.into()] },
    ];
    let outcome = writer.apply(&writes).await;
    assert_eq!((outcome.written, outcome.conflicts, outcome.failed), (4, 0, 0), "{outcome:?}");
    for (resource, ns, name) in [(POD_NETWORK_PLURAL, "", "default"), ("podnetworkattachments", "ns1", "a")] {
        let o = server.get(resource, ns, name).expect("still there");
        assert_eq!(o["status"]["conditions"][0]["type"], "Ready", "{resource}");
        assert_eq!(o["metadata"]["finalizers"], json!([IN_USE_FINALIZER]), "{resource}");
    }
}
