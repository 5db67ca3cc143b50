//! From selections to attachments: namespaces allowed, interface names chosen (spec 4.1.2.1.5,
//! 4.2, 7.4).

use std::collections::HashSet;

use super::sandbox_networks::FALLBACK_NETWORK;
use super::selection::NetworkSelection;
use crate::cni::{CniCode, ErrorCode};

/// One attachment the engine will make, in selection order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAttachment {
    pub selection: NetworkSelection,
    /// The NAD's namespace (the pod's unless the selection names another).
    pub namespace: String,
    pub name: String,
    /// CNI_IFNAME for this attachment; with the container ID and network name it is the
    /// attachment's unique tuple (spec 4.2.1).
    pub ifname: String,
}

impl PlannedAttachment {
    /// The network-status `name`: the NAD reference with its namespace (spec 5.3.1).
    pub fn status_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "pod in namespace {pod_namespace:?} may not select network {namespace}/{name}: namespace {namespace:?} is \
         not in the agent's allowed list; select a network of the pod's namespace or allow {namespace:?} \
         (--allow-namespace)"
    )]
    NamespaceNotAllowed { pod_namespace: String, namespace: String, name: String },
    #[error("interface {ifname:?} requested for network {network} is already used by {holder}; choose another name")]
    InterfaceInUse { ifname: String, network: String, holder: String },
    #[error(
        "selections {first} and {second} both request MAC {mac}: two interfaces with one MAC address \
         confuse every switch and bridge they share; give each selection its own \"mac\" or leave one out"
    )]
    DuplicateMac { mac: String, first: String, second: String },
}

