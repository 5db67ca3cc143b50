//! What a PodNetwork's and a PodNetworkAttachment's `parametersRefs` mean to plexus, and the
//! attachment they make: the same [`NetworkSelection`] an NPWG annotation element makes, so
//! one engine attaches both.
//!
//! - A PodNetwork takes its CNI config from at most one NetworkAttachmentDefinition
//!   (`k8s.cni.cncf.io`, kind `NetworkAttachmentDefinition` or the KEP's resource spelling
//!   `network-attachment-definitions`), with a namespace (a PodNetwork is cluster-scoped). Its
//!   config is resolved as a NAD selection's is (spec 3.4.1). Without one, the config is the
//!   on-disk config named after the PodNetwork (3.4.1 rules 2 and 3), except for `default`,
//!   which is always the cluster default network and takes no parameters.
//! - A PodNetworkAttachment takes at most one AttachmentParameters (`plexus.dev`), in its own
//!   namespace: a tenant cannot point at another namespace's parameters. Its `spec` holds the
//!   per-attachment keys of an NPWG selection element ([`ATTACHMENT_KEYS`]), validated by the
//!   annotation's parser.
//!
//! Every error knows the ParamsReady reason the controller reports for it
//! ([`ParamsError::reason`]); on a pod's ADD it is a config to fix (CNI code 7).

use serde_json::Value;

use crate::cni::config::{ConfigError, NetworkConfigList};
use crate::cni::{CniCode, ErrorCode};
use crate::spec::selection::{read_attachment_key, InvalidField, NetworkSelection, ATTACHMENT_KEYS};
use crate::spec::validate::{is_nad_name, is_namespace};

use super::model::{
    AttachmentParameters, ParametersRef, PodNetwork, PodNetworkAttachment, DEFAULT_POD_NETWORK, GROUP,
    PARAMETERS_KIND, PARAMETERS_PLURAL,
};
use crate::cni::json::json_type;

/// The NetworkAttachmentDefinition API group.
pub const NAD_GROUP: &str = "k8s.cni.cncf.io";
/// The NAD's kind, and its resource name as the KEP's example spells `kind`.
pub const NAD_KINDS: [&str; 2] = ["NetworkAttachmentDefinition", "network-attachment-definitions"];
/// The AttachmentParameters' kind and resource name, both accepted as `kind`.
pub const PARAMETERS_KINDS: [&str; 2] = [PARAMETERS_KIND, PARAMETERS_PLURAL];

/// ParamsReady reasons (plexus's own: the KEP leaves them to the implementation).
pub mod reasons {
    /// ParamsReady True.
    pub const PARAMETERS_VALID: &str = "ParametersValid";
    pub const PARAMETERS_NOT_FOUND: &str = "ParametersNotFound";
    pub const INVALID_PARAMETERS: &str = "InvalidParameters";
    pub const UNSUPPORTED_PARAMETERS: &str = "UnsupportedParameters";
}

/// The NetworkAttachmentDefinition a PodNetwork takes its CNI config from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NadRef {
    pub namespace: String,
    pub name: String,
}

impl NadRef {
    /// `namespace/name`, as messages and the NPWG network-status name it.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The error when the NAD does not exist (ParamsReady reason `ParametersNotFound`).
    pub fn not_found(&self) -> ParamsError {
        ParamsError::NotFound { kind: "NetworkAttachmentDefinition", reference: self.reference() }
    }

    /// Checks the NAD's `spec.config` the way a NAD selection reads it (spec 3.4.1 rule 1).
    /// A blank or absent config is valid here: the node then looks for a CNI config file named
    /// after the NAD (rules 2 and 3), which only the node can see.
    pub fn check_config(&self, spec_config: Option<&str>) -> Result<(), ParamsError> {
        match spec_config.filter(|c| !c.trim().is_empty()) {
            None => Ok(()),
            Some(config) => NetworkConfigList::parse(config, Some(&self.name))
                .map(drop)
                .map_err(|source| ParamsError::InvalidNadConfig { reference: self.reference(), source }),
        }
    }
}

