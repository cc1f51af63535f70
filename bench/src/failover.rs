//! `fleetnet-bench --failover`: how long the members of a replica killed with SIGKILL go
//! without an owner, with members sharded across replicas of the shipped binary
//! (`fleetnet-hub run --shard-members`).
//!
//! A substrate hub + N members, `exports` Service + ServiceExport pairs per member, R replicas
//! of the real binary. Once every export has its ISE and the member Leases are spread and
//! still, the replica holding the most members is killed (SIGKILL: no release, its Leases must
//! expire), and a new ServiceExport is created at once in each of its members. Measured from
//! the kill, per orphaned member: when another replica holds its Lease, and when the new
//! export's ISE is in the hub (the first export by the new owner). Server-side: the hub's ISE
//! DELETEs over the whole failover (must be 0).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fleetnet_bench::{NAMESPACE, create_pair, create_pairs, member_names};
use fleetnet_hub::api::InternalServiceExport;
use fleetnet_testenv::Fleet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

use crate::replicas::{Replica, Sharding, Spec, p50_max, secs};

/// Where the replicas keep their Leases, and the prefix of their names.
const LEASE_NS: &str = "default";
const LEASE_PREFIX: &str = "fleetnet-hub";
/// The binary's lease duration (for the report).
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// The export created in each orphaned member after the kill.
const PROBE: &str = "failover-probe";

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub members: usize,
    pub replicas: usize,
    /// Service + ServiceExport pairs per member before the replicas start.
    pub exports: usize,
    /// The `fleetnet-hub` binary.
    pub binary: PathBuf,
    /// Give up on convergence or failover after this long.
    pub timeout: Duration,
}

/// What was measured.
#[derive(Debug, Clone)]
pub struct Report {
    pub members: usize,
    pub replicas: usize,
    pub exports: usize,
    /// Start of the replicas → every ISE present and the Leases spread and still.
    pub converged: Duration,
    /// Members the killed replica held.
    pub orphaned: usize,
    /// Members whose Lease holder changed over the failover (only the orphans should).
    pub moved: usize,
    /// Kill → another replica holds the member's Lease, per orphaned member, sorted.
    pub takeover: Vec<Duration>,
    /// Kill → the new export's ISE is in the hub, per orphaned member, sorted.
    pub exported: Vec<Duration>,
    /// The hub's ISE DELETEs during the failover (server-side).
    pub ise_deletes: f64,
}

/// Runs the failover benchmark once.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    ensure!(
        config.members > 0 && config.replicas > 1,
        "--failover needs members and at least 2 replicas"
    );
    let (fleet, hub, clients) = substrate(config).await?;
    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir: fleet.member_kubeconfig_dir(),
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: Some(Sharding {
            lease_namespace: LEASE_NS.into(),
            lease_prefix: LEASE_PREFIX.into(),
        }),
        args: [
            "--kube-api-qps",
            "100",
            "--kube-api-burst",
            "200",
            "--hub-api-qps",
            "100",
            "--hub-api-burst",
            "200",
        ]
        .map(String::from)
        .to_vec(),
        rust_log: "warn".into(),
    };
    let started = Instant::now();
    let mut replicas = vec![];
    for i in 0..config.replicas {
        replicas.push(spec.start(&format!("replica-{i}"))?);
    }
    let before = converge(&hub, config, &replicas).await?;
    let converged = started.elapsed();
    eprintln!("[failover] converged in {converged:.1?}: {before:?}");

    let deletes_before = ise_deletes(&hub).await?;
    let victim = busiest(&replicas, &before);
    let orphans: Vec<String> = before
        .iter()
        .filter(|(_, h)| owner_of(&replicas, h) == Some(victim))
        .map(|(m, _)| m.clone())
        .collect();
    let killed_replica = replicas.remove(victim);
    let victim_name = killed_replica.name.clone();
    let killed = Instant::now();
    killed_replica.kill().await?;
    eprintln!(
        "[failover] killed {victim_name} holding {} members: {orphans:?}",
        orphans.len()
    );
    let orphan_clients: Vec<kube::Client> = orphans.iter().map(|m| clients[m].clone()).collect();
    futures::future::try_join_all(orphan_clients.into_iter().map(create_probe)).await?;

    let (takeover, exported, after) =
        watch_failover(&hub, &fleet, &orphans, &victim_name, killed, config.timeout).await?;
    let moved = before
        .iter()
        .filter(|(m, h)| after.get(*m) != Some(*h))
        .count();
    Ok(Report {
        members: config.members,
        replicas: config.replicas,
        exports: config.exports,
        converged,
        orphaned: orphans.len(),
        moved,
        takeover,
        exported,
        ise_deletes: ise_deletes(&hub).await? - deletes_before,
    })
}

