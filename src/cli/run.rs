//! `run`'s flags (and Azure's), and the one validated [`RunConfig`] built from them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use fleetnet_hub::azure::{
    AZURE_AUTHORITY_HOST_ENV, AZURE_PUBLIC_CLOUD_ARM, AzureConfig, CredentialKind, Secret,
    authority_host_of,
};
use fleetnet_hub::config::{
    Budgets, Config, ConfigError, DEFAULT_HEALTH_PROBE_BIND_ADDRESS, DEFAULT_METRICS_BIND_ADDRESS,
    LeaderElection, instance, positive_count, positive_duration, positive_rate,
};
use fleetnet_hub::fleet::Controllers;
use fleetnet_hub::metrics::MetricsDetail;

use super::{FleetArgs, TrustArgs};

/// Flags of `run`. Names follow controller-runtime where one exists.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
    /// Shard Leases with --shard-members: the coordination cost (one renewal per shard per
    /// 2 s) and the unit members move in. All replicas must use the same number.
    #[arg(long, env = "FLEETNET_SHARDS", default_value_t = fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    shards: u16,
    /// Prometheus metrics address.
    #[arg(
        long,
        env = "FLEETNET_METRICS_BIND_ADDRESS",
        default_value = DEFAULT_METRICS_BIND_ADDRESS
    )]
    metrics_bind_address: String,
    /// `/healthz`, `/readyz` and `/members` address.
    #[arg(
        long,
        env = "FLEETNET_HEALTH_PROBE_BIND_ADDRESS",
        default_value = DEFAULT_HEALTH_PROBE_BIND_ADDRESS
    )]
    health_probe_bind_address: String,
    /// Per-member detail of /metrics: `fleet` keeps per member what the shipped alerts and
    /// dashboard read (at most 15 series a healthy member); `member` adds reconciles by outcome,
    /// the reconcile duration histogram and API requests by verb and resource (some 40 more).
    #[arg(long, env = "FLEETNET_METRICS_DETAIL", value_enum, default_value_t = MetricsDetail::Fleet)]
    metrics_detail: MetricsDetail,
    /// How long a stop (SIGTERM, Ctrl-C) may take to drain: members' jobs, their queued Events,
    /// then the Leases released; past it the process exits anyway (traces are flushed after it,
    /// up to 5 s). The pod's terminationGracePeriodSeconds must exceed it.
    #[arg(long, env = "FLEETNET_SHUTDOWN_TIMEOUT", default_value = "25s", value_parser = positive_duration)]
    shutdown_timeout: Duration,
    #[command(flatten)]
    budgets: Budgets,
    /// A member whose first sync takes longer is marked failing (and keeps trying).
    #[arg(long, env = "FLEETNET_MEMBER_SYNC_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    member_sync_timeout: Duration,
    /// Which exporters run for every member, comma-separated: `serviceexport` (ServiceExport →
    /// InternalServiceExport), `endpointslice` (EndpointSlice → EndpointSliceExport),
    /// `endpointsliceexport` (exports whose slice is gone or renamed deleted). Default: every job.
    #[arg(long, env = "FLEETNET_CONTROLLERS", default_value_t = Controllers::default(), value_parser = Controllers::parse)]
    controllers: Controllers,
    /// The networking agents the membership job reports for, comma-separated:
    /// `MultiClusterServiceAgent`, `ServiceExportImportAgent` (the reference agents' `--agent-types`).
    #[arg(long, env = "FLEETNET_AGENT_TYPES", default_value_t = fleetnet_hub::api::AgentTypes::default(), value_parser = fleetnet_hub::api::AgentTypes::parse)]
    agent_types: fleetnet_hub::api::AgentTypes,
    /// Export Traffic Manager fields (weight, type, load balancer, public IP).
    #[arg(long, env = "FLEETNET_ENABLE_TRAFFIC_MANAGER")]
    enable_traffic_manager: bool,
    /// Per-member settings (YAML: `members: {<name>: {azureSubscriptionId, azureResourceGroup, traceSamplingRatio}}`).
    #[arg(long, env = "FLEETNET_MEMBER_CONFIG")]
    member_config: Option<PathBuf>,
    /// Fraction of reconciles traced, for members without their own ratio [default: the
    /// default ratio of FLEETNET_TRACE_SAMPLING, or 1]
    #[arg(long, env = "FLEETNET_TRACE_SAMPLING_RATIO")]
    trace_sampling_ratio: Option<f64>,
    /// Log format: `text` or `json`. Level from RUST_LOG.
    #[arg(long, env = "FLEETNET_LOG_FORMAT", default_value = "text")]
    log_format: String,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    azure: AzureArgs,
    /// Answer `/members` to clients off the pod too (by default only loopback peers get it:
    /// `kubectl port-forward` or `kubectl exec`). Only behind your own authentication.
    #[arg(long, env = "FLEETNET_MEMBERS_ALLOW_REMOTE")]
    members_allow_remote: bool,
    /// Exports (InternalServiceExports) one member may have in the hub; past it a new
    /// ServiceExport gets `Valid=False` (`ExportQuotaExceeded`) and waits, oldest first.
    #[arg(long, env = "FLEETNET_MAX_EXPORTS_PER_MEMBER", default_value_t = fleetnet_hub::export::decide::quota::DEFAULT_MAX_EXPORTS, value_parser = positive_count::<u32>)]
    max_exports_per_member: u32,
    /// Bytes of one exported object (InternalServiceExport, EndpointSliceExport) as written;
    /// a larger one is not written (`ExportTooLarge`).
    #[arg(long, env = "FLEETNET_MAX_EXPORT_BYTES", default_value_t = fleetnet_hub::export::decide::quota::DEFAULT_MAX_EXPORT_BYTES, value_parser = positive_count::<u32>)]
    max_export_bytes: u32,
}

