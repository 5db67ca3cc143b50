//! The KEP's conditions of a PodNetwork and of a PodNetworkAttachment, decided from what the
//! controller knows of them, and merged with the conditions they carry so that
//! `lastTransitionTime` moves only when a condition's `status` changes.
//!
//! - `ParamsReady` is present only when the object has `parametersRefs`: True
//!   (`ParametersValid`) when every referenced object exists and its config parses, False
//!   otherwise (`ParametersNotFound`, `InvalidParameters`, `UnsupportedParameters`: plexus's
//!   reasons, the KEP leaves them to the implementation).
//! - `Ready` of a PodNetwork: False `AdministrativelyDisabled` when `spec.enabled` is false
//!   (whatever its parameters), False `ParamsNotReady` when ParamsReady is False, else True
//!   (`Ready`).
//! - `Ready` of a PodNetworkAttachment: False `ParamsNotReady` when its ParamsReady is False,
//!   False `PodNetworkNotReady` when its PodNetwork is missing or not Ready, else True.
//!
//! Pure: the caller checks the parameters and says what time it is.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::model::conditions::{
    ADMINISTRATIVELY_DISABLED, PARAMS_NOT_READY, PARAMS_READY, POD_NETWORK_NOT_READY, READY,
};

/// Ready=True.
pub const REASON_READY: &str = "Ready";
/// ParamsReady reasons: True `ParametersValid`; False `ParametersNotFound` (a referenced
/// object does not exist), `InvalidParameters` (it, or the reference, is malformed),
/// `UnsupportedParameters` (a reference plexus does not take).
pub use super::params::reasons::{
    INVALID_PARAMETERS, PARAMETERS_NOT_FOUND, PARAMETERS_VALID, UNSUPPORTED_PARAMETERS,
};

/// What checking an object's `parametersRefs` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsCheck {
    /// `parametersRefs` is empty: ParamsReady is absent.
    NoParameters,
    /// Every referenced object exists and its config parses.
    Valid { message: String },
    /// Not usable; `reason` is one of the ParamsReady=False reasons.
    Invalid { reason: &'static str, message: String },
}

impl ParamsCheck {
    fn is_invalid(&self) -> bool {
        matches!(self, ParamsCheck::Invalid { .. })
    }
}

/// What a PodNetworkAttachment's PodNetwork is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodNetworkState {
    Missing,
    /// Not Ready: its Ready condition's reason and message (empty when it has none yet).
    NotReady {
        reason: String,
        message: String,
    },
    Ready,
}

/// A condition as decided, before it is merged with the object's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

fn params_ready(params: &ParamsCheck) -> Option<Desired> {
    match params {
        ParamsCheck::NoParameters => None,
        ParamsCheck::Valid { message } => Some(Desired {
            type_: PARAMS_READY,
            status: true,
            reason: PARAMETERS_VALID,
            message: message.clone(),
        }),
        ParamsCheck::Invalid { reason, message } => {
            Some(Desired { type_: PARAMS_READY, status: false, reason, message: message.clone() })
        }
    }
}

fn params_not_ready(params: &ParamsCheck) -> Option<Desired> {
    match params {
        ParamsCheck::Invalid { message, .. } => Some(Desired {
            type_: READY,
            status: false,
            reason: PARAMS_NOT_READY,
            message: format!("ParamsReady is False: {message}"),
        }),
        _ => None,
    }
}

fn ready(message: &str) -> Desired {
    Desired { type_: READY, status: true, reason: REASON_READY, message: message.into() }
}

/// The conditions of a PodNetwork: Ready first, then ParamsReady when it has parameters.
pub fn pod_network(enabled: bool, params: &ParamsCheck) -> Vec<Desired> {
    let ready = if !enabled {
        Desired {
            type_: READY,
            status: false,
            reason: ADMINISTRATIVELY_DISABLED,
            message: "spec.enabled is false: new pods are not attached; set it to true to use the network"
                .into(),
        }
    } else if let Some(not_ready) = params_not_ready(params) {
        not_ready
    } else {
        ready("the network can be attached")
    };
    std::iter::once(ready).chain(params_ready(params)).collect()
}

/// The conditions of a PodNetworkAttachment naming `pod_network`.
pub fn attachment(
    pod_network_name: &str,
    pod_network: &PodNetworkState,
    params: &ParamsCheck,
) -> Vec<Desired> {
    let ready = if let Some(not_ready) = params_not_ready(params) {
        not_ready
    } else {
        match pod_network {
            PodNetworkState::Missing => Desired {
                type_: READY,
                status: false,
                reason: POD_NETWORK_NOT_READY,
                message: format!(
                    "PodNetwork {pod_network_name:?} does not exist: create it, or fix spec.podNetworkName"
                ),
            },
            PodNetworkState::NotReady { reason, message } => Desired {
                type_: READY,
                status: false,
                reason: POD_NETWORK_NOT_READY,
                message: match (reason.is_empty(), message.is_empty()) {
                    (true, _) => format!("PodNetwork {pod_network_name:?} is not Ready yet"),
                    (false, true) => format!("PodNetwork {pod_network_name:?} is not Ready ({reason})"),
                    (false, false) => {
                        format!("PodNetwork {pod_network_name:?} is not Ready ({reason}: {message})")
                    }
                },
            },
            PodNetworkState::Ready => ready(&format!("PodNetwork {pod_network_name:?} is Ready")),
        }
    };
    debug_assert!(!params.is_invalid() || !ready.status);
    std::iter::once(ready).chain(params_ready(params)).collect()
}

