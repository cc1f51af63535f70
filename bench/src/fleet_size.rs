//! `fleetnet-bench --fleet-size`: what a large fleet costs the shipped binary and the API
//! servers, measured from outside as a user would: R replicas of `fleetnet-hub run` (sharded
//! with `--shard-members` when R ≥ 2) over N member names served by K real member apiservers.
//!
//! **Members.** Member name i (`m01`, `m02`, …) is served by apiserver `i % K`: its own
//! kubeconfig file in the replicas' kubeconfig directory (a copy of its apiserver's: same
//! server, same credentials) and its own hub namespace (`fleet-member-<name>`). The member's
//! watches are cluster-wide, so every name of apiserver k sees every export of k: a name is a
//! cluster of its own only if the exports of its apiserver are all it has. So the exports are
//! per apiserver: E Service + ServiceExport pairs in namespace `bench` of each apiserver, shared
//! by its names; each name exports E Services and the hub gets N × E ISEs (`bench-fs-NNN` in
//! each name's hub namespace, distinct objects as the hub namespaces are distinct). The names
//! of one apiserver also write the same ServiceExports' status and finalizers, all with the
//! same values (a real fleet has one writer per object: the extra no-op writes are an
//! artefact, visible in the member apiservers' counts).
//!
//! **Measured.**
//! - convergence: replicas start → all N × E ISEs on the hub (first-seen times of a metadata
//!   watch on the hub), → every name `ready` on some replica's `GET /members`, and → ownership
//!   settled (every name ready on exactly one replica, no change for 15 s); against the
//!   budget bound of the replica with the largest share (`ceil(N/R)` members: one ISE create
//!   per export and two LISTs per member (ISEs, EndpointSliceExports) through its hub bucket, as
//!   `ideal_bound` computes it);
//! - RSS (`/proc/<pid>/status`) per replica at convergence and after the quiet window, and per
//!   member (sum over replicas / N; and less R times the RSS of the binary running no member,
//!   read before the run: what a member adds);
//! - the cold start's requests, counted by the apiservers as below (replicas start → quiet
//!   window), by resource and verb;
//! - a quiet window after convergence and settled ownership (or, when the members never
//!   settle, 120 s after the ISEs): requests/s the hub and the member apiservers counted
//!   themselves (`apiserver_request_total` deltas, by resource and verb, any resource: Leases
//!   too), next to the same figure of the substrate alone (a baseline window before the
//!   replicas start: the apiservers' own requests); hand-offs (replica stderr lines
//!   `member now owned by another replica`) and CPU seconds per second of each replica;
//! - failover (R ≥ 2): the replica running the most members is killed with SIGKILL, a new
//!   export created at once on the apiserver of one of its members; kill → every shard Lease
//!   it held taken by a survivor; kill → every orphaned name
//!   `ready` on a surviving replica, and kill → the new export's ISE in the hub namespace of
//!   each orphaned name of that apiserver (and, as a control, of its names that kept their
//!   replica);
//! - with `--churn`, after the quiet window: Service port changes at that rate, round-robin over
//!   the apiservers and then their exports; each awaited in the ISE of every name of its
//!   apiserver (so one change is one latency with one name per apiserver, and N / K latencies
//!   and as many hub writes with N / K names per apiserver);
//! - the hub's ISE DELETEs over the whole run (must be 0).
//!
//! Ownership is read from the replicas' `/members` and their logs; the one figure read from
//! Leases is the failover's "every shard Lease the killed replica held is held by a survivor"
//! (Leases labelled `fleetnet.azure.com/lease-of=fleetnet-hub` named `…-shard-N`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fleetnet_bench::{
    Churn, ChurnReport, Config as BenchConfig, NAMESPACE, ServerCounts, WriteCount,
    churn_over_servers, create_pair, create_pairs, ideal_bound, member_names,
    scrape_every_resource,
};
use fleetnet_hub::api::InternalServiceExport;
use fleetnet_hub::client::Limits;
use fleetnet_testenv::Fleet;
use futures::StreamExt as _;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Serialize;

use crate::replicas::{Replica, Sharding, Spec, p50_max, secs};

/// The replica log line of a member leaving a replica because another one owns it now.
pub const HANDOFF: &str = "member now owned by another replica";
/// The export created after the kill.
const PROBE: &str = "fleet-size-probe";
/// The substrate alone, before the replicas start.
const BASELINE: Duration = Duration::from_secs(10);
/// Ownership is settled when every name is ready on exactly one replica and no replica's set
/// of ready names has changed for this long (the replicas spread the members after the start:
/// the quiet window is to show what happens after that).
const SETTLE: Duration = Duration::from_secs(15);
/// After every ISE is on the hub, how long to wait at most for settled ownership before the
/// quiet window starts anyway (members that keep moving between replicas never settle; the
/// quiet window then shows their hand-offs).
const READY_GRACE: Duration = Duration::from_secs(120);
/// Request rates listed in the table, per apiserver kind.
const TOP: usize = 6;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Member names.
    pub members: usize,
    /// Member apiservers serving them.
    pub member_servers: usize,
    /// Service + ServiceExport pairs per member apiserver (so per name).
    pub exports: usize,
    pub replicas: usize,
    pub hub_limits: Limits,
    pub member_limits: Limits,
    /// The replicas' budget flags (`Budgets::to_args`).
    pub budget_args: Vec<String>,
    pub quiet: Duration,
    pub failover: bool,
    pub binary: PathBuf,
    /// Bound on the convergence: all ISEs on the hub.
    pub timeout: Duration,
    /// Bound on the failover; what was not done by then is reported as such.
    pub failover_timeout: Duration,
    /// Service port changes after the quiet window.
    pub churn: Option<Churn>,
}

