//! The benchmark behind `fleetnet-bench` (issue #15): a substrate hub + N members with M
//! Service + ServiceExport pairs each, created before the controller starts; the controller run
//! in this process through [`crate::app::start`]; and what it costs, measured from outside it.
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
//! `tests/bench_smoke.rs` runs [`run`] small and asserts the counts.

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

use crate::api::{CONDITION_VALID, InternalServiceExport, ServiceExport, ServiceExportVersion};
use crate::app::{self, AppConfig, Extensions};
use crate::client::Limits;
use crate::fleet::RuntimeConfig;

/// The member namespace every benchmark Service and ServiceExport lives in.
pub const NAMESPACE: &str = "bench";
/// Resources whose writes are the product's (the apiservers also write their own leases).
pub const COUNTED_RESOURCES: [&str; 3] = ["serviceexports", "internalserviceexports", "events"];
/// `verb` label values of writes in `apiserver_request_total` (upper case; server-side apply is
/// `APPLY`, a collection delete `DELETECOLLECTION`).
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];
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
    /// The least time the budgets allow for the requests the controller made until then.
    pub budget_bound_s: f64,
    /// The least time the budgets allow for the requests a cold start needs at minimum: per
    /// member 2 ServiceExport PATCHes + 2 Events per export and 2 LISTs, on the hub 1 ISE POST
    /// per export and 1 LIST per member.
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
}

/// What the churn did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChurnReport {
    pub rate: f64,
    pub duration_s: f64,
    pub changes: u64,
    /// Changes whose port reached the hub's ISE.
    pub reflected: u64,
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
pub fn member_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("m{i:02}")).collect()
}

fn service_name(i: usize) -> String {
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
    let fleet = fleetnet_testenv::Fleet::builder()
        .members(names.clone())
        .quiet()
        .start()
        .await
        .context("starting the substrate")?;
    let substrate_start = begun.elapsed();
    say(
        p,
        format!(
            "substrate up in {substrate_start:.1?}: hub + {} members (separate kube-apiserver processes, one etcd)",
            config.members
        ),
    );
    let hub = fleet.hub().client().await?;
    let mut member_clients = vec![];
    for m in &names {
        member_clients.push(fleet.member(m).client().await?);
    }
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
            .map(|c| create_pairs(c.clone(), config.exports)),
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
        app_config(config, &fleet, &empty_dir),
        Extensions::default(),
    )
    .await
    .context("starting the idle controller")?;
    tokio::time::sleep(config.idle_settle).await;
    let idle_kib = rss_kib();
    let idle_trimmed_kib = trim_heap().then(rss_kib);
    idle.shutdown().await;

    // The harness's eyes: every member's ServiceExports and the hub's ISEs.
    let observed = Observed::new(&names, config.exports);
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
    let t0 = Instant::now();
    let running = app::start(
        app_config(config, &fleet, &fleet.member_kubeconfig_dir()),
        Extensions::default(),
    )
    .await
    .context("starting the controller")?;
    let converged_at = observed
        .wait_converged(t0, config.converge_timeout, p)
        .await?;
    let convergence = converged_at.duration_since(t0);
    let cpu_cold = cpu_seconds() - cpu0;
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
            let mut report = run_churn(&observed, &member_clients, config, churn).await;
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
        },
        verbs_seen: end.verbs.iter().cloned().collect(),
    })
}

fn app_config(config: &Config, fleet: &fleetnet_testenv::Fleet, dir: &Path) -> AppConfig {
    AppConfig {
        hub_kubeconfig: Some(fleet.hub().kubeconfig_path().to_path_buf()),
        hub_limits: config.hub_limits.clone(),
        runtime: RuntimeConfig {
            kubeconfig_dir: dir.to_path_buf(),
            namespace_prefix: fleetnet_testenv::DEFAULT_HUB_NAMESPACE_PREFIX.into(),
            member_limits: config.member_limits.clone(),
            member_sync_timeout: Duration::from_secs(120),
            cleanup_on_remove: false,
            traffic_manager: false,
            rescan_interval: Duration::from_secs(30),
            instance: "fleetnet-bench".into(),
            trust: Default::default(),
        },
        leader_election: None,
        metrics_bind_address: "127.0.0.1:0".into(),
        health_probe_bind_address: "127.0.0.1:0".into(),
    }
}

