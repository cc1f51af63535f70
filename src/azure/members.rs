//! Azure per member: which subscription and default resource group each member's public IPs
//! are looked up in (`--member-config`, else the process defaults).

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use super::AzureFleet;
use crate::config::MemberConfigFile;
use crate::export::{LookupError, PublicIp, PublicIpLookup};
use crate::fleet::MemberAzure;

/// Azure per member: subscription and default resource group from `--member-config`,
/// falling back to the process defaults; one shared client per subscription.
///
/// The file is read again once per directory rescan ([`MemberAzure::reload`]), so a member
/// added at runtime gets its settings without a restart, and a member whose settings change is
/// re-engaged. A file that became unreadable or invalid keeps the last good settings (and says
/// so in the log, once per rescan).
pub struct AzureMembers {
    fleet: AzureFleet,
    path: Option<PathBuf>,
    default_resource_group: String,
    last_good: Mutex<MemberConfigFile>,
}

/// A member's Azure settings after the fallbacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAzure {
    /// `None`: the process's default subscription.
    pub subscription: Option<String>,
    pub resource_group: String,
}

impl AzureMembers {
    /// `initial` is the member config already read at start (an invalid file fails start-up).
    pub fn new(
        fleet: AzureFleet,
        path: Option<PathBuf>,
        initial: MemberConfigFile,
        default_resource_group: String,
    ) -> Self {
        Self {
            fleet,
            path,
            default_resource_group,
            last_good: Mutex::new(initial),
        }
    }

    /// The member's settings as of the last [`MemberAzure::reload`].
    pub fn resolve(&self, member: &str) -> ResolvedAzure {
        let settings = self.last_good.lock().members.get(member).cloned();
        let settings = settings.unwrap_or_default();
        ResolvedAzure {
            subscription: settings
                .azure_subscription_id
                .filter(|s| !s.trim().is_empty()),
            resource_group: settings
                .azure_resource_group
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| self.default_resource_group.clone()),
        }
    }
}

impl MemberAzure for AzureMembers {
    fn reload(&self) {
        let Some(path) = &self.path else { return };
        match MemberConfigFile::load(path) {
            Ok(file) => *self.last_good.lock() = file,
            Err(e) => tracing::warn!(error = %e, "keeping the last valid member config"),
        }
    }

    fn for_member(&self, member: &str) -> (Arc<dyn PublicIpLookup>, String) {
        let resolved = self.resolve(member);
        let lookup = match self.fleet.for_member(resolved.subscription.as_deref()) {
            Ok(lookup) => lookup,
            Err(e) => Arc::new(Unavailable(format!("member {member}: {e}"))),
        };
        (lookup, resolved.resource_group)
    }

    fn settings_key(&self, member: &str) -> String {
        let resolved = self.resolve(member);
        format!(
            "{}/{}",
            resolved.subscription.unwrap_or_default(),
            resolved.resource_group
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

    fn azure_members(path: &std::path::Path) -> AzureMembers {
        let fleet = AzureFleet::new(AzureConfig {
            credential: CredentialKind::AzureCli,
            default_subscription_id: Some("00000000-0000-0000-0000-000000000001".into()),
            ..AzureConfig::default()
        })
        .expect("azure fleet");
        let initial = MemberConfigFile::load(path).expect("initial member config");
        AzureMembers::new(
            fleet,
            Some(path.to_path_buf()),
            initial,
            "default-rg".into(),
        )
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
        let members = azure_members(&path);
        assert_eq!(
            members.resolve("east"),
            ResolvedAzure {
                subscription: Some("00000000-0000-0000-0000-0000000000e1".into()),
                resource_group: "mc_east".into(),
            }
        );
        // Not in the file: the process defaults.
        assert_eq!(
            members.resolve("west"),
            ResolvedAzure {
                subscription: None,
                resource_group: "default-rg".into(),
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
        members.reload();
        assert_eq!(members.resolve("west").resource_group, "mc_west");
        assert_ne!(members.settings_key("east"), east_before);
        assert_ne!(members.settings_key("west"), west_before);
        let (_, rg) = members.for_member("east");
        assert_eq!(rg, "mc_east_2");
        assert_eq!(members.fleet.subscription_count(), 1);
        let (_, rg) = members.for_member("west");
        assert_eq!(rg, "mc_west");
        assert_eq!(
            members.fleet.subscription_count(),
            2,
            "west uses the default subscription"
        );

        // A broken edit does not take the members' settings away.
        std::fs::write(&path, "members: [not, a, map").expect("write");
        members.reload();
        assert_eq!(members.resolve("west").resource_group, "mc_west");
        std::fs::remove_file(&path).expect("remove");
        members.reload();
        assert_eq!(members.resolve("east").resource_group, "mc_east_2");
    }
}
