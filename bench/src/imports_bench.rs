//! `--slice-imports` (issue #44): the `fleetnet-hub` binary running the EndpointSliceImport job
//! alone (`--controllers endpointsliceimport`) over `members` members, each importing
//! `services` EndpointSliceImports of `endpoints` endpoints, written on the hub as
//! fleet-networking's hub controllers write them; each member has the MultiClusterServices
//! (with their derived-service label) and derived Services the MultiClusterService job would
//! have made, [`MCS_PER_MEMBER`] of them, the imports spread over them.
//!
//! - memory: RSS engaged with no import, and with every import in the members; per member;
//! - cold import: imports created → every EndpointSlice in the members; writes counted by the
//!   apiservers (member slices, hub imports: finalizer and annotation);
//! - churn: one import's endpoints changed (a new generation) at `rate` per second; the time
//!   until the member's slice carries it (seen by this harness's watch), p50/p99; writes per
//!   change;
//! - quiet: writes in a few seconds with nothing changing.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetnet_bench::{NAMESPACE, member_names, quantile, substrate};
use fleetnet_hub::api::{DERIVED_SERVICE_LABEL, EndpointSliceImport};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::{Deserialize, Serialize};

use fleetnet_testenv::Fleet;

use crate::replicas::Replica;
use crate::slices_bench::{SlicesConfig, settle_memory, start_binary, sum_writes, writes_of};

/// The member namespace of derived Services and imported slices (the binary's default).
const FLEET_SYSTEM: &str = "fleet-system";
/// MultiClusterServices (and derived Services) per member.
const MCS_PER_MEMBER: usize = 10;

/// Figures of a `--slice-imports` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportsReport {
    pub members: usize,
    pub imports: usize,
    pub endpoints: usize,
    pub rss_engaged_kib: u64,
    pub rss_imported_kib: u64,
    /// Imports created → every slice in the members.
    pub cold_s: f64,
    /// Writes of the cold import (member: slices; hub: imports).
    pub cold_member_writes: u64,
    pub cold_hub_writes: u64,
    pub churn_rate: f64,
    pub changes: u64,
    pub reflected: u64,
    /// Change on the hub → slice carrying it in the member, sorted, ms.
    pub latencies_ms: Vec<f64>,
    /// Writes during the churn, the harness's own excluded.
    pub churn_hub_writes: u64,
    pub churn_member_writes: u64,
    pub quiet_writes: u64,
}

fn mcs_name(i: usize) -> String {
    format!("web-{i:02}")
}

fn derived_name(i: usize) -> String {
    format!("{NAMESPACE}-{}", mcs_name(i))
}

fn import_name(k: usize) -> String {
    format!("imported-{k:04}")
}

fn addresses(member: usize, k: usize, n: usize, generation: u32) -> Vec<String> {
    (0..n)
        .map(|e| {
            let last = (generation as usize * n + e) % 250 + 1;
            format!("10.{}.{}.{last}", member % 256, k % 256)
        })
        .collect()
}

fn endpoints(addresses: &[String]) -> serde_json::Value {
    addresses
        .iter()
        .map(|a| serde_json::json!({"addresses": [a]}))
        .collect()
}

/// An import as fleet-networking's hub controllers write it, of generation `generation`.
fn import_of(
    k: usize,
    addresses: &[String],
    generation: u32,
) -> anyhow::Result<EndpointSliceImport> {
    let owner = mcs_name(k % MCS_PER_MEMBER);
    let slice = format!("{owner}-{k}");
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "EndpointSliceImport",
        "metadata": {"name": import_name(k)},
        "spec": {
            "addressType": "IPv4",
            "endpoints": endpoints(addresses),
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "endpointSliceReference": {
                "clusterId": "origin", "kind": "EndpointSlice", "namespace": NAMESPACE,
                "name": slice, "resourceVersion": generation.to_string(),
                "generation": generation, "uid": format!("uid-{k}"),
                "namespacedName": format!("{NAMESPACE}/{slice}"),
                "exportedSince": jiff::Timestamp::now().to_string(),
            },
            "ownerServiceReference": {
                "namespace": NAMESPACE, "name": owner,
                "namespacedName": format!("{NAMESPACE}/{owner}"),
            },
        }
    }))?)
}

/// Pending changes: (member index, slice name) → (address to see, when it was sent).
type Pending = Arc<Mutex<HashMap<(usize, String), (String, Instant)>>>;

