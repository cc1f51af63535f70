//! The integration tests, one binary: each file is a module, so the crate is linked once for all
//! of them (it was linked once per file: most of the build time and of the build cache). The
//! kit they share is `tests/support`. Run one file's tests with
//! `cargo test -p fleetnet-hub --test e2e -- slices::`.
//!
//! Tests of one binary run in parallel in one process: whatever is process-wide (the tracing
//! subscriber, environment variables, ports) is owned by the kit or set in a child process.

#[path = "../support/mod.rs"]
mod support;

// Its tests run one at a time (a hub, members and several replicas each) and take ~4 minutes in
// all: libtest starts tests in the order of their names, so this name, first, starts that chain
// while the rest of the suite runs beside it rather than after it.
mod across_replicas;
mod azure;
mod chart;
mod check;
mod crds;
mod e2e_kind;
mod export;
mod fleet;
mod ha;
mod hostile;
mod http_server;
mod hub_tap;
mod image;
mod lifecycle;
mod limits;
mod membership;
mod metrics;
mod migration;
mod multicluster;
mod operating;
mod otlp_tls;
mod parity;
mod rbac;
mod restart;
mod security;
mod service_imports;
mod slice_imports;
mod slices;
mod substrate;
mod telemetry;
mod traffic_manager;
