//! `fleetnet-bench --agents` (issue #44): fleet-networking's reference member agents and
//! fleetnet-hub side by side, on ONE substrate in one run.
//!
//! **Substrate.** A hub and M member apiservers (fleetnet-testenv) with fleet-networking's and
//! fleet's CRDs as published (`tests/fixtures/`), E Service + ServiceExport pairs in namespace
//! `bench` of every member, namespace `fleet-system` in every member (the agents' leader
//! election and fleet system namespace) and one InternalMemberCluster per member in its hub
//! namespace, `Join`, heartbeat period [`HEARTBEAT_S`].
//!
//! **Phase A, the reference agents**, as their Helm charts run them: per member one
//! `member-net-controller-manager` and one `mcs-controller-manager` (built by
//! `bench/reference-agents/build.sh`), the charts' flags (`--leader-election-namespace`,
//! `--fleet-system-namespace`, `--tls-insecure=true`, `--v=2`, `--add_dir_header`,
//! `--enable-traffic-manager-feature=false`, `--enable-networking-features=true`) and env
//! (`HUB_SERVER_URL`, `CONFIG_PATH` = a file with the hub's bearer token, `MEMBER_CLUSTER_NAME`,
//! `HUB_CERTIFICATE_AUTHORITY`), the member's kubeconfig as `KUBECONFIG`. Only the metrics and
//! probe ports differ from the chart's (one host, not one pod per agent).
//!
//! **Between the phases** the agents are stopped (SIGTERM) and what they made is removed: the
//! ServiceExports (their finalizer stripped) are deleted and created again, the Services' ports
//! set back, the hub's InternalServiceExports deleted and each InternalMemberCluster deleted and
//! created again. **Phase B** is fleetnet-hub (one replica, every job) on the same apiservers.
//!
//! **Measured, per phase:** start → all M × E ISEs on the hub; then [`settle`], then a quiet
//! window: RSS (Σ processes; per member), CPU-s/s (Σ processes), requests and writes the
//! apiservers counted (`apiserver_request_total`), InternalMemberCluster status writes
//! (heartbeats); then the fleet-size churn (Service port changes round-robin over the members)
//! with change → hub ISE latency and the hub's ISE writes per change.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fleetnet_bench::{
    Churn, ChurnReport, NAMESPACE, ServerCounts, WRITE_VERBS, churn_over_servers, create_pairs,
    member_names, scrape_every_resource,
};
use fleetnet_hub::api::{
    InternalMemberCluster, InternalServiceExport, ServiceExport, ServiceExportVersion,
};
use fleetnet_testenv::Fleet;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

pub use crate::agents_report::{Report, Side, markdown};
use crate::fleet_size::{self, Rate, Traffic};
use crate::replicas::{Replica, Spec, die_with_parent, listen_port};

/// The InternalMemberClusters' heartbeat period (fleet's default is 60 s; shorter so that the
/// quiet window holds several).
pub const HEARTBEAT_S: i32 = 15;
/// After convergence, before the quiet window: status writes, events and leader election settle.
const SETTLE: Duration = Duration::from_secs(10);
/// ... and then until no Event has been written for this long: a cold start's Events drain
/// through each member's Events budget after the ISEs are in (fleetnet-hub: 10/s per member, ~2
/// per export), and would otherwise be counted as quiet-window writes.
const EVENTS_QUIET: Duration = Duration::from_secs(5);
/// The longest settling, whatever still writes Events.
const SETTLE_MAX: Duration = Duration::from_secs(90);
/// The substrate alone, before phase A.
const BASELINE: Duration = Duration::from_secs(10);
/// The fleet system namespace of the agents' charts.
const FLEET_SYSTEM: &str = "fleet-system";

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub members: usize,
    pub exports: usize,
    pub quiet: Duration,
    pub churn: Churn,
    /// The `fleetnet-hub` binary.
    pub binary: PathBuf,
    /// Where `build.sh` put the agents.
    pub agents_dir: PathBuf,
    /// fleetnet-hub's budget flags.
    pub budget_args: Vec<String>,
    /// Bound on each phase's convergence.
    pub timeout: Duration,
}

/// Requests counted by the hub and the member apiservers at one moment.
struct Counts {
    at: Instant,
    hub: ServerCounts,
    members: ServerCounts,
}

