//! What a change of a running pod's selection annotation asks for: the selections its
//! attachments were made for, compared with the selections it has now. Pure.
//!
//! A selection is identified by its network (namespace and name) and its interface; a selection
//! without an interface by its ordinal among the interface-less selections of its network. An
//! identified selection whose parameters changed is detached and attached again on the same
//! interface, except when only its bandwidth changed: that limit changes in place.

use std::collections::HashSet;

use crate::cni::{CniCode, ErrorCode};
use crate::spec::selection::NetworkSelection;

/// Which selection an attachment is for, across changes of the annotation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SelectionId {
    pub namespace: String,
    pub name: String,
    pub slot: Slot,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The interface the selection names.
    Interface(String),
    /// Among the selections of the network that name no interface, this one's position.
    Ordinal(usize),
}

/// The identities of `selections`, in their order.
pub fn identities<'a>(
    pod_namespace: &str,
    selections: impl IntoIterator<Item = &'a NetworkSelection>,
) -> Vec<SelectionId> {
    let mut seen: Vec<(String, String)> = Vec::new();
    selections
        .into_iter()
        .map(|s| {
            let namespace = s.namespace_or(pod_namespace).to_owned();
            let slot = match &s.interface {
                Some(ifname) => Slot::Interface(ifname.clone()),
                None => {
                    let network = (namespace.clone(), s.name.clone());
                    let ordinal = seen.iter().filter(|n| **n == network).count();
                    seen.push(network);
                    Slot::Ordinal(ordinal)
                }
            };
            SelectionId { namespace, name: s.name.clone(), slot }
        })
        .collect()
}

/// An attachment of the pod made for a selection, as its record holds it.
#[derive(Debug, Clone, Copy)]
pub struct Existing<'a> {
    pub ifname: &'a str,
    pub selection: &'a NetworkSelection,
}

/// A selection to attach, on the interface it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addition {
    pub selection: NetworkSelection,
    pub ifname: String,
}

/// The change that takes a pod from its attachments to its selection. Indices are into the
/// `existing` attachments [`diff`] was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveChange {
    /// Attachments whose selection is gone or changed, in `existing` order.
    pub detach: Vec<usize>,
    /// Attachments whose selection changed only in its bandwidth: the new selection.
    pub bandwidth: Vec<(usize, NetworkSelection)>,
    /// Selections to attach, in selection order: new ones, and changed ones again.
    pub attach: Vec<Addition>,
    /// Attachments whose selection is unchanged, with the index of that selection.
    pub kept: Vec<(usize, usize)>,
}

impl LiveChange {
    pub fn is_empty(&self) -> bool {
        self.detach.is_empty() && self.bandwidth.is_empty() && self.attach.is_empty()
    }

    /// Turns a kept attachment into a detach and an attach of the same selection on the same
    /// interface (its network's config changed, and the pod asked for that).
    pub fn reattach(&mut self, existing: usize, ifname: &str, selection: &NetworkSelection) {
        self.kept.retain(|(e, _)| *e != existing);
        self.detach.push(existing);
        self.detach.sort_unstable();
        self.attach.push(Addition { selection: selection.clone(), ifname: ifname.to_owned() });
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "interface {ifname:?} requested for network {network} is already used by the pod's attachment of network \
     {holder}; choose another name, or remove that selection first"
)]
pub struct InterfaceHeld {
    pub ifname: String,
    pub network: String,
    pub holder: String,
}

