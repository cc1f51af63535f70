//! The process's one configuration value ([`Config`]) and its one builder: the CLI maps its
//! flags onto it, and the sandbox, the bench and the tests build it the same way. Its defaults
//! are the flags' defaults; [`ConfigBuilder::build`] validates it once.

use std::path::PathBuf;
use std::time::Duration;

use crate::api::AgentTypes;
use crate::client::Limits;
use crate::export::Quotas;
use crate::fleet::MemberConfig;
use crate::fleet::registry::DEFAULT_NAMESPACE_PREFIX;
use crate::fleet::{Controllers, RuntimeConfig, TrustPolicy};

/// `--fleet-system-namespace`'s default, the reference agents' too.
pub const DEFAULT_FLEET_SYSTEM_NAMESPACE: &str = "fleet-system";
/// `--hub-api-qps`'s default: the hub budget, shared by all members.
pub const DEFAULT_HUB_API_QPS: f64 = 100.0;
/// `--hub-api-burst`'s default.
pub const DEFAULT_HUB_API_BURST: u32 = 200;
/// `--member-sync-timeout`'s default.
pub const DEFAULT_MEMBER_SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// `--shutdown-timeout`: room for each member's jobs to drain (15 s), then its queued Events
/// (5 s), with the Leases released after them.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
/// `--leader-election-id`'s default: the leader Lease's name and the cleanup records' prefix.
pub const DEFAULT_LEADER_ELECTION_ID: &str = "fleetnet-hub";
/// `--metrics-bind-address`'s default.
pub const DEFAULT_METRICS_BIND_ADDRESS: &str = "0.0.0.0:8080";
/// `--health-probe-bind-address`'s default.
pub const DEFAULT_HEALTH_PROBE_BIND_ADDRESS: &str = "0.0.0.0:8081";
/// How often the kubeconfig directory is read again besides its watch: a safety net.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(30);

/// Leader election settings.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    /// The Lease's name; with `shard_members`, the prefix of every lease name.
    pub name: String,
    pub identity: String,
    /// Shard the members across the replicas (members hashed onto `shards` shard Leases,
    /// rendezvous hashing over the replicas' announcements) instead of electing one leader.
    pub shard_members: bool,
    /// How many shard Leases (with `shard_members`).
    pub shards: u16,
}

/// Everything the process needs, validated: built only by [`Config::builder`] (a caller may
/// still adjust a field of the built value, as tests do).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// `None`: in-cluster configuration.
    pub hub_kubeconfig: Option<PathBuf>,
    pub hub_limits: Limits,
    /// What the fleet runtime reads.
    pub runtime: RuntimeConfig,
    pub leader_election: Option<LeaderElection>,
    pub metrics_bind_address: String,
    pub health_probe_bind_address: String,
    /// Fraction of reconciles traced, for members without their own ratio; `None`: not given,
    /// `FLEETNET_TRACE_SAMPLING`'s default ratio applies (1 without it).
    pub trace_sampling_ratio: Option<f64>,
    /// Per-member detail of `/metrics` (`--metrics-detail`).
    pub metrics_detail: MetricsDetail,
    /// How long a stop may drain before the process exits anyway (`--shutdown-timeout`).
    pub shutdown_timeout: Duration,
}

/// A configuration that cannot run; the message names the flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("--trace-sampling-ratio must be in [0, 1], got {0}")]
    TraceSamplingRatio(f64),
    #[error("--hub-namespace-prefix: {0}")]
    NamespacePrefix(String),
    /// The `--member-config` file could not be read or parsed (the message names it).
    #[error("{0}")]
    MemberConfig(String),
    #[error("--fleet-system-namespace: {0}")]
    FleetSystemNamespace(String),
    #[error("--kubeconfig-dir {} is not a directory", .0.display())]
    KubeconfigDir(PathBuf),
}

