//! The policy object: its programs and how they are attached (see the module's notes in
//! `super`).

use aya::programs::tc::TcHandle;
use plexus_ebpf_common::policy::MAPS;

use crate::dataplane::loader::Object;

/// Where the policy object pins, under the agent's pin directory.
pub const PIN_SUBDIR: &str = "policy";

/// The packets leaving the pod, on its host end's receive path.
pub const HOST_IN: &str = "np_host_in";
/// The packets entering the pod, on its host end's transmit path.
pub const HOST_OUT: &str = "np_host_out";
/// The packets leaving the pod, on its own interface's transmit path.
pub const POD_OUT: &str = "np_pod_out";
/// The packets entering the pod, on its own interface's receive path.
pub const POD_IN: &str = "np_pod_in";

/// Network policy: two pairs of TC programs. `tc_ingress` and `tc_egress` are those of a pod's
/// host end, attached there as TCX links after every other TCX program (port mappings have
/// translated a packet by then) and so before the shaping filters (a denied packet is not
/// charged). A pod's own interface (a macvlan inside the pod) runs the other pair as cls_bpf
/// filters at `filter_priority` and `filter_handle`, whose classid is the endpoint id; no other
/// plexus program runs there ([`super::hooks`]).
pub static OBJECT: Object = Object {
    bytes: aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/plexus-policy.o")),
    maps: &MAPS,
    shared_maps: &[],
    programs: &[HOST_IN, HOST_OUT, POD_OUT, POD_IN],
    tc_ingress: HOST_IN,
    tc_egress: HOST_OUT,
    sock_programs: &[],
    xdp: None,
    xdp_defers_to: None,
    xdp_displaces: None,
    first: false,
    filter_priority: 1,
    // "NP".
    filter_handle: TcHandle::new(0, 0x4e50),
};
