//! The integration tests' kit (one binary, `tests/e2e`). Here: one member's exporter run in the
//! test process, a substrate fleet, the hub process's configuration for it and GETs to its local
//! endpoints. In the rooms below: counted clients, object builders, polling, Prometheus text,
//! member kubeconfig directories, free ports, signals and child test processes, the process's
//! one log subscriber, the charts rendered, and the fake servers (ARM, OTLP receivers, hostile
//! members, Prometheus, replicas of the binary).

pub mod arm;
pub mod audit;
pub mod chart;
pub mod hostile;
pub mod otlp;
pub mod prometheus;
pub mod replicas;
pub mod tls;

mod clients;
mod local;
mod logs;
mod members;
mod objects;
mod scrape;
mod slices;
mod waits;

pub use clients::*;
pub use local::*;
pub use logs::*;
pub use members::*;
pub use objects::*;
pub use scrape::*;
pub use slices::*;
pub use waits::*;

use std::sync::Arc;
use std::time::Duration;

use fleetnet_hub::api::ServiceExportVersion;
use fleetnet_hub::client::{ClientStats, Limits};
use fleetnet_hub::controller::NoObserver;
use fleetnet_hub::export::{MemberExporter, PublicIpLookup, Settings};
use fleetnet_hub::member_watches::MemberWatches;
use fleetnet_hub::service_exports::ServiceExportFeed;
use fleetnet_testenv::Fleet;

