//! Assembles the process: hub client, leader election, HTTP servers, Azure, the fleet runtime;
//! owns shutdown. Used by `fleetnet-hub run`, `sandbox` and the end-to-end tests alike.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::client::{self, ClientStats, Limits};
use crate::config::{Config, LeaderElection};
use crate::fleet::{self, FleetState, MemberAzure};
use crate::http;
use crate::metrics::Metrics;
use crate::ownership::{self, Election, Ownership, lease::LeaseConfig};

/// Optional parts supplied by the caller.
#[derive(Clone, Default)]
pub struct Extensions {
    /// Traffic Manager: the shared Azure client, per member.
    pub azure: Option<Arc<dyn MemberAzure>>,
    /// The Azure client's counters, for metrics.
    pub azure_counters: Option<crate::metrics::AzureSource>,
    /// Limits of the health and metrics servers, and who may read `/members` (the defaults are
    /// the safe ones: loopback only).
    pub http: http::HttpOptions,
}

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error("configuration: {0}")]
    Invalid(#[from] crate::config::ConfigError),
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
    /// Whether this replica writes (holds the leader Lease, or there is no election, or
    /// members are sharded).
    pub claim: ownership::Claim,
    shutdown: CancellationToken,
    /// How long [`Running::shutdown`] waits for the drain (`--shutdown-timeout`).
    shutdown_timeout: Duration,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting work, lets in-flight reconciles finish, releases the lease. Bounded.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        let timeout = self.shutdown_timeout;
        if tokio::time::timeout(timeout, self.task).await.is_err() {
            tracing::warn!(
                ?timeout,
                "shutdown did not complete within --shutdown-timeout"
            );
        }
    }
}

/// A hub client from the kubeconfig (or the in-cluster configuration), named `name`, its
/// writes fenced by `fence`, and its server's URL (`check` uses the same client).
pub async fn hub_client(
    name: &str,
    path: Option<&std::path::Path>,
    lanes: usize,
    limits: &Limits,
    stats: Arc<ClientStats>,
    fence: client::Fence,
) -> Result<(kube::Client, String), Error> {
    // Parser and kube errors quote the file, which may be a token or a key: by place only.
    use crate::fleet::vet::parse_error;
    let failed = |e: String| match path {
        Some(path) => Error::Hub(format!("kubeconfig {}: {e}", path.display())),
        None => Error::Hub(format!(
            "in-cluster configuration (no --hub-kubeconfig given): {e}"
        )),
    };
    let kubeconfig = match path {
        Some(path) => Some(kube::config::Kubeconfig::read_from(path).map_err(|e| {
            let text = std::fs::read_to_string(path).ok();
            failed(parse_error::kubeconfig_error(&e, text.as_deref()))
        })?),
        None => None,
    };
    match client::from_kubeconfig(name, kubeconfig, lanes, limits, stats, fence).await {
        Ok(built) => Ok(built),
        // The in-cluster configuration's errors name environment variables and files only.
        Err(client::Error::Config(e)) if path.is_none() => Err(failed(e)),
        Err(client::Error::Config(e)) => Err(failed(parse_error::kube_message(&e))),
        Err(e) => Err(Error::Hub(e.to_string())),
    }
}

/// Starts everything and returns at once; [`Running::shutdown`] stops it.
pub async fn start(config: Config, ext: Extensions) -> Result<Running, Error> {
    config.check_kubeconfig_dir()?;
    crate::announce::log_startup(&config);
    let (ownership, election) = Ownership::new(ownership_mode(&config));
    let hub_stats = Arc::new(ClientStats::default());
    let (hub, _) = hub_client(
        "hub",
        config.hub_kubeconfig.as_deref(),
        client::HUB_LANES,
        &config.hub_limits,
        hub_stats.clone(),
        ownership.fence(),
    )
    .await?;
    let shutdown = CancellationToken::new();
    let state = Arc::new(FleetState::default());
    let metrics = metrics(&config, state.clone(), hub_stats, ext.azure_counters);
    let (health_address, metrics_address) =
        serve_http(&config, &ext.http, &state, &metrics, &shutdown).await?;
    metrics.set_leader(ownership.claim());
    // Coordination outlives the fleet's shutdown by a little: leases are released after the
    // members have stopped writing.
    let coordination_stop = CancellationToken::new();
    let coordination = Coordination {
        config: config.clone(),
        state: state.clone(),
        election,
        stop: coordination_stop.clone(),
    };
    let coordinating = coordination.spawn().await?;

    // The replica's one watch of each hub kind a job reads, every member's namespace in it.
    let hub_watches =
        crate::hub_watches::HubWatches::of(&hub, |job| config.runtime.controllers.runs(job));
    tokio::spawn(hub_watches.clone().run(shutdown.clone()));
    let shared = Arc::new(fleet::Shared {
        config: config.runtime,
        hub_views: crate::client::HubViews::new(&hub),
        hub_watches,
        hub_client: hub,
        state: state.clone(),
        observer: metrics.clone(),
        hooks: metrics.clone(),
        azure: ext.azure,
        ownership: ownership.clone(),
        cleanups: Default::default(),
        engaging: Arc::new(tokio::sync::Semaphore::new(fleet::ENGAGING_AT_ONCE)),
    });
    let task = tokio::spawn(run_fleet(
        shared,
        shutdown.clone(),
        coordination_stop,
        coordinating,
    ));
    Ok(Running {
        health_address,
        metrics_address,
        state,
        metrics,
        claim: ownership.claim(),
        shutdown,
        shutdown_timeout: config.shutdown_timeout,
        task,
    })
}

