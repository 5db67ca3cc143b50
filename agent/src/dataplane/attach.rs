//! Where a program of the dataplane runs: a hook (the receive or transmit path) of a node
//! interface, and how the program is attached there (TC, or XDP on a receive path). What both objects and the records of both
//! services share.

use aya::programs::TcAttachType;
use serde::{Deserialize, Serialize};

/// Which path of an interface a TC program runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hook {
    Ingress,
    Egress,
}

impl Hook {
    pub fn attach_type(self) -> TcAttachType {
        match self {
            Hook::Ingress => TcAttachType::Ingress,
            Hook::Egress => TcAttachType::Egress,
        }
    }

    /// The hook's word in pin names.
    pub fn suffix(self) -> &'static str {
        match self {
            Hook::Ingress => "in",
            Hook::Egress => "out",
        }
    }
}

/// How a TC program is attached to a hook.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Attach {
    /// A pinned TCX link: hooks many attachments share (a bridge, a macvlan master), attached
    /// once and kept across restarts and upgrades by their pins.
    #[default]
    Tcx,
    /// A cls_bpf filter (direct action, under clsact) at the object's fixed priority and
    /// handle: the hooks of one pod's host-side veth, which come and go with the pod. Attaching
    /// a filter is a netlink message (0.2 to 0.5 ms measured here); a TCX link waits for an RCU
    /// grace period in the kernel (5 to 50 ms), most of an ADD. Filters live on the device, so
    /// they outlive the agent without pins; a restarted agent replaces them in place.
    ///
    /// A TCX program costs less per packet than a filter (no classifier chain around it), so
    /// the hook of an object that goes first moves to a pinned TCX link after the ADD has
    /// answered, in the background (see [`super::service`]): the link is attached next to the
    /// filter, then the filter is removed. TCX programs run before every filter, so the order
    /// of the objects on the hook stays; an object that goes last (shaping) keeps its filter,
    /// which runs after every TCX program. Either form counts as the point running.
    Filter,
    /// The object's XDP program, on the receive path of an interface where clients' traffic
    /// enters the node (a macvlan master, a bridge's uplink), as a pinned XDP link: native mode where the driver
    /// supports it, generic otherwise. An accelerator only: where it cannot attach (another XDP
    /// program is there, `--no-xdp`), the TC programs do everything, so neither ADD nor CHECK
    /// depends on it.
    Xdp,
}

/// One program attachment: a TC hook of a node interface, and how the program is attached
/// there (a pinned TCX link for shared hooks, a filter for a pod's own veth).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AttachPoint {
    pub ifindex: u32,
    pub ifname: String,
    pub hook: Hook,
    /// Records written before filters existed name TCX links, which is what they are.
    #[serde(default)]
    pub attach: Attach,
}

impl AttachPoint {
    /// The same hook of the same interface, however attached (TC as a TCX link or a filter;
    /// XDP, which runs before TC, is a hook of its own).
    pub fn same_hook(&self, other: &AttachPoint) -> bool {
        self.ifindex == other.ifindex
            && self.hook == other.hook
            && (self.attach == Attach::Xdp) == (other.attach == Attach::Xdp)
    }

    /// The XDP hook of interface `ifindex`.
    pub fn is_xdp_of(&self, ifindex: u32) -> bool {
        self.attach == Attach::Xdp && self.ifindex == ifindex
    }
}
