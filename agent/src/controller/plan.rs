//! What the controller writes, decided from its [`View`]: each PodNetwork's and
//! PodNetworkAttachment's conditions (only when they change), the InUse finalizer (held while
//! a pod not Succeeded/Failed or a PodNetworkAttachment references the object), and the
//! `default` PodNetwork. Pure: the executor in [`super::reconcile`] makes the calls.
//!
//! - A PodNetwork of another provider is left alone, and so are the PodNetworkAttachments of
//!   such a network.
//! - A PodNetworkAttachment's Ready follows its PodNetwork's Ready as decided in the same
//!   round, so a change reaches both in one pass.
//! - An object being deleted keeps the finalizer while in use; unused, the finalizer is
//!   removed and the deletion completes. A finalizer is never added to an object being
//!   deleted (the API server refuses it).
//! - The `default` PodNetwork, when the controller manages it, never holds the finalizer: the
//!   KEP wants it recreated at once when deleted, never left with a deletionTimestamp.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

use super::params_check;
use super::view::View;
use crate::podnetwork::conditions::{self, Desired, PodNetworkState};
use crate::podnetwork::model::{conditions::READY, PodNetwork, DEFAULT_POD_NETWORK, IN_USE_FINALIZER};

/// Which object an action writes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    PodNetwork { name: String },
    Attachment { namespace: String, name: String },
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::PodNetwork { name } => write!(f, "PodNetwork {name}"),
            Target::Attachment { namespace, name } => write!(f, "PodNetworkAttachment {namespace}/{name}"),
        }
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the `default` PodNetwork (the KEP's exact object).
    CreateDefault,
    /// Replace `status.conditions` (status subresource), if the object is still at
    /// `resource_version`.
    Conditions { target: Target, resource_version: Option<String>, conditions: Vec<Condition> },
    /// Replace `metadata.finalizers`, if the object is still at `resource_version`.
    Finalizers { target: Target, resource_version: Option<String>, finalizers: Vec<String> },
}

/// How the controller is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanConfig {
    /// Create and recreate the `default` PodNetwork (false: `--no-default-pod-network`, the
    /// operator manages it).
    pub manage_default: bool,
}

/// What references what: PodNetwork names, and (namespace, name) of PodNetworkAttachments.
#[derive(Debug, Default)]
struct InUse {
    networks: BTreeSet<String>,
    attachments: BTreeSet<(String, String)>,
}

fn in_use(view: &View) -> InUse {
    let mut used = InUse::default();
    for ((namespace, _), refs) in view.pods.iter() {
        used.networks.extend(refs.networks.iter().map(|n| n.to_string()));
        used.attachments.extend(refs.attachments.iter().map(|a| (namespace.clone(), a.to_string())));
    }
    used.networks.extend(view.attachments.values().map(|a| a.spec.pod_network_name.clone()));
    used
}

/// The finalizers an object should carry, or `None` when they are right as they are.
fn finalizers(meta: &ObjectMeta, used: bool, may_hold: bool) -> Option<Vec<String>> {
    let current = meta.finalizers.clone().unwrap_or_default();
    let holds = current.iter().any(|f| f == IN_USE_FINALIZER);
    let deleting = meta.deletion_timestamp.is_some();
    let want = may_hold && used && (holds || !deleting);
    match (holds, want) {
        (false, true) => Some(current.into_iter().chain([IN_USE_FINALIZER.to_owned()]).collect()),
        (true, false) => Some(current.into_iter().filter(|f| f != IN_USE_FINALIZER).collect()),
        _ => None,
    }
}

fn conditions_action(
    target: Target,
    meta: &ObjectMeta,
    previous: &[Condition],
    desired: &[Desired],
    now: &Time,
) -> Option<Action> {
    let merged = conditions::merge(previous, desired, meta.generation, now);
    (merged != previous).then(|| Action::Conditions {
        target,
        resource_version: meta.resource_version.clone(),
        conditions: merged,
    })
}

fn previous_conditions(status: Option<&crate::podnetwork::model::ConditionsStatus>) -> &[Condition] {
    status.map(|s| s.conditions.as_slice()).unwrap_or_default()
}