/// One member's running exporter and the counters of its clients.
pub struct RunningExporter {
    pub member_stats: Arc<ClientStats>,
    pub hub_stats: Arc<ClientStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RunningExporter {
    /// Member + hub writes, Events not counted.
    pub fn writes(&self) -> u64 {
        self.member_stats.writes_excluding_events() + self.hub_stats.writes_excluding_events()
    }

    /// Stops the controller and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
}

impl Drop for RunningExporter {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Options of an exporter started by a test.
#[derive(Clone, Default)]
pub struct ExporterOptions {
    pub traffic_manager: bool,
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// A kubeconfig to use for the member instead of the admin one.
    pub member_kubeconfig: Option<std::path::PathBuf>,
    pub hub_kubeconfig: Option<std::path::PathBuf>,
    pub version: Option<ServiceExportVersion>,
    /// Limits of the member client (default: generous, so tests are not throttled).
    pub member_limits: Option<Limits>,
    /// Events through a client of their own with these limits (default: the member client).
    pub events_limits: Option<Limits>,
    /// The member's quotas (default: the flags' defaults).
    pub quotas: fleetnet_hub::export::Quotas,
    /// Resource groups a Service may name besides `rg-default` (the member's allowlist).
    pub allowed_resource_groups: Vec<String>,
}

/// Starts an exporter for `member` of `fleet`, with counting clients, and waits for its sync.
pub async fn start_exporter(fleet: &Fleet, member: &str, opts: ExporterOptions) -> RunningExporter {
    init_test_logs();
    let member_kubeconfig = opts
        .member_kubeconfig
        .clone()
        .unwrap_or_else(|| fleet.member(member).kubeconfig_path().to_path_buf());
    let hub_kubeconfig = opts
        .hub_kubeconfig
        .clone()
        .unwrap_or_else(|| fleet.hub().kubeconfig_path().to_path_buf());
    let member_stats = Arc::new(ClientStats::default());
    let hub_stats = Arc::new(ClientStats::default());
    let limits = opts.member_limits.clone().unwrap_or(Limits {
        qps: 200.0,
        burst: 400,
        ..Limits::default()
    });
    let member_client =
        limited_client(member, &member_kubeconfig, &limits, member_stats.clone()).await;
    let hub_client = counted_client("hub", &hub_kubeconfig, hub_stats.clone()).await;
    let events_client = match &opts.events_limits {
        Some(limits) => limited_client(member, &member_kubeconfig, limits, Arc::default()).await,
        None => member_client.clone(),
    };
    let mut feed = ServiceExportFeed::watch(
        &member_client,
        opts.version.unwrap_or_default(),
        member,
        Arc::new(NoObserver),
    );
    let mut watches = MemberWatches::of(&member_client);
    let exporter = MemberExporter {
        member: member.to_string(),
        events_client,
        member_client,
        hub_client: hub_client.clone(),
        hub_namespace: fleet.hub_namespace(member),
        exports: feed.subscribe(0),
        settings: Settings {
            member: member.to_string(),
            traffic_manager: opts.traffic_manager,
            default_resource_group: "rg-default".into(),
            quotas: opts.quotas,
            allowed_resource_groups: opts.allowed_resource_groups.clone(),
        },
        public_ips: opts.public_ips.clone(),
        claim: fleetnet_hub::ownership::Claim::of(fleetnet_hub::ownership::Fence::open()),
        observer: Arc::new(NoObserver),
        instance: "test".into(),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // The replica's ISE watch, the member's namespace in it.
    let ises = fleetnet_hub::export::hub_tap(&hub_client, true);
    ises.members(&[fleet.hub_namespace(member)], true);
    let (run, synced) = exporter.start((&mut watches.services, &ises), async move {
        let _ = stop_rx.await;
    });
    let feed = feed.run(std::future::pending());
    let watches = watches.run(tokio_util::sync::CancellationToken::new());
    let ises = ises.run(std::future::pending());
    let task = tokio::spawn(async move {
        // The feeds run as long as the exporter.
        tokio::select! {
            () = run => {}
            () = feed => {}
            () = watches => {}
            () = ises => {}
        }
    });
    tokio::time::timeout(CONVERGE, synced.wait())
        .await
        .expect("exporter watches synced");
    RunningExporter {
        member_stats,
        hub_stats,
        stop: Some(stop_tx),
        task: Some(task),
    }
}

/// A fleet of `members` that prints no readiness figures, and a hub client.
pub async fn quiet_fleet<S: Into<String>>(
    members: impl IntoIterator<Item = S>,
) -> (Fleet, kube::Client) {
    let fleet = Fleet::builder()
        .members(members)
        .quiet()
        .start()
        .await
        .expect("fleet starts");
    let hub = fleet.hub().client().await.expect("hub client");
    (fleet, hub)
}

/// Waits until the running product shows `member` in `phase`.
pub async fn wait_phase(
    running: &fleetnet_hub::app::Running,
    member: &str,
    phase: fleetnet_hub::fleet::Phase,
) {
    eventually(&format!("member {member} {phase:?}"), || async {
        running
            .state
            .member(member)
            .filter(|m| m.phase == phase)
            .map(|_| ())
    })
    .await;
}

/// The whole process for `fleet`'s one member `member`, running only `controllers`, once the
/// member is Ready and so is the process.
pub async fn start_jobs(
    fleet: &Fleet,
    member: &str,
    controllers: fleetnet_hub::fleet::Controllers,
) -> fleetnet_hub::app::Running {
    init_test_logs();
    let dir = kubeconfig_dir(fleet, &format!("{member}-kubeconfigs"), &[member]);
    let mut config = app_config(fleet, &dir);
    config.runtime.controllers = controllers;
    let running = fleetnet_hub::app::start(config, fleetnet_hub::app::Extensions::default())
        .await
        .expect("starts");
    within(Duration::from_secs(60), "member ready", || async {
        let ready = running
            .state
            .member(member)
            .is_some_and(|s| s.phase == fleetnet_hub::fleet::Phase::Ready);
        (ready && running.state.ready()).then_some(())
    })
    .await;
    running
}

/// The whole process's configuration for `fleet`, members from `dir`, generous hub budget,
/// no leader election, ephemeral ports; tests set what they need before it is built.
pub fn config_builder(fleet: &Fleet, dir: &std::path::Path) -> fleetnet_hub::config::ConfigBuilder {
    let hub = fleet.hub().kubeconfig_path().to_path_buf();
    fleetnet_hub::config::Config::builder(Some(hub), dir)
        .hub_limits(Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        })
        .member_sync_timeout(Duration::from_secs(10))
        .records("default", fleetnet_hub::config::DEFAULT_LEADER_ELECTION_ID)
        .instance("test")
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        // Job tests count reconciles by member and outcome.
        .metrics_detail(fleetnet_hub::metrics::MetricsDetail::Member)
}

/// [`config_builder`], built.
pub fn app_config(fleet: &Fleet, dir: &std::path::Path) -> fleetnet_hub::config::Config {
    config_builder(fleet, dir)
        .build()
        .expect("a valid configuration")
}

/// `GET path` on a local HTTP endpoint: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// How the apiserver serves a rendered object's kind, from `discovery`; panics on a kind the
/// apiserver does not serve (a chart that renders it is broken).
pub fn served_as(
    discovery: &kube::discovery::Discovery,
    obj: &kube::api::DynamicObject,
) -> (
    kube::discovery::ApiResource,
    kube::discovery::ApiCapabilities,
) {
    let types = obj.types.clone().expect("apiVersion/kind");
    let gvk = kube::api::GroupVersionKind::try_from(&types).expect("gvk");
    discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("hub does not serve {gvk:?}"))
}
