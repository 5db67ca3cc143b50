//! The sriov type's ADD, DEL, CHECK, STATUS and GC.
//!
//! ADD, in sriov-cni's order: validate the config; find the VF in sysfs; lock it; refuse it when
//! another attachment's record holds it; record its original state (PF side and netdev) durably;
//! apply the PF-side settings; move the netdev into the pod under CNI_IFNAME and set its MAC and
//! MTU; run IPAM and configure its addresses and routes; bring it up. Any failure undoes all of
//! it, in reverse, before the error goes back, so a failed ADD leaves the VF as it found it.
//!
//! DEL: release IPAM; restore the PF-side settings (before the netdev, as sriov-cni does: some
//! drivers refuse netdev changes of an untrusted VF whose administrative MAC differs); move the
//! netdev back under its original name with its original MAC and MTU; drop the record. Every
//! step tolerates having been done already, so DEL is idempotent and finishes an interrupted ADD
//! or DEL, also after an agent restart.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::{device_id_for_del, has_ipam_for_del, SriovConf};
use super::error::{SriovError, StateCause};
use super::lock::VfLocks;
use super::netdev;
use super::state::{Owner, VfRecord, VfStore};
use super::sysfs;
use super::vf_netlink::{NetlinkPf, PfControl, VfSetting};
use crate::cni::attachment::valid_attachments;
use crate::cni::result::{CniResult, Interface};
use crate::cni::AttachmentKey;
use crate::delegate::native::{NativeCall, NativePlugin};
use crate::delegate::{DelegateError, InvocationEnv};
use crate::devinfo;
use crate::ipam::Ipam;
use crate::native::announce;
use crate::native::invocation::{self, NativeType};
use crate::netlink::{configure_ip, netns_exists, verify_ips, verify_routes, Netlink};

/// The shortest wait for a VF another request holds; longer when IPAM may take longer.
const MIN_LOCK_WAIT: Duration = Duration::from_secs(30);

/// The native `sriov` type.
pub struct SriovPlugin {
    ipam: Ipam,
    store: VfStore,
    locks: VfLocks,
    sysfs_root: PathBuf,
    /// Where PFs and free VF netdevs live; `None` is the agent's own namespace.
    host_netns: Option<PathBuf>,
    pf: Arc<dyn PfControl>,
}

/// The plugin to register as type "sriov": state under `<state_dir>/sriov`, sysfs read under
/// `sysfs_root` (normally "/sys").
pub fn plugin(ipam: Ipam, state_dir: PathBuf, sysfs_root: PathBuf) -> Arc<dyn NativePlugin> {
    Arc::new(SriovPlugin::new(ipam, &state_dir, sysfs_root))
}

impl SriovPlugin {
    pub fn new(ipam: Ipam, state_dir: &Path, sysfs_root: PathBuf) -> SriovPlugin {
        let store = VfStore::new(state_dir);
        let locks = VfLocks::new(store.dir(), MIN_LOCK_WAIT.max(ipam.timeout * 3));
        SriovPlugin { ipam, store, locks, sysfs_root, host_netns: None, pf: Arc::new(NetlinkPf::default()) }
    }

    /// Treats the namespace at `netns` as the node's (tests run the "node" in a namespace of its
    /// own, so nothing touches the machine's network).
    pub fn with_host_netns(mut self, netns: PathBuf) -> SriovPlugin {
        self.pf = Arc::new(NetlinkPf { host_netns: Some(netns.clone()) });
        self.host_netns = Some(netns);
        self
    }

    /// Replaces the PF-side netlink (see [`PfControl`]); call after [`Self::with_host_netns`].
    pub fn with_pf_control(mut self, pf: Arc<dyn PfControl>) -> SriovPlugin {
        self.pf = pf;
        self
    }

    async fn host(&self) -> Result<Netlink, SriovError> {
        Ok(Netlink::open(self.host_netns.as_deref()).await?)
    }

