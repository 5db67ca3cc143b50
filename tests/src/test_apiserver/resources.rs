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
    pub fn is_cluster_scoped(&self) -> bool {
        CLUSTER_SCOPED.contains(&self.plural)
    }

    /// Served from a CustomResourceDefinition (the rest are built into the API server).
    pub fn is_custom(&self) -> bool {
        !BUILT_IN.contains(&self.plural)
    }

    /// Has a `status` subresource: `/status` writes change only the status, writes of the
    /// object itself keep the stored status.
    pub fn has_status(&self) -> bool {
        WITH_STATUS.contains(&self.plural)
    }

    /// Keeps `metadata.generation` (1 on create, +1 on each change of what is not metadata or
    /// a subresource's status): custom resources and pods.
    pub fn tracks_generation(&self) -> bool {
        self.is_custom() || self.plural == PODS
    }

    /// A DELETE that removes the object answers it (pods); other resources answer a
    /// `Success` Status.
    pub fn returns_deleted_object(&self) -> bool {
        self.plural == PODS
    }

    /// An update (PUT) must carry a resourceVersion: custom resources (built-in ones allow
    /// unconditional updates).
    pub fn requires_resource_version_on_update(&self) -> bool {
        self.is_custom()
    }

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
/// NPWG IPAMClaims (k8s.cni.cncf.io/v1alpha1, namespaced, with a status subresource).
pub const IPAM_CLAIMS: &str = "ipamclaims";
/// coordination.k8s.io/v1 Leases (namespaced), for leader election.
pub const LEASES: &str = "leases";
/// DRA's resource.k8s.io/v1 ResourceClaims (namespaced).
pub const RESOURCE_CLAIMS: &str = "resourceclaims";
/// DRA's resource.k8s.io/v1 ResourceSlices (cluster-scoped).
pub const RESOURCE_SLICES: &str = "resourceslices";

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
    ResourceDef { group: "resource.k8s.io", version: "v1", plural: RESOURCE_CLAIMS, kind: "ResourceClaim" },
    ResourceDef { group: "resource.k8s.io", version: "v1", plural: RESOURCE_SLICES, kind: "ResourceSlice" },
    ResourceDef { group: "k8s.cni.cncf.io", version: "v1alpha1", plural: IPAM_CLAIMS, kind: "IPAMClaim" },
];

/// Resources whose objects have no namespace: their URLs have none, their objects are keyed by
/// name alone (namespace "").
pub const CLUSTER_SCOPED: &[&str] = &[POLICIES, POD_NETWORKS, RESOURCE_SLICES];

/// Resources built into the API server; every other one is a custom resource.
pub const BUILT_IN: &[&str] = &[PODS, EVENTS, LEASES, RESOURCE_CLAIMS, RESOURCE_SLICES];

/// Resources with a status subresource (as their CRDs in deploy/ declare, and pods).
pub const WITH_STATUS: &[&str] = &[PODS, POD_NETWORKS, POD_NETWORK_ATTACHMENTS, RESOURCE_CLAIMS, IPAM_CLAIMS];

/// The resource of a kind ("Pod" → "pods").
pub fn plural_of_kind(kind: &str) -> Option<&'static str> {
    RESOURCES.iter().find(|d| d.kind == kind).map(|d| d.plural)
}

/// A request path taken apart: `/api/v1/[namespaces/NS/]pods[/NAME[/status]]` or
/// `/apis/GROUP/VERSION/[namespaces/NS/]PLURAL[/NAME[/status]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub def: &'static ResourceDef,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The request is for the object's `status` subresource.
    pub status: bool,
}

impl Target {
    /// The resource as RBAC names it: `podnetworks`, or `podnetworks/status`.
    pub fn rbac_resource(&self) -> String {
        if self.status {
            format!("{}/status", self.def.plural)
        } else {
            self.def.plural.to_owned()
        }
    }
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
    let (plural, name, status) = match rest {
        [plural] => (*plural, None, false),
        [plural, name] => (*plural, Some((*name).to_owned()), false),
        [plural, name, "status"] => (*plural, Some((*name).to_owned()), true),
        _ => return None,
    };
    let def = RESOURCES.iter().find(|d| d.group == group && d.version == version && d.plural == plural)?;
    if status && !def.has_status() {
        return None;
    }
    // A cluster-wide path with a name does not exist for namespaced resources, nor a path with
    // a namespace for cluster-scoped ones.
    if def.is_cluster_scoped() {
        if namespace.is_some() {
            return None;
        }
    } else if namespace.is_none() && name.is_some() {
        return None;
    }
    Some(Target { def, namespace, name, status })
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
        let t = parse_path("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c").unwrap();
        assert_eq!((t.def.plural, t.namespace.as_deref()), (RESOURCE_CLAIMS, Some("ns")));
        let t = parse_path("/apis/resource.k8s.io/v1/resourceslices").unwrap();
        assert_eq!((t.def.plural, t.namespace), (RESOURCE_SLICES, None));
        assert!(parse_path("/apis/resource.k8s.io/v1/namespaces/ns/resourceslices").is_none());
    }

    #[test]
    fn status_subresource_paths() {
        let t = parse_path("/apis/plexus.dev/v1alpha1/podnetworks/default/status").unwrap();
        assert!(t.status);
        assert_eq!((t.name.as_deref(), t.rbac_resource()), (Some("default"), "podnetworks/status".into()));
        let t = parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/podnetworkattachments/a/status").unwrap();
        assert!(t.status && t.def.plural == POD_NETWORK_ATTACHMENTS);
        assert!(parse_path("/api/v1/namespaces/ns/pods/p/status").unwrap().status);
        assert!(!parse_path("/api/v1/namespaces/ns/pods/p").unwrap().status);
        // No status subresource, or another subresource: not found.
        assert!(parse_path("/apis/plexus.dev/v1alpha1/namespaces/ns/attachmentparameters/p/status").is_none());
        assert!(parse_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l/status").is_none());
        assert!(parse_path("/api/v1/namespaces/ns/pods/p/log").is_none());
        assert!(
            parse_path("/apis/plexus.dev/v1alpha1/podnetworks/status").unwrap().name.as_deref()
                == Some("status")
        );
    }
}
