//! The `host-local` config, read and validated as the reference plugin's `LoadIPAMConfig`
//! and `Range.Canonicalize` (containernetworking/plugins v1.1.1) do: same defaults, same
//! range set order and indexes (they name the `last_reserved_ip.<index>` files), same
//! acceptance. Error messages start with the reference's text and add what to fix.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_json::{Map, Value};

use crate::cni::result::Route;
use crate::ipam::addr::{
    self, canonical, go_string, net_contains, parse_cidr, parse_ip, same_family, to_u128,
};
use crate::ipam::cni_args::{load_args, InvalidValue};
use crate::ipam::netconf;
use crate::ipam::IpamError;

/// Where the reference keeps its allocations when the config names no `dataDir`.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// One canonical range: every address known, `range_start <= range_end`, both in `subnet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The network address and prefix length.
    pub subnet: IpNet,
    pub range_start: IpAddr,
    pub range_end: IpAddr,
    /// Never handed out. It may lie outside the subnet: v1.1.1 no longer requires otherwise.
    pub gateway: IpAddr,
}

impl Range {
    /// The reference's `Range.Contains`: same family, in the subnet, within start..=end.
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_family(ip, self.range_start)
            && net_contains(&self.subnet, ip)
            && to_u128(ip) >= to_u128(self.range_start)
            && to_u128(ip) <= to_u128(self.range_end)
    }

    pub fn overlaps(&self, other: &Range) -> bool {
        same_family(self.range_start, other.range_start)
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }

    /// The subnet's own address, and for IPv4 its broadcast address: never given to a pod,
    /// even when an explicit rangeStart/rangeEnd includes them.
    pub fn is_network_or_broadcast(&self, ip: IpAddr) -> bool {
        ip == self.subnet.network() || (ip.is_ipv4() && ip == self.subnet.broadcast())
    }
}

/// As the reference prints a range in its messages: `<rangeStart>-<rangeEnd>`.
impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", go_string(self.range_start), go_string(self.range_end))
    }
}

/// The ranges one address is allocated from: one family, no overlaps, never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    pub fn range_for(&self, ip: IpAddr) -> Option<&Range> {
        self.0.iter().find(|r| r.contains(ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.range_for(ip).is_some()
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|r| other.0.iter().any(|o| r.overlaps(o)))
    }

    pub fn is_ipv4(&self) -> bool {
        self.0.first().is_some_and(|r| r.range_start.is_ipv4())
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLocalConfig {
    /// The network's name: its allocations live in `<data_dir>/<name>/`.
    pub name: String,
    pub cni_version: String,
    /// Index `i` is the range set whose last allocation is in `last_reserved_ip.<i>`.
    pub ranges: Vec<RangeSet>,
    pub routes: Vec<Route>,
    pub data_dir: PathBuf,
    pub resolv_conf: Option<PathBuf>,
    /// Addresses asked for (CNI_ARGS `IP`, `args.cni.ips`, `runtimeConfig.ips`), without repeats.
    pub requested: Vec<IpAddr>,
}

impl HostLocalConfig {
    pub fn network_dir(&self) -> PathBuf {
        self.data_dir.join(&self.name)
    }
}

/// A range as written, before canonicalisation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RawRange {
    subnet: Option<IpNet>,
    range_start: Option<IpAddr>,
    range_end: Option<IpAddr>,
    gateway: Option<IpAddr>,
}