async fn counts(setup: &Setup) -> anyhow::Result<Counts> {
    Ok(Counts {
        at: Instant::now(),
        hub: scrape_every_resource(std::slice::from_ref(&setup.hub)).await?,
        members: scrape_every_resource(&setup.members).await?,
    })
}

fn traffic(before: &Counts, after: &Counts) -> Traffic {
    let window = after.at.duration_since(before.at);
    let hub = fleet_size::rates(&after.hub, &before.hub, window);
    let members = fleet_size::rates(&after.members, &before.members, window);
    Traffic {
        window_s: window.as_secs_f64(),
        hub_per_s: fleet_size::total_per_s(&hub),
        members_per_s: fleet_size::total_per_s(&members),
        hub,
        members,
    }
}

/// Writes in `t` (hub + members) of the resources `keep` takes.
fn writes(t: &Traffic, keep: impl Fn(&str) -> bool) -> u64 {
    t.hub
        .iter()
        .chain(&t.members)
        .filter(|r: &&Rate| WRITE_VERBS.contains(&r.verb.as_str()) && keep(&r.resource))
        .map(|r| r.count)
        .sum()
}

fn say(line: impl AsRef<str>) {
    eprintln!("[agents] {}", line.as_ref());
}

/// The substrate and what both phases find on it.
struct Setup {
    fleet: Fleet,
    hub: kube::Client,
    members: Vec<kube::Client>,
    names: Vec<String>,
    services: Vec<String>,
    /// (hub namespace, ISE name) of every export.
    expected: Vec<(String, String)>,
}

fn export_name(i: usize) -> String {
    format!("ag-{i:03}")
}

async fn set_up(config: &Config) -> anyhow::Result<Setup> {
    ensure!(
        config.members > 0 && config.exports > 0,
        "--agents needs members and exports above 0"
    );
    let names = member_names(config.members);
    let fleet = Fleet::builder()
        .members(names.iter().cloned())
        .crds_dir(fleetnet_testenv::repo_root().join("tests/fixtures/fleet-networking-crds"))
        .fresh()
        .quiet()
        .start()
        .await
        .context("starting the substrate")?;
    let hub = fleet.hub().client().await?;
    let mut members = vec![];
    for n in &names {
        members.push(fleet.member(n).client().await?);
    }
    let services: Vec<String> = (0..config.exports).map(export_name).collect();
    for (name, client) in names.iter().zip(&members) {
        fleetnet_testenv::ensure_namespace(client, name, FLEET_SYSTEM).await?;
        create_pairs(client.clone(), services.iter().cloned()).await?;
        create_imc(&hub, &fleet.hub_namespace(name), name).await?;
    }
    let expected = names
        .iter()
        .flat_map(|n| {
            let ns = fleet.hub_namespace(n);
            services
                .iter()
                .map(move |s| (ns.clone(), format!("{NAMESPACE}-{s}")))
        })
        .collect();
    Ok(Setup {
        fleet,
        hub,
        members,
        names,
        services,
        expected,
    })
}

/// The member's InternalMemberCluster, `Join`, as fleet's hub makes it.
async fn create_imc(hub: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let imc: InternalMemberCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "cluster.kubernetes-fleet.io/v1beta1",
        "kind": "InternalMemberCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"state": "Join", "heartbeatPeriodSeconds": HEARTBEAT_S},
    }))?;
    Api::<InternalMemberCluster>::namespaced(hub.clone(), namespace)
        .create(&PostParams::default(), &imc)
        .await
        .with_context(|| format!("create InternalMemberCluster {namespace}/{name}"))?;
    Ok(())
}

/// The hub's bearer token, from its admin kubeconfig (the agents read it from `CONFIG_PATH`).
fn hub_token(kubeconfig: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(str::to_string)
        .with_context(|| format!("no token in {}", kubeconfig.display()))
}

/// One reference agent binary and its port flags (hub metrics, hub probe, member metrics,
/// member probe), as its `main.go` names them.
struct AgentKind {
    binary: &'static str,
    ports: [&'static str; 4],
    extra: &'static [&'static str],
}

const AGENT_KINDS: [AgentKind; 2] = [
    AgentKind {
        binary: "member-net-controller-manager",
        ports: [
            "--hub-metrics-bind-address",
            "--hub-health-probe-bind-address",
            "--member-metrics-bind-address",
            "--member-health-probe-bind-address",
        ],
        extra: &[
            "--enable-traffic-manager-feature=false",
            "--enable-networking-features=true",
        ],
    },
    AgentKind {
        binary: "mcs-controller-manager",
        ports: [
            "--hub-metrics-bind-address",
            "--hub-health-probe-bind-address",
            "--metrics-bind-address",
            "--health-probe-bind-address",
        ],
        extra: &["--enable-networking-features=true"],
    },
];

