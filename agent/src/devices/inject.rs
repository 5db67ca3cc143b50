//! The allocated device into the delegate's config, as Multus puts it: every plugin of the list
//! gets `deviceID` (which sriov-cni and plexus's native `sriov` read) and `pciBusID` (which
//! host-device reads), and the runtime config gets `deviceID`, which reaches the plugins that
//! declare the `deviceID` capability.

use serde_json::Value;

use crate::spec::delegate_conf::DelegateConfig;

/// The runtime config key and capability of the device ID.
pub const DEVICE_ID_CAPABILITY: &str = "deviceID";

/// Writes `device_id` into every plugin of the delegate and into its runtime config, replacing
/// any value there (the NAD's own `deviceID` names one device; the allocated one wins).
pub fn inject_device_id(delegate: &mut DelegateConfig, device_id: &str) {
    for plugin in &mut delegate.list.plugins {
        plugin.insert("deviceID".to_owned(), Value::String(device_id.to_owned()));
        plugin.insert("pciBusID".to_owned(), Value::String(device_id.to_owned()));
    }
    delegate.runtime_config.insert(DEVICE_ID_CAPABILITY.to_owned(), Value::String(device_id.to_owned()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::config::NetworkConfigList;
    use serde_json::json;

    #[test]
    fn every_plugin_and_the_runtime_config_get_the_device() {
        let text = json!({"cniVersion": "1.0.0", "name": "vfs", "plugins": [
            {"type": "sriov", "deviceID": "0000:00:00.0", "vlan": 10},
            {"type": "tuning", "capabilities": {"deviceID": true}}
        ]});
        let list = NetworkConfigList::parse(&text.to_string(), None).unwrap();
        let mut d = DelegateConfig { list, runtime_config: Default::default() };
        d.runtime_config.insert("mac".into(), json!("02:00:00:00:00:01"));
        inject_device_id(&mut d, "0000:81:02.3");
        assert_eq!(d.list.plugins[0]["deviceID"], "0000:81:02.3", "the NAD's own deviceID is replaced");
        assert_eq!(d.list.plugins[0]["pciBusID"], "0000:81:02.3");
        assert_eq!(d.list.plugins[0]["vlan"], 10);
        assert_eq!(d.list.plugins[1]["deviceID"], "0000:81:02.3");
        assert_eq!(
            Value::Object(d.runtime_config),
            json!({"mac": "02:00:00:00:00:01", "deviceID": "0000:81:02.3"})
        );
    }
}
