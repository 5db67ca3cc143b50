//! The policy as an operator writes it (the `spec` of a `NetworkAttachmentPolicy`, in a file
//! or as a cluster-scoped object), and the compiled form the check reads.
//!
//! ```yaml
//! apiVersion: plexus.dev/v1alpha1
//! kind: NetworkAttachmentPolicy
//! metadata: {name: default}
//! spec:
//!   rules:
//!     - name: tenants
//!       namespaces: ["*"]
//!       plugins: [bridge, host-local, static, portmap, bandwidth, tuning]
//!       interfaces:
//!         bridges: ["br-tenant-*"]
//!     - name: nfv
//!       namespaces: [nfv]
//!       plugins: [macvlan, sriov, host-local, static]
//!       interfaces:
//!         macvlanMasters: [eth1]
//!         sriovPFs: ["ens1f*"]
//! ```
//!
//! A namespace is governed by the rule naming it, else by the rule for `*`; with neither,
//! its networks are refused. Lists left out allow nothing.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::pattern::{Pattern, PatternError};
use crate::spec::validate::is_namespace;

/// The API group of plexus's own resources, and the version of this one.
pub const GROUP: &str = "plexus.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "NetworkAttachmentPolicy";

/// `spec` of a NetworkAttachmentPolicy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    #[serde(default)]
    pub rules: Vec<RuleSpec>,
}

/// One rule: what the networks of some namespaces may use.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// Named in refusals; default: `rule N` (counting from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace names, or `*` for every namespace no other rule names.
    pub namespaces: Vec<String>,
    /// Every CNI plugin type the network runs: each plugin of the chain (chained ones such as
    /// `portmap`, `tuning`, `plexus-portmap` included) and each `ipam.type`.
    #[serde(default)]
    pub plugins: Vec<String>,
    #[serde(default)]
    pub interfaces: InterfacesSpec,
}

/// The node's interfaces a rule's networks may use, by how a plugin uses them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterfacesSpec {
    /// `master` of `macvlan`.
    #[serde(default)]
    pub macvlan_masters: Vec<String>,
    /// `master` of `ipvlan`.
    #[serde(default)]
    pub ipvlan_masters: Vec<String>,
    /// `master` of `vlan`.
    #[serde(default)]
    pub vlan_masters: Vec<String>,
    /// `bridge` of `bridge` (default `cni0`), `ovs` and `tap`.
    #[serde(default)]
    pub bridges: Vec<String>,
    /// The PF of an `sriov` VF (`deviceID`), or its `master`/`pfName`.
    #[serde(default, rename = "sriovPFs")]
    pub sriov_pfs: Vec<String>,
    /// `device`, `pciBusID` or `deviceID` of `host-device`.
    #[serde(default)]
    pub host_devices: Vec<String>,
    /// `hostInterface` of `plexus-portmap`.
    #[serde(default)]
    pub portmap_host_interfaces: Vec<String>,
}

/// The kinds of node interface a policy governs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InterfaceKind {
    MacvlanMaster,
    IpvlanMaster,
    VlanMaster,
    Bridge,
    SriovPf,
    HostDevice,
    PortmapHostInterface,
}

impl InterfaceKind {
    pub const ALL: [InterfaceKind; 7] = [
        InterfaceKind::MacvlanMaster,
        InterfaceKind::IpvlanMaster,
        InterfaceKind::VlanMaster,
        InterfaceKind::Bridge,
        InterfaceKind::SriovPf,
        InterfaceKind::HostDevice,
        InterfaceKind::PortmapHostInterface,
    ];

    /// The field of `interfaces` that lists them.
    pub fn field(self) -> &'static str {
        match self {
            InterfaceKind::MacvlanMaster => "macvlanMasters",
            InterfaceKind::IpvlanMaster => "ipvlanMasters",
            InterfaceKind::VlanMaster => "vlanMasters",
            InterfaceKind::Bridge => "bridges",
            InterfaceKind::SriovPf => "sriovPFs",
            InterfaceKind::HostDevice => "hostDevices",
            InterfaceKind::PortmapHostInterface => "portmapHostInterfaces",
        }
    }
}