impl Config {
    /// A builder with the flags' defaults, for members from `kubeconfig_dir` and the hub from
    /// `hub_kubeconfig` (`None`: the in-cluster configuration).
    pub fn builder(
        hub_kubeconfig: Option<PathBuf>,
        kubeconfig_dir: impl Into<PathBuf>,
    ) -> ConfigBuilder {
        let config = Config {
            hub_kubeconfig,
            hub_limits: Limits {
                qps: DEFAULT_HUB_API_QPS,
                burst: DEFAULT_HUB_API_BURST,
                ..Limits::default()
            },
            runtime: RuntimeConfig {
                kubeconfig_dir: kubeconfig_dir.into(),
                namespace_prefix: DEFAULT_NAMESPACE_PREFIX.into(),
                // The member flags' defaults are the client's.
                member_limits: Limits::default(),
                member_sync_timeout: DEFAULT_MEMBER_SYNC_TIMEOUT,
                cleanup_on_remove: false,
                records_namespace: release_namespace(None),
                records_prefix: DEFAULT_LEADER_ELECTION_ID.into(),
                traffic_manager: false,
                rescan_interval: RESCAN_INTERVAL,
                // On, in the release namespace (`--member-secrets` defaults to true).
                member_secrets_namespace: Some(release_namespace(None)),
                member_inventory: None,
                instance: instance(),
                trust: TrustPolicy::default(),
                controllers: Controllers::default(),
                quotas: Quotas::default(),
                fleet_system_namespace: DEFAULT_FLEET_SYSTEM_NAMESPACE.into(),
                agent_types: AgentTypes::default(),
                member_config: std::sync::Arc::default(),
            },
            leader_election: None,
            metrics_bind_address: DEFAULT_METRICS_BIND_ADDRESS.into(),
            health_probe_bind_address: DEFAULT_HEALTH_PROBE_BIND_ADDRESS.into(),
            trace_sampling_ratio: None,
            metrics_detail: MetricsDetail::default(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        };
        ConfigBuilder {
            config,
            member_config: None,
        }
    }

    /// What can only be checked where the process runs: the kubeconfig directory exists.
    pub fn check_kubeconfig_dir(&self) -> Result<(), ConfigError> {
        let dir = &self.runtime.kubeconfig_dir;
        match dir.is_dir() {
            true => Ok(()),
            false => Err(ConfigError::KubeconfigDir(dir.clone())),
        }
    }
}

/// Builds the one [`Config`]; every setting not given keeps its flag's default.
#[derive(Clone, Debug)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
    /// Read when built.
    member_config: Option<PathBuf>,
}

impl ConfigBuilder {
    /// `--hub-namespace-prefix`: member `m`'s hub namespace is `<prefix><m>`.
    pub fn namespace_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.runtime.namespace_prefix = prefix.into();
        self
    }

    /// The hub's request budget (`--hub-api-qps`, `--hub-api-burst`).
    pub fn hub_limits(mut self, limits: Limits) -> Self {
        self.config.hub_limits = limits;
        self
    }

    /// Each member's own request budget, Events' and reconcile concurrency.
    pub fn member_limits(mut self, limits: Limits) -> Self {
        self.config.runtime.member_limits = limits;
        self
    }

    /// `--member-sync-timeout`.
    pub fn member_sync_timeout(mut self, timeout: Duration) -> Self {
        self.config.runtime.member_sync_timeout = timeout;
        self
    }

    /// `--cleanup-on-remove`.
    pub fn cleanup_on_remove(mut self, on: bool) -> Self {
        self.config.runtime.cleanup_on_remove = on;
        self
    }

    /// `--member-secrets-namespace` (`None`: `--member-secrets=false`).
    pub fn member_secrets_namespace(mut self, namespace: Option<String>) -> Self {
        self.config.runtime.member_secrets_namespace = namespace;
        self
    }

    /// `--member-inventory`: the namespace of fleet's ClusterProfiles
    /// (`--inventory-profile-namespace`); `None`: off.
    pub fn member_inventory(mut self, profile_namespace: Option<String>) -> Self {
        self.config.runtime.member_inventory = profile_namespace;
        self
    }

    /// Where pending cleanups are recorded in the hub: the release namespace and the prefix of
    /// the records' names (`--leader-election-id`).
    pub fn records(mut self, namespace: impl Into<String>, prefix: impl Into<String>) -> Self {
        self.config.runtime.records_namespace = namespace.into();
        self.config.runtime.records_prefix = prefix.into();
        self
    }

    /// `--enable-traffic-manager`.
    pub fn traffic_manager(mut self, on: bool) -> Self {
        self.config.runtime.traffic_manager = on;
        self
    }

    /// How often the kubeconfig directory is read again besides its watch.
    pub fn rescan_interval(mut self, every: Duration) -> Self {
        self.config.runtime.rescan_interval = every;
        self
    }

    /// This replica's name (Events' reporting instance); `$POD_NAME` or the host name.
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.config.runtime.instance = instance.into();
        self
    }

    /// What member kubeconfigs may use beyond inline credentials.
    pub fn trust(mut self, trust: TrustPolicy) -> Self {
        self.config.runtime.trust = trust;
        self
    }

    /// `--controllers`.
    pub fn controllers(mut self, controllers: Controllers) -> Self {
        self.config.runtime.controllers = controllers;
        self
    }

    /// `--fleet-system-namespace`.
    pub fn fleet_system_namespace(mut self, namespace: &str) -> Self {
        self.config.runtime.fleet_system_namespace = namespace.into();
        self
    }

    /// `--agent-types`.
    pub fn agent_types(mut self, types: AgentTypes) -> Self {
        self.config.runtime.agent_types = types;
        self
    }

    /// `--max-exports-per-member`, `--max-export-bytes`.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.config.runtime.quotas = quotas;
        self
    }

    /// `--leader-elect` / `--shard-members`; `None`: this replica writes alone.
    pub fn leader_election(mut self, election: Option<LeaderElection>) -> Self {
        self.config.leader_election = election;
        self
    }

    /// `--metrics-bind-address` and `--health-probe-bind-address`.
    pub fn bind_addresses(mut self, metrics: impl Into<String>, health: impl Into<String>) -> Self {
        self.config.metrics_bind_address = metrics.into();
        self.config.health_probe_bind_address = health.into();
        self
    }

    /// `--metrics-detail`.
    pub fn metrics_detail(mut self, detail: MetricsDetail) -> Self {
        self.config.metrics_detail = detail;
        self
    }

    /// `--shutdown-timeout`.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// `--trace-sampling-ratio`.
    pub fn trace_sampling_ratio(mut self, ratio: f64) -> Self {
        self.config.trace_sampling_ratio = Some(ratio);
        self
    }

    /// `--member-config`: read when built.
    pub fn member_config(mut self, path: Option<PathBuf>) -> Self {
        self.member_config = path;
        self
    }

    /// Validates the settings and reads the `--member-config` file, once.
    pub fn build(self) -> Result<Config, ConfigError> {
        let mut config = self.config;
        let members = MemberConfig::load(self.member_config).map_err(ConfigError::MemberConfig)?;
        config.runtime.member_config = std::sync::Arc::new(members);
        if let Some(ratio) = config.trace_sampling_ratio
            && !(0.0..=1.0).contains(&ratio)
        {
            return Err(ConfigError::TraceSamplingRatio(ratio));
        }
        crate::fleet::registry::validate_namespace_prefix(&config.runtime.namespace_prefix)
            .map_err(ConfigError::NamespacePrefix)?;
        crate::fleet::registry::validate_member_name(&config.runtime.fleet_system_namespace)
            .map_err(|e| {
                ConfigError::FleetSystemNamespace(e.replace("member name", "namespace"))
            })?;
        Ok(config)
    }
}

