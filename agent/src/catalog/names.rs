//! Kubernetes object names as the API server accepts them. Names that reach plexus from
//! outside (CNI_ARGS, manifest files) are checked here before they touch a path or a
//! lookup: a name the API server would refuse names no pod, and `../x` must never become
//! a file name.

use std::fmt;

/// The two rules the API server applies to the names plexus reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Namespaces: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
    Dns1123Label,
    /// Pods and NetworkAttachmentDefinitions: DNS-1123 labels joined by '.', at most 253
    /// characters in all.
    Dns1123Subdomain,
}

impl Rule {
    pub fn max_len(self) -> usize {
        match self {
            Rule::Dns1123Label => 63,
            Rule::Dns1123Subdomain => 253,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rule::Dns1123Label => {
                "a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting and ending with a \
                 letter or digit)"
            }
            Rule::Dns1123Subdomain => {
                "a DNS-1123 subdomain (at most 253 lowercase letters, digits, '-' and '.', each '.'-separated \
                 part starting and ending with a letter or digit)"
            }
        })
    }
}

/// What is wrong with a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Empty,
    TooLong {
        len: usize,
    },
    /// A character the rule does not allow, at this byte offset.
    Character {
        c: char,
        at: usize,
    },
    /// A part (the whole name for a label) starts or ends with something else than a
    /// letter or digit, or is empty (`a..b`, `.a`, `a.`).
    Edge {
        at: usize,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Empty => f.write_str("it is empty"),
            Problem::TooLong { len } => write!(f, "it is {len} characters long"),
            Problem::Character { c, at } => write!(f, "{c:?} at offset {at} is not allowed"),
            Problem::Edge { at } => write!(f, "offset {at} must be a lowercase letter or digit"),
        }
    }
}

/// A name that breaks its rule; the message says which name, what is wrong and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {shown} is invalid: {problem}; it must be {rule}")]
pub struct InvalidName {
    /// What the name is of, as the reader knows it: "K8S_POD_NAME", "pod name", ….
    pub what: String,
    /// The name as shown: quoted, escaped, cut short when long.
    pub shown: String,
    pub problem: Problem,
    pub rule: Rule,
}

/// Checks a namespace name (a DNS-1123 label).
pub fn check_namespace(what: &str, value: &str) -> Result<(), InvalidName> {
    check(what, value, Rule::Dns1123Label)
}

/// Checks the name of a pod or NetworkAttachmentDefinition (a DNS-1123 subdomain).
pub fn check_object_name(what: &str, value: &str) -> Result<(), InvalidName> {
    check(what, value, Rule::Dns1123Subdomain)
}

pub fn check(what: &str, value: &str, rule: Rule) -> Result<(), InvalidName> {
    problem(value, rule).map_or(Ok(()), |problem| {
        Err(InvalidName { what: what.to_owned(), shown: shown(value), problem, rule })
    })
}