/// The AttachmentParameters a PodNetworkAttachment uses; `namespace` is the attachment's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ParamsRef {
    pub namespace: String,
    pub name: String,
}

impl ParamsRef {
    /// `namespace/name`.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The error when the AttachmentParameters do not exist (`ParametersNotFound`).
    pub fn not_found(&self) -> ParamsError {
        ParamsError::NotFound { kind: PARAMETERS_KIND, reference: self.reference() }
    }
}

/// Why an object's parameters cannot be used. Each variant is one rule; [`ParamsError::reason`]
/// is its ParamsReady reason.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    #[error(
        "{object}: parametersRefs[{index}] is {kind:?} of group {group:?}; plexus takes {expected}; \
         remove the reference (a PodNetwork of another provider is left to that provider)"
    )]
    UnsupportedKind { object: String, index: usize, group: String, kind: String, expected: &'static str },

    #[error(
        "{object}: parametersRefs holds {count} {what} references; plexus uses at most one; keep the one to use"
    )]
    TooManyRefs { object: String, count: usize, what: &'static str },

    #[error(
        "{object}: the \"{DEFAULT_POD_NETWORK}\" PodNetwork is the cluster default network, configured by the \
         runtime's CNI config; it takes no parametersRefs: remove them"
    )]
    DefaultTakesNoParameters { object: String },

    #[error(
        "{object}: parametersRefs[{index}] names the NetworkAttachmentDefinition {name:?} without a namespace; a \
         PodNetwork is cluster-scoped, so the reference must give the NAD's namespace"
    )]
    MissingNamespace { object: String, index: usize, name: String },

    #[error("{object}: parametersRefs[{index}]: the name {name:?} is not a valid object name (DNS-1123 subdomain); fix it")]
    InvalidRefName { object: String, index: usize, name: String },

    #[error(
        "{object}: parametersRefs[{index}]: the namespace {namespace:?} is not a valid namespace name (DNS-1123 \
         label); fix it"
    )]
    InvalidRefNamespace { object: String, index: usize, namespace: String },

    #[error(
        "{object}: parametersRefs[{index}] points at AttachmentParameters in the namespace {namespace:?}; a \
         PodNetworkAttachment may only use parameters of its own namespace {own:?}: omit the namespace or \
         create the parameters there"
    )]
    ForeignNamespace { object: String, index: usize, namespace: String, own: String },

    #[error("AttachmentParameters {reference}: spec is {found}; it must be an object with the keys {}", ATTACHMENT_KEYS.join(", "))]
    SpecNotAnObject { reference: String, found: &'static str },

    #[error("AttachmentParameters {reference}: spec.{key} is not allowed here: {why}; remove it")]
    ForbiddenKey { reference: String, key: String, why: &'static str },

    #[error(
        "AttachmentParameters {reference}: spec.{key} is unknown; the keys are {}; remove it or fix its spelling",
        ATTACHMENT_KEYS.join(", ")
    )]
    UnknownKey { reference: String, key: String },

    #[error("AttachmentParameters {reference}: spec: {source}")]
    InvalidKey {
        reference: String,
        #[source]
        source: InvalidField,
    },

    #[error("{kind} {reference} does not exist; create it or fix the reference")]
    NotFound { kind: &'static str, reference: String },

    #[error("NetworkAttachmentDefinition {reference}: spec.config is not a valid CNI config: {source}")]
    InvalidNadConfig {
        reference: String,
        #[source]
        source: ConfigError,
    },
}

