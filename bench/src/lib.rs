//! The benchmark behind `fleetnet-bench` (issue #15): a substrate hub + N members with M
//! Service + ServiceExport pairs each, created before the controller starts; the controller run
//! in this process through [`fleetnet_hub::app::start`]; and what it costs, measured from outside it.
//!
//! - cold convergence: controller start → every ServiceExport has its ISE and `Valid=True`
//!   (seen by this harness's own watches on the hub and every member);
//! - writes and 409s counted server-side, from each apiserver's own `apiserver_request_total`
//!   (`/metrics`), as differences between snapshots;
//! - the token-bucket bound: the least time the configured budgets allow for the requests the
//!   controller actually made (its own client counters);
//! - RSS (`/proc/self/status`) and CPU (`/proc/self/stat`) of this process: the controller and
//!   this harness; the substrate's kube-apiservers and etcd are separate processes, not counted;
//! - under churn: Service port changes at a fixed rate, and the time until the hub's ISE
//!   carries the new port.
//!
//! `bench/tests/smoke.rs` runs [`run`] small and asserts the counts.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort as K8sServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

mod fairness;
mod observe;
mod process;
mod report;
mod server;
mod svg;
#[cfg(test)]
mod tests;

pub use fairness::{FairnessConfig, FairnessReport, fairness_markdown, run_fairness};
pub use observe::churn_over_servers;
use observe::*;
use process::*;
pub use process::{
    binary_idle_rss, cpu_seconds, cpu_seconds_of, machine_cpu_seconds, rss_kib, status_kib_of,
};
use report::*;
pub use report::{markdown, summary_markdown};
use server::*;
pub use server::{ServerCounts, ideal_bound, parse_sample, scrape_every_resource};
pub use svg::svg;

use fleetnet_hub::api::{
    CONDITION_VALID, InternalServiceExport, ServiceExport, ServiceExportVersion,
};
use fleetnet_hub::app::{self, Extensions};
use fleetnet_hub::client::Limits;

/// The member namespace every benchmark Service and ServiceExport lives in.
pub const NAMESPACE: &str = "bench";
/// The writes counted server-side: the substrate's definition, shared with tests/restart.rs.
pub use fleetnet_testenv::{COUNTED_RESOURCES, WRITE_VERBS};
/// Port of every Service when created; churn moves it to `CHURN_PORT_BASE + k`.
const INITIAL_PORT: i32 = 80;
const CHURN_PORT_BASE: i32 = 1024;
/// Kernel clock ticks per second of `/proc/self/stat` (USER_HZ, 100 on Linux).
const CLOCK_TICKS: f64 = 100.0;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub members: usize,
    /// Service + ServiceExport pairs per member.
    pub exports: usize,
    /// The hub client's budget, shared by all members (`--hub-api-qps/burst`).
    pub hub_limits: Limits,
    /// Each member client's budget (`--kube-api-qps/burst`).
    pub member_limits: Limits,
    /// Writes are counted for this long after convergence; zero skips the quiet period.
    pub quiet: Duration,
    pub churn: Option<Churn>,
    /// Gives up when the fleet has not converged by then.
    pub converge_timeout: Duration,
    /// How long the controller runs with no member before its idle RSS is read.
    pub idle_settle: Duration,
    /// The shipped `fleetnet-hub` binary, to read its idle RSS as a separate process too.
    pub real_binary: Option<PathBuf>,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            members: 1,
            exports: 50,
            hub_limits: Limits {
                qps: 100.0,
                burst: 200,
                ..Limits::default()
            },
            member_limits: Limits::default(),
            quiet: Duration::from_secs(60),
            churn: None,
            converge_timeout: Duration::from_secs(900),
            idle_settle: Duration::from_secs(3),
            real_binary: None,
            progress: true,
        }
    }
}

/// Service changes at `rate` per second for `duration`, spread over members round-robin.
#[derive(Debug, Clone, Copy)]
pub struct Churn {
    pub rate: f64,
    pub duration: Duration,
}

/// Writes (or 409s) of one resource and verb, summed over the hub and every member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WriteCount {
    /// `serviceexports`, `serviceexports/status`, `internalserviceexports`, `events`.
    pub resource: String,
    /// As the apiserver spells it: `POST`, `PATCH`, `PUT`, `DELETE`, …
    pub verb: String,
    /// Every response code.
    pub count: u64,
    /// Of those, answered 409 (conflict or already exists).
    pub conflicts: u64,
}