/// Creates namespace [`NAMESPACE`] and `count` Service + ServiceExport pairs, 16 at a time.
async fn create_pairs(client: kube::Client, count: usize) -> anyhow::Result<()> {
    fleetnet_testenv::ensure_namespace(&client, "member", NAMESPACE).await?;
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let exports: Api<ServiceExport> =
        Api::namespaced_with(client, NAMESPACE, &ServiceExportVersion::V1Beta1);
    futures::stream::iter(0..count)
        .map(|i| {
            let (services, exports) = (services.clone(), exports.clone());
            async move {
                let name = service_name(i);
                services
                    .create(&PostParams::default(), &service(&name))
                    .await
                    .with_context(|| format!("create Service {name}"))?;
                exports
                    .create(
                        &PostParams::default(),
                        &ServiceExport::new(NAMESPACE, &name, ServiceExportVersion::V1Beta1),
                    )
                    .await
                    .with_context(|| format!("create ServiceExport {name}"))?;
                anyhow::Ok(())
            }
        })
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

// ---------------------------------------------------------------------------------------------
// What the harness sees: Valid ServiceExports per member, ISEs (and their port) on the hub.
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct State {
    /// Per member: ServiceExports with `Valid=True`.
    valid: Vec<HashSet<String>>,
    /// Per member: ISE name → its first port.
    ises: Vec<HashMap<String, i32>>,
    valid_total: usize,
    ise_total: usize,
    target: usize,
    converged_at: Option<Instant>,
    /// Watches whose initial list completed.
    listed: usize,
    /// Churn: (member, ISE name) → changes not seen on the hub yet, oldest first.
    pending: HashMap<(usize, String), VecDeque<(i32, Instant)>>,
    latencies: Vec<Duration>,
}

impl State {
    fn check_converged(&mut self) {
        if self.converged_at.is_none()
            && self.valid_total == self.target
            && self.ise_total == self.target
        {
            self.converged_at = Some(Instant::now());
        }
    }

    fn set_valid(&mut self, member: usize, name: String, valid: bool) {
        let set = &mut self.valid[member];
        if valid {
            if set.insert(name) {
                self.valid_total += 1;
            }
        } else if set.remove(&name) {
            self.valid_total -= 1;
        }
        self.check_converged();
    }

    fn set_ise(&mut self, member: usize, name: String, port: Option<i32>, seen: Instant) {
        match port {
            Some(port) => {
                if let Some(queue) = self.pending.get_mut(&(member, name.clone()))
                    && let Some(at) = queue.iter().position(|(p, _)| *p == port)
                {
                    // This change, and any earlier one it superseded, are on the hub now.
                    for (_, sent) in queue.drain(..=at) {
                        self.latencies.push(seen.duration_since(sent));
                    }
                }
                if self.ises[member].insert(name, port).is_none() {
                    self.ise_total += 1;
                }
            }
            None => {
                if self.ises[member].remove(&name).is_some() {
                    self.ise_total -= 1;
                }
            }
        }
        self.check_converged();
    }

    fn pending_changes(&self) -> usize {
        self.pending.values().map(VecDeque::len).sum()
    }
}

#[derive(Clone)]
struct Observed {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

impl Observed {
    fn new(names: &[String], exports: usize) -> Self {
        let state = State {
            valid: vec![HashSet::new(); names.len()],
            ises: vec![HashMap::new(); names.len()],
            target: names.len() * exports,
            ..State::default()
        };
        Self {
            state: Arc::new(Mutex::new(state)),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn_watches(
        &self,
        hub: &kube::Client,
        members: &[kube::Client],
        fleet: &fleetnet_testenv::Fleet,
        names: &[String],
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![];
        let namespaces: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, m)| (fleet.hub_namespace(m), i))
            .collect();
        let ises: Api<InternalServiceExport> = Api::all(hub.clone());
        let me = self.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = watcher(ises, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let seen = Instant::now();
                let Ok(event) = event else { continue };
                let mut state = me.lock();
                match event {
                    watcher::Event::Init => {
                        for m in 0..state.ises.len() {
                            let names: Vec<String> = state.ises[m].keys().cloned().collect();
                            for n in names {
                                state.set_ise(m, n, None, seen);
                            }
                        }
                    }
                    watcher::Event::InitApply(ise) | watcher::Event::Apply(ise) => {
                        let ns = ise.metadata.namespace.clone().unwrap_or_default();
                        if let Some(&m) = namespaces.get(&ns) {
                            let port = ise.spec.ports.first().map_or(0, |p| p.port);
                            let name = ise.metadata.name.clone().unwrap_or_default();
                            state.set_ise(m, name, Some(port), seen);
                        }
                    }
                    watcher::Event::Delete(ise) => {
                        let ns = ise.metadata.namespace.clone().unwrap_or_default();
                        if let Some(&m) = namespaces.get(&ns) {
                            let name = ise.metadata.name.clone().unwrap_or_default();
                            state.set_ise(m, name, None, seen);
                        }
                    }
                    watcher::Event::InitDone => state.listed += 1,
                }
                drop(state);
                me.changed.notify_waiters();
            }
        }));
        for (m, client) in members.iter().enumerate() {
            let exports: Api<ServiceExport> =
                Api::namespaced_with(client.clone(), NAMESPACE, &ServiceExportVersion::V1Beta1);
            let me = self.clone();
            tasks.push(tokio::spawn(async move {
                let mut stream = watcher(exports, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else { continue };
                    let mut state = me.lock();
                    match event {
                        watcher::Event::Init => {
                            let names: Vec<String> = state.valid[m].iter().cloned().collect();
                            for n in names {
                                state.set_valid(m, n, false);
                            }
                        }
                        watcher::Event::InitApply(se) | watcher::Event::Apply(se) => {
                            let valid = se
                                .conditions()
                                .iter()
                                .any(|c| c.type_ == CONDITION_VALID && c.status == "True");
                            let name = se.metadata.name.clone().unwrap_or_default();
                            state.set_valid(m, name, valid);
                        }
                        watcher::Event::Delete(se) => {
                            let name = se.metadata.name.clone().unwrap_or_default();
                            state.set_valid(m, name, false);
                        }
                        watcher::Event::InitDone => state.listed += 1,
                    }
                    drop(state);
                    me.changed.notify_waiters();
                }
            }));
        }
        tasks
    }

    /// Waits until `watches` watches have completed their first list.
    async fn wait_listed(&self, watches: usize) {
        loop {
            let notified = self.changed.notified();
            if self.lock().listed >= watches {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    async fn wait_converged(
        &self,
        t0: Instant,
        limit: Duration,
        progress: bool,
    ) -> anyhow::Result<Instant> {
        let mut next_report = Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.changed.notified();
            let (at, valid, ises, target) = {
                let s = self.lock();
                (s.converged_at, s.valid_total, s.ise_total, s.target)
            };
            if let Some(at) = at {
                return Ok(at);
            }
            if t0.elapsed() > limit {
                anyhow::bail!(
                    "not converged within {limit:?}: {valid}/{target} ServiceExports Valid=True, {ises}/{target} ISEs"
                );
            }
            if Instant::now() >= next_report {
                say(
                    progress,
                    format!(
                        "  {:.0?}: {valid}/{target} Valid=True, {ises}/{target} ISEs",
                        t0.elapsed()
                    ),
                );
                next_report += Duration::from_secs(10);
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Churn.
// ---------------------------------------------------------------------------------------------

async fn run_churn(
    observed: &Observed,
    members: &[kube::Client],
    config: &Config,
    churn: Churn,
) -> ChurnReport {
    let total = (churn.rate * churn.duration.as_secs_f64()).round().max(0.0) as u64;
    let period = Duration::from_secs_f64(1.0 / churn.rate.max(1e-3));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = tokio::time::Instant::now();
    let mut patches = vec![];
    for k in 0..total {
        tokio::time::sleep_until(started + period.mul_f64(k as f64)).await;
        let member = (k % config.members as u64) as usize;
        let export = ((k / config.members as u64) % config.exports as u64) as usize;
        let name = service_name(export);
        let port = CHURN_PORT_BASE + (k % 60_000) as i32;
        let key = (member, crate::export::decide::ise_name(NAMESPACE, &name));
        observed
            .lock()
            .pending
            .entry(key.clone())
            .or_default()
            .push_back((port, Instant::now()));
        let services: Api<Service> = Api::namespaced(members[member].clone(), NAMESPACE);
        let observed = observed.clone();
        let failed = failed.clone();
        patches.push(tokio::spawn(async move {
            let body = serde_json::json!({"spec": {"ports": [
                {"name": "http", "port": port, "protocol": "TCP"}
            ]}});
            if let Err(e) = services
                .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                tracing::warn!(error = %e, service = %name, "churn patch failed");
                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(queue) = observed.lock().pending.get_mut(&key) {
                    queue.retain(|(p, _)| *p != port);
                }
            }
        }));
    }
    futures::future::join_all(patches).await;
    // Every change is given 30 s to reach the hub.
    let drain_until = Instant::now() + Duration::from_secs(30);
    while observed.lock().pending_changes() > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut state = observed.lock();
    let mut latencies_ms: Vec<f64> = state
        .latencies
        .drain(..)
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    latencies_ms.sort_by(f64::total_cmp);
    state.pending.clear();
    ChurnReport {
        rate: churn.rate,
        duration_s: churn.duration.as_secs_f64(),
        changes: total,
        reflected: latencies_ms.len() as u64,
        failed: failed.load(std::sync::atomic::Ordering::Relaxed),
        latencies_ms,
        writes: vec![],
        conflicts_409: 0,
    }
}

// ---------------------------------------------------------------------------------------------
// Server-side counts: `apiserver_request_total` of every apiserver.
// ---------------------------------------------------------------------------------------------

/// `apiserver_request_total` of the counted resources, summed over every apiserver:
/// (resource[/subresource], verb, code) → requests.
#[derive(Debug, Clone, Default)]
pub struct ServerCounts {
    pub requests: BTreeMap<(String, String, String), u64>,
    /// Every `verb` label value seen (any resource).
    pub verbs: BTreeSet<String>,
}

impl ServerCounts {
    /// Parses one apiserver's `/metrics` text and adds it.
    pub fn add_metrics_text(&mut self, text: &str) {
        for line in text.lines() {
            let Some((labels, value)) = parse_sample(line, "apiserver_request_total") else {
                continue;
            };
            let get = |k: &str| {
                labels
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map_or("", |(_, v)| v.as_str())
            };
            let (resource, verb) = (get("resource"), get("verb"));
            if !verb.is_empty() {
                self.verbs.insert(verb.to_string());
            }
            if !COUNTED_RESOURCES.contains(&resource) {
                continue;
            }
            let resource = match get("subresource") {
                "" => resource.to_string(),
                sub => format!("{resource}/{sub}"),
            };
            *self
                .requests
                .entry((resource, verb.to_string(), get("code").to_string()))
                .or_default() += value as u64;
        }
    }

    /// (resource, verb) → (requests, of which 409) since `before`, for the verbs `keep` takes.
    fn since(
        &self,
        before: &Self,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<(String, String), (u64, u64)> {
        let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
        for ((resource, verb, code), n) in &self.requests {
            if !keep(verb) {
                continue;
            }
            let was = before
                .requests
                .get(&(resource.clone(), verb.clone(), code.clone()))
                .copied()
                .unwrap_or(0);
            let d = n.saturating_sub(was);
            if d > 0 {
                let entry = out.entry((resource.clone(), verb.clone())).or_default();
                entry.0 += d;
                if code == "409" {
                    entry.1 += d;
                }
            }
        }
        out
    }

    /// Writes (any response code) since `before`, by resource and verb.
    pub fn writes_since(&self, before: &Self) -> Vec<WriteCount> {
        self.since(before, |verb| WRITE_VERBS.contains(&verb))
            .into_iter()
            .map(|((resource, verb), (count, conflicts))| WriteCount {
                resource,
                verb,
                count,
                conflicts,
            })
            .collect()
    }

    /// 409 responses since `before` (any verb).
    pub fn conflicts_since(&self, before: &Self) -> u64 {
        self.since(before, |_| true).values().map(|(_, c)| c).sum()
    }
}

/// Every apiserver's `/metrics`, read one line at a time (streamed rather than read whole with
/// `request_text`: an apiserver's metrics are megabytes, which would sit in this process's RSS).
async fn scrape(clients: &[kube::Client], cpu: &mut f64) -> anyhow::Result<ServerCounts> {
    use futures::{AsyncBufReadExt, TryStreamExt};
    let c = cpu_seconds();
    let mut counts = ServerCounts::default();
    for client in clients {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let mut lines = client
            .request_stream(req)
            .await
            .context("GET /metrics of an apiserver")?
            .lines();
        while let Some(line) = lines
            .try_next()
            .await
            .context("reading /metrics of an apiserver")?
        {
            if line.starts_with("apiserver_request_total{") {
                counts.add_metrics_text(&line);
            }
        }
    }
    *cpu += cpu_seconds() - c;
    Ok(counts)
}

/// One Prometheus text sample of `name`: its labels (unescaped) and value.
pub fn parse_sample<'a>(line: &'a str, name: &str) -> Option<(Vec<(&'a str, String)>, f64)> {
    let rest = line.strip_prefix(name)?.strip_prefix('{')?;
    let mut labels = vec![];
    let mut i = 0;
    loop {
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix('}') {
            let value = after.split_whitespace().next()?.parse().ok()?;
            return Some((labels, value));
        }
        let eq = tail.find("=\"")?;
        let key = tail[..eq].trim_start_matches(',').trim();
        let mut value = String::new();
        let mut chars = tail[eq + 2..].char_indices();
        let end = loop {
            let (k, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    value.push(if e == 'n' { '\n' } else { e });
                }
                '"' => break eq + 2 + k + 1,
                c => value.push(c),
            }
        };
        labels.push((key, value));
        i += end;
    }
}

/// See [`Report::ideal_bound_s`].
pub fn ideal_bound(config: &Config) -> Duration {
    let (n, m) = (config.members as u64, config.exports as u64);
    let member = &config.member_limits;
    Duration::from_secs_f64(
        bucket_time(2 * m + 2, member.qps, member.burst)
            .max(bucket_time(2 * m, member.event_qps, member.event_burst))
            .max(bucket_time(
                n * m + n,
                config.hub_limits.qps,
                config.hub_limits.burst,
            )),
    )
}

/// The least time a token bucket of `qps` and `burst` needs to let `requests` through.
fn bucket_time(requests: u64, qps: f64, burst: u32) -> f64 {
    requests.saturating_sub(u64::from(burst)) as f64 / qps
}

/// The controller's requests by client, verb, resource and code, summed over members.
fn client_requests(controller_metrics: &str) -> Vec<ClientRequests> {
    let mut sum: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for line in controller_metrics.lines() {
        let Some((labels, value)) = parse_sample(line, "fleetnet_api_requests_total") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .iter()
                .find(|(key, _)| *key == k)
                .map_or(String::new(), |(_, v)| v.clone())
        };
        *sum.entry((get("client"), get("verb"), get("resource"), get("code")))
            .or_default() += value as u64;
    }
    sum.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|((client, verb, resource, code), count)| ClientRequests {
            client,
            verb,
            resource,
            code,
            count,
        })
        .collect()
}

/// The least time the token buckets allow for the requests (watches excluded) the controller's
/// clients made so far: `max((requests - burst) / qps)` over the hub bucket and each member's.
/// Returns (bound, binding bucket, hub requests, busiest member's requests).
fn budget_bound(controller_metrics: &str, config: &Config) -> (Duration, String, u64, u64) {
    let mut hub = 0u64;
    // Per member: (requests through its bucket, Events through its Events bucket).
    let mut members: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in controller_metrics.lines() {
        let Some((labels, value)) = parse_sample(line, "fleetnet_api_requests_total") else {
            continue;
        };
        let get = |k: &str| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| v);
        if get("verb").is_some_and(|v| v == "watch") {
            continue;
        }
        let events = get("resource").is_some_and(|r| r == "events");
        match (get("client").map(String::as_str), get("member")) {
            (Some("hub"), None) => hub += value as u64,
            (Some("member"), Some(m)) => {
                let entry = members.entry(m.clone()).or_default();
                if events {
                    entry.1 += value as u64;
                } else {
                    entry.0 += value as u64;
                }
            }
            _ => {}
        }
    }
    let limits = &config.member_limits;
    let mut best = (
        bucket_time(hub, config.hub_limits.qps, config.hub_limits.burst),
        "hub".to_string(),
    );
    let mut member_max = 0;
    for (m, (requests, events)) in &members {
        member_max = member_max.max(requests + events);
        for (t, which) in [
            (bucket_time(*requests, limits.qps, limits.burst), "member"),
            (
                bucket_time(*events, limits.event_qps, limits.event_burst),
                "Events of member",
            ),
        ] {
            if t > best.0 {
                best = (t, format!("{which} {m}"));
            }
        }
    }
    (Duration::from_secs_f64(best.0), best.1, hub, member_max)
}

// ---------------------------------------------------------------------------------------------
// This process: RSS and CPU.
// ---------------------------------------------------------------------------------------------

/// VmRSS of this process in KiB (0 when unreadable).
pub fn rss_kib() -> u64 {
    status_kib("VmRSS").unwrap_or(0)
}

fn status_kib(field: &str) -> Option<u64> {
    status_kib_of("/proc/self/status", field)
}

fn status_kib_of(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// glibc's `malloc_trim(0)`: returns the heap's free memory to the OS. Only for the diagnostic
/// RSS figures, read after the figures they would otherwise change.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() -> bool {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's malloc_trim takes no pointer and only releases memory that is free.
    unsafe { malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() -> bool {
    false
}

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): state is the first; utime and
    // stime are the 14th and 15th fields of the line.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / CLOCK_TICKS
}

/// Starts `fleetnet-hub run` with no member against the hub and reads its RSS after 3 s.
async fn binary_idle_rss(binary: &Path, fleet: &fleetnet_testenv::Fleet) -> Option<u64> {
    let dir = fleet.scratch_dir().join("bench-binary-no-members");
    std::fs::create_dir_all(&dir).ok()?;
    let port = |_: ()| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.to_string())
            .ok()
    };
    let mut child = tokio::process::Command::new(binary)
        .arg("run")
        .arg("--hub-kubeconfig")
        .arg(fleet.hub().kubeconfig_path())
        .arg("--kubeconfig-dir")
        .arg(&dir)
        .arg("--metrics-bind-address")
        .arg(port(())?)
        .arg("--health-probe-bind-address")
        .arg(port(())?)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| tracing::warn!(error = %e, binary = %binary.display(), "cannot start"))
        .ok()?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = child
        .id()
        .and_then(|pid| status_kib_of(&format!("/proc/{pid}/status"), "VmRSS"));
    let _ = child.kill().await;
    rss
}

