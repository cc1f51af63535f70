//! `fleetnet-bench --soak`: weeks of life in half an hour. Two sharded replicas of the shipped
//! binary run while members join and leave (a kubeconfig file added or removed every few
//! seconds), exports are created and deleted, and the second replica is restarted now and
//! then (SIGTERM and SIGKILL in turn); the first runs throughout.
//!
//! Sampled at the start (the base members converged), in the middle (mid-churn) and at the end
//! (the base members and exports restored, converged, then a quiet minute): each replica's RSS,
//! `/metrics` series and tokio tasks (`fleetnet_runtime_tasks`), and the Leases in the hub.
//! At the end: the series that name a member not in the fleet any more (must be 0) and the
//! long-lived replica's RSS against the start (the bound: +10 %).

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use fleetnet_bench::{NAMESPACE, create_pair, create_pairs};
use fleetnet_hub::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams};
use rand::seq::IndexedRandom as _;
use serde::Serialize;

use crate::replicas::{Replica, Sharding, Spec};

/// Where the replicas' Leases live.
const LEASE_NAMESPACE: &str = "default";
const LEASE_PREFIX: &str = "fleetnet-hub";
const REPLICA_LABEL: &str = fleetnet_hub::ownership::shard::REPLICA_LABEL;
/// The replicas' `--shards` (the default): shard Leases never exceed it.
const SHARDS: usize = fleetnet_hub::ownership::shard::DEFAULT_SHARDS as usize;
/// After the restore, how long nothing may change before the end sample.
const QUIET: Duration = Duration::from_secs(60);
/// Bound on each convergence wait.
const CONVERGE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct Config {
    pub duration: Duration,
    /// Member apiservers; member names are spread over them.
    pub member_servers: usize,
    /// Names present at the start and the end.
    pub base_members: usize,
    /// Names that come and go (besides the base ones).
    pub pool: usize,
    /// Exports on each apiserver at the start and the end.
    pub exports: usize,
    /// Seconds between membership steps, export steps and restarts of the second replica.
    pub member_every: Duration,
    pub export_every: Duration,
    pub restart_every: Duration,
    pub budget_args: Vec<String>,
    pub binary: PathBuf,
}

/// One sample of one replica.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaSample {
    pub name: String,
    /// Replica starts so far under this name (1: never restarted).
    pub starts: usize,
    pub rss_kib: u64,
    /// What the allocator reports allocated (live objects), when the binary reports it.
    pub live_kib: Option<u64>,
    pub series: usize,
    pub tasks: Option<u64>,
    pub members: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub label: String,
    pub at_s: f64,
    pub members_present: usize,
    pub exports: usize,
    /// Shard Leases (at most `--shards`, whatever the fleet).
    pub shard_leases: usize,
    /// Replica announcements (one per live replica once the dead ones' are collected).
    pub announcements: usize,
    pub replicas: Vec<ReplicaSample>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub duration_s: f64,
    pub member_servers: usize,
    pub base_members: usize,
    pub pool: usize,
    pub exports_per_server: usize,
    pub members_added: usize,
    pub members_removed: usize,
    pub exports_created: usize,
    pub exports_deleted: usize,
    pub restarts: usize,
    pub samples: Vec<Sample>,
    /// End sample: series naming a member that is not in the fleet any more, per replica.
    pub departed_series: usize,
    /// Long-lived replica: end RSS / start RSS − 1, in percent.
    pub rss_growth_pct: f64,
    /// Long-lived replica: end live heap / start live heap − 1, in percent.
    pub live_growth_pct: Option<f64>,
    /// Long-lived replica: tasks at the end − at the start.
    pub task_growth: i64,
    /// Announcements at the end (2 replicas run).
    pub announcements_end: usize,
    /// The most shard Leases seen (bound: `--shards`).
    pub shard_leases_max: usize,
}

fn say(line: impl AsRef<str>) {
    eprintln!("[soak] {}", line.as_ref());
}

/// Name `i` of the soak (`s001` …): base names first, then the pool.
fn name(i: usize) -> String {
    format!("s{i:03}")
}

fn extra_export(n: usize) -> String {
    format!("soak-x{n:05}")
}