pub fn parse(netconf: &Value, cni_args: &str) -> Result<HostLocalConfig, IpamError> {
    let common = netconf::common(netconf)?;
    let (ipam, top) = (common.ipam, common.top);

    // What Go's JSON decoding rejects, before anything else.
    let legacy = raw_range(ipam, "ipam")?;
    let ranges = raw_range_sets(ipam.get("ranges"), "ipam.ranges")?;
    let routes = netconf::routes(ipam.get("routes"), "ipam.routes")?;
    let data_dir = netconf::opt_str(ipam.get("dataDir"), "ipam.dataDir")?.filter(|d| !d.is_empty());
    let resolv_conf = netconf::opt_str(ipam.get("resolvConf"), "ipam.resolvConf")?.filter(|r| !r.is_empty());
    let runtime = netconf::opt_object(top.get("runtimeConfig"), "runtimeConfig")?;
    let runtime_ips = match runtime {
        Some(rc) => netconf::str_list(rc.get("ips"), "runtimeConfig.ips")?,
        None => Vec::new(),
    };
    let runtime_ranges = match runtime {
        Some(rc) => raw_range_sets(rc.get("ipRanges"), "runtimeConfig.ipRanges")?,
        None => Vec::new(),
    };
    let args_ips = match netconf::opt_object(top.get("args"), "args")? {
        Some(args) => match netconf::opt_object(args.get("cni"), "args.cni")? {
            Some(cni) => netconf::str_list(cni.get("ips"), "args.cni.ips")?,
            None => Vec::new(),
        },
        None => Vec::new(),
    };

    // Requested addresses: CNI_ARGS, then args, then the runtime's capability.
    let mut requested = Vec::new();
    let mut env_ip = None;
    load_args(cni_args, |key, value| {
        if key != "IP" {
            return Ok(false);
        }
        env_ip = if value.is_empty() {
            None
        } else {
            Some(requested_ip(value).ok_or_else(|| InvalidValue(format!("invalid IP address {value}")))?)
        };
        Ok(true)
    })?;
    requested.extend(env_ip);
    for (source, ips) in [("args.cni.ips", args_ips), ("runtimeConfig.ips", runtime_ips)] {
        for text in ips {
            requested.push(requested_ip(text).ok_or_else(|| {
                IpamError::invalid_config(format!(
                    "invalid IP address {text} (in {source:?}); write an address like \"10.1.0.5\" or \"10.1.0.5/24\""
                ))
            })?);
        }
    }
    let mut unique = Vec::with_capacity(requested.len());
    for ip in requested {
        if !unique.contains(&ip) {
            unique.push(ip);
        }
    }

    // Range sets: the runtime's, then the legacy single range (only when it has a subnet),
    // then `ranges`; the index of each names its last_reserved_ip file.
    let mut raw_sets = runtime_ranges;
    if legacy.subnet.is_some() {
        raw_sets.push(vec![legacy]);
    }
    raw_sets.extend(ranges);
    if raw_sets.is_empty() {
        return Err(IpamError::invalid_config(
            "no IP ranges specified; add \"ranges\": [[{\"subnet\": \"10.1.0.0/24\"}]] to the ipam section",
        ));
    }
    let sets = raw_sets
        .into_iter()
        .enumerate()
        .map(|(i, set)| canonical_set(set).map_err(|source| IpamError::Range { set: i, source }))
        .collect::<Result<Vec<_>, _>>()?;

    let v4 = sets.iter().filter(|s| s.is_ipv4()).count();
    if (v4 > 1 || sets.len() - v4 > 1) && !netconf::allows_many_per_family(&common.cni_version) {
        return Err(IpamError::invalid_config(format!(
            "CNI version {} does not support more than 1 address per family; use cniVersion 0.3.0 or later",
            common.cni_version
        )));
    }
    for (i, a) in sets.iter().enumerate() {
        for (j, b) in sets.iter().enumerate().skip(i + 1) {
            if a.overlaps(b) {
                return Err(IpamError::invalid_config(format!(
                    "range set {i} overlaps with {j}; range sets must not share addresses"
                )));
            }
        }
    }
    Ok(HostLocalConfig {
        name: common.name.to_owned(),
        cni_version: common.cni_version,
        ranges: sets,
        routes,
        data_dir: PathBuf::from(data_dir.unwrap_or(DEFAULT_DATA_DIR)),
        resolv_conf: resolv_conf.map(PathBuf::from),
        requested: unique,
    })
}

/// A requested address as the reference's `ip.IP` reads one: plain, or with a prefix length
/// that is then ignored.
fn requested_ip(text: &str) -> Option<IpAddr> {
    if text.contains('/') {
        parse_cidr(text).map(|n| canonical(n.addr()))
    } else {
        parse_ip(text)
    }
}

fn raw_range(o: &Map<String, Value>, path: &str) -> Result<RawRange, IpamError> {
    let subnet = match netconf::opt_str(o.get("subnet"), &format!("{path}.subnet"))? {
        None | Some("") => None,
        Some(s) => Some(parse_cidr(s).ok_or_else(|| {
            IpamError::invalid_config(format!(
                "invalid CIDR address: {s} (in \"{path}.subnet\"); write the subnet like \"10.1.0.0/24\""
            ))
        })?),
    };
    Ok(RawRange {
        subnet,
        range_start: netconf::opt_ip(o.get("rangeStart"), &format!("{path}.rangeStart"))?,
        range_end: netconf::opt_ip(o.get("rangeEnd"), &format!("{path}.rangeEnd"))?,
        gateway: netconf::opt_ip(o.get("gateway"), &format!("{path}.gateway"))?,
    })
}

