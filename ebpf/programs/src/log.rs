//! The programs' rare events, logged with aya-log-ebpf at debug level: a flow table that refuses
//! a flow, a live flow replaced, a helper failing halfway through a rewrite (the packet is
//! dropped), a packet refused for its shape. Never on a per-packet fast path: every call site is
//! on a branch that only such an event takes. The records go to the object's `AYA_LOGS` ring
//! buffer, which the agent pins and reads (agent/src/dataplane/loader.rs) into its `tracing`
//! log, at debug, under the target of the module that logged (`plexus_ebpf::...`).

/// Logs a rare event (see the module's notes) at debug level: a format string and its
/// arguments, as aya-log-ebpf's `debug!` takes them after the context (which it does not use).
#[macro_export]
macro_rules! rare {
    ($($arg:tt)+) => {
        ::aya_log_ebpf::debug!(&(), $($arg)+)
    };
}
