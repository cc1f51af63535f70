//! One member's public IP lookups: only in the resource groups the operator gave it, and in its
//! own line for the shared ARM budget.

use std::sync::Arc;

use super::lookup::{SubscriptionPublicIps, check_resource_group};
use crate::export::{LookupError, PublicIp, PublicIpLookup, resource_group_allowed};
use crate::policy::Turn;

/// A member's lookups in its subscription. A group outside its allowlist is refused without
/// asking ARM (the decision already refuses it; this is the last gate before the shared
/// identity reads anything). The LISTs it starts wait for ARM tokens in the member's own
/// [`Turn`]: however many it starts, it holds one place in the budget's line, so another
/// member's lookup waits for at most one of its tokens.
pub struct MemberPublicIps {
    member: String,
    default_resource_group: String,
    allowed_resource_groups: Vec<String>,
    subscription: Arc<SubscriptionPublicIps>,
    turn: Turn,
}

impl MemberPublicIps {
    pub(crate) fn new(
        member: &str,
        default_resource_group: &str,
        allowed_resource_groups: &[String],
        subscription: Arc<SubscriptionPublicIps>,
    ) -> Self {
        Self {
            member: member.to_owned(),
            default_resource_group: default_resource_group.to_owned(),
            allowed_resource_groups: allowed_resource_groups.to_vec(),
            subscription,
            turn: Turn::default(),
        }
    }

    /// The subscription this member's lookups list in (its configured one, never a Service's).
    pub fn subscription(&self) -> &str {
        self.subscription.subscription()
    }
}

impl std::fmt::Debug for MemberPublicIps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberPublicIps")
            .field("member", &self.member)
            .field("subscription", &self.subscription())
            .field("default_resource_group", &self.default_resource_group)
            .field("allowed_resource_groups", &self.allowed_resource_groups)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl PublicIpLookup for MemberPublicIps {
    async fn find_by_address(
        &self,
        resource_group: &str,
        ip: &str,
    ) -> Result<Option<PublicIp>, LookupError> {
        if resource_group.trim().is_empty() {
            // A Service that names no group, of a member given none: a setting is missing.
            return Err(LookupError::Failed {
                resource_group: String::new(),
                message: format!(
                    "member {} has no Azure resource group: set azureResourceGroup in --member-config or --azure-resource-group",
                    self.member
                ),
            });
        }
        let allowed = resource_group_allowed(
            &self.default_resource_group,
            &self.allowed_resource_groups,
            resource_group,
        );
        if !allowed {
            return Err(LookupError::NotAllowed {
                member: self.member.clone(),
                resource_group: resource_group.to_owned(),
            });
        }
        let resource_group = resource_group.trim();
        check_resource_group(resource_group)?;
        self.subscription
            .cache
            .find(resource_group, ip, Some(&self.turn))
            .await
    }
}
