//! Choosing and releasing addresses exactly as the reference `host-local` allocator does
//! (plugins/ipam/host-local/backend/allocator, v1.1.1), over a [`Store`] so that the rules
//! are tested without a disk.
//!
//! Order: round robin per range set, starting just after the address recorded in
//! `last_reserved_ip.<set>` (when the set still contains it, else at the first rangeStart),
//! going through the set's ranges in order, wrapping from the last range to the first,
//! skipping each range's gateway, and stopping when back at the start. In addition, the
//! subnet's network address and, for IPv4, its broadcast address are never handed out, even
//! when an explicit rangeStart/rangeEnd includes them (the reference would).

use std::collections::HashSet;
use std::io;
use std::net::IpAddr;

use ipnet::IpNet;

use super::config::RangeSet;
use crate::cni::result::IpConfig;
use crate::cni::{CniCode, ErrorCode};
use crate::ipam::addr::{go_string, next_ip, with_prefix};

/// Whose allocation a file is: its content is `<containerID>\r\n<ifname>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    id: &'a str,
    ifname: &'a str,
}

impl<'a> Owner<'a> {
    pub fn new(container_id: &'a str, ifname: &'a str) -> Self {
        // The reference trims the ID both when writing and when matching.
        Owner { id: container_id.trim(), ifname }
    }

    /// The file content the reference writes (and expects).
    pub fn record(&self) -> String {
        format!("{}\r\n{}", self.id, self.ifname)
    }

    fn is(&self, content: &str) -> bool {
        content.trim() == self.record()
    }

    /// Files written before the interface name was recorded hold only the container ID.
    fn is_legacy(&self, content: &str) -> bool {
        content.trim() == self.id
    }
}

/// One allocation file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub ip: IpAddr,
    /// The file name, as found (it names `ip`).
    pub file: String,
    pub content: String,
}

/// The reference's `backend.Store`, minus locking: the caller holds the lock for the whole
/// operation.
pub trait Store {
    /// Every allocation file (files whose name is an address).
    fn allocations(&self) -> io::Result<Vec<Allocation>>;
    /// The address in `last_reserved_ip.<range_set>`, if any is readable.
    fn last_reserved(&self, range_set: usize) -> Option<IpAddr>;
    /// Creates the file for `ip` unless it exists (false then), and records `ip` as the
    /// set's last reserved address.
    fn reserve(&mut self, ip: IpAddr, record: &str, range_set: usize) -> io::Result<bool>;
    /// Removes an allocation file; one already gone is not an error.
    fn release(&mut self, file: &str) -> io::Result<()>;
}

/// Why no address was allocated.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// What the reference refuses, with its own message.
    #[error("{0}")]
    Refused(String),
    /// An IPAMClaim's addresses cannot be given: a config (or claim) the user must fix.
    #[error("{0}")]
    Claim(String),
    /// The store failed, while allocating from range set `range` when known.
    #[error("{}{source}", range_prefix(*range))]
    Io { range: Option<usize>, source: io::Error },
}

fn range_prefix(range: Option<usize>) -> String {
    range.map(|index| format!("failed to allocate for range {index}: ")).unwrap_or_default()
}

impl AllocError {
    fn io(source: io::Error) -> Self {
        AllocError::Io { range: None, source }
    }

    /// The error of allocating from range set `index`, as the reference words it.
    fn in_range(self, index: usize) -> Self {
        match self {
            AllocError::Refused(m) => AllocError::Refused(format!("{}{m}", range_prefix(Some(index)))),
            AllocError::Io { source, .. } => AllocError::Io { range: Some(index), source },
            claim @ AllocError::Claim(_) => claim,
        }
    }
}

impl CniCode for AllocError {
    fn cni_code(&self) -> ErrorCode {
        match self {
            // libcni's ErrInternal, the code the reference answers with.
            AllocError::Refused(_) => ErrorCode::Internal,
            AllocError::Io { .. } => ErrorCode::IoFailure,
            AllocError::Claim(_) => ErrorCode::InvalidNetworkConfig,
        }
    }
}