impl InterfacesSpec {
    fn by_kind(&self, kind: InterfaceKind) -> &[String] {
        match kind {
            InterfaceKind::MacvlanMaster => &self.macvlan_masters,
            InterfaceKind::IpvlanMaster => &self.ipvlan_masters,
            InterfaceKind::VlanMaster => &self.vlan_masters,
            InterfaceKind::Bridge => &self.bridges,
            InterfaceKind::SriovPf => &self.sriov_pfs,
            InterfaceKind::HostDevice => &self.host_devices,
            InterfaceKind::PortmapHostInterface => &self.portmap_host_interfaces,
        }
    }
}

/// One source of rules: a policy object or a document of the policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    /// `metadata.name` of the object.
    pub name: String,
    pub spec: PolicySpec,
}

impl PolicySource {
    /// The source of an object's `spec`, read as JSON so that one malformed object is an error
    /// naming it rather than a list that cannot be read.
    pub fn from_spec(name: &str, spec: &serde_json::Value) -> Result<PolicySource, PolicyError> {
        let spec = match spec {
            serde_json::Value::Null => PolicySpec::default(),
            v => PolicySpec::deserialize(v)
                .map_err(|e| PolicyError::Spec { policy: name.to_owned(), detail: format!("spec: {e}") })?,
        };
        Ok(PolicySource { name: name.to_owned(), spec })
    }
}

/// What is wrong with one policy object; it names the object, the rule and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("NetworkAttachmentPolicy {policy:?}, {rule}: {field}: {source}")]
    Pattern {
        policy: String,
        rule: String,
        field: String,
        #[source]
        source: PatternError,
    },
    #[error("NetworkAttachmentPolicy {policy:?}, {rule}: lists no namespaces; name some, or \"*\" for the default rule")]
    NoNamespaces { policy: String, rule: String },
    #[error(
        "NetworkAttachmentPolicy {policy:?}, {rule}: {namespace:?} is not a namespace name (a DNS-1123 label) nor \"*\""
    )]
    Namespace { policy: String, rule: String, namespace: String },
    #[error(
        "NetworkAttachmentPolicy {policy:?}: namespace {namespace:?} is in {first} and {second}; a namespace has one \
         rule, so merge them"
    )]
    DuplicateNamespace { policy: String, namespace: String, first: String, second: String },
    #[error("NetworkAttachmentPolicy {policy:?}: {detail}")]
    Spec { policy: String, detail: String },
}

/// A compiled rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `"tenants"` or `"rule 2"`.
    pub name: String,
    /// The policy object it comes from.
    pub policy: String,
    pub plugins: Vec<Pattern>,
    pub interfaces: BTreeMap<InterfaceKind, Vec<Pattern>>,
}

impl Rule {
    pub fn interfaces(&self, kind: InterfaceKind) -> &[Pattern] {
        self.interfaces.get(&kind).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {:?} of NetworkAttachmentPolicy {:?}", self.name, self.policy)
    }
}

/// The effective policy: every source's rules, one per namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
    by_namespace: BTreeMap<String, usize>,
    default: Option<usize>,
    /// Objects that are invalid and have no earlier valid version: while there is one, every
    /// attachment is refused (an invalid policy never widens what is allowed).
    invalid: Vec<String>,
    /// Namespaces named by several objects, for the log: the oldest object's rule is used.
    conflicts: Vec<String>,
}

const ANY_NAMESPACE: &str = "*";

