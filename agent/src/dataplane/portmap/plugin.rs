//! The `plexus-portmap` CNI plugin type: a drop-in replacement for the reference `portmap` in a
//! configlist, run inside the agent.
//!
//! ```json
//! {"cniVersion": "1.0.0", "name": "storage", "plugins": [
//!   {"type": "macvlan", "master": "eth1", "ipam": {...}},
//!   {"type": "plexus-portmap", "capabilities": {"portMappings": true}}]}
//! ```
//!
//! ADD reads the pod's interface, MAC and addresses from prevResult and the mappings from
//! `runtimeConfig.portMappings`, installs the map entries and attaches the programs; the rest
//! is every chained plugin's (see [`crate::dataplane::chained`]).

use std::path::Path;

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::PortmapConf;
use super::entries::plan;
use super::mapper::Mapper;
use super::store::Record;
use super::topology::{pod_side, resolve, Attachment, Topology};
use super::PortmapError;
use crate::cni::result::CniResult;
use crate::dataplane::chained::{pod_name, ChainArgs, Chained, ChainedPlugin};
use crate::dataplane::{netdev, DataplaneOptions};
use crate::delegate::env::InvocationEnv;
use crate::delegate::native::NativeCall;
use crate::netlink::{gro_on, run_in};

/// The CNI `type` of the plugin.
pub const TYPE: &str = "plexus-portmap";

pub type PortmapPlugin = ChainedPlugin<Mapper>;

impl Chained for Mapper {
    const TYPE: &'static str = TYPE;
    type Conf = PortmapConf;
    type Error = PortmapError;

    fn parse(config: &Value) -> Result<PortmapConf, PortmapError> {
        Ok(PortmapConf::parse(config)?)
    }

    fn chain(conf: &PortmapConf) -> &ChainArgs {
        &conf.chain
    }

    fn requested(conf: &PortmapConf) -> bool {
        !conf.mappings.is_empty()
    }

    /// The attachment's topology on the node and the entries of its mappings.
    fn plan<'a>(
        conf: &'a PortmapConf,
        prev: &'a CniResult,
        call: &'a NativeCall<'a>,
        options: &'a DataplaneOptions,
    ) -> BoxFuture<'a, Result<Record, PortmapError>> {
        Box::pin(async move {
            let env = call.env;
            let pod = pod_side(prev, &env.ifname)?;
            let (node, default_route) = netdev::snapshot().await?;
            let attachment = Attachment {
                network: &conf.chain.network,
                first_plugin: call.list.and_then(|l| l.plugins.first()),
                prev,
                ifname: &env.ifname,
                host_interface: conf.host_interface.as_deref(),
                uplinks: conf.uplinks.as_deref(),
                xdp_on_master: options.xdp.on_macvlan_masters(),
            };
            let mut topology = resolve(&attachment, &node, default_route)?;
            topology.pod_takes_xdp = pod_takes_xdp(&topology, env).await;
            let entries = plan(&conf.chain.network, &conf.mappings, &pod, &topology)?;
            Ok(Record {
                container_id: env.container_id.clone(),
                ifname: env.ifname.clone(),
                network: conf.chain.network.clone(),
                pod: pod_name(&env.args),
                hooks: topology.hooks_for(entries.iter().map(|e| e.host_ip)),
                entries,
            })
        })
    }
}

/// Whether the pod's end of its veth takes XDP frames: where the bridge has uplinks running the
/// XDP program, GRO is turned on there (in the pod's namespace), which gives the veth the NAPI
/// context it receives redirected XDP frames on. A failure only costs the redirect: requests
/// reach the pod through the bridge, as without it.
async fn pod_takes_xdp(topology: &Topology, env: &InvocationEnv) -> bool {
    if !topology.has_xdp_uplinks() || env.netns.is_empty() {
        return false;
    }
    let ifname = env.ifname.clone();
    match run_in(Path::new(&env.netns), move || gro_on(&ifname)).await {
        Ok(Ok(on)) => {
            if !on {
                tracing::debug!(ifname = %env.ifname, "GRO stays off on the pod's interface: requests go through the bridge");
            }
            on
        }
        Ok(Err(e)) => {
            tracing::debug!(ifname = %env.ifname, "cannot turn GRO on on the pod's interface ({e}): requests go through the bridge");
            false
        }
        Err(e) => {
            tracing::debug!("{e}: requests go through the bridge");
            false
        }
    }
}
