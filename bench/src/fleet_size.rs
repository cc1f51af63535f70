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
//!   per export through its hub bucket, and one LIST per hub kind the jobs read for all its
//!   members (the replica's hub watches), as `ideal_bound` computes it);
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
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fleetnet_bench::{
    Churn, ChurnReport, Config as BenchConfig, NAMESPACE, ServerCounts, WriteCount,
    churn_over_servers, create_pair, create_pairs, ideal_bound, member_names,
    scrape_every_resource,
};
use fleetnet_hub::client::Limits;
use fleetnet_testenv::Fleet;
use futures::StreamExt as _;
use kube::api::Api;

pub use crate::fleet_size_report::{
    Failover, Heartbeats, Rate, ReplicaFigures, Report, Traffic, markdown, ms,
};
use crate::fleet_size_report::{READY_GRACE, SETTLE, mib};
use crate::heartbeats::{BeatWatch, Intervals};
pub(crate) use crate::ise_seen::{Seen, lock, wait_listed, watch_ises};
use crate::replicas::{Replica, Sharding, Spec};
use crate::secrets_fleet::{self, SecretMember, SecretsReport};

/// The replica log line of a member leaving a replica because another one owns it now.
pub const HANDOFF: &str = "member now owned by another replica";
/// The export created after the kill.
const PROBE: &str = "fleet-size-probe";
/// Hub writes of a member's cold start besides its exports: its first heartbeat.
pub const HEARTBEATS_PER_MEMBER: usize = 1;
/// Hub requests of a member's cold start for its `MemberStatus` (`crate::status`): one GET (a
/// restart finds it there and writes nothing) and, on a new hub, one POST.
pub const STATUS_REQUESTS_PER_MEMBER: usize = 2;
/// The substrate alone, before the replicas start.
const BASELINE: Duration = Duration::from_secs(10);
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
    /// `spec.heartbeatPeriodSeconds` of each name's InternalMemberCluster.
    pub heartbeat_period_s: i32,
    /// The names registered as hub Secrets with tokens of their own, rotated after the quiet
    /// window (`secrets_fleet.rs`), instead of kubeconfig files.
    pub member_secrets: bool,
}

pub use fleetnet_bench::server_of;

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

pub(crate) fn total_per_s(rates: &[Rate]) -> f64 {
    rates.iter().map(|r| r.per_s).sum()
}

/// The least time for the replica with the largest share: `ceil(members / replicas)` members,
/// each with its exports' creates, its first heartbeat (one InternalMemberCluster status write)
/// and its MemberStatus read and create; and the replica's hub LISTs (one per kind).
pub fn budget_bound(config: &Config) -> Duration {
    ideal_bound(&BenchConfig {
        members: config.members.div_ceil(config.replicas.max(1)),
        exports: config.exports + HEARTBEATS_PER_MEMBER + STATUS_REQUESTS_PER_MEMBER,
        hub_limits: config.hub_limits.clone(),
        member_limits: config.member_limits.clone(),
        ..BenchConfig::default()
    })
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
    let setup = set_up(config).await?;
    let (fleet, hub, names) = (&setup.fleet, &setup.hub, &setup.names);
    let (server_clients, expected) = (&setup.server_clients, &setup.expected);

    let replica_idle_kib = binary_idle(config, fleet).await;
    let (seen, _watch) = watch_ises(hub);
    let beats = BeatWatch::start(hub);
    wait_listed(&seen).await?;
    let (base1, baseline) = baseline(hub, server_clients).await?;
    let spec = spec_of(config, fleet, setup.kubeconfig_dir.clone());
    let started = Instant::now();
    let mut replicas = start_replicas(config, &spec)?;
    let converged = converge(config, &mut replicas, &seen, expected, names, started).await?;
    let (convergence, bound) = (converged.convergence, budget_bound(config));
    let (q0, q1) = quiet_window(config, hub, server_clients, &mut replicas).await?;
    let quiet = traffic(&q0, &q1);
    let heartbeats = heartbeats(config, &quiet, &beats, &q0, &q1);
    let cold = traffic(&base1, &q0);
    let replica_figures = replica_figures(&replicas, &converged.ready_sets, &q0, &q1);
    let per_member = |rss: &[u64]| rss.iter().sum::<u64>() as f64 / names.len() as f64;

    let secrets = if config.member_secrets {
        Some(secrets_phase(config, &setup, &replicas, &seen, &quiet).await?)
    } else {
        None
    };
    let churn = run_churn(config, &setup).await?;

    let failover = if config.failover && replicas.len() > 1 {
        Some(
            failover(
                config,
                fleet,
                &seen,
                &mut replicas,
                names,
                server_clients,
                &setup.servers,
            )
            .await?,
        )
    } else {
        None
    };

    let ise_deletes = ise_deletes(hub, &base1).await?;
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
        substrate_s: setup.substrate_s.as_secs_f64(),
        setup_s: setup.setup_s.as_secs_f64(),
        convergence_s: convergence.as_secs_f64(),
        members_ready_s: converged.members_ready.as_ref().map(Duration::as_secs_f64),
        members_ready_max: converged.ready_max,
        settled_s: converged.settled.as_ref().map(Duration::as_secs_f64),
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
        heartbeats,
        secrets,
    })
}

