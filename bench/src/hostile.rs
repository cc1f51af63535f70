//! `--hostile`: what one hostile member costs the others. `--members` healthy member names
//! (each a kubeconfig for one of `--member-servers` real apiservers, as `--fleet-size` builds
//! them) run in one replica of the `fleetnet-hub` binary, twice on the same substrate: alone,
//! then beside one hostile member (`tests/support/hostile.rs`) whose every LIST of Services
//! answers a 600 MB body. Each run reports the replica's peak RSS (VmHWM) and the healthy
//! members' export latency: `--exports` probe exports (after one to warm up) created one a
//! second, round-robin over the apiservers, each timed from its creation to its ISE in every hub
//! namespace of a name of its apiserver.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleetnet_bench::quantile;
use fleetnet_hub::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use fleetnet_testenv::Fleet;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;
use serde::Serialize;

use crate::replicas::{Replica, Spec};

// The tests' hostile member kit: the bench drives a few of its modes; tests/e2e uses the rest.
#[allow(dead_code)]
#[path = "../../tests/support/hostile.rs"]
mod kit;
// The kit's hostile server terminates TLS with the tests' listener (`super::tls` there).
#[path = "../../tests/support/tls.rs"]
mod tls;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub members: usize,
    pub member_servers: usize,
    /// Probe exports per run.
    pub probes: usize,
    pub budget_args: Vec<String>,
    pub binary: PathBuf,
    /// Bound on each wait (members ready, a probe's ISEs).
    pub timeout: Duration,
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub hostile: bool,
    /// Replica start → every healthy member `ready`.
    pub ready_s: f64,
    /// VmHWM of the replica at the end, KiB.
    pub peak_rss_kib: u64,
    /// Probe export → ISE, one sample per (probe, member name), ms.
    pub samples: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// What the hostile member's `/members` entry said at the end.
    pub hostile_phase: Option<String>,
    /// Bytes the hostile member sent, all answers together.
    pub hostile_sent_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub members: usize,
    pub member_servers: usize,
    pub probes: usize,
    pub without: Run,
    pub with: Run,
}

const NS: &str = "bench-hostile";

fn say(line: impl AsRef<str>) {
    eprintln!("[hostile] {}", line.as_ref());
}

/// Both runs on one substrate.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    anyhow::ensure!(
        config.members > 0 && (1..=config.members).contains(&config.member_servers),
        "--members must be positive and --member-servers between 1 and --members"
    );
    let servers: Vec<String> = (0..config.member_servers)
        .map(|i| format!("server{i}"))
        .collect();
    let fleet = Fleet::builder()
        .members(servers.clone())
        .fresh()
        .quiet()
        .start()
        .await
        .context("substrate")?;
    let hub = fleet.hub().client().await?;
    let names: Vec<String> = (0..config.members).map(|i| format!("m{i:03}")).collect();
    for server in &servers {
        let client = fleet.member(server).client().await?;
        fleetnet_testenv::ensure_namespace(&client, server, NS).await?;
    }
    for name in &names {
        fleetnet_testenv::ensure_namespace(&hub, "hub", &fleet.hub_namespace(name)).await?;
    }
    let seen = watch_ises(&hub);
    let without = one_run(config, &fleet, &servers, &names, None, &seen, "plain").await?;
    let hostile = kit::HostileMember::start(kit::Mode::Huge(600 << 20)).await;
    let with = one_run(
        config,
        &fleet,
        &servers,
        &names,
        Some(&hostile),
        &seen,
        "hostile",
    )
    .await?;
    Ok(Report {
        members: config.members,
        member_servers: config.member_servers,
        probes: config.probes,
        without,
        with,
    })
}

/// First time each (hub namespace, ISE name) was seen, from a watch of every ISE on the hub.
type Seen = Arc<Mutex<HashMap<(String, String), Instant>>>;

fn watch_ises(hub: &kube::Client) -> Seen {
    let seen: Seen = Arc::default();
    let into = seen.clone();
    let api: Api<InternalServiceExport> = Api::all(hub.clone());
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Ok(Some(event)) = events.try_next().await {
            if let watcher::Event::Apply(ise) | watcher::Event::InitApply(ise) = event {
                let key = (
                    ise.metadata.namespace.unwrap_or_default(),
                    ise.metadata.name.unwrap_or_default(),
                );
                let mut seen = into.lock().unwrap_or_else(|e| e.into_inner());
                seen.entry(key).or_insert_with(Instant::now);
            }
        }
    });
    seen
}

