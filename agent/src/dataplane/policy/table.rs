//! The policy object's maps, written from [`Entries`]: a change moves them from the old
//! entries to the new ones in an order that never denies what both allow. New rules go in
//! first, then the identities and endpoints are written (an address that changes identity
//! finds its new identity's rules already there), and only then is what the new entries no
//! longer hold removed. Connections already allowed keep their flow entries whatever the
//! rules become; only an endpoint that goes takes its flows with it (its id may be reused).

use std::collections::{BTreeMap, BTreeSet};

use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::maps::{Array, HashMap, MapData};
use aya::Ebpf;
use plexus_ebpf_common::policy::{
    Endpoint, IdentityKey, PolicyFlow, PolicyFlowKey, RuleKey, MAP_ENDPOINTS, MAP_FLOWS, MAP_HOST_ENDS,
    MAP_IDENTITIES, MAP_RULES,
};

use super::entries::{Entries, Prefixed};
use crate::dataplane::maps::{ignore_missing, map_error, take_map, TableError};

pub struct Table {
    endpoints: Array<MapData, Endpoint>,
    host_ends: HashMap<MapData, u32, u32>,
    identities: LpmTrie<MapData, IdentityKey, u32>,
    rules: LpmTrie<MapData, RuleKey, u8>,
    flows: HashMap<MapData, PolicyFlowKey, PolicyFlow>,
}

impl Table {
    /// The maps of a freshly loaded policy object.
    pub fn take(ebpf: &mut Ebpf) -> Result<Table, TableError> {
        let typed = |map: &'static str| map_error(map, "opening");
        Ok(Table {
            endpoints: Array::try_from(take_map(ebpf, MAP_ENDPOINTS)?).map_err(typed(MAP_ENDPOINTS))?,
            host_ends: HashMap::try_from(take_map(ebpf, MAP_HOST_ENDS)?).map_err(typed(MAP_HOST_ENDS))?,
            identities: LpmTrie::try_from(take_map(ebpf, MAP_IDENTITIES)?).map_err(typed(MAP_IDENTITIES))?,
            rules: LpmTrie::try_from(take_map(ebpf, MAP_RULES)?).map_err(typed(MAP_RULES))?,
            flows: HashMap::try_from(take_map(ebpf, MAP_FLOWS)?).map_err(typed(MAP_FLOWS))?,
        })
    }

    /// Moves the maps from `old` (what they hold) to `new`.
    pub fn apply(&mut self, old: &[Entries], new: &[Entries]) -> Result<(), TableError> {
        let (old, new) = (Flat::of(old), Flat::of(new));
        for (len, key) in new.rules.difference(&old.rules) {
            self.rules.insert(&Key::new(*len, *key), 1, 0).map_err(map_error(MAP_RULES, "writing a rule"))?;
        }
        for (&(len, key), identity) in &new.identities {
            if old.identities.get(&(len, key)) != Some(identity) {
                self.identities
                    .insert(&Key::new(len, key), identity, 0)
                    .map_err(map_error(MAP_IDENTITIES, "writing an identity"))?;
            }
        }
        for (id, endpoint) in &new.endpoints {
            if old.endpoints.get(id) != Some(endpoint) {
                self.endpoints
                    .set(*id, endpoint, 0)
                    .map_err(map_error(MAP_ENDPOINTS, "writing an endpoint"))?;
            }
        }
        for (ifindex, id) in &new.host_ends {
            if old.host_ends.get(ifindex) != Some(id) {
                self.host_ends
                    .insert(ifindex, id, 0)
                    .map_err(map_error(MAP_HOST_ENDS, "writing a host end"))?;
            }
        }
        for ifindex in old.host_ends.keys().filter(|k| !new.host_ends.contains_key(k)) {
            ignore_missing(self.host_ends.remove(ifindex))
                .map_err(map_error(MAP_HOST_ENDS, "removing a host end"))?;
        }
        let gone: BTreeSet<u32> =
            old.endpoints.keys().filter(|id| !new.endpoints.contains_key(id)).copied().collect();
        for id in &gone {
            // An unused id isolates nothing: its programs, if they still run, pass everything.
            self.endpoints
                .set(*id, Endpoint::default(), 0)
                .map_err(map_error(MAP_ENDPOINTS, "clearing an endpoint"))?;
        }
        // An endpoint id that goes may come back for another attachment: its flows go with it.
        self.remove_flows_of(&gone)?;
        for &(len, key) in old.identities.keys().filter(|k| !new.identities.contains_key(k)) {
            ignore_missing(self.identities.remove(&Key::new(len, key)))
                .map_err(map_error(MAP_IDENTITIES, "removing an identity"))?;
        }
        for (len, key) in old.rules.difference(&new.rules) {
            ignore_missing(self.rules.remove(&Key::new(*len, *key)))
                .map_err(map_error(MAP_RULES, "removing a rule"))?;
        }
        Ok(())
    }

    /// The connections the endpoints allowed, as the programs keep them.
    pub fn flows(&self) -> Result<Vec<PolicyFlowKey>, TableError> {
        self.flows.keys().collect::<Result<_, _>>().map_err(map_error(MAP_FLOWS, "listing the flows"))
    }

    /// Forgets the connections of `endpoints`: their next packets are judged anew.
    pub fn remove_flows_of(&mut self, endpoints: &BTreeSet<u32>) -> Result<(), TableError> {
        if endpoints.is_empty() {
            return Ok(());
        }
        for key in self.flows()?.iter().filter(|k| endpoints.contains(&k.endpoint)) {
            ignore_missing(self.flows.remove(key)).map_err(map_error(MAP_FLOWS, "removing a flow"))?;
        }
        Ok(())
    }
}

/// Every network's entries as one set per map (the keys of different networks and endpoints
/// never meet).
#[derive(Default)]
struct Flat {
    endpoints: BTreeMap<u32, Endpoint>,
    host_ends: BTreeMap<u32, u32>,
    identities: BTreeMap<Prefixed<IdentityKey>, u32>,
    rules: BTreeSet<Prefixed<RuleKey>>,
}

impl Flat {
    fn of(networks: &[Entries]) -> Flat {
        let mut flat = Flat::default();
        for e in networks {
            flat.endpoints.extend(e.endpoints.iter().copied());
            flat.host_ends.extend(e.host_ends.iter().copied());
            flat.identities.extend(e.identities.iter().copied());
            flat.rules.extend(e.rules.iter().copied());
        }
        flat
    }
}