    /// Records the VF's state before anything changes, which also claims it.
    async fn claim(
        &self,
        conf: &SriovConf,
        device: sysfs::VfDevice,
        config: &Value,
        env: &InvocationEnv,
    ) -> Result<VfRecord, SriovError> {
        let original = self.pf.read(&device.pf, device.vf).await?;
        let netdev = if device.is_userspace() {
            None
        } else {
            let name =
                sysfs::netdev_of(&self.sysfs_root, &device.pci)?.ok_or_else(|| SriovError::Device {
                    pci: device.pci.clone(),
                    detail: format!(
                        "it has no network interface in the node's namespace, and its driver ({}) is not \
                         a userspace one ({}); is another CNI plugin using it?",
                        device.driver.as_deref().unwrap_or("none bound"),
                        sysfs::USERSPACE_DRIVERS.join(", ")
                    ),
                })?;
            let host = self.host().await?;
            let netdev = netdev::state_of(&host.require(&name).await?)?;
            if let Some(parent) = netdev.parent.as_deref().filter(|parent| *parent != device.pci) {
                return Err(SriovError::Device {
                    pci: device.pci,
                    detail: format!("sysfs names {name} as its netdev, but {name} belongs to {parent}"),
                });
            }
            Some(netdev)
        };
        let record = VfRecord {
            owner: Owner::of(env),
            device,
            original,
            netdev,
            planned: conf.vf_settings().iter().map(VfSetting::kind).collect(),
            applied: Vec::new(),
            pod_ifindex: None,
            config: config.clone(),
            complete: false,
        };
        self.store.save(&record).await?;
        Ok(record)
    }