async fn one_run(
    config: &Config,
    fleet: &Fleet,
    servers: &[String],
    names: &[String],
    hostile: Option<&kit::HostileMember>,
    seen: &Seen,
    label: &str,
) -> anyhow::Result<Run> {
    let dir = kubeconfig_dir(fleet, servers, names, hostile, label)?;
    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir: dir,
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: None,
        args: config.budget_args.clone(),
        rust_log: "warn".into(),
    };
    let mut replica = spec.start(label)?;
    let started = Instant::now();
    wait_ready(&mut replica, names, config.timeout).await?;
    let ready_s = started.elapsed().as_secs_f64();
    say(format!(
        "{label}: {} members ready in {ready_s:.1} s",
        names.len()
    ));

    let mut latencies = vec![];
    // Probe 0 warms up (the first export after the start meets cold caches): not counted.
    for p in 0..=config.probes {
        let k = p % servers.len();
        let name = format!("{label}-probe-{p}");
        let member = fleet.member(&servers[k]).client().await?;
        let created = Instant::now();
        create_export(&member, &name).await?;
        let ise = format!("{NS}-{name}");
        let expected: Vec<(String, String)> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| i % servers.len() == k)
            .map(|(_, n)| (fleet.hub_namespace(n), ise.clone()))
            .collect();
        let what = (label, name.as_str());
        let done =
            await_probe(&mut replica, seen, &expected, created, what, config.timeout).await?;
        if p > 0 {
            latencies.extend(done.iter().map(|t| t.saturating_duration_since(created)));
        }
        // One probe a second, whatever the last one took.
        tokio::time::sleep(Duration::from_secs(1).saturating_sub(created.elapsed())).await;
    }
    let hostile_phase = match hostile {
        Some(_) => replica.members().await?.get("hostile").cloned(),
        None => None,
    };
    let peak_rss_kib =
        fleetnet_bench::status_kib_of(&format!("/proc/{}/status", replica.pid), "VmHWM")
            .unwrap_or(0);
    replica.terminate().await?;
    let mut ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let run = Run {
        hostile: hostile.is_some(),
        ready_s,
        peak_rss_kib,
        samples: ms.len(),
        p50_ms: quantile(&ms, 0.5),
        p99_ms: quantile(&ms, 0.99),
        hostile_phase,
        hostile_sent_bytes: hostile
            .map(|h| h.sent.load(std::sync::atomic::Ordering::Relaxed))
            .unwrap_or(0),
    };
    say(format!("{label}: {run:?}"));
    Ok(run)
}

/// The replica's kubeconfig directory for run `label`: a copy of its apiserver's kubeconfig
/// per name, and the hostile member's when there is one.
fn kubeconfig_dir(
    fleet: &Fleet,
    servers: &[String],
    names: &[String],
    hostile: Option<&kit::HostileMember>,
    label: &str,
) -> anyhow::Result<PathBuf> {
    let dir = fleet.scratch_dir().join(format!("kubeconfigs-{label}"));
    std::fs::create_dir_all(&dir)?;
    for (i, name) in names.iter().enumerate() {
        let server = fleet.member(&servers[i % servers.len()]);
        std::fs::copy(server.kubeconfig_path(), dir.join(format!("{name}.yaml")))?;
    }
    if let Some(h) = hostile {
        std::fs::write(
            dir.join("hostile.yaml"),
            h.kubeconfig("hostile", "bench-token"),
        )?;
    }
    Ok(dir)
}

/// Waits until the hub has every ISE of `expected`, those of the probe `what` (run label,
/// probe name) created at `created`; returns when each was first seen.
async fn await_probe(
    replica: &mut Replica,
    seen: &Seen,
    expected: &[(String, String)],
    created: Instant,
    (label, name): (&str, &str),
    timeout: Duration,
) -> anyhow::Result<Vec<Instant>> {
    let deadline = created + timeout;
    loop {
        replica.check_alive()?;
        let done: Vec<Instant> = {
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            expected
                .iter()
                .filter_map(|key| seen.get(key).copied())
                .collect()
        };
        if done.len() == expected.len() {
            return Ok(done);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{label}: probe {name}: {} of {} ISEs within {:?}",
            done.len(),
            expected.len(),
            timeout
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Until every name in `names` shows `ready` on the replica's `/members`.
async fn wait_ready(
    replica: &mut Replica,
    names: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        replica.check_alive()?;
        let phases = replica.members().await.unwrap_or_default();
        let ready = names
            .iter()
            .filter(|n| phases.get(*n).is_some_and(|p| p == "ready"))
            .count();
        if ready == names.len() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{ready} of {} members ready within {timeout:?}",
            names.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn create_export(member: &kube::Client, name: &str) -> anyhow::Result<()> {
    let svc = Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<Service>::namespaced(member.clone(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .with_context(|| format!("create Service {name}"))?;
    let se = ServiceExport::new(NS, name, ServiceExportVersion::V1Beta1);
    Api::<ServiceExport>::namespaced_with(member.clone(), NS, &ServiceExportVersion::V1Beta1)
        .create(&PostParams::default(), &se)
        .await
        .with_context(|| format!("create ServiceExport {name}"))?;
    Ok(())
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0} ms"))
}

/// The report as a Markdown table.
pub fn markdown(r: &Report) -> String {
    let row = |run: &Run| {
        format!(
            "| {} | {:.1} s | {} MiB | {} | {} | {} | {} |",
            if run.hostile {
                "with hostile"
            } else {
                "without"
            },
            run.ready_s,
            run.peak_rss_kib >> 10,
            run.samples,
            ms(run.p50_ms),
            ms(run.p99_ms),
            run.hostile_phase.as_deref().unwrap_or("-"),
        )
    };
    let ratio = match (r.with.p99_ms, r.without.p99_ms) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".into(),
    };
    format!(
        "### {} healthy members on {} apiservers, {} probe exports; one member answering 600 MB\n\n\
         | run | ready | peak RSS | samples | p50 | p99 | hostile member |\n|---|---|---|---|---|---|---|\n{}\n{}\n\n\
         Healthy p99 with / without: {ratio}; the hostile member sent {} MiB in all.\n",
        r.members,
        r.member_servers,
        r.probes,
        row(&r.without),
        row(&r.with),
        r.with.hostile_sent_bytes >> 20,
    )
}