// ---------------------------------------------------------------------------------------------
// Output: markdown and SVG.
// ---------------------------------------------------------------------------------------------

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn check(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The run's figures as markdown tables.
pub fn markdown(r: &Report) -> String {
    let fresh = (r.members * r.exports) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### {} members × {} exports\n\nBudgets: hub {} qps / {} burst (shared); each member {} qps / {} burst, its Events {} qps / {} burst; {} reconciles at once per member.\n",
        r.members,
        r.exports,
        r.hub_qps,
        r.hub_burst,
        r.kube_qps,
        r.kube_burst,
        r.event_qps,
        r.event_burst,
        r.reconcile_concurrency
    );
    let _ = writeln!(
        out,
        "Controller in-process (`fleetnet_hub::app::start`); RSS and CPU are this process (controller + \
         benchmark harness); the hub's and members' kube-apiservers and the shared etcd are separate \
         processes, not included. Writes and 409s counted server-side from each apiserver's \
         `apiserver_request_total`.\n"
    );
    let _ = writeln!(out, "| figure | value | target |");
    let _ = writeln!(out, "|---|---|---|");
    let ratio = |bound: f64| {
        if bound > 0.0 {
            r.convergence_s / bound
        } else {
            f64::NAN
        }
    };
    let _ = writeln!(
        out,
        "| cold convergence (controller start → all ISEs + Valid=True) | {:.2} s | |",
        r.convergence_s
    );
    let product = Limits::default();
    let defaults = r.hub_qps == 100.0
        && r.hub_burst == 200
        && r.kube_qps == product.qps
        && r.kube_burst == product.burst
        && r.event_qps == product.event_qps
        && r.event_burst == product.event_burst
        && r.reconcile_concurrency == product.reconcile_concurrency;
    let target = |ratio: f64| {
        if defaults {
            format!("≤ 1.15 (default budgets): {}", check(ratio <= 1.15))
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        out,
        "| token-bucket bound, minimum requests (per member: 2 PATCHes per export + 2 LISTs, 2 Events per export; hub: 1 POST per export + 1 LIST per member) | {:.2} s | |",
        r.ideal_bound_s
    );
    let _ = writeln!(
        out,
        "| convergence ÷ that bound | {:.2} | {} |",
        ratio(r.ideal_bound_s),
        target(ratio(r.ideal_bound_s))
    );
    let _ = writeln!(
        out,
        "| token-bucket bound, requests actually made (hub {} / busiest member {}; binding: {}) | {:.2} s | |",
        r.hub_requests, r.member_requests_max, r.binding_client, r.budget_bound_s
    );
    let _ = writeln!(
        out,
        "| convergence ÷ that bound | {:.2} | |",
        ratio(r.budget_bound_s)
    );
    let writes = total_excluding_events(&r.cold_writes) as f64 / fresh;
    let _ = writeln!(
        out,
        "| writes per fresh export (ServiceExport + ISE, server-side) | {writes:.2} | 3: {} |",
        check((writes - 3.0).abs() < 1e-9)
    );
    let refused: u64 = r
        .cold_writes
        .iter()
        .filter(|w| w.resource != "events")
        .map(|w| w.conflicts)
        .sum();
    if refused > 0 {
        let _ = writeln!(
            out,
            "| of which answered 409 (per fresh export) | {refused} ({:.2}) | |",
            refused as f64 / fresh
        );
    }
    let _ = writeln!(
        out,
        "| events per fresh export | {:.2} | |",
        count_of(&r.cold_writes, "events", None) as f64 / fresh
    );
    let _ = writeln!(
        out,
        "| 409 responses (cold start / whole run) | {} / {} | 0: {} |",
        r.cold_409,
        r.run_409,
        check(r.run_409 == 0)
    );
    if r.quiet_s > 0.0 {
        let quiet: u64 = r.quiet_writes.iter().map(|w| w.count).sum();
        let _ = writeln!(
            out,
            "| writes (incl. events) in {:.0} s quiet after convergence | {quiet} | 0: {} |",
            r.quiet_s,
            check(quiet == 0)
        );
    }
    let per_member = mib(r.rss.per_member_kib(r.members) as u64);
    let _ = writeln!(
        out,
        "| RSS: harness before any controller | {:.1} MiB | |",
        mib(r.rss.harness_kib)
    );
    let _ = writeln!(
        out,
        "| RSS: controller idle, no member (this process, harness included) | {:.1} MiB | {} |",
        mib(r.rss.idle_kib),
        if r.rss.binary_idle_kib.is_some() {
            "(target judged on the binary, below)".to_string()
        } else {
            format!("≤ 15 MiB: {}", check(mib(r.rss.idle_kib) <= 15.0))
        }
    );
    if let Some(kib) = r.rss.binary_idle_kib {
        let _ = writeln!(
            out,
            "| RSS: shipped `fleetnet-hub run` binary idle, no member (own process) | {:.1} MiB | ≤ 15 MiB: {} |",
            mib(kib),
            check(mib(kib) <= 15.0)
        );
    }
    let _ = writeln!(
        out,
        "| RSS: + harness watches, before controller start | {:.1} MiB | |",
        mib(r.rss.with_watches_kib)
    );
    let _ = writeln!(
        out,
        "| RSS: after convergence (total) | {:.1} MiB | |",
        mib(r.rss.converged_kib)
    );
    let _ = writeln!(
        out,
        "| RSS per member ((converged − idle) / members) | {per_member:.2} MiB | {} |",
        if r.exports == 250 {
            format!("≤ 5 MiB at 250 Services: {}", check(per_member <= 5.0))
        } else {
            "(the target is for 250 Services per member)".to_string()
        }
    );
    let _ = writeln!(
        out,
        "| RSS at the end / peak | {:.1} / {:.1} MiB | |",
        mib(r.rss.end_kib),
        mib(r.rss.peak_kib)
    );
    if let (Some(idle), Some(end), Some(live)) = (
        r.rss.idle_trimmed_kib,
        r.rss.end_trimmed_kib,
        r.rss.live_per_member_kib(r.members),
    ) {
        let _ = writeln!(
            out,
            "| diagnostic, after glibc `malloc_trim(0)`: idle / end / per member ((end − idle) / members) | {:.1} / {:.1} / {:.2} MiB | |",
            mib(idle),
            mib(end),
            mib(live as u64)
        );
    }
    let _ = writeln!(
        out,
        "| CPU s: cold start / quiet / churn / whole run (of which /metrics scraping) | {:.2} / {:.2} / {:.2} / {:.2} ({:.2}) | |",
        r.cpu.cold_s, r.cpu.quiet_s, r.cpu.churn_s, r.cpu.total_s, r.cpu.scrape_s
    );
    if let Some(c) = &r.churn {
        let q = |x| c.quantile_ms(x).map_or("-".into(), |v| format!("{v:.0}"));
        let p99 = c.quantile_ms(0.99);
        let _ = writeln!(
            out,
            "| churn: {} changes at {}/s: reflected / failed | {} / {} | |",
            c.changes, c.rate, c.reflected, c.failed
        );
        let _ = writeln!(
            out,
            "| churn latency p50 / p90 / p99 / max (Service PATCH sent → ISE with the port seen) | {} / {} / {} / {} ms | p99 < 100 ms: {} |",
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0),
            check(p99.is_some_and(|v| v < 100.0) && c.reflected == c.changes)
        );
        let per_change =
            c.writes.iter().map(|w| w.count).sum::<u64>() as f64 / c.changes.max(1) as f64;
        let _ = writeln!(
            out,
            "| churn: writes per change (incl. events) / 409s | {per_change:.2} / {} | |",
            c.conflicts_409
        );
    }
    let _ = writeln!(
        out,
        "| substrate start / object creation | {:.1} s / {:.1} s | |",
        r.substrate_start_s, r.create_s
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Cold-start writes by resource and verb (server-side):\n"
    );
    out.push_str(&writes_table(&r.cold_writes, fresh, "per export"));
    if r.quiet_s > 0.0 && !r.quiet_writes.is_empty() {
        let _ = writeln!(out, "\nWrites in the quiet period:\n");
        out.push_str(&writes_table(&r.quiet_writes, fresh, "per export"));
    }
    if let Some(c) = &r.churn
        && !c.writes.is_empty()
    {
        let _ = writeln!(out, "\nWrites during churn:\n");
        out.push_str(&writes_table(
            &c.writes,
            c.changes.max(1) as f64,
            "per change",
        ));
    }
    if !r.controller_requests.is_empty() {
        let _ = writeln!(
            out,
            "\nThe controller's own requests until convergence (its client counters, members summed):\n"
        );
        let _ = writeln!(out, "| client | verb | resource | code | requests |");
        let _ = writeln!(out, "|---|---|---|---|---|");
        for c in &r.controller_requests {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                c.client, c.verb, c.resource, c.code, c.count
            );
        }
    }
    let _ = writeln!(
        out,
        "\n`verb` labels seen in the hub's apiserver_request_total: {}",
        r.verbs_seen.join(", ")
    );
    out
}

