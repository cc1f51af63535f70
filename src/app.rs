//! Assembles the process: hub client, leader election, HTTP servers, Azure, the fleet runtime;
//! owns shutdown. Used by `fleetnet-hub run`, `sandbox` and the end-to-end tests alike.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::{self, ClientStats, Limits};
use crate::fleet::{self, FleetState, MemberAzure, RuntimeConfig, leader::LeaseConfig};
use crate::http;
use crate::metrics::Metrics;

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    /// The Lease's name; with `shard_members`, the prefix of every lease name.
    pub name: String,
    pub identity: String,
    /// Shard the members across the replicas (a Lease per member, rendezvous hashing over
    /// the replicas' announcements) instead of electing one leader for all.
    pub shard_members: bool,
}

/// Per-member settings (`--member-config`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSettings {
    pub azure_subscription_id: Option<String>,
    pub azure_resource_group: Option<String>,
    pub trace_sampling_ratio: Option<f64>,
}

/// The `--member-config` file: `members: { <name>: MemberSettings }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct MemberConfigFile {
    #[serde(default)]
    pub members: BTreeMap<String, MemberSettings>,
}

impl MemberConfigFile {
    /// Reads and parses the file, naming it in errors.
    pub fn load(path: &std::path::Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read member config {}: {e}", path.display()))
        })?;
        serde_saphyr::from_str::<Option<Self>>(&text)
            .map(Option::unwrap_or_default)
            .map_err(|e| Error::Config(format!("invalid member config {}: {e}", path.display())))
    }
}

/// Everything the process needs, validated.
#[derive(Clone)]
pub struct AppConfig {
    /// `None`: in-cluster configuration.
    pub hub_kubeconfig: Option<PathBuf>,
    pub hub_limits: Limits,
    pub runtime: RuntimeConfig,
    pub leader_election: Option<LeaderElection>,
    pub metrics_bind_address: String,
    pub health_probe_bind_address: String,
}

/// Optional parts supplied by the caller.
#[derive(Clone, Default)]
pub struct Extensions {
    /// Traffic Manager: the shared Azure client, per member.
    pub azure: Option<Arc<dyn MemberAzure>>,
    /// The Azure client's counters, for metrics.
    pub azure_counters: Option<crate::metrics::AzureSource>,
}

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("hub: {0}")]
    Hub(String),
    #[error(transparent)]
    Bind(#[from] http::BindError),
}

/// A running process: where it listens, its state, and how to stop it.
pub struct Running {
    pub health_address: SocketAddr,
    pub metrics_address: SocketAddr,
    pub state: Arc<FleetState>,
    pub metrics: Arc<Metrics>,
    pub leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting work, lets in-flight reconciles finish, releases the lease. Bounded.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if tokio::time::timeout(Duration::from_secs(25), self.task)
            .await
            .is_err()
        {
            tracing::warn!("shutdown did not complete within 25 s");
        }
    }

    /// Resolves when the process stopped by itself.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// Builds the hub client from the kubeconfig (or in-cluster config).
