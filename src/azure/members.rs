//! Azure per member: which subscription and resource groups each member's public IPs are
//! looked up in (`--member-config`, else the process defaults).

use std::sync::Arc;

use super::client::AzureFleet;
use crate::export::{LookupError, PublicIp, PublicIpAccess, PublicIpLookup};
use crate::fleet::MemberAzure;
use crate::fleet::MemberConfig;

/// Azure per member: subscription and default resource group from `--member-config` (the
/// fleet's [`MemberConfig`], read again at every rescan: a member whose settings change is
/// re-engaged), falling back to the process defaults; one shared client per subscription.
pub struct AzureMembers {
    fleet: AzureFleet,
    settings: Arc<MemberConfig>,
    default_resource_group: String,
}

/// A member's Azure settings after the fallbacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAzure {
    /// `None`: the process's default subscription.
    pub subscription: Option<String>,
    pub resource_group: String,
    /// Groups a Service may name besides `resource_group` (`azureResourceGroups`; none for a
    /// member with no settings).
    pub allowed_resource_groups: Vec<String>,
}

impl AzureMembers {
    /// `settings` is the process's member config (the one the fleet reads again).
    pub fn new(
        fleet: AzureFleet,
        settings: Arc<MemberConfig>,
        default_resource_group: String,
    ) -> Self {
        Self {
            fleet,
            settings,
            default_resource_group,
        }
    }

    /// The member's settings as of the last rescan.
    pub fn resolve(&self, member: &str) -> ResolvedAzure {
        let settings = self.settings.member(member);
        ResolvedAzure {
            subscription: settings
                .azure_subscription_id
                .filter(|s| !s.trim().is_empty()),
            resource_group: settings
                .azure_resource_group
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| self.default_resource_group.clone()),
            allowed_resource_groups: settings
                .azure_resource_groups
                .iter()
                .map(|g| g.trim().to_owned())
                .filter(|g| !g.is_empty())
                .collect(),
        }
    }
}

impl MemberAzure for AzureMembers {
    fn for_member(&self, member: &str) -> PublicIpAccess {
        let resolved = self.resolve(member);
        let lookup: Arc<dyn PublicIpLookup> = match self.fleet.member(
            member,
            resolved.subscription.as_deref(),
            &resolved.resource_group,
            &resolved.allowed_resource_groups,
        ) {
            Ok(lookup) => lookup,
            Err(e) => Arc::new(Unavailable(format!("member {member}: {e}"))),
        };
        PublicIpAccess {
            lookup,
            default_resource_group: resolved.resource_group,
            allowed_resource_groups: resolved.allowed_resource_groups,
        }
    }

    fn settings_key(&self, member: &str) -> String {
        let resolved = self.resolve(member);
        // A changed allowlist re-engages the member, like a changed group or subscription.
        format!(
            "{}/{}/{}",
            resolved.subscription.unwrap_or_default(),
            resolved.resource_group,
            resolved.allowed_resource_groups.join(",")
        )
    }
}

/// A lookup that always fails with the reason the member has no usable Azure client: its
/// LoadBalancer exports stay pending (retried with backoff) and the reason shows in logs.
struct Unavailable(String);

