//! A VF's administrative settings, which belong to its PF: the settings themselves ([`VfSetting`],
//! [`VfAdmin`]), the RTM_SETLINK on the PF that changes one ([`Netlink::set_vf`]) and the PF's
//! report of its VFs ([`Netlink::sriov_pf`]).
//!
//! A VF's administrative settings (MAC, VLAN, spoof check, trust, link state, rates) are not
//! attributes of the VF's own netdev: they belong to the PF, and are changed with RTM_SETLINK on
//! the PF carrying `IFLA_VFINFO_LIST → IFLA_VF_INFO → IFLA_VF_*`. The messages are built by pure
//! functions (`set_vf_message`, [`set_vf_request`]) so a test can compare them byte for byte
//! with what iproute2's `ip link set dev PF vf N ...` sends (`native::sriov`'s `netlink_bytes`).

use std::fmt;

use futures::TryStreamExt;
use netlink_packet_route::link::{
    LinkAttribute, LinkExtentMask, LinkMessage, LinkVfInfo, VfInfo, VfInfoLinkState, VfInfoMac, VfInfoRate,
    VfInfoSpoofCheck, VfInfoTrust, VfInfoVlan, VfLinkState, VfVlan, VfVlanInfo, VlanProtocol,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use nix::errno::Errno;
use rtnetlink::packet_core::{NetlinkMessage, NLM_F_ACK, NLM_F_REQUEST};
use serde::{Deserialize, Serialize};

use super::error::errno_of;
use super::{LinkError, Mac, Netlink};

/// VLAN tag protocol of a VF's port VLAN.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum VlanProto {
    #[default]
    #[serde(rename = "802.1q")]
    Dot1Q,
    #[serde(rename = "802.1ad")]
    Dot1Ad,
}

impl fmt::Display for VlanProto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VlanProto::Dot1Q => "802.1Q",
            VlanProto::Dot1Ad => "802.1ad",
        })
    }
}

/// `IFLA_VF_LINK_STATE`: follow the PF's link, or force the VF's link up or down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    #[default]
    Auto,
    Enable,
    Disable,
}

impl fmt::Display for LinkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkState::Auto => "auto",
            LinkState::Enable => "enable",
            LinkState::Disable => "disable",
        })
    }
}

/// One administrative change of a VF, as `ip link set dev PF vf N ...` would make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VfSetting {
    /// VLAN 0 removes the port VLAN.
    Vlan {
        vlan: u16,
        qos: u8,
        proto: VlanProto,
    },
    Mac {
        mac: Mac,
    },
    /// Mbps; 0 means no limit.
    Rate {
        min_tx_rate: u32,
        max_tx_rate: u32,
    },
    SpoofCheck {
        on: bool,
    },
    Trust {
        on: bool,
    },
    LinkState {
        state: LinkState,
    },
}

/// Which administrative setting a [`VfSetting`] changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettingKind {
    Vlan,
    Mac,
    Rate,
    SpoofCheck,
    Trust,
    LinkState,
}

impl VfSetting {
    pub fn kind(&self) -> SettingKind {
        match self {
            VfSetting::Vlan { .. } => SettingKind::Vlan,
            VfSetting::Mac { .. } => SettingKind::Mac,
            VfSetting::Rate { .. } => SettingKind::Rate,
            VfSetting::SpoofCheck { .. } => SettingKind::SpoofCheck,
            VfSetting::Trust { .. } => SettingKind::Trust,
            VfSetting::LinkState { .. } => SettingKind::LinkState,
        }
    }
}

/// In iproute2's syntax, so an operator can reproduce a failure by hand.
impl fmt::Display for VfSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on_off = |on: bool| if on { "on" } else { "off" };
        match self {
            VfSetting::Vlan { vlan, qos, proto } => write!(f, "vlan {vlan} qos {qos} proto {proto}"),
            VfSetting::Mac { mac } => write!(f, "mac {mac}"),
            VfSetting::Rate { min_tx_rate, max_tx_rate } => {
                write!(f, "min_tx_rate {min_tx_rate} max_tx_rate {max_tx_rate}")
            }
            VfSetting::SpoofCheck { on } => write!(f, "spoofchk {}", on_off(*on)),
            VfSetting::Trust { on } => write!(f, "trust {}", on_off(*on)),
            VfSetting::LinkState { state } => write!(f, "state {state}"),
        }
    }
}

/// A VF's administrative settings as its PF reports them (`ip link show PF`, the "vf N" lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfAdmin {
    pub mac: Mac,
    pub vlan: u16,
    pub qos: u8,
    pub proto: VlanProto,
    /// A driver that cannot report spoof checking or trust reports "unknown", read as off.
    pub spoofchk: bool,
    pub trust: bool,
    pub link_state: LinkState,
    pub min_tx_rate: u32,
    pub max_tx_rate: u32,
}

