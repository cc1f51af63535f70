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
    /// The group is outside the member's allowlist ([`resource_group_allowed`]): refused
    /// without asking ARM.
    #[error(
        "public IPs in resource group {resource_group:?} are not looked up for member {member}: the group is not allowed for this member"
    )]
    NotAllowed {
        member: String,
        resource_group: String,
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

/// Whether a member may have its public IPs looked up in `resource_group`: its default group
/// (`azureResourceGroup`, else `--azure-resource-group`) or one of the groups the operator
/// allowed it (`azureResourceGroups` in `--member-config`). A Service annotation alone never
/// widens this. An empty name is never allowed.
///
/// ARM resource group names are case-insensitive; only ASCII case is folded here, so two names
/// that are equal here are certainly the same group in ARM (a Unicode fold could equate two
/// names ARM keeps apart, and so let a Service reach a group the operator did not name).
pub fn resource_group_allowed(default: &str, allowed: &[String], resource_group: &str) -> bool {
    let resource_group = resource_group.trim();
    !resource_group.is_empty()
        && std::iter::once(default)
            .chain(allowed.iter().map(String::as_str))
            .any(|g| g.trim().eq_ignore_ascii_case(resource_group))
}

/// A member's public IP lookups and where they may look, from the operator's settings.
#[derive(Clone)]
pub struct PublicIpAccess {
    /// Lookups in the member's subscription, refusing groups outside its allowlist.
    pub lookup: std::sync::Arc<dyn PublicIpLookup>,
    /// The group of a Service that names none.
    pub default_resource_group: String,
    /// Groups a Service may name besides the default.
    pub allowed_resource_groups: Vec<String>,
}

impl std::fmt::Debug for PublicIpAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicIpAccess")
            .field("default_resource_group", &self.default_resource_group)
            .field("allowed_resource_groups", &self.allowed_resource_groups)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::resource_group_allowed;

    #[test]
    fn only_the_default_and_the_listed_groups_are_allowed() {
        let listed = vec!["mc_east_extra".to_string(), " rg-shared ".to_string()];
        for ok in [
            "mc_east",
            "MC_EAST",
            " mc_east ",
            "mc_east_extra",
            "rg-shared",
        ] {
            assert!(resource_group_allowed("mc_east", &listed, ok), "{ok}");
        }
        for refused in ["mc_west", "", " ", "mc_east_", "mc-east", "rg-shared-2"] {
            assert!(
                !resource_group_allowed("mc_east", &listed, refused),
                "{refused}"
            );
        }
        // No default group: only what is listed; nothing at all when nothing is.
        assert!(!resource_group_allowed("", &[], ""));
        assert!(!resource_group_allowed("", &[], "mc_east"));
        assert!(resource_group_allowed("", &listed, "rg-shared"));
        // Only ASCII case is folded: ARM may keep these two apart.
        assert!(!resource_group_allowed("Ägypten", &[], "ägypten"));
    }
}