impl ParamsError {
    /// The ParamsReady reason the controller reports for this error.
    pub fn reason(&self) -> &'static str {
        use ParamsError::*;
        match self {
            UnsupportedKind { .. } | TooManyRefs { .. } | DefaultTakesNoParameters { .. } => {
                reasons::UNSUPPORTED_PARAMETERS
            }
            MissingNamespace { .. }
            | InvalidRefName { .. }
            | InvalidRefNamespace { .. }
            | ForeignNamespace { .. }
            | SpecNotAnObject { .. }
            | ForbiddenKey { .. }
            | UnknownKey { .. }
            | InvalidKey { .. }
            | InvalidNadConfig { .. } => reasons::INVALID_PARAMETERS,
            NotFound { .. } => reasons::PARAMETERS_NOT_FOUND,
        }
    }
}

/// Parameters that cannot be used are a config the user must fix.
impl CniCode for ParamsError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// The NetworkAttachmentDefinition whose config a PodNetwork plexus serves uses, or `None`:
/// the on-disk config named after the PodNetwork (or, for `default`, the cluster default
/// network).
pub fn pod_network_config(pn: &PodNetwork) -> Result<Option<NadRef>, ParamsError> {
    let object = format!("PodNetwork {:?}", pn.name());
    let refs = &pn.spec.parameters_refs;
    if refs.is_empty() {
        return Ok(None);
    }
    if pn.name() == DEFAULT_POD_NETWORK {
        return Err(ParamsError::DefaultTakesNoParameters { object });
    }
    check_kinds(
        &object,
        refs,
        NAD_GROUP,
        &NAD_KINDS,
        "one NetworkAttachmentDefinition (group k8s.cni.cncf.io)",
    )?;
    if refs.len() > 1 {
        return Err(ParamsError::TooManyRefs {
            object,
            count: refs.len(),
            what: "NetworkAttachmentDefinition",
        });
    }
    let r = &refs[0];
    check_ref_name(&object, 0, &r.name)?;
    let namespace = match r.namespace.as_deref() {
        None | Some("") => {
            return Err(ParamsError::MissingNamespace { object, index: 0, name: r.name.clone() })
        }
        Some(ns) => ns,
    };
    check_ref_namespace(&object, 0, namespace)?;
    Ok(Some(NadRef { namespace: namespace.to_owned(), name: r.name.clone() }))
}

/// The AttachmentParameters a PodNetworkAttachment uses, or `None`.
pub fn attachment_parameters_ref(pna: &PodNetworkAttachment) -> Result<Option<ParamsRef>, ParamsError> {
    let object = format!("PodNetworkAttachment {}/{}", pna.namespace(), pna.name());
    let refs = &pna.spec.parameters_refs;
    if refs.is_empty() {
        return Ok(None);
    }
    check_kinds(&object, refs, GROUP, &PARAMETERS_KINDS, "one AttachmentParameters (group plexus.dev)")?;
    if refs.len() > 1 {
        return Err(ParamsError::TooManyRefs { object, count: refs.len(), what: "AttachmentParameters" });
    }
    let r = &refs[0];
    check_ref_name(&object, 0, &r.name)?;
    let own = pna.namespace();
    match r.namespace.as_deref() {
        None | Some("") => {}
        Some(ns) if ns == own => {}
        Some(ns) => {
            return Err(ParamsError::ForeignNamespace {
                object,
                index: 0,
                namespace: ns.to_owned(),
                own: own.to_owned(),
            })
        }
    }
    Ok(Some(ParamsRef { namespace: own.to_owned(), name: r.name.clone() }))
}

/// Every reference is of the one kind the object takes; the first that is not is reported.
fn check_kinds(
    object: &str,
    refs: &[ParametersRef],
    group: &str,
    kinds: &[&str],
    expected: &'static str,
) -> Result<(), ParamsError> {
    match refs.iter().position(|r| r.group != group || !kinds.contains(&r.kind.as_str())) {
        Some(index) => Err(ParamsError::UnsupportedKind {
            object: object.to_owned(),
            index,
            group: refs[index].group.clone(),
            kind: refs[index].kind.clone(),
            expected,
        }),
        None => Ok(()),
    }
}

