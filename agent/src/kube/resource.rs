//! `kube::Resource` for the custom resources plexus reads, written by hand rather than
//! derived (plexus needs no generated schema: the CRDs in `deploy/` are the schemas).

/// Implements `kube::Resource` for a type with a `metadata: ObjectMeta` field.
macro_rules! custom_resource {
    ($ty:ty, group = $group:expr, version = $version:expr, kind = $kind:expr, plural = $plural:expr, scope = $scope:ty) => {
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
    scope = ClusterResourceScope
);
custom_resource!(
    PodNetworkAttachment,
    group = GROUP,
    version = VERSION,
    kind = ATTACHMENT_KIND,
    plural = ATTACHMENT_PLURAL,
    scope = NamespaceResourceScope
);
custom_resource!(
    AttachmentParameters,
    group = GROUP,
    version = VERSION,
    kind = PARAMETERS_KIND,
    plural = PARAMETERS_PLURAL,
    scope = NamespaceResourceScope
);