/// Requests of the controller's own clients (client-side counters), summed over members.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClientRequests {
    /// `hub` or `member`.
    pub client: String,
    pub verb: String,
    pub resource: String,
    pub code: String,
    pub count: u64,
}

/// Figures of one run. Durations in seconds, memory in KiB.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub members: usize,
    pub exports: usize,
    pub hub_qps: f64,
    pub hub_burst: u32,
    pub kube_qps: f64,
    pub kube_burst: u32,
    pub event_qps: f64,
    pub event_burst: u32,
    pub reconcile_concurrency: u16,
    pub substrate_start_s: f64,
    pub create_s: f64,
    /// Controller start → every ServiceExport has its ISE and `Valid=True`.
    pub convergence_s: f64,
    /// Controller start → the controller created every Event of the cold start (2 per export),
    /// through the members' Events budgets, after the exports.
    #[serde(default)]
    pub events_done_s: f64,
    /// The least time the budgets allow for the requests the controller made until then.
    pub budget_bound_s: f64,
    /// The least time the budgets allow for the requests a cold start needs at minimum: per
    /// member 2 ServiceExport PATCHes per export and 4 LISTs (ServiceExports and Services; the
    /// EndpointSlice exporter's ServiceExports and EndpointSlices), on the hub 1 ISE POST per
    /// export and [`server::HUB_LISTS_PER_REPLICA`] LISTs for all its members (one per hub kind a
    /// job reads); Events have their own budget, no export waits for them.
    pub ideal_bound_s: f64,
    /// Which bucket gives that bound: `hub` or `member <name>`.
    pub binding_client: String,
    /// Requests (watches excluded) through the hub client until convergence.
    pub hub_requests: u64,
    /// Requests (watches excluded) through the busiest member client until convergence.
    pub member_requests_max: u64,
    /// The controller's requests until convergence, from its own client counters.
    pub controller_requests: Vec<ClientRequests>,
    /// Server-side writes from controller start to 2 s after convergence.
    pub cold_writes: Vec<WriteCount>,
    pub cold_409: u64,
    /// Length of the quiet period (0: not measured).
    pub quiet_s: f64,
    pub quiet_writes: Vec<WriteCount>,
    pub quiet_409: u64,
    pub churn: Option<ChurnReport>,
    /// 409 responses from controller start to the end of the run.
    pub run_409: u64,
    pub rss: Rss,
    pub cpu: Cpu,
    /// Every `verb` label value the hub's `apiserver_request_total` had at the end.
    pub verbs_seen: Vec<String>,
}

/// RSS of this process at the points of the run (KiB).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rss {
    /// Before any controller: this harness with the objects created.
    pub harness_kib: u64,
    /// A controller running with no member (`app::start` on an empty kubeconfig directory).
    pub idle_kib: u64,
    /// That controller stopped, this harness's watches on the hub and members listed.
    pub with_watches_kib: u64,
    /// The controller with every member, right after convergence.
    pub converged_kib: u64,
    /// At the end of the run (after the quiet period and churn).
    pub end_kib: u64,
    /// Peak (VmHWM) of the process.
    pub peak_kib: u64,
    /// The shipped `fleetnet-hub run` binary with no member, a separate process.
    pub binary_idle_kib: Option<u64>,
    /// Diagnostic, glibc only: right after `idle_kib`, RSS once `malloc_trim(0)` handed freed
    /// heap back to the OS (what is live rather than what the allocator keeps).
    pub idle_trimmed_kib: Option<u64>,
    /// The same at the very end, with every member still running.
    pub end_trimmed_kib: Option<u64>,
}

impl Rss {
    /// `(converged - idle) / members`: conservative, as it includes this harness's watches.
    pub fn per_member_kib(&self, members: usize) -> f64 {
        self.converged_kib.saturating_sub(self.idle_kib) as f64 / members.max(1) as f64
    }

    /// `(end_trimmed - idle_trimmed) / members`: the live heap per member, when measured.
    pub fn live_per_member_kib(&self, members: usize) -> Option<f64> {
        Some(
            self.end_trimmed_kib?.saturating_sub(self.idle_trimmed_kib?) as f64
                / members.max(1) as f64,
        )
    }
}

