//! NAD manifests and their CNI configs: parsing, resolution and per-plugin config building
//! must never panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_agent::catalog::manifest::parse_objects;
use plexus_agent::cni::config::NetworkConfigList;
use plexus_agent::spec::resolve::resolve_network_config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(list) = NetworkConfigList::parse(text, Some("fuzz")) {
        for i in 0..list.plugins.len() {
            let _ = list.plugin_config(i, &Default::default(), None);
        }
    }
    if let Ok(objects) = parse_objects(text) {
        for nad in &objects.nads {
            let _ = resolve_network_config(nad, &[]);
        }
    }
});
