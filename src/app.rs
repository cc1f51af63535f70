//! Assembles the process: hub client, leader election, HTTP servers, Azure, the fleet runtime;
//! owns shutdown. Used by `fleetnet-hub run`, `sandbox` and the end-to-end tests alike.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::client::{self, ClientStats, Limits};
use crate::fleet::{self, FleetState, MemberAzure, RuntimeConfig, lease::LeaseConfig};
use crate::http;
use crate::metrics::Metrics;

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

impl AppConfig {
    /// What can only be checked where the process runs: the kubeconfig directory exists.
    fn check(&self) -> Result<(), Error> {
        let dir = &self.runtime.kubeconfig_dir;
        match dir.is_dir() {
            true => Ok(()),
            false => Err(Error::Config(format!(
                "--kubeconfig-dir {} is not a directory",
                dir.display()
            ))),
        }
    }
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
}

/// A hub client from the kubeconfig (or the in-cluster configuration), named `name`, its
/// writes fenced by `fence`.
async fn hub_client(
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
    config.check()?;
    let sharded = config
        .leader_election
        .as_ref()
        .is_some_and(|le| le.shard_members);
    // Sharded, each member has its own fence; the process-wide one stays open.
    let (hold_tx, hold_rx) = watch::channel(match config.leader_election.is_some() && !sharded {
        true => client::Hold::Never,
        false => client::Hold::Always,
    });
    let fence = client::Fence::new(hold_rx);
    let hub_stats = Arc::new(ClientStats::default());
    let path = config.hub_kubeconfig.as_deref();
    let hub = hub_client(
        "hub",
        path,
        &config.hub_limits,
        hub_stats.clone(),
        fence.clone(),
    );
    let (hub, control) = (hub.await?, control_client(&config, sharded).await?);
    let shutdown = CancellationToken::new();
    let state = Arc::new(FleetState::default());
    let metrics = Arc::new(Metrics::new());
    metrics.set_fleet_state(state.clone());
    metrics.set_hub_client(hub_stats);
    if let Some(source) = ext.azure_counters {
        metrics.set_azure_source(source);
    }
    let (health_address, metrics_address) =
        serve_http(&config, state.clone(), metrics.clone(), shutdown.clone()).await?;

    let (leader_tx, leader_rx) = watch::channel(config.leader_election.is_none() || sharded);
    metrics.set_leader(leader_rx.clone());
    // The election outlives the fleet's shutdown by a little: the lease is released after
    // the members have stopped writing.
    let election_stop = CancellationToken::new();
    let (election, shards) = match config.leader_election.clone() {
        Some(le) => {
            let api: Api<Lease> = Api::namespaced(control.clone(), &le.namespace);
            let (task, shards) = elect(api, le, leader_tx, hold_tx, election_stop.clone());
            (Some(task), shards)
        }
        None => (None, None),
    };

    let shared = Arc::new(fleet::Shared {
        config: config.runtime,
        hub_client: hub,
        control_client: control,
        state: state.clone(),
        observer: metrics.clone(),
        hooks: metrics.clone(),
        azure: ext.azure,
        leader: leader_rx.clone(),
        fence,
        shards,
        cleanups: Default::default(),
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

/// The health (`/healthz`, `/readyz`, `/members`) and metrics servers; their addresses.
async fn serve_http(
    config: &AppConfig,
    state: Arc<FleetState>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, SocketAddr), Error> {
    let render: http::RenderMetrics = Arc::new(move || metrics.encode());
    let health = http::serve_health(&config.health_probe_bind_address, state, shutdown.clone());
    let health = health.await?;
    let metrics = http::serve_metrics(&config.metrics_bind_address, render, shutdown).await?;
    Ok((health, metrics))
}

/// Control traffic (Lease calls, the hub probe) has its own client and budget: members'
/// writes never delay a renew, and the hub is never reported unreachable because of our own
/// queue.
async fn control_client(config: &AppConfig, sharded: bool) -> Result<kube::Client, Error> {
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
    hub_client("control", path, &limits, Arc::default(), fence).await
}

/// Runs the election: one leader for all members, or (`shard_members`) shard Leases among
/// the announced replicas, whose [`fleet::shard::Shards`] is returned too.
fn elect(
    api: Api<Lease>,
    le: LeaderElection,
    leader_tx: watch::Sender<bool>,
    hold_tx: watch::Sender<client::Hold>,
    stop: CancellationToken,
) -> (
    tokio::task::JoinHandle<()>,
    Option<Arc<fleet::shard::Shards>>,
) {
    let cfg = LeaseConfig {
        namespace: le.namespace,
        name: le.name,
        identity: le.identity,
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    if !le.shard_members {
        let task = tokio::spawn(fleet::leader::run(api, cfg, leader_tx, hold_tx, stop));
        return (task, None);
    }
    let shards = Arc::new(fleet::shard::Shards::new(cfg, le.shards));
    let task = tokio::spawn(fleet::shard::run(api, shards.clone(), stop));
    (task, Some(shards))
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