/// CPU seconds (user + system) of this process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// Controller start → convergence.
    pub cold_s: f64,
    /// The quiet period.
    pub quiet_s: f64,
    /// The churn, until every change was seen on the hub.
    pub churn_s: f64,
    /// Controller start → end of the run.
    pub total_s: f64,
    /// Of the total: fetching and parsing the apiservers' `/metrics`.
    pub scrape_s: f64,
    /// The whole machine during the cold start: busy CPU seconds (all processes: this one,
    /// the apiservers, etcd) and the CPU seconds there were (wall time × cores).
    #[serde(default)]
    pub cold_machine_busy_s: f64,
    #[serde(default)]
    pub cold_machine_total_s: f64,
}

/// What the churn did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChurnReport {
    pub rate: f64,
    pub duration_s: f64,
    pub changes: u64,
    /// Changes whose port reached the hub's ISE (one per member that awaited it).
    pub reflected: u64,
    /// (change, member) pairs awaited: `changes` when each change is one member's.
    #[serde(default)]
    pub awaited: u64,
    /// Patches the member apiserver refused or that failed.
    pub failed: u64,
    /// Change → ISE with the new port, sorted, milliseconds.
    pub latencies_ms: Vec<f64>,
    pub writes: Vec<WriteCount>,
    pub conflicts_409: u64,
}

impl ChurnReport {
    /// The `q` quantile (0..=1) of the latencies, nearest rank.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        quantile(&self.latencies_ms, q)
    }
}

/// Nearest-rank quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Sum of the counts of `resource` (and `verb`, when given).
pub fn count_of(writes: &[WriteCount], resource: &str, verb: Option<&str>) -> u64 {
    writes
        .iter()
        .filter(|w| w.resource == resource && verb.is_none_or(|v| w.verb == v))
        .map(|w| w.count)
        .sum()
}

/// Sum of every count except Events.
pub fn total_excluding_events(writes: &[WriteCount]) -> u64 {
    writes
        .iter()
        .filter(|w| w.resource != "events")
        .map(|w| w.count)
        .sum()
}

fn say(progress: bool, line: impl AsRef<str>) {
    if progress {
        eprintln!("[bench] {}", line.as_ref());
    }
}

/// Member names `m01`, `m02`, … (hub namespaces `fleet-member-m01`, …).
/// The apiserver (0..k) serving member index `i` when `k` apiservers serve the names.
pub fn server_of(i: usize, k: usize) -> usize {
    i % k.max(1)
}

pub fn member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("m{i:02}")).collect()
}

pub fn service_name(i: usize) -> String {
    format!("svc-{i:04}")
}

