//! The check: may a network of a namespace run this resolved CNI config on this node?

use std::fmt;

use serde_json::{Map, Value};

use super::interfaces::{host_interfaces, HostInterface, HostLookup, Named};
use super::model::{InterfaceKind, Policy, Rule};
use super::pattern::{allows_unknown, any_matches, list};
use crate::cni::{CniCode, ErrorCode};

/// One attachment to check, whatever front-end it came from.
#[derive(Debug, Clone, Copy)]
pub struct Attachment<'a> {
    /// The namespace whose rule applies: the NetworkAttachmentDefinition's.
    pub namespace: &'a str,
    /// The network as the pod's status names it (`ns/name`).
    pub network: &'a str,
    /// The resolved CNI config: a configlist (`plugins`) or a single plugin config.
    pub config: &'a Value,
}

/// A refused attachment: which network, by which rule, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("network {network} is refused by the network attachment policy: {reason}")]
pub struct Refusal {
    pub namespace: String,
    pub network: String,
    pub reason: Box<Reason>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No rule names the namespace and there is no `*` rule.
    NoRule {
        namespace: String,
    },
    /// A policy object is invalid and had no valid version before.
    InvalidPolicy {
        objects: Vec<String>,
    },
    PluginType {
        rule: String,
        namespace: String,
        plugin: String,
        allowed: String,
    },
    Interface {
        rule: String,
        namespace: String,
        interface: HostInterface,
        allowed: String,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoRule { namespace } => write!(
                f,
                "no rule covers namespace {namespace}; add a rule naming it (or a default rule for \"*\") to a \
                 NetworkAttachmentPolicy"
            ),
            Reason::InvalidPolicy { objects } => write!(
                f,
                "NetworkAttachmentPolicy {} is invalid, and nothing is allowed until it is fixed (see the agent's \
                 log for the error)",
                objects.join(", ")
            ),
            Reason::PluginType { rule, namespace, plugin, allowed } => write!(
                f,
                "{rule} (for namespace {namespace}) does not allow plugin type {plugin:?} (allowed: {allowed}); add it \
                 to the rule's plugins or use a network of an allowed type"
            ),
            Reason::Interface { rule, namespace, interface, allowed } => {
                let field = interface.kind.field();
                let t = &interface.plugin;
                let key = interface.key;
                match &interface.name {
                    Named::Name(name) => write!(
                        f,
                        "{rule} (for namespace {namespace}) does not allow node interface {name:?} ({t} {key:?}) \
                         (interfaces.{field}: {allowed}); add it to interfaces.{field} or use another interface"
                    ),
                    Named::DefaultRoute => write!(
                        f,
                        "{rule} (for namespace {namespace}): {t} without {key:?} uses the node's default-route \
                         interface, which only \"*\" in interfaces.{field} allows (it has: {allowed}); set {key:?} \
                         to an allowed interface"
                    ),
                    Named::UnknownPf { vf } => write!(
                        f,
                        "{rule} (for namespace {namespace}): the PF of SR-IOV VF {vf} ({t} {key:?}) is not found on \
                         this node, and only \"*\" in interfaces.{field} allows an unknown PF (it has: {allowed}); \
                         check {key:?}"
                    ),
                    Named::Unnamed => write!(
                        f,
                        "{rule} (for namespace {namespace}): {t} picks its node interface by {key:?} (or not at \
                         all), which only \"*\" in interfaces.{field} allows (it has: {allowed}); name the interface \
                         instead"
                    ),
                }
            }
        }
    }
}

/// A refusal is a config the operator or the network's owner changes (code 7).
impl CniCode for Refusal {
    fn cni_code(&self) -> ErrorCode {
        ErrorCode::InvalidNetworkConfig
    }
}

/// The plugins of a resolved config: a configlist's, or a single config as its own plugin.
fn plugins(config: &Value) -> Vec<&Map<String, Value>> {
    match config.get("plugins") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
        _ => config.as_object().into_iter().collect(),
    }
}

/// Every plugin type the config runs: each plugin's and each `ipam.type`, in order.
pub fn plugin_types(config: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    for p in plugins(config) {
        // A plugin without a type cannot run; the config check refuses it elsewhere, and the
        // policy treats it as the empty type, which only "*" allows.
        out.push(p.get("type").and_then(Value::as_str).unwrap_or(""));
        if let Some(t) = p.get("ipam").and_then(|i| i.get("type")).and_then(Value::as_str) {
            out.push(t);
        }
    }
    out
}

