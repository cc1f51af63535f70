//! `--endpoint-slices` (issue #25): the `fleetnet-hub` binary running the EndpointSlice exporter
//! alone (`--controllers endpointslice`) over `members` members with `services` exported
//! Services each (ServiceExport `Valid=True`, `Conflict=False`, as the hub's verdict leaves
//! them), one EndpointSlice of `endpoints` ready endpoints per Service.
//!
//! - memory: the process's RSS once it has engaged every member with no slice yet, and once
//!   every slice is exported, each once the allocator has given back what the burst freed;
//!   per member;
//! - cold export: slices created → every EndpointSliceExport on the hub; writes counted by the
//!   apiservers (member slice annotations, hub creates);
//! - churn: one slice's addresses changed at `rate` per second, spread over every slice; the time
//!   until the hub's export carries it (seen by this harness's watch), p50/p99; writes per change;
//! - quiet: writes in a few seconds with nothing changing.

use k8s_openapi::api::discovery::v1::EndpointSlice;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetnet_bench::{
    NAMESPACE, ServerCounts, WRITE_VERBS, create_pairs, member_names, quantile, service_name,
    substrate,
};
use fleetnet_hub::api::{EndpointSliceExport, ServiceExport, ServiceExportVersion};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::{Deserialize, Serialize};

use fleetnet_testenv::Fleet;

use crate::replicas::{Replica, Spec};

/// What to run.
#[derive(Debug, Clone)]
pub struct SlicesConfig {
    pub members: usize,
    pub services: usize,
    pub endpoints: usize,
    pub rate: f64,
    pub duration: Duration,
    /// Budget flags for the binary.
    pub budget_args: Vec<String>,
    pub binary: PathBuf,
    pub timeout: Duration,
}

/// Figures of an `--endpoint-slices` run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlicesReport {
    pub members: usize,
    pub services: usize,
    pub endpoints: usize,
    /// RSS of the `fleetnet-hub` process, KiB: engaged with no slice, all exported.
    pub rss_engaged_kib: u64,
    pub rss_exported_kib: u64,
    /// Slices created → all exported.
    pub cold_s: f64,
    /// Writes of the cold export (member: annotations; hub: creates).
    pub cold_member_writes: u64,
    pub cold_hub_writes: u64,
    pub churn_rate: f64,
    pub changes: u64,
    pub reflected: u64,
    /// Change → export carrying it, sorted, ms.
    pub latencies_ms: Vec<f64>,
    /// Hub writes during the churn (the harness's own member patches excluded).
    pub churn_hub_writes: u64,
    pub churn_member_writes: u64,
    pub quiet_writes: u64,
}

fn ready_endpoints(addresses: &[String]) -> serde_json::Value {
    serde_json::Value::Array(
        addresses
            .iter()
            .map(|a| serde_json::json!({"addresses": [a], "conditions": {"ready": true}}))
            .collect(),
    )
}

/// The EndpointSlice of Service `service` in the bench namespace, with `addresses` ready.
pub(crate) fn slice_of(service: &str, addresses: &[String]) -> anyhow::Result<EndpointSlice> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{service}-1"), "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": service}
        },
        "addressType": "IPv4",
        "endpoints": ready_endpoints(addresses),
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))?)
}

fn addresses(member: usize, service: usize, n: usize, generation: u32) -> Vec<String> {
    (0..n)
        .map(|e| {
            format!(
                "10.{}.{}.{}",
                member % 256,
                service % 256,
                (generation as usize * n + e) % 250 + 1
            )
        })
        .collect()
}

/// Writes of `resource` the apiserver behind `client` answered (any code).
pub(crate) async fn writes_of(client: &kube::Client, resource: &str) -> anyhow::Result<u64> {
    let mut counts = ServerCounts::every_resource();
    let text = client
        .request_text(http::Request::get("/metrics").body(vec![])?)
        .await?;
    counts.add_metrics_text(&text);
    Ok(counts
        .requests
        .iter()
        .filter(|((r, verb, _), _)| r == resource && WRITE_VERBS.contains(&verb.as_str()))
        .map(|(_, n)| *n)
        .sum())
}