/// The conditions to write: the desired ones (in their order), each keeping its previous
/// `lastTransitionTime` when its `status` is unchanged and taking `now` otherwise, with
/// `observedGeneration`; a ParamsReady no longer desired is dropped; conditions of other types
/// (someone else's) are kept as they are, after plexus's.
pub fn merge(
    previous: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let ours = [READY, PARAMS_READY];
    let mut out: Vec<Condition> = desired
        .iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|p| p.type_ == d.type_ && p.status == status)
                .map(|p| p.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: d.type_.into(),
                status: status.into(),
                reason: d.reason.into(),
                message: d.message.clone(),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect();
    out.extend(previous.iter().filter(|p| !ours.contains(&p.type_.as_str())).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn valid() -> ParamsCheck {
        ParamsCheck::Valid { message: "NetworkAttachmentDefinition ns/nad".into() }
    }

    fn invalid(reason: &'static str) -> ParamsCheck {
        ParamsCheck::Invalid { reason, message: "what is wrong".into() }
    }

    type Summary<'a> = Vec<(&'a str, bool, &'a str)>;

    fn summary(d: &[Desired]) -> Summary<'_> {
        d.iter().map(|d| (d.type_, d.status, d.reason)).collect()
    }

    #[test]
    fn a_pod_network_is_ready_unless_disabled_or_its_parameters_are_not() {
        assert_eq!(summary(&pod_network(true, &ParamsCheck::NoParameters)), [(READY, true, REASON_READY)]);
        assert_eq!(
            summary(&pod_network(true, &valid())),
            [(READY, true, REASON_READY), (PARAMS_READY, true, PARAMETERS_VALID)]
        );
        for reason in [PARAMETERS_NOT_FOUND, INVALID_PARAMETERS, UNSUPPORTED_PARAMETERS] {
            let d = pod_network(true, &invalid(reason));
            assert_eq!(summary(&d), [(READY, false, PARAMS_NOT_READY), (PARAMS_READY, false, reason)]);
            assert_eq!(d[0].message, "ParamsReady is False: what is wrong");
            assert_eq!(d[1].message, "what is wrong");
        }
    }

    #[test]
    fn disabled_takes_precedence_over_the_parameters() {
        assert_eq!(
            summary(&pod_network(false, &ParamsCheck::NoParameters)),
            [(READY, false, ADMINISTRATIVELY_DISABLED)]
        );
        assert_eq!(
            summary(&pod_network(false, &valid())),
            [(READY, false, ADMINISTRATIVELY_DISABLED), (PARAMS_READY, true, PARAMETERS_VALID)]
        );
        assert_eq!(
            summary(&pod_network(false, &invalid(PARAMETERS_NOT_FOUND))),
            [(READY, false, ADMINISTRATIVELY_DISABLED), (PARAMS_READY, false, PARAMETERS_NOT_FOUND)]
        );
    }

    #[test]
    fn an_attachment_is_ready_when_its_parameters_and_its_pod_network_are() {
        let not_ready =
            PodNetworkState::NotReady { reason: ADMINISTRATIVELY_DISABLED.into(), message: "off".into() };
        let fresh = PodNetworkState::NotReady { reason: String::new(), message: String::new() };
        let no_message =
            PodNetworkState::NotReady { reason: PARAMS_NOT_READY.into(), message: String::new() };
        let cases: Vec<(PodNetworkState, ParamsCheck, Summary)> = vec![
            (PodNetworkState::Ready, ParamsCheck::NoParameters, vec![(READY, true, REASON_READY)]),
            (
                PodNetworkState::Ready,
                valid(),
                vec![(READY, true, REASON_READY), (PARAMS_READY, true, PARAMETERS_VALID)],
            ),
            (
                PodNetworkState::Missing,
                ParamsCheck::NoParameters,
                vec![(READY, false, POD_NETWORK_NOT_READY)],
            ),
            (
                not_ready.clone(),
                valid(),
                vec![(READY, false, POD_NETWORK_NOT_READY), (PARAMS_READY, true, PARAMETERS_VALID)],
            ),
            (fresh.clone(), ParamsCheck::NoParameters, vec![(READY, false, POD_NETWORK_NOT_READY)]),
            (no_message.clone(), ParamsCheck::NoParameters, vec![(READY, false, POD_NETWORK_NOT_READY)]),
            // The parameters are the attachment's own problem: said first.
            (
                PodNetworkState::Ready,
                invalid(PARAMETERS_NOT_FOUND),
                vec![(READY, false, PARAMS_NOT_READY), (PARAMS_READY, false, PARAMETERS_NOT_FOUND)],
            ),
            (
                PodNetworkState::Missing,
                invalid(UNSUPPORTED_PARAMETERS),
                vec![(READY, false, PARAMS_NOT_READY), (PARAMS_READY, false, UNSUPPORTED_PARAMETERS)],
            ),
            (
                not_ready.clone(),
                invalid(INVALID_PARAMETERS),
                vec![(READY, false, PARAMS_NOT_READY), (PARAMS_READY, false, INVALID_PARAMETERS)],
            ),
        ];
        for (pn, params, expected) in cases {
            assert_eq!(summary(&attachment("net", &pn, &params)), expected, "{pn:?} {params:?}");
        }
        let message = |pn| attachment("net", &pn, &ParamsCheck::NoParameters)[0].message.clone();
        assert_eq!(
            message(PodNetworkState::Missing),
            "PodNetwork \"net\" does not exist: create it, or fix spec.podNetworkName"
        );
        assert_eq!(message(not_ready), "PodNetwork \"net\" is not Ready (AdministrativelyDisabled: off)");
        assert_eq!(message(fresh), "PodNetwork \"net\" is not Ready yet");
        assert_eq!(message(no_message), "PodNetwork \"net\" is not Ready (ParamsNotReady)");
    }

    fn cond(type_: &str, status: &str, reason: &str, t: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: "old".into(),
            last_transition_time: at(t),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn the_first_conditions_take_now() {
        let merged = merge(&[], &pod_network(true, &valid()), Some(1), &at(100));
        assert_eq!(merged.len(), 2);
        for c in &merged {
            assert_eq!(
                (c.last_transition_time.clone(), c.observed_generation, c.status.as_str()),
                (at(100), Some(1), "True")
            );
        }
        assert_eq!(merged[0].type_, READY);
        assert_eq!(merged[1].message, "NetworkAttachmentDefinition ns/nad");
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_does() {
        let previous =
            vec![cond(READY, "True", REASON_READY, 10), cond(PARAMS_READY, "True", PARAMETERS_VALID, 10)];
        // Same status, new generation and message: time kept, the rest updated.
        let same = merge(&previous, &pod_network(true, &valid()), Some(2), &at(100));
        assert_eq!(same[0].last_transition_time, at(10));
        assert_eq!(same[1].last_transition_time, at(10));
        assert_eq!(same[0].observed_generation, Some(2));
        assert_eq!(same[1].message, "NetworkAttachmentDefinition ns/nad");
        // Disabled: Ready moves, ParamsReady (still True) does not.
        let disabled = merge(&previous, &pod_network(false, &valid()), Some(3), &at(200));
        assert_eq!(
            (disabled[0].status.as_str(), disabled[0].reason.as_str()),
            ("False", ADMINISTRATIVELY_DISABLED)
        );
        assert_eq!(disabled[0].last_transition_time, at(200));
        assert_eq!(disabled[1].last_transition_time, at(10));
        // False with another reason: still False, so the time stays.
        let broken = merge(&disabled, &pod_network(true, &invalid(PARAMETERS_NOT_FOUND)), Some(4), &at(300));
        assert_eq!(
            (broken[0].reason.as_str(), broken[0].last_transition_time.clone()),
            (PARAMS_NOT_READY, at(200))
        );
        assert_eq!((broken[1].status.as_str(), broken[1].last_transition_time.clone()), ("False", at(300)));
        // Back to Ready.
        let back = merge(&broken, &pod_network(true, &valid()), Some(4), &at(400));
        assert!(back.iter().all(|c| c.status == "True" && c.last_transition_time == at(400)));
    }

    #[test]
    fn params_ready_goes_away_with_the_references_and_others_conditions_stay() {
        let previous = vec![
            cond("Example", "True", "Theirs", 5),
            cond(PARAMS_READY, "False", PARAMETERS_NOT_FOUND, 10),
            cond(READY, "False", PARAMS_NOT_READY, 10),
        ];
        let merged = merge(&previous, &pod_network(true, &ParamsCheck::NoParameters), None, &at(50));
        let types: Vec<&str> = merged.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [READY, "Example"]);
        assert_eq!(merged[1], previous[0], "another writer's condition is untouched");
        assert_eq!((merged[0].last_transition_time.clone(), merged[0].observed_generation), (at(50), None));
    }

    #[test]
    fn merging_what_was_written_changes_nothing() {
        let desired = attachment("net", &PodNetworkState::Missing, &invalid(INVALID_PARAMETERS));
        let first = merge(&[], &desired, Some(7), &at(1));
        assert_eq!(merge(&first, &desired, Some(7), &at(99)), first);
    }
}