fn check_ref_name(object: &str, index: usize, name: &str) -> Result<(), ParamsError> {
    if is_nad_name(name) {
        Ok(())
    } else {
        Err(ParamsError::InvalidRefName { object: object.to_owned(), index, name: name.to_owned() })
    }
}

fn check_ref_namespace(object: &str, index: usize, namespace: &str) -> Result<(), ParamsError> {
    if is_namespace(namespace) {
        Ok(())
    } else {
        Err(ParamsError::InvalidRefNamespace {
            object: object.to_owned(),
            index,
            namespace: namespace.to_owned(),
        })
    }
}

/// The selection one attachment makes: the NAD (or the on-disk config the caller names as
/// one), the interface the pod asked for, and the AttachmentParameters' keys, validated as an
/// NPWG annotation element's keys are. Keys the annotation has but that say which network,
/// where, or the pod's default route are refused (they come from the PodNetwork and the pod's
/// list), and so are unknown keys: the object is plexus's own, a misspelt key is a mistake.
pub fn selection_from_parameters(
    nad: &NadRef,
    params: Option<&AttachmentParameters>,
    interface: Option<&str>,
) -> Result<NetworkSelection, ParamsError> {
    let mut sel = NetworkSelection {
        name: nad.name.clone(),
        namespace: Some(nad.namespace.clone()),
        interface: interface.map(str::to_owned),
        ..Default::default()
    };
    let Some(params) = params else { return Ok(sel) };
    let reference = format!(
        "{}/{}",
        params.metadata.namespace.as_deref().unwrap_or_default(),
        params.metadata.name.as_deref().unwrap_or_default()
    );
    let spec = match &params.spec {
        Value::Null => return Ok(sel),
        Value::Object(spec) => spec,
        other => return Err(ParamsError::SpecNotAnObject { reference, found: json_type(other) }),
    };
    for (key, value) in spec {
        if let Some(why) = forbidden_key(key) {
            return Err(ParamsError::ForbiddenKey { reference, key: key.clone(), why });
        }
        match read_attachment_key(&mut sel, key, value) {
            Ok(true) => {}
            Ok(false) => return Err(ParamsError::UnknownKey { reference, key: key.clone() }),
            Err(source) => return Err(ParamsError::InvalidKey { reference, source }),
        }
    }
    Ok(sel)
}