/// The candidates of one range set in allocation order: each address with the range's prefix
/// length, and the range's gateway. Ends after one full turn.
#[derive(Debug, Clone)]
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    index: usize,
    cur: Option<IpAddr>,
    /// Where the turn started; back there means done.
    start: Option<IpAddr>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    pub fn new(set: &'a RangeSet, last_reserved: Option<IpAddr>) -> Self {
        let resume = last_reserved.and_then(|ip| set.0.iter().position(|r| r.contains(ip)).map(|i| (i, ip)));
        match resume {
            // The first step moves past the last reserved address.
            Some((index, ip)) => RangeIter { set, index, cur: Some(ip), start: None, done: false },
            None => RangeIter { set, index: 0, cur: None, start: None, done: set.0.is_empty() },
        }
    }
}

impl Iterator for RangeIter<'_> {
    type Item = (IpNet, IpAddr);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let ranges = &self.set.0;
            let cur = match self.cur {
                None => ranges[self.index].range_start,
                Some(cur) if cur == ranges[self.index].range_end => {
                    self.index = (self.index + 1) % ranges.len();
                    ranges[self.index].range_start
                }
                Some(cur) => next_ip(cur),
            };
            if self.cur.is_some() && self.start == Some(cur) {
                self.done = true;
                return None;
            }
            self.cur = Some(cur);
            self.start.get_or_insert(cur);
            let r = &ranges[self.index];
            if cur == r.gateway || r.is_network_or_broadcast(cur) {
                continue;
            }
            if let Some(net) = with_prefix(cur, r.subnet.prefix_len()) {
                return Some((net, r.gateway));
            }
        }
        None
    }
}

/// ADD as the reference's `cmdAdd`: one address from each range set in order, a requested
/// address (the first one the set contains) instead of the next free one; if anything fails,
/// or a requested address fits no set, what this call reserved is released.
pub fn allocate(
    store: &mut impl Store,
    ranges: &[RangeSet],
    requested: &[IpAddr],
    owner: Owner<'_>,
) -> Result<Vec<IpConfig>, AllocError> {
    let existing = store.allocations().map_err(AllocError::io)?;
    // Listed once under the lock, so free addresses are found without one syscall per taken
    // address; the exclusive create in `reserve` stays the arbiter.
    let mut taken: HashSet<IpAddr> = existing.iter().map(|a| a.ip).collect();
    let owned: Vec<IpAddr> = existing
        .iter()
        .filter(|a| owner.is(&a.content) || owner.is_legacy(&a.content))
        .map(|a| a.ip)
        .collect();
    let mut pending = requested.to_vec();
    let mut configs: Vec<IpConfig> = Vec::new();
    for (index, set) in ranges.iter().enumerate() {
        let want = pending.iter().position(|ip| set.contains(*ip)).map(|i| pending.remove(i));
        match get(store, set, index, owner, want, &owned, &mut taken) {
            Ok(config) => configs.push(config),
            Err(e) => {
                undo(store, &configs);
                return Err(e.in_range(index));
            }
        }
    }
    if !pending.is_empty() {
        undo(store, &configs);
        let list: Vec<String> = pending.into_iter().map(go_string).collect();
        return Err(AllocError::Refused(format!("failed to allocate all requested IPs: {}", list.join(" "))));
    }
    Ok(configs)
}

