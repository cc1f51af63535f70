//! The `fleetnet-hub` command line: parse flags, build the runtime, run it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::azure::{
    AZURE_PUBLIC_CLOUD_ARM, AZURE_PUBLIC_CLOUD_AUTHORITY, AzureConfig, AzureMembers,
    CredentialKind, Secret,
};
use fleetnet_hub::config::{
    Budgets, Config, ConfigError, DEFAULT_HEALTH_PROBE_BIND_ADDRESS, DEFAULT_LEADER_ELECTION_ID,
    DEFAULT_METRICS_BIND_ADDRESS, LeaderElection, instance, positive_count, positive_duration,
    positive_rate, release_namespace,
};
use fleetnet_hub::fleet::registry::DEFAULT_NAMESPACE_PREFIX;
use fleetnet_hub::fleet::sources::register;
use fleetnet_hub::fleet::{Controllers, TrustPolicy};
use fleetnet_hub::{status::cli as status, uninstall};

#[derive(Parser)]
#[command(
    name = "fleetnet-hub",
    version,
    about = "Exports every member cluster's Services to the Azure Kubernetes Fleet hub, from one process in the hub"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller for every member in the kubeconfig directory.
    Run(Box<RunArgs>),
    /// Check every member's kubeconfig: reachability, CRD, RBAC.
    Check {
        #[arg(long, env = "FLEETNET_KUBECONFIG_DIR", default_value = "kubeconfigs")]
        kubeconfig_dir: PathBuf,
        #[command(flatten)]
        trust: TrustArgs,
        /// `text` (a table) or `json`.
        #[arg(long, value_enum, default_value_t)]
        output: fleetnet_hub::check::Output,
        /// The member namespace the jobs write derived Services and imported EndpointSlices in
        /// (as `run --fleet-system-namespace`): its permissions are checked there.
        #[arg(long, env = "FLEETNET_FLEET_SYSTEM_NAMESPACE", default_value = fleetnet_hub::config::DEFAULT_FLEET_SYSTEM_NAMESPACE)]
        fleet_system_namespace: String,
    },
    /// Register a member: vet its kubeconfig as `run` would, then write it into a labelled
    /// Secret of the hub (`fleetnet.azure.com/member-kubeconfig: "true"`) that `run` watches.
    Register {
        /// The member's name (a DNS-1123 label).
        member: String,
        /// The member's kubeconfig.
        #[arg(long)]
        kubeconfig: PathBuf,
        #[command(flatten)]
        at: MemberSecretsAt,
        #[command(flatten)]
        trust: TrustArgs,
        /// Print the Secret, without its credentials; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Every member across all replicas, from the MemberStatus objects on the hub.
    Status(status::Args),
    /// Once the replicas are gone: take back from members and hub what the controller wrote.
    Uninstall(uninstall::Args),
    /// Unregister a member: delete the member Secrets that declare it.
    Unregister {
        member: String,
        #[command(flatten)]
        at: MemberSecretsAt,
    },
    /// Start a local hub and two members (real apiservers), run the controller against them.
    #[cfg(feature = "sandbox")]
    Sandbox,
    /// Write the CRD YAMLs generated from the Rust types.
    Crdgen {
        #[arg(long, default_value = "charts/fleetnet-hub/crds")]
        out: PathBuf,
    },
}

/// Where `register` and `unregister` find the member Secrets.
#[derive(Args, Clone, Debug)]
pub struct MemberSecretsAt {
    /// The namespace of the member Secrets (as `run --member-secrets-namespace`; default
    /// $POD_NAMESPACE, else `default`).
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS_NAMESPACE")]
    namespace: Option<String>,
    /// The hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    hub_kubeconfig: Option<PathBuf>,
}

impl MemberSecretsAt {
    fn namespace(&self) -> String {
        release_namespace(self.namespace.clone())
    }
}