fn writes_table(writes: &[WriteCount], per: f64, per_label: &str) -> String {
    let mut out = format!(
        "| resource | verb | writes | of which 409 | {per_label} |\n|---|---|---|---|---|\n"
    );
    for w in writes {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2} |",
            w.resource,
            w.verb,
            w.count,
            w.conflicts,
            w.count as f64 / per
        );
    }
    out
}

/// RSS per member, and the live heap per member when measured.
fn per_member(r: &Report) -> String {
    let mut out = format!("{:.2} MiB", mib(r.rss.per_member_kib(r.members) as u64));
    if let Some(live) = r.rss.live_per_member_kib(r.members) {
        let _ = write!(out, " (live {:.2})", mib(live as u64));
    }
    out
}

/// One line per run.
pub fn summary_markdown(reports: &[Report]) -> String {
    let mut out = String::from(
        "| members × exports | budgets hub / member (qps) | convergence | bound: min requests / made | ratio to min-requests bound | writes/export | events/export | 409s | quiet writes | RSS idle | RSS converged | RSS/member | CPU s (run) | churn p50/p99/max |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let fresh = (r.members * r.exports) as f64;
        let churn = r.churn.as_ref().map_or("-".to_string(), |c| {
            let q = |x| c.quantile_ms(x).map_or("-".into(), |v| format!("{v:.0}"));
            format!("{} / {} / {} ms", q(0.5), q(0.99), q(1.0))
        });
        let quiet = if r.quiet_s > 0.0 {
            format!(
                "{} in {:.0} s",
                r.quiet_writes.iter().map(|w| w.count).sum::<u64>(),
                r.quiet_s
            )
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "| {} × {} | {} / {} | {:.1} s | {:.1} / {:.1} s | {:.2} | {:.2} | {:.2} | {} | {} | {:.1} MiB | {:.1} MiB | {} | {:.1} | {} |",
            r.members,
            r.exports,
            r.hub_qps,
            r.kube_qps,
            r.convergence_s,
            r.ideal_bound_s,
            r.budget_bound_s,
            r.convergence_s / r.ideal_bound_s.max(f64::MIN_POSITIVE),
            total_excluding_events(&r.cold_writes) as f64 / fresh,
            count_of(&r.cold_writes, "events", None) as f64 / fresh,
            r.run_409,
            quiet,
            mib(r.rss.idle_kib),
            mib(r.rss.converged_kib),
            per_member(r),
            r.cpu.total_s,
            churn
        );
    }
    out
}

