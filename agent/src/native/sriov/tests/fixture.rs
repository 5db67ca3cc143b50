//! A recorder standing in for the PF.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::native::sriov::error::SriovError;
use crate::native::sriov::vf_netlink::{PfControl, SettingKind, VfAdmin, VfSetting};

/// A PF with VFs, in memory: what the kernel would hold for a real NIC. `apply` records every
/// setting it is sent, in order, and can be told to refuse one kind of setting, as a driver
/// that does not support it would.
#[derive(Default)]
pub struct FakePf {
    pub vfs: Mutex<HashMap<(String, u32), VfAdmin>>,
    pub log: Mutex<Vec<(String, u32, VfSetting)>>,
    pub refuse: Mutex<Option<SettingKind>>,
}

impl FakePf {
    pub fn with_vf(pf: &str, vf: u32, admin: VfAdmin) -> Arc<FakePf> {
        let fake = FakePf::default();
        fake.vfs.lock().unwrap().insert((pf.to_owned(), vf), admin);
        Arc::new(fake)
    }

    pub fn admin(&self, pf: &str, vf: u32) -> VfAdmin {
        self.vfs.lock().unwrap()[&(pf.to_owned(), vf)]
    }

    /// The settings sent so far, as `ip` arguments.
    pub fn sent(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|(pf, vf, s)| format!("{pf} vf {vf} {s}")).collect()
    }
}

impl PfControl for FakePf {
    fn read<'a>(&'a self, pf: &'a str, vf: u32) -> BoxFuture<'a, Result<VfAdmin, SriovError>> {
        Box::pin(async move {
            self.vfs.lock().unwrap().get(&(pf.to_owned(), vf)).copied().ok_or_else(|| SriovError::Netlink {
                what: format!("reading VF {vf} of PF {pf}"),
                detail: "no such VF".into(),
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
            if *self.refuse.lock().unwrap() == Some(setting.kind()) {
                return Err(SriovError::Netlink {
                    what: format!("ip link set dev {pf} vf {vf} {setting}"),
                    detail: "Operation not supported (os error 95)".into(),
                });
            }
            self.log.lock().unwrap().push((pf.to_owned(), vf, setting));
            match self.vfs.lock().unwrap().get_mut(&(pf.to_owned(), vf)) {
                Some(admin) => {
                    admin.apply(&setting);
                    Ok(())
                }
                None => {
                    Err(SriovError::Netlink { what: format!("VF {vf} of {pf}"), detail: "no such VF".into() })
                }
            }
        })
    }
}
