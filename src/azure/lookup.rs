//! [`PublicIpLookup`] for one subscription: a cached LIST of the group's public IPs.

use std::sync::Arc;

use azure_core::auth::TokenCredential;
use azure_mgmt_network::package_2024_03::public_ip_addresses;
use futures::StreamExt;

use super::cache::{GroupCache, GroupLister, IpIndex, Listed, normalize_ip};
use super::http::{ArmFailure, error_chain};
use crate::export::{LookupError, PublicIp, PublicIpLookup};

/// A LIST whose `nextLink`s go on longer than this is treated as broken (a paging loop).
const MAX_PAGES: usize = 1000;

/// Lists one resource group of one subscription through the shared SDK client.
pub(crate) struct ArmLister {
    pub client: public_ip_addresses::Client,
    pub subscription: String,
    pub credential: Arc<dyn TokenCredential>,
}

#[async_trait::async_trait]
impl GroupLister for ArmLister {
    async fn list(&self, resource_group: &str, max_ips: usize) -> Result<Listed, LookupError> {
        let mut pages = self
            .client
            .list(resource_group, &self.subscription)
            .into_stream();
        let mut index = IpIndex::new();
        let mut count = 0usize;
        let mut truncated = false;
        // Dropping the stream stops the LIST: no page past the cap is asked for.
        while !truncated && let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(error) => {
                    if arm_failure(&error).is_some_and(|f| f.status == Some(401)) {
                        // ARM rejected a cached, unexpired token (revoked, wrong tenant, clock
                        // skew): drop it so the next LIST fetches a new one instead of failing
                        // until it expires.
                        if let Err(e) = self.credential.clear_cache().await {
                            tracing::warn!(error = %e, "clearing the Azure token cache");
                        }
                    }
                    return Err(classify(&error, &self.subscription, resource_group));
                }
            };
            count += 1;
            if count > MAX_PAGES {
                return Err(LookupError::Failed {
                    resource_group: resource_group.to_owned(),
                    message: format!(
                        "subscription {}: ARM returned more than {MAX_PAGES} pages (nextLink loop?)",
                        self.subscription
                    ),
                });
            }
            for ip in page.value {
                let Some(properties) = ip.properties else {
                    continue;
                };
                let (Some(address), Some(id)) = (properties.ip_address, ip.resource.id) else {
                    continue; // e.g. a dynamic IP not allocated yet
                };
                if index.len() >= max_ips {
                    truncated = true;
                    break;
                }
                let dns_label_configured = properties
                    .dns_settings
                    .and_then(|d| d.domain_name_label)
                    .is_some_and(|label| !label.is_empty());
                index.insert(
                    normalize_ip(&address),
                    PublicIp {
                        id,
                        dns_label_configured,
                    },
                );
            }
        }
        tracing::debug!(
            subscription = %self.subscription,
            resource_group,
            pages = count,
            public_ips = index.len(),
            truncated,
            "listed public IPs"
        );
        Ok(Listed {
            by_ip: index,
            truncated,
        })
    }
}

/// The [`ArmFailure`] somewhere in `error`'s chain of sources.
fn arm_failure<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a ArmFailure> {
    std::iter::successors(Some(error), |e| e.source()).find_map(|e| e.downcast_ref())
}

/// Maps an SDK error to the port's error, with subscription and resource group.
fn classify(error: &azure_core::Error, subscription: &str, resource_group: &str) -> LookupError {
    if let Some(failure) = arm_failure(error) {
        if failure.status == Some(429) {
            return LookupError::Throttled {
                resource_group: resource_group.to_owned(),
                retry_after: failure.retry_after,
            };
        }
        return LookupError::Failed {
            resource_group: resource_group.to_owned(),
            message: format!("subscription {subscription}: {failure}"),
        };
    }
    let what = match error.kind() {
        azure_core::error::ErrorKind::DataConversion => "malformed ARM response",
        azure_core::error::ErrorKind::Credential => "getting an Azure token",
        _ => "ARM request failed",
    };
    LookupError::Failed {
        resource_group: resource_group.to_owned(),
        message: format!(
            "subscription {subscription}: {what}: {}",
            error_chain(error)
        ),
    }
}

/// Resource group names: 1–90 characters, no path or query syntax (they go into the URL path).
pub(crate) fn check_resource_group(resource_group: &str) -> Result<(), LookupError> {
    let bad = resource_group.is_empty()
        || resource_group.chars().count() > 90
        || resource_group.ends_with('.')
        || resource_group
            .chars()
            .any(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')')));
    if bad {
        return Err(LookupError::Failed {
            resource_group: resource_group.to_owned(),
            message: "not a valid resource group name".to_owned(),
        });
    }
    Ok(())
}

/// Public IP lookups in one subscription. Shared by every member of that subscription
/// (get it from [`super::AzureFleet::for_member`]); cheap to call from any number of tasks.
pub struct SubscriptionPublicIps {
    pub(crate) subscription: String,
    pub(crate) cache: GroupCache<ArmLister>,
}

impl SubscriptionPublicIps {
    /// The subscription this lookup lists in.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }
}

impl std::fmt::Debug for SubscriptionPublicIps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionPublicIps")
            .field("subscription", &self.subscription)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl PublicIpLookup for SubscriptionPublicIps {
    async fn find_by_address(
        &self,
        resource_group: &str,
        ip: &str,
    ) -> Result<Option<PublicIp>, LookupError> {
        check_resource_group(resource_group)?;
        self.cache.find(resource_group, ip, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_group_names() {
        for ok in [
            "mc_rg_aks_eastus",
            "MyRG",
            "rg.with.dots",
            "rg(1)",
            "ägypten",
        ] {
            assert!(check_resource_group(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "a?b", "rg.", "a b", "a%2Fb", &"x".repeat(91)] {
            assert!(check_resource_group(bad).is_err(), "{bad}");
        }
    }
}
