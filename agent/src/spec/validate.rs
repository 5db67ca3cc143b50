//! Validators for the values the spec constrains: object names, interface names, MACs, IPs.

use std::net::IpAddr;

/// DNS-1123 label: lower-case alphanumerics and '-', alphanumeric at both ends, at most 63.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && has_dns1123_label_format(s)
}

/// The DNS-1123 label format without its length limit: lower-case alphanumerics and '-',
/// alphanumeric at both ends.
fn has_dns1123_label_format(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// NAD names are "comprised of units of the DNS-1123 label format" (spec 3.3): units
/// joined by dots, as Kubernetes validates object names (at most 253 characters). The spec
/// only recommends 63 characters or less per unit, and Kubernetes accepts longer ones, so
/// a longer unit is a valid name.
pub fn is_nad_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(has_dns1123_label_format)
}

/// Namespaces are single DNS-1123 labels.
pub fn is_namespace(s: &str) -> bool {
    is_dns1123_label(s)
}

/// A name the kernel accepts for a network interface (`dev_valid_name`): 1 to 15 bytes,
/// not "." or "..", no '/', ':' or white space.
pub fn is_kernel_ifname(s: &str) -> bool {
    kernel_ifname_problem(s).is_none()
}

/// Why the kernel refuses `name` as an interface name (`dev_valid_name`), or `None` when it
/// accepts it. White space is the kernel's `isspace` (lib/ctype.c) applied to each byte: the
/// ASCII `\t \n \v \f \r` and space, and also 0xA0, so that a UTF-8 character containing that
/// byte (such as 'à', C3 A0) is refused too.
pub fn kernel_ifname_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name.len() > 15 {
        return Some(format!("it is {} bytes long, the kernel's limit is 15", name.len()));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is a path component"));
    }
    let refused = |c: char| {
        let mut buf = [0; 4];
        c.encode_utf8(&mut buf).bytes().any(|b| matches!(b, b'/' | b':' | 0 | b'\t'..=b'\r' | b' ' | 0xA0))
    };
    name.chars().find(|&c| refused(c)).map(|c| format!("it contains {c:?}"))
}

/// A 6-byte Ethernet or 20-byte IP-over-InfiniBand hardware address (spec 4.1.2.1.4), as
/// hex pairs separated by ':' or '-'.
pub fn is_mac(s: &str) -> bool {
    let sep = if s.contains('-') { '-' } else { ':' };
    let parts: Vec<&str> = s.split(sep).collect();
    (parts.len() == 6 || parts.len() == 20)
        && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// An 8-byte InfiniBand GUID (spec 4.1.2.1.10, the lower 8 bytes of the 20-byte
/// IP-over-InfiniBand hardware address): eight hex pairs separated by ':', as the spec's
/// example and the `infinibandGUID` capability of CNI CONVENTIONS write it.
pub fn is_infiniband_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 8 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

/// An IPv4 or IPv6 address with an optional prefix length within the family's bounds.
pub fn parse_ip_with_optional_prefix(s: &str) -> Option<(IpAddr, Option<u8>)> {
    let (addr, prefix) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let prefix = match prefix {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
            let n: u8 = p.parse().ok()?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if n > max {
                return None;
            }
            Some(n)
        }
        Some(_) => return None,
    };
    Some((ip, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        for ok in ["a", "net-a", "0abc", "a0", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "ä", &"a".repeat(64)] {
            assert!(!is_dns1123_label(bad), "{bad}");
        }
    }

    #[test]
    fn nad_names_are_dot_joined_labels() {
        assert!(is_nad_name("a-bridge-network"));
        assert!(is_nad_name("sriov.vendor-a"));
        assert!(!is_nad_name("a..b"));
        assert!(!is_nad_name("Net"));
        assert!(!is_nad_name(&format!("{}.{}", "a".repeat(63), "b".repeat(200))));
        assert!(is_nad_name(&"a".repeat(64)), "63 characters per unit is only recommended");
    }

    #[test]
    fn kernel_interface_names() {
        for ok in ["net1", "eth0", "a", "veth-1234567890", "ib0.8001", "x@y"] {
            assert!(is_kernel_ifname(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "a\tb", "0123456789abcdef"] {
            assert!(!is_kernel_ifname(bad), "{bad}");
        }
    }

    /// The kernel's `isspace` is ASCII white space including the vertical tab, and byte 0xA0
    /// (checked against the running kernel: `ip link add name $'a\xc3\xa0' type veth` is
    /// EINVAL, `$'a\xc3\xa9'` is created).
    #[test]
    fn kernel_white_space_is_lib_ctype_s() {
        for bad in ["a\u{b}b", "a\u{c}b", "a\rb", "a\nb", "aà", "a\u{a0}", "\u{2a0}"] {
            assert!(!is_kernel_ifname(bad), "{bad:?}");
            assert!(kernel_ifname_problem(bad).is_some_and(|p| p.starts_with("it contains")), "{bad:?}");
        }
        for ok in ["aé", "a\u{85}", "é\u{1f}", "net\u{7f}", "ñ"] {
            assert!(is_kernel_ifname(ok), "{ok:?}");
        }
        assert_eq!(kernel_ifname_problem("aà").as_deref(), Some("it contains 'à'"));
        assert_eq!(kernel_ifname_problem("a\u{b}b").as_deref(), Some("it contains '\\u{b}'"));
    }

    #[test]
    fn macs_of_six_and_twenty_bytes() {
        assert!(is_mac("02:23:45:67:89:01"));
        assert!(is_mac("02-23-45-67-89-0A"));
        assert!(is_mac("80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22"));
        for bad in ["", "02:23:45:67:89", "02:23:45:67:89:01:02:03", "0g:23:45:67:89:01", "2:23:45:67:89:01"]
        {
            assert!(!is_mac(bad), "{bad}");
        }
        assert!(!is_mac("02:23-45:67:89:01"));
    }

    #[test]
    fn infiniband_guids_are_eight_colon_separated_bytes() {
        for ok in ["24:8a:07:03:00:8d:ae:2f", "00:00:00:00:00:00:00:00", "FF:ff:0A:0b:c0:d1:e2:F3"] {
            assert!(is_infiniband_guid(ok), "{ok}");
        }
        for bad in [
            "",
            "24:8a:07:03:00:8d:ae",
            "24:8a:07:03:00:8d:ae:2f:00",
            "24-8a-07-03-00-8d-ae-2f",
            "248a:0703:008d:ae2f",
            "24:8a:07:03:00:8d:ae:2g",
            "24:8a:07:03:00:8d:ae:2",
            "24:8a:07:03:00:8d:ae:2f:",
            "80:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22",
        ] {
            assert!(!is_infiniband_guid(bad), "{bad}");
        }
    }

    #[test]
    fn ips_with_optional_prefix() {
        assert_eq!(
            parse_ip_with_optional_prefix("10.2.2.42/24"),
            Some(("10.2.2.42".parse().unwrap(), Some(24)))
        );
        assert_eq!(
            parse_ip_with_optional_prefix("2001:db8::5"),
            Some(("2001:db8::5".parse().unwrap(), None))
        );
        assert_eq!(parse_ip_with_optional_prefix("2001:db8::5/128").unwrap().1, Some(128));
        for bad in ["", "10.2.2.42/33", "2001:db8::5/129", "10.2.2/24", "10.2.2.42/", "10.2.2.42/-1", "x"] {
            assert_eq!(parse_ip_with_optional_prefix(bad), None, "{bad}");
        }
    }
}