impl Default for VfAdmin {
    fn default() -> Self {
        VfAdmin {
            mac: Mac([0; 6]),
            vlan: 0,
            qos: 0,
            proto: VlanProto::Dot1Q,
            spoofchk: false,
            trust: false,
            link_state: LinkState::Auto,
            min_tx_rate: 0,
            max_tx_rate: 0,
        }
    }
}

impl VfAdmin {
    /// The setting that puts `kind` back to what it is in `self`.
    pub fn setting(&self, kind: SettingKind) -> VfSetting {
        match kind {
            SettingKind::Vlan => VfSetting::Vlan { vlan: self.vlan, qos: self.qos, proto: self.proto },
            SettingKind::Mac => VfSetting::Mac { mac: self.mac },
            SettingKind::Rate => {
                VfSetting::Rate { min_tx_rate: self.min_tx_rate, max_tx_rate: self.max_tx_rate }
            }
            SettingKind::SpoofCheck => VfSetting::SpoofCheck { on: self.spoofchk },
            SettingKind::Trust => VfSetting::Trust { on: self.trust },
            SettingKind::LinkState => VfSetting::LinkState { state: self.link_state },
        }
    }

    /// What the PF would report after `setting` (used by test doubles of [`PfControl`]).
    pub fn apply(&mut self, setting: &VfSetting) {
        match *setting {
            VfSetting::Vlan { vlan, qos, proto } => (self.vlan, self.qos, self.proto) = (vlan, qos, proto),
            VfSetting::Mac { mac } => self.mac = mac,
            VfSetting::Rate { min_tx_rate, max_tx_rate } => {
                (self.min_tx_rate, self.max_tx_rate) = (min_tx_rate, max_tx_rate)
            }
            VfSetting::SpoofCheck { on } => self.spoofchk = on,
            VfSetting::Trust { on } => self.trust = on,
            VfSetting::LinkState { state } => self.link_state = state,
        }
    }
}

/// The RTM_SETLINK request that applies `setting` to VF `vf` of the PF with index `pf_index`.
///
/// The attribute layout is iproute2's: 802.1Q VLANs go in the legacy `IFLA_VF_VLAN` (which every
/// kernel and driver accepts), 802.1ad ones in `IFLA_VF_VLAN_LIST → IFLA_VF_VLAN_INFO`; a rate is
/// always sent with both its minimum and its maximum, as `IFLA_VF_RATE` has no "unchanged".
/// iproute2 itself sends RTM_NEWLINK, which the kernel handles for an existing device exactly
/// like RTM_SETLINK (both end in `do_setlink`); RTM_SETLINK is what sriov-cni's netlink library
/// sends and cannot create a device by mistake.
fn set_vf_message(pf_index: u32, vf: u32, setting: &VfSetting) -> NetlinkMessage<RouteNetlinkMessage> {
    let info = match *setting {
        VfSetting::Vlan { vlan, qos, proto: VlanProto::Dot1Q } => {
            VfInfo::Vlan(VfInfoVlan::new(vf, u32::from(vlan), u32::from(qos)))
        }
        VfSetting::Vlan { vlan, qos, proto: VlanProto::Dot1Ad } => VfInfo::VlanList(vec![VfVlan::Info(
            VfVlanInfo::new(vf, u32::from(vlan), u32::from(qos), VlanProtocol::Ieee8021Ad),
        )]),
        VfSetting::Mac { mac } => VfInfo::Mac(VfInfoMac::new(vf, &mac.0)),
        VfSetting::Rate { min_tx_rate, max_tx_rate } => {
            VfInfo::Rate(VfInfoRate::new(vf, min_tx_rate, max_tx_rate))
        }
        VfSetting::SpoofCheck { on } => VfInfo::SpoofCheck(VfInfoSpoofCheck::new(vf, on)),
        VfSetting::Trust { on } => VfInfo::Trust(VfInfoTrust::new(vf, on)),
        VfSetting::LinkState { state } => VfInfo::LinkState(VfInfoLinkState::new(
            vf,
            match state {
                LinkState::Auto => VfLinkState::Auto,
                LinkState::Enable => VfLinkState::Enable,
                LinkState::Disable => VfLinkState::Disable,
            },
        )),
    };
    let mut link = LinkMessage::default();
    link.header.index = pf_index;
    link.attributes.push(LinkAttribute::VfInfoList(vec![LinkVfInfo(vec![info])]));
    let mut message = NetlinkMessage::from(RouteNetlinkMessage::SetLink(link));
    message.header.flags = NLM_F_REQUEST | NLM_F_ACK;
    message
}