/// The hub and members, each member with its exports; member clients by name.
async fn substrate(
    config: &Config,
) -> anyhow::Result<(Fleet, kube::Client, BTreeMap<String, kube::Client>)> {
    let names = member_names(config.members);
    let (fleet, hub, members) = fleetnet_bench::substrate(&names).await?;
    let clients: BTreeMap<String, kube::Client> = names.into_iter().zip(members).collect();
    futures::future::try_join_all(clients.values().map(|c| {
        create_pairs(
            c.clone(),
            (0..config.exports).map(|i| format!("failover-{i:03}")),
        )
    }))
    .await?;
    eprintln!(
        "[failover] {} members x {} exports created",
        config.members, config.exports
    );
    Ok((fleet, hub, clients))
}

/// The replica a Lease holder identity (`<pod name>_<suffix>`) names.
fn owner_of(replicas: &[Replica], holder: &str) -> Option<usize> {
    replicas
        .iter()
        .position(|r| holder.starts_with(&format!("{}_", r.name)))
}

/// The replica holding the most members.
fn busiest(replicas: &[Replica], holders: &BTreeMap<String, String>) -> usize {
    (0..replicas.len())
        .max_by_key(|i| {
            holders
                .values()
                .filter(|h| owner_of(replicas, h) == Some(*i))
                .count()
        })
        .unwrap_or(0)
}

/// Member → holder of its shard's Lease (released Leases left out), for the bench's members
/// (`member_names(members)`) under the binary's default shard count.
async fn holders(hub: &kube::Client, members: usize) -> anyhow::Result<BTreeMap<String, String>> {
    use fleetnet_hub::ownership::{
        placement::shard_of,
        shard::{DEFAULT_SHARDS, shard_lease},
    };
    let shards: BTreeMap<String, String> = Api::<Lease>::namespaced(hub.clone(), LEASE_NS)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|l| {
            let holder = l.spec?.holder_identity.unwrap_or_default();
            (!holder.is_empty()).then_some((l.metadata.name?, holder))
        })
        .collect();
    Ok(member_names(members)
        .into_iter()
        .filter_map(|m| {
            let lease = shard_lease(LEASE_PREFIX, shard_of(&m, DEFAULT_SHARDS));
            Some((m, shards.get(&lease)?.clone()))
        })
        .collect())
}

