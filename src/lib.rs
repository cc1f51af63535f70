//! fleetnet-hub: one process in the Azure Kubernetes Fleet hub that exports every member
//! cluster's Services (ServiceExport → InternalServiceExport), one reconciler per member.

pub mod api;
pub mod azure;
pub mod client;
pub mod export;
