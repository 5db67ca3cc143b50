//! Label selectors, as Kubernetes matches them (`metav1.LabelSelectorAsSelector`): every
//! `matchLabels` pair and every `matchExpressions` requirement must hold; an empty selector
//! selects everything.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as ApiSelector;

/// A pod's or a namespace's labels.
pub type Labels = BTreeMap<String, String>;

/// A validated label selector.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// One requirement on one label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    /// The label is set to one of the values (`matchLabels` is `In` with one value).
    In(Vec<String>),
    /// The label is unset or set to none of the values.
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// Why a selector cannot be used: the API server refuses each of these too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("matchExpressions key {key:?}: operator {operator} needs at least one value")]
    NoValues { key: String, operator: String },
    #[error("matchExpressions key {key:?}: operator {operator} takes no values")]
    UnexpectedValues { key: String, operator: String },
    #[error("matchExpressions key {key:?}: unknown operator {operator:?} (In, NotIn, Exists, DoesNotExist)")]
    UnknownOperator { key: String, operator: String },
}

impl Selector {
    /// The selector that selects everything (`{}`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    pub fn from_requirements(requirements: Vec<Requirement>) -> Selector {
        Selector { requirements }
    }

    /// `matchLabels` (each pair an `In` of one value) and `matchExpressions`, validated.
    pub fn from_api(selector: &ApiSelector) -> Result<Selector, SelectorError> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(key, value)| Requirement { key: key.clone(), operator: Operator::In(vec![value.clone()]) })
            .collect();
        for expression in selector.match_expressions.iter().flatten() {
            let key = expression.key.clone();
            let values = expression.values.clone().unwrap_or_default();
            let needs_values = |op: fn(Vec<String>) -> Operator| {
                if values.is_empty() {
                    Err(SelectorError::NoValues { key: key.clone(), operator: expression.operator.clone() })
                } else {
                    Ok(op(values.clone()))
                }
            };
            let no_values = |op: Operator| {
                if values.is_empty() {
                    Ok(op)
                } else {
                    Err(SelectorError::UnexpectedValues {
                        key: key.clone(),
                        operator: expression.operator.clone(),
                    })
                }
            };
            let operator = match expression.operator.as_str() {
                "In" => needs_values(Operator::In)?,
                "NotIn" => needs_values(Operator::NotIn)?,
                "Exists" => no_values(Operator::Exists)?,
                "DoesNotExist" => no_values(Operator::DoesNotExist)?,
                other => return Err(SelectorError::UnknownOperator { key, operator: other.to_owned() }),
            };
            requirements.push(Requirement { key, operator });
        }
        Ok(Selector { requirements })
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl Requirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match &self.operator {
            Operator::In(values) => value.is_some_and(|v| values.contains(v)),
            Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl std::fmt::Display for Selector {
    /// As kubectl prints a selector: `app=web,tier in (a,b),!debug`; `{}` for everything.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.requirements.is_empty() {
            return f.write_str("{}");
        }
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match &r.operator {
                Operator::In(v) if v.len() == 1 => format!("{}={}", r.key, v[0]),
                Operator::In(v) => format!("{} in ({})", r.key, v.join(",")),
                Operator::NotIn(v) => format!("{} notin ({})", r.key, v.join(",")),
                Operator::Exists => r.key.clone(),
                Operator::DoesNotExist => format!("!{}", r.key),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn selector(match_labels: &[(&str, &str)], expressions: Vec<LabelSelectorRequirement>) -> Selector {
        let api = ApiSelector {
            match_labels: (!match_labels.is_empty()).then(|| labels(match_labels)),
            match_expressions: (!expressions.is_empty()).then_some(expressions),
        };
        Selector::from_api(&api).expect("a valid selector")
    }

    #[test]
    fn an_empty_selector_selects_everything_even_no_labels() {
        let s = selector(&[], vec![]);
        assert!(s.is_everything());
        assert!(s.matches(&Labels::new()));
        assert!(s.matches(&labels(&[("app", "web")])));
        assert_eq!(s.to_string(), "{}");
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = selector(&[("app", "web"), ("tier", "front")], vec![]);
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert_eq!(s.to_string(), "app=web,tier=front");
    }

    /// Each operator, with the values multi-networkpolicy-iptables refuses (In with several
    /// values, NotIn, Exists, DoesNotExist) among them.
    #[test]
    fn every_operator_as_kubernetes_matches_it() {
        /// (operator, values, the pod's labels, selected)
        type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], bool);
        let cases: &[Case] = &[
            ("In", &["a", "b"], &[("k", "a")], true),
            ("In", &["a", "b"], &[("k", "b")], true),
            ("In", &["a", "b"], &[("k", "c")], false),
            ("In", &["a", "b"], &[], false),
            ("NotIn", &["a", "b"], &[("k", "c")], true),
            ("NotIn", &["a", "b"], &[("k", "a")], false),
            // A label that is not there is not one of the values.
            ("NotIn", &["a", "b"], &[], true),
            ("Exists", &[], &[("k", "")], true),
            ("Exists", &[], &[("other", "a")], false),
            ("DoesNotExist", &[], &[], true),
            ("DoesNotExist", &[], &[("k", "a")], false),
        ];
        for (operator, values, pod, expected) in cases {
            let s = selector(&[], vec![expression("k", operator, values)]);
            assert_eq!(s.matches(&labels(pod)), *expected, "k {operator} {values:?} on {pod:?}");
        }
    }

    #[test]
    fn labels_and_expressions_together_need_both() {
        let s = selector(&[("app", "web")], vec![expression("debug", "DoesNotExist", &[])]);
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("debug", "1")])));
        assert!(!s.matches(&labels(&[("app", "db")])));
        assert_eq!(s.to_string(), "app=web,!debug");
    }

    #[test]
    fn what_the_api_server_refuses_is_refused_with_the_key() {
        let refused = |e: LabelSelectorRequirement| {
            Selector::from_api(&ApiSelector { match_labels: None, match_expressions: Some(vec![e]) })
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            refused(expression("k", "In", &[])),
            "matchExpressions key \"k\": operator In needs at least one value"
        );
        assert_eq!(
            refused(expression("k", "NotIn", &[])),
            "matchExpressions key \"k\": operator NotIn needs at least one value"
        );
        assert_eq!(
            refused(expression("k", "Exists", &["a"])),
            "matchExpressions key \"k\": operator Exists takes no values"
        );
        assert_eq!(
            refused(expression("k", "DoesNotExist", &["a"])),
            "matchExpressions key \"k\": operator DoesNotExist takes no values"
        );
        assert_eq!(
            refused(expression("k", "Gt", &["1"])),
            "matchExpressions key \"k\": unknown operator \"Gt\" (In, NotIn, Exists, DoesNotExist)"
        );
    }
}