/// Flags of `run`. Names follow controller-runtime where one exists.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Hub kubeconfig; in-cluster configuration when absent.
    #[arg(long, env = "FLEETNET_HUB_KUBECONFIG")]
    hub_kubeconfig: Option<PathBuf>,
    /// Directory with one kubeconfig per member (file name without extension = member name).
    #[arg(long, env = "FLEETNET_KUBECONFIG_DIR", default_value = "kubeconfigs")]
    kubeconfig_dir: PathBuf,
    /// Hub namespace of member `m` is `<prefix><m>`.
    #[arg(long, env = "FLEETNET_HUB_NAMESPACE_PREFIX", default_value = DEFAULT_NAMESPACE_PREFIX)]
    hub_namespace_prefix: String,
    /// Elect a leader on a Lease in the hub; standbys keep watches warm and do not write.
    #[arg(long, env = "FLEETNET_LEADER_ELECT")]
    leader_elect: bool,
    /// Shard members across the replicas: members hashed onto --shards shard Leases (named
    /// after --leader-election-id), shards owned by rendezvous hashing over the live replicas.
    /// Replaces --leader-elect (the one-replica case of it).
    #[arg(long, env = "FLEETNET_SHARD_MEMBERS")]
    shard_members: bool,
    /// Shard Leases with --shard-members: the coordination cost (one renewal per shard per
    /// 2 s) and the unit members move in. All replicas must use the same number.
    #[arg(long, env = "FLEETNET_SHARDS", default_value_t = fleetnet_hub::ownership::shard::DEFAULT_SHARDS,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    shards: u16,
    /// Namespace of the leader Lease, the shard Leases and the pending-cleanup records
    /// (defaults to $POD_NAMESPACE, else `default`).
    #[arg(long, env = "FLEETNET_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "FLEETNET_LEADER_ELECTION_ID",
        default_value = DEFAULT_LEADER_ELECTION_ID
    )]
    leader_election_id: String,
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
    #[command(flatten)]
    budgets: Budgets,
    /// A member whose first sync takes longer is marked failing (and keeps trying).
    #[arg(long, env = "FLEETNET_MEMBER_SYNC_TIMEOUT", default_value = "60s", value_parser = positive_duration)]
    member_sync_timeout: Duration,
    /// Read members from labelled Secrets too (`fleetnet.azure.com/member-kubeconfig: "true"`,
    /// the kubeconfig in data key `kubeconfig`), watched in --member-secrets-namespace.
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    member_secrets: bool,
    /// Namespace of the member Secrets (default: the release namespace, as
    /// --leader-election-namespace).
    #[arg(long, env = "FLEETNET_MEMBER_SECRETS_NAMESPACE")]
    member_secrets_namespace: Option<String>,
    /// When a member's kubeconfig is removed, delete its exports from the hub and its finalizers.
    #[arg(long, env = "FLEETNET_CLEANUP_ON_REMOVE")]
    cleanup_on_remove: bool,
    /// Which exporters run for every member, comma-separated: `serviceexport` (ServiceExport →
    /// InternalServiceExport), `endpointslice` (EndpointSlice → EndpointSliceExport),
    /// `endpointsliceexport` (exports whose slice is gone or renamed deleted). Default: every job.
    #[arg(long, env = "FLEETNET_CONTROLLERS", default_value_t = Controllers::default(), value_parser = Controllers::parse)]
    controllers: Controllers,
    /// The member namespace of derived Services and imported EndpointSlices (the reference
    /// agents' `--fleet-system-namespace`).
    #[arg(long, env = "FLEETNET_FLEET_SYSTEM_NAMESPACE", default_value = fleetnet_hub::config::DEFAULT_FLEET_SYSTEM_NAMESPACE)]
    fleet_system_namespace: String,
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

