//! CNI versions: which ones plexus speaks, how they order, and the JSON shape of each.

use std::cmp::Ordering;

use super::ResultError;
use crate::cni::SUPPORTED_VERSIONS;

/// Whether plexus can read and write results of CNI version `v`.
pub fn is_supported_version(v: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&v)
}

/// Orders CNI versions semantically; Err for a string that is not MAJOR.MINOR.PATCH.
pub fn compare_versions(a: &str, b: &str) -> Result<Ordering, ResultError> {
    Ok(parse_version(a)?.cmp(&parse_version(b)?))
}

fn parse_version(version: &str) -> Result<(u64, u64, u64), ResultError> {
    let invalid = |reason: String| ResultError::InvalidVersion { version: version.to_owned(), reason };
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3 {
        return Err(invalid(format!(
            "expected MAJOR.MINOR.PATCH, found {} dot-separated parts",
            parts.len()
        )));
    }
    let mut numbers = [0u64; 3];
    for (number, part) in numbers.iter_mut().zip(&parts) {
        // `u64::from_str` alone would accept "+1".
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(format!("{part:?} is not a non-negative integer")));
        }
        *number = part.parse().map_err(|_| invalid(format!("{part:?} is too large")))?;
    }
    Ok((numbers[0], numbers[1], numbers[2]))
}

/// The JSON layouts results have had over the spec's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Shape {
    /// 0.1.0, 0.2.0: a single `ip4` and `ip6`, each with its own routes; no interfaces.
    Legacy,
    /// 0.3.0, 0.3.1, 0.4.0: `interfaces`/`ips`/`routes`, each ip tagged with its family.
    Tagged,
    /// 1.0.0: the family tag is gone.
    V1_0,
    /// 1.1.0: route attributes and interface mtu/socketPath/pciID appear.
    V1_1,
}

impl Shape {
    pub(super) fn of(version: &str) -> Result<Shape, ResultError> {
        let unsupported = || ResultError::UnsupportedVersion { version: version.to_owned() };
        if !is_supported_version(version) {
            return Err(unsupported());
        }
        match version {
            "0.1.0" | "0.2.0" => Ok(Shape::Legacy),
            "0.3.0" | "0.3.1" | "0.4.0" => Ok(Shape::Tagged),
            "1.0.0" => Ok(Shape::V1_0),
            "1.1.0" => Ok(Shape::V1_1),
            // A version added to SUPPORTED_VERSIONS before its shape is taught here.
            _ => Err(unsupported()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::fixtures::ALL;

    #[test]
    fn is_supported_version_accepts_exactly_the_supported_list() {
        for version in ALL {
            assert!(is_supported_version(version), "{version}");
        }
        assert_eq!(SUPPORTED_VERSIONS, ALL);
        for version in ["", "0.0.0", "0.3", "0.5.0", "1.0.1", "1.2.0", "v1.0.0", " 1.0.0"] {
            assert!(!is_supported_version(version), "{version:?}");
        }
    }

    #[test]
    fn compare_versions_orders_numerically_not_lexically() {
        use Ordering::*;
        let cases = [
            ("0.1.0", "0.2.0", Less),
            ("0.4.0", "1.0.0", Less),
            ("1.1.0", "1.0.0", Greater),
            ("0.3.1", "0.3.0", Greater),
            ("0.10.0", "0.9.0", Greater),
            ("1.0.10", "1.0.9", Greater),
            ("1.0.0", "1.0.0", Equal),
            ("01.0.0", "1.0.0", Equal),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_versions(a, b).unwrap(), want, "{a} vs {b}");
        }
        let mut sorted = ALL;
        sorted.reverse();
        sorted.sort_by(|a, b| compare_versions(a, b).unwrap());
        assert_eq!(sorted, ALL);
    }

    #[test]
    fn compare_versions_rejects_strings_that_are_not_major_minor_patch() {
        for bad in
            ["", "1", "1.0", "1.0.0.0", "v1.0.0", "1.0.x", "1..0", "+1.0.0", "1.0.-1", " 1.0.0", "1.0.0-rc1"]
        {
            let err = compare_versions(bad, "1.0.0").unwrap_err();
            assert!(matches!(&err, ResultError::InvalidVersion { version, .. } if version == bad), "{bad:?}");
            assert!(compare_versions("1.0.0", bad).is_err(), "{bad:?}");
        }
        let err = compare_versions("99999999999999999999.0.0", "1.0.0").unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }
}
