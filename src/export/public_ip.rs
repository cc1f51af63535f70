//! The port through which the reconciler asks Azure about public IPs (Traffic Manager feature).
//! `crate::azure` implements it; tests may implement it too.

use std::time::Duration;

/// What the reconciler needs to know about an Azure public IP address resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicIp {
    /// ARM resource ID, e.g. `/subscriptions/…/resourceGroups/…/providers/Microsoft.Network/publicIPAddresses/…`.
    pub id: String,
    /// Whether `properties.dnsSettings.domainNameLabel` is set.
    pub dns_label_configured: bool,
}

/// Why a lookup failed. Either way the reconcile is retried later with backoff.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LookupError {
    /// ARM answered 429; `retry_after` is its `Retry-After`, when given.
    #[error("throttled by Azure Resource Manager listing public IPs in resource group {resource_group}{}",
        retry_after.map(|d| format!(" (retry after {d:?})")).unwrap_or_default())]
    Throttled {
        resource_group: String,
        retry_after: Option<Duration>,
    },
    /// Anything else: transport, auth, 5xx, malformed response.
    #[error("listing public IPs in resource group {resource_group}: {message}")]
    Failed {
        resource_group: String,
        message: String,
    },
}

/// Finds the public IP whose `properties.ipAddress` equals an address, within a resource group.
#[async_trait::async_trait]
pub trait PublicIpLookup: Send + Sync + 'static {
    /// `Ok(None)` when no public IP in `resource_group` has address `ip` (yet).
    async fn find_by_address(
        &self,
        resource_group: &str,
        ip: &str,
    ) -> Result<Option<PublicIp>, LookupError>;
}