/// The selection element's keys that AttachmentParameters may not hold, and where the value
/// comes from instead.
fn forbidden_key(key: &str) -> Option<&'static str> {
    match key {
        "name" | "namespace" => Some("the network is the PodNetwork's NetworkAttachmentDefinition"),
        "interface" => Some("the pod's entry names the interface (\"interfaceName\")"),
        "default-route" => Some("the pod's entry moves the default route (\"isDefaultGW\")"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::selection::{Bandwidth, PortMapping, Protocol};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn pod_network(name: &str, refs: Value) -> PodNetwork {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"parametersRefs": refs}})).unwrap()
    }

    fn attachment(namespace: &str, refs: Value) -> PodNetworkAttachment {
        serde_json::from_value(json!({
            "metadata": {"name": "fast", "namespace": namespace},
            "spec": {"podNetworkName": "blue", "parametersRefs": refs}
        }))
        .unwrap()
    }

    fn params(spec: Value) -> AttachmentParameters {
        AttachmentParameters {
            metadata: ObjectMeta {
                name: Some("fast-params".into()),
                namespace: Some("tenant".into()),
                ..Default::default()
            },
            spec,
        }
    }

    fn nad() -> NadRef {
        NadRef { namespace: "infra".into(), name: "blue-conf".into() }
    }

    /// The error, checked to be a config error (code 7) with the reason given.
    fn failed<T: std::fmt::Debug>(r: Result<T, ParamsError>, reason: &str) -> ParamsError {
        let err = r.unwrap_err();
        assert_eq!(err.reason(), reason, "{err}");
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        err
    }

    #[test]
    fn a_pod_network_without_parameters_uses_the_config_named_after_it() {
        assert_eq!(pod_network_config(&pod_network("blue", json!([]))).unwrap(), None);
        assert_eq!(pod_network_config(&pod_network(DEFAULT_POD_NETWORK, json!([]))).unwrap(), None);
    }

    #[test]
    fn a_pod_network_takes_one_nad_in_either_spelling() {
        for kind in NAD_KINDS {
            let pn = pod_network(
                "blue",
                json!([{"group": "k8s.cni.cncf.io", "kind": kind, "name": "blue-conf", "namespace": "infra"}]),
            );
            assert_eq!(pod_network_config(&pn).unwrap(), Some(nad()), "{kind}");
        }
    }

    #[test]
    fn a_pod_network_refuses_other_kinds_as_unsupported() {
        let cases = [
            json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "p", "namespace": "infra"}]),
            json!([{"group": "k8s.cni.cncf.io", "kind": "networkattachmentdefinition", "name": "p", "namespace": "infra"}]),
            json!([{"group": "", "kind": "NetworkAttachmentDefinition", "name": "p", "namespace": "infra"}]),
            json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "p", "namespace": "infra"},
                   {"group": "example.com", "kind": "Widget", "name": "w"}]),
        ];
        for refs in cases {
            let err = failed(
                pod_network_config(&pod_network("blue", refs.clone())),
                reasons::UNSUPPORTED_PARAMETERS,
            );
            assert!(matches!(err, ParamsError::UnsupportedKind { .. }), "{refs}: {err:?}");
            let msg = err.to_string();
            assert!(msg.starts_with("PodNetwork \"blue\": parametersRefs["), "{msg}");
            assert!(
                msg.contains("plexus takes one NetworkAttachmentDefinition (group k8s.cni.cncf.io)"),
                "{msg}"
            );
        }
        let err = pod_network_config(&pod_network(
            "blue",
            json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "p", "namespace": "i"},
                   {"group": "example.com", "kind": "Widget", "name": "w"}]),
        ))
        .unwrap_err();
        assert!(
            matches!(&err, ParamsError::UnsupportedKind { index: 1, kind, .. } if kind == "Widget"),
            "{err:?}"
        );
    }

    #[test]
    fn a_pod_network_takes_at_most_one_nad() {
        let two = json!([
            {"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "a", "namespace": "infra"},
            {"group": "k8s.cni.cncf.io", "kind": "network-attachment-definitions", "name": "b", "namespace": "infra"}
        ]);
        let err = failed(pod_network_config(&pod_network("blue", two)), reasons::UNSUPPORTED_PARAMETERS);
        assert!(matches!(err, ParamsError::TooManyRefs { count: 2, .. }), "{err:?}");
        assert!(err.to_string().contains("uses at most one; keep the one to use"), "{err}");
    }

    #[test]
    fn the_nad_reference_needs_a_valid_namespace_and_name() {
        for ns in [json!(null), json!("")] {
            let refs = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "blue-conf", "namespace": ns}]);
            let err = failed(pod_network_config(&pod_network("blue", refs)), reasons::INVALID_PARAMETERS);
            assert!(matches!(err, ParamsError::MissingNamespace { .. }), "{err:?}");
            assert!(err.to_string().contains("a PodNetwork is cluster-scoped"), "{err}");
        }
        let refs =
            json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "blue-conf"}]);
        assert!(matches!(
            pod_network_config(&pod_network("blue", refs)),
            Err(ParamsError::MissingNamespace { .. })
        ));

        let refs = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "Blue_Conf", "namespace": "infra"}]);
        let err = failed(pod_network_config(&pod_network("blue", refs)), reasons::INVALID_PARAMETERS);
        assert!(matches!(err, ParamsError::InvalidRefName { .. }), "{err:?}");
        let refs = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "", "namespace": "infra"}]);
        assert!(matches!(
            pod_network_config(&pod_network("blue", refs)),
            Err(ParamsError::InvalidRefName { .. })
        ));

        let refs = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "c", "namespace": "in.fra"}]);
        let err = failed(pod_network_config(&pod_network("blue", refs)), reasons::INVALID_PARAMETERS);
        assert!(matches!(err, ParamsError::InvalidRefNamespace { .. }), "{err:?}");
        assert!(err.to_string().contains("DNS-1123 label"), "{err}");
    }

    #[test]
    fn the_default_pod_network_takes_no_parameters() {
        let refs = json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "c", "namespace": "infra"}]);
        let err = failed(
            pod_network_config(&pod_network(DEFAULT_POD_NETWORK, refs)),
            reasons::UNSUPPORTED_PARAMETERS,
        );
        assert!(matches!(err, ParamsError::DefaultTakesNoParameters { .. }), "{err:?}");
        assert!(err.to_string().contains("cluster default network"), "{err}");
    }

    #[test]
    fn an_attachment_takes_one_attachment_parameters_of_its_namespace() {
        assert_eq!(attachment_parameters_ref(&attachment("tenant", json!([]))).unwrap(), None);
        let want = ParamsRef { namespace: "tenant".into(), name: "fast-params".into() };
        for kind in PARAMETERS_KINDS {
            for ns in [json!(null), json!(""), json!("tenant")] {
                let refs =
                    json!([{"group": "plexus.dev", "kind": kind, "name": "fast-params", "namespace": ns}]);
                assert_eq!(
                    attachment_parameters_ref(&attachment("tenant", refs)).unwrap(),
                    Some(want.clone())
                );
            }
        }
    }

    #[test]
    fn an_attachment_refuses_another_namespaces_parameters() {
        let refs = json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "p", "namespace": "other"}]);
        let err = failed(attachment_parameters_ref(&attachment("tenant", refs)), reasons::INVALID_PARAMETERS);
        assert!(
            matches!(&err, ParamsError::ForeignNamespace { namespace, own, .. } if namespace == "other" && own == "tenant")
        );
        let msg = err.to_string();
        assert!(msg.starts_with("PodNetworkAttachment tenant/fast: "), "{msg}");
        assert!(msg.contains("omit the namespace or create the parameters there"), "{msg}");
    }

    #[test]
    fn an_attachment_refuses_other_kinds_and_more_than_one() {
        for refs in [
            json!([{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "c", "namespace": "tenant"}]),
            json!([{"group": "example.com", "kind": "AttachmentParameters", "name": "p"}]),
            json!([{"group": "plexus.dev", "kind": "attachmentParameters", "name": "p"}]),
        ] {
            let err = failed(
                attachment_parameters_ref(&attachment("tenant", refs)),
                reasons::UNSUPPORTED_PARAMETERS,
            );
            assert!(matches!(err, ParamsError::UnsupportedKind { .. }), "{err:?}");
            assert!(err.to_string().contains("one AttachmentParameters (group plexus.dev)"), "{err}");
        }
        let two = json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "a"},
                         {"group": "plexus.dev", "kind": "attachmentparameters", "name": "b"}]);
        let err =
            failed(attachment_parameters_ref(&attachment("tenant", two)), reasons::UNSUPPORTED_PARAMETERS);
        assert!(
            matches!(err, ParamsError::TooManyRefs { count: 2, what: "AttachmentParameters", .. }),
            "{err:?}"
        );
        let bad_name = json!([{"group": "plexus.dev", "kind": "AttachmentParameters", "name": "A"}]);
        let err =
            failed(attachment_parameters_ref(&attachment("tenant", bad_name)), reasons::INVALID_PARAMETERS);
        assert!(matches!(err, ParamsError::InvalidRefName { .. }), "{err:?}");
    }

    #[test]
    fn without_parameters_the_selection_is_the_nad_and_the_interface() {
        let sel = selection_from_parameters(&nad(), None, Some("net1")).unwrap();
        assert_eq!(
            sel,
            NetworkSelection {
                name: "blue-conf".into(),
                namespace: Some("infra".into()),
                interface: Some("net1".into()),
                ..Default::default()
            }
        );
        assert_eq!(sel.namespace_or("tenant"), "infra");
        let sel = selection_from_parameters(&nad(), Some(&params(json!(null))), None).unwrap();
        assert_eq!(
            sel,
            NetworkSelection {
                name: "blue-conf".into(),
                namespace: Some("infra".into()),
                ..Default::default()
            }
        );
        assert_eq!(selection_from_parameters(&nad(), Some(&params(json!({}))), None).unwrap(), sel);
    }

    #[test]
    fn every_parameter_key_becomes_the_selections() {
        let p = params(json!({
            "ips": ["10.2.2.42/24", "2001:db8::5"],
            "mac": "02:23:45:67:89:01",
            "cni-args": {"spoofchk": "on"},
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "UDP"}],
            "bandwidth": {"ingressRate": 2048, "egressRate": 8000, "egressBurst": 200}
        }));
        let sel = selection_from_parameters(&nad(), Some(&p), Some("net2")).unwrap();
        assert_eq!(sel.ips.as_deref(), Some(&["10.2.2.42/24".to_owned(), "2001:db8::5".to_owned()][..]));
        assert_eq!(sel.mac.as_deref(), Some("02:23:45:67:89:01"));
        assert_eq!(sel.cni_args.as_ref().map(|a| a["spoofchk"].clone()), Some(json!("on")));
        assert_eq!(
            sel.port_mappings,
            Some(vec![PortMapping {
                host_port: 8080,
                container_port: 80,
                protocol: Protocol::Udp,
                host_ip: None
            }])
        );
        assert_eq!(
            sel.bandwidth,
            Some(Bandwidth {
                ingress_rate: Some(2048),
                ingress_burst: None,
                egress_rate: Some(8000),
                egress_burst: Some(200)
            })
        );
        assert_eq!((sel.interface.as_deref(), sel.default_route.as_ref()), (Some("net2"), None));
    }

    /// The same values make the same selection from the annotation and from the parameters.
    #[test]
    fn parameters_read_as_the_annotation_reads_them() {
        let keys = json!({"ips": ["10.0.0.9"], "mac": "02:00:00:00:00:09", "cni-args": {"a": 1},
                          "portMappings": [{"hostPort": 1, "containerPort": 2, "hostIP": "10.0.0.1"}],
                          "bandwidth": {"ingressRate": 1, "ingressBurst": 2}});
        let mut element = keys.clone();
        element["name"] = json!("blue-conf");
        element["namespace"] = json!("infra");
        element["interface"] = json!("net3");
        let from_annotation = crate::spec::selection::parse_selection(&json!([element]).to_string()).unwrap();
        let from_params = selection_from_parameters(&nad(), Some(&params(keys)), Some("net3")).unwrap();
        assert_eq!(vec![from_params], from_annotation);
    }

    #[test]
    fn invalid_values_are_refused_with_the_annotations_reasons() {
        let cases = [
            (json!({"ips": []}), "at least one address"),
            (json!({"ips": ["10.0.0.300"]}), "not an IPv4 or IPv6"),
            (json!({"ips": "10.0.0.1"}), "list of strings"),
            (json!({"mac": "02:23:45:67:89"}), "6-byte Ethernet or 20-byte"),
            (json!({"mac": 5}), "\"mac\" must be a string"),
            (json!({"cni-args": [1]}), "\"cni-args\" must be an object"),
            (json!({"portMappings": []}), "at least one mapping"),
            (json!({"portMappings": [{"hostPort": 0, "containerPort": 80}]}), "from 1 to 65535"),
            (
                json!({"portMappings": [{"hostPort": 1, "containerPort": 1, "protocol": "icmp"}]}),
                "TCP, UDP or SCTP",
            ),
            (json!({"bandwidth": {}}), "at least one of"),
            (json!({"bandwidth": {"ingressRate": 0}}), "non-zero"),
            (json!({"bandwidth": {"egressBurst": 3}}), "without egressRate"),
            (json!({"bandwidth": {"rate": 1}}), "unknown"),
        ];
        for (spec, want) in cases {
            let err = failed(
                selection_from_parameters(&nad(), Some(&params(spec.clone())), None),
                reasons::INVALID_PARAMETERS,
            );
            assert!(matches!(err, ParamsError::InvalidKey { .. }), "{spec}: {err:?}");
            let msg = err.to_string();
            assert!(msg.starts_with("AttachmentParameters tenant/fast-params: spec: "), "{msg}");
            assert!(msg.contains(want), "{spec}: got {msg:?}, want {want:?}");
        }
    }

    #[test]
    fn keys_that_choose_the_network_or_the_route_are_forbidden() {
        for (key, fix) in [
            ("name", "NetworkAttachmentDefinition"),
            ("namespace", "NetworkAttachmentDefinition"),
            ("interface", "interfaceName"),
            ("default-route", "isDefaultGW"),
        ] {
            let spec = json!({ key: "x" });
            let err = failed(
                selection_from_parameters(&nad(), Some(&params(spec)), None),
                reasons::INVALID_PARAMETERS,
            );
            assert!(matches!(&err, ParamsError::ForbiddenKey { key: k, .. } if k == key), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(&format!("spec.{key} is not allowed here")) && msg.contains(fix), "{msg}");
        }
    }

    #[test]
    fn unknown_keys_and_wrong_spec_types_are_refused() {
        for key in ["bandwith", "org.example.custom", "IPs"] {
            let err = failed(
                selection_from_parameters(&nad(), Some(&params(json!({ key: 1 }))), None),
                reasons::INVALID_PARAMETERS,
            );
            assert!(matches!(&err, ParamsError::UnknownKey { key: k, .. } if k == key), "{err:?}");
            assert!(err.to_string().contains("ips, mac, cni-args, portMappings, bandwidth"), "{err}");
        }
        for (spec, found) in [(json!([]), "a list"), (json!("ips"), "a string"), (json!(3), "a number")] {
            let err = failed(
                selection_from_parameters(&nad(), Some(&params(spec)), None),
                reasons::INVALID_PARAMETERS,
            );
            assert!(matches!(err, ParamsError::SpecNotAnObject { found: f, .. } if f == found), "{err:?}");
        }
    }

    #[test]
    fn not_found_and_invalid_nad_config_have_their_reasons() {
        let err = failed::<()>(Err(nad().not_found()), reasons::PARAMETERS_NOT_FOUND);
        assert_eq!(
            err.to_string(),
            "NetworkAttachmentDefinition infra/blue-conf does not exist; create it or fix the reference"
        );
        let p = ParamsRef { namespace: "tenant".into(), name: "fast-params".into() };
        let err = failed::<()>(Err(p.not_found()), reasons::PARAMETERS_NOT_FOUND);
        assert!(
            err.to_string().starts_with("AttachmentParameters tenant/fast-params does not exist"),
            "{err}"
        );

        assert!(nad().check_config(None).is_ok());
        assert!(nad().check_config(Some("  ")).is_ok(), "blank: the node's on-disk config");
        assert!(nad().check_config(Some(r#"{"cniVersion":"1.0.0","type":"bridge"}"#)).is_ok());
        assert!(nad().check_config(Some(r#"{"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]}"#)).is_ok());
        for bad in
            [r#"{"cniVersion":"1.0.0""#, r#"{"type":"bridge"}"#, r#"{"cniVersion":"1.0.0","plugins":[]}"#]
        {
            let err = failed(nad().check_config(Some(bad)), reasons::INVALID_PARAMETERS);
            assert!(matches!(err, ParamsError::InvalidNadConfig { .. }), "{bad}: {err:?}");
            assert!(
                err.to_string().starts_with("NetworkAttachmentDefinition infra/blue-conf: spec.config"),
                "{err}"
            );
            assert!(std::error::Error::source(&err).is_some(), "the config error is kept");
        }
    }
}
