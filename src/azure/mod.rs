//! Shared Azure Resource Manager clients (public IP lookup for the Traffic Manager feature).
//!
//! One [`AzureFleet`] per process: one credential, one ARM network client (built on
//! `azure_identity` / `azure_mgmt_network` 0.21), one global request budget (token bucket +
//! concurrency limit) and one retry policy. Every ARM request and every token request goes
//! through a tower stack (`transport`) under azure_core's `HttpClient` (`http_client`).
//! Members get a [`crate::export::PublicIpLookup`] for their subscription with
//! [`AzureFleet::for_member`]; lookups are served from a per-(subscription, resource group)
//! cache of the group's public IP LIST.

mod cache;
mod config;
mod credential;
mod error;
mod fleet;
mod http_client;
mod lookup;
mod members;
mod retry;
mod stats;
mod transport;

pub use config::{
    AZURE_PUBLIC_CLOUD_ARM, AZURE_PUBLIC_CLOUD_AUTHORITY, AzureConfig, CredentialKind,
    IMDS_TOKEN_ENDPOINT,
};
pub use error::{AzureError, ConfigError};
pub use fleet::AzureFleet;
pub use lookup::SubscriptionPublicIps;
pub use members::{AzureMembers, ResolvedAzure};
pub use stats::{AzureStats, AzureStatsSnapshot, TokenStatsSnapshot};
