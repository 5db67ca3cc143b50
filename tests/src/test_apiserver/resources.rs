//! The resources the test API server serves, and how their URLs look.

/// One API resource.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const PODS: &str = "pods";
pub const NADS: &str = "network-attachment-definitions";
pub const EVENTS: &str = "events";
pub const POLICIES: &str = "networkattachmentpolicies";
/// KEP-3698 PodNetworks (plexus.dev/v1alpha1, cluster-scoped).
pub const POD_NETWORKS: &str = "podnetworks";
/// KEP-3698 PodNetworkAttachments (plexus.dev/v1alpha1, namespaced).
pub const POD_NETWORK_ATTACHMENTS: &str = "podnetworkattachments";
/// plexus's AttachmentParameters (plexus.dev/v1alpha1, namespaced).
pub const ATTACHMENT_PARAMETERS: &str = "attachmentparameters";
/// coordination.k8s.io/v1 Leases (namespaced), for leader election.
pub const LEASES: &str = "leases";

/// Every resource served; namespaced unless listed in [`CLUSTER_SCOPED`].
pub const RESOURCES: &[ResourceDef] = &[
    ResourceDef { group: "", version: "v1", plural: PODS, kind: "Pod" },
    ResourceDef {
        group: "k8s.cni.cncf.io",
        version: "v1",
        plural: NADS,
        kind: "NetworkAttachmentDefinition",
    },
    ResourceDef { group: "events.k8s.io", version: "v1", plural: EVENTS, kind: "Event" },
    ResourceDef {
        group: "plexus.dev",
        version: "v1alpha1",
        plural: POLICIES,
        kind: "NetworkAttachmentPolicy",
    },
    ResourceDef { group: "plexus.dev", version: "v1alpha1", plural: POD_NETWORKS, kind: "PodNetwork" },
    ResourceDef {
        group: "plexus.dev",
        version: "v1alpha1",
        plural: POD_NETWORK_ATTACHMENTS,
        kind: "PodNetworkAttachment",
    },
    ResourceDef {
        group: "plexus.dev",
        version: "v1alpha1",
        plural: ATTACHMENT_PARAMETERS,
        kind: "AttachmentParameters",
    },
    ResourceDef { group: "coordination.k8s.io", version: "v1", plural: LEASES, kind: "Lease" },
];

/// Resources whose objects have no namespace: their URLs have none, their objects are keyed by
/// name alone (namespace "").
pub const CLUSTER_SCOPED: &[&str] = &[POLICIES, POD_NETWORKS];

fn is_cluster_scoped(def: &ResourceDef) -> bool {
    CLUSTER_SCOPED.contains(&def.plural)
}

/// The resource of a kind ("Pod" → "pods").
pub fn plural_of_kind(kind: &str) -> Option<&'static str> {
    RESOURCES.iter().find(|d| d.kind == kind).map(|d| d.plural)
}

/// A request path taken apart: `/api/v1/[namespaces/NS/]pods[/NAME]` or
/// `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub def: &'static ResourceDef,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

pub fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        _ => (None, rest),
    };
    let (plural, name) = match rest {
        [plural] => (*plural, None),
        [plural, name] => (*plural, Some((*name).to_owned())),
        _ => return None,
    };
    let def = RESOURCES.iter().find(|d| d.group == group && d.version == version && d.plural == plural)?;
    // A cluster-wide path with a name does not exist for namespaced resources, nor a path with
    // a namespace for cluster-scoped ones.
    if is_cluster_scoped(def) {
        if namespace.is_some() {
            return None;
        }
    } else if namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target { def, namespace, name })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_core_and_group_resources() {
        let t = parse_path("/api/v1/pods").unwrap();
        assert_eq!((t.def.plural, t.namespace, t.name), (PODS, None, None));
        let t = parse_path("/api/v1/namespaces/ns/pods/p").unwrap();
        assert_eq!((t.namespace.as_deref(), t.name.as_deref()), (Some("ns"), Some("p")));
        let t = parse_path("/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions").unwrap();
        assert_eq!(t.def.plural, NADS);
        assert!(parse_path("/apis/events.k8s.io/v1/namespaces/ns/events").is_some());
        assert!(parse_path("/api/v1/secrets").is_none());
        assert!(parse_path("/apis/apps/v1/deployments").is_none());
        let t = parse_path("/apis/plexus.dev/v1alpha1/networkattachmentpolicies/p").unwrap();
        assert_eq!((t.def.plural, t.namespace, t.name.as_deref()), (POLICIES, None, Some("p")));
        assert!(parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/networkattachmentpolicies").is_none());
        let t = parse_path("/apis/plexus.dev/v1alpha1/podnetworks/default").unwrap();
        assert_eq!((t.def.plural, t.namespace, t.name.as_deref()), (POD_NETWORKS, None, Some("default")));
        assert!(parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/podnetworks").is_none());
        let t = parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/podnetworkattachments/a").unwrap();
        assert_eq!((t.def.plural, t.namespace.as_deref()), (POD_NETWORK_ATTACHMENTS, Some("ns")));
        let t = parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/attachmentparameters/p").unwrap();
        assert_eq!(t.def.plural, ATTACHMENT_PARAMETERS);
        let t = parse_path("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l").unwrap();
        assert_eq!((t.def.plural, t.def.kind), (LEASES, "Lease"));
        assert!(parse_path("/apis/coordination.k8s.io/v1/leases/l").is_none());
    }
}
