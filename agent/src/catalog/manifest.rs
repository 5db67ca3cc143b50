//! Kubernetes manifests in files: YAML (several documents) or JSON, lists included.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{names, PodInfo};
use crate::podnetwork::model::{
    AttachmentParameters, PodNetwork, PodNetworkAttachment, ATTACHMENT_KIND, PARAMETERS_KIND,
    POD_NETWORK_KIND,
};
use crate::spec::resolve::NetworkAttachmentDefinition;
use crate::spec::RESOURCE_NAME_ANNOTATION;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ManifestError(String);

/// Objects of the kinds plexus reads, found in one manifest file.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Objects {
    pub nads: Vec<NetworkAttachmentDefinition>,
    pub pods: Vec<PodInfo>,
    /// Cluster-scoped: their `metadata.namespace` is cleared.
    pub pod_networks: Vec<PodNetwork>,
    pub attachments: Vec<PodNetworkAttachment>,
    pub parameters: Vec<AttachmentParameters>,
}

impl Objects {
    pub fn is_empty(&self) -> bool {
        self.nads.is_empty()
            && self.pods.is_empty()
            && self.pod_networks.is_empty()
            && self.attachments.is_empty()
            && self.parameters.is_empty()
    }
}

const KINDS: [&str; 5] =
    ["NetworkAttachmentDefinition", "Pod", POD_NETWORK_KIND, ATTACHMENT_KIND, PARAMETERS_KIND];

#[derive(Deserialize)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Parses every document of a file. Objects of other kinds are skipped; a document that is
/// not an object, or a NAD or pod without a name, is an error naming the document.
pub fn parse_objects(text: &str) -> Result<Objects, ManifestError> {
    let mut out = Objects::default();
    let docs: Vec<Value> = if text.trim_start().starts_with(['{', '[']) {
        vec![serde_json::from_str(text).map_err(|e| ManifestError(format!("invalid JSON: {e}")))?]
    } else {
        let mut docs = Vec::new();
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let v = Value::deserialize(doc).map_err(|e| ManifestError(format!("YAML document {i}: {e}")))?;
            docs.push(v);
        }
        docs
    };
    for (i, doc) in docs.into_iter().enumerate() {
        collect(i, doc, &mut out)?;
    }
    Ok(out)
}

fn collect(i: usize, doc: Value, out: &mut Objects) -> Result<(), ManifestError> {
    match doc {
        Value::Null => Ok(()),
        Value::Array(items) => items.into_iter().try_for_each(|d| collect(i, d, out)),
        Value::Object(mut obj) => {
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
            if kind.ends_with("List") {
                if let Some(Value::Array(items)) = obj.remove("items") {
                    return items.into_iter().try_for_each(|d| collect(i, d, out));
                }
                return Ok(());
            }
            if !KINDS.contains(&kind.as_str()) {
                return Ok(());
            }
            let metadata = obj.get("metadata").cloned().unwrap_or(Value::Null);
            let meta: Meta = serde_json::from_value(metadata)
                .map_err(|e| ManifestError(format!("document {i}: {kind} metadata: {e}")))?;
            let name = meta.name.filter(|n| !n.is_empty()).ok_or_else(|| {
                ManifestError(format!("document {i}: {kind} has no metadata.name; every object needs one"))
            })?;
            let namespace = meta.namespace.filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
            // As the API server would: these names become lookups and file names.
            names::check_object_name(&format!("{kind} metadata.name"), &name)
                .and_then(|()| names::check_namespace(&format!("{kind} metadata.namespace"), &namespace))
                .map_err(|e| ManifestError(format!("document {i}: {e}")))?;
            if let Some(result) = pod_network_object(&kind, Value::Object(obj.clone()), &namespace, out) {
                return result.map_err(|e| ManifestError(format!("document {i}: {kind} {name}: {e}")));
            }
            if kind == "Pod" {
                out.pods.push(PodInfo { namespace, name, uid: meta.uid, annotations: meta.annotations });
            } else {
                let config = match obj.get("spec").and_then(|s| s.get("config")) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(c)) => Some(c.clone()),
                    Some(_) => {
                        return Err(ManifestError(format!(
                            "document {i}: NetworkAttachmentDefinition {namespace}/{name}: spec.config must be a \
                             string holding CNI JSON"
                        )))
                    }
                };
                let resource_name =
                    meta.annotations.get(RESOURCE_NAME_ANNOTATION).filter(|r| !r.is_empty()).cloned();
                out.nads.push(NetworkAttachmentDefinition { namespace, name, config, resource_name });
            }
            Ok(())
        }
        _ => Err(ManifestError(format!("document {i} is not an object"))),
    }
}