/// ADD for an IPAMClaim (`owner` is the claim's): one address from each range set, and one
/// the claim already holds stays its own. With `claimed` (the claim's `status.ips`) each set
/// gets the claim's address it contains, which must be free or the claim's already; a claim
/// address no set contains, or a set without one, is refused. Without, a set keeps the
/// claim's address it holds (a pod re-created before the claim's status was written), else
/// gets the next free one. On failure, what this call reserved is released.
pub fn allocate_for_claim(
    store: &mut impl Store,
    ranges: &[RangeSet],
    claimed: &[IpAddr],
    owner: Owner<'_>,
    claim: &str,
) -> Result<Vec<IpConfig>, AllocError> {
    let existing = store.allocations().map_err(AllocError::io)?;
    let holder =
        |ip: IpAddr| existing.iter().find(|a| a.ip == ip).map(|a| a.content.trim().replace("\r\n", " "));
    let owned: Vec<IpAddr> = existing.iter().filter(|a| owner.is(&a.content)).map(|a| a.ip).collect();
    let mut taken: HashSet<IpAddr> = existing.iter().map(|a| a.ip).collect();
    if let Some(ip) = claimed.iter().find(|ip| !ranges.iter().any(|set| set.contains(**ip))) {
        let sets: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        return Err(AllocError::Claim(format!(
            "IPAMClaim {claim} holds {}, which is in no range of this network ({}); the claim was filled by \
             another network: use a claim of this network",
            go_string(*ip),
            sets.join("; ")
        )));
    }
    let mut new: Vec<IpConfig> = Vec::new();
    let mut configs: Vec<IpConfig> = Vec::new();
    for (index, set) in ranges.iter().enumerate() {
        let wanted = if claimed.is_empty() {
            owned.iter().copied().find(|ip| set.contains(*ip))
        } else {
            match claimed.iter().copied().find(|ip| set.contains(*ip)) {
                Some(ip) => Some(ip),
                None => {
                    undo(store, &new);
                    return Err(AllocError::Claim(format!(
                        "IPAMClaim {claim} has no address in range set {set} of this network; its status.ips \
                         must hold one address of each range set"
                    )));
                }
            }
        };
        let outcome = match wanted {
            Some(ip) if owned.contains(&ip) => Ok((held_config(set, ip), false)),
            Some(ip) => match get(store, set, index, owner, Some(ip), &[], &mut taken) {
                Err(AllocError::Refused(_)) if holder(ip).is_some() => Err(AllocError::Claim(format!(
                    "address {} of IPAMClaim {claim} is allocated to {}, not to the claim; release it there first",
                    go_string(ip),
                    holder(ip).unwrap_or_default()
                ))),
                other => other.map(|c| (c, true)),
            },
            None => get(store, set, index, owner, None, &[], &mut taken).map(|c| (c, true)),
        };
        match outcome {
            Ok((config, reserved)) => {
                if reserved {
                    new.push(config.clone());
                }
                configs.push(config);
            }
            Err(e) => {
                undo(store, &new);
                return Err(e.in_range(index));
            }
        }
    }
    Ok(configs)
}

/// The config of an address the owner holds already in `set`.
fn held_config(set: &RangeSet, ip: IpAddr) -> IpConfig {
    let range = set.range_for(ip);
    IpConfig {
        address: range
            .and_then(|r| with_prefix(ip, r.subnet.prefix_len()))
            .unwrap_or_else(|| IpNet::from(ip)),
        gateway: range.map(|r| r.gateway),
        interface: None,
    }
}

/// The reference's `IPAllocator.Get` for one range set.
fn get(
    store: &mut impl Store,
    set: &RangeSet,
    index: usize,
    owner: Owner<'_>,
    requested: Option<IpAddr>,
    owned: &[IpAddr],
    taken: &mut HashSet<IpAddr>,
) -> Result<IpConfig, AllocError> {
    let record = owner.record();
    let config =
        |net: IpNet, gateway: IpAddr| IpConfig { address: net, gateway: Some(gateway), interface: None };
    if let Some(ip) = requested {
        let Some(r) = set.range_for(ip) else {
            return Err(AllocError::Refused(format!("{} not in range set {set}", go_string(ip))));
        };
        if ip == r.gateway {
            return Err(AllocError::Refused(format!("requested ip {} is subnet's gateway", go_string(ip))));
        }
        let net = with_prefix(ip, r.subnet.prefix_len())
            .ok_or_else(|| AllocError::Refused(format!("{} does not fit {}", go_string(ip), r.subnet)))?;
        if !store.reserve(ip, &record, index).map_err(AllocError::io)? {
            return Err(AllocError::Refused(format!(
                "requested IP address {} is not available in range set {set}",
                go_string(ip)
            )));
        }
        taken.insert(ip);
        return Ok(config(net, r.gateway));
    }
    // The CNI spec forbids a second ADD for the same container and interface.
    if let Some(ip) = owned.iter().find(|ip| set.contains(**ip)) {
        return Err(AllocError::Refused(format!(
            "{} has been allocated to {}, duplicate allocation is not allowed",
            go_string(*ip),
            owner.id
        )));
    }
    for (net, gateway) in RangeIter::new(set, store.last_reserved(index)) {
        if taken.contains(&net.addr()) {
            continue;
        }
        if store.reserve(net.addr(), &record, index).map_err(AllocError::io)? {
            taken.insert(net.addr());
            return Ok(config(net, gateway));
        }
        // A file appeared that the listing did not show (a name not in canonical form).
        taken.insert(net.addr());
    }
    Err(AllocError::Refused(format!("no IP addresses available in range set: {set}")))
}

