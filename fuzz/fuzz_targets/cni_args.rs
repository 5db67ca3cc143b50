//! CNI_ARGS come from the runtime and, through a pod's `cni-args`, from its author: the pod
//! named by them and the IPAM and SR-IOV args read from them must never panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use plexus_agent::engine::request::CniEnv;
use plexus_agent::ipam::{host_local, static_ipam};
use plexus_agent::native::sriov::config::SriovConf;
use serde_json::{json, Value};

fn configs() -> &'static [Value; 3] {
    static CONFIGS: OnceLock<[Value; 3]> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        [
            json!({"cniVersion": "1.0.0", "name": "n", "type": "bridge",
                   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}}),
            json!({"cniVersion": "1.0.0", "name": "n", "type": "macvlan",
                   "ipam": {"type": "static", "addresses": [{"address": "10.2.0.5/24"}]}}),
            json!({"cniVersion": "1.0.0", "name": "n", "type": "sriov", "deviceID": "0000:00:00.1",
                   "ipam": {"type": "static"}}),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(args) = std::str::from_utf8(data) else { return };
    let _ = CniEnv { args: args.to_owned(), ..Default::default() }.pod();
    let [host_local_conf, static_conf, sriov_conf] = configs();
    let _ = host_local::config::parse(host_local_conf, args);
    let _ = static_ipam::parse(static_conf, args);
    let _ = SriovConf::parse(sriov_conf, args);
});