/// Every write that brings the cluster to what the view calls for.
pub fn plan(view: &View, config: PlanConfig, now: &Time) -> Vec<Action> {
    let used = in_use(view);
    let mut actions = Vec::new();
    if config.manage_default && view.pod_networks.get("", DEFAULT_POD_NETWORK).is_none() {
        actions.push(Action::CreateDefault);
    }
    // Each served PodNetwork's Ready as decided now, for its attachments.
    let mut readiness: BTreeMap<&str, PodNetworkState> = BTreeMap::new();
    for pn in view.pod_networks.values() {
        if !pn.served_by_plexus() {
            continue;
        }
        let name = pn.name();
        let target = Target::PodNetwork { name: name.to_owned() };
        let desired = conditions::pod_network(pn.spec.enabled, &params_check::pod_network(pn, view));
        readiness.insert(name, state_of(&desired));
        let previous = previous_conditions(pn.status.as_ref());
        actions.extend(conditions_action(target.clone(), &pn.metadata, previous, &desired, now));
        let managed_default = config.manage_default && name == DEFAULT_POD_NETWORK;
        if let Some(finalizers) = finalizers(&pn.metadata, used.networks.contains(name), !managed_default) {
            actions.push(Action::Finalizers {
                target,
                resource_version: pn.metadata.resource_version.clone(),
                finalizers,
            });
        }
    }
    let others: BTreeSet<&str> =
        view.pod_networks.values().filter(|pn| !pn.served_by_plexus()).map(PodNetwork::name).collect();
    for ((namespace, name), pna) in view.attachments.iter() {
        let network = pna.spec.pod_network_name.as_str();
        if others.contains(network) {
            continue;
        }
        let target = Target::Attachment { namespace: namespace.clone(), name: name.clone() };
        let state = readiness.get(network).cloned().unwrap_or(PodNetworkState::Missing);
        let desired = conditions::attachment(network, &state, &params_check::attachment(pna, view));
        let previous = previous_conditions(pna.status.as_ref());
        actions.extend(conditions_action(target.clone(), &pna.metadata, previous, &desired, now));
        let used = used.attachments.contains(&(namespace.clone(), name.clone()));
        if let Some(finalizers) = finalizers(&pna.metadata, used, true) {
            actions.push(Action::Finalizers {
                target,
                resource_version: pna.metadata.resource_version.clone(),
                finalizers,
            });
        }
    }
    actions
}

