//! The socket's request framing, from both ends: whatever bytes reach the agent's socket are
//! decoded as the server does (a `Request`), then read as the engine does (the verb, the
//! CNI_* variables, the pod named by CNI_ARGS, plexus's own config and the sandbox's list of
//! networks in its runtimeConfig); and whatever the runtime writes on the shim's stdin is read
//! for the keys the shim itself needs. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plexus_agent::cni::Command;
use plexus_agent::engine::request::{request_version, CniEnv, PlexusConf};
use plexus_agent::spec::sandbox_networks::{check_first_interface, parse_sandbox_networks};
use plexus_cni_shim::shim::socket_for;
use plexus_cni_shim::Request;

fuzz_target!(|data: &[u8]| {
    let _ = socket_for(data);
    let Ok(req) = serde_json::from_slice::<Request>(data) else { return };
    let _ = request_version(&req.config);
    let conf = PlexusConf::parse(&req.config);
    let listed = conf.ok().and_then(|c| parse_sandbox_networks(c.pod_sandbox_networks.as_ref()).ok());
    let Ok(command) = Command::parse(&req.command) else { return };
    if let Ok(env) = CniEnv::from_request(&req, command) {
        let _ = env.pod();
        if let Some(listed) = listed {
            let _ = check_first_interface(&listed, &env.ifname);
        }
    }
});