/// The namespace of the leases and the cleanup records: `namespace` when given, else
/// `$POD_NAMESPACE`, else `default`.
pub fn release_namespace(namespace: Option<String>) -> String {
    namespace
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into())
}

/// This replica's name: `$POD_NAME`, else the host name.
pub fn instance() -> String {
    std::env::var("POD_NAME").unwrap_or_else(|_| hostname())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "fleetnet-hub".into())
}

/// How much per-member detail `/metrics` carries (`--metrics-detail`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsDetail {
    /// Per member what an operator acts on (state, failing jobs, reconciles and their errors,
    /// queue depth, watch errors, API answers by code, throttling, flags): at most 15 series
    /// for a healthy member. Outcomes and durations are counted for the whole fleet.
    #[default]
    Fleet,
    /// Also per member: reconciles by outcome, the reconcile duration histogram and API
    /// requests by verb and resource.
    Member,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_flags_defaults_and_validation_names_the_flag() {
        let config = Config::builder(None, "/tmp").build().expect("valid");
        assert_eq!(config.hub_limits.qps, DEFAULT_HUB_API_QPS);
        assert_eq!(config.runtime.namespace_prefix, DEFAULT_NAMESPACE_PREFIX);
        assert_eq!(config.runtime.member_sync_timeout, Duration::from_secs(60));
        assert!(
            config.leader_election.is_none() && config.runtime.member_config.members().is_empty()
        );
        let bad = Config::builder(None, "/tmp")
            .trace_sampling_ratio(1.5)
            .build();
        assert_eq!(
            bad.err().map(|e| e.to_string()).as_deref(),
            Some("--trace-sampling-ratio must be in [0, 1], got 1.5")
        );
        let bad = Config::builder(None, "/tmp").namespace_prefix("-x").build();
        let e = bad.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with("--hub-namespace-prefix: "), "{e}");
        let missing = Config::builder(None, "/nonexistent/kubeconfigs").build();
        let missing = missing.expect("checked only where the process runs");
        assert_eq!(
            missing
                .check_kubeconfig_dir()
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("--kubeconfig-dir /nonexistent/kubeconfigs is not a directory")
        );
    }
}
