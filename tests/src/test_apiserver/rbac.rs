//! Authorization by ClusterRole rules, as the API server's RBAC authorizer applies them: a
//! request is allowed when one rule names its API group, resource and verb (or `*`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

impl Rule {
    fn allows(&self, group: &str, resource: &str, verb: &str) -> bool {
        let has = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        has(&self.api_groups, group) && has(&self.resources, resource) && has(&self.verbs, verb)
    }
}

/// The rules of a ClusterRole object (as parsed from YAML or JSON).
pub fn rules_of(cluster_role: &Value) -> Vec<Rule> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    cluster_role["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| Rule {
                    api_groups: strings(&r["apiGroups"]),
                    resources: strings(&r["resources"]),
                    verbs: strings(&r["verbs"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn allowed(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| r.allows(group, resource, verb))
}

/// The rules of the ClusterRole the DaemonSet runs with (`deploy/rbac.yaml`).
pub fn deploy_rules() -> Vec<Rule> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/rbac.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("rbac.yaml is YAML");
        if v["kind"] == "ClusterRole" {
            return rules_of(&v);
        }
    }
    panic!("no ClusterRole in {}", path.display());
}