/// Starts both agents of every member.
fn start_agents(config: &Config, setup: &Setup) -> anyhow::Result<Vec<Replica>> {
    let fleet = &setup.fleet;
    let dir = fleet.scratch_dir().join("reference-agents");
    std::fs::create_dir_all(&dir)?;
    let token = dir.join("hub-token");
    std::fs::write(&token, hub_token(fleet.hub().kubeconfig_path())?)?;
    let ca = serde_json::to_value(k8s_openapi::ByteString(fleet.hub().ca_pem()?))?;
    let ca = ca.as_str().unwrap_or_default().to_string();
    let mut agents = vec![];
    for name in &setup.names {
        for kind in &AGENT_KINDS {
            let binary = config.agents_dir.join(kind.binary);
            ensure!(
                binary.is_file(),
                "no {} in {} (run bench/reference-agents/build.sh)",
                kind.binary,
                config.agents_dir.display()
            );
            let ports = [
                listen_port()?,
                listen_port()?,
                listen_port()?,
                listen_port()?,
            ];
            let log = dir.join(format!("{}-{name}.log", kind.binary));
            let mut cmd = tokio::process::Command::new(&binary);
            cmd.arg(format!("--leader-election-namespace={FLEET_SYSTEM}"))
                .arg(format!("--fleet-system-namespace={FLEET_SYSTEM}"))
                .args(["--tls-insecure=true", "--v=2", "--add_dir_header"])
                .args(kind.extra);
            for (flag, port) in kind.ports.iter().zip(ports) {
                cmd.arg(format!("{flag}=127.0.0.1:{port}"));
            }
            cmd.env("KUBECONFIG", fleet.member(name).kubeconfig_path())
                .env("HUB_SERVER_URL", fleet.hub().server())
                .env("CONFIG_PATH", &token)
                .env("MEMBER_CLUSTER_NAME", name)
                .env("HUB_CERTIFICATE_AUTHORITY", &ca)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .kill_on_drop(true);
            die_with_parent(&mut cmd);
            let child = cmd
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?;
            let pid = child.id().context("the agent has no pid")?;
            agents.push(Replica {
                name: format!("{}[{name}]", kind.binary),
                child,
                pid,
                health: format!("127.0.0.1:{}", ports[1]),
                metrics: format!("127.0.0.1:{}", ports[0]),
                log,
            });
        }
    }
    say(format!(
        "{} agents started; logs in {}",
        agents.len(),
        dir.display()
    ));
    Ok(agents)
}

fn start_hub(config: &Config, setup: &Setup) -> anyhow::Result<Vec<Replica>> {
    let fleet = &setup.fleet;
    let spec = Spec {
        binary: config.binary.clone(),
        hub_kubeconfig: fleet.hub().kubeconfig_path().to_path_buf(),
        kubeconfig_dir: fleet.member_kubeconfig_dir(),
        log_dir: fleet.scratch_dir().to_path_buf(),
        shard: None,
        args: config.budget_args.clone(),
        rust_log: "warn".into(),
    };
    Ok(vec![spec.start("fleetnet-hub")?])
}

