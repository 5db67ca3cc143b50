//! CNI results of every spec version, read into and written from one canonical model.
//!
//! The model is the CNI 1.1.0 result. Older shapes are converted the way libcni's
//! `convertTo*`/`convertFrom*` functions (pkg/types/020, 040, 100) do, so a runtime
//! reading what plexus emits sees what a libcni-based plugin would have printed.
//!
//! Parsing is deliberately lenient where libcni is (unknown fields, `null`, empty
//! strings standing for "unset") and strict where a wrong value would mislead whoever
//! consumes the result (wrong JSON types, unparsable addresses, an `ips[].version` or
//! `ip4`/`ip6` contradicting the address, an interface index pointing nowhere).
//!
//! Route attributes and interface mtu/socketPath/pciID are read whatever the version, because
//! current libcni shares those types across versions and so prints them in 1.0.0 results too;
//! they are written only for 1.1.0.

use std::cmp::Ordering;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value};

use crate::cni::SUPPORTED_VERSIONS;

/// A CNI result in the CNI 1.1.0 shape, whatever version it was read from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CniResult {
    /// The version the result was read in; [`CniResult::to_version`] ignores it.
    pub cni_version: String,
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    pub name: String,
    /// Kept as text: InfiniBand hardware addresses are 20 bytes, not 6.
    pub mac: Option<String>,
    /// CNI 1.1.0 only.
    pub mtu: Option<u32>,
    /// Netns path (or hypervisor id) for sandbox interfaces; `None` for host interfaces.
    pub sandbox: Option<String>,
    /// CNI 1.1.0 only.
    pub socket_path: Option<String>,
    /// CNI 1.1.0 only.
    pub pci_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with its prefix, host bits kept ("10.1.0.5/16").
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
    /// Index into [`CniResult::interfaces`]; 0.1.0/0.2.0 results cannot carry it.
    pub interface: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    /// The remaining fields are CNI 1.1.0 only.
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    /// True when no member carries information (libcni's `DNS.IsEmpty`).
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.as_deref().is_none_or(str::is_empty)
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("unsupported CNI version {version:?}: plexus supports {}", SUPPORTED_VERSIONS.join(", "))]
    UnsupportedVersion { version: String },
    #[error("malformed CNI result: {field}: {reason}")]
    Malformed { field: String, reason: String },
    #[error("invalid CNI version {version:?}: {reason}")]
    InvalidVersion { version: String, reason: String },
    #[error("cannot express the result in CNI version {version}: {reason}")]
    Unconvertible { version: String, reason: String },
}

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
enum Shape {
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
    fn of(version: &str) -> Result<Shape, ResultError> {
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

impl CniResult {
    /// Parses a result JSON object. The version is its "cniVersion" field; `fallback_version` is used
    /// when that field is absent (plugins of old versions sometimes omit it).
    pub fn parse(value: &Value, fallback_version: &str) -> Result<CniResult, ResultError> {
        let top = Obj::new(value, String::new())?;
        // libcni reads an empty cniVersion as "from before versioning", same as an absent one.
        let version = match top.string("cniVersion")? {
            Some(v) if !v.is_empty() => v.to_owned(),
            _ => fallback_version.to_owned(),
        };
        let shape = Shape::of(&version)?;
        let mut result = CniResult { cni_version: version, dns: parse_dns(&top)?, ..Default::default() };
        if shape == Shape::Legacy {
            for (key, want_v4) in [("ip4", true), ("ip6", false)] {
                if let Some(ip) = top.object(key)? {
                    let (config, routes) = parse_legacy_ip(&ip, want_v4)?;
                    result.ips.push(config);
                    result.routes.extend(routes);
                }
            }
        } else {
            result.interfaces = top.list("interfaces", |o| parse_interface(&o))?;
            let interface_count = result.interfaces.len();
            result.ips = top.list("ips", |o| parse_ip(&o, shape, interface_count))?;
            result.routes = top.list("routes", |o| parse_route(&o))?;
        }
        Ok(result)
    }

    /// The result as the JSON object of CNI `version` (sets "cniVersion" to it). Errors for an
    /// unsupported version, and for a result 0.1.0/0.2.0 cannot express at all (no IP address),
    /// which libcni refuses too. Going down to 0.1.0/0.2.0 keeps only the first IP of each family
    /// and the routes of the families kept, as libcni's `convertTo02x` does.
    pub fn to_version(&self, version: &str) -> Result<Value, ResultError> {
        let shape = Shape::of(version)?;
        let mut out = Map::new();
        out.insert("cniVersion".into(), version.into());
        if shape == Shape::Legacy {
            self.emit_legacy(version, &mut out)?;
        } else {
            if !self.interfaces.is_empty() {
                let interfaces = self.interfaces.iter().map(|i| emit_interface(i, shape)).collect();
                out.insert("interfaces".into(), Value::Array(interfaces));
            }
            if !self.ips.is_empty() {
                out.insert(
                    "ips".into(),
                    Value::Array(self.ips.iter().map(|ip| emit_ip(ip, shape)).collect()),
                );
            }
            if !self.routes.is_empty() {
                let routes = self.routes.iter().map(|r| emit_route(r, shape == Shape::V1_1)).collect();
                out.insert("routes".into(), Value::Array(routes));
            }
        }
        // Before 1.0.0 libcni declares `dns` as a plain struct, which Go's omitempty never omits;
        // types100 deletes it when empty.
        if shape < Shape::V1_0 || !self.dns.is_empty() {
            out.insert("dns".into(), emit_dns(&self.dns));
        }
        Ok(Value::Object(out))
    }

    /// Index of the first interface with a non-empty sandbox, if any.
    pub fn first_sandbox_interface(&self) -> Option<usize> {
        self.interfaces.iter().position(|i| i.sandbox.as_deref().is_some_and(|s| !s.is_empty()))
    }

    fn emit_legacy(&self, version: &str, out: &mut Map<String, Value>) -> Result<(), ResultError> {
        let first_of = |v4: bool| self.ips.iter().find(|ip| is_v4(&ip.address) == v4);
        let (ip4, ip6) = (first_of(true), first_of(false));
        if ip4.is_none() && ip6.is_none() {
            return Err(ResultError::Unconvertible {
                version: version.to_owned(),
                reason: "it has no IP address, and 0.1.0/0.2.0 results consist of an ip4 and/or ip6".into(),
            });
        }
        for (key, config, v4) in [("ip4", ip4, true), ("ip6", ip6, false)] {
            let Some(config) = config else { continue };
            let mut ip = Map::new();
            ip.insert("ip".into(), config.address.to_string().into());
            if let Some(gateway) = config.gateway {
                ip.insert("gateway".into(), gateway.to_string().into());
            }
            // Routes of a family with no address kept have nowhere to go, so libcni drops them.
            let routes: Vec<Value> =
                self.routes.iter().filter(|r| is_v4(&r.dst) == v4).map(|r| emit_route(r, false)).collect();
            if !routes.is_empty() {
                ip.insert("routes".into(), Value::Array(routes));
            }
            out.insert(key.into(), Value::Object(ip));
        }
        Ok(())
    }
}

fn is_v4(net: &IpNet) -> bool {
    matches!(net, IpNet::V4(_))
}

fn parse_legacy_ip(ip: &Obj<'_>, want_v4: bool) -> Result<(IpConfig, Vec<Route>), ResultError> {
    let address = ip.cidr("ip")?;
    if is_v4(&address) != want_v4 {
        let family = if want_v4 { "IPv4" } else { "IPv6" };
        return Err(ip.malformed("ip", format!("{address} is not an {family} address")));
    }
    let config = IpConfig { address, gateway: ip.ip("gateway")?, interface: None };
    Ok((config, ip.list("routes", |o| parse_route(&o))?))
}

fn parse_interface(o: &Obj<'_>) -> Result<Interface, ResultError> {
    let name = o.string("name")?.ok_or_else(|| o.malformed("name", "is required".into()))?;
    Ok(Interface {
        name: name.to_owned(),
        mac: o.opt_string("mac")?,
        mtu: o.nonzero_uint("mtu")?,
        sandbox: o.opt_string("sandbox")?,
        socket_path: o.opt_string("socketPath")?,
        pci_id: o.opt_string("pciID")?,
    })
}

fn parse_ip(o: &Obj<'_>, shape: Shape, interface_count: usize) -> Result<IpConfig, ResultError> {
    let address = o.cidr("address")?;
    // The tag only exists in 0.3.x/0.4.0; later versions derive the family from the address.
    if shape == Shape::Tagged {
        if let Some(tag) = o.string("version")? {
            let actual = if is_v4(&address) { "4" } else { "6" };
            if tag != "4" && tag != "6" {
                return Err(o.malformed("version", format!("expected \"4\" or \"6\", got {tag:?}")));
            }
            if tag != actual {
                return Err(
                    o.malformed("version", format!("is {tag:?} but address {address} is IPv{actual}"))
                );
            }
        }
    }
    let interface = o.index("interface")?;
    // A negative index means "bound to no interface" (NPWG spec 5.3.3.1 relies on it); a
    // non-negative one must exist, since consumers index `interfaces` with it.
    if let Some(index) = interface.filter(|i| *i >= 0) {
        if usize::try_from(index).map_or(true, |i| i >= interface_count) {
            return Err(o.malformed(
                "interface",
                format!("index {index} is out of range: the result has {interface_count} interface(s)"),
            ));
        }
    }
    Ok(IpConfig { address, gateway: o.ip("gateway")?, interface })
}

fn parse_route(o: &Obj<'_>) -> Result<Route, ResultError> {
    Ok(Route {
        dst: o.cidr("dst")?,
        gw: o.ip("gw")?,
        mtu: o.nonzero_uint("mtu")?,
        advmss: o.nonzero_uint("advmss")?,
        priority: o.nonzero_uint("priority")?,
        // libcni keeps these as pointers, so an explicit 0 (main table, global scope) is meaningful.
        table: o.uint("table")?,
        scope: o.uint("scope")?,
    })
}

fn parse_dns(top: &Obj<'_>) -> Result<Dns, ResultError> {
    let Some(dns) = top.object("dns")? else { return Ok(Dns::default()) };
    Ok(Dns {
        nameservers: dns.strings("nameservers")?,
        domain: dns.opt_string("domain")?,
        search: dns.strings("search")?,
        options: dns.strings("options")?,
    })
}

fn insert_str(map: &mut Map<String, Value>, key: &str, value: Option<&str>) {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        map.insert(key.into(), v.into());
    }
}

/// libcni's mtu/advmss/priority are omitempty ints, so 0 cannot be expressed: it means unset.
fn insert_nonzero(map: &mut Map<String, Value>, key: &str, value: Option<u32>) {
    if let Some(v) = value.filter(|v| *v != 0) {
        map.insert(key.into(), v.into());
    }
}

fn emit_interface(i: &Interface, shape: Shape) -> Value {
    let mut map = Map::new();
    // `name` has no omitempty in libcni: it is always printed.
    map.insert("name".into(), i.name.as_str().into());
    insert_str(&mut map, "mac", i.mac.as_deref());
    if shape == Shape::V1_1 {
        insert_nonzero(&mut map, "mtu", i.mtu);
    }
    insert_str(&mut map, "sandbox", i.sandbox.as_deref());
    if shape == Shape::V1_1 {
        insert_str(&mut map, "socketPath", i.socket_path.as_deref());
        insert_str(&mut map, "pciID", i.pci_id.as_deref());
    }
    Value::Object(map)
}

fn emit_ip(ip: &IpConfig, shape: Shape) -> Value {
    let mut map = Map::new();
    if shape == Shape::Tagged {
        map.insert("version".into(), if is_v4(&ip.address) { "4" } else { "6" }.into());
    }
    if let Some(index) = ip.interface {
        map.insert("interface".into(), index.into());
    }
    map.insert("address".into(), ip.address.to_string().into());
    if let Some(gateway) = ip.gateway {
        map.insert("gateway".into(), gateway.to_string().into());
    }
    Value::Object(map)
}

fn emit_route(r: &Route, with_attributes: bool) -> Value {
    let mut map = Map::new();
    map.insert("dst".into(), r.dst.to_string().into());
    if let Some(gw) = r.gw {
        map.insert("gw".into(), gw.to_string().into());
    }
    if with_attributes {
        insert_nonzero(&mut map, "mtu", r.mtu);
        insert_nonzero(&mut map, "advmss", r.advmss);
        insert_nonzero(&mut map, "priority", r.priority);
        for (key, value) in [("table", r.table), ("scope", r.scope)] {
            if let Some(v) = value {
                map.insert(key.into(), v.into());
            }
        }
    }
    Value::Object(map)
}

fn emit_dns(dns: &Dns) -> Value {
    let mut map = Map::new();
    let list = |items: &[String]| Value::Array(items.iter().map(|s| s.as_str().into()).collect());
    if !dns.nameservers.is_empty() {
        map.insert("nameservers".into(), list(&dns.nameservers));
    }
    insert_str(&mut map, "domain", dns.domain.as_deref());
    if !dns.search.is_empty() {
        map.insert("search".into(), list(&dns.search));
    }
    if !dns.options.is_empty() {
        map.insert("options".into(), list(&dns.options));
    }
    Value::Object(map)
}

/// A JSON object being read, with its path in the result for error messages.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: String) -> Result<Obj<'a>, ResultError> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(ResultError::Malformed {
                field: if path.is_empty() { "(the result itself)".into() } else { path },
                reason: format!("expected an object, got {}", describe(other)),
            }),
        }
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn malformed(&self, key: &str, reason: String) -> ResultError {
        ResultError::Malformed { field: self.path_of(key), reason }
    }

    fn wrong_type(&self, key: &str, expected: &str, got: &Value) -> ResultError {
        self.malformed(key, format!("expected {expected}, got {}", describe(got)))
    }

    /// Go's encoding/json leaves a field untouched on `null`, so `null` reads as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, key: &str) -> Result<Option<&'a str>, ResultError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, "a string", other)),
        }
    }

    /// Go cannot tell an empty string from an absent one, so neither can we.
    fn opt_string(&self, key: &str) -> Result<Option<String>, ResultError> {
        Ok(self.string(key)?.filter(|s| !s.is_empty()).map(str::to_owned))
    }

    fn cidr(&self, key: &str) -> Result<IpNet, ResultError> {
        let text = self.string(key)?.ok_or_else(|| self.malformed(key, "is required".into()))?;
        text.parse().map_err(|_| {
            self.malformed(
                key,
                format!("expected an address with prefix length like \"10.1.0.5/16\", got {text:?}"),
            )
        })
    }

    /// An empty string is accepted as unset, as Go's `net.IP` unmarshalling does.
    fn ip(&self, key: &str) -> Result<Option<IpAddr>, ResultError> {
        match self.string(key)? {
            None | Some("") => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| self.malformed(key, format!("expected an IP address, got {text:?}"))),
        }
    }

    fn uint(&self, key: &str) -> Result<Option<u32>, ResultError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        let n = value.as_u64().ok_or_else(|| self.wrong_type(key, "a non-negative integer", value))?;
        u32::try_from(n)
            .map(Some)
            .map_err(|_| self.malformed(key, format!("{n} is out of range (max {})", u32::MAX)))
    }

    fn nonzero_uint(&self, key: &str) -> Result<Option<u32>, ResultError> {
        Ok(self.uint(key)?.filter(|n| *n != 0))
    }

    fn index(&self, key: &str) -> Result<Option<i64>, ResultError> {
        let Some(value) = self.get(key) else { return Ok(None) };
        value.as_i64().map(Some).ok_or_else(|| self.wrong_type(key, "an integer index", value))
    }

    fn object(&self, key: &str) -> Result<Option<Obj<'a>>, ResultError> {
        self.get(key).map(|v| Obj::new(v, self.path_of(key))).transpose()
    }

    fn array(&self, key: &str) -> Result<&'a [Value], ResultError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(self.wrong_type(key, "an array", other)),
        }
    }

    fn list<T>(
        &self,
        key: &str,
        mut parse: impl FnMut(Obj<'a>) -> Result<T, ResultError>,
    ) -> Result<Vec<T>, ResultError> {
        let path = self.path_of(key);
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, item)| parse(Obj::new(item, format!("{path}[{i}]"))?))
            .collect()
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, ResultError> {
        let items = self.array(key)?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(ResultError::Malformed {
                    field: format!("{}[{i}]", self.path_of(key)),
                    reason: format!("expected a string, got {}", describe(other)),
                }),
            })
            .collect()
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ALL: [&str; 7] = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ipc(address: &str, gateway: Option<&str>, interface: Option<i64>) -> IpConfig {
        IpConfig { address: net(address), gateway: gateway.map(addr), interface }
    }

    fn route(dst: &str, gw: Option<&str>) -> Route {
        Route {
            dst: net(dst),
            gw: gw.map(addr),
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    fn iface(name: &str, mac: &str, sandbox: Option<&str>) -> Interface {
        Interface {
            name: name.into(),
            mac: Some(mac.into()),
            sandbox: sandbox.map(Into::into),
            ..Default::default()
        }
    }

    fn malformed_field(err: ResultError) -> String {
        match err {
            ResultError::Malformed { field, .. } => field,
            other => panic!("expected a malformed-result error, got {other:?}"),
        }
    }

    const IB_MAC: &str = "a0:00:02:20:fe:80:00:00:00:00:00:00:ec:0d:9a:03:00:2c:0e:51";

    /// Uses everything 1.1.0 can say, including what older versions cannot: several IPs
    /// per family, interleaved route families, route attributes, interface extras.
    fn rich() -> CniResult {
        CniResult {
            cni_version: "1.1.0".into(),
            interfaces: vec![
                iface("br0", "00:11:22:33:44:55", None),
                Interface { mtu: Some(1500), ..iface("veth1", "55:44:33:22:11:11", None) },
                Interface {
                    mtu: Some(9000),
                    socket_path: Some("/run/vhost/net1.sock".into()),
                    pci_id: Some("0000:3b:00.1".into()),
                    ..iface("net1", IB_MAC, Some("/var/run/netns/blue"))
                },
            ],
            ips: vec![
                ipc("10.1.0.5/16", Some("10.1.0.1"), Some(2)),
                ipc("2001:db8::5/64", Some("2001:db8::1"), Some(2)),
                ipc("10.2.0.7/24", None, Some(2)),
                ipc("2001:db8:1::7/64", None, Some(1)),
            ],
            routes: vec![
                Route {
                    mtu: Some(1450),
                    advmss: Some(1400),
                    priority: Some(100),
                    table: Some(100),
                    scope: Some(0),
                    ..route("0.0.0.0/0", Some("10.1.0.1"))
                },
                Route { priority: Some(50), ..route("::/0", Some("2001:db8::1")) },
                Route { scope: Some(253), ..route("192.168.0.0/16", None) },
                Route { table: Some(0), ..route("2001:db8:2::/48", Some("2001:db8::1")) },
            ],
            dns: Dns {
                nameservers: vec!["10.1.0.1".into(), "2001:db8::53".into()],
                domain: Some("example.com".into()),
                search: vec!["svc.example.com".into(), "example.com".into()],
                options: vec!["ndots:5".into()],
            },
        }
    }

    fn strip_route(r: &Route) -> Route {
        route(&r.dst.to_string(), r.gw.map(|g| g.to_string()).as_deref())
    }

    /// What a canonical result must look like after being written in `version` and read back,
    /// spelled out from the spec/libcni rules independently of the code under test.
    fn expected_after(version: &str, r: &CniResult) -> CniResult {
        let mut e = r.clone();
        e.cni_version = version.into();
        match version {
            "1.1.0" => {}
            "0.1.0" | "0.2.0" => {
                e.interfaces.clear();
                let first = |v4: bool| {
                    r.ips
                        .iter()
                        .find(|i| i.address.addr().is_ipv4() == v4)
                        .map(|i| IpConfig { interface: None, ..i.clone() })
                };
                let (v4, v6) = (first(true), first(false));
                let routes_of =
                    |v4: bool| r.routes.iter().filter(move |x| x.dst.addr().is_ipv4() == v4).map(strip_route);
                e.routes = Vec::new();
                if v4.is_some() {
                    e.routes.extend(routes_of(true));
                }
                if v6.is_some() {
                    e.routes.extend(routes_of(false));
                }
                e.ips = v4.into_iter().chain(v6).collect();
            }
            _ => {
                for i in &mut e.interfaces {
                    i.mtu = None;
                    i.socket_path = None;
                    i.pci_id = None;
                }
                e.routes = r.routes.iter().map(strip_route).collect();
            }
        }
        e
    }

    fn spec_example_1_1_0() -> Value {
        json!({
            "cniVersion": "1.1.0",
            "interfaces": [
                {"name": "cni0", "mac": "00:11:22:33:44:55"},
                {"name": "veth3243", "mac": "55:44:33:22:11:11"},
                {"name": "eth0", "mac": "99:88:77:66:55:44", "sandbox": "/var/run/netns/blue"}
            ],
            "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1", "interface": 2}],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dns": {"nameservers": ["10.1.0.1"]}
        })
    }

    fn spec_example_canonical(version: &str) -> CniResult {
        CniResult {
            cni_version: version.into(),
            interfaces: vec![
                iface("cni0", "00:11:22:33:44:55", None),
                iface("veth3243", "55:44:33:22:11:11", None),
                iface("eth0", "99:88:77:66:55:44", Some("/var/run/netns/blue")),
            ],
            ips: vec![ipc("10.1.0.5/16", Some("10.1.0.1"), Some(2))],
            routes: vec![route("0.0.0.0/0", None)],
            dns: Dns { nameservers: vec!["10.1.0.1".into()], ..Default::default() },
        }
    }

    fn legacy_example(version: &str) -> Value {
        json!({
            "cniVersion": version,
            "ip4": {
                "ip": "10.1.0.5/16",
                "gateway": "10.1.0.1",
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16"}]
            },
            "ip6": {
                "ip": "2001:db8::5/64",
                "gateway": "2001:db8::1",
                "routes": [{"dst": "::/0"}]
            },
            "dns": {
                "nameservers": ["10.1.0.1"],
                "domain": "example.com",
                "search": ["example.com"],
                "options": ["ndots:2"]
            }
        })
    }

    fn legacy_canonical(version: &str) -> CniResult {
        CniResult {
            cni_version: version.into(),
            interfaces: vec![],
            ips: vec![
                ipc("10.1.0.5/16", Some("10.1.0.1"), None),
                ipc("2001:db8::5/64", Some("2001:db8::1"), None),
            ],
            routes: vec![
                route("0.0.0.0/0", Some("10.1.0.1")),
                route("192.168.0.0/16", None),
                route("::/0", None),
            ],
            dns: Dns {
                nameservers: vec!["10.1.0.1".into()],
                domain: Some("example.com".into()),
                search: vec!["example.com".into()],
                options: vec!["ndots:2".into()],
            },
        }
    }

    #[test]
    fn parses_0_1_0_ip4_and_ip6_into_ips_without_interface_and_their_routes_into_routes() {
        assert_eq!(CniResult::parse(&legacy_example("0.1.0"), "1.1.0").unwrap(), legacy_canonical("0.1.0"));
    }

    #[test]
    fn parses_0_2_0_spec_example() {
        assert_eq!(CniResult::parse(&legacy_example("0.2.0"), "1.1.0").unwrap(), legacy_canonical("0.2.0"));
    }

    #[test]
    fn parses_0_3_x_and_0_4_0_spec_example_with_ip_version_tags() {
        for version in ["0.3.0", "0.3.1", "0.4.0"] {
            let mut value = spec_example_1_1_0();
            value["cniVersion"] = json!(version);
            value["ips"][0]["version"] = json!("4");
            assert_eq!(
                CniResult::parse(&value, "1.1.0").unwrap(),
                spec_example_canonical(version),
                "{version}"
            );
        }
    }

    #[test]
    fn parses_0_3_x_ips_without_version_tag() {
        let mut value = spec_example_1_1_0();
        value["cniVersion"] = json!("0.3.1");
        assert_eq!(CniResult::parse(&value, "1.1.0").unwrap(), spec_example_canonical("0.3.1"));
    }

    #[test]
    fn parses_1_0_0_spec_example() {
        let mut value = spec_example_1_1_0();
        value["cniVersion"] = json!("1.0.0");
        assert_eq!(CniResult::parse(&value, "1.1.0").unwrap(), spec_example_canonical("1.0.0"));
    }

    #[test]
    fn parses_1_1_0_spec_example() {
        assert_eq!(
            CniResult::parse(&spec_example_1_1_0(), "0.1.0").unwrap(),
            spec_example_canonical("1.1.0")
        );
    }

    #[test]
    fn parses_1_1_0_route_attributes_and_interface_extras() {
        let value = json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "net1", "mac": IB_MAC, "mtu": 9000, "sandbox": "/var/run/netns/blue",
                            "socketPath": "/run/vhost/net1.sock", "pciID": "0000:3b:00.1"}],
            "routes": [{"dst": "10.0.0.0/8", "gw": "10.1.0.1", "mtu": 1450, "advmss": 1400, "priority": 100,
                        "table": 100, "scope": 253}]
        });
        let result = CniResult::parse(&value, "1.1.0").unwrap();
        assert_eq!(
            result.interfaces,
            vec![Interface {
                name: "net1".into(),
                mac: Some(IB_MAC.into()),
                mtu: Some(9000),
                sandbox: Some("/var/run/netns/blue".into()),
                socket_path: Some("/run/vhost/net1.sock".into()),
                pci_id: Some("0000:3b:00.1".into()),
            }]
        );
        assert_eq!(
            result.routes,
            vec![Route {
                mtu: Some(1450),
                advmss: Some(1400),
                priority: Some(100),
                table: Some(100),
                scope: Some(253),
                ..route("10.0.0.0/8", Some("10.1.0.1"))
            }]
        );
        assert_eq!(result.dns, Dns::default());
    }

    #[test]
    fn emits_0_2_0_with_first_ip_of_each_family_and_routes_nested_by_family() {
        assert_eq!(
            rich().to_version("0.2.0").unwrap(),
            json!({
                "cniVersion": "0.2.0",
                "ip4": {
                    "ip": "10.1.0.5/16",
                    "gateway": "10.1.0.1",
                    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}, {"dst": "192.168.0.0/16"}]
                },
                "ip6": {
                    "ip": "2001:db8::5/64",
                    "gateway": "2001:db8::1",
                    "routes": [{"dst": "::/0", "gw": "2001:db8::1"}, {"dst": "2001:db8:2::/48", "gw": "2001:db8::1"}]
                },
                "dns": {
                    "nameservers": ["10.1.0.1", "2001:db8::53"],
                    "domain": "example.com",
                    "search": ["svc.example.com", "example.com"],
                    "options": ["ndots:5"]
                }
            })
        );
    }

    #[test]
    fn emits_0_1_0_in_the_same_shape_as_0_2_0() {
        let mut v010 = rich().to_version("0.1.0").unwrap();
        assert_eq!(v010["cniVersion"], "0.1.0");
        v010["cniVersion"] = json!("0.2.0");
        assert_eq!(v010, rich().to_version("0.2.0").unwrap());
    }

    #[test]
    fn emits_0_3_x_and_0_4_0_with_ip_version_tags_and_without_1_1_0_extras() {
        for version in ["0.3.0", "0.3.1", "0.4.0"] {
            assert_eq!(
                rich().to_version(version).unwrap(),
                json!({
                    "cniVersion": version,
                    "interfaces": [
                        {"name": "br0", "mac": "00:11:22:33:44:55"},
                        {"name": "veth1", "mac": "55:44:33:22:11:11"},
                        {"name": "net1", "mac": IB_MAC, "sandbox": "/var/run/netns/blue"}
                    ],
                    "ips": [
                        {"version": "4", "interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                        {"version": "6", "interface": 2, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
                        {"version": "4", "interface": 2, "address": "10.2.0.7/24"},
                        {"version": "6", "interface": 1, "address": "2001:db8:1::7/64"}
                    ],
                    "routes": [
                        {"dst": "0.0.0.0/0", "gw": "10.1.0.1"},
                        {"dst": "::/0", "gw": "2001:db8::1"},
                        {"dst": "192.168.0.0/16"},
                        {"dst": "2001:db8:2::/48", "gw": "2001:db8::1"}
                    ],
                    "dns": {
                        "nameservers": ["10.1.0.1", "2001:db8::53"],
                        "domain": "example.com",
                        "search": ["svc.example.com", "example.com"],
                        "options": ["ndots:5"]
                    }
                }),
                "{version}"
            );
        }
    }

    #[test]
    fn emits_1_0_0_like_0_4_0_without_ip_version_tags() {
        let mut expected = rich().to_version("0.4.0").unwrap();
        expected["cniVersion"] = json!("1.0.0");
        for ip in expected["ips"].as_array_mut().unwrap() {
            ip.as_object_mut().unwrap().remove("version");
        }
        assert_eq!(rich().to_version("1.0.0").unwrap(), expected);
    }

    #[test]
    fn emits_1_1_0_with_every_field() {
        assert_eq!(
            rich().to_version("1.1.0").unwrap(),
            json!({
                "cniVersion": "1.1.0",
                "interfaces": [
                    {"name": "br0", "mac": "00:11:22:33:44:55"},
                    {"name": "veth1", "mac": "55:44:33:22:11:11", "mtu": 1500},
                    {"name": "net1", "mac": IB_MAC, "mtu": 9000, "sandbox": "/var/run/netns/blue",
                     "socketPath": "/run/vhost/net1.sock", "pciID": "0000:3b:00.1"}
                ],
                "ips": [
                    {"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
                    {"interface": 2, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
                    {"interface": 2, "address": "10.2.0.7/24"},
                    {"interface": 1, "address": "2001:db8:1::7/64"}
                ],
                "routes": [
                    {"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1450, "advmss": 1400, "priority": 100,
                     "table": 100, "scope": 0},
                    {"dst": "::/0", "gw": "2001:db8::1", "priority": 50},
                    {"dst": "192.168.0.0/16", "scope": 253},
                    {"dst": "2001:db8:2::/48", "gw": "2001:db8::1", "table": 0}
                ],
                "dns": {
                    "nameservers": ["10.1.0.1", "2001:db8::53"],
                    "domain": "example.com",
                    "search": ["svc.example.com", "example.com"],
                    "options": ["ndots:5"]
                }
            })
        );
    }

    #[test]
    fn emits_keys_in_libcni_order() {
        let text = spec_example_canonical("0.4.0").to_version("0.4.0").unwrap().to_string();
        assert_eq!(
            text,
            concat!(
                r#"{"cniVersion":"0.4.0","interfaces":[{"name":"cni0","mac":"00:11:22:33:44:55"},"#,
                r#"{"name":"veth3243","mac":"55:44:33:22:11:11"},"#,
                r#"{"name":"eth0","mac":"99:88:77:66:55:44","sandbox":"/var/run/netns/blue"}],"#,
                r#""ips":[{"version":"4","interface":2,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],"#,
                r#""routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.1.0.1"]}}"#
            )
        );
    }

    #[test]
    fn ip_version_field_is_present_exactly_for_0_3_x_and_0_4_0() {
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let out = rich().to_version(version).unwrap();
            let tags: Vec<Option<&str>> = out["ips"]
                .as_array()
                .unwrap()
                .iter()
                .map(|ip| ip.get("version").and_then(Value::as_str))
                .collect();
            if version.starts_with("0.") {
                assert_eq!(tags, [Some("4"), Some("6"), Some("4"), Some("6")], "{version}");
            } else {
                assert_eq!(tags, [None, None, None, None], "{version}");
            }
        }
        for version in ["0.1.0", "0.2.0"] {
            let out = rich().to_version(version).unwrap();
            assert!(out.get("ips").is_none() && out["ip4"].get("version").is_none(), "{version}");
        }
    }

    #[test]
    fn round_trip_through_every_version_pair_keeps_exactly_what_both_can_express() {
        let rich = rich();
        for from in ALL {
            let first = CniResult::parse(&rich.to_version(from).unwrap(), "1.1.0").unwrap();
            assert_eq!(first, expected_after(from, &rich), "read back in {from}");
            for to in ALL {
                let second = CniResult::parse(&first.to_version(to).unwrap(), "1.1.0").unwrap();
                assert_eq!(second, expected_after(to, &expected_after(from, &rich)), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn same_version_round_trip_is_lossless_for_what_the_version_can_express() {
        for version in ALL {
            let expressible = expected_after(version, &rich());
            let emitted = expressible.to_version(version).unwrap();
            assert_eq!(CniResult::parse(&emitted, "1.1.0").unwrap(), expressible, "{version}");
            assert_eq!(CniResult::parse(&emitted, "1.1.0").unwrap().to_version(version).unwrap(), emitted);
        }
    }

    #[test]
    fn going_down_to_0_2_0_keeps_first_ip_per_family_and_drops_interfaces_and_indexes() {
        let back = CniResult::parse(&rich().to_version("0.2.0").unwrap(), "").unwrap();
        assert!(back.interfaces.is_empty());
        assert_eq!(
            back.ips,
            vec![
                ipc("10.1.0.5/16", Some("10.1.0.1"), None),
                ipc("2001:db8::5/64", Some("2001:db8::1"), None)
            ]
        );
        // 0.2.0 nests routes per family, so the interleaving of the original is lost.
        assert_eq!(
            back.routes,
            vec![
                route("0.0.0.0/0", Some("10.1.0.1")),
                route("192.168.0.0/16", None),
                route("::/0", Some("2001:db8::1")),
                route("2001:db8:2::/48", Some("2001:db8::1")),
            ]
        );
        assert_eq!(back.dns, rich().dns);
        assert_eq!(back.first_sandbox_interface(), None);
    }

    #[test]
    fn going_below_1_1_0_drops_route_attributes_and_interface_extras_but_keeps_the_rest() {
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
            let back = CniResult::parse(&rich().to_version(version).unwrap(), "").unwrap();
            assert_eq!(back.ips, rich().ips, "{version}");
            assert_eq!(back.dns, rich().dns, "{version}");
            assert_eq!(back.first_sandbox_interface(), Some(2), "{version}");
            assert_eq!(back.interfaces[2], iface("net1", IB_MAC, Some("/var/run/netns/blue")), "{version}");
            assert!(back.interfaces.iter().all(|i| i.mtu.is_none()), "{version}");
            assert!(
                back.routes.iter().all(
                    |r| (r.mtu, r.advmss, r.priority, r.table, r.scope) == (None, None, None, None, None)
                ),
                "{version}"
            );
            let dsts: Vec<String> = back.routes.iter().map(|r| r.dst.to_string()).collect();
            assert_eq!(dsts, ["0.0.0.0/0", "::/0", "192.168.0.0/16", "2001:db8:2::/48"], "{version}");
        }
    }

    #[test]
    fn routes_of_a_family_without_an_address_are_dropped_in_0_2_0() {
        let result = CniResult {
            ips: vec![ipc("10.1.0.5/16", None, Some(0))],
            routes: vec![route("::/0", Some("2001:db8::1")), route("0.0.0.0/0", Some("10.1.0.1"))],
            ..Default::default()
        };
        assert_eq!(
            result.to_version("0.2.0").unwrap(),
            json!({
                "cniVersion": "0.2.0",
                "ip4": {"ip": "10.1.0.5/16", "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1"}]},
                "dns": {}
            })
        );
    }

    #[test]
    fn converting_a_result_without_ips_to_0_1_0_or_0_2_0_fails_like_libcni() {
        let result = CniResult {
            interfaces: vec![iface("eth0", "00:11:22:33:44:55", Some("/var/run/netns/x"))],
            routes: vec![route("0.0.0.0/0", None)],
            ..Default::default()
        };
        for version in ["0.1.0", "0.2.0"] {
            let err = result.to_version(version).unwrap_err();
            assert!(matches!(&err, ResultError::Unconvertible { version: v, .. } if v == version), "{err:?}");
            assert!(err.to_string().contains("no IP address"), "{err}");
        }
        for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            assert!(result.to_version(version).is_ok(), "{version}");
        }
    }

    #[test]
    fn empty_dns_is_emitted_as_empty_object_before_1_0_0_and_omitted_from_1_0_0() {
        let result = CniResult { ips: vec![ipc("10.1.0.5/16", None, None)], ..Default::default() };
        for version in ALL {
            let out = result.to_version(version).unwrap();
            if version.starts_with("0.") {
                assert_eq!(out["dns"], json!({}), "{version}");
            } else {
                assert!(out.get("dns").is_none(), "{version}");
            }
        }
    }

    #[test]
    fn empty_and_unset_fields_are_omitted_never_null() {
        let result = CniResult {
            interfaces: vec![Interface {
                name: "eth0".into(),
                mac: Some(String::new()),
                sandbox: Some(String::new()),
                mtu: Some(0),
                ..Default::default()
            }],
            ips: vec![ipc("10.1.0.5/16", None, None)],
            routes: vec![Route { mtu: Some(0), ..route("0.0.0.0/0", None) }],
            dns: Dns { domain: Some(String::new()), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(
            result.to_version("1.1.0").unwrap(),
            json!({
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0"}],
                "ips": [{"address": "10.1.0.5/16"}],
                "routes": [{"dst": "0.0.0.0/0"}]
            })
        );
        assert_eq!(CniResult::default().to_version("1.1.0").unwrap(), json!({"cniVersion": "1.1.0"}));
        assert_eq!(
            CniResult::default().to_version("0.4.0").unwrap(),
            json!({"cniVersion": "0.4.0", "dns": {}})
        );
    }

    #[test]
    fn to_version_sets_requested_version_whatever_the_result_was_read_in() {
        let result = CniResult::parse(&legacy_example("0.1.0"), "").unwrap();
        assert_eq!(result.to_version("1.0.0").unwrap()["cniVersion"], "1.0.0");
    }

    #[test]
    fn unsupported_version_in_result_is_rejected_naming_it_and_listing_supported_ones() {
        let err = CniResult::parse(&json!({"cniVersion": "0.5.0", "ips": []}), "1.1.0").unwrap_err();
        assert!(matches!(&err, ResultError::UnsupportedVersion { version } if version == "0.5.0"), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("\"0.5.0\""), "{text}");
        assert!(text.contains("0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"), "{text}");
    }

    #[test]
    fn to_version_rejects_unsupported_versions() {
        for version in ["2.0.0", "1.0", "", "v1.0.0"] {
            let err = rich().to_version(version).unwrap_err();
            assert!(
                matches!(&err, ResultError::UnsupportedVersion { version: v } if v == version),
                "{err:?}"
            );
        }
    }

    #[test]
    fn missing_or_empty_cni_version_falls_back_to_the_given_version() {
        let mut value = legacy_example("x");
        value.as_object_mut().unwrap().remove("cniVersion");
        assert_eq!(CniResult::parse(&value, "0.2.0").unwrap(), legacy_canonical("0.2.0"));
        value["cniVersion"] = json!("");
        assert_eq!(CniResult::parse(&value, "0.1.0").unwrap(), legacy_canonical("0.1.0"));
        let err = CniResult::parse(&value, "9.9.9").unwrap_err();
        assert!(matches!(err, ResultError::UnsupportedVersion { .. }), "{err:?}");
    }

    #[test]
    fn shape_is_chosen_by_version_so_keys_of_other_shapes_are_ignored() {
        let mut legacy = legacy_example("0.2.0");
        legacy["ips"] = json!([{"address": "192.0.2.1/24"}]);
        assert_eq!(CniResult::parse(&legacy, "").unwrap(), legacy_canonical("0.2.0"));
        let mut modern = spec_example_1_1_0();
        modern["ip4"] = json!({"ip": "192.0.2.1/24"});
        assert_eq!(CniResult::parse(&modern, "").unwrap(), spec_example_canonical("1.1.0"));
    }

    #[test]
    fn non_object_results_and_non_string_versions_are_malformed() {
        let err = CniResult::parse(&json!([1, 2]), "1.1.0").unwrap_err();
        assert!(err.to_string().contains("expected an object, got an array"), "{err}");
        let err = CniResult::parse(&json!({"cniVersion": 1}), "1.1.0").unwrap_err();
        assert_eq!(err.to_string(), "malformed CNI result: cniVersion: expected a string, got the number 1");
    }

    #[test]
    fn wrong_types_and_bad_values_are_rejected_naming_the_field() {
        let cases = [
            ("1.1.0", json!({"interfaces": {}}), "interfaces"),
            ("1.1.0", json!({"interfaces": ["eth0"]}), "interfaces[0]"),
            ("1.1.0", json!({"interfaces": [{"mac": "00:11:22:33:44:55"}]}), "interfaces[0].name"),
            ("1.1.0", json!({"interfaces": [{"name": 5}]}), "interfaces[0].name"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "mtu": -1}]}), "interfaces[0].mtu"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "mtu": 1500.5}]}), "interfaces[0].mtu"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "sandbox": true}]}), "interfaces[0].sandbox"),
            ("1.1.0", json!({"interfaces": [{"name": "a", "pciID": 3}]}), "interfaces[0].pciID"),
            ("1.1.0", json!({"ips": [{}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5"}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.500/16"}]}), "ips[0].address"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "gateway": "gw"}]}), "ips[0].gateway"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": "0"}]}), "ips[0].interface"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": "x"}]}), "ips[0].interface"),
            ("1.1.0", json!({"ips": [{"address": "10.1.0.5/16", "interface": 0}]}), "ips[0].interface"),
            ("0.4.0", json!({"ips": [{"address": "10.1.0.5/16", "version": 4}]}), "ips[0].version"),
            ("0.3.1", json!({"ips": [{"address": "10.1.0.5/16", "version": "ipv4"}]}), "ips[0].version"),
            ("1.1.0", json!({"routes": [{"gw": "10.1.0.1"}]}), "routes[0].dst"),
            ("1.1.0", json!({"routes": [{"dst": "default"}]}), "routes[0].dst"),
            ("1.1.0", json!({"routes": [{"dst": "0.0.0.0/0", "table": 4294967296u64}]}), "routes[0].table"),
            ("1.1.0", json!({"routes": [{"dst": "0.0.0.0/0", "scope": "link"}]}), "routes[0].scope"),
            ("1.1.0", json!({"dns": []}), "dns"),
            ("1.1.0", json!({"dns": {"nameservers": ["10.1.0.1", 53]}}), "dns.nameservers[1]"),
            ("1.1.0", json!({"dns": {"domain": ["a"]}}), "dns.domain"),
            ("0.2.0", json!({"ip4": "10.1.0.5/16"}), "ip4"),
            ("0.2.0", json!({"ip4": {"gateway": "10.1.0.1"}}), "ip4.ip"),
            ("0.2.0", json!({"ip4": {"ip": "10.1.0.5/16", "routes": [{"dst": 0}]}}), "ip4.routes[0].dst"),
            ("0.1.0", json!({"ip6": {"ip": "2001:db8::5/64", "gateway": "10.1.0.1/16"}}), "ip6.gateway"),
        ];
        for (version, value, field) in cases {
            let err = CniResult::parse(&value, version).unwrap_err();
            let text = err.to_string();
            assert_eq!(malformed_field(err), field, "{value}: {text}");
        }
    }

    #[test]
    fn malformed_messages_say_what_was_expected_and_what_was_found() {
        let err = CniResult::parse(&json!({"ips": [{"address": "10.1.0.5"}]}), "1.1.0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "malformed CNI result: ips[0].address: expected an address with prefix length like \
             \"10.1.0.5/16\", got \"10.1.0.5\""
        );
        let err = CniResult::parse(&json!({"interfaces": [{"name": "a", "mtu": -1}]}), "1.1.0").unwrap_err();
        assert!(err.to_string().ends_with("expected a non-negative integer, got the number -1"), "{err}");
    }

    #[test]
    fn ip_version_tag_contradicting_the_address_is_rejected() {
        let value = json!({"cniVersion": "0.4.0", "ips": [{"version": "6", "address": "10.1.0.5/16"}]});
        let err = CniResult::parse(&value, "").unwrap_err();
        assert!(err.to_string().contains("is \"6\" but address 10.1.0.5/16 is IPv4"), "{err}");
        // From 1.0.0 on the key means nothing, so it is ignored like any unknown field.
        let value = json!({"cniVersion": "1.0.0", "ips": [{"version": "6", "address": "10.1.0.5/16"}]});
        assert_eq!(CniResult::parse(&value, "").unwrap().ips, vec![ipc("10.1.0.5/16", None, None)]);
    }

    #[test]
    fn legacy_ip4_or_ip6_of_the_wrong_family_is_rejected() {
        let err = CniResult::parse(&json!({"ip4": {"ip": "2001:db8::5/64"}}), "0.2.0").unwrap_err();
        assert_eq!(err.to_string(), "malformed CNI result: ip4.ip: 2001:db8::5/64 is not an IPv4 address");
        let err = CniResult::parse(&json!({"ip6": {"ip": "10.1.0.5/16"}}), "0.2.0").unwrap_err();
        assert_eq!(malformed_field(err), "ip6.ip");
    }

    #[test]
    fn unknown_fields_are_ignored_at_every_level() {
        let mut value = spec_example_1_1_0();
        value["extra"] = json!({"anything": [1, 2]});
        value["interfaces"][0]["metadata"] = json!({"k": "v"});
        value["ips"][0]["future"] = json!(true);
        value["routes"][0]["weight"] = json!(3);
        value["dns"]["ttl"] = json!(30);
        assert_eq!(CniResult::parse(&value, "").unwrap(), spec_example_canonical("1.1.0"));
        let mut legacy = legacy_example("0.2.0");
        legacy["ip4"]["extra"] = json!("x");
        assert_eq!(CniResult::parse(&legacy, "").unwrap(), legacy_canonical("0.2.0"));
    }

    #[test]
    fn null_and_empty_strings_read_as_unset_like_go_does() {
        let value = json!({
            "cniVersion": "1.1.0",
            "interfaces": [{"name": "eth0", "mac": "", "sandbox": null, "mtu": null, "socketPath": ""}],
            "ips": [{"address": "10.1.0.5/16", "gateway": "", "interface": null}],
            "routes": [{"dst": "0.0.0.0/0", "gw": null, "table": null}],
            "dns": {"nameservers": null, "domain": ""}
        });
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.interfaces, vec![Interface { name: "eth0".into(), ..Default::default() }]);
        assert_eq!(result.ips, vec![ipc("10.1.0.5/16", None, None)]);
        assert_eq!(result.routes, vec![route("0.0.0.0/0", None)]);
        assert_eq!(result.dns, Dns::default());
        let top_nulls =
            json!({"cniVersion": "1.1.0", "interfaces": null, "ips": null, "routes": null, "dns": null});
        assert_eq!(
            CniResult::parse(&top_nulls, "").unwrap(),
            CniResult { cni_version: "1.1.0".into(), ..Default::default() }
        );
    }

    #[test]
    fn addresses_keep_their_host_bits() {
        let value = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16"}, {"address": "2001:db8::5/64"}],
                           "routes": [{"dst": "10.9.9.9/8"}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.ips[0].address.addr(), addr("10.1.0.5"));
        assert_eq!(result.ips[0].address.prefix_len(), 16);
        let out = result.to_version("0.2.0").unwrap();
        assert_eq!(out["ip4"]["ip"], "10.1.0.5/16");
        assert_eq!(out["ip6"]["ip"], "2001:db8::5/64");
        assert_eq!(out["ip4"]["routes"][0]["dst"], "10.9.9.9/8");
    }

    #[test]
    fn infiniband_mac_keeps_its_text() {
        let value = json!({"cniVersion": "0.3.1", "interfaces": [{"name": "ib0", "mac": IB_MAC}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.interfaces[0].mac.as_deref(), Some(IB_MAC));
        assert_eq!(result.to_version("1.1.0").unwrap()["interfaces"][0]["mac"], IB_MAC);
    }

    #[test]
    fn zero_route_mtu_advmss_priority_mean_unset_but_zero_table_and_scope_are_kept() {
        let value = json!({"cniVersion": "1.1.0", "routes": [{"dst": "0.0.0.0/0", "mtu": 0, "advmss": 0,
                           "priority": 0, "table": 0, "scope": 0}], "interfaces": [{"name": "a", "mtu": 0}]});
        let result = CniResult::parse(&value, "").unwrap();
        assert_eq!(result.routes, vec![Route { table: Some(0), scope: Some(0), ..route("0.0.0.0/0", None) }]);
        assert_eq!(result.interfaces[0].mtu, None);
        assert_eq!(
            result.to_version("1.1.0").unwrap()["routes"],
            json!([{"dst": "0.0.0.0/0", "table": 0, "scope": 0}])
        );
    }

    #[test]
    fn interface_index_must_point_into_interfaces() {
        let ok = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                        "ips": [{"address": "10.1.0.5/16", "interface": 1}]});
        assert_eq!(CniResult::parse(&ok, "").unwrap().ips[0].interface, Some(1));
        let bad = json!({"cniVersion": "1.1.0", "interfaces": [{"name": "a"}, {"name": "b"}],
                         "ips": [{"address": "10.1.0.5/16", "interface": 2}]});
        let err = CniResult::parse(&bad, "").unwrap_err();
        assert!(err.to_string().contains("index 2 is out of range: the result has 2 interface(s)"), "{err}");
    }

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

    #[test]
    fn first_sandbox_interface_skips_host_interfaces_and_empty_sandboxes() {
        let result = CniResult {
            interfaces: vec![
                iface("br0", "00:11:22:33:44:55", None),
                iface("veth1", "55:44:33:22:11:11", Some("")),
                iface("eth0", "99:88:77:66:55:44", Some("/var/run/netns/blue")),
                iface("eth1", "99:88:77:66:55:45", Some("/var/run/netns/blue")),
            ],
            ..Default::default()
        };
        assert_eq!(result.first_sandbox_interface(), Some(2));
    }

    #[test]
    fn first_sandbox_interface_is_none_without_sandbox_interfaces() {
        assert_eq!(CniResult::default().first_sandbox_interface(), None);
        let host_only =
            CniResult { interfaces: vec![iface("br0", "00:11:22:33:44:55", None)], ..Default::default() };
        assert_eq!(host_only.first_sandbox_interface(), None);
    }

    #[test]
    fn dns_is_empty_ignores_an_empty_domain() {
        assert!(Dns::default().is_empty());
        assert!(Dns { domain: Some(String::new()), ..Default::default() }.is_empty());
        assert!(!Dns { options: vec!["ndots:1".into()], ..Default::default() }.is_empty());
    }
}