/// A selection the user must change.
impl CniCode for InterfaceHeld {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// The change from the `existing` attachments to `desired` selections. A new selection without
/// an interface gets the first free `netN`: not the pod's own interface, not one a kept
/// attachment holds, not one any selection names.
pub fn diff(
    pod_namespace: &str,
    default_ifname: &str,
    existing: &[Existing<'_>],
    desired: &[NetworkSelection],
) -> Result<LiveChange, InterfaceHeld> {
    let existing_ids = identities(pod_namespace, existing.iter().map(|e| e.selection));
    let desired_ids = identities(pod_namespace, desired);
    let mut change = LiveChange::default();
    // Per desired selection: the existing attachment with its identity, if any.
    let mut matched: Vec<Option<usize>> = vec![None; desired.len()];
    for (e, id) in existing_ids.iter().enumerate() {
        match desired_ids.iter().position(|d| d == id) {
            Some(d) => matched[d] = Some(e),
            None => change.detach.push(e),
        }
    }
    // Interfaces held after the detaches, and asked for.
    let mut used: HashSet<String> = HashSet::from([default_ifname.to_owned()]);
    // With the index of their selection, for the order.
    let mut additions: Vec<(usize, Addition)> = Vec::new();
    for (d, m) in matched.iter().enumerate() {
        let Some(e) = *m else { continue };
        let (was, now) = (existing[e].selection, &desired[d]);
        let (was_same, now_same) = (resolved(pod_namespace, was), resolved(pod_namespace, now));
        if was_same == now_same {
            change.kept.push((e, d));
        } else if without_bandwidth(&was_same) == without_bandwidth(&now_same) {
            change.bandwidth.push((e, now.clone()));
        } else {
            change.detach.push(e);
            additions.push((d, Addition { selection: now.clone(), ifname: existing[e].ifname.to_owned() }));
        }
        used.insert(existing[e].ifname.to_owned());
    }
    change.detach.sort_unstable();
    let held = |ifname: &str| {
        existing
            .iter()
            .enumerate()
            .find(|(e, x)| x.ifname == ifname && !change.detach.contains(e))
            .map(|(_, x)| network_of(pod_namespace, x.selection))
    };
    for (d, sel) in desired.iter().enumerate() {
        if matched[d].is_some() {
            continue;
        }
        if let Some(ifname) = &sel.interface {
            if let Some(holder) = held(ifname) {
                return Err(InterfaceHeld {
                    ifname: ifname.clone(),
                    network: network_of(pod_namespace, sel),
                    holder,
                });
            }
        }
        additions.push((
            d,
            Addition { selection: sel.clone(), ifname: sel.interface.clone().unwrap_or_default() },
        ));
    }
    used.extend(desired.iter().filter_map(|s| s.interface.clone()));
    additions.sort_by_key(|(d, _)| *d);
    let mut next = 1usize;
    for (_, a) in &mut additions {
        if a.ifname.is_empty() {
            a.ifname = loop {
                let candidate = format!("net{next}");
                next += 1;
                if !used.contains(&candidate) {
                    break candidate;
                }
            };
            used.insert(a.ifname.clone());
        }
    }
    change.attach = additions.into_iter().map(|(_, a)| a).collect();
    Ok(change)
}

/// The selection with its namespace spelled out, so naming the pod's own namespace is no change.
fn resolved(pod_namespace: &str, s: &NetworkSelection) -> NetworkSelection {
    NetworkSelection { namespace: Some(s.namespace_or(pod_namespace).to_owned()), ..s.clone() }
}

fn without_bandwidth(s: &NetworkSelection) -> NetworkSelection {
    NetworkSelection { bandwidth: None, ..s.clone() }
}

fn network_of(pod_namespace: &str, s: &NetworkSelection) -> String {
    format!("{}/{}", s.namespace_or(pod_namespace), s.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::selection::parse_selection;

    fn sel(json: &str) -> Vec<NetworkSelection> {
        parse_selection(json).unwrap()
    }

    /// The change from `existing` (selections and their interfaces) to `desired`.
    fn change(existing: &[(&str, &str)], desired: &str) -> Result<LiveChange, InterfaceHeld> {
        let parsed: Vec<(String, NetworkSelection)> = existing
            .iter()
            .map(|(ifname, s)| ((*ifname).to_owned(), sel(&format!("[{s}]")).remove(0)))
            .collect();
        let existing: Vec<Existing<'_>> =
            parsed.iter().map(|(ifname, selection)| Existing { ifname, selection }).collect();
        diff("ns", "eth0", &existing, &sel(desired))
    }

    fn attached(c: &LiveChange) -> Vec<(&str, &str)> {
        c.attach.iter().map(|a| (a.selection.name.as_str(), a.ifname.as_str())).collect()
    }

    #[test]
    fn nothing_changed_is_empty() {
        let c = change(
            &[("net1", r#"{"name":"a"}"#), ("x", r#"{"name":"b","interface":"x"}"#)],
            r#"[{"name":"a"},{"name":"b","interface":"x"}]"#,
        )
        .unwrap();
        assert!(c.is_empty(), "{c:?}");
        assert_eq!(c.kept, [(0, 0), (1, 1)]);
    }

    #[test]
    fn a_new_selection_gets_the_first_interface_nobody_holds_or_names() {
        let c = change(
            &[("net1", r#"{"name":"a"}"#)],
            r#"[{"name":"a"},{"name":"b","interface":"net2"},{"name":"c"}]"#,
        )
        .unwrap();
        assert_eq!(attached(&c), [("b", "net2"), ("c", "net3")]);
        assert!(c.detach.is_empty() && c.bandwidth.is_empty());
    }

    #[test]
    fn a_removed_selection_is_detached_and_frees_its_interface() {
        let c = change(
            &[("net1", r#"{"name":"a"}"#), ("net2", r#"{"name":"b"}"#)],
            r#"[{"name":"b"},{"name":"c"}]"#,
        )
        .unwrap();
        assert_eq!(c.detach, [0]);
        assert_eq!(attached(&c), [("c", "net1")]);
        assert_eq!(c.kept, [(1, 0)]);
    }

    #[test]
    fn interface_less_selections_of_one_network_are_told_apart_by_their_ordinal() {
        let c =
            change(&[("net1", r#"{"name":"a"}"#), ("net2", r#"{"name":"a"}"#)], r#"[{"name":"a"}]"#).unwrap();
        assert_eq!(c.detach, [1], "the second one goes");
        let c = change(
            &[("net1", r#"{"name":"a"}"#)],
            r#"[{"name":"a"},{"name":"a","interface":"z"},{"name":"a"}]"#,
        )
        .unwrap();
        assert_eq!(attached(&c), [("a", "z"), ("a", "net2")]);
        assert!(c.detach.is_empty());
    }

    #[test]
    fn the_namespace_is_part_of_the_identity_and_defaults_to_the_pods() {
        let c = change(&[("net1", r#"{"name":"a"}"#)], r#"[{"name":"a","namespace":"ns"}]"#).unwrap();
        assert!(c.is_empty(), "{c:?}");
        let c = change(&[("net1", r#"{"name":"a"}"#)], r#"[{"name":"a","namespace":"other"}]"#).unwrap();
        assert_eq!((c.detach.as_slice(), attached(&c)), (&[0][..], vec![("a", "net1")]));
    }

    #[test]
    fn changed_parameters_reattach_on_the_same_interface() {
        for (was, now) in [
            (r#"{"name":"a","ips":["10.0.0.1/24"]}"#, r#"[{"name":"a","ips":["10.0.0.2/24"]}]"#),
            (r#"{"name":"a"}"#, r#"[{"name":"a","mac":"02:00:00:00:00:01"}]"#),
            (r#"{"name":"a"}"#, r#"[{"name":"a","portMappings":[{"hostPort":80,"containerPort":8080}]}]"#),
            (r#"{"name":"a"}"#, r#"[{"name":"a","cni-args":{"k":"v"}}]"#),
            (
                r#"{"name":"a","bandwidth":{"ingressRate":1000}}"#,
                r#"[{"name":"a","mac":"02:00:00:00:00:01","bandwidth":{"ingressRate":2000}}]"#,
            ),
        ] {
            let c = change(&[("net7", was)], now).unwrap();
            assert_eq!(c.detach, [0], "{now}");
            assert_eq!(attached(&c), [("a", "net7")], "{now}");
            assert!(c.bandwidth.is_empty() && c.kept.is_empty(), "{now}");
        }
    }

    #[test]
    fn a_bandwidth_only_change_is_in_place() {
        let c = change(
            &[("net1", r#"{"name":"a","bandwidth":{"ingressRate":1000,"ingressBurst":100}}"#)],
            r#"[{"name":"a","bandwidth":{"ingressRate":5000,"ingressBurst":100}}]"#,
        )
        .unwrap();
        assert!(c.detach.is_empty() && c.attach.is_empty());
        assert_eq!(c.bandwidth.len(), 1);
        assert_eq!(c.bandwidth[0].0, 0);
        assert_eq!(c.bandwidth[0].1.bandwidth.as_ref().unwrap().ingress_rate, Some(5000));
    }

    #[test]
    fn a_new_interface_a_kept_attachment_holds_is_refused_one_being_detached_is_free() {
        let err = change(&[("net1", r#"{"name":"a"}"#)], r#"[{"name":"a"},{"name":"b","interface":"net1"}]"#)
            .unwrap_err();
        assert_eq!(err.holder, "ns/a");
        assert_eq!(err.network, "ns/b");
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        let c = change(&[("net1", r#"{"name":"a"}"#)], r#"[{"name":"b","interface":"net1"}]"#).unwrap();
        assert_eq!((c.detach.as_slice(), attached(&c)), (&[0][..], vec![("b", "net1")]));
    }

    #[test]
    fn reattach_turns_a_kept_attachment_into_a_detach_and_an_attach() {
        let mut c = change(
            &[("net1", r#"{"name":"a"}"#), ("net2", r#"{"name":"b"}"#)],
            r#"[{"name":"a"},{"name":"b"}]"#,
        )
        .unwrap();
        let b = sel(r#"[{"name":"b"}]"#).remove(0);
        c.reattach(1, "net2", &b);
        assert_eq!(c.detach, [1]);
        assert_eq!(attached(&c), [("b", "net2")]);
        assert_eq!(c.kept, [(0, 0)]);
    }

    #[test]
    fn identities_count_ordinals_per_network() {
        let ids = identities(
            "ns",
            &sel(r#"[{"name":"a"},{"name":"b"},{"name":"a","interface":"x"},{"name":"a"}]"#),
        );
        let slots: Vec<&Slot> = ids.iter().map(|i| &i.slot).collect();
        assert_eq!(
            slots,
            [&Slot::Ordinal(0), &Slot::Ordinal(0), &Slot::Interface("x".into()), &Slot::Ordinal(1)]
        );
    }
}