/// Azure flags (Traffic Manager feature).
#[derive(Args, Clone, Debug)]
pub struct AzureArgs {
    /// ARM endpoint (sovereign clouds, tests).
    #[arg(long, env = "FLEETNET_AZURE_ARM_ENDPOINT", default_value = AZURE_PUBLIC_CLOUD_ARM)]
    azure_arm_endpoint: String,
    /// Microsoft Entra authority host (token endpoint). Default: $AZURE_AUTHORITY_HOST (set by
    /// the workload identity webhook), else the public cloud's.
    #[arg(long, env = "FLEETNET_AZURE_AUTHORITY_HOST")]
    azure_authority_host: Option<String>,
    #[arg(long, env = "FLEETNET_AZURE_CREDENTIAL", value_enum, default_value_t)]
    azure_credential: CredentialKind,
    #[arg(long, env = "AZURE_TENANT_ID")]
    azure_tenant_id: Option<String>,
    #[arg(long, env = "AZURE_CLIENT_ID")]
    azure_client_id: Option<String>,
    /// Default subscription of members' public IPs.
    #[arg(long, env = "FLEETNET_AZURE_SUBSCRIPTION_ID")]
    azure_subscription_id: Option<String>,
    /// Default resource group of members' public IPs.
    #[arg(long, env = "FLEETNET_AZURE_RESOURCE_GROUP", default_value = "")]
    azure_resource_group: String,
    /// Requests per second to ARM, for the whole process.
    #[arg(long, env = "FLEETNET_AZURE_ARM_QPS", default_value_t = 10.0, value_parser = positive_rate)]
    azure_arm_qps: f64,
    #[arg(long, env = "FLEETNET_AZURE_ARM_BURST", default_value_t = 20, value_parser = positive_count::<u32>)]
    azure_arm_burst: u32,
    /// How long a resource group's public IP list is reused.
    #[arg(long, env = "FLEETNET_PUBLIC_IP_CACHE_TTL", default_value = "30s", value_parser = positive_duration)]
    public_ip_cache_ttl: Duration,
    /// Resource groups whose public IP lists are cached at once, per subscription (the least
    /// recently used goes first).
    #[arg(long, env = "FLEETNET_AZURE_MAX_CACHED_GROUPS", default_value_t = 256)]
    azure_max_cached_groups: usize,
    /// Public IPs kept per resource group; a group with more is cut there (and a warning says so).
    #[arg(
        long,
        env = "FLEETNET_AZURE_MAX_PUBLIC_IPS_PER_GROUP",
        default_value_t = 1000
    )]
    azure_max_public_ips_per_group: usize,
}