/// Figures of one run; durations in seconds, memory in KiB.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub members: usize,
    pub member_servers: usize,
    pub exports_per_member: usize,
    pub ises: usize,
    pub replicas: usize,
    pub sharded: bool,
    pub hub_qps: f64,
    pub hub_burst: u32,
    pub kube_qps: f64,
    pub kube_burst: u32,
    /// Substrate start (hub + K apiservers, CRDs).
    pub substrate_s: f64,
    /// Hub namespaces, kubeconfig files, exports.
    pub setup_s: f64,
    /// Replicas start → the last of the N × E ISEs first seen on the hub.
    pub convergence_s: f64,
    /// Replicas start → every name `ready` on a replica's `/members` (polled every 0.5 s);
    /// `None` when not within [`READY_GRACE`] after the ISEs.
    pub members_ready_s: Option<f64>,
    /// The most names seen `ready` (on some replica) at once until the quiet window.
    pub members_ready_max: usize,
    /// Replicas start → the last change of the replicas' ready sets before ownership settled
    /// ([`SETTLE`]); `None` when not within [`READY_GRACE`] after the ISEs.
    pub settled_s: Option<f64>,
    /// See the module doc; 0 when within the burst.
    pub budget_bound_s: f64,
    pub bound_ratio: Option<f64>,
    /// Hand-offs from the start to the quiet window.
    pub handoffs_before_quiet: usize,
    pub handoffs_quiet: usize,
    pub replica: Vec<ReplicaFigures>,
    /// Sum of the replicas' RSS / N.
    pub rss_per_member_converged_kib: f64,
    pub rss_per_member_after_quiet_kib: f64,
    /// The binary running no member (`fleetnet-hub run` on an empty kubeconfig directory,
    /// after 3 s), when it could be read.
    pub replica_idle_kib: Option<u64>,
    /// (Sum of the replicas' RSS after the quiet window - R × idle) / N.
    pub rss_per_member_marginal_kib: Option<f64>,
    /// The substrate alone (no replica).
    pub baseline: Traffic,
    /// Replicas start → the quiet window (the cold start: where its requests went).
    pub cold: Traffic,
    pub quiet: Traffic,
    pub failover: Option<Failover>,
    /// After the quiet window, with `--churn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub churn: Option<ChurnReport>,
    /// The hub's ISE DELETEs from the replicas' start to the end (must be 0).
    pub ise_deletes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicaFigures {
    pub name: String,
    /// Members `ready` on its `/members` at convergence.
    pub members_ready: usize,
    pub rss_converged_kib: u64,
    pub rss_after_quiet_kib: u64,
    /// CPU seconds from its start to convergence.
    pub cpu_to_converged_s: f64,
    /// CPU seconds per second in the quiet window.
    pub cpu_per_s_quiet: f64,
    pub handoffs_quiet: usize,
    /// jemalloc's live objects and the pages it holds, after the quiet window (KiB): what of
    /// the RSS is live heap, and what the allocator keeps beside it (fragmentation, free pages).
    pub allocated_after_quiet_kib: Option<u64>,
    pub resident_after_quiet_kib: Option<u64>,
}

/// Requests the apiservers counted in a window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Traffic {
    pub window_s: f64,
    pub hub_per_s: f64,
    /// All member apiservers together.
    pub members_per_s: f64,
    /// By resource and verb, busiest first.
    pub hub: Vec<Rate>,
    pub members: Vec<Rate>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rate {
    pub resource: String,
    pub verb: String,
    pub count: u64,
    /// Of those, answered 409.
    pub conflicts: u64,
    pub per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    pub killed: String,
    /// Members it ran.
    pub orphaned: usize,
    /// Shard Leases the killed replica held (sharded replicas).
    pub shards_held: usize,
    /// Kill → every one of them held by a surviving replica (None: not within the timeout).
    pub leases_taken_s: Option<f64>,
    /// Kill → ready on a surviving replica, per orphan (that was, within the failover timeout),
    /// sorted.
    pub takeover_s: Vec<f64>,
    /// Every orphan ready elsewhere and every orphan's probe ISE seen within the timeout.
    pub complete: bool,
    pub timeout_s: f64,
    /// The orphan on whose apiserver the probe export was created, and that apiserver.
    pub probe_member: String,
    pub probe_server: String,
    /// Kill → the probe's ISE in the hub namespace of `probe_member`.
    pub probe_ise_s: f64,
    /// The same for every orphan of that apiserver (sorted; those seen within the timeout).
    pub probe_orphans_s: Vec<f64>,
    pub probe_orphans: usize,
    /// The same for the names of that apiserver whose replica lived (seen by the end, sorted).
    pub probe_others_s: Vec<f64>,
    pub probe_others: usize,
}

/// The apiserver (0..k) serving member index `i`.
pub fn server_of(i: usize, k: usize) -> usize {
    i % k.max(1)
}

fn export_name(i: usize) -> String {
    format!("fs-{i:03}")
}

/// Requests per second by resource and verb between two counts, busiest first.
pub fn rates(after: &ServerCounts, before: &ServerCounts, window: Duration) -> Vec<Rate> {
    let secs = window.as_secs_f64().max(1e-9);
    let mut rates: Vec<Rate> = after
        .requests_since(before)
        .into_iter()
        .map(
            |WriteCount {
                 resource,
                 verb,
                 count,
                 conflicts,
             }| Rate {
                resource,
                verb,
                count,
                conflicts,
                per_s: count as f64 / secs,
            },
        )
        .collect();
    rates.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| (&a.resource, &a.verb).cmp(&(&b.resource, &b.verb)))
    });
    rates
}

fn total_per_s(rates: &[Rate]) -> f64 {
    rates.iter().map(|r| r.per_s).sum()
}

/// The least time for the replica with the largest share: `ceil(members / replicas)` members.
pub fn budget_bound(config: &Config) -> Duration {
    ideal_bound(&BenchConfig {
        members: config.members.div_ceil(config.replicas.max(1)),
        exports: config.exports,
        hub_limits: config.hub_limits.clone(),
        member_limits: config.member_limits.clone(),
        ..BenchConfig::default()
    })
}

/// What a metadata watch on every ISE of the hub saw: first-seen times and what is there now.
#[derive(Default)]
struct Seen {
    first: HashMap<(String, String), Instant>,
    present: HashSet<(String, String)>,
    relist: Option<HashSet<(String, String)>>,
    listed: bool,
}

