//! Delegation to CNI plugin binaries, per the CNI spec: one exec per plugin, configlists
//! chained with prevResult, DEL in reverse with the cached result.

pub mod chain;
pub mod env;
pub mod exec;
pub mod native;

pub use chain::Delegator;
pub use env::InvocationEnv;
pub use exec::DelegateError;
pub use native::{NativeCall, NativePlugin, NativePlugins};
