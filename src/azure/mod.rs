//! Shared Azure Resource Manager clients (public IP lookup for the Traffic Manager feature).
//!
//! One [`AzureFleet`] per process (`client`): one credential (`credential`), one ARM network
//! client (`azure_identity` / `azure_mgmt_network` 0.21), and two stacks of the client policy
//! under azure_core's `HttpClient` (`http`): ARM requests spend one process-wide budget (token
//! bucket + concurrency limit), token requests have a small concurrency limit of their own.
//! Members get a [`crate::export::PublicIpLookup`] for their subscription with
//! [`AzureFleet::member`] (`scope`): only in the resource groups the operator allowed them,
//! each member's LISTs in its own line for the ARM budget. Lookups are served from a
//! per-(subscription, resource group) cache of the group's public IP LIST (`cache`, `lookup`).
//! Plain types at the bottom: the configuration (`config`), the errors (`error`) and the
//! counters (`stats`); arrows run one way, config -> cache -> lookup -> scope -> credential ->
//! client.

mod cache;
mod client;
mod config;
mod credential;
mod error;
mod http;
mod lookup;
mod members;
mod redact;
mod scope;
mod stats;

pub use client::AzureFleet;
pub use config::{
    AZURE_AUTHORITY_HOST_ENV, AZURE_PUBLIC_CLOUD_ARM, AZURE_PUBLIC_CLOUD_AUTHORITY, AzureConfig,
    ConfigError, CredentialKind, IMDS_TOKEN_ENDPOINT, Secret, authority_host_of,
};
pub use error::AzureError;
pub use lookup::SubscriptionPublicIps;
pub use members::{AzureMembers, ResolvedAzure};
pub use scope::MemberPublicIps;
pub use stats::{AzureStats, AzureStatsSnapshot, TokenStatsSnapshot};