/// The series of a `/metrics` text (lines that are not comments).
pub fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// Series whose `member` label names none of `present`.
pub fn departed_series(text: &str, present: &HashSet<String>) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let at = l.find("member=\"")? + "member=\"".len();
            let end = l[at..].find('"')?;
            Some(&l[at..at + end])
        })
        .filter(|m| !present.contains(*m))
        .count()
}

/// The live-heap series of `/metrics`.
pub const ALLOCATED: &str = "fleetnet_allocator_bytes{state=\"allocated\"}";
/// The pages the allocator holds, of `/metrics`.
pub const RESIDENT: &str = "fleetnet_allocator_bytes{state=\"resident\"}";

/// The value of an unlabelled gauge in a `/metrics` text.
pub fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

struct Soak {
    dir: PathBuf,
    log_dir: PathBuf,
    servers: Vec<kube::Client>,
    hub: kube::Client,
    hub_namespace_prefix: String,
    present: BTreeSet<usize>,
    /// Extra exports: (server, name).
    extras: Vec<(usize, String)>,
    next_export: usize,
    kubeconfigs: Vec<PathBuf>,
}

impl Soak {
    fn add(&mut self, i: usize) -> anyhow::Result<()> {
        let from = &self.kubeconfigs[i % self.kubeconfigs.len()];
        let tmp = self.dir.join(format!(".{}.tmp", name(i)));
        std::fs::copy(from, &tmp)?;
        std::fs::rename(&tmp, self.dir.join(format!("{}.yaml", name(i))))?;
        self.present.insert(i);
        Ok(())
    }

    fn remove(&mut self, i: usize) -> anyhow::Result<()> {
        std::fs::remove_file(self.dir.join(format!("{}.yaml", name(i))))?;
        self.present.remove(&i);
        Ok(())
    }

    fn names(&self) -> HashSet<String> {
        self.present.iter().map(|i| name(*i)).collect()
    }

    async fn delete_export(&self, server: usize, export: &str) -> anyhow::Result<()> {
        let client = self.servers[server].clone();
        let params = DeleteParams::default();
        Api::<ServiceExport>::namespaced_with(
            client.clone(),
            NAMESPACE,
            &ServiceExportVersion::V1Beta1,
        )
        .delete(export, &params)
        .await
        .with_context(|| format!("delete ServiceExport {export}"))?;
        Api::<Service>::namespaced(client, NAMESPACE)
            .delete(export, &params)
            .await
            .with_context(|| format!("delete Service {export}"))?;
        Ok(())
    }

    /// ISEs expected now: every present name's server's exports, in its hub namespace.
    fn expected_ises(&self, base_exports: usize) -> usize {
        self.present
            .iter()
            .map(|i| {
                let server = i % self.servers.len();
                base_exports + self.extras.iter().filter(|(s, _)| *s == server).count()
            })
            .sum()
    }

    /// ISEs in the hub namespaces of the present names.
    async fn ises(&self) -> anyhow::Result<usize> {
        let namespaces: HashSet<String> = self
            .present
            .iter()
            .map(|i| format!("{}{}", self.hub_namespace_prefix, name(*i)))
            .collect();
        let all = Api::<InternalServiceExport>::all(self.hub.clone())
            .list_metadata(&ListParams::default())
            .await?;
        Ok(all
            .items
            .iter()
            .filter(|i| {
                i.metadata
                    .namespace
                    .as_ref()
                    .is_some_and(|n| namespaces.contains(n))
            })
            .count())
    }

    /// (shard Leases, replica announcements) in the hub.
    async fn leases(&self) -> anyhow::Result<(usize, usize)> {
        let all = Api::<Lease>::namespaced(self.hub.clone(), LEASE_NAMESPACE)
            .list_metadata(&ListParams::default())
            .await?
            .items;
        let announcement = |l: &&kube::core::PartialObjectMeta<Lease>| {
            l.metadata
                .labels
                .as_ref()
                .is_some_and(|m| m.contains_key(REPLICA_LABEL))
        };
        let announcements = all.iter().filter(announcement).count();
        Ok((all.len() - announcements, announcements))
    }
}