/// What member kubeconfigs may use beyond inline credentials (both off by default).
#[derive(Args, Clone, Debug, Default)]
pub struct TrustArgs {
    /// Allow `exec` credential plugins in member kubeconfigs (e.g. kubelogin). They run as
    /// this process, with its files and tokens: only for kubeconfigs you fully trust.
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_EXEC_PLUGINS")]
    allow_member_exec_plugins: bool,
    /// Allow `insecure-skip-tls-verify: true` in member kubeconfigs; such members are flagged
    /// on /members, in `check` and in `fleetnet_member_tls_verify_disabled`.
    #[arg(long, env = "FLEETNET_ALLOW_INSECURE_MEMBER_TLS")]
    allow_insecure_member_tls: bool,
    /// Allow a member `server` over plain `http://` to a loopback host (localhost, 127.0.0.0/8,
    /// ::1): tests and local tunnels only; nothing on that connection is encrypted.
    #[arg(long, env = "FLEETNET_ALLOW_PLAIN_HTTP_LOOPBACK_MEMBERS")]
    allow_plain_http_loopback_members: bool,
    /// Allow a member kubeconfig's own `proxy-url` when it is `http://[user:pass@]host:port`
    /// (HTTP CONNECT; TLS to the member stays end to end). Such members show their proxy,
    /// without credentials, on /members, in `check` and in `fleetnet_member_proxied`. The
    /// environment's proxy is never used for members.
    #[arg(long, env = "FLEETNET_ALLOW_MEMBER_PROXY")]
    allow_member_proxy: bool,
}

impl TrustArgs {
    /// The policy, announced loudly when it widens trust.
    fn policy(&self) -> TrustPolicy {
        if self.allow_member_exec_plugins {
            tracing::warn!(
                "--allow-member-exec-plugins: member kubeconfigs may run programs in this process's pod"
            );
        }
        if self.allow_insecure_member_tls {
            tracing::warn!(
                "--allow-insecure-member-tls: member kubeconfigs may disable TLS verification"
            );
        }
        if self.allow_plain_http_loopback_members {
            tracing::warn!(
                "--allow-plain-http-loopback-members: member servers may be plain http on loopback"
            );
        }
        if self.allow_member_proxy {
            tracing::warn!(
                "--allow-member-proxy: member kubeconfigs may name an http:// proxy (proxy-url)"
            );
        }
        TrustPolicy {
            allow_exec: self.allow_member_exec_plugins,
            allow_insecure_tls: self.allow_insecure_member_tls,
            allow_plain_http_loopback: self.allow_plain_http_loopback_members,
            allow_proxy: self.allow_member_proxy,
        }
    }
}

/// Azure flags (Traffic Manager feature).
#[derive(Args, Clone, Debug)]
pub struct AzureArgs {
    /// ARM endpoint (sovereign clouds, tests).
    #[arg(long, env = "FLEETNET_AZURE_ARM_ENDPOINT", default_value = AZURE_PUBLIC_CLOUD_ARM)]
    azure_arm_endpoint: String,
    /// Microsoft Entra authority host (token endpoint).
    #[arg(long, env = "FLEETNET_AZURE_AUTHORITY_HOST", default_value = AZURE_PUBLIC_CLOUD_AUTHORITY)]
    azure_authority_host: String,
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
            authority_host: self.azure_authority_host.clone(),
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
    fn config(&self) -> Result<Config, ConfigError> {
        let release_namespace = release_namespace(self.leader_election_namespace.clone());
        let instance = instance();
        let leader_election = (self.leader_elect || self.shard_members).then(|| LeaderElection {
            namespace: release_namespace.clone(),
            name: self.leader_election_id.clone(),
            identity: format!("{instance}_{:08x}", rand::random::<u32>()),
            shard_members: self.shard_members,
            shards: self.shards,
        });
        let builder = Config::builder(self.hub_kubeconfig.clone(), &self.kubeconfig_dir)
            .namespace_prefix(&self.hub_namespace_prefix)
            .hub_limits(self.budgets.hub())
            .member_limits(self.budgets.member())
            .member_sync_timeout(self.member_sync_timeout)
            .cleanup_on_remove(self.cleanup_on_remove)
            .member_secrets_namespace(self.member_secrets.then(|| {
                self.member_secrets_namespace
                    .clone()
                    .unwrap_or_else(|| release_namespace.clone())
            }))
            .records(release_namespace, &self.leader_election_id)
            .traffic_manager(self.enable_traffic_manager)
            .instance(instance)
            .trust(self.trust.policy())
            .controllers(self.controllers)
            .fleet_system_namespace(&self.fleet_system_namespace)
            .agent_types(self.agent_types)
            .quotas(fleetnet_hub::export::Quotas {
                max_exports: self.max_exports_per_member,
                max_export_bytes: self.max_export_bytes,
            })
            .leader_election(leader_election)
            .bind_addresses(&self.metrics_bind_address, &self.health_probe_bind_address)
            .member_config(self.member_config.clone());
        match self.trace_sampling_ratio {
            Some(ratio) => builder.trace_sampling_ratio(ratio).build(),
            None => builder.build(),
        }
    }
}