#[async_trait::async_trait]
impl PublicIpLookup for Unavailable {
    async fn find_by_address(
        &self,
        resource_group: &str,
        _: &str,
    ) -> Result<Option<PublicIp>, LookupError> {
        Err(LookupError::Failed {
            resource_group: resource_group.into(),
            message: self.0.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::azure::{AzureConfig, CredentialKind};

    fn azure_members(path: &std::path::Path) -> (AzureMembers, Arc<MemberConfig>) {
        let fleet = AzureFleet::new(AzureConfig {
            credential: CredentialKind::AzureCli,
            default_subscription_id: Some("00000000-0000-0000-0000-000000000001".into()),
            ..AzureConfig::default()
        })
        .expect("azure fleet");
        let settings = MemberConfig::load(Some(path.to_path_buf())).expect("member config");
        let settings = Arc::new(settings);
        let members = AzureMembers::new(fleet, settings.clone(), "default-rg".into());
        (members, settings)
    }

    #[test]
    fn member_settings_follow_the_file_and_keep_the_last_valid_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("members.yaml");
        std::fs::write(
            &path,
            "members:\n  east:\n    azureSubscriptionId: 00000000-0000-0000-0000-0000000000e1\n    azureResourceGroup: mc_east\n",
        )
        .expect("write");
        let (members, settings) = azure_members(&path);
        assert_eq!(
            members.resolve("east"),
            ResolvedAzure {
                subscription: Some("00000000-0000-0000-0000-0000000000e1".into()),
                resource_group: "mc_east".into(),
                allowed_resource_groups: vec![],
            }
        );
        // Not in the file: the process defaults.
        assert_eq!(
            members.resolve("west"),
            ResolvedAzure {
                subscription: None,
                resource_group: "default-rg".into(),
                allowed_resource_groups: vec![],
            }
        );
        let east_before = members.settings_key("east");
        let west_before = members.settings_key("west");

        // A member added at runtime, and a changed group: read without a restart.
        std::fs::write(
            &path,
            "members:\n  east:\n    azureSubscriptionId: 00000000-0000-0000-0000-0000000000e1\n    azureResourceGroup: mc_east_2\n  west:\n    azureResourceGroup: mc_west\n",
        )
        .expect("write");
        settings.reload();
        assert_eq!(members.resolve("west").resource_group, "mc_west");
        assert_ne!(members.settings_key("east"), east_before);
        assert_ne!(members.settings_key("west"), west_before);
        let rg = members.for_member("east").default_resource_group;
        assert_eq!(rg, "mc_east_2");
        assert_eq!(members.fleet.subscription_count(), 1);
        let rg = members.for_member("west").default_resource_group;
        assert_eq!(rg, "mc_west");
        assert_eq!(
            members.fleet.subscription_count(),
            2,
            "west uses the default subscription"
        );

        // A broken edit does not take the members' settings away.
        std::fs::write(&path, "members: [not, a, map").expect("write");
        settings.reload();
        assert_eq!(members.resolve("west").resource_group, "mc_west");
        std::fs::remove_file(&path).expect("remove");
        settings.reload();
        assert_eq!(members.resolve("east").resource_group, "mc_east_2");
    }

    /// A Service naming a group outside its member's allowlist gets an error from the member's
    /// lookup without any request (the fleet's ARM endpoint is unreachable: a request would
    /// fail differently); `azureResourceGroups` widens the allowlist, and re-engages the member.
    #[tokio::test]
    async fn a_member_lookup_refuses_groups_outside_its_allowlist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("members.yaml");
        std::fs::write(
            &path,
            "members:\n  east:\n    azureResourceGroup: mc_east\n    azureResourceGroups: [' mc_east_lb ', '']\n",
        )
        .expect("write");
        let (members, settings) = azure_members(&path);
        let east = members.for_member("east");
        assert_eq!(east.default_resource_group, "mc_east");
        assert_eq!(east.allowed_resource_groups, vec!["mc_east_lb".to_string()]);
        for (member, group) in [
            ("east", "mc_west"),
            ("east", "default-rg"),
            ("west", "mc_east"),
        ] {
            let access = members.for_member(member);
            match access.lookup.find_by_address(group, "20.0.0.1").await {
                Err(LookupError::NotAllowed {
                    member: m,
                    resource_group,
                }) => assert_eq!((m.as_str(), resource_group.as_str()), (member, group)),
                other => panic!("{member} in {group}: {other:?}"),
            }
        }
        // A member with no settings: the process default only.
        assert!(
            members
                .for_member("west")
                .allowed_resource_groups
                .is_empty()
        );
        assert_eq!(
            members.for_member("west").default_resource_group,
            "default-rg"
        );

        let before = members.settings_key("east");
        std::fs::write(
            &path,
            "members:\n  east:\n    azureResourceGroup: mc_east\n    azureResourceGroups: [mc_east_lb, mc_shared]\n",
        )
        .expect("write");
        settings.reload();
        assert_ne!(members.settings_key("east"), before, "re-engaged");
        assert_eq!(
            members.for_member("east").allowed_resource_groups,
            vec!["mc_east_lb".to_string(), "mc_shared".to_string()]
        );
    }
}
