//! The names a policy rule allows: exact names, `*` for anything, and simple globs in which
//! `*` stands for any run of characters (`eth*`, `vf-*`, `0000:3b:*`).

use std::fmt;

/// One allowed name or glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

/// A pattern a person wrote that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("an empty string allows nothing; remove it or write a name")]
    Empty,
    #[error("{0:?} contains white space or a control character; names and globs have none")]
    Whitespace(String),
}

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(PatternError::Whitespace(text.to_owned()));
        }
        Ok(Pattern(text.to_owned()))
    }

    /// `*` alone: allows every name, and also what cannot be named in advance (a macvlan
    /// master taken from the default route, an SR-IOV PF not found on this node).
    pub fn is_any(&self) -> bool {
        self.0 == "*"
    }

    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether any of `patterns` matches `name`.
pub fn any_matches(patterns: &[Pattern], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

/// Whether `patterns` allow a name that is not known (only `*` does).
pub fn allows_unknown(patterns: &[Pattern]) -> bool {
    patterns.iter().any(Pattern::is_any)
}

/// The patterns for a message: `eth1, vf-*`, or `none`.
pub fn list(patterns: &[Pattern]) -> String {
    if patterns.is_empty() {
        return "none".into();
    }
    patterns.iter().map(Pattern::as_str).collect::<Vec<_>>().join(", ")
}

/// `*` matches any run of bytes; everything else matches itself. Iterative with one
/// backtrack point, so the time is linear in practice and never exponential.
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, n: &str) -> bool {
        Pattern::parse(p).unwrap().matches(n)
    }

    #[test]
    fn exact_names_match_only_themselves() {
        assert!(m("eth1", "eth1"));
        assert!(!m("eth1", "eth10"));
        assert!(!m("eth1", "eth"));
        assert!(!m("eth1", "ETH1"));
        assert!(!m("eth1", ""));
    }

    #[test]
    fn a_star_matches_any_run_including_none() {
        assert!(m("*", "anything"));
        assert!(m("*", ""));
        assert!(m("eth*", "eth"));
        assert!(m("eth*", "eth12"));
        assert!(!m("eth*", "veth0"));
        assert!(m("vf-*", "vf-3"));
        assert!(!m("vf-*", "vf3"));
        assert!(m("*-pf", "ens1-pf"));
        assert!(m("ens*f*", "ens1f0"));
        assert!(!m("ens*f*", "ens10"));
        assert!(m("0000:3b:*", "0000:3b:02.1"));
        assert!(m("a*b*c", "aXXbYYbc"));
        assert!(!m("a*b*c", "aXXbYYbd"));
        assert!(m("**", "x"));
    }

    #[test]
    fn pathological_globs_stay_fast() {
        let name = "a".repeat(10_000);
        let started = std::time::Instant::now();
        assert!(!m("*a*a*a*a*a*a*a*a*b", &name));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn only_a_lone_star_allows_the_unknown() {
        let ps = |v: &[&str]| v.iter().map(|p| Pattern::parse(p).unwrap()).collect::<Vec<_>>();
        assert!(allows_unknown(&ps(&["eth1", "*"])));
        assert!(!allows_unknown(&ps(&["eth*", "**"])));
        assert!(!allows_unknown(&[]));
        assert_eq!(list(&ps(&["eth1", "vf-*"])), "eth1, vf-*");
        assert_eq!(list(&[]), "none");
    }

    #[test]
    fn empty_and_blank_patterns_are_refused() {
        assert_eq!(Pattern::parse(""), Err(PatternError::Empty));
        assert!(matches!(Pattern::parse("eth 1"), Err(PatternError::Whitespace(_))));
        assert!(matches!(Pattern::parse("eth1\n"), Err(PatternError::Whitespace(_))));
    }
}