/// Runs the whole benchmark once.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    anyhow::ensure!(
        config.members > 0 && config.exports > 0,
        "--members and --exports must be positive"
    );
    let p = config.progress;
    let names = member_names(config.members);
    let begun = Instant::now();
    let (fleet, hub, member_clients) = substrate(&names).await?;
    let substrate_start = begun.elapsed();
    say(
        p,
        format!(
            "substrate up in {substrate_start:.1?}: hub + {} members (separate kube-apiserver processes, one etcd)",
            config.members
        ),
    );
    let mut all_clients = vec![hub.clone()];
    all_clients.extend(member_clients.iter().cloned());

    let binary_idle_kib = match &config.real_binary {
        Some(bin) => binary_idle_rss(bin, &fleet).await,
        None => None,
    };

    let created = Instant::now();
    futures::future::try_join_all(
        member_clients
            .iter()
            .map(|c| create_pairs(c.clone(), (0..config.exports).map(service_name))),
    )
    .await?;
    let create = created.elapsed();
    say(
        p,
        format!(
            "created {} Service+ServiceExport pairs in {create:.1?}",
            config.members * config.exports
        ),
    );

    // Idle: a controller with no member at all.
    let harness_kib = rss_kib();
    let empty_dir = fleet.scratch_dir().join("bench-no-members");
    std::fs::create_dir_all(&empty_dir)?;
    let idle = app::start(
        app_config(config, &fleet, &empty_dir)?,
        Extensions::default(),
    )
    .await
    .context("starting the idle controller")?;
    tokio::time::sleep(config.idle_settle).await;
    let idle_kib = rss_kib();
    let idle_trimmed_kib = trim_heap().then(rss_kib);
    idle.shutdown().await;

    // The harness's eyes: every member's ServiceExports and the hub's ISEs.
    let observed = Observed::new(names.len(), names.len() * config.exports);
    let watches = observed.spawn_watches(&hub, &member_clients, &fleet, &names);
    observed.wait_listed(names.len() + 1).await;
    let with_watches_kib = rss_kib();

    let mut scrape_cpu = 0.0;
    let before = scrape(&all_clients, &mut scrape_cpu).await?;

    // Cold start.
    say(
        p,
        format!(
            "controller: in-process via fleetnet_hub::app::start (hub {} qps / {} burst shared, member {} qps / {} burst each, Events {} qps / {} burst each)",
            config.hub_limits.qps,
            config.hub_limits.burst,
            config.member_limits.qps,
            config.member_limits.burst,
            config.member_limits.event_qps,
            config.member_limits.event_burst
        ),
    );
    let cpu0 = cpu_seconds();
    let machine0 = machine_cpu_seconds();
    let t0 = Instant::now();
    let running = app::start(
        app_config(config, &fleet, &fleet.member_kubeconfig_dir())?,
        Extensions::default(),
    )
    .await
    .context("starting the controller")?;
    let converged_at = observed
        .wait_converged(t0, config.converge_timeout, p)
        .await?;
    let convergence = converged_at.duration_since(t0);
    let cpu_cold = cpu_seconds() - cpu0;
    let machine1 = machine_cpu_seconds();
    let converged_kib = rss_kib();
    let controller_metrics = running.metrics.encode();
    let (budget_bound, binding_client, hub_requests, member_requests_max) =
        budget_bound(&controller_metrics, config);
    say(
        p,
        format!(
            "converged after {convergence:.2?} (budget bound {budget_bound:.2?}, {binding_client})"
        ),
    );
    let events_done = events_created(&running, 2 * names.len() * config.exports, p).await;
    let events_done = events_done.duration_since(t0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_cold = scrape(&all_clients, &mut scrape_cpu).await?;

    // Quiet period.
    let (quiet_writes, quiet_409, cpu_quiet, after_quiet) = if config.quiet.is_zero() {
        (vec![], 0, 0.0, after_cold.clone())
    } else {
        say(p, format!("quiet period: {:?}", config.quiet));
        let c = cpu_seconds();
        tokio::time::sleep(config.quiet).await;
        let cpu = cpu_seconds() - c;
        let after = scrape(&all_clients, &mut scrape_cpu).await?;
        (
            after.writes_since(&after_cold),
            after.conflicts_since(&after_cold),
            cpu,
            after,
        )
    };

    // Churn.
    let (churn, cpu_churn, end) = match config.churn {
        Some(churn) => {
            say(
                p,
                format!(
                    "churn: {} Service port changes/s for {:?}",
                    churn.rate, churn.duration
                ),
            );
            let c = cpu_seconds();
            let services: Vec<String> = (0..config.exports).map(service_name).collect();
            let targets = churn_targets(config.members, &services);
            let mut report = run_churn(
                &observed,
                &member_clients,
                &targets,
                churn,
                |m| vec![m],
                || false,
            )
            .await;
            let cpu = cpu_seconds() - c;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let after = scrape(&all_clients, &mut scrape_cpu).await?;
            report.writes = after.writes_since(&after_quiet);
            report.conflicts_409 = after.conflicts_since(&after_quiet);
            (Some(report), cpu, after)
        }
        None => (None, 0.0, after_quiet),
    };
    let cpu_total = cpu_seconds() - cpu0;
    let end_kib = rss_kib();
    let peak_kib = status_kib("VmHWM").unwrap_or(0);
    let end_trimmed_kib = trim_heap().then(rss_kib);
    running.shutdown().await;
    for w in watches {
        w.abort();
    }

    Ok(Report {
        members: config.members,
        exports: config.exports,
        hub_qps: config.hub_limits.qps,
        hub_burst: config.hub_limits.burst,
        kube_qps: config.member_limits.qps,
        kube_burst: config.member_limits.burst,
        event_qps: config.member_limits.event_qps,
        event_burst: config.member_limits.event_burst,
        reconcile_concurrency: config.member_limits.reconcile_concurrency,
        substrate_start_s: substrate_start.as_secs_f64(),
        create_s: create.as_secs_f64(),
        convergence_s: convergence.as_secs_f64(),
        events_done_s: events_done.as_secs_f64(),
        budget_bound_s: budget_bound.as_secs_f64(),
        ideal_bound_s: ideal_bound(config).as_secs_f64(),
        binding_client,
        hub_requests,
        member_requests_max,
        controller_requests: client_requests(&controller_metrics),
        cold_writes: after_cold.writes_since(&before),
        cold_409: after_cold.conflicts_since(&before),
        quiet_s: config.quiet.as_secs_f64(),
        quiet_writes,
        quiet_409,
        churn,
        run_409: end.conflicts_since(&before),
        rss: Rss {
            harness_kib,
            idle_kib,
            with_watches_kib,
            converged_kib,
            end_kib,
            peak_kib,
            binary_idle_kib,
            idle_trimmed_kib,
            end_trimmed_kib,
        },
        cpu: Cpu {
            cold_s: cpu_cold,
            quiet_s: cpu_quiet,
            churn_s: cpu_churn,
            total_s: cpu_total,
            scrape_s: scrape_cpu,
            cold_machine_busy_s: machine1.0 - machine0.0,
            cold_machine_total_s: machine1.1 - machine0.1,
        },
        verbs_seen: end.verbs.iter().cloned().collect(),
    })
}