/// Releases what a failed ADD reserved, and nothing else: an earlier allocation of the same
/// container and interface must survive a rejected second ADD.
fn undo(store: &mut impl Store, configs: &[IpConfig]) {
    for c in configs {
        if let Err(e) = store.release(&go_string(c.address.addr())) {
            tracing::warn!(address = %c.address, "host-local: releasing after a failed ADD: {e}");
        }
    }
}

/// DEL as the reference's `ReleaseByID`: every file of this container and interface, or,
/// when there is none, every file holding only this container ID (the older format).
/// Goes on past failures and returns the first.
pub fn release(store: &mut impl Store, owner: Owner<'_>) -> io::Result<()> {
    let all = store.allocations()?;
    let mut mine: Vec<&Allocation> = all.iter().filter(|a| owner.is(&a.content)).collect();
    if mine.is_empty() {
        mine = all.iter().filter(|a| owner.is_legacy(&a.content)).collect();
    }
    let mut first_error = None;
    for a in mine {
        if let Err(e) = store.release(&a.file) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// CHECK as the reference's `FindByID`: some address is recorded for this container and
/// interface (or, in the older format, for this container).
pub fn has_allocation(store: &impl Store, owner: Owner<'_>) -> io::Result<bool> {
    Ok(store.allocations()?.iter().any(|a| owner.is(&a.content) || owner.is_legacy(&a.content)))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::ipam::addr::{from_u128, to_u128};
    use crate::ipam::host_local::config::Range;
    use std::collections::BTreeMap;

    /// The disk store's behaviour, in memory.
    #[derive(Debug, Default)]
    pub struct FakeStore {
        pub files: BTreeMap<String, String>,
        pub last: BTreeMap<usize, IpAddr>,
    }

    impl Store for FakeStore {
        fn allocations(&self) -> io::Result<Vec<Allocation>> {
            Ok(self
                .files
                .iter()
                .filter_map(|(f, c)| {
                    crate::ipam::addr::parse_ip(f).map(|ip| Allocation {
                        ip,
                        file: f.clone(),
                        content: c.clone(),
                    })
                })
                .collect())
        }
        fn last_reserved(&self, range_set: usize) -> Option<IpAddr> {
            self.last.get(&range_set).copied()
        }
        fn reserve(&mut self, ip: IpAddr, record: &str, range_set: usize) -> io::Result<bool> {
            let name = go_string(ip);
            if self.files.contains_key(&name) {
                return Ok(false);
            }
            self.files.insert(name, record.to_owned());
            self.last.insert(range_set, ip);
            Ok(true)
        }
        fn release(&mut self, file: &str) -> io::Result<()> {
            self.files.remove(file);
            Ok(())
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn range(subnet: &str, start: &str, end: &str, gw: &str) -> Range {
        Range { subnet: subnet.parse().unwrap(), range_start: ip(start), range_end: ip(end), gateway: ip(gw) }
    }

    fn order(set: &RangeSet, last: Option<&str>) -> Vec<String> {
        RangeIter::new(set, last.map(ip)).map(|(net, _)| net.to_string()).collect()
    }

    #[test]
    fn iteration_starts_at_range_start_and_skips_the_gateway() {
        let set = RangeSet(vec![range("10.9.0.0/29", "10.9.0.1", "10.9.0.6", "10.9.0.1")]);
        assert_eq!(
            order(&set, None),
            ["10.9.0.2/29", "10.9.0.3/29", "10.9.0.4/29", "10.9.0.5/29", "10.9.0.6/29"]
        );
        let set = RangeSet(vec![range("10.9.0.0/29", "10.9.0.1", "10.9.0.6", "10.9.0.4")]);
        assert_eq!(
            order(&set, None),
            ["10.9.0.1/29", "10.9.0.2/29", "10.9.0.3/29", "10.9.0.5/29", "10.9.0.6/29"]
        );
        for (_, gw) in RangeIter::new(&set, None) {
            assert_eq!(gw, ip("10.9.0.4"));
        }
    }

    #[test]
    fn iteration_resumes_after_the_last_reserved_address_and_wraps() {
        let set = RangeSet(vec![range("10.9.0.0/29", "10.9.0.1", "10.9.0.6", "10.9.0.1")]);
        assert_eq!(
            order(&set, Some("10.9.0.4")),
            ["10.9.0.5/29", "10.9.0.6/29", "10.9.0.2/29", "10.9.0.3/29", "10.9.0.4/29"]
        );
        assert_eq!(
            order(&set, Some("10.9.0.6")),
            ["10.9.0.2/29", "10.9.0.3/29", "10.9.0.4/29", "10.9.0.5/29", "10.9.0.6/29"]
        );
        // A last address outside the set (the ranges changed) starts from the beginning.
        assert_eq!(order(&set, Some("10.7.0.2")).first().map(String::as_str), Some("10.9.0.2/29"));
        assert_eq!(order(&set, Some("fd00::2")).len(), 5);
    }

    #[test]
    fn iteration_walks_the_ranges_of_a_set_in_order() {
        let set = RangeSet(vec![
            range("10.1.0.0/24", "10.1.0.10", "10.1.0.12", "10.1.0.1"),
            range("10.2.0.0/24", "10.2.0.1", "10.2.0.3", "10.2.0.2"),
        ]);
        assert_eq!(
            order(&set, None),
            ["10.1.0.10/24", "10.1.0.11/24", "10.1.0.12/24", "10.2.0.1/24", "10.2.0.3/24"]
        );
        assert_eq!(
            order(&set, Some("10.1.0.12")),
            ["10.2.0.1/24", "10.2.0.3/24", "10.1.0.10/24", "10.1.0.11/24", "10.1.0.12/24"]
        );
        assert_eq!(
            order(&set, Some("10.2.0.3")),
            ["10.1.0.10/24", "10.1.0.11/24", "10.1.0.12/24", "10.2.0.1/24", "10.2.0.3/24"]
        );
    }

    #[test]
    fn iteration_over_ipv6_has_no_broadcast_to_skip() {
        let set = RangeSet(vec![range("fd00::/125", "fd00::1", "fd00::7", "fd00::1")]);
        assert_eq!(
            order(&set, None),
            ["fd00::2/125", "fd00::3/125", "fd00::4/125", "fd00::5/125", "fd00::6/125", "fd00::7/125"]
        );
        assert_eq!(order(&set, Some("fd00::7")).first().map(String::as_str), Some("fd00::2/125"));
    }

    #[test]
    fn network_and_broadcast_addresses_are_never_candidates() {
        let set = RangeSet(vec![range("10.9.0.0/29", "10.9.0.0", "10.9.0.7", "10.9.0.3")]);
        assert_eq!(
            order(&set, None),
            ["10.9.0.1/29", "10.9.0.2/29", "10.9.0.4/29", "10.9.0.5/29", "10.9.0.6/29"]
        );
        let set = RangeSet(vec![range("fd00::/126", "fd00::", "fd00::3", "fd00::1")]);
        assert_eq!(order(&set, None), ["fd00::2/126", "fd00::3/126"]);
    }

    #[test]
    fn a_range_with_nothing_to_give_ends_at_once() {
        let set = RangeSet(vec![range("10.9.0.0/30", "10.9.0.1", "10.9.0.1", "10.9.0.1")]);
        assert!(order(&set, None).is_empty());
        assert!(order(&set, Some("10.9.0.1")).is_empty());
        let mut it = RangeIter::new(&set, None);
        assert_eq!((it.next(), it.next()), (None, None), "stays done");
    }

    /// Every range layout of a small subnet, against a model: the set's addresses laid out in
    /// a circle, read once from just after the last reserved one.
    #[test]
    fn iteration_matches_the_circular_model_exhaustively() {
        let base = to_u128(ip("10.0.0.0"));
        let at = |i: u128| from_u128(base + i, ip("0.0.0.0"));
        let mut checked = 0;
        for start in 0..16u128 {
            for end in start..16u128 {
                for gw in [0u128, 1, 5, 15, 16] {
                    // A second range in another /28, so the set has two.
                    let set = RangeSet(vec![
                        Range {
                            subnet: "10.0.0.0/28".parse().unwrap(),
                            range_start: at(start),
                            range_end: at(end),
                            gateway: at(gw),
                        },
                        Range {
                            subnet: "10.0.0.16/28".parse().unwrap(),
                            range_start: at(17),
                            range_end: at(18),
                            gateway: at(17),
                        },
                    ]);
                    let circle: Vec<u128> = (start..=end).chain(17..=18).collect();
                    let skip = |i: u128| i == gw || i == 0 || i == 15 || i == 17 || i == 16 || i == 31;
                    for last in (0..20u128).map(Some).chain([None]) {
                        let first = match last.and_then(|l| circle.iter().position(|c| *c == l)) {
                            Some(p) => p + 1,
                            None => 0,
                        };
                        let want: Vec<String> = (0..circle.len())
                            .map(|k| circle[(first + k) % circle.len()])
                            .filter(|i| !skip(*i))
                            .map(|i| at(i).to_string())
                            .collect();
                        let got: Vec<String> = RangeIter::new(&set, last.map(at))
                            .map(|(net, _)| net.addr().to_string())
                            .collect();
                        assert_eq!(got, want, "start {start} end {end} gw {gw} last {last:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000);
    }

    fn set24() -> RangeSet {
        RangeSet(vec![range("10.1.0.0/24", "10.1.0.1", "10.1.0.254", "10.1.0.1")])
    }

    fn small() -> RangeSet {
        RangeSet(vec![range("10.9.0.0/29", "10.9.0.1", "10.9.0.6", "10.9.0.1")])
    }

    /// The message of a refusal; anything else fails the test.
    fn refused(r: Result<Vec<String>, AllocError>) -> String {
        match r {
            Err(AllocError::Refused(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    fn add(s: &mut FakeStore, sets: &[RangeSet], req: &[&str], id: &str) -> Result<Vec<String>, AllocError> {
        let req: Vec<IpAddr> = req.iter().map(|r| ip(r)).collect();
        allocate(s, sets, &req, Owner::new(id, "eth0")).map(|c| {
            c.iter()
                .map(|c| format!("{} gw {}", c.address, c.gateway.map(|g| g.to_string()).unwrap_or_default()))
                .collect()
        })
    }

    #[test]
    fn allocation_goes_round_robin_and_records_owner_and_last_address() {
        let mut s = FakeStore::default();
        assert_eq!(add(&mut s, &[small()], &[], "c1").unwrap(), ["10.9.0.2/29 gw 10.9.0.1"]);
        assert_eq!(add(&mut s, &[small()], &[], "c2").unwrap(), ["10.9.0.3/29 gw 10.9.0.1"]);
        assert_eq!(s.files["10.9.0.2"], "c1\r\neth0");
        assert_eq!(s.last[&0], ip("10.9.0.3"));
        release(&mut s, Owner::new("c1", "eth0")).unwrap();
        // The freed .2 is not reused before the rest of the range.
        assert_eq!(add(&mut s, &[small()], &[], "c3").unwrap(), ["10.9.0.4/29 gw 10.9.0.1"]);
        for id in ["c4", "c5"] {
            add(&mut s, &[small()], &[], id).unwrap();
        }
        assert_eq!(add(&mut s, &[small()], &[], "c6").unwrap(), ["10.9.0.2/29 gw 10.9.0.1"], "wraps around");
        assert_eq!(
            refused(add(&mut s, &[small()], &[], "c7")),
            "failed to allocate for range 0: no IP addresses available in range set: 10.9.0.1-10.9.0.6"
        );
    }

    #[test]
    fn a_second_add_for_the_same_container_and_interface_is_refused() {
        let mut s = FakeStore::default();
        add(&mut s, &[small()], &[], "c1").unwrap();
        assert_eq!(
            refused(add(&mut s, &[small()], &[], "c1")),
            "failed to allocate for range 0: 10.9.0.2 has been allocated to c1, duplicate allocation is not allowed"
        );
        assert_eq!(s.files.len(), 1, "the earlier allocation survives");
        // Another interface of the same container is another attachment.
        allocate(&mut s, &[small()], &[], Owner::new("c1", "net1")).unwrap();
        // A file in the older format counts as the container's too.
        s.files.insert("10.9.0.6".into(), "old\n".into());
        assert_eq!(
            refused(add(&mut s, &[small()], &[], "old")),
            "failed to allocate for range 0: 10.9.0.6 has been allocated to old, duplicate allocation is not allowed"
        );
    }

    #[test]
    fn requested_addresses() {
        let mut s = FakeStore::default();
        let v6 = RangeSet(vec![range("fd00::/120", "fd00::1", "fd00::ff", "fd00::1")]);
        let both = [set24(), v6];
        assert_eq!(
            add(&mut s, &both, &["10.1.0.50"], "a").unwrap(),
            ["10.1.0.50/24 gw 10.1.0.1", "fd00::2/120 gw fd00::1"]
        );
        assert_eq!(s.last[&0], ip("10.1.0.50"), "a requested address also moves the round robin");
        assert_eq!(
            refused(add(&mut s, &both, &["10.1.0.50"], "b")),
            "failed to allocate for range 0: requested IP address 10.1.0.50 is not available in range set 10.1.0.1-10.1.0.254"
        );
        assert_eq!(
            refused(add(&mut s, &both, &["10.1.0.1"], "b")),
            "failed to allocate for range 0: requested ip 10.1.0.1 is subnet's gateway"
        );
        assert_eq!(
            refused(add(&mut s, &both, &["10.5.0.77"], "b")),
            "failed to allocate all requested IPs: 10.5.0.77"
        );
        // Outside rangeStart..rangeEnd is not in the set either, network address included.
        assert_eq!(
            refused(add(&mut s, &both, &["10.1.0.0"], "b")),
            "failed to allocate all requested IPs: 10.1.0.0"
        );
        assert_eq!(
            refused(add(&mut s, &both, &["10.1.0.60", "10.1.0.61"], "b")),
            "failed to allocate all requested IPs: 10.1.0.61"
        );
        assert_eq!(s.files.len(), 2, "every failed ADD released what it had reserved");
        assert_eq!(
            add(&mut s, &both, &["fd00::70", "10.1.0.71"], "b").unwrap(),
            ["10.1.0.71/24 gw 10.1.0.1", "fd00::70/120 gw fd00::1"]
        );
        // A requested address skips the duplicate check, as in the reference.
        assert!(add(&mut s, &both, &["10.1.0.72", "fd00::72"], "b").is_ok());
    }

    #[test]
    fn failed_adds_keep_the_round_robin_moving_like_the_reference() {
        let mut s = FakeStore::default();
        let v6 = RangeSet(vec![range("fd00::/120", "fd00::1", "fd00::ff", "fd00::1")]);
        let both = [set24(), v6];
        // The v4 set allocates .2, then the leftover request fails the ADD and .2 is freed...
        assert!(add(&mut s, &both, &["fd00::1:0"], "a").is_err());
        assert!(s.files.is_empty());
        // ...but last_reserved_ip.0 remembers it, so the next ADD gets .3.
        assert_eq!(
            add(&mut s, &both, &[], "b").unwrap(),
            ["10.1.0.3/24 gw 10.1.0.1", "fd00::3/120 gw fd00::1"]
        );
    }

    fn claim_add(s: &mut FakeStore, sets: &[RangeSet], claimed: &[&str]) -> Result<Vec<String>, AllocError> {
        let claimed: Vec<IpAddr> = claimed.iter().map(|c| ip(c)).collect();
        allocate_for_claim(s, sets, &claimed, Owner::new("ipamclaim/ns/vm-a", "ipamclaim"), "ns/vm-a")
            .map(|c| c.iter().map(|c| c.address.to_string()).collect())
    }

    #[test]
    fn a_claim_keeps_its_addresses_across_adds_and_takes_those_it_names() {
        let mut s = FakeStore::default();
        let sets = vec![set24()];
        // Nothing held, no status: the next free address, recorded as the claim's.
        assert_eq!(claim_add(&mut s, &sets, &[]).unwrap(), ["10.1.0.2/24"]);
        assert_eq!(s.files["10.1.0.2"], "ipamclaim/ns/vm-a\r\nipamclaim");
        // Again (the pod re-created before the status was written): the same one, nothing new.
        assert_eq!(claim_add(&mut s, &sets, &[]).unwrap(), ["10.1.0.2/24"]);
        assert_eq!(claim_add(&mut s, &sets, &["10.1.0.2"]).unwrap(), ["10.1.0.2/24"]);
        assert_eq!(s.files.len(), 1, "one allocation");
        // A container's DEL does not touch it.
        release(&mut s, Owner::new("c1", "net1")).unwrap();
        assert!(s.files.contains_key("10.1.0.2"));
        // The claim's status names an address it does not hold yet: reserved for it.
        let mut fresh = FakeStore::default();
        assert_eq!(claim_add(&mut fresh, &sets, &["10.1.0.77"]).unwrap(), ["10.1.0.77/24"]);
        // Released as the claim's.
        release(&mut fresh, Owner::new("ipamclaim/ns/vm-a", "ipamclaim")).unwrap();
        assert!(!fresh.files.contains_key("10.1.0.77"));
    }

    /// The message of a claim's refusal (code 7); anything else fails the test.
    fn claim_refused(r: Result<Vec<String>, AllocError>) -> String {
        match r {
            Err(e @ AllocError::Claim(_)) => {
                assert_eq!(e.cni_code(), ErrorCode::InvalidNetworkConfig);
                e.to_string()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claims_conflicts_are_refused_clearly_and_leave_nothing() {
        let mut s = FakeStore::default();
        let sets = vec![set24()];
        add(&mut s, &sets, &["10.1.0.9"], "c1").unwrap();
        let err = claim_refused(claim_add(&mut s, &sets, &["10.1.0.9"]));
        assert!(err.contains("address 10.1.0.9 of IPAMClaim ns/vm-a is allocated to c1 eth0"), "{err}");
        let err = claim_refused(claim_add(&mut s, &sets, &["192.168.7.1"]));
        assert!(
            err.contains("IPAMClaim ns/vm-a holds 192.168.7.1, which is in no range of this network"),
            "{err}"
        );
        let dual = vec![set24(), RangeSet(vec![range("fd00::/64", "fd00::2", "fd00::ff", "fd00::1")])];
        let err = claim_refused(claim_add(&mut s, &dual, &["10.1.0.20"]));
        assert!(err.contains("has no address in range set"), "{err}");
        assert!(!s.files.contains_key("10.1.0.20"), "the address reserved before the failure is released");
    }

    #[test]
    fn release_takes_current_format_first_then_legacy() {
        let mut s = FakeStore::default();
        s.files.insert("10.9.0.2".into(), "c1\r\neth0".into());
        s.files.insert("10.9.0.3".into(), "c1\r\nnet1".into());
        s.files.insert("10.9.0.4".into(), "c1".into());
        s.files.insert("last_reserved_ip.0".into(), "c1".into());
        assert!(has_allocation(&s, Owner::new("c1", "eth0")).unwrap());
        release(&mut s, Owner::new("c1", "eth0")).unwrap();
        assert_eq!(s.files.keys().collect::<Vec<_>>(), ["10.9.0.3", "10.9.0.4", "last_reserved_ip.0"]);
        release(&mut s, Owner::new("c1", "eth0")).unwrap();
        assert_eq!(
            s.files.keys().collect::<Vec<_>>(),
            ["10.9.0.3", "last_reserved_ip.0"],
            "then the legacy file"
        );
        release(&mut s, Owner::new("c1", "eth0")).unwrap();
        assert_eq!(s.files.len(), 2, "idempotent; only address files are ever released");
        assert!(!has_allocation(&s, Owner::new("c1", "eth0")).unwrap());
        assert!(has_allocation(&s, Owner::new("c1", "net1")).unwrap());
        assert!(has_allocation(&s, Owner::new(" c1 ", "net1")).unwrap(), "the ID is trimmed");
    }
}