/// The bytes of the request [`Netlink::set_vf`] sends to apply `setting` to VF `vf` of the PF
/// with index `pf_index`, as they go on the wire with sequence number 0 (the socket numbers its
/// requests when it sends them).
pub fn set_vf_request(pf_index: u32, vf: u32, setting: &VfSetting) -> Vec<u8> {
    to_bytes(&set_vf_message(pf_index, vf, setting))
}

/// The bytes of `message` as they go on the wire (sequence number as set, 0 until sent).
fn to_bytes(message: &NetlinkMessage<RouteNetlinkMessage>) -> Vec<u8> {
    let mut message = message.clone();
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    bytes
}

/// VF `vf`'s settings from an RTM_NEWLINK of its PF dumped with `RTEXT_FILTER_VF`.
fn vf_admin_of(pf: &LinkMessage, vf: u32) -> Option<VfAdmin> {
    let infos = pf.attributes.iter().find_map(|attr| match attr {
        LinkAttribute::VfInfoList(list) => Some(list),
        _ => None,
    })?;
    let info = infos
        .iter()
        .find(|info| info.0.iter().any(|attr| matches!(attr, VfInfo::Mac(mac) if mac.vf_id == vf)))?;
    let mut admin = VfAdmin::default();
    for attr in &info.0 {
        match attr {
            VfInfo::Mac(mac) => admin.mac = Mac::from_kernel_buffer(&mac.mac),
            VfInfo::Vlan(vlan) => {
                admin.vlan = u16::try_from(vlan.vlan_id).unwrap_or(0);
                admin.qos = u8::try_from(vlan.qos).unwrap_or(0);
            }
            VfInfo::VlanList(list) => {
                // The kernel reports the port VLAN in both forms; only the list carries the protocol.
                if let Some(VfVlan::Info(info)) = list.first() {
                    admin.proto = match info.protocol {
                        VlanProtocol::Ieee8021Ad => VlanProto::Dot1Ad,
                        _ => VlanProto::Dot1Q,
                    };
                }
            }
            VfInfo::SpoofCheck(check) => admin.spoofchk = check.enabled,
            VfInfo::Trust(trust) => admin.trust = trust.enabled,
            VfInfo::LinkState(state) => {
                admin.link_state = match state.state {
                    VfLinkState::Enable => LinkState::Enable,
                    VfLinkState::Disable => LinkState::Disable,
                    _ => LinkState::Auto,
                }
            }
            VfInfo::Rate(rate) => {
                admin.min_tx_rate = rate.min_tx_rate;
                admin.max_tx_rate = rate.max_tx_rate;
            }
            _ => {}
        }
    }
    Some(admin)
}

/// What a PF reports of its VFs (`ip link show PF`, the "vf N" lines).
#[derive(Debug, Clone)]
pub struct SriovPf {
    pub name: String,
    pub index: u32,
    message: LinkMessage,
}

impl SriovPf {
    /// The settings of VF `vf`; None when the PF reports no such VF.
    pub fn vf(&self, vf: u32) -> Option<VfAdmin> {
        vf_admin_of(&self.message, vf)
    }
}

impl Netlink {
    /// The PF named `pf` with its VFs' settings (dumped with `RTEXT_FILTER_VF`); None when
    /// there is no link of that name.
    pub async fn sriov_pf(&self, pf: &str) -> Result<Option<SriovPf>, LinkError> {
        let request = self
            .handle()
            .link()
            .get()
            .match_name(pf.to_owned())
            .set_filter_mask(AddressFamily::Unspec, vec![LinkExtentMask::Vf, LinkExtentMask::SkipStats]);
        match request.execute().try_next().await {
            Ok(found) => {
                Ok(found.map(|message| SriovPf { name: pf.to_owned(), index: message.header.index, message }))
            }
            Err(e) if errno_of(&e) == Some(Errno::ENODEV) => Ok(None),
            Err(e) => Err(self.error(format!("reading PF {pf}"), e)),
        }
    }