impl AzureArgs {
    fn azure_config(&self) -> Result<AzureConfig, String> {
        let config = AzureConfig {
            arm_endpoint: self.azure_arm_endpoint.clone(),
            authority_host: authority_host_of(
                self.azure_authority_host.as_deref(),
                std::env::var(AZURE_AUTHORITY_HOST_ENV).ok().as_deref(),
            ),
            credential: self.azure_credential,
            tenant_id: self.azure_tenant_id.clone(),
            client_id: self.azure_client_id.clone(),
            // Secrets only from the environment, never from flags (visible in `ps`).
            client_secret: std::env::var("AZURE_CLIENT_SECRET").ok().map(Secret),
            federated_token_file: std::env::var_os("AZURE_FEDERATED_TOKEN_FILE").map(PathBuf::from),
            default_subscription_id: self.azure_subscription_id.clone(),
            arm_qps: self.azure_arm_qps,
            arm_burst: self.azure_arm_burst,
            cache_ttl: self.public_ip_cache_ttl,
            max_cached_groups: self.azure_max_cached_groups,
            max_public_ips_per_group: self.azure_max_public_ips_per_group,
            ..AzureConfig::default()
        };
        config
            .validate()
            .map_err(|e| format!("Azure configuration: {e}"))?;
        Ok(config)
    }
}

impl RunArgs {
    /// The one [`Config`], from the flags.
    pub(crate) fn config(&self) -> Result<Config, ConfigError> {
        let release_namespace = self.fleet.release_namespace();
        let instance = instance();
        let leader_election =
            (self.fleet.leader_elect || self.fleet.shard_members).then(|| LeaderElection {
                namespace: release_namespace.clone(),
                name: self.fleet.leader_election_id.clone(),
                identity: format!("{instance}_{:08x}", rand::random::<u32>()),
                shard_members: self.fleet.shard_members,
                shards: self.shards,
            });
        let builder = Config::builder(
            self.fleet.hub_kubeconfig.clone(),
            &self.fleet.kubeconfig_dir,
        )
        .namespace_prefix(&self.fleet.hub_namespace_prefix)
        .hub_limits(self.budgets.hub())
        .member_limits(self.budgets.member())
        .member_sync_timeout(self.member_sync_timeout)
        .cleanup_on_remove(self.fleet.cleanup_on_remove)
        .member_secrets_namespace(self.fleet.member_secrets.then(|| {
            self.fleet
                .member_secrets_namespace
                .clone()
                .unwrap_or_else(|| release_namespace.clone())
        }))
        .member_inventory(
            (self.fleet.member_inventory).then(|| self.fleet.inventory_profile_namespace.clone()),
        )
        .records(release_namespace, &self.fleet.leader_election_id)
        .traffic_manager(self.enable_traffic_manager)
        .instance(instance)
        .trust(self.trust.policy())
        .controllers(self.controllers)
        .fleet_system_namespace(&self.fleet.fleet_system_namespace)
        .agent_types(self.agent_types)
        .quotas(fleetnet_hub::export::Quotas {
            max_exports: self.max_exports_per_member,
            max_export_bytes: self.max_export_bytes,
        })
        .leader_election(leader_election)
        .bind_addresses(&self.metrics_bind_address, &self.health_probe_bind_address)
        .metrics_detail(self.metrics_detail)
        .shutdown_timeout(self.shutdown_timeout)
        .member_config(self.member_config.clone());
        match self.trace_sampling_ratio {
            Some(ratio) => builder.trace_sampling_ratio(ratio).build(),
            None => builder.build(),
        }
    }
}

/// `run`'s configuration: every flag validated and the member config file read, once.
pub(crate) struct RunConfig {
    pub(crate) config: Config,
    /// With the Traffic Manager feature on.
    pub(crate) azure: Option<AzureConfig>,
    pub(crate) azure_resource_group: String,
    pub(crate) log_format: String,
    /// `--members-allow-remote`.
    pub(crate) members_allow_remote: bool,
}

impl RunArgs {
    /// Every flag validated, the member config file read: the process's one configuration.
    pub(crate) fn validate(&self) -> Result<RunConfig, String> {
        let config = self.config().map_err(|e| e.to_string())?;
        let azure = match self.enable_traffic_manager {
            true => Some(self.azure.azure_config()?),
            false => None,
        };
        Ok(RunConfig {
            config,
            azure,
            azure_resource_group: self.azure.azure_resource_group.clone(),
            log_format: self.log_format.clone(),
            members_allow_remote: self.members_allow_remote,
        })
    }
}
