//! The PF side of a VF: the [`PfControl`] seam through which the plugin reads and changes a
//! VF's administrative settings, and its real implementation over the netlink layer
//! ([`NetlinkPf`]), where the settings and the messages that change them live
//! ([`crate::netlink::sriov_vf`]).
//!
//! One message per setting, in sriov-cni's order (VLAN, MAC, rate, spoof check, trust, link
//! state): the kernel stops at the first attribute a driver refuses, so one setting per message
//! makes a failure name exactly the setting the NIC does not support, and leaves the record of
//! what was applied exact.

use std::path::PathBuf;

use futures::future::BoxFuture;

pub use crate::netlink::sriov_vf::{LinkState, SettingKind, VfAdmin, VfSetting, VlanProto};

use super::error::SriovError;
use crate::netlink::{Netlink, SriovPf};

/// Everything the plugin does on a PF. The real implementation is [`NetlinkPf`]; tests that use a
/// veth in place of a VF netdev substitute a recorder, because no PF without SR-IOV hardware has
/// VFs for the kernel to configure (the byte-for-byte test covers the real messages).
pub trait PfControl: Send + Sync {
    /// The current settings of VF `vf` of the PF netdev `pf`.
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>>;

    /// Applies one setting to VF `vf` of `pf`.
    fn apply<'a>(&'a self, pf: &'a str, vf: u32, setting: VfSetting)
        -> BoxFuture<'a, Result<(), SriovError>>;
}

/// [`PfControl`] over the netlink layer, in the network namespace where the PFs live.
#[derive(Debug, Clone, Default)]
pub struct NetlinkPf {
    /// `None`: the agent's own namespace (the node's), where a PF always is in production.
    pub host_netns: Option<PathBuf>,
}

impl NetlinkPf {
    async fn socket(&self) -> Result<Netlink, SriovError> {
        Ok(Netlink::open(self.host_netns.as_deref()).await?)
    }

    async fn pf_link(&self, ns: &Netlink, pf: &str) -> Result<SriovPf, SriovError> {
        let what = || format!("reading PF {pf} in {}", ns.place());
        match ns.sriov_pf(pf).await {
            Ok(Some(link)) => Ok(link),
            Ok(None) => Err(SriovError::Netlink { what: what(), detail: "no such interface".into() }),
            Err(source) => Err(SriovError::Pf { what: what(), source }),
        }
    }
}

impl PfControl for NetlinkPf {
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>> {
        Box::pin(async move {
            let ns = self.socket().await?;
            let link = self.pf_link(&ns, pf).await?;
            link.vf(vf).ok_or_else(|| SriovError::Netlink {
                what: format!("reading VF {vf} of PF {pf}"),
                detail: "the PF reports no such VF (check its sriov_numvfs)".into(),
            })
        })
    }

    fn apply<'a>(
        &'a self,
        pf: &'a str,
        vf: u32,
        setting: VfSetting,
    ) -> BoxFuture<'a, Result<(), SriovError>> {
        Box::pin(async move {
            let ns = self.socket().await?;
            let pf_link = self.pf_link(&ns, pf).await?;
            let what = format!("ip link set dev {pf} vf {vf} {setting}");
            ns.set_vf(&pf_link, vf, &setting).await.map_err(|source| SriovError::Pf { what, source })
        })
    }
}
