//! plexus agent: attaches pods to secondary networks per the NPWG multi-network spec v1.1,
//! KEP-3698's PodNetworks ([`podnetwork`]; their controller: [`controller`]) and the CRI network
//! API ([`netapi`]), through one engine.
//!
//! The modules are layers, each importing only those below it (docs/architecture.md), and one
//! request's path reads top to bottom: [`server`] (the shim's Unix socket; the CRI network
//! API's gRPC) → [`kube`] and [`live`] (the front-ends) → [`engine`] (order, locking, undo) →
//! [`devices`] and [`catalog`] (NADs, pods, on-disk CNI configs) → [`podnetwork`], [`policy`]
//! and [`netapi`] (the models) → [`native`], [`ipam`], [`dataplane`], [`delegate`] (the
//! attachment types) → [`netlink`] and [`state`] (the system: every netlink socket, the durable
//! record of every attachment) → [`spec`] and [`cni`] (pure: the spec's selection, plan,
//! delegate configs and status; the CNI types every layer shares).

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
pub mod network_policy;
pub mod options;
pub mod phase;
pub mod podnetwork;
pub mod policy;
pub mod readiness;
pub mod server;
pub mod spec;
pub mod state;
pub mod takeover;
