//! The code generated from `proto/network.proto` by `agent/build.rs` (package `runtime.v1`):
//! its messages, the `RuntimeService` server (`runtime_service_server`) and client
//! (`runtime_service_client`).

#![allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]

tonic::include_proto!("runtime.v1");