/// Waits until every export has its ISE and every member's shard Lease is held, spread over
/// all replicas, and unchanged for 5 s. Returns the holders.
async fn converge(
    hub: &kube::Client,
    config: &Config,
    replicas: &[Replica],
) -> anyhow::Result<BTreeMap<String, String>> {
    let deadline = Instant::now() + config.timeout;
    let ises: Api<InternalServiceExport> = Api::all(hub.clone());
    let mut last: Option<(BTreeMap<String, String>, Instant)> = None;
    loop {
        if Instant::now() > deadline {
            bail!("not converged after {:?}", config.timeout);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let count = ises.list(&ListParams::default()).await?.items.len();
        let now = holders(hub, config.members).await?;
        let spread = (0..replicas.len()).all(|i| {
            let n = now
                .values()
                .filter(|h| owner_of(replicas, h) == Some(i))
                .count();
            n > 0
        });
        if count < config.members * config.exports || now.len() < config.members || !spread {
            last = None;
            continue;
        }
        match &last {
            Some((seen, since)) if *seen == now => {
                if since.elapsed() >= Duration::from_secs(5) {
                    return Ok(now);
                }
            }
            _ => last = Some((now, Instant::now())),
        }
    }
}

/// Polls until every orphan is held by another replica and its probe export is in the hub.
/// Returns the takeover and export times (sorted) and the final holders.
async fn watch_failover(
    hub: &kube::Client,
    fleet: &Fleet,
    orphans: &[String],
    victim: &str,
    killed: Instant,
    timeout: Duration,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, BTreeMap<String, String>)> {
    let mut taken: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut exported: BTreeMap<&str, Duration> = BTreeMap::new();
    let probe = format!("{NAMESPACE}-{PROBE}");
    loop {
        if killed.elapsed() > timeout {
            bail!(
                "failover incomplete after {timeout:?}: taken over {taken:?}, exported {exported:?}"
            );
        }
        let now = holders(hub, fleet.members().len()).await?;
        let elapsed = killed.elapsed();
        for m in orphans {
            let held_elsewhere = now
                .get(m)
                .is_some_and(|h| !h.starts_with(&format!("{victim}_")));
            if held_elsewhere {
                taken.entry(m).or_insert(elapsed);
            }
            if !exported.contains_key(m.as_str()) {
                let ns = fleet.hub_namespace(m);
                let api: Api<InternalServiceExport> = Api::namespaced(hub.clone(), &ns);
                if api.get_opt(&probe).await?.is_some() {
                    exported.insert(m, killed.elapsed());
                }
            }
        }
        if taken.len() == orphans.len() && exported.len() == orphans.len() {
            let sorted = |m: BTreeMap<&str, Duration>| {
                let mut v: Vec<Duration> = m.into_values().collect();
                v.sort();
                v
            };
            return Ok((sorted(taken), sorted(exported), now));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The hub's own count of ISE DELETEs (`apiserver_request_total`).
async fn ise_deletes(hub: &kube::Client) -> anyhow::Result<f64> {
    let text = hub
        .request_text(http::Request::get("/metrics").body(vec![])?)
        .await
        .context("hub /metrics")?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"internalserviceexports\"")
                && l.contains("verb=\"DELETE\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

async fn create_probe(client: kube::Client) -> anyhow::Result<()> {
    create_pair(client, PROBE.to_string()).await
}

/// The report as a markdown table.
pub fn markdown(r: &Report) -> String {
    let deletes = if r.ise_deletes == 0.0 {
        "0 ✓".to_string()
    } else {
        format!("{} ✗", r.ise_deletes)
    };
    format!(
        "### Failover: kill -9 of the busiest of {replicas} sharded replicas ({members} members, {exports} exports each; lease {lease})\n\n\
         | figure | value |\n|---|---|\n\
         | converged (replicas start → every ISE, leases spread and still) | {converged} |\n\
         | members of the killed replica | {orphaned} |\n\
         | members moved (lease holder changed) | {moved} |\n\
         | kill → lease held by another replica, p50 / max | {takeover} |\n\
         | kill → new export's ISE in the hub (first export by the new owner), p50 / max | {exported} |\n\
         | ISE deletes during the failover (hub apiserver) | {deletes} |\n",
        replicas = r.replicas,
        members = r.members,
        exports = r.exports,
        lease = secs(LEASE_DURATION),
        converged = secs(r.converged),
        orphaned = r.orphaned,
        moved = r.moved,
        takeover = p50_max(&r.takeover),
        exported = p50_max(&r.exported),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_flags_deletes_and_shows_percentiles() {
        let s = Duration::from_secs;
        let mut r = Report {
            members: 20,
            replicas: 3,
            exports: 10,
            converged: s(30),
            orphaned: 3,
            moved: 3,
            takeover: vec![s(15), s(16), s(17)],
            exported: vec![s(16), s(17), s(18)],
            ise_deletes: 0.0,
        };
        let table = markdown(&r);
        assert!(table.contains("| 16.0 s / 17.0 s |"), "{table}");
        assert!(table.contains("| 0 ✓ |"), "{table}");
        r.ise_deletes = 2.0;
        assert!(markdown(&r).contains("| 2 ✗ |"));
    }
}