/// The first problem of `value` under `rule`, or `None` when it is valid.
pub fn problem(value: &str, rule: Rule) -> Option<Problem> {
    if value.is_empty() {
        return Some(Problem::Empty);
    }
    let dots = rule == Rule::Dns1123Subdomain;
    if let Some((at, c)) =
        value.char_indices().find(|&(_, c)| !(is_alnum(c) || c == '-' || (dots && c == '.')))
    {
        return Some(Problem::Character { c, at });
    }
    // ASCII from here on: bytes are characters.
    if value.len() > rule.max_len() {
        return Some(Problem::TooLong { len: value.len() });
    }
    // Every part (between dots) is non-empty and starts and ends with a letter or digit.
    let bytes = value.as_bytes();
    let mut start = 0;
    for part in value.split('.') {
        let end = start + part.len();
        if part.is_empty() || !is_alnum(char::from(bytes[start])) {
            return Some(Problem::Edge { at: start });
        }
        if !is_alnum(char::from(bytes[end - 1])) {
            return Some(Problem::Edge { at: end - 1 });
        }
        start = end + 1;
    }
    None
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A hostile name can be long or hold control characters: quote and escape it, and cut it.
fn shown(value: &str) -> String {
    const MAX: usize = 64;
    if value.chars().count() <= MAX {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(MAX).collect();
        format!("{head:?}… ({} characters)", value.chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: Rule = Rule::Dns1123Label;
    const SUB: Rule = Rule::Dns1123Subdomain;

    #[test]
    fn valid_names() {
        for v in ["a", "0", "default", "kube-system", "a-b-c", "a1", "9z", "a--b"] {
            assert_eq!(problem(v, LABEL), None, "{v}");
            assert_eq!(problem(v, SUB), None, "{v}");
        }
        for v in ["a.b", "web-0.example", "1.2.3", "a-b.c-d.e"] {
            assert_eq!(problem(v, SUB), None, "{v}");
        }
        assert_eq!(problem(&"a".repeat(63), LABEL), None);
        assert_eq!(problem(&"a".repeat(253), SUB), None);
        // The API server has no per-part limit in a subdomain.
        assert_eq!(problem(&format!("{}.b", "a".repeat(100)), SUB), None);
    }

    #[test]
    fn empty_and_too_long() {
        assert_eq!(problem("", LABEL), Some(Problem::Empty));
        assert_eq!(problem("", SUB), Some(Problem::Empty));
        assert_eq!(problem(&"a".repeat(64), LABEL), Some(Problem::TooLong { len: 64 }));
        assert_eq!(problem(&"a".repeat(254), SUB), Some(Problem::TooLong { len: 254 }));
        // A long name of characters outside the alphabet is told about the characters.
        assert_eq!(problem(&"é".repeat(40), LABEL), Some(Problem::Character { c: 'é', at: 0 }));
    }

    #[test]
    fn characters_outside_the_alphabet() {
        for (v, c, at) in [
            ("../x", '/', 2),
            ("a/b", '/', 1),
            ("Web", 'W', 0),
            ("a_b", '_', 1),
            ("a b", ' ', 1),
            ("a\0b", '\0', 1),
            ("a\nb", '\n', 1),
            ("pöd", 'ö', 1),
            ("a:b", ':', 1),
            ("a\\b", '\\', 1),
        ] {
            assert_eq!(problem(v, SUB), Some(Problem::Character { c, at }), "{v:?}");
        }
        // A dot is a character a label does not allow.
        assert_eq!(problem("a.b", LABEL), Some(Problem::Character { c: '.', at: 1 }));
        assert_eq!(problem("..", LABEL), Some(Problem::Character { c: '.', at: 0 }));
    }

    #[test]
    fn edges_of_every_part() {
        for (v, at) in [
            ("-a", 0),
            ("a-", 1),
            ("-", 0),
            (".", 0),
            ("..", 0),
            ("...", 0),
            (".a", 0),
            ("a.", 2),
            ("a..b", 2),
            ("a.-b", 2),
            ("a-.b", 1),
            ("a.b-", 3),
        ] {
            assert_eq!(problem(v, SUB), Some(Problem::Edge { at }), "{v:?}");
        }
        assert_eq!(problem("-a", LABEL), Some(Problem::Edge { at: 0 }));
        assert_eq!(problem("a-", LABEL), Some(Problem::Edge { at: 1 }));
    }

    #[test]
    fn messages_name_the_value_the_problem_and_the_rule() {
        let e = check_object_name("K8S_POD_NAME", "../../../../x").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("K8S_POD_NAME \"../../../../x\" is invalid: "), "{msg}");
        assert!(msg.contains("offset 2"), "{msg}");
        assert!(msg.contains("DNS-1123 subdomain"), "{msg}");
        let msg = check_namespace("K8S_POD_NAMESPACE", "a/b").unwrap_err().to_string();
        assert!(msg.contains("'/' at offset 1 is not allowed"), "{msg}");
        assert!(msg.contains("DNS-1123 label"), "{msg}");
        // Control characters are escaped, long names cut.
        let msg = check_namespace("namespace", "a\nb").unwrap_err().to_string();
        assert!(msg.contains(r#""a\nb""#), "{msg}");
        let msg = check_namespace("namespace", &"x".repeat(5000)).unwrap_err().to_string();
        assert!(msg.len() < 500, "{msg}");
        assert!(msg.contains("(5000 characters)"), "{msg}");
        assert!(check_namespace("namespace", "ok").is_ok());
        assert!(check_object_name("pod name", "web-0.a").is_ok());
    }
}
