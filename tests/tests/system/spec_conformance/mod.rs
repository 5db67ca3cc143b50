//! Conformance of plexus to the NPWG multi-network spec v1.1, sections 3 to 7: one test
//! per MUST / SHALL / "must fail" requirement, named after its section.
//!
//! Parsing and validation requirements drive the agent's pure spec functions with real
//! annotation text, manifests, CNI configs and CNI results. Everything about attaching,
//! ordering, failures, capabilities, runtimeConfig, CNI_IFNAME, injection, status, the
//! default network, readiness and restrictions runs the real agent, the real `plexus` shim
//! and the reference CNI plugins in network namespaces. Where a test must see what a
//! delegate received, a recording plugin is chained after the real one ([`plexus_tests::Recorder`]).
//!
//! One file per spec section; [`support`] holds the helpers they share, and [`index`] the
//! traceability table (requirement -> test), which a test checks against the test functions of
//! the section files: every test is indexed, every index entry names an existing test.

mod index;
mod section_3_nad;
mod section_4_selection;
mod section_5_status;
mod section_6_default_network;
mod section_7_runtime;
mod support;
