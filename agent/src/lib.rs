//! plexus agent: attaches pods to secondary networks per the NPWG multi-network spec v1.1 and
//! KEP-3698's PodNetworks ([`podnetwork`]; their controller: [`controller`]), through one engine.
//!
//! The path of one request reads top to bottom:
//! [`server`] (Unix socket) → [`engine`] (order, locking, undo) → [`spec`] (pure: selection,
//! plan, delegate configs, network-status) → [`catalog`] (NADs, pods, on-disk CNI configs;
//! [`kube`] on a cluster) →
//! [`delegate`] (exec of CNI plugins), [`native`] (plugins over [`netlink`]) and [`netns`] (the
//! default-route selection inside the pod) → [`state`]
//! (durable record of every attachment). [`policy`] says which networks each namespace may use.
//! [`live`] applies changes of a running pod's selection through the same engine.

pub mod catalog;
pub mod cni;
pub mod controller;
pub mod cri;
pub mod dataplane;
pub mod delegate;
pub mod devices;
pub mod devinfo;
pub mod doctor;
pub mod engine;
pub mod failpoint;
pub mod install;
pub mod ipam;
pub mod kube;
pub mod live;
pub mod memory;
pub mod metrics;
pub mod native;
pub mod netapi;
pub mod netlink;
pub mod netns;
pub mod options;
pub mod phase;
pub mod podnetwork;
pub mod policy;
pub mod readiness;
pub mod server;
pub mod spec;
pub mod state;
pub mod takeover;