impl Policy {
    /// Compiles one source. Errors name the object, the rule and the field.
    pub fn compile_one(source: &PolicySource) -> Result<Vec<(Vec<String>, Rule)>, PolicyError> {
        let policy = &source.name;
        let mut out = Vec::with_capacity(source.spec.rules.len());
        let mut seen: BTreeMap<&str, String> = BTreeMap::new();
        for (i, r) in source.spec.rules.iter().enumerate() {
            let name = r.name.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| format!("rule {}", i + 1));
            let label = format!("rule {name:?}");
            if r.namespaces.is_empty() {
                return Err(PolicyError::NoNamespaces { policy: policy.clone(), rule: label });
            }
            for ns in &r.namespaces {
                if ns != ANY_NAMESPACE && !is_namespace(ns) {
                    return Err(PolicyError::Namespace {
                        policy: policy.clone(),
                        rule: label,
                        namespace: ns.clone(),
                    });
                }
                if let Some(first) = seen.insert(ns, label.clone()) {
                    return Err(PolicyError::DuplicateNamespace {
                        policy: policy.clone(),
                        namespace: ns.clone(),
                        first,
                        second: label,
                    });
                }
            }
            let patterns = |field: &str, items: &[String]| {
                items.iter().map(|p| Pattern::parse(p)).collect::<Result<Vec<_>, _>>().map_err(|source| {
                    PolicyError::Pattern {
                        policy: policy.clone(),
                        rule: label.clone(),
                        field: field.to_owned(),
                        source,
                    }
                })
            };
            let plugins = patterns("plugins", &r.plugins)?;
            let mut interfaces = BTreeMap::new();
            for kind in InterfaceKind::ALL {
                let list = patterns(&format!("interfaces.{}", kind.field()), r.interfaces.by_kind(kind))?;
                if !list.is_empty() {
                    interfaces.insert(kind, list);
                }
            }
            out.push((r.namespaces.clone(), Rule { name, policy: policy.clone(), plugins, interfaces }));
        }
        Ok(out)
    }

    /// The effective policy of several sources, oldest first: a namespace (or `*`) named by
    /// several takes the oldest's rule. `invalid` names objects that could not be compiled and
    /// have no earlier valid version; while any is listed, everything is refused.
    pub fn merge(compiled: Vec<Vec<(Vec<String>, Rule)>>, invalid: Vec<String>) -> Policy {
        let mut p = Policy { invalid, ..Policy::default() };
        for source in compiled {
            for (namespaces, rule) in source {
                let index = p.rules.len();
                let mut used = false;
                for ns in namespaces {
                    let slot = if ns == ANY_NAMESPACE { p.default } else { p.by_namespace.get(&ns).copied() };
                    if let Some(earlier) = slot {
                        p.conflicts.push(format!(
                            "namespace {ns:?} is in {} and in {}; the first (the older object) is used",
                            p.rules[earlier], rule
                        ));
                        continue;
                    }
                    used = true;
                    if ns == ANY_NAMESPACE {
                        p.default = Some(index);
                    } else {
                        p.by_namespace.insert(ns, index);
                    }
                }
                if used {
                    p.rules.push(rule);
                }
            }
        }
        p
    }

    /// Compiles sources (oldest first), failing on the first invalid one.
    pub fn compile(sources: &[PolicySource]) -> Result<Policy, PolicyError> {
        let compiled = sources.iter().map(Policy::compile_one).collect::<Result<Vec<_>, _>>()?;
        Ok(Policy::merge(compiled, Vec::new()))
    }

    /// The rule governing `namespace`.
    pub fn rule_for(&self, namespace: &str) -> Option<&Rule> {
        let index = self.by_namespace.get(namespace).copied().or(self.default)?;
        self.rules.get(index)
    }

    pub fn invalid(&self) -> &[String] {
        &self.invalid
    }

    pub fn conflicts(&self) -> &[String] {
        &self.conflicts
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, yaml: &str) -> PolicySource {
        PolicySource { name: name.into(), spec: serde_yaml::from_str(yaml).expect("spec YAML") }
    }

    #[test]
    fn reads_the_documented_format() {
        let s = source(
            "default",
            r#"
rules:
  - name: tenants
    namespaces: ["*"]
    plugins: [bridge, host-local]
    interfaces:
      bridges: ["br-tenant-*"]
  - namespaces: [nfv, telco]
    plugins: [macvlan, sriov, host-device, ipvlan, vlan, plexus-portmap]
    interfaces:
      macvlanMasters: [eth1]
      ipvlanMasters: [eth2]
      vlanMasters: [eth3]
      sriovPFs: ["ens1f*"]
      hostDevices: ["0000:3b:*"]
      portmapHostInterfaces: [eth0]
"#,
        );
        let p = Policy::compile(&[s]).unwrap();
        let tenants = p.rule_for("anyone").unwrap();
        assert_eq!(tenants.to_string(), r#"rule "tenants" of NetworkAttachmentPolicy "default""#);
        assert_eq!(tenants.interfaces(InterfaceKind::Bridge)[0].as_str(), "br-tenant-*");
        assert!(tenants.interfaces(InterfaceKind::MacvlanMaster).is_empty());
        let nfv = p.rule_for("telco").unwrap();
        assert_eq!(nfv.name, "rule 2");
        for kind in InterfaceKind::ALL.into_iter().filter(|k| *k != InterfaceKind::Bridge) {
            assert_eq!(nfv.interfaces(kind).len(), 1, "{}", kind.field());
        }
        assert_eq!(p.rule_for("nfv"), p.rule_for("telco"));
    }

    #[test]
    fn unknown_fields_are_errors_not_silently_nothing() {
        for yaml in [
            "rules: [{namespaces: [a], plugin: [bridge]}]",
            "rules: [{namespaces: [a], interfaces: {macvlanMaster: [eth1]}}]",
            "rule: []",
        ] {
            let err = serde_yaml::from_str::<PolicySpec>(yaml).unwrap_err().to_string();
            assert!(err.contains("unknown field"), "{yaml}: {err}");
        }
    }

    #[test]
    fn without_a_matching_rule_or_default_there_is_no_rule() {
        let p = Policy::compile(&[source("p", "rules: [{namespaces: [a], plugins: [bridge]}]")]).unwrap();
        assert!(p.rule_for("a").is_some());
        assert!(p.rule_for("b").is_none());
        // An exact rule wins over the default, whatever the order.
        let p = Policy::compile(&[source(
            "p",
            "rules: [{name: all, namespaces: ['*']}, {name: a, namespaces: [a], plugins: [macvlan]}]",
        )])
        .unwrap();
        assert_eq!(p.rule_for("a").unwrap().name, "a");
        assert_eq!(p.rule_for("b").unwrap().name, "all");
    }

    #[test]
    fn invalid_rules_are_refused_naming_object_rule_and_field() {
        let cases = [
            ("rules: [{name: r, namespaces: []}]", "\"p\", rule \"r\": lists no namespaces"),
            ("rules: [{namespaces: [Bad_NS]}]", "\"Bad_NS\" is not a namespace name"),
            (
                "rules: [{namespaces: [a]}, {namespaces: [b, a]}]",
                "namespace \"a\" is in rule \"rule 1\" and rule \"rule 2\"",
            ),
            ("rules: [{namespaces: ['*']}, {namespaces: ['*']}]", "namespace \"*\" is in"),
            ("rules: [{namespaces: [a], plugins: ['']}]", "plugins: an empty string allows nothing"),
            (
                "rules: [{namespaces: [a], interfaces: {sriovPFs: ['ens 1']}}]",
                "interfaces.sriovPFs: \"ens 1\" contains white space",
            ),
        ];
        for (yaml, needle) in cases {
            let err = Policy::compile(&[source("p", yaml)]).unwrap_err().to_string();
            assert!(err.contains(needle), "{yaml}: {err}");
            assert!(err.starts_with("NetworkAttachmentPolicy \"p\""), "{err}");
        }
    }

    #[test]
    fn several_objects_merge_and_the_oldest_wins_a_namespace() {
        let old = source("old", "rules: [{name: a-old, namespaces: [a, '*'], plugins: [bridge]}]");
        let new = source(
            "new",
            "rules: [{name: a-new, namespaces: [a, b], plugins: [macvlan]}, {name: d, namespaces: ['*']}]",
        );
        let p = Policy::compile(&[old, new]).unwrap();
        assert_eq!(p.rule_for("a").unwrap().name, "a-old");
        assert_eq!(p.rule_for("b").unwrap().name, "a-new");
        assert_eq!(p.rule_for("c").unwrap().name, "a-old");
        assert_eq!(p.conflicts().len(), 2, "{:?}", p.conflicts());
        assert!(p.conflicts()[0].contains("namespace \"a\""), "{:?}", p.conflicts());
        // The rule no namespace uses any more is dropped.
        assert_eq!(p.rules().len(), 2);
    }

    #[test]
    fn an_empty_policy_has_no_rules() {
        let p = Policy::compile(&[source("p", "{}")]).unwrap();
        assert!(p.rule_for("a").is_none());
        assert!(p.invalid().is_empty());
    }
}
