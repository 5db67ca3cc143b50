//! A `MultiNetworkPolicy` object (the Network Plumbing WG's CRD, `k8s.cni.cncf.io`) read into a
//! [`Policy`]: from the API server or from a file, the same checks, so a policy a cluster
//! would store is one a directory may hold, and the other way round.

use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use serde_json::Value;

use super::model::{parse_policy_for, Policy, PolicyError, POLICY_FOR_ANNOTATION};

/// The CRD's group.
pub const GROUP: &str = "k8s.cni.cncf.io";
pub const KIND: &str = "MultiNetworkPolicy";
/// The versions the multi-networkpolicy project's CRD defines (v1beta1 served and stored;
/// v1beta2, the same schema, in later releases): both read alike.
pub const VERSIONS: [&str; 2] = ["v1beta1", "v1beta2"];

/// Why an object is not a usable policy, naming what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("apiVersion {found:?} is not {GROUP}/v1beta1 or {GROUP}/v1beta2")]
    ApiVersion { found: String },
    #[error("kind {found:?} is not {KIND}")]
    Kind { found: String },
    #[error("metadata.name is missing")]
    NoName,
    #[error("{namespace}/{name}: spec.podSelector is missing (the CRD requires it; {{}} selects every pod)")]
    NoPodSelector { namespace: String, name: String },
    #[error("{namespace}/{name}: spec does not follow NetworkPolicy's schema: {message}")]
    Spec { namespace: String, name: String, message: String },
    #[error(
        "{namespace}/{name}: names no network; add the {POLICY_FOR_ANNOTATION} annotation (a comma-separated \
         list of network-attachment-definitions, name or namespace/name)"
    )]
    NoNetworks { namespace: String, name: String },
    #[error("{namespace}/{name}: {source}")]
    Policy {
        namespace: String,
        name: String,
        #[source]
        source: Box<PolicyError>,
    },
}

/// The policy `object` is; its namespace `default_namespace` when the object has none (a file
/// of the standalone mode, as `kubectl apply` would put it).
pub fn policy_from_object(object: &Value, default_namespace: &str) -> Result<Policy, ObjectError> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let api_version = text(&object["apiVersion"]);
    let known = api_version.split_once('/').is_some_and(|(g, v)| g == GROUP && VERSIONS.contains(&v));
    if !known {
        return Err(ObjectError::ApiVersion { found: api_version });
    }
    if object["kind"] != KIND {
        return Err(ObjectError::Kind { found: text(&object["kind"]) });
    }
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().filter(|n| !n.is_empty()).ok_or(ObjectError::NoName)?.to_owned();
    let namespace =
        metadata["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or(default_namespace).to_owned();
    let spec = &object["spec"];
    if spec.get("podSelector").is_none_or(Value::is_null) {
        return Err(ObjectError::NoPodSelector { namespace, name });
    }
    let spec: NetworkPolicySpec = serde_json::from_value(spec.clone()).map_err(|e| ObjectError::Spec {
        namespace: namespace.clone(),
        name: name.clone(),
        message: e.to_string(),
    })?;
    let annotation = metadata["annotations"][POLICY_FOR_ANNOTATION].as_str();
    let Some(annotation) = annotation.filter(|a| !a.trim().is_empty()) else {
        return Err(ObjectError::NoNetworks { namespace, name });
    };
    let networks = parse_policy_for(annotation, &namespace).map_err(|source| ObjectError::Policy {
        namespace: namespace.clone(),
        name: name.clone(),
        source: Box::new(source),
    })?;
    Policy::from_spec(&namespace, &name, networks, &spec).map_err(|source| ObjectError::Policy {
        namespace,
        name,
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::network_policy::model::NetworkName;

    fn object(version: &str) -> Value {
        json!({
            "apiVersion": format!("k8s.cni.cncf.io/{version}"),
            "kind": "MultiNetworkPolicy",
            "metadata": {"name": "web", "namespace": "team-a",
                         "annotations": {"k8s.v1.cni.cncf.io/policy-for": "storage, infra/backplane"}},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                     "ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": "http"}]}]}
        })
    }

    #[test]
    fn both_versions_read_alike() {
        for version in VERSIONS {
            let p = policy_from_object(&object(version), "default").expect("a policy");
            assert_eq!(p.id(), "team-a/web");
            assert_eq!(
                p.networks,
                vec![NetworkName::new("team-a", "storage"), NetworkName::new("infra", "backplane")]
            );
            assert!(p.isolates_ingress && !p.isolates_egress);
            assert_eq!(p.ingress.len(), 1);
        }
    }

    #[test]
    fn a_file_without_a_namespace_takes_the_default() {
        let mut o = object("v1beta1");
        o["metadata"].as_object_mut().expect("metadata").remove("namespace");
        let p = policy_from_object(&o, "default").expect("a policy");
        assert_eq!(p.id(), "default/web");
        assert_eq!(p.networks[0], NetworkName::new("default", "storage"));
    }

    #[test]
    fn what_is_refused_says_what_to_fix() {
        let refused = |edit: &dyn Fn(&mut Value)| {
            let mut o = object("v1beta1");
            edit(&mut o);
            policy_from_object(&o, "default").expect_err("refused").to_string()
        };
        assert_eq!(
            refused(&|o| o["apiVersion"] = json!("networking.k8s.io/v1")),
            "apiVersion \"networking.k8s.io/v1\" is not k8s.cni.cncf.io/v1beta1 or k8s.cni.cncf.io/v1beta2"
        );
        assert_eq!(
            refused(&|o| o["kind"] = json!("NetworkPolicy")),
            "kind \"NetworkPolicy\" is not MultiNetworkPolicy"
        );
        assert_eq!(refused(&|o| o["metadata"]["name"] = json!("")), "metadata.name is missing");
        assert_eq!(
            refused(&|o| o["spec"] = json!({"ingress": []})),
            "team-a/web: spec.podSelector is missing (the CRD requires it; {} selects every pod)"
        );
        let wrong_type = refused(&|o| o["spec"]["ingress"] = json!({"from": []}));
        assert!(
            wrong_type.starts_with("team-a/web: spec does not follow NetworkPolicy's schema: "),
            "{wrong_type}"
        );
        let no_networks =
            "team-a/web: names no network; add the k8s.v1.cni.cncf.io/policy-for annotation (a \
                           comma-separated list of network-attachment-definitions, name or namespace/name)";
        assert_eq!(refused(&|o| o["metadata"]["annotations"] = json!({})), no_networks);
        assert_eq!(
            refused(&|o| o["metadata"]["annotations"][POLICY_FOR_ANNOTATION] = json!("  ")),
            no_networks
        );
        assert_eq!(
            refused(&|o| o["metadata"]["annotations"][POLICY_FOR_ANNOTATION] = json!("a,,b")),
            "team-a/web: metadata.annotations[\"k8s.v1.cni.cncf.io/policy-for\"]: \"\" in \"a,,b\" is not a network \
             (name or namespace/name, comma-separated)"
        );
        assert_eq!(
            refused(&|o| o["spec"]["ingress"][0]["ports"][0]["port"] = json!(0)),
            "team-a/web: spec.ingress[0].ports[0].port: port 0 is not between 1 and 65535"
        );
    }
}