impl Seen {
    fn apply(&mut self, event: watcher::Event<PartialObjectMeta<InternalServiceExport>>) {
        let key = |m: &PartialObjectMeta<InternalServiceExport>| {
            (
                m.metadata.namespace.clone().unwrap_or_default(),
                m.metadata.name.clone().unwrap_or_default(),
            )
        };
        let now = Instant::now();
        match event {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(m) => {
                let k = key(&m);
                self.first.entry(k.clone()).or_insert(now);
                self.relist.get_or_insert_default().insert(k);
            }
            watcher::Event::InitDone => {
                self.present = self.relist.take().unwrap_or_default();
                self.listed = true;
            }
            watcher::Event::Apply(m) => {
                let k = key(&m);
                self.first.entry(k.clone()).or_insert(now);
                self.present.insert(k);
            }
            watcher::Event::Delete(m) => {
                self.present.remove(&key(&m));
            }
        }
    }

    /// The last first-seen time of `keys`, when all are present.
    fn all_present(&self, keys: &[(String, String)]) -> Option<Instant> {
        keys.iter()
            .map(|k| {
                self.present
                    .contains(k)
                    .then(|| self.first.get(k).copied())?
            })
            .try_fold(None::<Instant>, |latest, t| Some(latest.max(Some(t?))))
            .flatten()
    }
}

/// A task aborted when this drops.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn watch_ises(hub: &kube::Client) -> (Arc<Mutex<Seen>>, AbortOnDrop) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let api: Api<PartialObjectMeta<InternalServiceExport>> = Api::all(hub.clone());
    let s = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => s.lock().unwrap_or_else(|p| p.into_inner()).apply(e),
                Err(e) => eprintln!("[fleet-size] ISE watch: {e}"),
            }
        }
    });
    (seen, AbortOnDrop(task))
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts and process figures at one moment.
struct Snapshot {
    at: Instant,
    hub: ServerCounts,
    members: ServerCounts,
    cpu: Vec<f64>,
    rss: Vec<u64>,
    handoffs: Vec<usize>,
    /// Per replica: its allocator's (allocated, resident) bytes, when it reports them.
    allocator: Vec<(Option<u64>, Option<u64>)>,
}

async fn snapshot(
    hub: &kube::Client,
    servers: &[kube::Client],
    replicas: &[Replica],
) -> anyhow::Result<Snapshot> {
    let at = Instant::now();
    let cpu = replicas.iter().map(Replica::cpu_seconds).collect();
    let rss = replicas.iter().map(Replica::rss_kib).collect();
    let handoffs = replicas.iter().map(|r| r.log_lines_with(HANDOFF)).collect();
    let mut allocator = Vec::new();
    for r in replicas {
        let text = r.scrape().await.unwrap_or_default();
        allocator.push((
            crate::soak::gauge(&text, crate::soak::ALLOCATED),
            crate::soak::gauge(&text, crate::soak::RESIDENT),
        ));
    }
    Ok(Snapshot {
        at,
        hub: scrape_every_resource(std::slice::from_ref(hub)).await?,
        members: scrape_every_resource(servers).await?,
        cpu,
        rss,
        handoffs,
        allocator,
    })
}

fn traffic(before: &Snapshot, after: &Snapshot) -> Traffic {
    let window = after.at.duration_since(before.at);
    let hub = rates(&after.hub, &before.hub, window);
    let members = rates(&after.members, &before.members, window);
    Traffic {
        window_s: window.as_secs_f64(),
        hub_per_s: total_per_s(&hub),
        members_per_s: total_per_s(&members),
        hub,
        members,
    }
}

fn say(line: impl AsRef<str>) {
    eprintln!("[fleet-size] {}", line.as_ref());
}

/// Member name → phase, `ready` ones only, over `replicas`; a replica not answering yet counts
/// as running nothing.
async fn ready_by_replica(replicas: &[Replica]) -> Vec<HashSet<String>> {
    let answers = futures::future::join_all(replicas.iter().map(Replica::members)).await;
    answers
        .into_iter()
        .map(|a| {
            a.unwrap_or_default()
                .into_iter()
                .filter(|(_, phase)| phase == "ready")
                .map(|(name, _)| name)
                .collect()
        })
        .collect()
}