fn raw_range_sets(v: Option<&Value>, path: &str) -> Result<Vec<Vec<RawRange>>, IpamError> {
    let shape = "a list of range sets, each a list of {\"subnet\", \"rangeStart\", \"rangeEnd\", \"gateway\"} objects";
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(sets)) => sets
            .iter()
            .enumerate()
            .map(|(i, set)| match set {
                Value::Null => Ok(Vec::new()),
                Value::Array(ranges) => ranges
                    .iter()
                    .enumerate()
                    .map(|(j, r)| match r {
                        Value::Object(o) => raw_range(o, &format!("{path}[{i}][{j}]")),
                        _ => Err(netconf::wrong_type(path, shape)),
                    })
                    .collect(),
                _ => Err(netconf::wrong_type(path, shape)),
            })
            .collect(),
        Some(_) => Err(netconf::wrong_type(path, shape)),
    }
}

/// Why a range or range set is refused; the message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRange(String);

fn invalid_range(msg: impl Into<String>) -> InvalidRange {
    InvalidRange(msg.into())
}

/// The reference's `RangeSet.Canonicalize`.
fn canonical_set(raw: Vec<RawRange>) -> Result<RangeSet, InvalidRange> {
    if raw.is_empty() {
        return Err(invalid_range("empty range set; give each range set at least one {\"subnet\": ...}"));
    }
    let ranges = raw.into_iter().map(canonical_range).collect::<Result<Vec<_>, _>>()?;
    if ranges.iter().any(|r| !same_family(r.range_start, ranges[0].range_start)) {
        return Err(invalid_range("mixed address families; put IPv4 and IPv6 ranges in separate range sets"));
    }
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            if a.overlaps(b) {
                return Err(invalid_range(format!(
                    "subnets {a} and {b} overlap; the ranges of a set must not share addresses"
                )));
            }
        }
    }
    Ok(RangeSet(ranges))
}

/// The reference's `Range.Canonicalize`: defaults for the gateway (.1), rangeStart (.1, the
/// gateway being skipped when allocating) and rangeEnd (the last address, minus the
/// broadcast address for IPv4).
fn canonical_range(raw: RawRange) -> Result<Range, InvalidRange> {
    let Some(given) = raw.subnet else {
        return Err(invalid_range("a range has no \"subnet\"; add one, e.g. \"subnet\": \"10.1.0.0/24\""));
    };
    if given.prefix_len() > given.max_prefix_len() - 2 {
        return Err(invalid_range(format!(
            "Network {given} too small to allocate from; use a subnet with at least two host addresses"
        )));
    }
    // Go keeps the 16-byte mask of an IPv4-mapped subnet while making its address IPv4.
    if let IpNet::V6(v6) = given {
        if v6.addr().to_ipv4_mapped().is_some() {
            return Err(invalid_range(format!(
                "IPNet IP and Mask version mismatch; write the IPv4 subnet {given} as plain IPv4"
            )));
        }
    }
    let subnet = given.trunc();
    if subnet.addr() != given.addr() {
        return Err(invalid_range(format!(
            "Network has host bits set. For a subnet mask of length {} the network address is {}; \
             write the subnet as {subnet}",
            subnet.prefix_len(),
            go_string(subnet.addr())
        )));
    }
    let first = addr::next_ip(subnet.network());
    let gateway = raw.gateway.unwrap_or(first);
    if !same_family(gateway, subnet.addr()) {
        return Err(invalid_range(format!(
            "gateway {} is not of the family of network {subnet}; give a gateway of the subnet's family",
            go_string(gateway)
        )));
    }
    let in_subnet = |ip: IpAddr| same_family(ip, subnet.addr()) && net_contains(&subnet, ip);
    let range_start = match raw.range_start {
        Some(start) => {
            // The reference's Contains also compares with rangeEnd when it is given.
            if !in_subnet(start) || raw.range_end.is_some_and(|end| to_u128(start) > to_u128(end)) {
                return Err(invalid_range(format!(
                    "RangeStart {} not in network {subnet}; rangeStart must be inside the subnet and not \
                     after rangeEnd",
                    go_string(start)
                )));
            }
            start
        }
        None => first,
    };
    let range_end = match raw.range_end {
        Some(end) => {
            if !in_subnet(end) || to_u128(end) < to_u128(range_start) {
                return Err(invalid_range(format!(
                    "RangeEnd {} not in network {subnet}; rangeEnd must be inside the subnet and not \
                     before rangeStart",
                    go_string(end)
                )));
            }
            end
        }
        None => last_ip(&subnet),
    };
    Ok(Range { subnet, range_start, range_end, gateway })
}

