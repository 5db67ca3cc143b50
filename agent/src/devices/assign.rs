//! Handing out a pod's devices to its attachments: each attachment of a resource gets the next
//! device of it not yet handed out, in the order the sources listed them.

use std::collections::{BTreeMap, BTreeSet};

use super::ResourceDevice;

/// The devices of one pod, by resource, and which of them are taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevicePool {
    /// Each resource's devices in the order they were added, each once.
    by_resource: BTreeMap<String, Vec<String>>,
    /// (resource, device ID) handed out, or held by attachments made before.
    taken: BTreeSet<(String, String)>,
}

/// What [`DevicePool::take`] found for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// The next free device, now taken.
    Device(String),
    /// The pod has `allocated` devices of the resource and every one is taken.
    AllTaken { allocated: usize },
    /// The pod has no device of the resource.
    NoneAllocated,
}

impl DevicePool {
    /// Adds devices after those already known; a device listed twice is kept once, where it was
    /// first listed.
    pub fn add(&mut self, devices: impl IntoIterator<Item = ResourceDevice>) {
        for d in devices {
            let list = self.by_resource.entry(d.resource_name).or_default();
            if !list.contains(&d.device_id) {
                list.push(d.device_id);
            }
        }
    }

    /// Marks a device as held already (by an attachment of the pod made earlier), so it is never
    /// handed out.
    pub fn mark_taken(&mut self, resource_name: &str, device_id: &str) {
        self.taken.insert((resource_name.to_owned(), device_id.to_owned()));
    }

    /// Takes the first device of `resource_name` not taken yet.
    pub fn take(&mut self, resource_name: &str) -> Take {
        let Some(devices) = self.by_resource.get(resource_name) else { return Take::NoneAllocated };
        let free = devices.iter().find(|d| !self.taken.contains(&(resource_name.to_owned(), (*d).clone())));
        match free {
            Some(device) => {
                let device = device.clone();
                self.taken.insert((resource_name.to_owned(), device.clone()));
                Take::Device(device)
            }
            None => Take::AllTaken { allocated: devices.len() },
        }
    }

    /// The resources the pod has devices of, sorted.
    pub fn resources(&self) -> Vec<&str> {
        self.by_resource.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(resource: &str, id: &str) -> ResourceDevice {
        ResourceDevice { resource_name: resource.into(), device_id: id.into() }
    }

    fn pool(devices: &[(&str, &str)]) -> DevicePool {
        let mut p = DevicePool::default();
        p.add(devices.iter().map(|(r, id)| dev(r, id)));
        p
    }

    #[test]
    fn attachments_of_one_resource_get_distinct_devices_in_order() {
        let mut p = pool(&[("vf", "0000:81:02.3"), ("gpu", "g0"), ("vf", "0000:81:02.1")]);
        assert_eq!(p.take("vf"), Take::Device("0000:81:02.3".into()));
        assert_eq!(p.take("vf"), Take::Device("0000:81:02.1".into()));
        assert_eq!(p.take("vf"), Take::AllTaken { allocated: 2 });
        assert_eq!(p.take("gpu"), Take::Device("g0".into()), "resources are handed out apart");
        assert_eq!(p.take("other"), Take::NoneAllocated);
        assert_eq!(p.resources(), ["gpu", "vf"]);
    }

    #[test]
    fn a_device_listed_twice_is_one_device() {
        // Two containers listing one device, or two sources.
        let mut p = pool(&[("vf", "a"), ("vf", "a"), ("vf", "b")]);
        p.add([dev("vf", "a")]);
        assert_eq!(p.take("vf"), Take::Device("a".into()));
        assert_eq!(p.take("vf"), Take::Device("b".into()));
        assert_eq!(p.take("vf"), Take::AllTaken { allocated: 2 });
    }

    #[test]
    fn devices_held_already_are_skipped_and_added_devices_come_last() {
        let mut p = pool(&[("vf", "a"), ("vf", "b")]);
        p.mark_taken("vf", "a");
        // Taken under another resource name does not count.
        p.mark_taken("other", "b");
        assert_eq!(p.take("vf"), Take::Device("b".into()));
        assert_eq!(p.take("vf"), Take::AllTaken { allocated: 2 });
        p.add([dev("vf", "c")]);
        assert_eq!(p.take("vf"), Take::Device("c".into()));
    }

    #[test]
    fn an_empty_pool_has_nothing() {
        let mut p = DevicePool::default();
        assert_eq!(p.take("vf"), Take::NoneAllocated);
        assert!(p.resources().is_empty());
    }
}
