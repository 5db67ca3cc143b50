//! The `device-info` map (Device Information Specification, section 3), as pure functions.

use serde_json::{json, Map, Value};

/// The version of the Device Information Specification this map follows (section 3.1.2).
pub const SPEC_VERSION: &str = "1.1.0";

/// The key of the `pci` map that names the userspace driver holding the device, when one does
/// (vfio-pci, uio_pci_generic, igb_uio: the device has no netdev, an application in the pod
/// drives it). The specification has no key for the driver; a name in reverse domain notation
/// is how the NPWG specification lets an implementation add one of its own (spec 5.3).
pub const USERSPACE_DRIVER_KEY: &str = "plexus.dev/userspace-driver";

/// A PCI device (`"type": "pci"`, section 3.1.3): `pci_address` and, for a virtual function,
/// its PF's (`pf_pci_address`, section 3.1.3.4); `userspace_driver` when such a driver holds it.
pub fn pci(pci_address: &str, pf_pci_address: Option<&str>, userspace_driver: Option<&str>) -> Value {
    let mut pci = Map::new();
    pci.insert("pci-address".into(), json!(pci_address));
    if let Some(pf) = pf_pci_address {
        pci.insert("pf-pci-address".into(), json!(pf));
    }
    if let Some(driver) = userspace_driver {
        pci.insert(USERSPACE_DRIVER_KEY.into(), json!(driver));
    }
    json!({"type": "pci", "version": SPEC_VERSION, "pci": pci})
}

/// Why a map read from a file is not device information (section 3.1: `type` and `version`
/// are required strings).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotDeviceInfo(pub String);

/// Checks that `value` is a device-info map: an object with the required string keys `type`
/// and `version`. The rest is the device's business and is kept as written.
pub fn check(value: &Value) -> Result<(), NotDeviceInfo> {
    let Value::Object(map) = value else {
        return Err(NotDeviceInfo("it is not a JSON object".into()));
    };
    for key in ["type", "version"] {
        match map.get(key) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(_) => return Err(NotDeviceInfo(format!("\"{key}\" is not a non-empty string"))),
            None => return Err(NotDeviceInfo(format!("it has no \"{key}\", which is required"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vf_with_a_kernel_driver_is_the_specifications_example() {
        assert_eq!(
            pci("0000:01:02.2", Some("0000:01:02.0"), None),
            json!({"type": "pci", "version": "1.1.0",
                   "pci": {"pci-address": "0000:01:02.2", "pf-pci-address": "0000:01:02.0"}})
        );
    }

    #[test]
    fn a_userspace_driver_is_named_and_a_pf_may_be_unknown() {
        assert_eq!(
            pci("0000:18:02.5", Some("0000:18:00.0"), Some("vfio-pci")),
            json!({"type": "pci", "version": "1.1.0", "pci": {
                "pci-address": "0000:18:02.5", "pf-pci-address": "0000:18:00.0",
                "plexus.dev/userspace-driver": "vfio-pci"}})
        );
        assert_eq!(
            pci("0000:18:00.1", None, None),
            json!({"type": "pci", "version": "1.1.0", "pci": {"pci-address": "0000:18:00.1"}})
        );
    }

    #[test]
    fn only_maps_with_a_type_and_a_version_are_device_information() {
        check(&pci("0000:01:02.2", None, None)).unwrap();
        check(&json!({"type": "vhost-user", "version": "1.0.0", "vhost-user": {"mode": "client"}})).unwrap();
        for (bad, why) in [
            (json!([1]), "not a JSON object"),
            (json!({"version": "1.1.0"}), "no \"type\""),
            (json!({"type": "pci"}), "no \"version\""),
            (json!({"type": "", "version": "1.1.0"}), "\"type\" is not a non-empty string"),
            (json!({"type": "pci", "version": 1}), "\"version\" is not a non-empty string"),
        ] {
            let err = check(&bad).unwrap_err();
            assert!(err.0.contains(why), "{bad}: {err}");
        }
    }
}