    async fn attach(
        &self,
        conf: &SriovConf,
        record: &mut VfRecord,
        config: &Value,
        env: &InvocationEnv,
        ipam_allocated: &mut bool,
    ) -> Result<Value, SriovError> {
        for setting in conf.vf_settings() {
            self.pf.apply(&record.device.pf, record.device.vf, setting).await?;
            record.applied.push(setting.kind());
        }
        self.store.save(record).await?;

        let mut result = CniResult {
            cni_version: conf.cni_version.clone(),
            interfaces: vec![Interface {
                name: env.ifname.clone(),
                sandbox: Some(env.netns.clone()),
                pci_id: Some(record.device.pci.clone()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let pod = match &record.netdev {
            Some(original) => {
                let host = self.host().await?;
                let pod = Netlink::pod(Path::new(&env.netns)).await?;
                let link = netdev::attach(&host, &pod, original, &env.ifname, conf.mac, conf.mtu).await?;
                record.pod_ifindex = Some(link.index);
                // From here DEL must look for the netdev in the pod, also after a restart.
                self.store.save(record).await?;
                Some(pod)
            }
            None => None,
        };

        if conf.has_ipam {
            // A failed IPAM ADD cleans up after itself (the CNI contract); only a successful one
            // is undone here, as sriov-cni does.
            let allocated = self.ipam.add(config, env).await.map_err(SriovError::ipam)?;
            *ipam_allocated = true;
            if allocated.ips.is_empty() {
                return Err(SriovError::Config("the IPAM plugin returned no IP address".into()));
            }
            result.ips = allocated.ips;
            // Everything IPAM gave is for this one interface.
            for ip in &mut result.ips {
                ip.interface = Some(0);
            }
            result.routes = allocated.routes;
            result.dns = allocated.dns;
        }

        match &pod {
            Some(pod) => {
                let netns = Path::new(&env.netns);
                // Before the link comes up, so the kernel's own gratuitous ARP goes out then.
                if let Err(e) = announce::enable_kernel_notify(netns, &env.ifname).await {
                    tracing::debug!(vf = %record.device.pci, "arp_notify/ndisc_notify: {e}");
                }
                configure_ip(pod, &env.ifname, &result).await?;
                let link = pod.require(&env.ifname).await?;
                result.interfaces[0].mac = link.mac.clone();
                result.interfaces[0].mtu = link.mtu;
                // As sriov-cni: an address reused from another pod (another MAC) is announced
                // now, rather than left to stale neighbour caches. Best effort.
                if let Some(mac) = link.mac.as_deref().and_then(|mac| mac.parse().ok()) {
                    let addresses = result.ips.iter().map(|ip| ip.address.addr()).collect();
                    for failure in announce::announce(netns, link.index, mac, addresses).await {
                        tracing::debug!(vf = %record.device.pci, "not announced: {failure}");
                    }
                }
            }
            // A userspace driver: the administrative MAC is the one the application will use.
            None => {
                let mac = conf.mac.unwrap_or(record.original.mac);
                result.interfaces[0].mac = (!mac.is_zero()).then(|| mac.to_string());
            }
        }
        let out = result
            .to_version(&conf.cni_version)
            .map_err(|e| SriovError::Config(format!("cannot express the result: {e}")))?;
        if let Some(path) = device_info_file(config) {
            describe_vf(&path, &record.device).await?;
        }
        record.complete = true;
        self.store.save(record).await?;
        Ok(out)
    }

    /// Undoes a failed ADD. The ADD's error is what the runtime hears, with the undo's failures
    /// added when there are any.
    async fn undo(
        &self,
        record: &VfRecord,
        config: &Value,
        env: &InvocationEnv,
        ipam_allocated: bool,
        error: SriovError,
    ) -> SriovError {
        let ipam = if ipam_allocated { self.ipam.del(config, env).await.err() } else { None };
        let errors = self.give_back(record, ipam).await;
        if errors.is_empty() {
            error
        } else {
            SriovError::Restore { pci: record.device.pci.clone(), context: error.to_string(), errors }
        }
    }

    /// Releases everything `record` holds: IPAM (run with `config` and `env`), then the VF.
    async fn release(
        &self,
        record: &VfRecord,
        config: &Value,
        env: &InvocationEnv,
    ) -> Result<(), SriovError> {
        let ipam = if has_ipam_for_del(config) { self.ipam.del(config, env).await.err() } else { None };
        let errors = self.give_back(record, ipam).await;
        if errors.is_empty() {
            return Ok(());
        }
        Err(SriovError::Restore {
            pci: record.device.pci.clone(),
            context: format!("releasing VF {} of {}", record.device.pci, record.owner),
            errors,
        })
    }

    /// Restores the VF and forgets its record; returns what failed, `ipam` (a failed IPAM DEL)
    /// included. The record goes as soon as the VF is restored, whatever IPAM did: it is about
    /// the VF, and the runtime's DEL retry runs IPAM DEL again without it.
    async fn give_back(&self, record: &VfRecord, ipam: Option<DelegateError>) -> Vec<String> {
        let mut errors: Vec<String> = ipam.map(|e| format!("releasing IPAM: {e}")).into_iter().collect();
        let vf_errors = self.restore(record).await;
        if vf_errors.is_empty() {
            if let Err(e) = self.store.remove(&record.device.pci).await {
                errors.push(e.to_string());
            }
        }
        errors.extend(vf_errors);
        errors
    }

    /// Puts the VF back as the record found it; returns what failed.
    async fn restore(&self, record: &VfRecord) -> Vec<String> {
        let mut errors = Vec::new();
        let (pf, vf) = (&record.device.pf, record.device.vf);
        for kind in record.applied.iter().rev() {
            if let Err(e) = self.pf.apply(pf, vf, record.original.setting(*kind)).await {
                errors.push(e.to_string());
            }
        }
        // Planned but not known to be applied: the step that failed, or any step when the agent
        // died mid-ADD. Putting back what may never have changed is harmless; a driver that does
        // not support the setting refuses it, which says nothing about the VF.
        for kind in record.planned.iter().filter(|kind| !record.applied.contains(kind)) {
            if let Err(e) = self.pf.apply(pf, vf, record.original.setting(*kind)).await {
                tracing::debug!(vf = %record.device.pci, "restoring an unconfirmed setting: {e}");
            }
        }
        if record.netdev.is_some() {
            if let Err(e) = self.return_netdev(record).await {
                errors.push(e.to_string());
            }
        }
        errors
    }

    async fn return_netdev(&self, record: &VfRecord) -> Result<(), SriovError> {
        let host = self.host().await?;
        let netns = Path::new(&record.owner.netns);
        let pod = if !record.owner.netns.is_empty() && netns_exists(netns) {
            Some(Netlink::pod(netns).await?)
        } else {
            None
        };
        netdev::detach(&host, pod.as_ref(), record).await
    }
}

/// The attachment's device-info file, when the runtime (plexus's engine) passes one
/// (`runtimeConfig.CNIDeviceInfoFile`, Device Information Specification 5.1).
fn device_info_file(config: &Value) -> Option<PathBuf> {
    let path = config.get("runtimeConfig")?.get(devinfo::CAPABILITY)?.as_str()?;
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// Writes the VF's device information to `path` unless a file is there already: one written
/// before the ADD (a device plugin's, copied by the engine) describes the device as its
/// allocator knows it and is kept (Device Information Specification 5.1.2).
/// A file there that is not device information is replaced.
async fn describe_vf(path: &Path, device: &sysfs::VfDevice) -> Result<(), SriovError> {
    let (file, info) = (path.to_owned(), device.device_info());
    let written = tokio::task::spawn_blocking(move || match devinfo::file::read(&file) {
        Ok(Some(_)) => Ok(()),
        Ok(None) | Err(_) => devinfo::file::write(&file, &info),
    })
    .await
    .map_err(|e| SriovError::State { path: path.display().to_string(), cause: StateCause::Task(e) })?;
    Ok(written?)
}

fn require_env(env: &InvocationEnv) -> Result<(), SriovError> {
    for (name, value) in
        [("CNI_CONTAINERID", &env.container_id), ("CNI_NETNS", &env.netns), ("CNI_IFNAME", &env.ifname)]
    {
        if value.is_empty() {
            return Err(SriovError::Environment(format!("{name} is required")));
        }
    }
    Ok(())
}

impl NativePlugin for SriovPlugin {
    /// The VF's device-info file is written when the engine passes one, whatever the config
    /// declares (sriov-cni has no such capability, so no NAD written for it declares it); the
    /// built-in IPAM honours an IPAMClaim likewise.
    fn capabilities(&self) -> &'static [&'static str] {
        &[devinfo::CAPABILITY, crate::ipam::claim::RUNTIME_CONFIG_KEY]
    }

    fn invoke<'a>(&'a self, call: NativeCall<'a>) -> BoxFuture<'a, Result<Option<Value>, DelegateError>> {
        invocation::invoke(self, call)
    }
}

impl NativeType for SriovPlugin {
    const TYPE: &'static str = super::TYPE;

    type Error = SriovError;

    async fn add(&self, config: &Value, env: &InvocationEnv) -> Result<Value, SriovError> {
        let conf = SriovConf::parse(config, &env.args)?;
        require_env(env)?;
        let device = sysfs::discover(&self.sysfs_root, &conf.device_id)?;
        let _guard = self.locks.lock(&device.pci).await?;
        if let Some(held) = self.store.load(&device.pci).await? {
            if !held.owner.is(env) {
                return Err(SriovError::Busy { pci: device.pci, holder: held.owner.to_string() });
            }
            // This very attachment again: an ADD cut short by a crash, or repeated. Start over
            // from the VF as it was before the first attempt.
            tracing::info!(vf = %device.pci, "ADD again for {}; restoring the VF first", held.owner);
            self.release(&held, &held.config, &held.owner.env()).await?;
        }
        let mut record = self.claim(&conf, device, config, env).await?;
        let mut ipam_allocated = false;
        match self.attach(&conf, &mut record, config, env, &mut ipam_allocated).await {
            Ok(result) => Ok(result),
            Err(error) => Err(self.undo(&record, config, env, ipam_allocated, error).await),
        }
    }

    async fn del(&self, config: &Value, env: &InvocationEnv) -> Result<(), SriovError> {
        let held = match device_id_for_del(config) {
            Some(pci) => {
                let guard = self.locks.lock(&pci).await?;
                let record = self.store.load(&pci).await?;
                Some((guard, record))
            }
            None => None,
        };
        match held {
            Some((_guard, Some(record))) if record.owner.is(env) => self.release(&record, config, env).await,
            // No VF of ours (never claimed, already released, or held by another attachment, as
            // when the runtime undoes an ADD refused for a busy VF): IPAM may still hold
            // something for this attachment, and DEL must release all of it.
            _ => {
                if has_ipam_for_del(config) {
                    self.ipam.del(config, env).await.map_err(SriovError::ipam)?;
                }
                Ok(())
            }
        }
    }

    async fn check(&self, config: &Value, env: &InvocationEnv) -> Result<(), SriovError> {
        let conf = SriovConf::parse(config, &env.args)?;
        require_env(env)?;
        let _guard = self.locks.lock(&conf.device_id).await?;
        let record = match self.store.load(&conf.device_id).await? {
            Some(record) if record.owner.is(env) && record.complete => record,
            Some(record) => {
                return Err(SriovError::Busy { pci: conf.device_id, holder: record.owner.to_string() })
            }
            None => {
                return Err(SriovError::Device {
                    pci: conf.device_id,
                    detail: format!("is not attached to container {} as {}", env.container_id, env.ifname),
                })
            }
        };
        let mut expected = record.original;
        for setting in conf.vf_settings() {
            expected.apply(&setting);
        }
        let actual = self.pf.read(&record.device.pf, record.device.vf).await?;
        for setting in conf.vf_settings() {
            if actual.setting(setting.kind()) != expected.setting(setting.kind()) {
                return Err(SriovError::Device {
                    pci: record.device.pci,
                    detail: format!("expected {setting}, the PF reports {}", actual.setting(setting.kind())),
                });
            }
        }
        if conf.has_ipam {
            self.ipam.check(config, env).await.map_err(SriovError::ipam)?;
        }
        if record.netdev.is_some() {
            let pod = Netlink::pod(Path::new(&env.netns)).await?;
            let link = pod.require(&env.ifname).await?;
            if let Some(mac) = conf.mac {
                if link.mac.as_deref() != Some(mac.to_string().as_str()) {
                    return Err(SriovError::Device {
                        pci: record.device.pci,
                        detail: format!("{} has MAC {:?}, expected {mac}", env.ifname, link.mac),
                    });
                }
            }
            if let Some(prev) = config.get("prevResult").filter(|v| !v.is_null()) {
                let prev = CniResult::parse(prev, &conf.cni_version)
                    .map_err(|e| SriovError::Config(format!("prevResult: {e}")))?;
                verify_ips(&pod, &env.ifname, &prev.ips).await?;
                verify_routes(&pod, &prev.routes).await?;
            }
        }
        Ok(())
    }

    /// Nothing to be ready for: every VF is found (or not) when a pod asks for it.
    async fn status(&self, _config: &Value) -> Result<(), SriovError> {
        Ok(())
    }

    /// Releases the VFs of this network's attachments that are not in the runtime's list of
    /// valid ones. The list only covers the network GC runs for (by `name`), so records of
    /// other networks are left alone. IPAM is released with the config each was added with;
    /// the IPAM plugins' own GC is not run.
    async fn gc(&self, config: &Value) -> Result<(), SriovError> {
        let Some(network) = config.get("name").and_then(Value::as_str) else {
            return Err(SriovError::Config("GC needs the network's \"name\"".into()));
        };
        let valid: HashSet<AttachmentKey> = valid_attachments(config).into_iter().collect();
        let mut errors = Vec::new();
        for record in self.store.list().await? {
            let of_network = record.config.get("name").and_then(Value::as_str) == Some(network);
            if !of_network
                || valid.contains(&AttachmentKey::new(&record.owner.container_id, &record.owner.ifname))
            {
                continue;
            }
            let _guard = self.locks.lock(&record.device.pci).await?;
            // Re-read under the lock: a DEL may have released it, or another ADD taken it, since.
            let Some(current) = self.store.load(&record.device.pci).await? else { continue };
            if current.owner != record.owner {
                continue;
            }
            if let Err(e) = self.release(&current, &current.config, &current.owner.env()).await {
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SriovError::Netlink {
                what: "GC of VFs no longer attached".into(),
                detail: errors.join("; "),
            })
        }
    }
}