pub(crate) async fn sum_writes(clients: &[kube::Client], resource: &str) -> anyhow::Result<u64> {
    let mut total = 0;
    for c in clients {
        total += writes_of(c, resource).await?;
    }
    Ok(total)
}

/// Pending changes: (hub namespace, slice) → (address to see, when it was sent).
type Pending = Arc<Mutex<HashMap<(String, String), (String, Instant)>>>;

pub async fn run_slices(config: &SlicesConfig) -> anyhow::Result<SlicesReport> {
    anyhow::ensure!(config.members > 0 && config.services > 0 && config.endpoints > 0);
    let names = member_names(config.members);
    let (fleet, hub, members) = substrate(&names).await?;
    create_exports(config, &members).await?;
    let process = start_exporter(config, &fleet).await?;
    settle_memory().await;
    let rss_engaged_kib = process.rss_kib();

    let ExportWatch {
        pending,
        latencies,
        exported,
        watch,
    } = watch_exports(&hub);

    let (member_before, hub_before) = slice_writes(&members, &hub).await?;
    let created = Instant::now();
    create_slices(config, &members).await?;
    let total = config.members * config.services;
    wait_exported(&exported, total, created, config.timeout).await?;
    let cold_s = created.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (member_cold, hub_cold) = slice_writes(&members, &hub).await?;
    // The harness created the slices: one member write each.
    let cold_member_writes = member_cold - member_before - total as u64;
    let cold_hub_writes = hub_cold - hub_before;
    eprintln!("[bench] {total} slices exported in {cold_s:.2} s");
    settle_memory().await;
    let rss_exported_kib = process.rss_kib();

    // Churn: one slice's addresses changed per tick.
    let changes = churn(config, &fleet, &names, &members, &pending).await?;
    let drain = Instant::now();
    while !pending.lock().expect("lock").is_empty() && drain.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (member_churn, hub_churn) = slice_writes(&members, &hub).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet_writes = sum_writes(&members, "endpointslices").await?
        + writes_of(&hub, "endpointsliceexports").await?
        - member_churn
        - hub_churn;
    watch.abort();
    process.kill().await?;
    let mut latencies_ms = latencies.lock().expect("lock").clone();
    latencies_ms.sort_by(f64::total_cmp);
    Ok(SlicesReport {
        members: config.members,
        services: config.services,
        endpoints: config.endpoints,
        rss_engaged_kib,
        rss_exported_kib,
        cold_s,
        cold_member_writes,
        cold_hub_writes,
        churn_rate: config.rate,
        changes,
        reflected: latencies_ms.len() as u64,
        latencies_ms,
        churn_hub_writes: hub_churn - hub_cold,
        churn_member_writes: member_churn - member_cold - changes,
        quiet_writes,
    })
}

/// EndpointSlice writes the members' apiservers served and EndpointSliceExport writes the
/// hub's served, so far.
async fn slice_writes(members: &[kube::Client], hub: &kube::Client) -> anyhow::Result<(u64, u64)> {
    Ok((
        sum_writes(members, "endpointslices").await?,
        writes_of(hub, "endpointsliceexports").await?,
    ))
}