/// The process's metrics: the fleet's state, the hub client's counters and Azure's.
fn metrics(
    config: &Config,
    state: Arc<FleetState>,
    hub_stats: Arc<ClientStats>,
    azure_counters: Option<crate::metrics::AzureSource>,
) -> Arc<Metrics> {
    let metrics = Arc::new(Metrics::with_detail(config.metrics_detail));
    metrics.set_fleet_state(state);
    metrics.set_hub_client(hub_stats);
    if let Some(source) = azure_counters {
        metrics.set_azure_source(source);
    }
    metrics
}

/// Runs the fleet until `shutdown`, then stops coordination (its leases released after the
/// members have stopped writing).
async fn run_fleet(
    shared: Arc<fleet::Shared>,
    shutdown: CancellationToken,
    coordination_stop: CancellationToken,
    coordinating: tokio::sync::oneshot::Receiver<()>,
) {
    // Also when this task is dropped with its runtime rather than shut down.
    let _stop_coordination = coordination_stop.clone().drop_guard();
    fleet::run(shared, shutdown).await;
    coordination_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), coordinating).await;
}

/// The health (`/healthz`, `/readyz`, `/members`) and metrics servers; their addresses.
async fn serve_http(
    config: &Config,
    options: &http::HttpOptions,
    state: &Arc<FleetState>,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) -> Result<(SocketAddr, SocketAddr), Error> {
    let metrics = metrics.clone();
    let render: http::RenderMetrics = Arc::new(move || metrics.encode());
    let address = &config.health_probe_bind_address;
    let health = http::serve_health(address, state.clone(), options.clone(), shutdown.clone());
    let health = health.await?;
    let address = &config.metrics_bind_address;
    let limits = options.limits.clone();
    let metrics = http::serve_metrics_with(address, render, limits, shutdown.clone()).await?;
    Ok((health, metrics))
}

/// Control traffic (Lease calls, the hub probe) has its own client and budget: members'
/// writes never delay a renew, and the hub is never reported unreachable because of our own
/// queue.
async fn control_client(config: &Config, sharded: bool) -> Result<kube::Client, Error> {
    let limits = Limits {
        // Sharded: a list, an announcement and a renew per held shard per retry period.
        qps: if sharded { 50.0 } else { 5.0 },
        burst: if sharded { 100 } else { 10 },
        max_in_flight: if sharded { 8 } else { 2 },
        // No attempt may outlive a hold: each lease call has its own deadline anyway.
        timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let path = config.hub_kubeconfig.as_deref();
    let fence = client::Fence::open();
    let (client, _) = hub_client("control", path, 1, &limits, Arc::default(), fence).await?;
    Ok(client)
}

/// How this replica takes part in writing, from its election settings.
fn ownership_mode(config: &Config) -> ownership::Mode {
    match &config.leader_election {
        None => ownership::Mode::Alone,
        Some(le) if le.shard_members => ownership::Mode::Sharded {
            lease: lease_config(le),
            shards: le.shards,
        },
        Some(le) => ownership::Mode::Leader(lease_config(le)),
    }
}

fn lease_config(le: &LeaderElection) -> LeaseConfig {
    LeaseConfig {
        namespace: le.namespace.clone(),
        name: le.name.clone(),
        identity: le.identity.clone(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    }
}

/// The election (one leader, or the shard Leases) and the hub probe, with the control
/// client they use.
struct Coordination {
    config: Config,
    state: Arc<FleetState>,
    election: Election,
    stop: CancellationToken,
}

impl Coordination {
    /// Runs on a thread and runtime of its own: a thousand members starting or reconciling
    /// on the main runtime never delay a renew past its deadline (holds lapsing under load
    /// is how members were lost). Returns once the control client is built; the receiver
    /// resolves when coordination has stopped (after `stop`, its leases released).
    async fn spawn(self) -> Result<tokio::sync::oneshot::Receiver<()>, Error> {
        let (built_tx, built_rx) = tokio::sync::oneshot::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("coordination")
            .build()
            .map_err(|e| Error::Config(format!("coordination runtime: {e}")))?;
        let spawned = std::thread::Builder::new()
            .name("coordination".into())
            .spawn(move || {
                // The control client is built here, so its buffer worker and its connections
                // run on this runtime too.
                runtime.block_on(self.run(built_tx));
                let _ = done_tx.send(());
            });
        spawned.map_err(|e| Error::Config(format!("coordination thread: {e}")))?;
        match built_rx.await {
            Ok(Ok(())) => Ok(done_rx),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Hub("coordination stopped before it started".into())),
        }
    }

    async fn run(self, built: tokio::sync::oneshot::Sender<Result<(), Error>>) {
        let control = match control_client(&self.config, self.election.sharded()).await {
            Ok(control) => control,
            Err(e) => {
                let _ = built.send(Err(e));
                return;
            }
        };
        let _ = built.send(Ok(()));
        let probe = tokio::spawn(crate::announce::probe_hub(
            control.clone(),
            self.state,
            self.stop.clone(),
        ));
        if let Some(le) = &self.config.leader_election {
            let api: Api<Lease> = Api::namespaced(control, &le.namespace);
            self.election.run(api, self.stop.clone()).await;
        }
        self.stop.cancelled().await;
        let _ = probe.await;
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
