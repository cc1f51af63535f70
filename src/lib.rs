//! fleetnet-hub: one process in the Azure Kubernetes Fleet hub that exports every member
//! cluster's Services (ServiceExport → InternalServiceExport) and their EndpointSlices
//! (EndpointSlice → EndpointSliceExport), member-scoped reconcilers per member: each job one
//! folder (`export/`, `slices/`) on one controller kit (`controller/`), listed in `jobs`.

pub mod announce;
pub mod api;
pub mod app;
pub mod azure;
pub mod check;
pub mod client;
pub mod config;
pub mod controller;
pub mod export;
pub mod fleet;
pub mod http;
pub mod hub_watches;
pub mod jobs;
pub mod member_watches;
pub mod membership;
pub mod memory;
pub mod metrics;
pub mod multicluster;
pub mod ownership;
pub mod policy;
#[cfg(feature = "sandbox")]
pub mod sandbox;
pub mod service_exports;
pub mod service_imports;
pub mod slice_imports;
pub mod slices;
pub mod status;
pub mod telemetry;
pub mod uninstall;
