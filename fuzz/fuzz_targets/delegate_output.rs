//! What a delegate plugin prints is untrusted: its exit status and output must be read
//! without panicking, and whatever result is accepted must convert to every CNI version and
//! into network-status without panicking either. The first byte picks the exit status and the
//! fallback version; the rest is the plugin's stdout.
#![no_main]

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use libfuzzer_sys::fuzz_target;
use plexus_agent::cni::result::CniResult;
use plexus_agent::cni::{Command, SUPPORTED_VERSIONS};
use plexus_agent::delegate::exec::read_output;
use plexus_agent::spec::status::{default_gateways, network_status, StatusInput};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stdout)) = data.split_first() else { return };
    // Exit 0 or 1 (a wait status: the code is the second byte).
    let status = ExitStatus::from_raw(i32::from(pick & 1) << 8);
    let fallback = SUPPORTED_VERSIONS[usize::from(pick >> 1) % SUPPORTED_VERSIONS.len()];
    let Ok(Some(value)) = read_output("fuzz", Command::Add, status, stdout, b"") else { return };
    let Ok(result) = CniResult::parse(&value, fallback) else { return };
    for version in SUPPORTED_VERSIONS {
        if let Ok(converted) = result.to_version(version) {
            // What plexus writes, it reads back.
            CniResult::parse(&converted, version).expect("plexus reads the result it wrote");
        }
    }
    let gateways = default_gateways(&result);
    let _ = network_status(StatusInput {
        name: "ns/net",
        ifname: "net1",
        result: Some(&result),
        is_default: false,
        default_route: Some(&gateways),
        gateways: &gateways,
        device_info: None,
    });
});