    /// Applies one setting to VF `vf` of `pf`. The error names the change as the `ip link`
    /// command that would make it, so an operator can reproduce it by hand.
    pub async fn set_vf(&self, pf: &SriovPf, vf: u32, setting: &VfSetting) -> Result<(), LinkError> {
        self.acknowledged(set_vf_message(pf.index, vf, setting))
            .await
            .map_err(|e| self.error(format!("ip link set dev {} vf {vf} {setting}", pf.name), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ip link set dev <ifindex 6> vf 0 vlan 10 qos 3 proto 802.1ad` sent (captured with
    /// strace; the live comparison is in `tests::netlink_bytes`), with plexus's message type
    /// RTM_SETLINK (0x13) in place of iproute2's RTM_NEWLINK and the sequence number zeroed.
    #[test]
    fn an_802_1ad_vlan_goes_in_a_vlan_list() {
        let setting = VfSetting::Vlan { vlan: 10, qos: 3, proto: VlanProto::Dot1Ad };
        #[rustfmt::skip]
        let expected: [u8; 64] = [
            0x40, 0, 0, 0, 0x13, 0, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, // nlmsghdr: len, type, flags, seq, pid
            0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,          // ifinfomsg: family, type, index 6
            0x20, 0, 0x16, 0, 0x1c, 0, 0x01, 0,                      // IFLA_VFINFO_LIST, IFLA_VF_INFO
            0x18, 0, 0x0c, 0, 0x14, 0, 0x01, 0,                      // IFLA_VF_VLAN_LIST, IFLA_VF_VLAN_INFO
            0, 0, 0, 0, 0x0a, 0, 0, 0, 0x03, 0, 0, 0, 0x88, 0xa8, 0, 0, // vf 0, vlan 10, qos 3, ETH_P_8021AD
        ];
        assert_eq!(to_bytes(&set_vf_message(6, 0, &setting)), expected);
    }

    fn vf_info(vf: u32, extra: Vec<VfInfo>) -> LinkVfInfo {
        let mut infos = vec![VfInfo::Mac(VfInfoMac::new(vf, &[2, 0, 0, 0, 0, vf as u8]))];
        infos.extend(extra);
        LinkVfInfo(infos)
    }

    #[test]
    fn the_pf_report_of_one_vf_is_read() {
        let mut pf = LinkMessage::default();
        pf.attributes.push(LinkAttribute::VfInfoList(vec![
            vf_info(0, vec![VfInfo::Trust(VfInfoTrust::new(0, true))]),
            vf_info(
                3,
                vec![
                    VfInfo::Vlan(VfInfoVlan::new(3, 100, 5)),
                    VfInfo::VlanList(vec![VfVlan::Info(VfVlanInfo::new(
                        3,
                        100,
                        5,
                        VlanProtocol::Ieee8021Ad,
                    ))]),
                    VfInfo::SpoofCheck(VfInfoSpoofCheck::new(3, true)),
                    VfInfo::Trust(VfInfoTrust::new(3, false)),
                    VfInfo::LinkState(VfInfoLinkState::new(3, VfLinkState::Disable)),
                    VfInfo::Rate(VfInfoRate::new(3, 10, 20)),
                ],
            ),
        ]));
        assert_eq!(
            vf_admin_of(&pf, 3),
            Some(VfAdmin {
                mac: Mac([2, 0, 0, 0, 0, 3]),
                vlan: 100,
                qos: 5,
                proto: VlanProto::Dot1Ad,
                spoofchk: true,
                trust: false,
                link_state: LinkState::Disable,
                min_tx_rate: 10,
                max_tx_rate: 20,
            })
        );
        assert!(vf_admin_of(&pf, 0).is_some_and(|vf| vf.trust && vf.vlan == 0));
        assert_eq!(vf_admin_of(&pf, 7), None, "no such VF");
        assert_eq!(vf_admin_of(&LinkMessage::default(), 0), None, "no VF list at all");
    }

    #[test]
    fn each_setting_is_restored_from_the_original() {
        let original = VfAdmin {
            mac: Mac([2, 0, 0, 0, 0, 1]),
            vlan: 7,
            qos: 2,
            proto: VlanProto::Dot1Ad,
            spoofchk: true,
            trust: true,
            link_state: LinkState::Enable,
            min_tx_rate: 1,
            max_tx_rate: 2,
        };
        let mut changed = VfAdmin::default();
        for kind in [
            SettingKind::Vlan,
            SettingKind::Mac,
            SettingKind::Rate,
            SettingKind::SpoofCheck,
            SettingKind::Trust,
            SettingKind::LinkState,
        ] {
            let setting = original.setting(kind);
            assert_eq!(setting.kind(), kind);
            changed.apply(&setting);
        }
        assert_eq!(changed, original);
    }

    #[test]
    fn settings_read_as_ip_arguments() {
        let texts: Vec<String> = [
            VfSetting::Vlan { vlan: 7, qos: 2, proto: VlanProto::Dot1Ad },
            VfSetting::Mac { mac: Mac([2, 0, 0, 0, 0, 0xab]) },
            VfSetting::Rate { min_tx_rate: 0, max_tx_rate: 100 },
            VfSetting::SpoofCheck { on: false },
            VfSetting::Trust { on: true },
            VfSetting::LinkState { state: LinkState::Disable },
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            texts,
            [
                "vlan 7 qos 2 proto 802.1ad",
                "mac 02:00:00:00:00:ab",
                "min_tx_rate 0 max_tx_rate 100",
                "spoofchk off",
                "trust on",
                "state disable"
            ]
        );
    }
}
