//! The network-status a pod is published with (NPWG spec section 4.1), read by tests.

use serde_json::Value;

/// The status entry of one interface in a network-status list.
#[track_caller]
pub fn status_of<'a>(status: &'a Value, ifname: &str) -> &'a Value {
    status
        .as_array()
        .expect("network-status is a list")
        .iter()
        .find(|e| e["interface"] == ifname)
        .unwrap_or_else(|| panic!("no status entry for {ifname}: {status:#}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_entry_of_an_interface_is_found_by_its_name() {
        let status = json!([{"name": "cluster", "interface": "eth0"}, {"name": "blue", "interface": "net1"}]);
        assert_eq!(status_of(&status, "net1")["name"], "blue");
    }

    #[test]
    #[should_panic(expected = "no status entry for net2")]
    fn a_missing_interface_fails() {
        status_of(&json!([{"interface": "eth0"}]), "net2");
    }
}