/// Start → all ISEs on the hub (`None` past the timeout); fails when a process exits.
async fn converge(
    config: &Config,
    setup: &Setup,
    seen: &std::sync::Mutex<fleet_size::Seen>,
    processes: &mut [Replica],
    started: Instant,
) -> anyhow::Result<Option<Duration>> {
    loop {
        if let Some(t) = fleet_size::lock(seen).all_present(&setup.expected) {
            return Ok(Some(t.saturating_duration_since(started)));
        }
        for p in processes.iter_mut() {
            p.check_alive()?;
        }
        if started.elapsed() > config.timeout {
            let api: Api<InternalServiceExport> = Api::all(setup.hub.clone());
            let n = api.list_metadata(&ListParams::default()).await?.items.len();
            say(format!(
                "not converged within {:?}: {n} of {} ISEs",
                config.timeout,
                setup.expected.len()
            ));
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// At least [`SETTLE`], then until no Event was written for [`EVENTS_QUIET`], at most
/// [`SETTLE_MAX`]: how long it took.
async fn settle(setup: &Setup) -> anyhow::Result<Duration> {
    let begun = Instant::now();
    tokio::time::sleep(SETTLE).await;
    let mut last = counts(setup).await?;
    let mut still_since = Instant::now();
    while begun.elapsed() < SETTLE_MAX {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = counts(setup).await?;
        if writes(&traffic(&last, &now), |r| r == "events") > 0 {
            still_since = Instant::now();
        } else if still_since.elapsed() >= EVENTS_QUIET {
            break;
        }
        last = now;
    }
    Ok(begun.elapsed())
}

fn cpu(processes: &[Replica]) -> f64 {
    processes.iter().map(Replica::cpu_seconds).sum()
}

/// One phase: the processes `start` starts, measured, stopped.
async fn measure(
    config: &Config,
    setup: &Setup,
    name: &str,
    start: impl FnOnce(&Config, &Setup) -> anyhow::Result<Vec<Replica>>,
) -> anyhow::Result<Side> {
    // First-seen times count from a watch that has listed before anything starts.
    let (seen, _watch) = fleet_size::watch_ises(&setup.hub);
    fleet_size::wait_listed(&seen).await?;
    let s0 = counts(setup).await?;
    let started = Instant::now();
    let mut processes = start(config, setup)?;
    let convergence = converge(config, setup, &seen, &mut processes, started).await?;
    say(format!("{name}: converged in {convergence:.1?}"));
    let settled = settle(setup).await?;
    say(format!(
        "{name}: settled (no Event for {EVENTS_QUIET:?}) {settled:.1?} after convergence"
    ));
    let (q0, cpu0) = (counts(setup).await?, cpu(&processes));
    say(format!("{name}: quiet window {:?}", config.quiet));
    tokio::time::sleep(config.quiet).await;
    for p in processes.iter_mut() {
        p.check_alive()?;
    }
    let (q1, cpu1) = (counts(setup).await?, cpu(&processes));
    let rss: Vec<u64> = processes.iter().map(Replica::rss_kib).collect();
    let (cold, quiet) = (traffic(&s0, &q0), traffic(&q0, &q1));
    let window = quiet.window_s.max(1e-9);
    let heartbeats = writes(&quiet, |r| r.starts_with("internalmemberclusters"));
    let m = setup.names.len() as f64;

    let c0 = counts(setup).await?;
    let churn = churn(config, setup).await?;
    let c1 = counts(setup).await?;
    let churn_ise_writes = writes(&traffic(&c0, &c1), |r| r == "internalserviceexports");
    for p in processes {
        p.terminate().await?;
    }
    let rss_total: u64 = rss.iter().sum();
    Ok(Side {
        name: name.to_string(),
        processes: rss.len(),
        ises_expected: setup.expected.len(),
        convergence_s: convergence.map(|d| d.as_secs_f64()),
        rss_total_kib: rss_total,
        rss_per_member_kib: rss_total as f64 / m,
        rss_per_process_kib: rss,
        cpu_per_s_quiet: (cpu1 - cpu0) / window,
        cold_writes: writes(&cold, |_| true),
        quiet_writes_per_s: writes(&quiet, |_| true) as f64 / window,
        quiet_writes_no_leases_per_s: writes(&quiet, |r| r != "leases") as f64 / window,
        heartbeat_writes: heartbeats,
        heartbeat_writes_per_member_period: heartbeats as f64
            / m
            / (window / f64::from(HEARTBEAT_S)),
        cold,
        quiet,
        churn: Some(churn),
        churn_ise_writes,
    })
}

async fn churn(config: &Config, setup: &Setup) -> anyhow::Result<ChurnReport> {
    let names_of: Vec<Vec<usize>> = (0..setup.names.len()).map(|k| vec![k]).collect();
    let report = churn_over_servers(
        &setup.hub,
        &setup.fleet,
        &setup.members,
        &setup.names,
        &names_of,
        &setup.services,
        config.churn,
    )
    .await?;
    say(format!(
        "churn: {} changes, {} seen, p50 / p99 {:?} / {:?} ms",
        report.changes,
        report.reflected,
        report.quantile_ms(0.5),
        report.quantile_ms(0.99)
    ));
    Ok(report)
}

/// Removes what phase A made, so that phase B starts as cold as phase A did.
async fn reset(setup: &Setup) -> anyhow::Result<()> {
    let unfinalize = serde_json::json!({"metadata": {"finalizers": null}});
    let port = serde_json::json!({"spec": {"ports": [
        {"name": "http", "port": 80, "protocol": "TCP"}
    ]}});
    let pp = PatchParams::default();
    for client in &setup.members {
        let exports: Api<ServiceExport> =
            Api::namespaced_with(client.clone(), NAMESPACE, &ServiceExportVersion::V1Beta1);
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), NAMESPACE);
        for s in &setup.services {
            exports
                .patch_metadata(s, &pp, &Patch::Merge(&unfinalize))
                .await?;
            services.patch(s, &pp, &Patch::Merge(&port)).await?;
        }
        exports
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    for (name, client) in setup.names.iter().zip(&setup.members) {
        let ns = setup.fleet.hub_namespace(name);
        let ises: Api<InternalServiceExport> = Api::namespaced(setup.hub.clone(), &ns);
        for ise in ises.list_metadata(&ListParams::default()).await?.items {
            let ise_name = ise.metadata.name.unwrap_or_default();
            ises.patch_metadata(&ise_name, &pp, &Patch::Merge(&unfinalize))
                .await?;
        }
        ises.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        let imcs: Api<InternalMemberCluster> = Api::namespaced(setup.hub.clone(), &ns);
        imcs.patch_metadata(name, &pp, &Patch::Merge(&unfinalize))
            .await?;
        imcs.delete(name, &DeleteParams::default()).await?;
        wait_gone(&imcs, name).await?;
        create_imc(&setup.hub, &ns, name).await?;
        wait_empty(&ises).await?;
        let exports: Api<ServiceExport> =
            Api::namespaced_with(client.clone(), NAMESPACE, &ServiceExportVersion::V1Beta1);
        wait_empty(&exports).await?;
        for s in &setup.services {
            exports
                .create(
                    &PostParams::default(),
                    &ServiceExport::new(NAMESPACE, s, ServiceExportVersion::V1Beta1),
                )
                .await
                .with_context(|| format!("create ServiceExport {s} again"))?;
        }
    }
    Ok(())
}

async fn wait_gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_metadata_opt(name).await?.is_some() {
        ensure!(Instant::now() < deadline, "{name} not gone within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn wait_empty<K>(api: &Api<K>) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .is_empty()
    {
        ensure!(Instant::now() < deadline, "objects not gone within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Runs both phases.
pub async fn run(config: &Config) -> anyhow::Result<Report> {
    if !config.binary.is_file() {
        bail!("no fleetnet-hub binary at {}", config.binary.display());
    }
    let setup = set_up(config).await?;
    say(format!(
        "substrate: hub + {} members, {} exports each",
        setup.names.len(),
        setup.services.len()
    ));
    let b0 = counts(&setup).await?;
    tokio::time::sleep(BASELINE).await;
    let baseline = traffic(&b0, &counts(&setup).await?);

    let agents = measure(config, &setup, "reference agents", start_agents).await?;
    say("agents stopped; removing what they made");
    reset(&setup).await?;
    let hub = measure(config, &setup, "fleetnet-hub", start_hub).await?;
    Ok(Report {
        members: config.members,
        exports: config.exports,
        heartbeat_period_s: HEARTBEAT_S,
        baseline,
        agents,
        hub,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_token_is_read_from_the_admin_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.kubeconfig");
        std::fs::write(&path, "users:\n- name: admin\n  user:\n    token: abc123\n").unwrap();
        assert_eq!(hub_token(&path).unwrap(), "abc123");
        std::fs::write(&path, "users: []\n").unwrap();
        assert!(hub_token(&path).is_err());
    }

    #[test]
    fn writes_count_write_verbs_of_the_kept_resources() {
        let rate = |resource: &str, verb: &str, count| Rate {
            resource: resource.into(),
            verb: verb.into(),
            count,
            conflicts: 0,
            per_s: 0.0,
        };
        let t = Traffic {
            window_s: 60.0,
            hub_per_s: 0.0,
            members_per_s: 0.0,
            hub: vec![
                rate("internalmemberclusters/status", "PUT", 20),
                rate("internalserviceexports", "GET", 7),
            ],
            members: vec![rate("leases", "PUT", 36)],
        };
        assert_eq!(writes(&t, |_| true), 56);
        assert_eq!(writes(&t, |r| r != "leases"), 20);
    }
}
