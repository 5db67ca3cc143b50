//! `kube::Resource` for the custom resources plexus reads, written by hand rather than
//! derived (plexus needs no generated schema: the CRDs in `deploy/` are the schemas), and their
//! `Serialize`, which writes `apiVersion` and `kind` first: the API server refuses an object
//! written whole (a create, an update) that does not say what it is ("Object 'Kind' is
//! missing"), as k8s-openapi's own types know.

/// Implements `kube::Resource` and `Serialize` for a type with `metadata` and `spec` fields
/// (and, with `status = status`, an `Option` status written when there is one).
macro_rules! custom_resource {
    ($ty:ty, group = $group:expr, version = $version:expr, kind = $kind:expr, plural = $plural:expr, scope = $scope:ty $(, status = $status:ident)?) => {
        impl ::kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> ::std::result::Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeStruct;
                let mut object = serializer.serialize_struct($kind, 5)?;
                object.serialize_field("apiVersion", &::std::format!("{}/{}", $group, $version))?;
                object.serialize_field("kind", $kind)?;
                object.serialize_field("metadata", &self.metadata)?;
                object.serialize_field("spec", &self.spec)?;
                $(match &self.$status {
                    Some(status) => object.serialize_field("status", status)?,
                    None => object.skip_field("status")?,
                })?
                object.end()
            }
        }
    };
}
pub(crate) use custom_resource;

use crate::podnetwork::model::{
    AttachmentParameters, PodNetwork, PodNetworkAttachment, ATTACHMENT_KIND, ATTACHMENT_PLURAL, GROUP,
    PARAMETERS_KIND, PARAMETERS_PLURAL, POD_NETWORK_KIND, POD_NETWORK_PLURAL, VERSION,
};
use ::kube::core::{ClusterResourceScope, NamespaceResourceScope};

custom_resource!(
    PodNetwork,
    group = GROUP,
    version = VERSION,
    kind = POD_NETWORK_KIND,
    plural = POD_NETWORK_PLURAL,
    scope = ClusterResourceScope,
    status = status
);
custom_resource!(
    PodNetworkAttachment,
    group = GROUP,
    version = VERSION,
    kind = ATTACHMENT_KIND,
    plural = ATTACHMENT_PLURAL,
    scope = NamespaceResourceScope,
    status = status
);
custom_resource!(
    AttachmentParameters,
    group = GROUP,
    version = VERSION,
    kind = PARAMETERS_KIND,
    plural = PARAMETERS_PLURAL,
    scope = NamespaceResourceScope
);
