//! Taking a node over from another multi-network implementation: what it left on the node
//! for the DELs of the pods it attached, read so that plexus runs those DELs as it would
//! have. Today Multus's cache ([`multus`]: its format, pure; [`store`]: its files).

pub mod multus;
pub mod store;

pub use store::MultusCache;
