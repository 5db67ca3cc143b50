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

use futures::future::BoxFuture;
use serde_json::Value;

use super::config::PortmapConf;
use super::entries::plan;
use super::mapper::Mapper;
use super::store::Record;
use super::topology::{pod_side, resolve, Attachment};
use super::PortmapError;
use crate::cni::result::CniResult;
use crate::dataplane::chained::{pod_name, ChainArgs, Chained, ChainedPlugin};
use crate::dataplane::netdev;
use crate::delegate::native::NativeCall;

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
            };
            let topology = resolve(&attachment, &node, default_route)?;
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