fn state_of(desired: &[Desired]) -> PodNetworkState {
    match desired.iter().find(|d| d.type_ == READY) {
        Some(d) if d.status => PodNetworkState::Ready,
        Some(d) => PodNetworkState::NotReady { reason: d.reason.to_owned(), message: d.message.clone() },
        None => PodNetworkState::NotReady { reason: String::new(), message: String::new() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::view::PodRefs;
    use crate::podnetwork::model::{
        conditions::{ADMINISTRATIVELY_DISABLED, POD_NETWORK_NOT_READY},
        PodNetworkAttachment, PodNetworkAttachmentSpec, PodNetworkSpec,
    };

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap())
    }

    fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(Into::into),
            resource_version: Some("7".into()),
            generation: Some(2),
            ..ObjectMeta::default()
        }
    }

    fn network(name: &str, enabled: bool, provider: Option<&str>) -> PodNetwork {
        PodNetwork {
            metadata: meta(None, name),
            spec: PodNetworkSpec { enabled, parameters_refs: Vec::new(), provider: provider.map(Into::into) },
            status: None,
        }
    }

    fn pna(namespace: &str, name: &str, network: &str) -> PodNetworkAttachment {
        PodNetworkAttachment {
            metadata: meta(Some(namespace), name),
            spec: PodNetworkAttachmentSpec { pod_network_name: network.into(), parameters_refs: Vec::new() },
            status: None,
        }
    }

    fn refs(networks: &[&str], attachments: &[&str]) -> PodRefs {
        PodRefs {
            networks: networks.iter().map(|n| Box::from(*n)).collect(),
            attachments: attachments.iter().map(|n| Box::from(*n)).collect(),
        }
    }

    const MANAGED: PlanConfig = PlanConfig { manage_default: true };
    const UNMANAGED: PlanConfig = PlanConfig { manage_default: false };

    /// The view after the writes of `actions` (conditions and finalizers applied).
    fn written(view: &mut View, actions: &[Action]) {
        for a in actions {
            match a {
                Action::CreateDefault => view.pod_networks.insert(
                    "",
                    DEFAULT_POD_NETWORK,
                    network(DEFAULT_POD_NETWORK, true, None),
                ),
                Action::Conditions { target: Target::PodNetwork { name }, conditions, .. } => {
                    let mut pn = view.pod_networks.get("", name).unwrap().clone();
                    pn.status =
                        Some(crate::podnetwork::model::ConditionsStatus { conditions: conditions.clone() });
                    view.pod_networks.insert("", name, pn);
                }
                Action::Conditions { target: Target::Attachment { namespace, name }, conditions, .. } => {
                    let mut o = view.attachments.get(namespace, name).unwrap().clone();
                    o.status =
                        Some(crate::podnetwork::model::ConditionsStatus { conditions: conditions.clone() });
                    view.attachments.insert(namespace, name, o);
                }
                Action::Finalizers { target: Target::PodNetwork { name }, finalizers, .. } => {
                    let mut pn = view.pod_networks.get("", name).unwrap().clone();
                    pn.metadata.finalizers = Some(finalizers.clone());
                    view.pod_networks.insert("", name, pn);
                }
                Action::Finalizers { target: Target::Attachment { namespace, name }, finalizers, .. } => {
                    let mut o = view.attachments.get(namespace, name).unwrap().clone();
                    o.metadata.finalizers = Some(finalizers.clone());
                    view.attachments.insert(namespace, name, o);
                }
            }
        }
    }

    fn ready_of(view: &View, target: &Target) -> (String, String) {
        let status = match target {
            Target::PodNetwork { name } => view.pod_networks.get("", name).unwrap().status.clone(),
            Target::Attachment { namespace, name } => {
                view.attachments.get(namespace, name).unwrap().status.clone()
            }
        };
        let c = status.unwrap().condition(READY).unwrap().clone();
        (c.status, c.reason)
    }

    #[test]
    fn the_default_pod_network_is_created_when_managed_and_absent() {
        let view = View::default();
        assert_eq!(plan(&view, MANAGED, &now()), [Action::CreateDefault]);
        assert!(plan(&view, UNMANAGED, &now()).is_empty());
    }

    #[test]
    fn conditions_are_written_once_and_follow_the_network() {
        let mut view = View::default();
        view.pod_networks.insert("", "blue", network("blue", true, None));
        view.attachments.insert("ns", "blue-1", pna("ns", "blue-1", "blue"));
        view.attachments.insert("ns", "lost", pna("ns", "lost", "missing"));
        let actions = plan(&view, UNMANAGED, &now());
        let writes = |a: &[Action]| a.iter().filter(|a| matches!(a, Action::Conditions { .. })).count();
        assert_eq!(writes(&actions), 3, "{actions:#?}");
        assert_eq!(actions.len(), 4, "and blue's finalizer, held by blue-1: {actions:#?}");
        let Action::Conditions { resource_version, conditions, .. } = &actions[0] else { panic!() };
        assert_eq!(resource_version.as_deref(), Some("7"));
        assert_eq!(conditions[0].observed_generation, Some(2));
        written(&mut view, &actions);
        let blue = Target::PodNetwork { name: "blue".into() };
        let blue_1 = Target::Attachment { namespace: "ns".into(), name: "blue-1".into() };
        let lost = Target::Attachment { namespace: "ns".into(), name: "lost".into() };
        assert_eq!(ready_of(&view, &blue), ("True".into(), "Ready".into()));
        assert_eq!(ready_of(&view, &blue_1), ("True".into(), "Ready".into()));
        assert_eq!(ready_of(&view, &lost), ("False".into(), POD_NETWORK_NOT_READY.into()));
        assert!(plan(&view, UNMANAGED, &now()).is_empty(), "nothing changes: nothing written");

        // Disabled: the network and its attachment go not Ready in one round.
        let mut pn = view.pod_networks.get("", "blue").unwrap().clone();
        pn.spec.enabled = false;
        view.pod_networks.insert("", "blue", pn);
        let actions = plan(&view, UNMANAGED, &now());
        assert_eq!((writes(&actions), actions.len()), (2, 2), "{actions:#?}");
        written(&mut view, &actions);
        assert_eq!(ready_of(&view, &blue), ("False".into(), ADMINISTRATIVELY_DISABLED.into()));
        assert_eq!(ready_of(&view, &blue_1), ("False".into(), POD_NETWORK_NOT_READY.into()));
    }

    #[test]
    fn another_providers_network_and_its_attachments_are_left_alone() {
        let mut view = View::default();
        view.pod_networks.insert("", "theirs", network("theirs", true, Some("acme.io/net")));
        view.attachments.insert("ns", "theirs-1", pna("ns", "theirs-1", "theirs"));
        view.pods.insert("ns", "p", refs(&["theirs"], &["theirs-1"]));
        assert!(plan(&view, UNMANAGED, &now()).is_empty());
        // plexus's own provider name is served.
        view.pod_networks.insert("", "ours", network("ours", true, Some(crate::podnetwork::model::PROVIDER)));
        assert_eq!(plan(&view, UNMANAGED, &now()).len(), 1);
    }

    fn finalizer_of(actions: &[Action], target: &Target) -> Option<Vec<String>> {
        actions.iter().find_map(|a| match a {
            Action::Finalizers { target: t, finalizers, .. } if t == target => Some(finalizers.clone()),
            _ => None,
        })
    }

    #[test]
    fn the_in_use_finalizer_follows_the_references() {
        let mut view = View::default();
        let mut blue = network("blue", true, None);
        blue.metadata.finalizers = Some(vec!["someone.else/keep".into()]);
        view.pod_networks.insert("", "blue", blue);
        view.pod_networks.insert("", "red", network("red", true, None));
        view.attachments.insert("ns", "red-1", pna("ns", "red-1", "red"));
        view.pods.insert("ns", "p", refs(&["blue"], &[]));
        let actions = plan(&view, UNMANAGED, &now());
        let blue_t = Target::PodNetwork { name: "blue".into() };
        let red_t = Target::PodNetwork { name: "red".into() };
        let red_1 = Target::Attachment { namespace: "ns".into(), name: "red-1".into() };
        assert_eq!(
            finalizer_of(&actions, &blue_t),
            Some(vec!["someone.else/keep".into(), IN_USE_FINALIZER.into()])
        );
        assert_eq!(finalizer_of(&actions, &red_t), Some(vec![IN_USE_FINALIZER.into()]), "held by a PNA");
        assert_eq!(finalizer_of(&actions, &red_1), None, "no pod uses the PNA");
        written(&mut view, &actions);
        assert!(plan(&view, UNMANAGED, &now()).is_empty());

        // A pod in another namespace naming `red-1` does not reach ns/red-1.
        view.pods.insert("other", "q", refs(&[], &["red-1"]));
        assert!(plan(&view, UNMANAGED, &now()).is_empty());
        view.pods.insert("ns", "q", refs(&[], &["red-1"]));
        let actions = plan(&view, UNMANAGED, &now());
        assert_eq!(finalizer_of(&actions, &red_1), Some(vec![IN_USE_FINALIZER.into()]));
        written(&mut view, &actions);

        // The pods go away (deleted, or Succeeded/Failed: out of the watch).
        view.pods = Default::default();
        let actions = plan(&view, UNMANAGED, &now());
        assert_eq!(
            finalizer_of(&actions, &blue_t),
            Some(vec!["someone.else/keep".into()]),
            "only ours removed"
        );
        assert_eq!(finalizer_of(&actions, &red_1), Some(vec![]));
        assert_eq!(finalizer_of(&actions, &red_t), None, "still referenced by red-1");
    }

    #[test]
    fn an_object_being_deleted_keeps_the_finalizer_while_used_and_never_gains_it() {
        let deleting = |mut pn: PodNetwork, finalizers: Vec<String>| {
            pn.metadata.deletion_timestamp = Some(now());
            pn.metadata.finalizers = Some(finalizers);
            pn
        };
        let mut view = View::default();
        view.pod_networks.insert(
            "",
            "blue",
            deleting(network("blue", true, None), vec![IN_USE_FINALIZER.into()]),
        );
        view.pods.insert("ns", "p", refs(&["blue"], &[]));
        let blue_t = Target::PodNetwork { name: "blue".into() };
        assert_eq!(finalizer_of(&plan(&view, UNMANAGED, &now()), &blue_t), None, "in use: deletion waits");
        view.pods = Default::default();
        assert_eq!(
            finalizer_of(&plan(&view, UNMANAGED, &now()), &blue_t),
            Some(vec![]),
            "unused: deletion completes"
        );
        // Deleted while held by another finalizer only, then referenced: not added.
        view.pod_networks.insert("", "blue", deleting(network("blue", true, None), vec!["x/y".into()]));
        view.pods.insert("ns", "p", refs(&["blue"], &[]));
        assert_eq!(finalizer_of(&plan(&view, UNMANAGED, &now()), &blue_t), None);
    }

    #[test]
    fn the_managed_default_never_holds_the_finalizer_but_an_operators_does() {
        let mut view = View::default();
        let mut default = network(DEFAULT_POD_NETWORK, true, None);
        default.metadata.finalizers = Some(vec![IN_USE_FINALIZER.into()]);
        view.pod_networks.insert("", DEFAULT_POD_NETWORK, default);
        view.pods.insert("ns", "p", refs(&[DEFAULT_POD_NETWORK], &[]));
        let t = Target::PodNetwork { name: DEFAULT_POD_NETWORK.into() };
        assert_eq!(finalizer_of(&plan(&view, MANAGED, &now()), &t), Some(vec![]));
        assert_eq!(
            finalizer_of(&plan(&view, UNMANAGED, &now()), &t),
            None,
            "the operator's: held while in use"
        );
    }
}