async fn sample(
    label: &str,
    begun: Instant,
    soak: &Soak,
    replicas: &[Replica],
    starts: &[usize],
    base_exports: usize,
) -> anyhow::Result<(Sample, Vec<String>)> {
    let mut samples = vec![];
    let mut texts = vec![];
    for (r, starts) in replicas.iter().zip(starts) {
        // A replica restarted a moment ago may not listen yet.
        let mut tries = 0;
        let text = loop {
            match r.scrape().await {
                Ok(text) => break text,
                Err(e) if tries >= 60 => return Err(e),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
        // Kept beside the replicas' logs, to diff the samples' series.
        let _ = std::fs::write(
            soak.log_dir.join(format!("metrics-{label}-{}.txt", r.name)),
            &text,
        );
        let members = r.members().await.map(|m| m.len()).unwrap_or(0);
        samples.push(ReplicaSample {
            name: r.name.clone(),
            starts: *starts,
            rss_kib: r.rss_kib(),
            live_kib: gauge(&text, ALLOCATED).map(|b| b / 1024),
            series: series(&text),
            tasks: gauge(&text, "fleetnet_runtime_tasks"),
            members,
        });
        texts.push(text);
    }
    let (shard_leases, announcements) = soak.leases().await?;
    let sample = Sample {
        label: label.into(),
        at_s: begun.elapsed().as_secs_f64(),
        members_present: soak.present.len(),
        exports: soak.expected_ises(base_exports),
        shard_leases,
        announcements,
        replicas: samples,
    };
    say(format!(
        "{label} at {:.0} s: {} members, {} ISEs expected, {} shard Leases, {} announcements; {}",
        sample.at_s,
        sample.members_present,
        sample.exports,
        sample.shard_leases,
        sample.announcements,
        sample
            .replicas
            .iter()
            .map(|r| format!(
                "{}: RSS {} KiB, {} series, {:?} tasks, {} members",
                r.name, r.rss_kib, r.series, r.tasks, r.members
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    Ok((sample, texts))
}

/// Waits until every expected ISE is there and the replicas run every present name once.
async fn converged(
    soak: &Soak,
    replicas: &mut [Replica],
    base_exports: usize,
) -> anyhow::Result<()> {
    let began = Instant::now();
    let want = soak.names();
    loop {
        for r in replicas.iter_mut() {
            r.check_alive()?;
        }
        let mut running: Vec<String> = vec![];
        for r in replicas.iter() {
            let members = r.members().await.unwrap_or_default();
            running.extend(
                members
                    .into_iter()
                    .filter(|(_, phase)| phase == "ready")
                    .map(|(m, _)| m),
            );
        }
        let once = running.len() == want.len()
            && running.iter().collect::<HashSet<_>>().len() == want.len()
            && running.iter().all(|m| want.contains(m));
        let ises = soak.ises().await?;
        if once && ises == soak.expected_ises(base_exports) {
            return Ok(());
        }
        ensure!(
            began.elapsed() < CONVERGE,
            "not converged within {CONVERGE:?}: {} of {} names ready once, {ises} of {} ISEs",
            running.len(),
            want.len(),
            soak.expected_ises(base_exports)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn run(config: &Config) -> anyhow::Result<Report> {
    let begun = Instant::now();
    // The substrate lives as long as this run.
    let (_fleet, mut soak, spec) = set_up(config).await?;
    let mut replicas = vec![spec.start("replica-0")?, spec.start("replica-1")?];
    let mut starts = vec![1, 1];
    say(format!(
        "{} base names over {} apiservers, {} exports each; logs in {}",
        config.base_members,
        config.member_servers,
        config.exports,
        spec.log_dir.display()
    ));
    converged(&soak, &mut replicas, config.exports).await?;
    tokio::time::sleep(QUIET).await;
    let (start, _) = sample("start", begun, &soak, &replicas, &starts, config.exports).await?;

    let mut rng = rand::rng();
    let mut churned = Churned::default();
    let churn_began = Instant::now();
    let mut next_member = Instant::now();
    let mut next_export = Instant::now();
    let mut next_restart = Instant::now() + config.restart_every;
    let mut middle = None;
    while churn_began.elapsed() < config.duration {
        replicas[0].check_alive()?;
        if Instant::now() >= next_member {
            next_member += config.member_every;
            churn_member(config, &mut soak, &mut rng, &mut churned)?;
        }
        if Instant::now() >= next_export {
            next_export += config.export_every;
            churn_export(config, &mut soak, &mut rng, &mut churned).await?;
        }
        if Instant::now() >= next_restart {
            next_restart += config.restart_every;
            restart(&spec, &mut replicas, &mut starts, &mut churned).await?;
        }
        if middle.is_none() && churn_began.elapsed() >= config.duration / 2 {
            middle = Some(
                sample("middle", begun, &soak, &replicas, &starts, config.exports)
                    .await?
                    .0,
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    restore(config, &mut soak, &mut churned).await?;
    converged(&soak, &mut replicas, config.exports).await?;
    tokio::time::sleep(QUIET).await;
    let (end, texts) = sample("end", begun, &soak, &replicas, &starts, config.exports).await?;
    Ok(report(config, &soak, churned, start, middle, end, &texts))
}

/// The substrate (hub and member apiservers, every name's hub namespace, the exports), the
/// base names present, and how the replicas are run.
async fn set_up(config: &Config) -> anyhow::Result<(fleetnet_testenv::Fleet, Soak, Spec)> {
    ensure!(
        config.base_members > 0 && config.member_servers > 0 && config.exports > 0,
        "--soak needs --members, --member-servers and --exports above 0"
    );
    let server_names: Vec<String> = (0..config.member_servers)
        .map(|k| format!("apiserver-{k:02}"))
        .collect();
    let (fleet, hub, servers) = fleetnet_bench::substrate(&server_names).await?;
    let all = config.base_members + config.pool;
    for i in 0..all {
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(&name(i))).await?;
    }
    futures::future::try_join_all(servers.iter().map(|c| {
        create_pairs(
            c.clone(),
            (0..config.exports).map(|e| format!("soak-{e:03}")),
        )
    }))
    .await?;
    // Kept after the run (the substrate's scratch directory is not): replica logs and the
    // samples' /metrics.
    let log_dir = std::env::temp_dir().join(format!("fleetnet-soak-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir)?;
    let dir = fleet.scratch_dir().join("soak-kubeconfigs");
    std::fs::create_dir_all(&dir)?;
    let kubeconfigs: Vec<PathBuf> = server_names
        .iter()
        .map(|s| fleet.member(s).kubeconfig_path().to_path_buf())
        .collect();
    let mut soak = Soak {
        dir: dir.clone(),
        log_dir: log_dir.clone(),
        servers,
        hub: hub.clone(),
        hub_namespace_prefix: fleet.hub_namespace(""),
        present: BTreeSet::new(),
        extras: vec![],
        next_export: 0,
        kubeconfigs,
    };
    for i in 0..config.base_members {
        soak.add(i)?;
    }
    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir: dir,
        log_dir,
        shard: Some(Sharding {
            lease_namespace: LEASE_NAMESPACE.into(),
            lease_prefix: LEASE_PREFIX.into(),
        }),
        args: config.budget_args.clone(),
        rust_log: "warn,fleetnet_hub::fleet=info".into(),
    };
    Ok((fleet, soak, spec))
}

/// What the churn did, for the report.
#[derive(Debug, Default)]
struct Churned {
    added: usize,
    removed: usize,
    created: usize,
    deleted: usize,
    restarts: usize,
}

/// One member step of the churn: a pool name comes or goes, at random, towards half the pool
/// present.
fn churn_member(
    config: &Config,
    soak: &mut Soak,
    rng: &mut impl rand::Rng,
    churned: &mut Churned,
) -> anyhow::Result<()> {
    let all = config.base_members + config.pool;
    let absent: Vec<usize> = (config.base_members..all)
        .filter(|i| !soak.present.contains(i))
        .collect();
    let coming: Vec<usize> = (config.base_members..all)
        .filter(|i| soak.present.contains(i))
        .collect();
    // Towards half the pool present, at random.
    if !absent.is_empty() && (coming.is_empty() || rng.random_bool(0.5)) {
        soak.add(*absent.choose(rng).expect("non-empty"))?;
        churned.added += 1;
    } else if let Some(i) = coming.choose(rng) {
        soak.remove(*i)?;
        churned.removed += 1;
    }
    Ok(())
}

/// One export step of the churn: an extra export created, or one deleted.
async fn churn_export(
    config: &Config,
    soak: &mut Soak,
    rng: &mut impl rand::Rng,
    churned: &mut Churned,
) -> anyhow::Result<()> {
    let create = soak.extras.len() < 3 * config.member_servers && rng.random_bool(0.6);
    if create || soak.extras.is_empty() {
        let server = rng.random_range(0..soak.servers.len());
        let export = extra_export(soak.next_export);
        soak.next_export += 1;
        create_pair(soak.servers[server].clone(), export.clone()).await?;
        soak.extras.push((server, export));
        churned.created += 1;
    } else {
        let at = rng.random_range(0..soak.extras.len());
        let (server, export) = soak.extras.swap_remove(at);
        soak.delete_export(server, &export).await?;
        churned.deleted += 1;
    }
    Ok(())
}

/// replica-1 stopped (SIGTERM and SIGKILL in turn) and started again.
async fn restart(
    spec: &Spec,
    replicas: &mut Vec<Replica>,
    starts: &mut [usize],
    churned: &mut Churned,
) -> anyhow::Result<()> {
    let old = replicas.pop().expect("replica-1");
    if churned.restarts.is_multiple_of(2) {
        say("replica-1: SIGTERM, started again");
        old.terminate().await?;
    } else {
        say("replica-1: SIGKILL, started again");
        old.kill().await?;
    }
    churned.restarts += 1;
    replicas.push(spec.start("replica-1")?);
    starts[1] += 1;
    Ok(())
}

/// After the churn: the pool's names removed and the extra exports deleted, back to the base.
async fn restore(config: &Config, soak: &mut Soak, churned: &mut Churned) -> anyhow::Result<()> {
    say("churn over: the base names and exports restored");
    let gone: Vec<usize> = soak
        .present
        .iter()
        .copied()
        .filter(|i| *i >= config.base_members)
        .collect();
    for i in gone {
        soak.remove(i)?;
        churned.removed += 1;
    }
    for (server, export) in std::mem::take(&mut soak.extras) {
        soak.delete_export(server, &export).await?;
        churned.deleted += 1;
    }
    Ok(())
}

/// The report of a run: its samples and how the end compares with the start.
fn report(
    config: &Config,
    soak: &Soak,
    churned: Churned,
    start: Sample,
    middle: Option<Sample>,
    end: Sample,
    texts: &[String],
) -> Report {
    let present = soak.names();
    let departed_series = texts.iter().map(|t| departed_series(t, &present)).sum();
    let (s0, e0) = (&start.replicas[0], &end.replicas[0]);
    let rss_growth_pct = (e0.rss_kib as f64 / s0.rss_kib.max(1) as f64 - 1.0) * 100.0;
    let live_growth_pct = s0
        .live_kib
        .zip(e0.live_kib)
        .map(|(s, e)| (e as f64 / s.max(1) as f64 - 1.0) * 100.0);
    let task_growth = e0.tasks.unwrap_or(0) as i64 - s0.tasks.unwrap_or(0) as i64;
    let announcements_end = end.announcements;
    let shard_leases_max = [Some(&start), middle.as_ref(), Some(&end)]
        .into_iter()
        .flatten()
        .map(|s| s.shard_leases)
        .max()
        .unwrap_or(0);
    let mut samples = vec![start];
    samples.extend(middle);
    samples.push(end);
    Report {
        duration_s: config.duration.as_secs_f64(),
        member_servers: config.member_servers,
        base_members: config.base_members,
        pool: config.pool,
        exports_per_server: config.exports,
        members_added: churned.added,
        members_removed: churned.removed,
        exports_created: churned.created,
        exports_deleted: churned.deleted,
        restarts: churned.restarts,
        samples,
        departed_series,
        rss_growth_pct,
        live_growth_pct,
        task_growth,
        announcements_end,
        shard_leases_max,
    }
}

pub fn markdown(r: &Report) -> String {
    let mut out = format!(
        "### Soak: {:.0} min, {} base names + a pool of {} coming and going over {} apiservers, {} exports each\n\n\
         {} members added, {} removed; {} exports created, {} deleted; replica-1 restarted {} times (SIGTERM and SIGKILL in turn).\n\n\
         | sample | at | members | ISEs | shard Leases / announcements | replica | RSS (live heap) | series | tasks | its members |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
        r.duration_s / 60.0,
        r.base_members,
        r.pool,
        r.member_servers,
        r.exports_per_server,
        r.members_added,
        r.members_removed,
        r.exports_created,
        r.exports_deleted,
        r.restarts,
    );
    for s in &r.samples {
        for (i, rep) in s.replicas.iter().enumerate() {
            let head = if i == 0 {
                format!(
                    "| {} | {:.0} s | {} | {} | {} / {} ",
                    s.label, s.at_s, s.members_present, s.exports, s.shard_leases, s.announcements
                )
            } else {
                "| | | | | ".to_string()
            };
            out.push_str(&format!(
                "{head}| {}{} | {:.1} MiB ({}) | {} | {} | {} |\n",
                rep.name,
                if rep.starts > 1 {
                    format!(" (start {})", rep.starts)
                } else {
                    String::new()
                },
                rep.rss_kib as f64 / 1024.0,
                rep.live_kib
                    .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
                rep.series,
                rep.tasks.map_or("-".into(), |t| t.to_string()),
                rep.members
            ));
        }
    }
    out.push_str(&format!(
        "\nEnd against start: replica-0 (never restarted) RSS {:+.1} % (live heap {}), tasks {:+}; series of departed members {}; announcements {} for 2 live replicas; shard Leases at most {} (bound {SHARDS}).\n",
        r.rss_growth_pct,
        r.live_growth_pct.map_or("-".into(), |g| format!("{g:+.1} %")),
        r.task_growth,
        r.departed_series,
        r.announcements_end,
        r.shard_leases_max
    ));
    out
}

/// Whether the end is back at the start: no series of a departed member, RSS within +10 %,
/// one announcement per live replica, shard Leases within `--shards`.
pub fn returned(r: &Report) -> bool {
    r.departed_series == 0
        && r.rss_growth_pct <= 10.0
        && r.announcements_end == 2
        && r.shard_leases_max <= SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_departed_members_and_gauges_are_read_from_the_text() {
        let text = "# HELP fleetnet_runtime_tasks Tasks\n\
                    # TYPE fleetnet_runtime_tasks gauge\n\
                    fleetnet_runtime_tasks 41\n\
                    fleetnet_reconcile_total{member=\"s001\",outcome=\"exported\"} 3\n\
                    fleetnet_reconcile_total{member=\"s045\",outcome=\"exported\"} 1\n\
                    fleetnet_api_requests_total{client=\"member\",member=\"s045\",verb=\"get\"} 2\n\
                    fleetnet_ise_writes_total{op=\"create\"} 4\n\
                    # EOF\n";
        assert_eq!(series(text), 5);
        let present: HashSet<String> = ["s001".to_string()].into();
        assert_eq!(departed_series(text, &present), 2);
        assert_eq!(gauge(text, "fleetnet_runtime_tasks"), Some(41));
        assert_eq!(gauge(text, "fleetnet_runtime"), None);
        let heap = "fleetnet_allocator_bytes{state=\"allocated\"} 9437184\n\
                    fleetnet_allocator_bytes{state=\"resident\"} 12582912\n";
        assert_eq!(gauge(heap, ALLOCATED), Some(9_437_184));
    }

    #[test]
    fn the_end_is_back_at_the_start_only_within_every_bound() {
        let report = |departed, rss, announcements, shards| Report {
            duration_s: 60.0,
            member_servers: 1,
            base_members: 1,
            pool: 1,
            exports_per_server: 1,
            members_added: 0,
            members_removed: 0,
            exports_created: 0,
            exports_deleted: 0,
            restarts: 0,
            samples: vec![],
            departed_series: departed,
            rss_growth_pct: rss,
            live_growth_pct: None,
            task_growth: 0,
            announcements_end: announcements,
            shard_leases_max: shards,
        };
        assert!(returned(&report(0, 9.9, 2, SHARDS)));
        assert!(
            !returned(&report(1, 0.0, 2, 3)),
            "a departed member's series"
        );
        assert!(!returned(&report(0, 10.5, 2, 3)), "RSS over +10 %");
        assert!(
            !returned(&report(0, 0.0, 3, 3)),
            "a dead replica's announcement"
        );
        assert!(
            !returned(&report(0, 0.0, 2, SHARDS + 1)),
            "shard Leases beyond --shards"
        );
    }
}