/// A plan refused is a selection the user must change.
impl CniCode for PlanError {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// Plans the attachments of a pod. Generated names are `net1`, `net2`, ... in order, never
/// one that any selection requests explicitly, so the spec's "already used" failure only
/// happens for names the user asked for twice (or asked for the default network's).
pub fn plan_attachments(
    pod_namespace: &str,
    default_ifname: &str,
    selections: &[NetworkSelection],
    allowed_namespaces: &[String],
) -> Result<Vec<PlannedAttachment>, PlanError> {
    let default = (default_ifname.to_owned(), "the cluster default network".to_owned());
    plan(pod_namespace, vec![default], selections, allowed_namespaces)
}

/// Plans every attachment of a sandbox that names its networks: the first selection is on
/// the runtime's interface in place of the cluster default network, so no interface is taken
/// beforehand; otherwise as [`plan_attachments`].
pub fn plan_sandbox_attachments(
    pod_namespace: &str,
    selections: &[NetworkSelection],
    allowed_namespaces: &[String],
) -> Result<Vec<PlannedAttachment>, PlanError> {
    plan(pod_namespace, Vec::new(), selections, allowed_namespaces)
}

/// `used`: the interfaces taken before the first selection, with what holds them.
fn plan(
    pod_namespace: &str,
    mut used: Vec<(String, String)>,
    selections: &[NetworkSelection],
    allowed_namespaces: &[String],
) -> Result<Vec<PlannedAttachment>, PlanError> {
    let requested: HashSet<&str> = selections.iter().filter_map(|s| s.interface.as_deref()).collect();
    let mut next = 1usize;
    let mut planned = Vec::with_capacity(selections.len());
    // (normalized MAC, the selection that requested it).
    let mut macs: Vec<(String, String)> = Vec::new();
    for (index, sel) in selections.iter().enumerate() {
        let namespace = sel.namespace_or(pod_namespace).to_owned();
        if namespace != pod_namespace && !allowed_namespaces.contains(&namespace) {
            return Err(PlanError::NamespaceNotAllowed {
                pod_namespace: pod_namespace.to_owned(),
                namespace,
                name: sel.name.clone(),
            });
        }
        // The on-disk default network a sandbox's list names is in no namespace.
        let network =
            if sel.name == FALLBACK_NETWORK { sel.name.clone() } else { format!("{namespace}/{}", sel.name) };
        if let Some(mac) = sel.mac.as_deref() {
            let normalized = normalize_mac(mac);
            let this = format!("{index} (network {network})");
            if let Some((_, first)) = macs.iter().find(|(m, _)| *m == normalized) {
                return Err(PlanError::DuplicateMac {
                    mac: mac.to_owned(),
                    first: first.clone(),
                    second: this,
                });
            }
            macs.push((normalized, this));
        }
        let ifname = match sel.interface.as_deref() {
            Some(wanted) => {
                if let Some((_, holder)) = used.iter().find(|(n, _)| n == wanted) {
                    return Err(PlanError::InterfaceInUse {
                        ifname: wanted.to_owned(),
                        network,
                        holder: holder.clone(),
                    });
                }
                wanted.to_owned()
            }
            None => loop {
                let candidate = format!("net{next}");
                next += 1;
                if !requested.contains(candidate.as_str()) && !used.iter().any(|(n, _)| *n == candidate) {
                    break candidate;
                }
            },
        };
        used.push((ifname.clone(), format!("network {network}")));
        planned.push(PlannedAttachment { selection: sel.clone(), namespace, name: sel.name.clone(), ifname });
    }
    Ok(planned)
}

/// A MAC address as compared: lower case, without separators (`02-AB-..` is `02:ab:..`).
fn normalize_mac(mac: &str) -> String {
    mac.chars().filter(char::is_ascii_hexdigit).map(|c| c.to_ascii_lowercase()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::selection::parse_selection;

    fn plan(annotation: &str) -> Result<Vec<PlannedAttachment>, PlanError> {
        plan_attachments("pod-ns", "eth0", &parse_selection(annotation).unwrap(), &["default".into()])
    }

    fn names(p: &[PlannedAttachment]) -> Vec<&str> {
        p.iter().map(|a| a.ifname.as_str()).collect()
    }

    #[test]
    fn generated_names_count_up_in_order() {
        assert_eq!(names(&plan("a,b,c").unwrap()), ["net1", "net2", "net3"]);
    }

    #[test]
    fn generated_names_skip_names_requested_anywhere() {
        let p = plan(r#"[{"name":"a"},{"name":"b","interface":"net1"},{"name":"c"}]"#).unwrap();
        assert_eq!(names(&p), ["net2", "net1", "net3"]);
    }

    #[test]
    fn a_name_requested_twice_fails_the_second() {
        let err = plan(r#"[{"name":"a","interface":"data"},{"name":"b","interface":"data"}]"#).unwrap_err();
        assert!(matches!(err, PlanError::InterfaceInUse { ref ifname, .. } if ifname == "data"));
        assert!(err.to_string().contains("network pod-ns/a"), "{err}");
    }

    #[test]
    fn the_default_interface_name_is_taken() {
        let err = plan(r#"[{"name":"a","interface":"eth0"}]"#).unwrap_err();
        assert!(err.to_string().contains("cluster default network"), "{err}");
    }

    #[test]
    fn same_network_twice_gets_two_names() {
        let p = plan("net-a,net-a").unwrap();
        assert_eq!(names(&p), ["net1", "net2"]);
        assert_eq!(p[0].status_name(), p[1].status_name());
    }

    #[test]
    fn two_selections_with_one_mac_are_refused_naming_both() {
        let err = plan(
            r#"[{"name":"a","mac":"02:00:00:00:00:aa"},{"name":"b"},{"name":"a","mac":"02-00-00-00-00-AA"}]"#,
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::DuplicateMac { .. }), "{err:?}");
        assert_eq!(err.cni_code(), ErrorCode::InvalidNetworkConfig);
        let text = err.to_string();
        for needle in ["selections 0 (network pod-ns/a) and 2 (network pod-ns/a)", "02-00-00-00-00-AA"] {
            assert!(text.contains(needle), "{needle:?} missing from {text}");
        }
        // Different MACs, or one network twice without MACs, are fine.
        plan(r#"[{"name":"a","mac":"02:00:00:00:00:01"},{"name":"a","mac":"02:00:00:00:00:02"}]"#).unwrap();
        plan("a,a").unwrap();
    }

    fn plan_sandbox(annotation: &str) -> Result<Vec<PlannedAttachment>, PlanError> {
        plan_sandbox_attachments("pod-ns", &parse_selection(annotation).unwrap(), &["default".into()])
    }

    #[test]
    fn a_sandbox_plan_reserves_no_interface_and_keeps_every_other_rule() {
        let p =
            plan_sandbox(r#"[{"name":"a","interface":"eth0"},{"name":"b"},{"name":"c","interface":"net1"}]"#)
                .unwrap();
        assert_eq!(names(&p), ["eth0", "net2", "net1"]);
        let err =
            plan_sandbox(r#"[{"name":"a","interface":"eth0"},{"name":"b","interface":"eth0"}]"#).unwrap_err();
        assert_eq!(
            err,
            PlanError::InterfaceInUse {
                ifname: "eth0".into(),
                network: "pod-ns/b".into(),
                holder: "network pod-ns/a".into()
            }
        );
        let err = plan_sandbox(
            r#"[{"name":"a","interface":"eth0","mac":"02:00:00:00:00:01"},{"name":"b","mac":"02:00:00:00:00:01"}]"#,
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::DuplicateMac { .. }), "{err:?}");
        assert!(matches!(plan_sandbox("secret/x").unwrap_err(), PlanError::NamespaceNotAllowed { .. }));
        let fallback = NetworkSelection {
            name: "_fallback".into(),
            interface: Some("eth0".into()),
            ..Default::default()
        };
        let blue =
            NetworkSelection { name: "blue".into(), interface: Some("eth0".into()), ..Default::default() };
        let err = plan_sandbox_attachments("pod-ns", &[fallback, blue], &[]).unwrap_err();
        assert_eq!(err.to_string(), "interface \"eth0\" requested for network pod-ns/blue is already used by network _fallback; choose another name");
        assert_eq!(plan_sandbox("default/x").unwrap()[0].status_name(), "default/x");
    }

    #[test]
    fn other_namespaces_need_the_allow_list() {
        assert_eq!(plan("default/x").unwrap()[0].status_name(), "default/x");
        assert_eq!(plan("pod-ns/x").unwrap()[0].namespace, "pod-ns");
        let err = plan("secret/x").unwrap_err();
        assert!(matches!(err, PlanError::NamespaceNotAllowed { .. }));
        assert!(err.to_string().contains("--allow-namespace"));
    }
}
