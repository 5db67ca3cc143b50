//! Addresses read and written the way Go's `net` package does, because the reference plugins
//! name their allocation files and print their results with it: a file written by plexus must
//! carry the name the reference `host-local` looks for, and the other way round.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// An address as `net.ParseIP` reads it, canonicalised like the reference's `canonicalizeIP`:
/// an IPv4-mapped IPv6 address (`::ffff:10.1.0.5`) is the IPv4 address.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>().ok().map(canonical)
}

/// An address with prefix as `net.ParseCIDR` reads it, host bits kept (`10.1.0.5/24`).
/// IPv4-mapped addresses are left as they are: callers decide (see [`canonical_net`]).
pub fn parse_cidr(text: &str) -> Option<IpNet> {
    // ipnet also accepts a bare address as a full-length prefix; Go does not.
    if !text.contains('/') {
        return None;
    }
    text.parse::<IpNet>().ok()
}

/// An IPv4-mapped address becomes the IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A prefix whose address is IPv4-mapped becomes the IPv4 prefix, as Go prints such a
/// `net.IPNet` (`::ffff:10.1.0.5/120` is `10.1.0.5/24`).
pub fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
            Some(v4) => Ipv4Net::new(v4, v6.prefix_len().saturating_sub(96)).map_or(net, IpNet::V4),
            None => net,
        },
        v4 => v4,
    }
}

/// The text Go's `net.IP.String` gives: RFC 5952 for IPv6, which Rust's `Display` also
/// follows, except that Go prints IPv4-mapped addresses as plain IPv4.
pub fn go_string(ip: IpAddr) -> String {
    canonical(ip).to_string()
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address `value` of the family of `like`; IPv4 keeps the low 32 bits.
pub fn from_u128(value: u128, like: IpAddr) -> IpAddr {
    match like {
        // Truncation is the point: IPv4 arithmetic wraps at 32 bits, as Go's ip.NextIP does.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(value as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(value)),
    }
}

/// The following address, wrapping at the end of the family (the reference's `ip.NextIP`).
pub fn next_ip(ip: IpAddr) -> IpAddr {
    from_u128(to_u128(ip).wrapping_add(1), ip)
}

pub fn same_family(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

/// Whether `ip` is inside `net` (host bits of `net` ignored); false across families.
pub fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpNet::V4(n), IpAddr::V4(a)) => n.trunc().contains(&a),
        (IpNet::V6(n), IpAddr::V6(a)) => n.trunc().contains(&a),
        _ => false,
    }
}

/// The network with `ip`'s family and `prefix` (for results: the allocated address with the
/// subnet's prefix length).
pub fn with_prefix(ip: IpAddr, prefix: u8) -> Option<IpNet> {
    match ip {
        IpAddr::V4(a) => Ipv4Net::new(a, prefix).ok().map(IpNet::V4),
        IpAddr::V6(a) => Ipv6Net::new(a, prefix).ok().map(IpNet::V6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parsing_follows_go() {
        assert_eq!(parse_ip("10.1.0.5"), Some(ip("10.1.0.5")));
        assert_eq!(parse_ip("::ffff:10.1.0.5"), Some(ip("10.1.0.5")));
        assert_eq!(parse_ip("fd00::5"), Some(ip("fd00::5")));
        for bad in ["", "x", "10.1.0.256", "10.1.0.5/24", "fe80::1%eth0", "010.1.0.5", " 10.1.0.5"] {
            assert_eq!(parse_ip(bad), None, "{bad:?}");
        }
        assert_eq!(parse_cidr("10.1.0.5/24").unwrap().to_string(), "10.1.0.5/24");
        for bad in ["10.1.0.5", "10.1.0.5/33", "fd00::/129", "x/24", ""] {
            assert_eq!(parse_cidr(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn mapped_prefixes_print_as_go_prints_them() {
        let n = canonical_net(parse_cidr("::ffff:10.1.0.5/120").unwrap());
        assert_eq!(n.to_string(), "10.1.0.5/24");
        assert_eq!(canonical_net(parse_cidr("fd00::5/64").unwrap()).to_string(), "fd00::5/64");
    }

    #[test]
    fn go_strings_for_file_names() {
        // Expected values are what Go's net.IP.String prints.
        let cases = [
            ("10.1.0.5", "10.1.0.5"),
            ("::ffff:10.1.0.5", "10.1.0.5"),
            ("::1.2.3.4", "::102:304"),
            ("fd00:0:0:1:0:0:0:0", "fd00:0:0:1::"),
            ("0:0:1:0:1:0:0:0", "0:0:1:0:1::"),
            ("1:0:0:1:0:0:1:1", "1::1:0:0:1:1"),
            ("FD00::A", "fd00::a"),
        ];
        for (input, want) in cases {
            assert_eq!(go_string(ip(input)), want, "{input}");
        }
    }

    #[test]
    fn arithmetic_wraps_per_family() {
        assert_eq!(next_ip(ip("10.1.0.255")), ip("10.1.1.0"));
        assert_eq!(next_ip(ip("255.255.255.255")), ip("0.0.0.0"));
        assert_eq!(next_ip(ip("fd00::ffff")), ip("fd00::1:0"));
        assert_eq!(next_ip(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")), ip("::"));
        assert!(net_contains(&"10.1.0.5/24".parse().unwrap(), ip("10.1.0.200")));
        assert!(!net_contains(&"10.1.0.0/24".parse().unwrap(), ip("10.1.1.0")));
        assert!(!net_contains(&"10.1.0.0/24".parse().unwrap(), ip("::ffff:10.1.0.1")));
        assert_eq!(with_prefix(ip("10.1.0.5"), 24).unwrap().to_string(), "10.1.0.5/24");
        assert_eq!(with_prefix(ip("10.1.0.5"), 33), None);
    }
}
