//! One member's exporter run in the test process (no fleet around it), and clients with
//! fleetnet-hub's counting and limiting stack.

use std::sync::Arc;
use std::time::Duration;

use fleetnet_hub::api::ServiceExportVersion;
use fleetnet_hub::client::{self, ClientStats, Limits};
use fleetnet_hub::export::feed::ServiceExportFeed;
use fleetnet_hub::export::{MemberExporter, NoObserver, PublicIpLookup, Settings};
use fleetnet_testenv::Fleet;
use tokio::sync::watch;

use super::*;

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
    let (_leader_tx, leader) = watch::channel(true);
    let mut feed = ServiceExportFeed::watch(
        &member_client,
        opts.version.unwrap_or_default(),
        member,
        Arc::new(NoObserver),
    );
    let exporter = MemberExporter {
        member: member.to_string(),
        events_client,
        member_client,
        hub_client,
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
        leader,
        observer: Arc::new(NoObserver),
        instance: "test".into(),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (run, synced) = exporter.start(async move {
        let _ = stop_rx.await;
    });
    let feed = feed.run(std::future::pending());
    let task = tokio::spawn(async move {
        // Keeps the leadership sender alive as long as the controller runs.
        let _leader_tx = _leader_tx;
        // The feed runs as long as the exporter.
        tokio::select! {
            () = run => {}
            () = feed => {}
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

/// A client for `kubeconfig` with fleetnet-hub's counting stack.
pub async fn counted_client(
    name: &str,
    kubeconfig: &std::path::Path,
    stats: Arc<ClientStats>,
) -> kube::Client {
    limited_client(
        name,
        kubeconfig,
        &Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        stats,
    )
    .await
}

/// A client for `kubeconfig` through a limiter of `limits`.
pub async fn limited_client(
    name: &str,
    kubeconfig: &std::path::Path,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    client::build(name, config, limits, stats).expect("client")
}

/// Waits until `writes()` stops changing for `quiet`, and returns it.
pub async fn settled_writes(exporter: &RunningExporter, quiet: Duration) -> u64 {
    let every = Duration::from_millis(100);
    until_unchanged(every, quiet, CONVERGE, || async { exporter.writes() }).await
}