const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    step: bool,
}

/// A round axis maximum at or above `v`.
fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * magnitude >= v {
            return m * magnitude;
        }
    }
    10.0 * magnitude
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One chart at (`x`, `y`) of `w` × `h` pixels.
fn panel(
    out: &mut String,
    (x, y, w, h): (f64, f64, f64, f64),
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    y_max: Option<f64>,
) {
    let (left, right, top, bottom) = (60.0, 15.0, 30.0, 45.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let (ox, oy) = (x + left, y + top + ph);
    let all = series.iter().flat_map(|s| s.points.iter());
    let xmax = nice_max(all.clone().map(|p| p.0).fold(0.0, f64::max));
    let ymax = y_max.unwrap_or_else(|| nice_max(all.map(|p| p.1).fold(0.0, f64::max)));
    let px = |v: f64| ox + v / xmax * pw;
    let py = |v: f64| oy - v / ymax * ph;
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        x + left,
        y + 18.0,
        escape(title)
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let (gx, gy) = (ox + f * pw, oy - f * ph);
        let _ = writeln!(
            out,
            r##"<line x1="{gx:.1}" y1="{oy:.1}" x2="{gx:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{gx:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            oy - ph,
            oy + 15.0,
            tick(f * xmax)
        );
        let _ = writeln!(
            out,
            r##"<line x1="{ox:.1}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            ox + pw,
            ox - 5.0,
            gy + 4.0,
            tick(f * ymax)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{ox:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#333"/>"##,
        oy - ph
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        ox + pw / 2.0,
        oy + 35.0,
        escape(x_label)
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
        x + 15.0,
        oy - ph / 2.0,
        x + 15.0,
        oy - ph / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        let mut prev: Option<(f64, f64)> = None;
        for &(vx, vy) in &s.points {
            match prev {
                None if s.step => {
                    let _ = write!(
                        d,
                        "M{:.1},{:.1} L{:.1},{:.1} ",
                        px(vx),
                        py(0.0),
                        px(vx),
                        py(vy)
                    );
                }
                None => {
                    let _ = write!(d, "M{:.1},{:.1} ", px(vx), py(vy));
                }
                Some((_, py0)) if s.step => {
                    let _ = write!(
                        d,
                        "L{:.1},{:.1} L{:.1},{:.1} ",
                        px(vx),
                        py(py0),
                        px(vx),
                        py(vy)
                    );
                }
                Some(_) => {
                    let _ = write!(d, "L{:.1},{:.1} ", px(vx), py(vy));
                }
            }
            prev = Some((vx, vy));
        }
        let _ = writeln!(
            out,
            r#"<path d="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            d.trim_end()
        );
        if !s.step {
            for &(vx, vy) in &s.points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#,
                    px(vx),
                    py(vy)
                );
            }
        }
        // A CDF fills the top left: its legend goes to the bottom right.
        let (lx, ly) = if y_max.is_some() {
            let widest = series
                .iter()
                .map(|s| s.label.chars().count())
                .max()
                .unwrap_or(0) as f64;
            (
                ox + pw - 40.0 - 6.0 * widest,
                oy - 12.0 - 16.0 * (series.len() - 1 - i) as f64,
            )
        } else {
            (ox + 10.0, oy - ph + 15.0 + 16.0 * i as f64)
        };
        let _ = writeln!(
            out,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            lx + 20.0,
            lx + 25.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
}

fn tick(v: f64) -> String {
    if v == 0.0 || v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The charts: the churn latency CDF of every run that churned, and, with two or more runs of
/// different member counts, RSS and convergence against members.
pub fn svg(reports: &[Report]) -> String {
    let churned: Vec<&Report> = reports
        .iter()
        .filter(|r| r.churn.as_ref().is_some_and(|c| !c.latencies_ms.is_empty()))
        .collect();
    let sweep = reports
        .iter()
        .map(|r| r.members)
        .collect::<BTreeSet<_>>()
        .len()
        > 1;
    let (w, h) = (460.0, 320.0);
    let panels = usize::from(!churned.is_empty()) + if sweep { 2 } else { 0 };
    let width = w * panels.max(1) as f64;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{h:.0}" viewBox="0 0 {width:.0} {h:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
"#
    );
    let mut x = 0.0;
    if !churned.is_empty() {
        let series: Vec<Series> = churned
            .iter()
            .map(|r| {
                let c = r.churn.as_ref().expect("churned");
                let n = c.latencies_ms.len() as f64;
                Series {
                    label: format!(
                        "{} members, {}/s: p50 {:.0} ms, p99 {:.0} ms",
                        r.members,
                        c.rate,
                        c.quantile_ms(0.5).unwrap_or(0.0),
                        c.quantile_ms(0.99).unwrap_or(0.0)
                    ),
                    points: c
                        .latencies_ms
                        .iter()
                        .enumerate()
                        .map(|(i, &v)| (v, (i + 1) as f64 / n))
                        .collect(),
                    step: true,
                }
            })
            .collect();
        panel(
            &mut out,
            (x, 0.0, w, h),
            "Service change → ISE updated (CDF)",
            "latency (ms)",
            "fraction of changes",
            &series,
            Some(1.0),
        );
        x += w;
    }
    if sweep {
        let mut by_members: Vec<&Report> = reports.iter().collect();
        by_members.sort_by_key(|r| r.members);
        let pts = |f: &dyn Fn(&Report) -> f64| -> Vec<(f64, f64)> {
            by_members
                .iter()
                .map(|r| (r.members as f64, f(r)))
                .collect()
        };
        let exports = by_members.first().map_or(0, |r| r.exports);
        panel(
            &mut out,
            (x, 0.0, w, h),
            &format!("Controller RSS ({exports} exports per member)"),
            "members",
            "MiB",
            &[
                Series {
                    label: "after convergence (with the harness)".into(),
                    points: pts(&|r| mib(r.rss.converged_kib)),
                    step: false,
                },
                Series {
                    label: "idle, no member (with the harness)".into(),
                    points: pts(&|r| mib(r.rss.idle_kib)),
                    step: false,
                },
            ],
            None,
        );
        x += w;
        panel(
            &mut out,
            (x, 0.0, w, h),
            &format!("Cold convergence ({exports} exports per member)"),
            "members",
            "seconds",
            &[
                Series {
                    label: "measured".into(),
                    points: pts(&|r| r.convergence_s),
                    step: false,
                },
                Series {
                    label: "token-bucket bound (minimum requests)".into(),
                    points: pts(&|r| r.ideal_bound_s),
                    step: false,
                },
            ],
            None,
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_apiserver_samples_with_escapes() {
        let line = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="networking.fleet.azure.com",resource="internalserviceexports",scope="resource",subresource="",verb="POST",version="v1alpha1"} 42"#;
        let (labels, value) = parse_sample(line, "apiserver_request_total").expect("parses");
        assert_eq!(value, 42.0);
        assert!(labels.contains(&("verb", "POST".into())));
        assert!(labels.contains(&("subresource", String::new())));
        let (labels, _) = parse_sample(r#"x{a="q\"u,o",b="2"} 1"#, "x").expect("escaped quote");
        assert_eq!(labels, vec![("a", "q\"u,o".into()), ("b", "2".into())]);
        assert!(
            parse_sample(
                "apiserver_request_total_other{a=\"1\"} 1",
                "apiserver_request_total"
            )
            .is_none()
        );
    }

    #[test]
    fn counts_writes_and_conflicts_as_differences() {
        let text = |n: u64, c: u64| {
            format!(
                "apiserver_request_total{{code=\"200\",resource=\"serviceexports\",subresource=\"status\",verb=\"PATCH\"}} {n}\n\
                 apiserver_request_total{{code=\"409\",resource=\"serviceexports\",subresource=\"\",verb=\"PATCH\"}} {c}\n\
                 apiserver_request_total{{code=\"200\",resource=\"serviceexports\",subresource=\"\",verb=\"LIST\"}} 9\n\
                 apiserver_request_total{{code=\"201\",resource=\"leases\",subresource=\"\",verb=\"PUT\"}} {n}\n"
            )
        };
        let mut before = ServerCounts::default();
        before.add_metrics_text(&text(1, 0));
        let mut after = ServerCounts::default();
        after.add_metrics_text(&text(4, 2));
        after.add_metrics_text(&text(1, 0));
        assert_eq!(
            after.writes_since(&before),
            vec![
                WriteCount {
                    resource: "serviceexports".into(),
                    verb: "PATCH".into(),
                    count: 2,
                    conflicts: 2,
                },
                WriteCount {
                    resource: "serviceexports/status".into(),
                    verb: "PATCH".into(),
                    count: 4,
                    conflicts: 0,
                },
            ]
        );
        assert_eq!(after.conflicts_since(&before), 2);
        assert!(after.verbs.contains("LIST"));
    }

    #[test]
    fn bound_is_the_slowest_bucket() {
        let metrics = "fleetnet_api_requests_total{client=\"hub\",verb=\"create\",resource=\"internalserviceexports\",code=\"201\"} 700\n\
                       fleetnet_api_requests_total{client=\"hub\",verb=\"watch\",resource=\"internalserviceexports\",code=\"200\"} 50\n\
                       fleetnet_api_requests_total{client=\"member\",member=\"m01\",verb=\"patch\",resource=\"serviceexports\",code=\"200\"} 430\n";
        let config = Config::default();
        let (bound, which, hub, member) = budget_bound(metrics, &config);
        // hub: (700 - 200) / 100 = 5 s; member: (430 - 30) / 20 = 20 s.
        assert_eq!(bound, Duration::from_secs(20));
        assert_eq!(which, "member m01");
        assert_eq!((hub, member), (700, 430));
        // Events have their own bucket: (325 - 25) / 10 = 30 s.
        let with_events = format!(
            "{metrics}fleetnet_api_requests_total{{client=\"member\",member=\"m01\",verb=\"create\",resource=\"events\",code=\"201\"}} 325\n"
        );
        let (bound, which, _, member) = budget_bound(&with_events, &config);
        assert_eq!(bound, Duration::from_secs(30));
        assert_eq!(which, "Events of member m01");
        assert_eq!(member, 755);
        // Minimum requests of 1 x 50: member (102 - 30) / 20, Events (100 - 25) / 10 = 7.5 s,
        // hub (51 - 200) → 0.
        assert_eq!(ideal_bound(&config), Duration::from_secs_f64(7.5));
    }

    #[test]
    fn quantiles_and_svg() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(nice_max(37.0), 50.0);
        assert_eq!(nice_max(0.8), 1.0);
        let report = Report {
            members: 2,
            exports: 3,
            hub_qps: 100.0,
            hub_burst: 200,
            kube_qps: 20.0,
            kube_burst: 30,
            event_qps: 10.0,
            event_burst: 25,
            reconcile_concurrency: 16,
            substrate_start_s: 1.0,
            create_s: 1.0,
            convergence_s: 2.0,
            budget_bound_s: 1.0,
            ideal_bound_s: 1.0,
            binding_client: "hub".into(),
            hub_requests: 1,
            member_requests_max: 1,
            controller_requests: vec![],
            cold_writes: vec![],
            cold_409: 0,
            quiet_s: 0.0,
            quiet_writes: vec![],
            quiet_409: 0,
            churn: Some(ChurnReport {
                rate: 1.0,
                changes: 3,
                reflected: 3,
                latencies_ms: vec![10.0, 20.0, 30.0],
                ..ChurnReport::default()
            }),
            run_409: 0,
            rss: Rss::default(),
            cpu: Cpu::default(),
            verbs_seen: vec![],
        };
        let mut other = report.clone();
        other.members = 4;
        let text = svg(&[report.clone(), other]);
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert_eq!(
            text.matches("<path").count(),
            2 + 4,
            "two CDFs, four sweep lines"
        );
        assert!(markdown(&report).contains("| 409 responses"));
    }
}
