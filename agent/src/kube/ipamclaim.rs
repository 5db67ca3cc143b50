//! IPAMClaims (NPWG spec section 8, `k8s.cni.cncf.io/v1alpha1`), read one at a time when a
//! pod's selection references one (and periodically for those this node holds addresses of),
//! and their `status.ips` written through the status subresource.

use std::time::Duration;

use ::kube::api::{Api, Patch, PatchParams};
use ::kube::core::NamespaceResourceScope;
use ::kube::Client;
use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::resource::custom_resource;
use super::KubeError;
use crate::ipam::claim::source::{ClaimObject, ClaimSource, ClaimSourceError};

pub const GROUP: &str = "k8s.cni.cncf.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "IPAMClaim";
pub const PLURAL: &str = "ipamclaims";
/// The status subresource, as RBAC names it.
pub const STATUS: &str = "ipamclaims/status";

/// The object (spec 8.2).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct IpamClaim {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: IpamClaimSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<IpamClaimStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamClaimSpec {
    #[serde(default)]
    pub network: String,
    #[serde(default)]
    pub interface: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamClaimStatus {
    #[serde(default)]
    pub ips: Vec<String>,
}

custom_resource!(
    IpamClaim,
    group = GROUP,
    version = VERSION,
    kind = KIND,
    plural = PLURAL,
    scope = NamespaceResourceScope,
    status = status
);

impl IpamClaim {
    fn into_claim(self, namespace: &str, name: &str) -> ClaimObject {
        ClaimObject {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: self.metadata.uid.unwrap_or_default(),
            network: self.spec.network,
            interface: self.spec.interface,
            ips: self.status.map(|s| s.ips).unwrap_or_default(),
        }
    }
}

/// The claims of the cluster, through the agent's client.
#[derive(Clone)]
pub struct KubeIpamClaims {
    client: Client,
    /// Time limit of one request.
    timeout: Duration,
}

impl KubeIpamClaims {
    pub fn new(client: Client, timeout: Duration) -> Self {
        KubeIpamClaims { client, timeout }
    }

    async fn within<T>(
        &self,
        what: String,
        request: impl std::future::Future<Output = Result<T, ::kube::Error>>,
    ) -> Result<T, ClaimSourceError> {
        let error = match tokio::time::timeout(self.timeout, request).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => KubeError::Api(e),
            Err(_) => KubeError::Timeout(self.timeout),
        };
        Err(ClaimSourceError { what, source: Box::new(error) })
    }
}

impl ClaimSource for KubeIpamClaims {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<ClaimObject>, ClaimSourceError>> {
        async move {
            let api: Api<IpamClaim> = Api::namespaced(self.client.clone(), namespace);
            let found =
                self.within(format!("reading IPAMClaim {namespace}/{name}"), api.get_opt(name)).await?;
            Ok(found.map(|c| c.into_claim(namespace, name)))
        }
        .boxed()
    }

    fn record_ips<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        ips: &'a [String],
    ) -> BoxFuture<'a, Result<(), ClaimSourceError>> {
        async move {
            let api: Api<IpamClaim> = Api::namespaced(self.client.clone(), namespace);
            let patch = Patch::Merge(json!({"status": {"ips": ips}}));
            let what = format!("writing status.ips of IPAMClaim {namespace}/{name}");
            self.within(what, api.patch_status(name, &PatchParams::default(), &patch)).await.map(drop)
        }
        .boxed()
    }
}