/// The WATCHes the member apiservers ended per second over the quiet window.
fn watches_ended_per_s(quiet: &Traffic) -> f64 {
    quiet
        .members
        .iter()
        .filter(|r| r.verb == "WATCH")
        .map(|r| r.per_s)
        .fold(0.0, |a, b| a + b)
}

/// With `config.member_secrets`: the rotation of every token, a member added, `status`.
async fn secrets_phase(
    config: &Config,
    setup: &Setup,
    replicas: &[Replica],
    seen: &Mutex<Seen>,
    quiet: &Traffic,
) -> anyhow::Result<SecretsReport> {
    let (fleet, hub) = (&setup.fleet, &setup.hub);
    let rotation = secrets_fleet::rotate(
        fleet,
        hub,
        &setup.server_clients,
        replicas,
        &setup.secret_members,
        seen,
        watches_ended_per_s(quiet),
    )
    .await?;
    let exports: Vec<String> = (0..config.exports).map(export_name).collect();
    let added =
        secrets_fleet::add_member(fleet, hub, &setup.secret_members, &exports, seen).await?;
    let (added_in_status_s, status_s, status_members) = secrets_fleet::status(
        &config.binary,
        fleet.hub().kubeconfig_path(),
        setup.names.len() + 1,
        3,
    )?;
    Ok(SecretsReport {
        rotation,
        added_s: added.map(|d| d.as_secs_f64()),
        added_in_status_s,
        status_s,
        status_members,
    })
}

/// The membership job's figures of the quiet window from `q0` to `q1`.
fn heartbeats(
    config: &Config,
    quiet: &Traffic,
    beats: &BeatWatch,
    q0: &Snapshot,
    q1: &Snapshot,
) -> Heartbeats {
    let period = f64::from(config.heartbeat_period_s);
    let intervals = Intervals::of(&beats.intervals(q0.at, q1.at), period);
    let seen = beats.seen_in(q0.at, q1.at);
    let h = Heartbeats::of(quiet, config.members, period, seen, intervals);
    say(format!(
        "heartbeats in the quiet window: {} status writes, {seen} beats seen, {:.3} per member per period; intervals mean {:.3} min {:.3} max {:.3} periods; {} writes besides",
        h.imc_status_writes,
        h.per_member_per_period,
        h.intervals.mean,
        h.intervals.min,
        h.intervals.max,
        h.other_write_count()
    ));
    h
}

/// The RSS of the shipped binary running no member, when it could be measured.
async fn binary_idle(config: &Config, fleet: &Fleet) -> Option<u64> {
    let replica_idle_kib = fleetnet_bench::binary_idle_rss(&config.binary, fleet).await;
    say(format!(
        "the binary running no member: RSS {}",
        replica_idle_kib.map_or("unknown".into(), |k| mib(k as f64))
    ));
    replica_idle_kib
}