/// Waits until the controller's member clients have created `expected` Events (answered, any
/// code), or none for 10 s; returns when.
async fn events_created(running: &app::Running, expected: usize, progress: bool) -> Instant {
    let created = || {
        running
            .metrics
            .encode()
            .lines()
            .filter_map(|l| parse_sample(l, "fleetnet_api_requests_total"))
            .filter(|(labels, _)| {
                let has = |k: &str, v: &str| labels.iter().any(|(key, val)| *key == k && val == v);
                has("client", "member") && has("resource", "events") && has("verb", "create")
            })
            .map(|(_, v)| v as usize)
            .sum::<usize>()
    };
    let (mut last, mut last_change) = (created(), Instant::now());
    while last < expected && last_change.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = created();
        if now != last {
            (last, last_change) = (now, Instant::now());
        }
    }
    say(progress, format!("{last}/{expected} Events created"));
    if last < expected {
        last_change
    } else {
        Instant::now()
    }
}

/// A substrate hub and one member per name (quiet), with a client of each.
pub async fn substrate(
    names: &[String],
) -> anyhow::Result<(fleetnet_testenv::Fleet, kube::Client, Vec<kube::Client>)> {
    let fleet = fleetnet_testenv::Fleet::builder()
        .members(names.iter().cloned())
        .fresh()
        .quiet()
        .start()
        .await
        .context("starting the substrate")?;
    let hub = fleet.hub().client().await?;
    let mut members = vec![];
    for m in names {
        members.push(fleet.member(m).client().await?);
    }
    Ok((fleet, hub, members))
}

/// The product's configuration for a run: the bench's budgets, members from `dir`, no leader
/// election, ephemeral ports.
fn app_config(
    config: &Config,
    fleet: &fleetnet_testenv::Fleet,
    dir: &Path,
) -> anyhow::Result<fleetnet_hub::config::Config> {
    let hub = fleet.hub().kubeconfig_path().to_path_buf();
    fleetnet_hub::config::Config::builder(Some(hub), dir)
        .namespace_prefix(fleetnet_testenv::DEFAULT_HUB_NAMESPACE_PREFIX)
        .hub_limits(config.hub_limits.clone())
        .member_limits(config.member_limits.clone())
        .member_sync_timeout(Duration::from_secs(120))
        .records("default", fleetnet_hub::config::DEFAULT_LEADER_ELECTION_ID)
        .instance("fleetnet-bench")
        .bind_addresses("127.0.0.1:0", "127.0.0.1:0")
        // The budget figures count each member's requests by verb and resource.
        .metrics_detail(fleetnet_hub::metrics::MetricsDetail::Member)
        .build()
        .context("the product's configuration")
}

/// Creates namespace [`NAMESPACE`] and `count` Service + ServiceExport pairs, 16 at a time.
/// A Service (port 80) and its ServiceExport, both named `name`, in [`NAMESPACE`].
pub async fn create_pair(client: kube::Client, name: String) -> anyhow::Result<()> {
    Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &service(&name))
        .await
        .with_context(|| format!("create Service {name}"))?;
    Api::<ServiceExport>::namespaced_with(client, NAMESPACE, &ServiceExportVersion::V1Beta1)
        .create(
            &PostParams::default(),
            &ServiceExport::new(NAMESPACE, &name, ServiceExportVersion::V1Beta1),
        )
        .await
        .with_context(|| format!("create ServiceExport {name}"))?;
    Ok(())
}

/// Namespace [`NAMESPACE`] and a pair per name, 16 at a time.
pub async fn create_pairs(
    client: kube::Client,
    names: impl Iterator<Item = String>,
) -> anyhow::Result<()> {
    fleetnet_testenv::ensure_namespace(&client, "member", NAMESPACE).await?;
    futures::stream::iter(names)
        .map(|name| create_pair(client.clone(), name))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![K8sServicePort {
                name: Some("http".into()),
                port: INITIAL_PORT,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
