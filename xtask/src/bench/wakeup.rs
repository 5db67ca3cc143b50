//! Idle CPUs that poll instead of sleeping while a section's TCP figures run: a PM QoS request
//! for zero wake-up latency on `/dev/cpu_dma_latency`, the one tuned's `network-latency`
//! profile and `cyclictest` hold. The kernel keeps the request while the file is open and drops
//! it when it is closed, so it ends with the bench process however that ends.
//!
//! Why: a client and its server pinned to two CPUs hand every request, segment and ACK across
//! them. Where an idle CPU halts (a VM's vCPU: each halt and each wake-up is an exit to the
//! hypervisor), how long a wake-up takes, and whether the other CPU went idle at all before
//! the next packet, decided a run's figure more than the dataplane did: on this machine rr p50
//! was about 56 µs with halting and 20 µs polling, and a side's single-stream throughput
//! varied by 20% from repeat to repeat while the sides it was compared with did not.

use std::fs::{File, OpenOptions};
use std::io::Write;

const DEVICE: &str = "/dev/cpu_dma_latency";

/// The request, held until dropped.
pub struct Polling {
    _qos: File,
}

/// How the CPUs idled while a figure ran, for its parameters.
pub const POLL: &str = "poll";

/// Asks for zero wake-up latency; why not, when the kernel offers no such device.
pub fn poll_while_idle() -> Result<Polling, String> {
    let mut qos = OpenOptions::new().write(true).open(DEVICE).map_err(|e| format!("{DEVICE}: {e}"))?;
    // The device takes the latency in microseconds as a native-endian 32-bit integer.
    qos.write_all(&0i32.to_ne_bytes()).map_err(|e| format!("writing {DEVICE}: {e}"))?;
    Ok(Polling { _qos: qos })
}
