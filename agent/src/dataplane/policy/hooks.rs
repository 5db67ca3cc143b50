//! Where the policy programs run for an isolated attachment, and how they find its endpoint id.
//!
//! - A pod's host end (a bridge's veth, in the node's namespace): TCX links pinned with the
//!   object ([`hook_host_end`]), `np_host_in` on its receive path and `np_host_out` on its
//!   transmit path. They find the endpoint id by the interface's ifindex (`NP_HOST_ENDS`).
//! - A pod's own interface (a macvlan, where there is no host end): cls_bpf filters on the
//!   interface inside the pod ([`hook_in_pod`]), `np_pod_out` on its transmit path and
//!   `np_pod_in` on its receive path, with the endpoint id as their classid. They live on the
//!   device and go with it.

use std::path::Path;

use aya::programs::tc::TcHandle;
use aya::programs::SchedClassifier;

use super::object::{OBJECT, POD_IN, POD_OUT};
use crate::dataplane::attach::Hook;
use crate::dataplane::loader::{attach_filter_program, LoadError, Loaded};
use crate::dataplane::pin::PinDir;
use crate::netlink::{run_in, NamespaceError};

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("attaching the network policy programs: {0}")]
    Load(#[from] LoadError),
    #[error(transparent)]
    Namespace(#[from] NamespaceError),
}

/// Runs the programs on the host end `ifname` (`ifindex`) of the calling thread's namespace (the
/// node's), as TCX links pinned with `loaded`.
pub fn hook_host_end(loaded: &mut Loaded, ifindex: u32, ifname: &str) -> Result<(), HookError> {
    loaded.attach_tc(ifindex, ifname, Hook::Ingress)?;
    loaded.attach_tc(ifindex, ifname, Hook::Egress)?;
    Ok(())
}

/// Runs the programs for endpoint `id` on the pod's own interface `ifname` in the network
/// namespace at `netns`.
pub async fn hook_in_pod(pins: &PinDir, netns: &Path, ifname: &str, id: u16) -> Result<(), HookError> {
    let (pins, ifname) = (pins.clone(), ifname.to_owned());
    run_in(netns, move || hook_here(&pins, &ifname, id)).await?
}

/// [`hook_in_pod`] on the calling thread, which is in the pod's namespace: the programs as
/// pinned in `pins`.
pub fn hook_here(pins: &PinDir, ifname: &str, id: u16) -> Result<(), HookError> {
    for (name, hook) in [(POD_OUT, Hook::Egress), (POD_IN, Hook::Ingress)] {
        let mut program = SchedClassifier::from_pin(pins.prog(name))
            .map_err(|source| LoadError::Program { name, source: Box::new(source) })?;
        let place = (OBJECT.filter_priority, OBJECT.filter_handle);
        attach_filter_program(&mut program, name, ifname, hook, place, Some(TcHandle::new(0, id)))?;
    }
    Ok(())
}
