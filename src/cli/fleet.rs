//! The flags `run` and `check` share: where the members are declared and how the hub is used.
//! `check` takes them with the same names, environment variables and defaults, so that it
//! checks what `run` with the same settings would use.

use std::path::PathBuf;

use clap::Args;
use fleetnet_hub::check::{HubOptions, Leases};
use fleetnet_hub::config::{DEFAULT_LEADER_ELECTION_ID, release_namespace};
use fleetnet_hub::fleet::registry::DEFAULT_NAMESPACE_PREFIX;

/// Members' sources, the hub and the replicas' coordination.
#[derive(Args, Clone, Debug)]
pub struct FleetArgs {
    /// Directory with one kubeconfig per member (file name without extension = member name).
    #[arg(long, env = "FLEETNET_KUBECONFIG_DIR", default_value = "kubeconfigs")]
    pub(crate) kubeconfig_dir: PathBuf,
    /// The member namespace of derived Services and imported EndpointSlices (the reference
    /// agents' `--fleet-system-namespace`).
    #[arg(long, env = "FLEETNET_FLEET_SYSTEM_NAMESPACE", default_value = fleetnet_hub::config::DEFAULT_FLEET_SYSTEM_NAMESPACE)]
    pub(crate) fleet_system_namespace: String,
    /// Hub kubeconfig; in-cluster configuration when absent.
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    pub(crate) hub_kubeconfig: Option<PathBuf>,
    /// Hub namespace of member `m` is `<prefix><m>`.
    #[arg(long, env = "FLEETNET_HUB_NAMESPACE_PREFIX", default_value = DEFAULT_NAMESPACE_PREFIX)]
    pub(crate) hub_namespace_prefix: String,
    /// Elect a leader on a Lease in the hub; standbys keep watches warm and do not write.
    #[arg(long, env = "FLEETNET_LEADER_ELECT")]
    pub(crate) leader_elect: bool,
    /// Shard members across the replicas: members hashed onto --shards shard Leases (named
    /// after --leader-election-id), shards owned by rendezvous hashing over the live replicas.
    /// Replaces --leader-elect (the one-replica case of it).
    #[arg(long, env = "FLEETNET_SHARD_MEMBERS")]
    pub(crate) shard_members: bool,
    /// Namespace of the leader Lease, the shard Leases and the pending-cleanup records
    /// (defaults to $POD_NAMESPACE, else `default`).
    #[arg(long, env = "FLEETNET_LEADER_ELECTION_NAMESPACE")]
    pub(crate) leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "FLEETNET_LEADER_ELECTION_ID",
        default_value = DEFAULT_LEADER_ELECTION_ID
    )]
    pub(crate) leader_election_id: String,
    /// Read members from labelled Secrets too (`fleetnet.azure.com/member-kubeconfig: "true"`,
    /// the kubeconfig in data key `kubeconfig`), watched in --member-secrets-namespace.
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) member_secrets: bool,
    /// Namespace of the member Secrets (default: the release namespace, as
    /// --leader-election-namespace).
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS_NAMESPACE")]
    pub(crate) member_secrets_namespace: Option<String>,
    /// Read members from fleet's inventory too: its MemberClusters, each one's ClusterProfile
    /// (server, CA) and the token of the Secret named after the profile in
    /// --member-secrets-namespace (the cluster-inventory API's secret-reader convention).
    #[arg(long, env = "FLEETNET_MEMBER_INVENTORY", default_value_t = false, action = clap::ArgAction::Set)]
    pub(crate) member_inventory: bool,
    /// Namespace of fleet's ClusterProfiles (fleet writes them in its system namespace).
    #[arg(
        long,
        env = "FLEETNET_INVENTORY_PROFILE_NAMESPACE",
        default_value = "fleet-system"
    )]
    pub(crate) inventory_profile_namespace: String,
    /// When a member's kubeconfig is removed, delete its exports from the hub and its finalizers.
    #[arg(long, env = "FLEETNET_CLEANUP_ON_REMOVE")]
    pub(crate) cleanup_on_remove: bool,
}

impl FleetArgs {
    /// The release namespace: --leader-election-namespace, else $POD_NAMESPACE, else `default`.
    pub(crate) fn release_namespace(&self) -> String {
        release_namespace(self.leader_election_namespace.clone())
    }

    /// How `run` would use the hub, for `check`.
    pub(crate) fn hub_options(&self) -> HubOptions {
        let records_namespace = self.release_namespace();
        let leases = match (self.shard_members, self.leader_elect) {
            (true, _) => Leases::Shards,
            (false, true) => Leases::Leader(self.leader_election_id.clone()),
            (false, false) => Leases::None,
        };
        HubOptions {
            kubeconfig: self.hub_kubeconfig.clone(),
            namespace_prefix: self.hub_namespace_prefix.clone(),
            member_secrets_namespace: self.member_secrets.then(|| {
                self.member_secrets_namespace
                    .clone()
                    .unwrap_or_else(|| records_namespace.clone())
            }),
            records_namespace,
            leases,
            cleanup_on_remove: self.cleanup_on_remove,
        }
    }
}