/// The substrate's own traffic over [`BASELINE`], before any replica; and the snapshot it
/// ends with (where the cold start's counts begin).
async fn baseline(
    hub: &kube::Client,
    server_clients: &[kube::Client],
) -> anyhow::Result<(Snapshot, Traffic)> {
    say(format!("baseline: the substrate alone for {BASELINE:?}"));
    let base0 = snapshot(hub, server_clients, &[]).await?;
    tokio::time::sleep(BASELINE).await;
    let base1 = snapshot(hub, server_clients, &[]).await?;
    let baseline = traffic(&base0, &base1);
    Ok((base1, baseline))
}

/// How the replicas are run: the binary, the hub's and the members' kubeconfigs, sharded when
/// there are several.
fn spec_of(config: &Config, fleet: &Fleet, kubeconfig_dir: PathBuf) -> Spec {
    Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir,
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: (config.replicas > 1).then(|| Sharding {
            lease_namespace: "default".into(),
            lease_prefix: "fleetnet-hub".into(),
        }),
        args: config
            .budget_args
            .iter()
            .cloned()
            .chain(
                config
                    .member_secrets
                    .then(|| {
                        [
                            "--member-secrets-namespace".to_string(),
                            secrets_fleet::SECRETS_NAMESPACE.to_string(),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .collect(),
        rust_log: "warn,fleetnet_hub::fleet=info".into(),
    }
}

/// The snapshots at the start and the end of the quiet window after convergence; fails if a
/// replica died in it.
async fn quiet_window(
    config: &Config,
    hub: &kube::Client,
    server_clients: &[kube::Client],
    replicas: &mut [Replica],
) -> anyhow::Result<(Snapshot, Snapshot)> {
    say(format!("quiet window: {:?}", config.quiet));
    let q0 = snapshot(hub, server_clients, replicas).await?;
    tokio::time::sleep(config.quiet).await;
    for r in replicas.iter_mut() {
        r.check_alive()?;
    }
    let q1 = snapshot(hub, server_clients, replicas).await?;
    Ok((q0, q1))
}

/// ISE DELETEs the hub served since `since` (the end of the baseline).
async fn ise_deletes(hub: &kube::Client, since: &Snapshot) -> anyhow::Result<u64> {
    let end = scrape_every_resource(std::slice::from_ref(hub)).await?;
    Ok(end
        .requests_since(&since.hub)
        .iter()
        .filter(|w| w.resource == "internalserviceexports" && w.verb == "DELETE")
        .map(|w| w.count)
        .sum())
}

/// The substrate and what the replicas will find on it, built by [`set_up`].
struct Setup {
    servers: Vec<String>,
    fleet: Fleet,
    hub: kube::Client,
    server_clients: Vec<kube::Client>,
    substrate_s: Duration,
    names: Vec<String>,
    kubeconfig_dir: PathBuf,
    setup_s: Duration,
    /// (hub namespace, ISE name) of every export the replicas must write.
    expected: Vec<(String, String)>,
    /// With `config.member_secrets`: each name's Secret and tokens.
    secret_members: Vec<SecretMember>,
}

/// Checks `config`, starts the substrate (hub and member apiservers) and creates the names'
/// kubeconfigs, hub namespaces and exports.
async fn set_up(config: &Config) -> anyhow::Result<Setup> {
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
    let (kubeconfig_dir, secret_members) = if config.member_secrets {
        let dir = fleet.scratch_dir().join("no-member-files");
        std::fs::create_dir_all(&dir)?;
        let members =
            secrets_fleet::prepare(&fleet, &hub, &names, &servers, &server_clients).await?;
        (dir, members)
    } else {
        (
            prepare_members(&fleet, &hub, &names, &servers).await?,
            vec![],
        )
    };
    let added = config
        .member_secrets
        .then(|| secrets_fleet::ADDED.to_string());
    let imcs = names
        .iter()
        .chain(added.as_ref())
        .map(|n| (fleet.hub_namespace(n), n.clone()));
    crate::heartbeats::create_imcs(&hub, imcs, config.heartbeat_period_s).await?;
    futures::future::try_join_all(
        server_clients
            .iter()
            .map(|c| create_pairs(c.clone(), (0..config.exports).map(export_name))),
    )
    .await?;
    let setup_s = setup.elapsed();
    say(format!(
        "{} names ({} kubeconfigs, hub namespaces, InternalMemberClusters), {} exports on each of {} apiservers, in {setup_s:.1?}",
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

    Ok(Setup {
        servers,
        fleet,
        hub,
        server_clients,
        substrate_s,
        names,
        kubeconfig_dir,
        setup_s,
        expected,
        secret_members,
    })
}

/// Starts `config.replicas` replicas of `spec`.
fn start_replicas(config: &Config, spec: &Spec) -> anyhow::Result<Vec<Replica>> {
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
    Ok(replicas)
}

/// How far the convergence is: ISEs on the hub, names ready, per replica.
fn progress(
    started: Instant,
    seen: &Mutex<Seen>,
    expected: &[(String, String)],
    ready_sets: &[HashSet<String>],
    names: &[String],
) -> String {
    let present = {
        let s = lock(seen);
        expected.iter().filter(|k| s.present.contains(*k)).count()
    };
    let ready: HashSet<&String> = ready_sets.iter().flatten().collect();
    format!(
        "{:.0?}: {present}/{} ISEs, {}/{} names ready (per replica {:?})",
        started.elapsed(),
        expected.len(),
        ready.len(),
        names.len(),
        ready_sets.iter().map(HashSet::len).collect::<Vec<_>>()
    )
}

/// What [`converge`] saw, from the replicas' start: when every ISE was on the hub, every name
/// ready, the names settled; and the names each replica runs.
struct Converged {
    convergence: Duration,
    members_ready: Option<Duration>,
    settled: Option<Duration>,
    ready_sets: Vec<HashSet<String>>,
    /// The most names ready at once.
    ready_max: usize,
}

/// Waits for the cold start to converge: every ISE on the hub and every name owned by
/// exactly one replica for [`SETTLE`] (or [`READY_GRACE`] after the ISEs); fails when a
/// replica dies or at `config.timeout` after `started`.
async fn converge(
    config: &Config,
    replicas: &mut [Replica],
    seen: &Mutex<Seen>,
    expected: &[(String, String)],
    names: &[String],
    started: Instant,
) -> anyhow::Result<Converged> {
    let deadline = started + config.timeout;
    let mut ises_at = None;
    let mut ready_at = None;
    let mut ready_sets = vec![];
    let mut ready_max = 0;
    let mut changed_at = Instant::now();
    let mut settled_at = None;
    let mut last_say = Instant::now();
    loop {
        for r in replicas.iter_mut() {
            r.check_alive()?;
        }
        if ises_at.is_none() {
            ises_at = lock(seen).all_present(expected);
        }
        let now_sets = ready_by_replica(replicas).await;
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
            let line = progress(started, seen, expected, &ready_sets, names);
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
    Ok(Converged {
        convergence,
        members_ready,
        settled,
        ready_sets,
        ready_max,
    })
}

/// Each replica's figures over the quiet window from `q0` to `q1`.
fn replica_figures(
    replicas: &[Replica],
    ready_sets: &[HashSet<String>],
    q0: &Snapshot,
    q1: &Snapshot,
) -> Vec<ReplicaFigures> {
    let window = q1.at.duration_since(q0.at).as_secs_f64().max(1e-9);
    replicas
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
        .collect()
}

/// The churn, when `config` asks for one: `churn.rate` Service port changes per second over
/// every member apiserver.
async fn run_churn(config: &Config, setup: &Setup) -> anyhow::Result<Option<ChurnReport>> {
    let Some(churn) = config.churn else {
        return Ok(None);
    };
    let (hub, fleet, names) = (&setup.hub, &setup.fleet, &setup.names);
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
        hub,
        fleet,
        &setup.server_clients,
        names,
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
    Ok(Some(report))
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
    let (victim, orphans, first, k) = busiest(replicas, names, servers.len()).await?;
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
    let (probe_orphans, probe_others) = probe_groups(names, servers.len(), k, &orphans);
    let watched = Takeover {
        killed,
        killed_name: &killed_name,
        shards_held: &shards_held,
        orphans: &orphans,
        probe_keys: probe_orphans.iter().map(|n| key(n)).collect(),
    };
    let (taken, leases_taken, complete) =
        await_takeover(config, replicas, &hub, seen, &watched).await?;
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

/// The replica running the most members: its index, its members (in name order), the first
/// of them and the apiserver serving it (of `servers`).
async fn busiest(
    replicas: &[Replica],
    names: &[String],
    servers: usize,
) -> anyhow::Result<(usize, Vec<String>, String, usize)> {
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
    let k = server_of(index[&first], servers);
    Ok((victim, orphans, first, k))
}

/// The names of apiserver `k` (of `servers`): those among `orphans`, and the others (the
/// control group, which kept their replica).
fn probe_groups<'a>(
    names: &'a [String],
    servers: usize,
    k: usize,
    orphans: &[String],
) -> (Vec<&'a String>, Vec<&'a String>) {
    let on_k: Vec<&String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| server_of(*i, servers) == k)
        .map(|(_, n)| n)
        .collect();
    let orphan_set: HashSet<&String> = orphans.iter().collect();
    on_k.into_iter().partition(|n| orphan_set.contains(n))
}

/// What the failover waits for after the kill: the killed replica's shard Leases held by a
/// survivor, its members ready elsewhere, the probe's ISE for its members of the probe's
/// apiserver.
struct Takeover<'a> {
    killed: Instant,
    killed_name: &'a str,
    shards_held: &'a [String],
    orphans: &'a [String],
    /// (hub namespace, probe ISE) of the orphans on the probe's apiserver.
    probe_keys: Vec<(String, String)>,
}

impl Takeover<'_> {
    /// A holder identity of the killed replica.
    fn its_own(&self, holder: &str) -> bool {
        holder.starts_with(&format!("{}_", self.killed_name))
    }
}

/// Waits until `w` is done or `config.failover_timeout` is over: when each orphan was ready
/// elsewhere, when the Leases were taken, and whether everything was done in time.
async fn await_takeover(
    config: &Config,
    replicas: &mut [Replica],
    hub: &kube::Client,
    seen: &Mutex<Seen>,
    w: &Takeover<'_>,
) -> anyhow::Result<(BTreeMap<String, Duration>, Option<Duration>, bool)> {
    let mut taken: BTreeMap<String, Duration> = BTreeMap::new();
    let mut leases_taken: Option<Duration> = None;
    let complete = loop {
        for r in replicas.iter_mut() {
            r.check_alive()?;
        }
        if leases_taken.is_none() {
            let now = shard_holders(hub).await?;
            let all = w
                .shards_held
                .iter()
                .all(|s| now.get(s).is_some_and(|h| !h.is_empty() && !w.its_own(h)));
            if all {
                leases_taken = Some(w.killed.elapsed());
            }
        }
        let ready = ready_by_replica(replicas).await;
        let elapsed = w.killed.elapsed();
        for o in w.orphans {
            if !taken.contains_key(o) && ready.iter().any(|set| set.contains(o)) {
                taken.insert(o.clone(), elapsed);
            }
        }
        let exported = {
            let s = lock(seen);
            w.probe_keys
                .iter()
                .filter(|k| s.present.contains(*k))
                .count()
        };
        if taken.len() == w.orphans.len()
            && exported == w.probe_keys.len()
            && leases_taken.is_some()
        {
            break true;
        }
        if elapsed > config.failover_timeout {
            say(format!(
                "failover incomplete after {:?}: {}/{} orphans ready elsewhere, probe ISE for {exported}/{} orphans",
                config.failover_timeout,
                taken.len(),
                w.orphans.len(),
                w.probe_keys.len()
            ));
            break false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    Ok((taken, leases_taken, complete))
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
            heartbeat_period_s: 60,
            member_secrets: false,
        };
        // 100 members × (10 creates + 1 heartbeat + 2 MemberStatus) + 5 LISTs (one per hub
        // kind, for all the replica's members) = 1305 requests, 200 of them in the burst.
        assert_eq!(budget_bound(&config), Duration::from_secs_f64(11.05));
        let single = Config {
            replicas: 1,
            ..config
        };
        assert_eq!(budget_bound(&single), Duration::from_secs_f64(37.05));
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
            heartbeats: Heartbeats::default(),
            secrets: None,
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