pub async fn hub_client(
    path: Option<&std::path::Path>,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> Result<kube::Client, Error> {
    fenced_hub_client("hub", path, limits, stats, client::Fence::open()).await
}

/// [`hub_client`], named `name`, its writes fenced by `fence`.
async fn fenced_hub_client(
    name: &str,
    path: Option<&std::path::Path>,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: client::Fence,
) -> Result<kube::Client, Error> {
    // Parser errors quote the offending value, which may be a token or a key.
    let failed = |e: &dyn std::fmt::Display| match path {
        Some(path) => Error::Hub(format!(
            "kubeconfig {}: {}",
            path.display(),
            crate::fleet::redact_quoted(&e.to_string())
        )),
        None => Error::Hub(format!(
            "in-cluster configuration (no --hub-kubeconfig given): {e}"
        )),
    };
    let kubeconfig = match path {
        Some(path) => Some(kube::config::Kubeconfig::read_from(path).map_err(|e| failed(&e))?),
        None => None,
    };
    match client::from_kubeconfig(name, kubeconfig, limits, stats, fence).await {
        Ok((client, _)) => Ok(client),
        Err(e @ client::Error::Config(_)) => Err(failed(&e)),
        Err(e) => Err(Error::Hub(e.to_string())),
    }
}

/// Starts everything and returns at once; [`Running::shutdown`] stops it.
pub async fn start(config: AppConfig, ext: Extensions) -> Result<Running, Error> {
    if !config.runtime.kubeconfig_dir.is_dir() {
        return Err(Error::Config(format!(
            "--kubeconfig-dir {} is not a directory",
            config.runtime.kubeconfig_dir.display()
        )));
    }
    let sharded = config
        .leader_election
        .as_ref()
        .is_some_and(|le| le.shard_members);
    // Sharded, each member has its own fence; the process-wide one stays open.
    let (hold_tx, hold_rx) = watch::channel(if config.leader_election.is_some() && !sharded {
        client::Hold::Never
    } else {
        client::Hold::Always
    });
    let fence = client::Fence::new(hold_rx);
    let hub_stats = Arc::new(ClientStats::default());
    let hub = fenced_hub_client(
        "hub",
        config.hub_kubeconfig.as_deref(),
        &config.hub_limits,
        hub_stats.clone(),
        fence.clone(),
    )
    .await?;
    // The lease has its own client and budget: members' writes never delay a renew.
    let lease_client = match &config.leader_election {
        Some(_) => Some(
            fenced_hub_client(
                "lease",
                config.hub_kubeconfig.as_deref(),
                &Limits {
                    // Sharded: a renew per member per retry period.
                    qps: if sharded { 50.0 } else { 5.0 },
                    burst: if sharded { 100 } else { 10 },
                    max_in_flight: if sharded { 8 } else { 2 },
                    ..Limits::default()
                },
                Arc::default(),
                client::Fence::open(),
            )
            .await?,
        ),
        None => None,
    };
    let shutdown = CancellationToken::new();
    let state = Arc::new(FleetState::default());
    let metrics = Arc::new(Metrics::new());
    metrics.set_fleet_state(state.clone());
    metrics.set_hub_client(hub_stats);
    if let Some(source) = ext.azure_counters {
        metrics.set_azure_source(source);
    }
    let render: http::RenderMetrics = {
        let metrics = metrics.clone();
        Arc::new(move || metrics.encode())
    };
    let health_address = http::serve_health(
        &config.health_probe_bind_address,
        state.clone(),
        shutdown.clone(),
    )
    .await?;
    let metrics_address =
        http::serve_metrics(&config.metrics_bind_address, render, shutdown.clone()).await?;

    let (leader_tx, leader_rx) = watch::channel(config.leader_election.is_none() || sharded);
    // The election outlives the fleet's shutdown by a little: the lease is released after
    // the members have stopped writing.
    let election_stop = CancellationToken::new();
    let mut shards = None;
    let election = match (config.leader_election.clone(), lease_client) {
        (Some(le), Some(lease_client)) => {
            let api: Api<Lease> = Api::namespaced(lease_client, &le.namespace);
            let cfg = LeaseConfig {
                namespace: le.namespace,
                name: le.name,
                identity: le.identity,
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            };
            Some(if le.shard_members {
                let s = Arc::new(fleet::shard::Shards::new(fleet::shard::ShardConfig {
                    namespace: cfg.namespace,
                    prefix: cfg.name,
                    identity: cfg.identity,
                    lease_duration: cfg.lease_duration,
                    renew_deadline: cfg.renew_deadline,
                    retry_period: cfg.retry_period,
                }));
                shards = Some(s.clone());
                tokio::spawn(fleet::shard::run(api, s, election_stop.clone()))
            } else {
                tokio::spawn(fleet::leader::run(
                    api,
                    cfg,
                    leader_tx,
                    hold_tx,
                    election_stop.clone(),
                ))
            })
        }
        _ => None,
    };

    let shared = Arc::new(fleet::Shared {
        config: config.runtime,
        hub_client: hub,
        state: state.clone(),
        observer: metrics.clone(),
        hooks: metrics.clone(),
        azure: ext.azure,
        leader: leader_rx.clone(),
        fence,
        shards,
    });
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        fleet::run(shared, stop).await;
        election_stop.cancel();
        if let Some(election) = election {
            let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
        }
    });
    Ok(Running {
        health_address,
        metrics_address,
        state,
        metrics,
        leader: leader_rx,
        shutdown,
        task,
    })
}

/// Azure per member: subscription and default resource group from `--member-config`,
/// falling back to the process defaults; one shared client per subscription.
///
/// The file is read again once per directory rescan ([`MemberAzure::reload`]), so a member
/// added at runtime gets its settings without a restart, and a member whose settings change is
/// re-engaged. A file that became unreadable or invalid keeps the last good settings (and says
/// so in the log, once per rescan).
pub struct AzureMembers {
    fleet: crate::azure::AzureFleet,
    path: Option<PathBuf>,
    default_resource_group: String,
    last_good: std::sync::Mutex<MemberConfigFile>,
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
        fleet: crate::azure::AzureFleet,
        path: Option<PathBuf>,
        initial: MemberConfigFile,
        default_resource_group: String,
    ) -> Self {
        Self {
            fleet,
            path,
            default_resource_group,
            last_good: std::sync::Mutex::new(initial),
        }
    }

    /// The member's settings as of the last [`MemberAzure::reload`].
    pub fn resolve(&self, member: &str) -> ResolvedAzure {
        let settings = self
            .last_good
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .members
            .get(member)
            .cloned()
            .unwrap_or_default();
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
            Ok(file) => {
                *self
                    .last_good
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = file;
            }
            Err(e) => tracing::warn!(error = %e, "keeping the last valid member config"),
        }
    }

    fn for_member(&self, member: &str) -> (Arc<dyn crate::export::PublicIpLookup>, String) {
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
impl crate::export::PublicIpLookup for Unavailable {
    async fn find_by_address(
        &self,
        resource_group: &str,
        _: &str,
    ) -> Result<Option<crate::export::PublicIp>, crate::export::LookupError> {
        Err(crate::export::LookupError::Failed {
            resource_group: resource_group.into(),
            message: self.0.clone(),
        })
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::azure::{AzureConfig, AzureFleet, CredentialKind};

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