/// `run`'s configuration: every flag validated and the member config file read, once.
struct RunConfig {
    config: Config,
    /// With the Traffic Manager feature on.
    azure: Option<AzureConfig>,
    azure_resource_group: String,
    log_format: String,
    /// `--members-allow-remote`.
    members_allow_remote: bool,
}

impl RunArgs {
    fn validate(&self) -> Result<RunConfig, String> {
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

/// Runs until SIGTERM or Ctrl-C, then shuts down gracefully.
async fn run(config: RunConfig) -> anyhow::Result<()> {
    let mut ext = Extensions::default();
    if config.members_allow_remote {
        tracing::warn!("--members-allow-remote: /members is answered to clients off the pod");
        ext.http.members_allow_remote = true;
    }
    if let Some(azure) = config.azure {
        let fleet = fleetnet_hub::azure::AzureFleet::new(azure)?;
        let stats = fleet.stats_handle();
        ext.azure_counters = Some(std::sync::Arc::new(move || stats.snapshot()));
        ext.azure = Some(std::sync::Arc::new(AzureMembers::new(
            fleet,
            config.config.runtime.member_config.clone(),
            config.azure_resource_group,
        )));
    }
    let running = app::start(config.config, ext).await?;
    app::wait_for_signal().await;
    tracing::info!("signal received: shutting down");
    running.shutdown().await;
    Ok(())
}

fn crdgen(out: &std::path::Path) -> anyhow::Result<()> {
    use fleetnet_hub::api::{crd_files, crd_yaml};
    std::fs::create_dir_all(out)?;
    for (file, crd) in crd_files() {
        std::fs::write(out.join(file), crd_yaml(&crd)?)?;
    }
    Ok(())
}

/// Logs (and OTLP traces when `OTEL_EXPORTER_OTLP_*` is set), sampled per member.
fn init_telemetry(
    run: Option<&RunConfig>,
) -> anyhow::Result<fleetnet_hub::telemetry::TelemetryGuard> {
    use fleetnet_hub::telemetry::{self, TelemetryConfig};
    let mut config = TelemetryConfig::from_env()?;
    if let Some(run) = run {
        config.log_format = run.log_format.parse()?;
        config.sampling = run_sampling(config.sampling, &run.config);
    }
    Ok(telemetry::init(config)?)
}

/// `FLEETNET_TRACE_SAMPLING`'s ratios with `run`'s on top: `--trace-sampling-ratio` (or its
/// env) only when given, a member's `traceSamplingRatio` from `--member-config` always.
fn run_sampling(
    mut sampling: fleetnet_hub::telemetry::SamplingConfig,
    config: &Config,
) -> fleetnet_hub::telemetry::SamplingConfig {
    if let Some(ratio) = config.trace_sampling_ratio {
        sampling.default_ratio = ratio;
    }
    for (member, settings) in config.runtime.member_config.members() {
        if let Some(ratio) = settings.trace_sampling_ratio {
            sampling.members.insert(member, ratio);
        }
    }
    sampling
}

/// jemalloc's own figures for `/metrics`, current as of this call.
fn allocator_bytes() -> Option<fleetnet_hub::metrics::AllocatorBytes> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    Some(fleetnet_hub::metrics::AllocatorBytes {
        allocated: u64::try_from(stats::allocated::read().ok()?).ok()?,
        resident: u64::try_from(stats::resident::read().ok()?).ok()?,
    })
}

fn main() -> std::process::ExitCode {
    // Short-lived allocations apart from what members keep (see `fleetnet_hub::memory`).
    if let Err(e) = fleetnet_hub::memory::keep_scratch_apart() {
        eprintln!("fleetnet-hub: no scratch arena, one arena for all ({e})");
    }
    fleetnet_hub::metrics::report_allocator(allocator_bytes);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(async_main()),
        Err(e) => {
            eprintln!("fleetnet-hub: cannot start the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// jemalloc, not the C library's allocator: glibc kept the pages a thousand members' engagement
/// burst had freed (even with a `malloc_trim` every 30 s and 2 arenas), and a 30-minute soak
/// ended 18.8 % above its start where the live heap was 5 % above; musl's (the image's) is
/// slower still. Measured at 1,000 members × 10 exports: 481 → 399 KiB per member (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Read by jemalloc when it starts (`_RJEM_MALLOC_CONF` in the environment still overrides):
/// one background thread gives freed pages back a second after they fell free (dirty decay),
/// with no muzzy stage; two arenas as for glibc before (threads are few; more arenas keep
/// more partly used pages); no thread caches: what a burst freed into them stayed there in a
/// quiet process (EndpointSlices 10 × 250: +1,032 → +914 KiB per member; 1,000 × 10: 417 →
/// 399 KiB per member, the same quiet CPU).
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,max_background_threads:1,narenas:2,\
tcache:false,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

async fn async_main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let run_config = match &cli.command {
        Command::Run(args) => match args.validate() {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("fleetnet-hub: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let telemetry = match init_telemetry(run_config.as_ref()) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("fleetnet-hub: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = match (cli.command, run_config) {
        (Command::Run(_), Some(config)) => run(config).await,
        (Command::Run(_), None) => unreachable!("validated above"),
        (
            Command::Check {
                kubeconfig_dir,
                trust,
                output,
                fleet_system_namespace,
            },
            _,
        ) => fleetnet_hub::check::run_in(
            &kubeconfig_dir,
            &fleet_system_namespace,
            trust.policy(),
            output,
        )
        .await
        .map_err(anyhow::Error::msg),
        (
            Command::Register {
                member,
                kubeconfig,
                at,
                trust,
                dry_run,
            },
            _,
        ) => register::run(register::Request {
            member: &member,
            kubeconfig: &kubeconfig,
            namespace: &at.namespace(),
            hub_kubeconfig: at.hub_kubeconfig.as_deref(),
            trust: trust.policy(),
            dry_run,
        })
        .await
        .map_err(anyhow::Error::msg),
        (Command::Status(args), _) => status::run(&args).await.map_err(anyhow::Error::msg),
        (Command::Uninstall(args), _) => uninstall::run(&args).await.map_err(anyhow::Error::msg),
        (Command::Unregister { member, at }, _) => {
            register::run_unregister(&member, &at.namespace(), at.hub_kubeconfig.as_deref())
                .await
                .map_err(anyhow::Error::msg)
        }
        #[cfg(feature = "sandbox")]
        (Command::Sandbox, _) => fleetnet_hub::sandbox::run()
            .await
            .map_err(anyhow::Error::msg),
        (Command::Crdgen { out }, _) => crdgen(&out),
    };
    // Flushes pending spans, bounded.
    if let Err(e) = telemetry.shutdown() {
        eprintln!("fleetnet-hub: telemetry shutdown: {e}");
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleetnet-hub: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