/// Runs the fleet-size benchmark once.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    ensure!(
        config.members > 0 && config.exports > 0 && config.replicas > 0,
        "--fleet-size needs --members, --exports and --replicas above 0"
    );
    ensure!(
        (1..=config.members).contains(&config.member_servers),
        "--member-servers must be between 1 and --members"
    );
    let begun = Instant::now();
    let servers: Vec<String> = (0..config.member_servers)
        .map(|k| format!("apiserver-{k:02}"))
        .collect();
    let (fleet, hub, server_clients) = fleetnet_bench::substrate(&servers).await?;
    let substrate_s = begun.elapsed();
    say(format!(
        "substrate up in {substrate_s:.1?}: hub + {} member apiservers",
        servers.len()
    ));

    let setup = Instant::now();
    let names = member_names(config.members);
    let kubeconfig_dir = prepare_members(&fleet, &hub, &names, &servers).await?;
    futures::future::try_join_all(
        server_clients
            .iter()
            .map(|c| create_pairs(c.clone(), (0..config.exports).map(export_name))),
    )
    .await?;
    let setup_s = setup.elapsed();
    say(format!(
        "{} names ({} kubeconfigs, hub namespaces), {} exports on each of {} apiservers, in {setup_s:.1?}",
        names.len(),
        kubeconfig_dir.display(),
        config.exports,
        servers.len()
    ));
    let expected: Vec<(String, String)> = names
        .iter()
        .flat_map(|n| {
            let ns = fleet.hub_namespace(n);
            (0..config.exports)
                .map(move |i| (ns.clone(), format!("{NAMESPACE}-{}", export_name(i))))
        })
        .collect();

    let replica_idle_kib = fleetnet_bench::binary_idle_rss(&config.binary, &fleet).await;
    say(format!(
        "the binary running no member: RSS {}",
        replica_idle_kib.map_or("unknown".into(), |k| mib(k as f64))
    ));

    let (seen, _watch) = watch_ises(&hub);
    let listed = Instant::now();
    while !lock(&seen).listed {
        ensure!(
            listed.elapsed() < Duration::from_secs(60),
            "the ISE watch did not list within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    say(format!("baseline: the substrate alone for {BASELINE:?}"));
    let base0 = snapshot(&hub, &server_clients, &[]).await?;
    tokio::time::sleep(BASELINE).await;
    let base1 = snapshot(&hub, &server_clients, &[]).await?;
    let baseline = traffic(&base0, &base1);

    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir,
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: (config.replicas > 1).then(|| Sharding {
            lease_namespace: "default".into(),
            lease_prefix: "fleetnet-hub".into(),
        }),
        args: config.budget_args.clone(),
        rust_log: "warn,fleetnet_hub::fleet=info".into(),
    };
    let started = Instant::now();
    let mut replicas = vec![];
    for i in 0..config.replicas {
        replicas.push(spec.start(&format!("replica-{i}"))?);
    }
    say(format!(
        "{} replicas of {} started{}; logs in {}",
        replicas.len(),
        config.binary.display(),
        if spec.shard.is_some() {
            " (--shard-members)"
        } else {
            ""
        },
        spec.log_dir.display()
    ));

    // Convergence.
    let deadline = started + config.timeout;
    let mut ises_at = None;
    let mut ready_at = None;
    let mut ready_sets = vec![];
    let mut ready_max = 0;
    let mut changed_at = Instant::now();
    let mut settled_at = None;
    let mut last_say = Instant::now();
    loop {
        for r in &mut replicas {
            r.check_alive()?;
        }
        if ises_at.is_none() {
            ises_at = lock(&seen).all_present(&expected);
        }
        let now_sets = ready_by_replica(&replicas).await;
        if now_sets != ready_sets {
            changed_at = Instant::now();
            ready_sets = now_sets;
        }
        let ready: HashSet<&String> = ready_sets.iter().flatten().collect();
        ready_max = ready_max.max(ready.len());
        if ready_at.is_none() && ready.len() == names.len() {
            ready_at = Some(Instant::now());
        }
        if owned_once(&ready_sets, names.len()) && changed_at.elapsed() >= SETTLE {
            settled_at = Some(changed_at);
        }
        match (ises_at, settled_at) {
            (Some(_), Some(_)) => break,
            (Some(all), None) if all.elapsed() > READY_GRACE || Instant::now() > deadline => {
                say(format!(
                    "every ISE on the hub but the members not settled on the replicas {READY_GRACE:?} later (at most {ready_max}/{} ready at once): the quiet window starts anyway",
                    names.len()
                ));
                break;
            }
            _ => {}
        }
        if last_say.elapsed() > Duration::from_secs(10) || Instant::now() > deadline {
            let present = {
                let s = lock(&seen);
                expected.iter().filter(|k| s.present.contains(*k)).count()
            };
            let ready: HashSet<&String> = ready_sets.iter().flatten().collect();
            let line = format!(
                "{:.0?}: {present}/{} ISEs, {}/{} names ready (per replica {:?})",
                started.elapsed(),
                expected.len(),
                ready.len(),
                names.len(),
                ready_sets.iter().map(HashSet::len).collect::<Vec<_>>()
            );
            if Instant::now() > deadline {
                bail!("not converged after {:?}: {line}", config.timeout);
            }
            say(line);
            last_say = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let convergence = ises_at.unwrap_or(started).duration_since(started);
    let members_ready = ready_at.map(|t| t.duration_since(started));
    let settled = settled_at.map(|t| t.duration_since(started));
    let bound = budget_bound(config);
    say(format!(
        "converged: all {} ISEs after {convergence:.1?} (bound {bound:.1?}), every name ready after {members_ready:.1?}, settled after {settled:.1?}",
        expected.len()
    ));

    // The quiet window.
    say(format!("quiet window: {:?}", config.quiet));
    let q0 = snapshot(&hub, &server_clients, &replicas).await?;
    tokio::time::sleep(config.quiet).await;
    for r in &mut replicas {
        r.check_alive()?;
    }
    let q1 = snapshot(&hub, &server_clients, &replicas).await?;
    let quiet = traffic(&q0, &q1);
    let cold = traffic(&base1, &q0);
    let window = q1.at.duration_since(q0.at).as_secs_f64().max(1e-9);
    let replica_figures: Vec<ReplicaFigures> = replicas
        .iter()
        .enumerate()
        .map(|(i, r)| ReplicaFigures {
            name: r.name.clone(),
            members_ready: ready_sets.get(i).map_or(0, HashSet::len),
            rss_converged_kib: q0.rss[i],
            rss_after_quiet_kib: q1.rss[i],
            cpu_to_converged_s: q0.cpu[i],
            cpu_per_s_quiet: (q1.cpu[i] - q0.cpu[i]) / window,
            handoffs_quiet: q1.handoffs[i].saturating_sub(q0.handoffs[i]),
            allocated_after_quiet_kib: q1.allocator[i].0.map(|b| b / 1024),
            resident_after_quiet_kib: q1.allocator[i].1.map(|b| b / 1024),
        })
        .collect();
    let per_member = |rss: &[u64]| rss.iter().sum::<u64>() as f64 / names.len() as f64;

    let churn = match config.churn {
        Some(churn) => {
            say(format!(
                "churn: {} Service port changes/s for {:?}",
                churn.rate, churn.duration
            ));
            let k = config.member_servers;
            let names_of: Vec<Vec<usize>> = (0..k)
                .map(|server| {
                    (0..names.len())
                        .filter(|&i| server_of(i, k) == server)
                        .collect()
                })
                .collect();
            let services: Vec<String> = (0..config.exports).map(export_name).collect();
            let report = churn_over_servers(
                &hub,
                &fleet,
                &server_clients,
                &names,
                &names_of,
                &services,
                churn,
            )
            .await?;
            say(format!(
                "churn: {} changes, {} of {} (change, name) latencies seen, p50 / p99 {:?} / {:?} ms",
                report.changes,
                report.reflected,
                report.awaited,
                report.quantile_ms(0.5),
                report.quantile_ms(0.99)
            ));
            Some(report)
        }
        None => None,
    };

    let failover = if config.failover && replicas.len() > 1 {
        Some(
            failover(
                config,
                &fleet,
                &seen,
                &mut replicas,
                &names,
                &server_clients,
                &servers,
            )
            .await?,
        )
    } else {
        None
    };

    let end = scrape_every_resource(std::slice::from_ref(&hub)).await?;
    let ise_deletes = end
        .requests_since(&base1.hub)
        .iter()
        .filter(|w| w.resource == "internalserviceexports" && w.verb == "DELETE")
        .map(|w| w.count)
        .sum();
    drop(replicas);

    Ok(Report {
        members: config.members,
        member_servers: config.member_servers,
        exports_per_member: config.exports,
        ises: expected.len(),
        replicas: config.replicas,
        sharded: spec.shard.is_some(),
        hub_qps: config.hub_limits.qps,
        hub_burst: config.hub_limits.burst,
        kube_qps: config.member_limits.qps,
        kube_burst: config.member_limits.burst,
        substrate_s: substrate_s.as_secs_f64(),
        setup_s: setup_s.as_secs_f64(),
        convergence_s: convergence.as_secs_f64(),
        members_ready_s: members_ready.as_ref().map(Duration::as_secs_f64),
        members_ready_max: ready_max,
        settled_s: settled.as_ref().map(Duration::as_secs_f64),
        budget_bound_s: bound.as_secs_f64(),
        bound_ratio: (!bound.is_zero()).then(|| convergence.as_secs_f64() / bound.as_secs_f64()),
        handoffs_before_quiet: q0.handoffs.iter().sum(),
        handoffs_quiet: replica_figures.iter().map(|r| r.handoffs_quiet).sum(),
        rss_per_member_converged_kib: per_member(&q0.rss),
        rss_per_member_after_quiet_kib: per_member(&q1.rss),
        replica_idle_kib,
        rss_per_member_marginal_kib: replica_idle_kib
            .map(|idle| marginal_per_member(&q1.rss, idle, names.len())),
        replica: replica_figures,
        baseline,
        cold,
        quiet,
        failover,
        churn,
        ise_deletes,
    })
}

/// One kubeconfig file (a copy of its apiserver's) and one hub namespace per name; returns the
/// kubeconfig directory.
async fn prepare_members(
    fleet: &Fleet,
    hub: &kube::Client,
    names: &[String],
    servers: &[String],
) -> anyhow::Result<PathBuf> {
    let dir = fleet.scratch_dir().join("fleet-size-kubeconfigs");
    std::fs::create_dir_all(&dir)?;
    for (i, name) in names.iter().enumerate() {
        let server = fleet.member(&servers[server_of(i, servers.len())]);
        let to = dir.join(format!("{name}.yaml"));
        std::fs::copy(server.kubeconfig_path(), &to)
            .with_context(|| format!("copy to {}", to.display()))?;
    }
    futures::stream::iter(names.iter().map(|n| fleet.hub_namespace(n)))
        .map(|ns| async move { fleetnet_testenv::ensure_namespace(hub, "hub", &ns).await })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    Ok(dir)
}

/// Kills the replica running the most members, creates the probe export on the apiserver of
/// one of its members, and waits for the orphans to be ready elsewhere and for the probe's
/// ISEs.
async fn failover(
    config: &Config,
    fleet: &Fleet,
    seen: &Mutex<Seen>,
    replicas: &mut Vec<Replica>,
    names: &[String],
    server_clients: &[kube::Client],
    servers: &[String],
) -> anyhow::Result<Failover> {
    let running = futures::future::try_join_all(replicas.iter().map(Replica::members)).await?;
    let victim = (0..replicas.len())
        .max_by_key(|i| running[*i].len())
        .unwrap_or(0);
    let index: HashMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let mut orphans: Vec<String> = running[victim].keys().cloned().collect();
    orphans.sort_by_key(|n| index.get(n).copied().unwrap_or(usize::MAX));
    let first = orphans
        .first()
        .cloned()
        .context("the busiest replica runs no member")?;
    let k = server_of(index[&first], servers.len());
    let killed_replica = replicas.remove(victim);
    let killed_name = killed_replica.name.clone();
    let hub = fleet.hub().client().await?;
    let held = shard_holders(&hub).await?;
    let its_own = |holder: &str| holder.starts_with(&format!("{killed_name}_"));
    let shards_held: Vec<String> = held
        .iter()
        .filter(|(_, h)| its_own(h))
        .map(|(s, _)| s.clone())
        .collect();
    let killed = Instant::now();
    killed_replica.kill().await?;
    create_pair(server_clients[k].clone(), PROBE.to_string()).await?;
    say(format!(
        "killed {killed_name} running {} members; probe export {PROBE} created on {} (serving {first})",
        orphans.len(),
        servers[k]
    ));
    let probe_ise = format!("{NAMESPACE}-{PROBE}");
    let key = |n: &str| (fleet.hub_namespace(n), probe_ise.clone());
    let on_k: Vec<&String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| server_of(*i, servers.len()) == k)
        .map(|(_, n)| n)
        .collect();
    let orphan_set: HashSet<&String> = orphans.iter().collect();
    let (probe_orphans, probe_others): (Vec<&String>, Vec<&String>) =
        on_k.into_iter().partition(|n| orphan_set.contains(n));

    let mut taken: BTreeMap<String, Duration> = BTreeMap::new();
    let mut leases_taken: Option<Duration> = None;
    let complete = loop {
        for r in replicas.iter_mut() {
            r.check_alive()?;
        }
        if leases_taken.is_none() {
            let now = shard_holders(&hub).await?;
            let all = shards_held
                .iter()
                .all(|s| now.get(s).is_some_and(|h| !h.is_empty() && !its_own(h)));
            if all {
                leases_taken = Some(killed.elapsed());
            }
        }
        let ready = ready_by_replica(replicas).await;
        let elapsed = killed.elapsed();
        for o in &orphans {
            if !taken.contains_key(o) && ready.iter().any(|set| set.contains(o)) {
                taken.insert(o.clone(), elapsed);
            }
        }
        let exported = {
            let s = lock(seen);
            probe_orphans
                .iter()
                .filter(|n| s.present.contains(&key(n.as_str())))
                .count()
        };
        if taken.len() == orphans.len() && exported == probe_orphans.len() && leases_taken.is_some()
        {
            break true;
        }
        if elapsed > config.failover_timeout {
            say(format!(
                "failover incomplete after {:?}: {}/{} orphans ready elsewhere, probe ISE for {exported}/{} orphans",
                config.failover_timeout,
                taken.len(),
                orphans.len(),
                probe_orphans.len()
            ));
            break false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // The control group had its owner all along: a moment more for the last of them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let since_kill = |names: &[&String]| -> Vec<f64> {
        let s = lock(seen);
        let mut v: Vec<f64> = names
            .iter()
            .filter_map(|n| s.first.get(&key(n.as_str())))
            .map(|t| t.saturating_duration_since(killed).as_secs_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let probe_ise_s = since_kill(&[&first]).first().copied().unwrap_or(f64::NAN);
    let mut takeover_s: Vec<f64> = taken.values().map(Duration::as_secs_f64).collect();
    takeover_s.sort_by(f64::total_cmp);
    Ok(Failover {
        killed: killed_name,
        orphaned: orphans.len(),
        shards_held: shards_held.len(),
        leases_taken_s: leases_taken.map(|d| d.as_secs_f64()),
        takeover_s,
        complete,
        timeout_s: config.failover_timeout.as_secs_f64(),
        probe_member: first,
        probe_server: servers[k].clone(),
        probe_ise_s,
        probe_orphans_s: since_kill(&probe_orphans),
        probe_orphans: probe_orphans.len(),
        probe_others_s: since_kill(&probe_others),
        probe_others: probe_others.len(),
    })
}

/// Shard Lease name → its holder (empty when released), of the replicas' Leases.
async fn shard_holders(hub: &kube::Client) -> anyhow::Result<BTreeMap<String, String>> {
    use fleetnet_hub::ownership::shard::LEASE_LABEL;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(hub.clone(), "default");
    let selector = format!("{LEASE_LABEL}=fleetnet-hub");
    let listed = leases
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name?;
            name.contains("-shard-").then(|| {
                let holder = l.spec.and_then(|s| s.holder_identity);
                (name, holder.unwrap_or_default())
            })
        })
        .collect())
}

/// Every one of `members` names is in exactly one of the sets.
pub fn owned_once(sets: &[HashSet<String>], members: usize) -> bool {
    let union: HashSet<&String> = sets.iter().flatten().collect();
    union.len() == members && sets.iter().map(HashSet::len).sum::<usize>() == members
}

/// (Σ rss − replicas × idle) / members: what the members add to the replicas.
pub fn marginal_per_member(rss: &[u64], idle: u64, members: usize) -> f64 {
    let total = rss.iter().sum::<u64>() as f64;
    (total - (idle as f64) * rss.len() as f64) / members.max(1) as f64
}

fn durations(secs: &[f64]) -> Vec<Duration> {
    secs.iter().map(|s| Duration::from_secs_f64(*s)).collect()
}

/// A latency in milliseconds, or `-` when there is none.
pub fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} ms"))
}

fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

/// The report as markdown tables.
pub fn markdown(r: &Report) -> String {
    let mut out = format!(
        "### Fleet size: {members} member names on {servers} apiservers, {exports} exports each ({ises} ISEs), {replicas} replica{s}{sharded}\n\n\
         | figure | value |\n|---|---|\n\
         | substrate up (hub + {servers} apiservers); setup (namespaces, kubeconfigs, exports) | {substrate} ; {setup} |\n\
         | replicas start → all {ises} ISEs on the hub | {convergence} |\n\
         | replicas start → every name ready on a replica (`/members`) | {ready} |\n\
         | replicas start → ownership settled (each name ready on exactly one replica; last change before {settle} without one) | {settled} |\n\
         | budget bound ({share} members × ({exports} + 2) hub requests, {qps} qps / {burst} burst per replica) ; ratio | {bound} ; {ratio} |\n\
         | RSS per member (Σ replicas / {members}): at convergence / after the quiet window | {rss0} / {rss1} |\n\
         | RSS per member less the replicas' own ((Σ − {replicas} × {idle} idle) / {members}), after the quiet window | {marginal} |\n\
         | quiet window | {window} |\n\
         | hub requests/s in the quiet window (substrate alone) | {hub:.1} ({hub0:.1}) |\n\
         | member apiserver requests/s, all {servers} (substrate alone) | {mem:.1} ({mem0:.1}) |\n\
         | hand-offs in the quiet window (before it) | {handoffs} ({handoffs0}) |\n\
         | ISE DELETEs on the hub, whole run | {deletes} |\n",
        members = r.members,
        servers = r.member_servers,
        exports = r.exports_per_member,
        ises = r.ises,
        replicas = r.replicas,
        s = if r.replicas == 1 { "" } else { "s" },
        sharded = if r.sharded { " (--shard-members)" } else { "" },
        substrate = secs(Duration::from_secs_f64(r.substrate_s)),
        setup = secs(Duration::from_secs_f64(r.setup_s)),
        convergence = secs(Duration::from_secs_f64(r.convergence_s)),
        ready = match r.members_ready_s {
            Some(t) => secs(Duration::from_secs_f64(t)),
            None => format!(
                "not within {} of the ISEs (at most {}/{} at once)",
                secs(READY_GRACE),
                r.members_ready_max,
                r.members
            ),
        },
        settle = secs(SETTLE),
        settled = match r.settled_s {
            Some(t) => secs(Duration::from_secs_f64(t)),
            None => format!("not within {} of the ISEs", secs(READY_GRACE)),
        },
        share = r.members.div_ceil(r.replicas.max(1)),
        qps = r.hub_qps,
        burst = r.hub_burst,
        bound = secs(Duration::from_secs_f64(r.budget_bound_s)),
        ratio = r
            .bound_ratio
            .map_or("- (within the burst)".into(), |x| format!("{x:.2}")),
        rss0 = mib(r.rss_per_member_converged_kib),
        rss1 = mib(r.rss_per_member_after_quiet_kib),
        idle = r.replica_idle_kib.map_or("?".into(), |k| mib(k as f64)),
        marginal = r.rss_per_member_marginal_kib.map_or("-".into(), mib),
        window = secs(Duration::from_secs_f64(r.quiet.window_s)),
        hub = r.quiet.hub_per_s,
        hub0 = r.baseline.hub_per_s,
        mem = r.quiet.members_per_s,
        mem0 = r.baseline.members_per_s,
        handoffs = r.handoffs_quiet,
        handoffs0 = r.handoffs_before_quiet,
        deletes = if r.ise_deletes == 0 {
            "0 ✓".to_string()
        } else {
            format!("{} ✗", r.ise_deletes)
        },
    );
    if let Some(c) = &r.churn {
        out += &format!(
            "| churn after the quiet window: {rate} Service changes/s for {duration}, each awaited in the ISE of every name of its apiserver: p50 / p99 / max ({seen} of {awaited} seen) | {p50} / {p99} / {max} |\n",
            rate = c.rate,
            duration = secs(Duration::from_secs_f64(c.duration_s)),
            seen = c.reflected,
            awaited = c.awaited,
            p50 = ms(c.quantile_ms(0.5)),
            p99 = ms(c.quantile_ms(0.99)),
            max = ms(c.quantile_ms(1.0)),
        );
    }
    if let Some(f) = &r.failover {
        out += &format!(
            "| failover: kill -9 of {killed}, running {orphaned} members | |\n\
             | kill → every shard Lease it held ({shards}) held by a survivor | {leases} |\n\
             | kill → every orphan ready on a surviving replica, p50 / max (orphans ready elsewhere{within}) | {takeover} ({taken}/{orphaned}) |\n\
             | kill → probe export's ISE for {member} (on {server}) | {probe} |\n\
             | kill → probe ISE for the {n} orphans of {server}, p50 / max (seen) | {orphans} ({seen}/{n}) |\n\
             | kill → probe ISE for the {others} names of {server} that kept their replica, p50 / max | {control} |\n",
            killed = f.killed,
            orphaned = f.orphaned,
            shards = f.shards_held,
            leases = match f.leases_taken_s {
                Some(s) => secs(Duration::from_secs_f64(s)),
                None => "not within the timeout".to_string(),
            },
            takeover = p50_max(&durations(&f.takeover_s)),
            taken = f.takeover_s.len(),
            within = if f.complete {
                String::new()
            } else {
                format!(
                    " within {}: INCOMPLETE",
                    secs(Duration::from_secs_f64(f.timeout_s))
                )
            },
            seen = f.probe_orphans_s.len(),
            member = f.probe_member,
            server = f.probe_server,
            probe = if f.probe_ise_s.is_nan() {
                "not seen".to_string()
            } else {
                secs(Duration::from_secs_f64(f.probe_ise_s))
            },
            n = f.probe_orphans,
            orphans = p50_max(&durations(&f.probe_orphans_s)),
            others = f.probe_others,
            control = p50_max(&durations(&f.probe_others_s)),
        );
    }
    out += "\n| replica | members ready at convergence | RSS at convergence | RSS after quiet | allocator after quiet: live / held | CPU s start → convergence | CPU s/s in quiet | hand-offs in quiet |\n|---|---|---|---|---|---|---|---|\n";
    for p in &r.replica {
        let kib = |k: Option<u64>| k.map_or("?".into(), |k| mib(k as f64));
        out += &format!(
            "| {} | {} | {} | {} | {} / {} | {:.1} | {:.3} | {} |\n",
            p.name,
            p.members_ready,
            mib(p.rss_converged_kib as f64),
            mib(p.rss_after_quiet_kib as f64),
            kib(p.allocated_after_quiet_kib),
            kib(p.resident_after_quiet_kib),
            p.cpu_to_converged_s,
            p.cpu_per_s_quiet,
            p.handoffs_quiet
        );
    }
    out += "\n| apiserver | resource | verb | requests/s in the quiet window | substrate alone |\n|---|---|---|---|---|\n";
    for (kind, quiet, base) in [
        ("hub", &r.quiet.hub, &r.baseline.hub),
        ("members (all)", &r.quiet.members, &r.baseline.members),
    ] {
        for q in quiet.iter().take(TOP) {
            let b = base
                .iter()
                .find(|b| b.resource == q.resource && b.verb == q.verb)
                .map_or(0.0, |b| b.per_s);
            out += &format!(
                "| {kind} | {} | {} | {:.2} | {:.2} |\n",
                q.resource, q.verb, q.per_s, b
            );
        }
    }
    out += &format!(
        "\n| apiserver | resource | verb | requests in the cold start (replicas start → quiet window, {}) | of which 409 |\n|---|---|---|---|---|\n",
        secs(Duration::from_secs_f64(r.cold.window_s))
    );
    for (kind, cold) in [("hub", &r.cold.hub), ("members (all)", &r.cold.members)] {
        for c in cold.iter().take(TOP) {
            out += &format!(
                "| {kind} | {} | {} | {} | {} |\n",
                c.resource, c.verb, c.count, c.conflicts
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spread_round_robin() {
        let servers: Vec<usize> = (0..7).map(|i| server_of(i, 3)).collect();
        assert_eq!(servers, vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(server_of(5, 1), 0);
        assert_eq!(server_of(5, 0), 0);
    }

    #[test]
    fn rates_are_deltas_over_the_window_busiest_first() {
        let line = |resource: &str, verb: &str, n: u64| {
            format!(
                "apiserver_request_total{{code=\"200\",resource=\"{resource}\",subresource=\"\",verb=\"{verb}\"}} {n}\n"
            )
        };
        let mut before = ServerCounts::every_resource();
        before.add_metrics_text(&(line("leases", "PUT", 100) + &line("events", "POST", 7)));
        let mut after = ServerCounts::every_resource();
        after.add_metrics_text(
            &(line("leases", "PUT", 160)
                + &line("events", "POST", 7)
                + &line("internalserviceexports", "LIST", 3)
                + "apiserver_request_total{code=\"200\",resource=\"\",subresource=\"/metrics\",verb=\"GET\"} 2\n"),
        );
        let r = rates(&after, &before, Duration::from_secs(30));
        let got: Vec<(&str, &str, u64)> = r
            .iter()
            .map(|r| (r.resource.as_str(), r.verb.as_str(), r.count))
            .collect();
        assert_eq!(
            got,
            vec![
                ("leases", "PUT", 60),
                ("internalserviceexports", "LIST", 3),
                ("/metrics", "GET", 2)
            ]
        );
        assert_eq!(r[0].per_s, 2.0);
        assert!((total_per_s(&r) - 65.0 / 30.0).abs() < 1e-9);
        // The default counts keep only the controller's resources.
        let mut counted = ServerCounts::default();
        counted.add_metrics_text(&line("leases", "PUT", 1));
        assert!(counted.requests.is_empty());
    }

    #[test]
    fn the_bound_is_the_largest_share() {
        let config = Config {
            members: 300,
            member_servers: 5,
            exports: 10,
            replicas: 3,
            hub_limits: Limits {
                qps: 100.0,
                burst: 200,
                ..Limits::default()
            },
            member_limits: Limits::default(),
            budget_args: vec![],
            quiet: Duration::ZERO,
            failover: true,
            binary: PathBuf::new(),
            timeout: Duration::ZERO,
            failover_timeout: Duration::ZERO,
            churn: None,
        };
        // 100 members × (10 creates + 2 LISTs) = 1200 requests, 200 of them in the burst.
        assert_eq!(budget_bound(&config), Duration::from_secs(10));
        let single = Config {
            replicas: 1,
            ..config
        };
        assert_eq!(budget_bound(&single), Duration::from_secs(34));
    }

    #[test]
    fn the_table_says_what_did_not_happen() {
        let mut r = Report {
            members: 1000,
            member_servers: 10,
            exports_per_member: 10,
            ises: 10000,
            replicas: 3,
            sharded: true,
            hub_qps: 100.0,
            hub_burst: 200,
            kube_qps: 20.0,
            kube_burst: 30,
            substrate_s: 10.0,
            setup_s: 5.0,
            convergence_s: 50.0,
            members_ready_s: None,
            members_ready_max: 400,
            settled_s: None,
            budget_bound_s: 34.7,
            bound_ratio: Some(50.0 / 34.7),
            handoffs_before_quiet: 1500,
            handoffs_quiet: 900,
            replica: vec![],
            rss_per_member_converged_kib: 300.0,
            rss_per_member_after_quiet_kib: 310.0,
            replica_idle_kib: None,
            rss_per_member_marginal_kib: None,
            baseline: Traffic::default(),
            cold: Traffic::default(),
            quiet: Traffic::default(),
            churn: None,
            failover: Some(Failover {
                killed: "replica-1".into(),
                orphaned: 300,
                shards_held: 8,
                leases_taken_s: None,
                takeover_s: vec![15.0, 20.0],
                complete: false,
                timeout_s: 120.0,
                probe_member: "m02".into(),
                probe_server: "apiserver-01".into(),
                probe_ise_s: f64::NAN,
                probe_orphans_s: vec![16.0],
                probe_orphans: 30,
                probe_others_s: vec![0.1],
                probe_others: 70,
            }),
            ise_deletes: 0,
        };
        let table = markdown(&r);
        assert!(
            table.contains("| not within 120.0 s of the ISEs (at most 400/1000 at once) |"),
            "{table}"
        );
        assert!(
            table.contains("within 120.0 s: INCOMPLETE) | 15.0 s / 20.0 s (2/300) |"),
            "{table}"
        );
        assert!(table.contains("| not seen |"), "{table}");
        assert!(
            table.contains("held (8) held by a survivor | not within the timeout |"),
            "{table}"
        );
        assert!(
            table.contains("without one) | not within 120.0 s of the ISEs |"),
            "{table}"
        );
        assert!(table.contains("| 16.0 s / 16.0 s (1/30) |"), "{table}");
        assert!(table.contains("| 0 ✓ |"), "{table}");
        r.ise_deletes = 3;
        assert!(markdown(&r).contains("| 3 ✗ |"));
    }

    #[test]
    fn owned_once_needs_every_name_on_exactly_one_replica() {
        let set =
            |names: &[&str]| -> HashSet<String> { names.iter().map(|n| n.to_string()).collect() };
        assert!(owned_once(&[set(&["a", "b"]), set(&["c"])], 3));
        assert!(!owned_once(&[set(&["a", "b"]), set(&["b", "c"])], 3));
        assert!(!owned_once(&[set(&["a"]), set(&["c"])], 3));
        assert!(owned_once(&[set(&["a", "b", "c"]), set(&[])], 3));
    }

    #[test]
    fn marginal_rss_leaves_out_the_idle_replicas() {
        // 3 replicas of 20 MiB idle, 90 MiB in all with 30 members: 1 MiB per member.
        let rss = [30 * 1024, 30 * 1024, 30 * 1024];
        assert_eq!(marginal_per_member(&rss, 20 * 1024, 30), 1024.0);
    }

    #[test]
    fn all_present_is_the_last_first_seen() {
        let t0 = Instant::now();
        let k = |n: &str| ("ns".to_string(), n.to_string());
        let mut seen = Seen::default();
        seen.first.insert(k("a"), t0);
        seen.first.insert(k("b"), t0 + Duration::from_secs(3));
        seen.present.insert(k("a"));
        assert_eq!(seen.all_present(&[k("a"), k("b")]), None);
        seen.present.insert(k("b"));
        assert_eq!(
            seen.all_present(&[k("a"), k("b")]),
            Some(t0 + Duration::from_secs(3))
        );
        assert_eq!(seen.all_present(&[]), None);
    }
}
