//! The network attachment policy: which plugin types and which node interfaces the networks
//! of each namespace may use (docs/policy.md).
//!
//! A NetworkAttachmentDefinition is written by anyone who may create objects in its
//! namespace; without a policy, such a user can name the node's own NIC as a macvlan master,
//! put pods on the node's bridge, or take a host device. The policy is written by the
//! operator: a file (`--nad-policy`, [`file`]) or cluster-scoped `NetworkAttachmentPolicy`
//! objects of plexus's API group ([`crate::kube::policy`]). With none, everything is allowed.
//!
//! [`model`] is the format, [`evaluate`] the check (pure: a namespace, a network name and its
//! resolved CNI config in, a [`Refusal`] naming the rule out), [`interfaces`] reads which node
//! interfaces a plugin config uses. [`PolicyHandle`] is what the engine holds: the sources
//! replace what it holds, the engine checks against whatever it holds at that moment.

pub mod evaluate;
pub mod file;
pub mod host;
pub mod interfaces;
pub mod model;
pub mod pattern;

use std::sync::{Arc, RwLock};

use serde_json::Value;

pub use evaluate::{evaluate, Attachment, Reason, Refusal};
pub use interfaces::HostLookup;
pub use model::{Policy, PolicyError, PolicySource, PolicySpec};

use crate::cni::{CniCode, ErrorCode};

/// What the engine checks against.
#[derive(Debug, Clone)]
pub enum PolicyState {
    /// No policy is configured: everything is allowed, as without this feature.
    Unrestricted,
    /// A policy source is configured but has not been read yet (the API server's objects
    /// before the first list): attachments wait (try again later) rather than pass unchecked.
    Waiting {
        source: String,
    },
    Active(Arc<Policy>),
}

/// Why an attachment may not proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyCheckError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(
        "network {network} cannot be checked yet: the network attachment policy ({from}) has not been read; \
         retry in a moment"
    )]
    NotLoaded { network: String, from: String },
}

impl CniCode for PolicyCheckError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            PolicyCheckError::Refused(r) => r.cni_code(),
            PolicyCheckError::NotLoaded { .. } => ErrorCode::TryAgainLater,
        }
    }
}

/// The policy in force, shared by the engine and the source that keeps it current.
#[derive(Clone)]
pub struct PolicyHandle {
    state: Arc<RwLock<PolicyState>>,
    host: Arc<dyn HostLookup>,
}

impl std::fmt::Debug for PolicyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyHandle").field("state", &self.state()).finish_non_exhaustive()
    }
}

impl Default for PolicyHandle {
    fn default() -> Self {
        PolicyHandle::new(PolicyState::Unrestricted, Arc::new(host::Sysfs::default()))
    }
}

impl PolicyHandle {
    pub fn new(state: PolicyState, host: Arc<dyn HostLookup>) -> Self {
        PolicyHandle { state: Arc::new(RwLock::new(state)), host }
    }

    /// No policy: everything allowed.
    pub fn unrestricted() -> Self {
        PolicyHandle::default()
    }

    pub fn state(&self) -> PolicyState {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set(&self, state: PolicyState) {
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Whether the policy source has been read (always, without one).
    pub fn is_loaded(&self) -> bool {
        !matches!(self.state(), PolicyState::Waiting { .. })
    }

    /// Checks the resolved config of network `network` of namespace `namespace` (the
    /// NetworkAttachmentDefinition's namespace: the rule of whoever wrote the network applies).
    pub fn check(&self, namespace: &str, network: &str, config: &Value) -> Result<(), PolicyCheckError> {
        let policy = match self.state() {
            PolicyState::Unrestricted => return Ok(()),
            PolicyState::Waiting { source } => {
                return Err(PolicyCheckError::NotLoaded { network: network.to_owned(), from: source })
            }
            PolicyState::Active(p) => p,
        };
        let checked = evaluate(&policy, Attachment { namespace, network, config }, self.host.as_ref());
        // The refusal is logged with the request's failure, once.
        if checked.is_err() {
            crate::metrics::metrics().policy_refusal();
        }
        Ok(checked?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct NoPfs;
    impl HostLookup for NoPfs {
        fn sriov_pf(&self, _: &str) -> Option<String> {
            None
        }
    }

    #[test]
    fn unrestricted_allows_everything_waiting_asks_to_retry_active_checks() {
        let config = json!({"type": "macvlan", "master": "eth0"});
        let h = PolicyHandle::new(PolicyState::Unrestricted, Arc::new(NoPfs));
        h.check("a", "a/n", &config).unwrap();
        assert!(h.is_loaded());

        h.set(PolicyState::Waiting { source: "NetworkAttachmentPolicy objects".into() });
        let e = h.check("a", "a/n", &config).unwrap_err();
        assert_eq!(e.cni_code(), ErrorCode::TryAgainLater);
        assert!(e.to_string().contains("NetworkAttachmentPolicy objects"), "{e}");
        assert!(!h.is_loaded());

        let spec: PolicySpec =
            serde_yaml::from_str("rules: [{namespaces: [a], plugins: [macvlan]}]").unwrap();
        let policy = Policy::compile(&[PolicySource { name: "p".into(), spec }]).unwrap();
        // The handle is shared: a clone sees what the source sets.
        let engine_side = h.clone();
        h.set(PolicyState::Active(Arc::new(policy)));
        let e = engine_side.check("a", "a/n", &config).unwrap_err();
        assert_eq!(e.cni_code(), ErrorCode::InvalidNetworkConfig);
        assert!(e.to_string().contains("macvlanMasters"), "{e}");
        engine_side
            .check("a", "a/n", &json!({"type": "macvlan", "master": "eth0", "linkInContainer": true}))
            .unwrap();
    }
}
