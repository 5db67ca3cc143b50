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