/// The last address of the subnet; for IPv4 the one before the broadcast address.
fn last_ip(subnet: &IpNet) -> IpAddr {
    let last = subnet.broadcast();
    match last {
        IpAddr::V4(_) => addr::from_u128(to_u128(last) - 1, last),
        IpAddr::V6(_) => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::CniCode;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn conf(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net", "ipam": ipam})
    }

    fn sets(c: &HostLocalConfig) -> Vec<String> {
        c.ranges.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ranges_syntax_with_defaults() {
        let c = parse(
            &conf(json!({"type": "host-local", "ranges": [
                [{"subnet": "10.1.0.0/24"}, {"subnet": "10.2.0.0/16", "rangeStart": "10.2.1.10", "rangeEnd": "10.2.1.20", "gateway": "10.2.0.254"}],
                [{"subnet": "fd00::/64"}]]})),
            "",
        )
        .unwrap();
        assert_eq!(c.name, "net");
        assert_eq!(
            sets(&c),
            ["10.1.0.1-10.1.0.254,10.2.1.10-10.2.1.20", "fd00::1-fd00::ffff:ffff:ffff:ffff"]
        );
        assert_eq!(c.ranges[0].0[0].gateway, ip("10.1.0.1"));
        assert_eq!(c.ranges[0].0[1].gateway, ip("10.2.0.254"));
        assert_eq!(c.ranges[0].0[1].subnet.to_string(), "10.2.0.0/16");
        assert_eq!(c.ranges[1].0[0].gateway, ip("fd00::1"));
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/cni/networks"));
        assert_eq!(c.network_dir(), PathBuf::from("/var/lib/cni/networks/net"));
        assert_eq!(c.resolv_conf, None);
        assert!(c.requested.is_empty());
    }

    #[test]
    fn legacy_syntax_comes_first_and_runtime_ranges_before_it() {
        let mut v = conf(json!({"type": "host-local", "subnet": "10.3.0.0/24", "gateway": "10.9.9.9",
            "rangeStart": "10.3.0.100", "ranges": [[{"subnet": "10.4.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.3.0.1"}], "dataDir": "/tmp/d", "resolvConf": "/etc/r"}));
        let c = parse(&v, "").unwrap();
        assert_eq!(sets(&c), ["10.3.0.100-10.3.0.254", "10.4.0.1-10.4.0.254"]);
        assert_eq!(c.ranges[0].0[0].gateway, ip("10.9.9.9"), "a gateway outside the subnet is accepted");
        assert_eq!(c.routes.len(), 1);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/d"));
        assert_eq!(c.resolv_conf, Some(PathBuf::from("/etc/r")));
        v["runtimeConfig"] = json!({"ipRanges": [[{"subnet": "10.7.0.0/24"}]]});
        assert_eq!(
            sets(&parse(&v, "").unwrap()),
            ["10.7.0.1-10.7.0.254", "10.3.0.100-10.3.0.254", "10.4.0.1-10.4.0.254"]
        );
        // Legacy keys without a subnet are ignored, as the reference ignores them.
        let c = parse(&conf(json!({"type": "host-local", "rangeStart": "1.2.3.4", "ranges": [[{"subnet": "10.4.0.0/24"}]]})), "")
            .unwrap();
        assert_eq!(sets(&c), ["10.4.0.1-10.4.0.254"]);
    }

    #[test]
    fn defaults_per_family_and_prefix() {
        let one = |subnet: &str| {
            let c = parse(&conf(json!({"type": "host-local", "subnet": subnet})), "").unwrap();
            let r = c.ranges[0].0[0].clone();
            (r.to_string(), r.gateway.to_string())
        };
        assert_eq!(one("10.1.0.0/30"), ("10.1.0.1-10.1.0.2".into(), "10.1.0.1".into()));
        assert_eq!(one("10.1.0.0/16"), ("10.1.0.1-10.1.255.254".into(), "10.1.0.1".into()));
        assert_eq!(one("fd00::/126"), ("fd00::1-fd00::3".into(), "fd00::1".into()));
        assert_eq!(one("0.0.0.0/0").0, "0.0.0.1-255.255.255.254");
    }

    #[test]
    fn requested_addresses_from_every_source() {
        let mut v = conf(json!({"type": "host-local", "subnet": "10.1.0.0/24"}));
        v["args"] = json!({"cni": {"ips": ["10.1.0.52/24", "fd00::52"]}});
        v["runtimeConfig"] = json!({"ips": ["10.1.0.50", "::ffff:10.1.0.51", "10.1.0.52"]});
        let c = parse(&v, "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.99/24").unwrap();
        let want: Vec<IpAddr> =
            ["10.1.0.99", "10.1.0.52", "fd00::52", "10.1.0.50", "10.1.0.51"].iter().map(|s| ip(s)).collect();
        assert_eq!(c.requested, want);
        assert!(parse(&v, "IP=").unwrap().requested.len() == 4);
    }

    #[test]
    fn old_versions_take_one_range_set_per_family() {
        let ipam = json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]});
        let mut v = conf(ipam);
        v["cniVersion"] = json!("0.2.0");
        let err = parse(&v, "").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("CNI version 0.2.0 does not support more than 1 address per family"));
        v["cniVersion"] = json!("0.3.0");
        assert!(parse(&v, "").is_ok());
    }

    #[test]
    fn invalid_configs_give_the_reference_message_and_a_fix() {
        // The expected prefixes are the reference plugin's messages for the same input.
        let cases = [
            (json!({"type": "host-local"}), "no IP ranges specified"),
            (json!({"type": "host-local", "subnet": "10.1.0.0/31"}), "invalid range set 0: Network 10.1.0.0/31 too small to allocate from"),
            (json!({"type": "host-local", "subnet": "fd00::/127"}), "invalid range set 0: Network fd00::/127 too small to allocate from"),
            (
                json!({"type": "host-local", "subnet": "10.1.0.5/24"}),
                "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.1.0.0",
            ),
            (
                json!({"type": "host-local", "subnet": "10.1.0.0/24", "rangeStart": "10.2.0.1"}),
                "invalid range set 0: RangeStart 10.2.0.1 not in network 10.1.0.0/24",
            ),
            (
                json!({"type": "host-local", "subnet": "10.1.0.0/24", "rangeStart": "fd00::1"}),
                "invalid range set 0: RangeStart fd00::1 not in network 10.1.0.0/24",
            ),
            (
                json!({"type": "host-local", "subnet": "10.1.0.0/24", "rangeEnd": "10.1.1.0"}),
                "invalid range set 0: RangeEnd 10.1.1.0 not in network 10.1.0.0/24",
            ),
            (
                json!({"type": "host-local", "subnet": "10.1.0.0/24", "rangeStart": "10.1.0.20", "rangeEnd": "10.1.0.10"}),
                "invalid range set 0: RangeStart 10.1.0.20 not in network 10.1.0.0/24",
            ),
            (json!({"type": "host-local", "ranges": [[]]}), "invalid range set 0: empty range set"),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "fd00::/64"}]]}),
                "invalid range set 0: mixed address families",
            ),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]}),
                "invalid range set 0: subnets 10.1.0.1-10.1.0.254 and 10.1.0.1-10.1.0.126 overlap",
            ),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/25"}]]}),
                "range set 0 overlaps with 1",
            ),
            (
                json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24", "rangeEnd": "10.1.0.100"}], [{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.100"}]]}),
                "range set 0 overlaps with 1",
            ),
            (json!({"type": "host-local", "subnet": "bogus"}), "invalid CIDR address: bogus"),
            (json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "x"}]]}), "invalid IP address: x"),
            (json!({"type": "host-local", "ranges": [[{}]]}), "invalid range set 0: a range has no \"subnet\""),
            (json!({"type": "host-local", "ranges": "x"}), "the IPAM config key \"ipam.ranges\" must be a list of range sets"),
            (json!({"type": "host-local", "ranges": [["x"]]}), "the IPAM config key \"ipam.ranges\" must be a list of range sets"),
            (json!({"type": "host-local", "subnet": "10.1.0.0/24", "gateway": "fd00::1"}), "invalid range set 0: gateway fd00::1 is not of the family"),
            (json!({"type": "host-local", "subnet": "::ffff:10.1.0.0/120"}), "invalid range set 0: IPNet IP and Mask version mismatch"),
            (json!({"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": 5}), "the IPAM config key \"ipam.dataDir\""),
        ];
        for (ipam, want) in cases {
            let err = parse(&conf(ipam.clone()), "").unwrap_err();
            assert_eq!(err.cni_code().code(), 7, "{ipam}");
            assert!(err.to_string().starts_with(want), "{ipam}:\n got {}\nwant {want}", err);
            assert!(err.to_string().len() > want.len(), "{ipam}: the message says what to fix: {err}");
        }
    }

    #[test]
    fn invalid_requests_are_errors() {
        let v = conf(json!({"type": "host-local", "subnet": "10.1.0.0/24"}));
        for (args, want) in [
            (
                "IP=10.1.0.300",
                r#"ARGS: error parsing value of pair "IP=10.1.0.300": invalid IP address 10.1.0.300"#,
            ),
            ("IP=10.1.0.98,10.1.0.97", r#"ARGS: error parsing value of pair "IP=10.1.0.98,10.1.0.97""#),
            ("K8S_POD_NAME=x", r#"ARGS: unknown args ["K8S_POD_NAME=x"]"#),
            ("IP", r#"ARGS: invalid pair "IP""#),
        ] {
            let err = parse(&v, args).unwrap_err();
            assert_eq!(err.cni_code().code(), 4, "{args}");
            assert!(err.to_string().starts_with(want), "{args}: {}", err);
        }
        let mut v2 = v.clone();
        v2["runtimeConfig"] = json!({"ips": ["x"]});
        assert!(parse(&v2, "").unwrap_err().to_string().starts_with("invalid IP address x"));
        let mut v3 = v.clone();
        v3["args"] = json!({"cni": {"ips": "10.1.0.5"}});
        assert!(parse(&v3, "").unwrap_err().to_string().contains("args.cni.ips"));
    }

    #[test]
    fn range_membership_and_overlap() {
        let c = parse(
            &conf(json!({"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24", "rangeStart": "10.1.0.10", "rangeEnd": "10.1.0.20"}]]})),
            "",
        )
        .unwrap();
        let r = &c.ranges[0].0[0];
        assert!(r.contains(ip("10.1.0.10")) && r.contains(ip("10.1.0.20")) && r.contains(ip("10.1.0.15")));
        assert!(!r.contains(ip("10.1.0.9")) && !r.contains(ip("10.1.0.21")) && !r.contains(ip("fd00::10")));
        assert!(r.is_network_or_broadcast(ip("10.1.0.0")) && r.is_network_or_broadcast(ip("10.1.0.255")));
        assert!(!r.is_network_or_broadcast(ip("10.1.0.1")));
        let other = |start: &str, end: &str| Range {
            subnet: "10.1.0.0/24".parse().unwrap(),
            range_start: ip(start),
            range_end: ip(end),
            gateway: ip("10.1.0.1"),
        };
        assert!(r.overlaps(&other("10.1.0.20", "10.1.0.30")));
        assert!(r.overlaps(&other("10.1.0.1", "10.1.0.10")));
        assert!(r.overlaps(&other("10.1.0.1", "10.1.0.100")), "one around the other");
        assert!(!r.overlaps(&other("10.1.0.21", "10.1.0.30")));
        let v6 = Range {
            subnet: "fd00::/64".parse().unwrap(),
            range_start: ip("fd00::1"),
            range_end: ip("fd00::ff"),
            gateway: ip("fd00::1"),
        };
        assert!(!r.overlaps(&v6) && !v6.overlaps(r));
        assert!(v6.is_network_or_broadcast(ip("fd00::")));
        assert!(!v6.is_network_or_broadcast(ip("fd00::ffff:ffff:ffff:ffff")), "IPv6 has no broadcast");
    }
}