pub async fn run_imports(config: &SlicesConfig) -> anyhow::Result<ImportsReport> {
    anyhow::ensure!(config.members > 0 && config.services > 0 && config.endpoints > 0);
    let names = member_names(config.members);
    let (fleet, hub, members) = substrate(&names).await?;
    for member in &members {
        create_importers(member).await?;
    }
    let process = start_binary(config, &fleet, "endpointsliceimport", "imports-bench").await?;
    settle_memory().await;
    let rss_engaged_kib = process.rss_kib();
    let watch = watch_slices(&members);

    let (member_before, hub_before) = writes(&members, &hub).await?;
    let created = Instant::now();
    create_imports(config, &fleet, &names, &hub).await?;
    let total = config.members * config.services;
    while watch.imported.lock().expect("lock").len() < total {
        anyhow::ensure!(
            created.elapsed() < config.timeout,
            "imports not all in the members"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cold_s = created.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (member_cold, hub_cold) = writes(&members, &hub).await?;
    eprintln!("[bench] {total} imports in the members in {cold_s:.2} s");
    settle_memory().await;
    let rss_imported_kib = process.rss_kib();

    let changes = churn(config, &fleet, &names, &hub, &watch.pending).await?;
    let drain = Instant::now();
    while !watch.pending.lock().expect("lock").is_empty()
        && drain.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (member_churn, hub_churn) = writes(&members, &hub).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (member_quiet, hub_quiet) = writes(&members, &hub).await?;
    for task in watch.tasks {
        task.abort();
    }
    finish(process).await?;
    let mut latencies_ms = watch.latencies.lock().expect("lock").clone();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(ImportsReport {
        members: config.members,
        imports: config.services,
        endpoints: config.endpoints,
        rss_engaged_kib,
        rss_imported_kib,
        cold_s,
        cold_member_writes: member_cold - member_before,
        // The harness created the imports: one hub write each.
        cold_hub_writes: hub_cold - hub_before - total as u64,
        churn_rate: config.rate,
        changes,
        reflected: latencies_ms.len() as u64,
        latencies_ms,
        churn_hub_writes: hub_churn - hub_cold - changes,
        churn_member_writes: member_churn - member_cold,
        quiet_writes: member_quiet + hub_quiet - member_churn - hub_churn,
    })
}

async fn finish(process: Replica) -> anyhow::Result<()> {
    process.kill().await
}

/// EndpointSlice writes the members' apiservers served and EndpointSliceImport writes the
/// hub's served, so far.
async fn writes(members: &[kube::Client], hub: &kube::Client) -> anyhow::Result<(u64, u64)> {
    Ok((
        sum_writes(members, "endpointslices").await?,
        writes_of(hub, "endpointsliceimports").await?,
    ))
}

/// The member's MultiClusterServices with their derived-service label, and the derived
/// Services in the fleet system namespace, as the MultiClusterService job leaves them.
async fn create_importers(member: &kube::Client) -> anyhow::Result<()> {
    fleetnet_testenv::ensure_namespace(member, "member", NAMESPACE).await?;
    fleetnet_testenv::ensure_namespace(member, "member", FLEET_SYSTEM).await?;
    let mcs = Api::<fleetnet_hub::api::MultiClusterService>::namespaced(member.clone(), NAMESPACE);
    let services = Api::<Service>::namespaced(member.clone(), FLEET_SYSTEM);
    for i in 0..MCS_PER_MEMBER {
        let object = serde_json::from_value(serde_json::json!({
            "apiVersion": "networking.fleet.azure.com/v1alpha1", "kind": "MultiClusterService",
            "metadata": {"name": mcs_name(i), "labels": {DERIVED_SERVICE_LABEL: derived_name(i)}},
            "spec": {"serviceImport": {"name": mcs_name(i)}}
        }))?;
        mcs.create(&PostParams::default(), &object).await?;
        let service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": derived_name(i)},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        }))?;
        services.create(&PostParams::default(), &service).await?;
    }
    Ok(())
}

/// Every member's imports on the hub, 16 at a time per member.
async fn create_imports(
    config: &SlicesConfig,
    fleet: &Fleet,
    names: &[String],
    hub: &kube::Client,
) -> anyhow::Result<()> {
    for (m, name) in names.iter().enumerate() {
        let api = Api::<EndpointSliceImport>::namespaced(hub.clone(), &fleet.hub_namespace(name));
        futures::stream::iter(0..config.services)
            .map(|k| {
                let api = api.clone();
                async move {
                    let import = import_of(k, &addresses(m, k, config.endpoints, 0), 1)?;
                    api.create(&PostParams::default(), &import).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<anyhow::Result<()>>()?;
    }
    Ok(())
}

/// The harness's watches of the members' imported slices.
struct SliceWatch {
    pending: Pending,
    latencies: Arc<Mutex<Vec<f64>>>,
    imported: Arc<Mutex<HashSet<(usize, String)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn watch_slices(members: &[kube::Client]) -> SliceWatch {
    let pending: Pending = Arc::default();
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let imported = Arc::new(Mutex::new(HashSet::new()));
    let tasks = members
        .iter()
        .enumerate()
        .map(|(m, member)| {
            let (pending, latencies, imported) =
                (pending.clone(), latencies.clone(), imported.clone());
            let api = Api::<EndpointSlice>::namespaced(member.clone(), FLEET_SYSTEM);
            let events = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            tokio::spawn(async move {
                let mut events = std::pin::pin!(events);
                while let Some(Ok(slice)) = events.next().await {
                    let key = (m, slice.metadata.name.clone().unwrap_or_default());
                    imported.lock().expect("lock").insert(key.clone());
                    let mut pending = pending.lock().expect("lock");
                    if let Some((want, since)) = pending.get(&key)
                        && slice
                            .endpoints
                            .iter()
                            .flatten()
                            .any(|e| e.addresses.contains(want))
                    {
                        let ms = since.elapsed().as_secs_f64() * 1e3;
                        latencies.lock().expect("lock").push(ms);
                        pending.remove(&key);
                    }
                }
            })
        })
        .collect();
    SliceWatch {
        pending,
        latencies,
        imported,
        tasks,
    }
}

/// Changes one import's endpoints (a new generation of its slice) per tick for
/// `config.duration`; returns how many changes were made.
async fn churn(
    config: &SlicesConfig,
    fleet: &Fleet,
    names: &[String],
    hub: &kube::Client,
    pending: &Pending,
) -> anyhow::Result<u64> {
    let mut generation = vec![vec![1u32; config.services]; config.members];
    let mut changes = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / config.rate));
    let started = Instant::now();
    while started.elapsed() < config.duration {
        ticker.tick().await;
        let pick = (changes as usize * 7919 + 13) % (config.members * config.services);
        let (m, k) = (pick % config.members, pick / config.members);
        generation[m][k] += 1;
        let new = addresses(m, k, config.endpoints, generation[m][k]);
        let import = import_of(k, &new, generation[m][k])?;
        pending
            .lock()
            .expect("lock")
            .insert((m, import_name(k)), (new[0].clone(), Instant::now()));
        let patch = serde_json::json!({"spec": import.spec});
        Api::<EndpointSliceImport>::namespaced(hub.clone(), &fleet.hub_namespace(&names[m]))
            .patch(
                &import_name(k),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        changes += 1;
    }
    Ok(changes)
}

pub fn imports_markdown(r: &ImportsReport) -> String {
    let total = (r.members * r.imports) as f64;
    let per_change = |n: u64| n as f64 / r.changes.max(1) as f64;
    let q = |p: f64| quantile(&r.latencies_ms, p).map_or("—".into(), |v| format!("{v:.1}"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "EndpointSliceImport job: {} members × {} imports × {} endpoints",
        r.members, r.imports, r.endpoints
    );
    let _ = writeln!(out, "| figure | value |\n|---|---|");
    let _ = writeln!(
        out,
        "| cold: all {total} slices in the members | {:.2} s |",
        r.cold_s
    );
    let _ = writeln!(
        out,
        "| cold writes per import (member slice / hub import) | {:.2} / {:.2} |",
        r.cold_member_writes as f64 / total,
        r.cold_hub_writes as f64 / total
    );
    let _ = writeln!(
        out,
        "| hub change → member slice p50 / p99 at {}/s ({} of {} seen) | {} / {} ms |",
        r.churn_rate,
        r.reflected,
        r.changes,
        q(0.5),
        q(0.99)
    );
    let _ = writeln!(
        out,
        "| writes per change (member slice / hub import) | {:.2} / {:.2} |",
        per_change(r.churn_member_writes),
        per_change(r.churn_hub_writes)
    );
    let _ = writeln!(out, "| writes in 5 quiet s | {} |", r.quiet_writes);
    let _ = writeln!(
        out,
        "| RSS: engaged, no import / all imported | {:.1} / {:.1} MiB |",
        r.rss_engaged_kib as f64 / 1024.0,
        r.rss_imported_kib as f64 / 1024.0
    );
    let _ = writeln!(
        out,
        "| RSS per member added by {} imports | {:+.0} KiB |",
        r.imports,
        r.rss_imported_kib.saturating_sub(r.rss_engaged_kib) as f64 / r.members as f64
    );
    out
}