/// Decodes a KEP-3698 object into `out`; `None` for the other kinds.
fn pod_network_object(
    kind: &str,
    obj: Value,
    namespace: &str,
    out: &mut Objects,
) -> Option<Result<(), serde_json::Error>> {
    let decoded = match kind {
        POD_NETWORK_KIND => serde_json::from_value(obj).map(|mut pn: PodNetwork| {
            pn.metadata.namespace = None;
            out.pod_networks.push(pn);
        }),
        ATTACHMENT_KIND => serde_json::from_value(obj).map(|mut pna: PodNetworkAttachment| {
            pna.metadata.namespace = Some(namespace.to_owned());
            out.attachments.push(pna);
        }),
        PARAMETERS_KIND => serde_json::from_value(obj).map(|mut p: AttachmentParameters| {
            p.metadata.namespace = Some(namespace.to_owned());
            out.parameters.push(p);
        }),
        _ => return None,
    };
    Some(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_documents_lists_and_json() {
        let yaml = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: a-bridge-network
  annotations:
    k8s.v1.cni.cncf.io/resourceName: intel.com/sriov_vf
spec:
  config: '{"cniVersion":"0.3.0","type":"bridge"}'
---
apiVersion: v1
kind: Pod
metadata:
  name: my-pod
  namespace: my-namespace
  annotations:
    k8s.v1.cni.cncf.io/networks: net-a
---
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: v1
kind: List
items:
  - kind: NetworkAttachmentDefinition
    metadata: {name: bare, namespace: other}
"#;
        let o = parse_objects(yaml).unwrap();
        assert_eq!(o.nads.len(), 2);
        assert_eq!(o.nads[0].namespace, "default");
        assert!(o.nads[0].config.as_deref().unwrap().contains("bridge"));
        assert_eq!((o.nads[1].namespace.as_str(), o.nads[1].config.as_deref()), ("other", None));
        assert_eq!(o.nads[0].resource_name.as_deref(), Some("intel.com/sriov_vf"), "kept for its devices");
        assert_eq!(o.nads[1].resource_name, None);
        assert_eq!(o.pods[0].annotations["k8s.v1.cni.cncf.io/networks"], "net-a");
        let json = r#"{"kind":"Pod","metadata":{"name":"p","uid":"u1"}}"#;
        assert_eq!(parse_objects(json).unwrap().pods[0].uid.as_deref(), Some("u1"));
    }

    #[test]
    fn pod_networks_their_attachments_and_parameters() {
        let yaml = r#"
apiVersion: plexus.dev/v1alpha1
kind: PodNetwork
metadata: {name: blue, namespace: ignored}
spec:
  parametersRefs: [{group: k8s.cni.cncf.io, kind: NetworkAttachmentDefinition, name: blue, namespace: nets}]
---
apiVersion: plexus.dev/v1alpha1
kind: PodNetworkAttachment
metadata: {name: blue-fast}
spec:
  podNetworkName: blue
  parametersRefs: [{group: plexus.dev, kind: AttachmentParameters, name: fast}]
---
apiVersion: plexus.dev/v1alpha1
kind: AttachmentParameters
metadata: {name: fast, namespace: tenant}
spec: {bandwidth: {egressRate: 1000000}}
"#;
        let o = parse_objects(yaml).unwrap();
        assert_eq!(o.pod_networks[0].name(), "blue");
        assert_eq!(o.pod_networks[0].metadata.namespace, None, "cluster-scoped");
        assert_eq!(o.pod_networks[0].spec.parameters_refs[0].namespace.as_deref(), Some("nets"));
        assert_eq!(
            (o.attachments[0].namespace(), o.attachments[0].spec.pod_network_name.as_str()),
            ("default", "blue")
        );
        assert_eq!(o.parameters[0].metadata.namespace.as_deref(), Some("tenant"));
        assert_eq!(o.parameters[0].spec["bandwidth"]["egressRate"], 1000000);
        let err =
            parse_objects("kind: PodNetworkAttachment\nmetadata: {name: x}\nspec: {podNetworkName: 7}\n")
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("document 0: PodNetworkAttachment x: "), "{err}");
        assert!(parse_objects("kind: PodNetwork\nmetadata: {name: Blue}\n")
            .unwrap_err()
            .to_string()
            .contains("DNS-1123"));
    }

    #[test]
    fn broken_manifests_name_the_problem() {
        assert!(parse_objects("kind: Pod\nmetadata: {}\n")
            .unwrap_err()
            .to_string()
            .contains("metadata.name"));
        assert!(parse_objects(
            "kind: NetworkAttachmentDefinition\nmetadata: {name: x}\nspec: {config: {a: 1}}\n"
        )
        .unwrap_err()
        .to_string()
        .contains("must be a string"));
        for (doc, field) in [
            ("kind: Pod\nmetadata: {name: ../../../../x, namespace: ns}\n", "Pod metadata.name"),
            ("kind: Pod\nmetadata: {name: p, namespace: ../etc}\n", "Pod metadata.namespace"),
            ("kind: Pod\nmetadata: {name: p, namespace: a.b}\n", "Pod metadata.namespace"),
            (
                "kind: NetworkAttachmentDefinition\nmetadata: {name: Net_A}\n",
                "NetworkAttachmentDefinition metadata.name",
            ),
            (
                "kind: List\nitems: [{kind: Pod, metadata: {name: ok}}, {kind: Pod, metadata: {name: ..}}]\n",
                "Pod metadata.name",
            ),
        ] {
            let msg = parse_objects(doc).unwrap_err().to_string();
            assert!(msg.starts_with(&format!("document 0: {field} ")), "{msg}");
            assert!(msg.contains("DNS-1123"), "{msg}");
        }
        assert!(parse_objects("{").is_err());
        assert!(parse_objects("- 1\n").is_err());
    }
}