/// Checks one attachment against the policy.
pub fn evaluate(policy: &Policy, a: Attachment<'_>, host: &dyn HostLookup) -> Result<(), Refusal> {
    let refuse = |reason| Refusal {
        namespace: a.namespace.to_owned(),
        network: a.network.to_owned(),
        reason: Box::new(reason),
    };
    if !policy.invalid().is_empty() {
        return Err(refuse(Reason::InvalidPolicy { objects: policy.invalid().to_vec() }));
    }
    let Some(rule) = policy.rule_for(a.namespace) else {
        return Err(refuse(Reason::NoRule { namespace: a.namespace.to_owned() }));
    };
    for t in plugin_types(a.config) {
        if !any_matches(&rule.plugins, t) {
            return Err(refuse(Reason::PluginType {
                rule: rule.to_string(),
                namespace: a.namespace.to_owned(),
                plugin: t.to_owned(),
                allowed: list(&rule.plugins),
            }));
        }
    }
    for p in plugins(a.config) {
        for interface in host_interfaces(p, host) {
            if !allowed(rule, interface.kind, &interface.name) {
                let allowed = list(rule.interfaces(interface.kind));
                return Err(refuse(Reason::Interface {
                    rule: rule.to_string(),
                    namespace: a.namespace.to_owned(),
                    interface,
                    allowed,
                }));
            }
        }
    }
    Ok(())
}