/// Waits until `total` slices are exported, `timeout` after `created` at most.
async fn wait_exported(
    exported: &Mutex<HashSet<(String, String)>>,
    total: usize,
    created: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    while exported.lock().expect("lock").len() < total {
        anyhow::ensure!(created.elapsed() < timeout, "slices not all exported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Each member's Services and their ServiceExports, every export already judged valid and
/// without conflict (the hub's verdict the EndpointSlice exporter waits for).
async fn create_exports(config: &SlicesConfig, members: &[kube::Client]) -> anyhow::Result<()> {
    for member in members {
        create_pairs(member.clone(), (0..config.services).map(service_name)).await?;
        for s in 0..config.services {
            let verdict = serde_json::json!({"status": {"conditions": [
                {"type": "Valid", "status": "True", "reason": "ServiceIsValid", "message": "",
                 "lastTransitionTime": "2026-12-05T00:00:00Z"},
                {"type": "Conflict", "status": "False", "reason": "NoConflictFound", "message": "",
                 "lastTransitionTime": "2026-12-05T00:00:00Z"}]}});
            Api::<ServiceExport>::namespaced_with(
                member.clone(),
                NAMESPACE,
                &ServiceExportVersion::V1Beta1,
            )
            .patch_status(
                &service_name(s),
                &PatchParams::default(),
                &Patch::Merge(&verdict),
            )
            .await?;
        }
    }
    Ok(())
}

/// Starts the binary running the EndpointSlice exporter only, and waits until every member
/// is ready in it.
async fn start_exporter(config: &SlicesConfig, fleet: &Fleet) -> anyhow::Result<Replica> {
    eprintln!(
        "[bench] {} members × {} exported Services; starting the EndpointSlice exporter",
        config.members, config.services
    );
    start_binary(config, fleet, "endpointslice", "slices-bench").await
}

/// Starts the binary running job `job` only (logs named `name`), and waits until every
/// member is ready in it.
pub(crate) async fn start_binary(
    config: &SlicesConfig,
    fleet: &Fleet,
    job: &str,
    name: &str,
) -> anyhow::Result<Replica> {
    let mut args = vec!["--controllers".to_string(), job.to_string()];
    args.extend(config.budget_args.iter().cloned());
    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir: fleet.member_kubeconfig_dir(),
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: None,
        args,
        rust_log: "warn".into(),
    };
    let mut process = spec.start(name)?;
    let engaged = Instant::now();
    loop {
        process.check_alive()?;
        let phases = process.members().await.unwrap_or_default();
        if phases.len() == config.members && phases.values().all(|p| p == "ready") {
            break;
        }
        anyhow::ensure!(
            engaged.elapsed() < config.timeout,
            "members not ready: {phases:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(process)
}

/// The harness's watch of every EndpointSliceExport on the hub: which slices are exported,
/// and how long each pending change took to show.
struct ExportWatch {
    pending: Pending,
    latencies: Arc<Mutex<Vec<f64>>>,
    exported: Arc<Mutex<HashSet<(String, String)>>>,
    watch: tokio::task::JoinHandle<()>,
}

fn watch_exports(hub: &kube::Client) -> ExportWatch {
    let pending: Pending = Arc::default();
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let exported = Arc::new(Mutex::new(HashSet::<(String, String)>::new()));
    let watch = {
        let (pending, latencies, exported) = (pending.clone(), latencies.clone(), exported.clone());
        let events = watcher(
            Api::<EndpointSliceExport>::all(hub.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(Ok(e)) = events.next().await {
                let key = (
                    e.metadata.namespace.clone().unwrap_or_default(),
                    e.spec.endpoint_slice_reference.name.clone(),
                );
                exported.lock().expect("lock").insert(key.clone());
                let mut pending = pending.lock().expect("lock");
                if let Some((want, since)) = pending.get(&key)
                    && e.spec
                        .endpoints
                        .iter()
                        .any(|ep| ep.addresses.contains(want))
                {
                    latencies
                        .lock()
                        .expect("lock")
                        .push(since.elapsed().as_secs_f64() * 1e3);
                    pending.remove(&key);
                }
            }
        })
    };
    ExportWatch {
        pending,
        latencies,
        exported,
        watch,
    }
}

/// Every member's slices, one per Service, created 16 at a time per member.
async fn create_slices(config: &SlicesConfig, members: &[kube::Client]) -> anyhow::Result<()> {
    for (m, member) in members.iter().enumerate() {
        let api = Api::<EndpointSlice>::namespaced(member.clone(), NAMESPACE);
        futures::stream::iter(0..config.services)
            .map(|s| {
                let api = api.clone();
                async move {
                    let slice = slice_of(&service_name(s), &addresses(m, s, config.endpoints, 0))?;
                    api.create(&PostParams::default(), &slice).await?;
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

/// Changes one slice's addresses per tick for `config.duration`, each change pending until
/// the watch sees it; returns how many changes were made.
async fn churn(
    config: &SlicesConfig,
    fleet: &Fleet,
    names: &[String],
    members: &[kube::Client],
    pending: &Pending,
) -> anyhow::Result<u64> {
    let mut generation = vec![vec![0u32; config.services]; config.members];
    let mut changes = 0u64;
    let tick = Duration::from_secs_f64(1.0 / config.rate);
    let mut ticker = tokio::time::interval(tick);
    let churn_started = Instant::now();
    while churn_started.elapsed() < config.duration {
        ticker.tick().await;
        // A fixed stride over every slice: spread, reproducible, no slice twice in a row.
        let pick = (changes as usize * 7919 + 13) % (config.members * config.services);
        let (m, s) = (pick % config.members, pick / config.members);
        generation[m][s] += 1;
        let new = addresses(m, s, config.endpoints, generation[m][s]);
        let key = (
            fleet.hub_namespace(&names[m]),
            format!("{}-1", service_name(s)),
        );
        pending
            .lock()
            .expect("lock")
            .insert(key, (new[0].clone(), Instant::now()));
        Api::<EndpointSlice>::namespaced(members[m].clone(), NAMESPACE)
            .patch(
                &format!("{}-1", service_name(s)),
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"endpoints": ready_endpoints(&new)})),
            )
            .await?;
        changes += 1;
    }
    Ok(changes)
}

/// Waits until the binary's allocator has given back what a burst freed (jemalloc's dirty
/// pages decay in about a second; 32 s leaves room), so that RSS is what the process holds.
pub(crate) async fn settle_memory() {
    tokio::time::sleep(Duration::from_secs(32)).await;
}

pub fn slices_markdown(r: &SlicesReport) -> String {
    let per_member = |kib: u64| kib as f64 / r.members as f64;
    let q = |p: f64| quantile(&r.latencies_ms, p).map_or("—".into(), |v| format!("{v:.1}"));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "EndpointSlice exporter: {} members × {} Services × {} ready endpoints",
        r.members, r.services, r.endpoints
    );
    let _ = writeln!(out, "| figure | value |\n|---|---|");
    let _ = writeln!(
        out,
        "| cold: all {} slices exported | {:.2} s |",
        r.members * r.services,
        r.cold_s
    );
    let _ = writeln!(
        out,
        "| cold writes per slice (member annotation / hub create) | {:.2} / {:.2} |",
        r.cold_member_writes as f64 / (r.members * r.services) as f64,
        r.cold_hub_writes as f64 / (r.members * r.services) as f64
    );
    let _ = writeln!(
        out,
        "| change → export latency p50 / p99 at {}/s ({} of {} seen) | {} / {} ms |",
        r.churn_rate,
        r.reflected,
        r.changes,
        q(0.5),
        q(0.99)
    );
    let _ = writeln!(
        out,
        "| writes per change (hub / member, harness's own excluded) | {:.2} / {:.2} |",
        r.churn_hub_writes as f64 / r.changes.max(1) as f64,
        r.churn_member_writes as f64 / r.changes.max(1) as f64
    );
    let _ = writeln!(out, "| writes in 5 quiet s | {} |", r.quiet_writes);
    let _ = writeln!(
        out,
        "| RSS of the process: engaged, no slice / all exported | {:.1} / {:.1} MiB |",
        r.rss_engaged_kib as f64 / 1024.0,
        r.rss_exported_kib as f64 / 1024.0,
    );
    let _ = writeln!(
        out,
        "| RSS per member added by {} slices ({} endpoints each) and their exports | {:+.0} KiB |",
        r.services,
        r.endpoints,
        per_member(r.rss_exported_kib.saturating_sub(r.rss_engaged_kib)),
    );
    out
}