fn allowed(rule: &Rule, kind: InterfaceKind, name: &Named) -> bool {
    let patterns = rule.interfaces(kind);
    match name {
        Named::Name(n) => any_matches(patterns, n),
        Named::DefaultRoute | Named::UnknownPf { .. } | Named::Unnamed => allows_unknown(patterns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::model::{PolicySource, PolicySpec};
    use serde_json::json;

    struct Pfs;
    impl HostLookup for Pfs {
        fn sriov_pf(&self, vf_pci: &str) -> Option<String> {
            match vf_pci {
                "0000:3b:02.1" => Some("ens1f0".into()),
                "0000:5e:02.1" => Some("ens7f0".into()),
                _ => None,
            }
        }
    }

    fn policy(yaml: &str) -> Policy {
        let spec: PolicySpec = serde_yaml::from_str(yaml).unwrap();
        Policy::compile(&[PolicySource { name: "p".into(), spec }]).unwrap()
    }

    const POLICY: &str = r#"
rules:
  - name: tenants
    namespaces: ["*"]
    plugins: [bridge, host-local, static, portmap, bandwidth, tuning, plexus-portmap, plexus-bandwidth]
    interfaces:
      bridges: ["br-tenant-*"]
  - name: nfv
    namespaces: [nfv]
    plugins: [macvlan, ipvlan, vlan, sriov, host-device, host-local, plexus-portmap]
    interfaces:
      macvlanMasters: [eth1, "vf-*"]
      ipvlanMasters: [eth2]
      vlanMasters: [eth3]
      sriovPFs: ["ens1f*"]
      hostDevices: ["0000:3b:*", eth5]
      portmapHostInterfaces: [eth1]
  - name: lab
    namespaces: [lab]
    plugins: ["*"]
    interfaces:
      macvlanMasters: ["*"]
      bridges: ["*"]
      sriovPFs: ["*"]
      hostDevices: ["*"]
"#;

    fn check(p: &Policy, namespace: &str, config: Value) -> Result<(), Refusal> {
        evaluate(p, Attachment { namespace, network: &format!("{namespace}/net"), config: &config }, &Pfs)
    }

    #[track_caller]
    fn refused(p: &Policy, namespace: &str, config: Value, needles: &[&str]) -> Refusal {
        let r = check(p, namespace, config).expect_err("refused");
        let msg = r.to_string();
        for n in needles {
            assert!(msg.contains(n), "{n:?} not in: {msg}");
        }
        assert_eq!(r.cni_code(), ErrorCode::InvalidNetworkConfig);
        r
    }

    fn list(plugins: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net", "plugins": plugins})
    }

    #[test]
    fn allowed_types_and_interfaces_pass() {
        let p = policy(POLICY);
        let ok = [
            (
                "t1",
                list(json!([{"type": "bridge", "bridge": "br-tenant-1", "ipam": {"type": "host-local"}},
                               {"type": "portmap", "capabilities": {"portMappings": true}},
                               {"type": "tuning"}, {"type": "bandwidth"}])),
            ),
            (
                "t2",
                json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge", "bridge": "br-tenant-x",
                          "ipam": {"type": "static"}}),
            ),
            (
                "nfv",
                list(json!([{"type": "macvlan", "master": "vf-7", "ipam": {"type": "host-local"}},
                                {"type": "plexus-portmap", "hostInterface": "eth1"}])),
            ),
            ("nfv", json!({"type": "macvlan", "master": "eth1"})),
            ("nfv", json!({"type": "ipvlan", "master": "eth2"})),
            ("nfv", json!({"type": "vlan", "master": "eth3"})),
            ("nfv", json!({"type": "sriov", "deviceID": "0000:3b:02.1"})),
            ("nfv", json!({"type": "host-device", "pciBusID": "0000:3b:00.0"})),
            ("nfv", json!({"type": "host-device", "device": "eth5"})),
            ("nfv", json!({"type": "macvlan", "master": "eth0", "linkInContainer": true})),
            ("lab", json!({"type": "macvlan"})),
            ("lab", json!({"type": "sriov", "deviceID": "0000:99:00.1"})),
            ("lab", json!({"type": "host-device", "hwaddr": "02:00:00:00:00:01"})),
            ("lab", json!({"type": "anything-at-all", "ipam": {"type": "dhcp"}})),
        ];
        for (ns, config) in ok {
            check(&p, ns, config.clone()).unwrap_or_else(|e| panic!("{ns} {config}: {e}"));
        }
    }

    #[test]
    fn a_refused_plugin_type_names_rule_type_namespace_and_fix() {
        let p = policy(POLICY);
        let r = refused(
            &p,
            "tenant-a",
            json!({"type": "macvlan", "master": "br-tenant-1"}),
            &[
                "network tenant-a/net is refused",
                r#"rule "tenants" of NetworkAttachmentPolicy "p""#,
                "namespace tenant-a",
                r#"plugin type "macvlan""#,
                "add it to the rule's plugins",
            ],
        );
        assert!(matches!(*r.reason, Reason::PluginType { ref plugin, .. } if plugin == "macvlan"));
    }

    #[test]
    fn every_plugin_of_the_chain_and_its_ipam_counts() {
        let p = policy(POLICY);
        // A chained plugin.
        refused(
            &p,
            "t",
            list(json!([{"type": "bridge", "bridge": "br-tenant-1"}, {"type": "sbr"}])),
            &[r#"plugin type "sbr""#],
        );
        // An IPAM plugin.
        refused(
            &p,
            "t",
            json!({"type": "bridge", "bridge": "br-tenant-1", "ipam": {"type": "dhcp"}}),
            &[r#"plugin type "dhcp""#],
        );
        // The interface check still runs on a later plugin.
        refused(
            &p,
            "nfv",
            list(
                json!([{"type": "macvlan", "master": "eth1"}, {"type": "plexus-portmap", "hostInterface": "eth0"}]),
            ),
            &[r#"node interface "eth0""#, "interfaces.portmapHostInterfaces: eth1"],
        );
    }

    #[test]
    fn refused_masters_bridges_pfs_and_devices() {
        let p = policy(POLICY);
        let cases = [
            (
                "nfv",
                json!({"type": "macvlan", "master": "eth0"}),
                r#"node interface "eth0" (macvlan "master")"#,
                "interfaces.macvlanMasters: eth1, vf-*",
            ),
            (
                "nfv",
                json!({"type": "ipvlan", "master": "eth1"}),
                r#""eth1" (ipvlan "master")"#,
                "interfaces.ipvlanMasters: eth2",
            ),
            (
                "nfv",
                json!({"type": "vlan", "master": "eth1"}),
                r#""eth1" (vlan "master")"#,
                "interfaces.vlanMasters: eth3",
            ),
            (
                "t",
                json!({"type": "bridge", "bridge": "cni0"}),
                r#""cni0" (bridge "bridge")"#,
                "interfaces.bridges: br-tenant-*",
            ),
            // The reference plugin's default bridge is checked as cni0.
            ("t", json!({"type": "bridge"}), r#""cni0" (bridge "bridge")"#, "add it to interfaces.bridges"),
            (
                "nfv",
                json!({"type": "sriov", "deviceID": "0000:5e:02.1"}),
                r#""ens7f0" (sriov "deviceID")"#,
                "interfaces.sriovPFs: ens1f*",
            ),
            ("nfv", json!({"type": "sriov", "master": "eth0"}), r#""eth0" (sriov "master")"#, "sriovPFs"),
            (
                "nfv",
                json!({"type": "host-device", "device": "eth0"}),
                r#""eth0" (host-device "device")"#,
                "interfaces.hostDevices: 0000:3b:*, eth5",
            ),
            (
                "nfv",
                json!({"type": "host-device", "pciBusID": "0000:5e:00.0"}),
                r#""0000:5e:00.0" (host-device "pciBusID")"#,
                "hostDevices",
            ),
        ];
        for (ns, config, what, allowed) in cases {
            let r = refused(&p, ns, config, &[what, allowed, "namespace", "rule"]);
            assert!(matches!(*r.reason, Reason::Interface { .. }), "{r:?}");
        }
    }

    #[test]
    fn what_cannot_be_named_needs_a_star() {
        let p = policy(POLICY);
        refused(&p, "nfv", json!({"type": "macvlan"}), &["default-route interface", "set \"master\""]);
        refused(&p, "nfv", json!({"type": "ipvlan", "master": ""}), &["default-route interface"]);
        refused(
            &p,
            "nfv",
            json!({"type": "sriov", "deviceID": "0000:99:00.1"}),
            &["the PF of SR-IOV VF 0000:99:00.1", "not found on this node"],
        );
        refused(
            &p,
            "nfv",
            json!({"type": "host-device", "hwaddr": "02:00:00:00:00:01"}),
            &["by \"hwaddr\"", "name the interface"],
        );
        refused(&p, "nfv", json!({"type": "sriov"}), &["\"deviceID\""]);
        // A glob that happens to match everything is not "*": the unknown stays refused.
        let globbed =
            policy("rules: [{namespaces: ['*'], plugins: ['*'], interfaces: {macvlanMasters: ['**']}}]");
        refused(&globbed, "x", json!({"type": "macvlan"}), &["default-route"]);
    }

    #[test]
    fn without_a_rule_for_the_namespace_everything_is_refused() {
        let p = policy("rules: [{namespaces: [a], plugins: ['*']}]");
        check(&p, "a", json!({"type": "bridge"})).unwrap_err(); // the default bridge is not allowed
        check(&p, "a", json!({"type": "ptp"})).unwrap();
        refused(&p, "b", json!({"type": "ptp"}), &["no rule covers namespace b", "\"*\""]);
        // An empty policy refuses everything too: a policy that exists is a whitelist.
        let empty = policy("{}");
        refused(&empty, "a", json!({"type": "ptp"}), &["no rule covers namespace a"]);
    }

    #[test]
    fn an_invalid_policy_object_refuses_everything() {
        let spec: PolicySpec = serde_yaml::from_str("rules: [{namespaces: ['*'], plugins: ['*']}]").unwrap();
        let good = Policy::compile_one(&PolicySource { name: "good".into(), spec }).unwrap();
        let p = Policy::merge(vec![good], vec!["broken".into()]);
        refused(&p, "a", json!({"type": "ptp"}), &["NetworkAttachmentPolicy broken is invalid"]);
    }

    #[test]
    fn plugin_types_lists_chain_and_ipam_in_order() {
        let c =
            list(json!([{"type": "macvlan", "ipam": {"type": "static"}}, {"type": "tuning"}, {"ipam": {}}]));
        assert_eq!(plugin_types(&c), ["macvlan", "static", "tuning", ""]);
        assert_eq!(plugin_types(&json!({"type": "bridge"})), ["bridge"]);
        assert_eq!(plugin_types(&json!("not an object")), Vec::<&str>::new());
        // A typeless plugin only passes "*".
        let p = policy("rules: [{namespaces: [a], plugins: [bridge]}]");
        refused(&p, "a", list(json!([{"ipam": {}}])), &["plugin type \"\""]);
    }
}
