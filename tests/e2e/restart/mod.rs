//! Issue #11, "a restart changes nothing": the process restarted (gracefully or with
//! `kill -9`) on a converged fleet makes no write; a kill in the middle of exporting deletes no
//! ISE and leaves exactly one per export; quick create/delete leaves nothing behind; dangling
//! ISEs are removed (another member's are not); the loser of a hub-name collision takes over;
//! a public IP listed late reaches the ISE; a member back from an outage is served at once;
//! a terminating ISE's verdict is not reflected.
//!
//! Writes are counted server-side, from each apiserver's own `apiserver_request_total`.

use crate::support;

use crate::support::arm;

use std::collections::{BTreeMap, BTreeSet};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arm::{FakeArm, FakeIp};
use fleetnet_hub::api::{
    CONDITION_CONFLICT, CONDITION_VALID, ExportedObjectReference, InternalServiceExport,
    InternalServiceExportSpec, ServicePort as IsePort,
};
use fleetnet_hub::app::{self, AppConfig, Extensions, Running};
use fleetnet_hub::azure::AzureMembers;
use fleetnet_hub::azure::{AzureConfig, AzureFleet};
use fleetnet_hub::client::Limits;
use fleetnet_hub::config::MemberConfigFile;
use fleetnet_hub::fleet::Phase;
use fleetnet_testenv::{COUNTED_RESOURCES, Fleet, WRITE_VERBS};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use support::*;

/// The member namespace most tests export from.
const NS: &str = "work";
/// The test's own finalizer, to hold an ISE while it terminates.
const HOLD_FINALIZER: &str = "test.fleetnet/hold";
/// The hub budget of the binary when nothing is to be slowed down.
const FAST_HUB: u32 = 500;

// ---------------------------------------------------------------------------------------------
// Polling, configuration, object builders.
// ---------------------------------------------------------------------------------------------

/// The in-process product with raised budgets, so setup is fast.
fn app_config(fleet: &Fleet, dir: &Path) -> AppConfig {
    init_test_logs();
    let mut config = support::app_config(fleet, dir);
    config.hub_limits = Limits {
        qps: 500.0,
        burst: 1000,
        ..Limits::default()
    };
    config.runtime.member_limits = Limits {
        qps: 200.0,
        burst: 400,
        ..Limits::default()
    };
    config.runtime.member_sync_timeout = Duration::from_secs(60);
    config
}

/// A kubeconfig directory of our own: `<member>.yaml`, a copy of each member's admin kubeconfig.
fn member_dir(fleet: &Fleet, members: &[&str]) -> PathBuf {
    let dir = fleet.scratch_dir().join("restart-kubeconfigs");
    std::fs::create_dir_all(&dir).expect("mkdir kubeconfig dir");
    for m in members {
        std::fs::copy(
            fleet.member(m).kubeconfig_path(),
            dir.join(format!("{m}.yaml")),
        )
        .expect("copy kubeconfig");
    }
    dir
}

/// A fleet of one member `m`: the fleet, a hub client, `m`'s namespace in the hub, a client of `m`.
async fn one_member(m: &str) -> (Fleet, kube::Client, String, kube::Client) {
    let fleet = Fleet::builder().members([m]).start().await.expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let hub_ns = fleet.hub_namespace(m);
    let member = fleet.member(m).client().await.expect("member client");
    (fleet, hub, hub_ns, member)
}

/// The product, in this process, exporting `fleet`'s member `m`; ready.
async fn started_in_process(fleet: &Fleet, m: &str) -> Running {
    let config = app_config(fleet, &member_dir(fleet, &[m]));
    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_app_ready(&running, &[m]).await;
    running
}

async fn wait_app_ready(running: &Running, members: &[&str]) {
    within(Duration::from_secs(60), "process ready", || async {
        let all = members.iter().all(|m| {
            running
                .state
                .member(m)
                .is_some_and(|s| s.phase == Phase::Ready)
        });
        (all && running.state.ready()).then_some(())
    })
    .await;
}

/// Creates Service + ServiceExport `ns/<name>` for every name, 16 at a time.
async fn create_pairs(client: &kube::Client, ns: &str, names: Vec<String>) {
    futures::stream::iter(names)
        .for_each_concurrent(16, |name| {
            let client = client.clone();
            async move {
                create_service(&client, &service(ns, &name, 80)).await;
                create_export(&client, ns, &name, &[]).await;
            }
        })
        .await;
}

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i:03}")).collect()
}

async fn list_ises(hub: &kube::Client, hub_ns: &str) -> Vec<InternalServiceExport> {
    ises(hub, hub_ns)
        .list(&Default::default())
        .await
        .expect("list ISEs")
        .items
}

async fn list_exports(client: &kube::Client, ns: &str) -> Vec<fleetnet_hub::api::ServiceExport> {
    exports(client, ns)
        .list(&Default::default())
        .await
        .expect("list ServiceExports")
        .items
}

fn is_valid(se: &fleetnet_hub::api::ServiceExport) -> bool {
    condition(se, CONDITION_VALID).is_some_and(|(s, _, _)| s == "True")
}

/// Every ServiceExport in `ns` of `member` has its ISE, Valid=True and a Conflict condition;
/// `expected` of them. Returns a description of what is missing, or `None` when converged.
async fn unconverged(
    hub: &kube::Client,
    hub_ns: &str,
    member: &kube::Client,
    ns: &str,
    expected: usize,
) -> Option<String> {
    let ses = list_exports(member, ns).await;
    let ise_names: BTreeSet<String> = list_ises(hub, hub_ns)
        .await
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .collect();
    let mut missing = vec![];
    if ses.len() != expected {
        missing.push(format!("{} ServiceExports, expected {expected}", ses.len()));
    }
    let no_ise = ses
        .iter()
        .filter(|se| {
            !ise_names.contains(&format!(
                "{ns}-{}",
                se.metadata.name.as_deref().unwrap_or_default()
            ))
        })
        .count();
    let not_valid = ses.iter().filter(|se| !is_valid(se)).count();
    let no_conflict = ses
        .iter()
        .filter(|se| condition(se, CONDITION_CONFLICT).is_none())
        .count();
    if no_ise + not_valid + no_conflict > 0 {
        missing.push(format!(
            "{no_ise} without ISE, {not_valid} not Valid=True, {no_conflict} without Conflict"
        ));
    }
    (!missing.is_empty()).then(|| missing.join("; "))
}

/// Waits until [`unconverged`] has nothing to say about `member`'s exports in [`NS`].
async fn wait_converged(
    hub: &kube::Client,
    hub_ns: &str,
    member: &kube::Client,
    expected: usize,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let Some(what) = unconverged(hub, hub_ns, member, NS, expected).await else {
            return started.elapsed();
        };
        assert!(
            started.elapsed() < limit,
            "{hub_ns}: not converged within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A minimal HTTP/1.1 GET: (status, body).
async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        let status = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}

// ---------------------------------------------------------------------------------------------
// Server-side write counts.
// ---------------------------------------------------------------------------------------------

/// Writes per (resource, verb, response code) as one apiserver counted them.
type Writes = BTreeMap<(String, String, String), u64>;

/// The labels and value of one `apiserver_request_total` sample.
fn request_sample(line: &str) -> Option<(BTreeMap<&str, &str>, f64)> {
    let rest = line.strip_prefix("apiserver_request_total{")?;
    let (labels, value) = rest.rsplit_once("} ")?;
    let mut map = BTreeMap::new();
    for pair in labels.split("\",") {
        let (k, v) = pair.split_once("=\"")?;
        map.insert(k, v.trim_end_matches('"'));
    }
    Some((map, value.trim().parse().ok()?))
}

async fn apiserver_metrics(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    client.request_text(req).await.expect("apiserver /metrics")
}

async fn apiserver_writes(client: &kube::Client) -> Writes {
    let text = apiserver_metrics(client).await;
    let mut writes = Writes::new();
    for (labels, value) in text.lines().filter_map(request_sample) {
        let (Some(resource), Some(verb)) = (labels.get("resource"), labels.get("verb")) else {
            continue;
        };
        if COUNTED_RESOURCES.contains(resource) && WRITE_VERBS.contains(verb) {
            let code = labels.get("code").copied().unwrap_or_default();
            *writes
                .entry((resource.to_string(), verb.to_string(), code.to_string()))
                .or_default() += value as u64;
        }
    }
    writes
}

/// The distinct `verb` labels of `apiserver_request_total`, to check the spellings.
async fn apiserver_verbs(client: &kube::Client) -> BTreeSet<String> {
    apiserver_metrics(client)
        .await
        .lines()
        .filter_map(request_sample)
        .filter_map(|(labels, _)| labels.get("verb").map(|v| v.to_string()))
        .collect()
}

/// The clusters whose writes a test counts: the hub and every member, by name.
struct Counted {
    clusters: Vec<(String, kube::Client)>,
}

impl Counted {
    async fn new(fleet: &Fleet) -> Self {
        let mut clusters = vec![(
            "hub".to_string(),
            fleet.hub().client().await.expect("hub client"),
        )];
        for m in fleet.members() {
            clusters.push((m.name().to_string(), m.client().await.expect("client")));
        }
        Self { clusters }
    }

    async fn snapshot(&self) -> BTreeMap<String, Writes> {
        let mut all = BTreeMap::new();
        for (name, client) in &self.clusters {
            all.insert(name.clone(), apiserver_writes(client).await);
        }
        all
    }

    /// Waits until no counted write happens for `quiet`; returns the counts then.
    async fn settled(&self, quiet: Duration) -> BTreeMap<String, Writes> {
        let (every, within) = (Duration::from_millis(500), Duration::from_secs(90));
        until_unchanged(every, quiet, within, || self.snapshot()).await
    }
}

/// Per cluster: (writes to ServiceExports and ISEs, Events written) between two snapshots,
/// with the detail of what changed. Failed attempts (409, 404, …) count: they are writes sent.
fn delta(
    before: &BTreeMap<String, Writes>,
    after: &BTreeMap<String, Writes>,
) -> BTreeMap<String, (u64, u64, Vec<String>)> {
    let mut out = BTreeMap::new();
    for (cluster, now) in after {
        let empty = Writes::new();
        let was = before.get(cluster).unwrap_or(&empty);
        let (mut writes, mut events, mut detail) = (0, 0, vec![]);
        for (key, n) in now {
            let d = n.saturating_sub(was.get(key).copied().unwrap_or(0));
            if d == 0 {
                continue;
            }
            let (resource, verb, code) = key;
            detail.push(format!("{verb} {resource} ({code}) +{d}"));
            if resource == "events" {
                events += d;
            } else {
                writes += d;
            }
        }
        out.insert(cluster.clone(), (writes, events, detail));
    }
    out
}

/// Requests of `verb` on `resource`, whatever their answer.
fn total(writes: &Writes, resource: &str, verb: &str) -> u64 {
    writes
        .iter()
        .filter(|((r, v, _), _)| r == resource && v == verb)
        .map(|(_, n)| n)
        .sum()
}

// ---------------------------------------------------------------------------------------------
// The real binary.
// ---------------------------------------------------------------------------------------------

/// A `fleetnet-hub run` child process; killed (SIGKILL) if dropped, e.g. when a test panics.
struct HubProcess {
    child: tokio::process::Child,
    health: SocketAddr,
    metrics: SocketAddr,
    log: PathBuf,
}

impl HubProcess {
    /// Starts the binary on fresh ports, with raised member budgets and `hub_qps` (burst twice
    /// that) for the hub.
    fn spawn(fleet: &Fleet, dir: &Path, hub_qps: u32, label: &str) -> Self {
        let health: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let log = fleet
            .scratch_dir()
            .join(format!("fleetnet-hub-{label}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let hub_kubeconfig = fleet.hub().kubeconfig_path().display().to_string();
        let dir = dir.display().to_string();
        let (metrics_arg, health_arg) = (metrics.to_string(), health.to_string());
        let (hub_qps_arg, hub_burst_arg) = (hub_qps.to_string(), (2 * hub_qps).to_string());
        let args = [
            "run",
            "--hub-kubeconfig",
            &hub_kubeconfig,
            "--kubeconfig-dir",
            &dir,
            "--metrics-bind-address",
            &metrics_arg,
            "--health-probe-bind-address",
            &health_arg,
            "--kube-api-qps",
            "200",
            "--kube-api-burst",
            "400",
            "--hub-api-qps",
            &hub_qps_arg,
            "--hub-api-burst",
            &hub_burst_arg,
        ];
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetnet-hub"))
            .args(args)
            .env("RUST_LOG", "info")
            .env("POD_NAME", format!("restart-test-{label}"))
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("FLEETNET_TRACE_SAMPLING")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn fleetnet-hub");
        println!(
            "[restart] started fleetnet-hub ({label}) pid {:?}, log {}",
            child.id(),
            log.display()
        );
        Self {
            child,
            health,
            metrics,
            log,
        }
    }

    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "fleetnet-hub exited with {status}; log:\n{}",
                self.log_tail(40)
            );
        }
    }

    /// `/readyz` answers 200 and `/members` shows every one of `members` `ready`.
    async fn wait_ready(&mut self, members: &[&str], limit: Duration) -> Duration {
        let started = Instant::now();
        let deadline = started + limit;
        loop {
            self.assert_running();
            let ready = matches!(http_get(self.health, "/readyz").await, Some((200, _)));
            let members_ready = match http_get(self.health, "/members").await {
                Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .is_some_and(|v| {
                        members
                            .iter()
                            .all(|m| v["members"][*m]["phase"].as_str() == Some("ready"))
                    }),
                _ => false,
            };
            if ready && members_ready {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "fleetnet-hub not ready within {limit:?}; /members: {:?}\nlog:\n{}",
                http_get(self.health, "/members").await,
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process's own Prometheus text.
    async fn metrics_text(&self) -> String {
        http_get(self.metrics, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// Waits (up to `limit`, without failing) until this process has reconciled at least
    /// `exports` ServiceExports of each member and none is in flight; returns what it saw.
    async fn wait_reconciled(&self, members: &[&str], exports: usize, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = self.metrics_text().await;
            let counts: Vec<(String, f64, f64)> = members
                .iter()
                .map(|m| {
                    let done = sum(
                        &text,
                        "fleetnet_reconcile_total",
                        &[&format!("member=\"{m}\"")],
                    );
                    let in_flight = sum(
                        &text,
                        "fleetnet_reconciles_in_flight",
                        &[&format!("member=\"{m}\"")],
                    );
                    (m.to_string(), done, in_flight)
                })
                .collect();
            let all = counts
                .iter()
                .all(|(_, done, in_flight)| *done >= exports as f64 && *in_flight == 0.0);
            if all || Instant::now() >= deadline {
                return format!("{counts:?}{}", if all { "" } else { " (not all reached)" });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, then waits for the exit.
    async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running");
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let status = tokio::time::timeout(Duration::from_secs(40), self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "fleetnet-hub did not exit within 40 s of SIGTERM; log:\n{}",
                    self.log_tail(40)
                )
            })
            .expect("wait");
        println!("[restart] SIGTERM: fleetnet-hub exited with {status}");
        if !status.success() {
            println!("log:\n{}", self.log_tail(40));
        }
        status
    }

    /// SIGKILL (`kill -9`), then reaps it.
    async fn kill(mut self) {
        self.child.start_kill().expect("kill -9");
        let status = self.child.wait().await.expect("wait");
        println!("[restart] SIGKILL: fleetnet-hub ended with {status}");
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- fleetnet-hub log {} (tail) ---\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
        // kill_on_drop sends SIGKILL; reap it if it is already gone.
        let _ = self.child.start_kill();
        let _ = self.child.try_wait();
    }
}

// ---------------------------------------------------------------------------------------------
// 1. A converged fleet restarted: no write, no event.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converged_fleet_restarted_gracefully_then_killed_makes_no_write_and_no_event() {
    const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];
    const EXPORTS: usize = 100;
    let fleet = Fleet::builder()
        .members(MEMBERS)
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let counted = Counted::new(&fleet).await;
    let mut clients = vec![];
    for m in MEMBERS {
        let client = fleet.member(m).client().await.expect("member client");
        namespace(&client, NS).await;
        clients.push(client);
    }
    let created = Instant::now();
    futures::future::join_all(
        clients
            .iter()
            .map(|c| create_pairs(c, NS, names("svc", 0..EXPORTS))),
    )
    .await;
    println!(
        "[restart] created {} Service+ServiceExport pairs in {:?}",
        EXPORTS * MEMBERS.len(),
        created.elapsed()
    );

    let dir = member_dir(&fleet, &MEMBERS);
    let mut process = HubProcess::spawn(&fleet, &dir, FAST_HUB, "first");
    let ready = process.wait_ready(&MEMBERS, Duration::from_secs(90)).await;
    println!("[restart] first process ready after {ready:?}");
    let started = Instant::now();
    for (m, client) in MEMBERS.iter().zip(&clients) {
        wait_converged(
            &hub,
            &fleet.hub_namespace(m),
            client,
            EXPORTS,
            Duration::from_secs(180),
        )
        .await;
    }
    println!(
        "[restart] {} exports converged {:?} after the process was ready",
        EXPORTS * MEMBERS.len(),
        started.elapsed()
    );
    let mut verbs = BTreeSet::new();
    for (cluster, client) in &counted.clusters {
        let seen = apiserver_verbs(client).await;
        println!("[restart] verb labels of apiserver_request_total on {cluster}: {seen:?}");
        verbs.extend(seen);
    }
    assert!(
        verbs.contains("POST") && verbs.iter().any(|v| WRITE_VERBS.contains(&v.as_str())),
        "unexpected verb spellings: {verbs:?}"
    );

    let converged = counted.settled(Duration::from_secs(2)).await;
    for (cluster, writes) in &converged {
        println!("[restart] {cluster} writes while exporting: {writes:?}");
    }
    assert!(
        total(&converged["hub"], "internalserviceexports", "POST")
            >= (EXPORTS * MEMBERS.len()) as u64,
        "the counting sees the product's ISE creations: {converged:?}"
    );

    /// Starts the hub again as `label`, waits for its reconcile of every export and 5 s more,
    /// and adds to `failures` each cluster that saw writes or Events since `before`.
    async fn restarted(
        fleet: &Fleet,
        dir: &Path,
        counted: &Counted,
        before: &BTreeMap<String, Writes>,
        label: &str,
        failures: &mut Vec<String>,
    ) -> HubProcess {
        let mut process = HubProcess::spawn(fleet, dir, FAST_HUB, label);
        let ready = process.wait_ready(&MEMBERS, Duration::from_secs(90)).await;
        let reconciled = process
            .wait_reconciled(&MEMBERS, EXPORTS, Duration::from_secs(60))
            .await;
        println!("[restart] {label}: ready after {ready:?}; reconciles {reconciled}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = counted.snapshot().await;
        for (cluster, (writes, events, detail)) in delta(before, &after) {
            let line = format!("{label}: {cluster}: {writes} writes, {events} events {detail:?}");
            println!("[restart] {line}");
            if writes + events > 0 {
                failures.push(line);
            }
        }
        process
    }

    let mut failures = vec![];
    let status = process.terminate().await;
    assert!(
        status.success(),
        "SIGTERM ends the process cleanly: {status}"
    );
    let process = restarted(
        &fleet,
        &dir,
        &counted,
        &converged,
        "after-sigterm",
        &mut failures,
    )
    .await;
    let before_kill = counted.snapshot().await;
    process.kill().await;
    let process = restarted(
        &fleet,
        &dir,
        &counted,
        &before_kill,
        "after-sigkill",
        &mut failures,
    )
    .await;
    let _ = process.terminate().await;
    assert!(
        failures.is_empty(),
        "a restart of a converged fleet wrote:\n{}",
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// 2. kill -9 in the middle of exporting.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_minus_9_during_creation_deletes_no_ise_and_leaves_one_per_export() {
    const M: &str = "m1";
    const FIRST: usize = 50;
    const MORE: usize = 100;
    // A slow hub budget keeps the second batch in flight long enough to be killed midway.
    const SLOW_HUB: u32 = 8;
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let counted = Counted::new(&fleet).await;
    let at_start = counted.snapshot().await;

    create_pairs(&member, NS, names("old", 0..FIRST)).await;
    let dir = member_dir(&fleet, &[M]);
    let mut process = HubProcess::spawn(&fleet, &dir, SLOW_HUB, "before-kill");
    process.wait_ready(&[M], Duration::from_secs(90)).await;
    wait_converged(&hub, &hub_ns, &member, FIRST, Duration::from_secs(90)).await;

    // The second batch, created concurrently while the process exports it.
    let creating = {
        let member = member.clone();
        tokio::spawn(async move { create_pairs(&member, NS, names("new", 0..MORE)).await })
    };
    let started = Instant::now();
    let seen = within(Duration::from_secs(90), "30 new ISEs", || {
        let hub = &hub;
        let hub_ns = &hub_ns;
        async move {
            let n = list_ises(hub, hub_ns)
                .await
                .iter()
                .filter(|i| {
                    i.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("work-new-"))
                })
                .count();
            (n >= 30).then_some(n)
        }
    })
    .await;
    process.kill().await;
    let at_kill = list_ises(&hub, &hub_ns).await.len();
    println!(
        "[restart] kill -9 after {:?}: {seen} new ISEs seen, {at_kill} ISEs in the hub",
        started.elapsed()
    );
    assert!(
        at_kill < FIRST + MORE,
        "the kill came after everything was exported ({at_kill} ISEs): nothing was interrupted"
    );
    creating.await.expect("second batch created");

    let mut process = HubProcess::spawn(&fleet, &dir, SLOW_HUB, "after-kill");
    process.wait_ready(&[M], Duration::from_secs(90)).await;
    let restarted = Instant::now();
    wait_converged(
        &hub,
        &hub_ns,
        &member,
        FIRST + MORE,
        Duration::from_secs(90),
    )
    .await;
    println!(
        "[restart] converged {:?} after the restart",
        restarted.elapsed()
    );
    let end = counted.settled(Duration::from_secs(2)).await;
    let _ = process.terminate().await;

    let deletes = total(&end["hub"], "internalserviceexports", "DELETE")
        + total(&end["hub"], "internalserviceexports", "DELETECOLLECTION")
        - total(&at_start["hub"], "internalserviceexports", "DELETE")
        - total(
            &at_start["hub"],
            "internalserviceexports",
            "DELETECOLLECTION",
        );
    let creates = total(&end["hub"], "internalserviceexports", "POST")
        - total(&at_start["hub"], "internalserviceexports", "POST");
    println!("[restart] hub: {creates} ISE creations (POST), {deletes} ISE deletions");
    assert_eq!(deletes, 0, "no ISE is ever deleted");

    let ses = list_exports(&member, NS).await;
    let want: BTreeSet<String> = ses
        .iter()
        .map(|se| format!("{NS}-{}", se.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(want.len(), FIRST + MORE);
    let all_ises = list_ises(&hub, &hub_ns).await;
    let have: Vec<String> = all_ises
        .iter()
        .filter_map(|i| i.metadata.name.clone())
        .collect();
    let have_set: BTreeSet<String> = have.iter().cloned().collect();
    assert_eq!(have.len(), have_set.len());
    assert_eq!(
        have_set.difference(&want).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "ISEs without a ServiceExport"
    );
    assert_eq!(
        want.difference(&have_set).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "ServiceExports without an ISE"
    );
    for ise in &all_ises {
        let name = ise.metadata.name.as_deref().unwrap_or_default();
        let reference = &ise.spec.service_reference;
        assert_eq!(reference.cluster_id, M, "{name}");
        assert_eq!(
            format!("{NS}-{}", reference.name),
            name,
            "{name} carries {}",
            reference.namespaced_name
        );
        assert_eq!(
            reference.namespaced_name,
            format!("{NS}/{}", reference.name)
        );
        assert!(
            ise.metadata.deletion_timestamp.is_none(),
            "{name} terminating"
        );
    }
    let invalid: Vec<_> = ses
        .iter()
        .filter(|se| !is_valid(se))
        .map(|se| (se.metadata.name.clone(), condition(se, CONDITION_VALID)))
        .collect();
    assert!(invalid.is_empty(), "not Valid=True: {invalid:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. Created and deleted at once.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_create_then_delete_leaves_no_ise_and_no_finalizer() {
    const M: &str = "m1";
    const N: usize = 50;
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let quick = names("quick", 0..N);
    futures::stream::iter(quick.clone())
        .for_each_concurrent(16, |name| {
            let member = member.clone();
            async move {
                create_service(&member, &service(NS, &name, 80)).await;
            }
        })
        .await;
    let running = started_in_process(&fleet, M).await;

    let started = Instant::now();
    futures::stream::iter(quick.clone())
        .for_each_concurrent(10, |name| {
            let member = member.clone();
            async move {
                create_export(&member, NS, &name, &[]).await;
                exports(&member, NS)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .expect("delete ServiceExport");
            }
        })
        .await;
    println!(
        "[restart] {N} ServiceExports created and deleted in {:?}",
        started.elapsed()
    );
    let gone = loop {
        let left = list_exports(&member, NS).await;
        if left.is_empty() {
            break started.elapsed();
        }
        let stuck: Vec<_> = left
            .iter()
            .map(|se| (se.metadata.name.clone(), se.metadata.finalizers.clone()))
            .collect();
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ServiceExports still there after 60 s (stuck on a finalizer?): {stuck:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("[restart] all {N} ServiceExports gone {gone:?} after the first was created");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let left: Vec<String> = list_ises(&hub, &hub_ns)
        .await
        .into_iter()
        .filter_map(|i| i.metadata.name)
        .filter(|n| n.starts_with("work-quick-"))
        .collect();
    let reconciles = sum(
        &running.metrics.encode(),
        "fleetnet_reconcile_total",
        &[&format!("member=\"{M}\"")],
    );
    println!("[restart] {reconciles} reconciles; ISEs left: {left:?}");
    assert!(
        left.is_empty(),
        "ISEs left behind by deleted exports: {left:?}"
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 4. Dangling ISEs.
// ---------------------------------------------------------------------------------------------

/// An ISE as a member exporter would write it, for `cluster_id`'s `ns/name`.
fn hand_made_ise(hub_ns: &str, cluster_id: &str, ns: &str, name: &str) -> InternalServiceExport {
    InternalServiceExport {
        api_version: Some("networking.fleet.azure.com/v1alpha1".into()),
        kind: Some("InternalServiceExport".into()),
        metadata: ObjectMeta {
            name: Some(format!("{ns}-{name}")),
            namespace: Some(hub_ns.into()),
            ..Default::default()
        },
        spec: InternalServiceExportSpec {
            ports: vec![IsePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                ..Default::default()
            }],
            service_reference: ExportedObjectReference {
                cluster_id: cluster_id.into(),
                kind: "Service".into(),
                namespace: ns.into(),
                name: name.into(),
                resource_version: "12345".into(),
                generation: 0,
                uid: "00000000-0000-0000-0000-00000000abcd".into(),
                namespaced_name: format!("{ns}/{name}"),
                api_version: Some("v1".into()),
                exported_since: Some(Time(jiff::Timestamp::now())),
            },
            ..Default::default()
        },
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangling_ise_is_removed_and_another_members_is_not() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let running = started_in_process(&fleet, M).await;
    // A real export, to know the product is at work (and must keep it).
    create_pairs(&member, NS, vec!["real".into()]).await;
    wait_ise(&hub, &hub_ns, "work-real", |_| true).await;

    let api = ises(&hub, &hub_ns);
    let created = Instant::now();
    api.create(
        &PostParams::default(),
        &hand_made_ise(&hub_ns, M, NS, "ghost"),
    )
    .await
    .expect("create dangling ISE");
    api.create(
        &PostParams::default(),
        &hand_made_ise(&hub_ns, "someone-else", NS, "other"),
    )
    .await
    .expect("create another member's ISE");
    let gone = within(Duration::from_secs(90), "work-ghost deleted", || {
        let api = api.clone();
        async move {
            api.get_opt("work-ghost")
                .await
                .ok()
                .and_then(|o| o.is_none().then(|| created.elapsed()))
        }
    })
    .await;
    println!("[restart] dangling ISE deleted {gone:?} after it was created");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let other = api.get_opt("work-other").await.expect("get");
    assert!(
        other.is_some_and(|o| o.metadata.deletion_timestamp.is_none()),
        "another member's ISE is not ours to delete"
    );
    assert!(
        api.get_opt("work-real").await.expect("get").is_some(),
        "the real export stays"
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 5. Hub-name collisions.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collision_loser_takes_over_when_the_winner_goes() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    for ns in ["a", "a-b"] {
        namespace(&member, ns).await;
    }
    let running = started_in_process(&fleet, M).await;

    // The winner: a-b/c, exported first.
    create_service(&member, &service("a-b", "c", 80)).await;
    create_export(&member, "a-b", "c", &[]).await;
    let winner = wait_ise(&hub, &hub_ns, "a-b-c", |i| {
        i.spec.service_reference.namespaced_name == "a-b/c"
    })
    .await;
    // The loser: a/b-c, same hub name.
    create_service(&member, &service("a", "b-c", 81)).await;
    create_export(&member, "a", "b-c", &[]).await;
    wait_condition(
        &member,
        "a",
        "b-c",
        CONDITION_VALID,
        "False",
        "ServiceExportNameCollision",
    )
    .await;
    let ise = ises(&hub, &hub_ns).get("a-b-c").await.expect("ISE");
    assert_eq!(ise.spec.service_reference.namespaced_name, "a-b/c");
    assert_eq!(
        ise.metadata.uid, winner.metadata.uid,
        "the winner's ISE stands"
    );

    // The winner goes; the test does not touch the loser.
    let deleted = Instant::now();
    exports(&member, "a-b")
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete the winner");
    let ise = within(Duration::from_secs(60), "a-b-c carries a/b-c", || {
        let api = ises(&hub, &hub_ns);
        async move {
            api.get_opt("a-b-c").await.ok().flatten().filter(|i| {
                i.spec.service_reference.namespaced_name == "a/b-c"
                    && i.metadata.deletion_timestamp.is_none()
            })
        }
    })
    .await;
    let took = deleted.elapsed();
    assert_eq!(
        ise.spec.ports[0].port, 81,
        "the loser's Service is exported"
    );
    let se = within(Duration::from_secs(60), "a/b-c Valid=True", || {
        let api = exports(&member, "a");
        async move {
            api.get_opt("b-c").await.ok().flatten().filter(|se| {
                condition(se, CONDITION_VALID)
                    .is_some_and(|(s, r, _)| s == "True" && r == "ServiceIsValid")
            })
        }
    })
    .await;
    println!(
        "[restart] the loser took over {took:?} after the winner's deletion; loser {:?}",
        condition(&se, CONDITION_VALID)
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 6. A public IP listed late.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_ip_that_appears_later_reaches_the_ise_without_a_service_change() {
    const M: &str = "east";
    const SUB: &str = "00000000-0000-0000-0000-0000000000e1";
    const RG: &str = "mc_east";
    const IP: &str = "20.0.0.9";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    let arm = FakeArm::start().await;
    // The group exists, the address is not in it yet.
    arm.set_ips(SUB, RG, vec![FakeIp::new("pip-other", "20.0.0.1")]);

    let config_path = fleet.scratch_dir().join("members.yaml");
    std::fs::write(
        &config_path,
        format!("members:\n  {M}:\n    azureSubscriptionId: {SUB}\n    azureResourceGroup: {RG}\n"),
    )
    .expect("member config");
    let azure = AzureFleet::new(AzureConfig {
        cache_ttl: Duration::from_secs(2),
        miss_refresh_interval: Duration::from_secs(1),
        ..arm::client_secret_config(&arm)
    })
    .expect("azure client");
    let counters = azure.stats_handle();
    let members = AzureMembers::new(
        azure,
        Some(config_path.clone()),
        MemberConfigFile::load(&config_path).expect("member config parses"),
        "unused-default-rg".into(),
    );
    let mut config = app_config(&fleet, &member_dir(&fleet, &[M]));
    config.runtime.traffic_manager = true;
    let running = app::start(
        config,
        Extensions {
            azure: Some(Arc::new(members)),
            azure_counters: Some(Arc::new(move || counters.snapshot())),
            ..Default::default()
        },
    )
    .await
    .expect("starts");
    wait_app_ready(&running, &[M]).await;

    // A LoadBalancer with its ingress IP, then its export.
    namespace(&member, "web").await;
    let mut svc = service("web", "front", 80);
    svc.spec.as_mut().expect("spec").type_ = Some("LoadBalancer".into());
    create_service(&member, &svc).await;
    let svc = assign_ingress(&member, "web", "front", IP).await;
    create_export(&member, "web", "front", &[]).await;
    wait_ise(&hub, &hub_ns, "web-front", |_| true).await;
    // The ingress IP was seen and looked up (not found): the export stands without it.
    within(
        Duration::from_secs(30),
        "the ingress IP looked up",
        || async { (arm.list_operations(SUB, RG) >= 1).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ise = ises(&hub, &hub_ns).get("web-front").await.expect("ISE");
    assert_eq!(ise.spec.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(
        ise.spec.public_ip_resource_id, None,
        "the address is not listed yet"
    );
    let se_version = exports(&member, "web")
        .get("front")
        .await
        .expect("ServiceExport")
        .metadata
        .resource_version;

    tokio::time::sleep(Duration::from_secs(20)).await;
    let lists_before = arm.list_operations(SUB, RG);
    arm.add_ip(SUB, RG, FakeIp::new("pip-front", IP));
    let added = Instant::now();
    let ise = within(
        Duration::from_secs(90),
        "publicIPResourceID on the ISE",
        || {
            let api = ises(&hub, &hub_ns);
            async move {
                api.get_opt("web-front")
                    .await
                    .ok()
                    .flatten()
                    .filter(|i| i.spec.public_ip_resource_id.is_some())
            }
        },
    )
    .await;
    println!(
        "[restart] public IP reached the ISE {:?} after it was listed ({} LISTs before, {} after)",
        added.elapsed(),
        lists_before,
        arm.list_operations(SUB, RG)
    );
    assert_eq!(
        ise.spec.public_ip_resource_id.as_deref(),
        Some(
            format!(
                "/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Network/publicIPAddresses/pip-front"
            )
            .as_str()
        )
    );
    // Nobody changed the Service; the ServiceExport's spec/metadata neither.
    let now = Api::<Service>::namespaced(member.clone(), "web")
        .get("front")
        .await
        .expect("Service");
    assert_eq!(now.metadata.resource_version, svc.metadata.resource_version);
    let se = exports(&member, "web")
        .get("front")
        .await
        .expect("ServiceExport");
    println!(
        "[restart] ServiceExport resourceVersion {:?} -> {:?} (status only, if at all)",
        se_version, se.metadata.resource_version
    );
    running.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 7. A member's apiserver down for 20 s.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_apiserver_down_20s_is_ready_within_10s_of_its_return() {
    let mut fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    let beta = fleet.member("beta").client().await.expect("beta client");
    for c in [&alpha, &beta] {
        namespace(c, NS).await;
    }
    let running = app::start(
        app_config(&fleet, &member_dir(&fleet, &["alpha", "beta"])),
        Extensions::default(),
    )
    .await
    .expect("starts");
    wait_app_ready(&running, &["alpha", "beta"]).await;
    create_pairs(&alpha, NS, vec!["before".into()]).await;
    create_pairs(&beta, NS, vec!["before".into()]).await;
    wait_ise(&hub, &fleet.hub_namespace("alpha"), "work-before", |_| true).await;
    wait_ise(&hub, &fleet.hub_namespace("beta"), "work-before", |_| true).await;

    fleet.member_mut("alpha").stop();
    let stopped = Instant::now();
    // beta keeps exporting while alpha is down.
    create_pairs(&beta, NS, vec!["during".into()]).await;
    wait_ise(&hub, &fleet.hub_namespace("beta"), "work-during", |_| true).await;
    println!(
        "[restart] beta exported {:?} into alpha's outage",
        stopped.elapsed()
    );
    let mut phases = BTreeSet::new();
    while stopped.elapsed() < Duration::from_secs(20) {
        if let Some(s) = running.state.member("alpha") {
            phases.insert(s.phase.as_str());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("[restart] alpha's phases during the outage: {phases:?}");

    fleet.member_mut("alpha").start().await.expect("alpha back");
    let back = Instant::now();
    // The apiserver serves again: a new export right away (retried should it refuse at first).
    let mut refusals = 0;
    loop {
        let svc = Api::<Service>::namespaced(alpha.clone(), NS)
            .create(&PostParams::default(), &service(NS, "after", 80))
            .await;
        match svc {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => break,
            Err(e) => {
                refusals += 1;
                assert!(
                    back.elapsed() < Duration::from_secs(30),
                    "create Service: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    loop {
        let se = fleetnet_hub::api::ServiceExport::new(NS, "after", Default::default());
        match exports(&alpha, NS)
            .create(&PostParams::default(), &se)
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => break,
            Err(e) => {
                refusals += 1;
                assert!(
                    back.elapsed() < Duration::from_secs(30),
                    "create ServiceExport: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if refusals > 0 {
        println!("[restart] alpha refused {refusals} creations right after its return");
    }
    let created_after = back.elapsed();
    // Both measured from the return, independently; observed for up to 60 s so that a late
    // recovery is reported with its time.
    let hub_api = ises(&hub, &fleet.hub_namespace("alpha"));
    let (mut ready_after, mut exported_after) = (None, None);
    while back.elapsed() < Duration::from_secs(60)
        && (ready_after.is_none() || exported_after.is_none())
    {
        if ready_after.is_none()
            && running
                .state
                .member("alpha")
                .is_some_and(|m| m.phase == Phase::Ready)
        {
            ready_after = Some(back.elapsed());
        }
        if exported_after.is_none() && matches!(hub_api.get_opt("work-after").await, Ok(Some(_))) {
            exported_after = Some(back.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.shutdown().await;
    let report = format!(
        "after alpha's return: export created at {created_after:?}, ready at {ready_after:?}, \
         exported at {exported_after:?} (None: not within 60 s)"
    );
    println!("[restart] {report}");
    let limit = Duration::from_secs(10);
    assert!(
        ready_after.is_some_and(|t| t <= limit) && exported_after.is_some_and(|t| t <= limit),
        "alpha not served within {limit:?} of its apiserver's return: {report}"
    );
}

// ---------------------------------------------------------------------------------------------
// 8. A terminating ISE's verdict.
// ---------------------------------------------------------------------------------------------

fn verdict(status: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"status": {"conditions": [{
        "type": CONDITION_CONFLICT, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}})
}

async fn write_verdict(hub: &kube::Client, hub_ns: &str, name: &str, body: &serde_json::Value) {
    ises(hub, hub_ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .expect("hub verdict");
}

/// Asserts, every 200 ms for `period`, that held's Conflict stays Unknown (pending).
async fn stays_pending(
    se_api: &Api<fleetnet_hub::api::ServiceExport>,
    period: Duration,
    why: &str,
) {
    let until = Instant::now() + period;
    while Instant::now() < until {
        let se = se_api.get("held").await.expect("ServiceExport");
        let pending = ("Unknown".into(), "ServicePendingConflictResolution".into());
        assert_eq!(conflict_of(&se), pending, "{why}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn conflict_of(se: &fleetnet_hub::api::ServiceExport) -> (String, String) {
    condition(se, CONDITION_CONFLICT)
        .map(|(s, r, _)| (s, r))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminating_ise_is_not_reflected_as_a_verdict() {
    const M: &str = "m1";
    let (fleet, hub, hub_ns, member) = one_member(M).await;
    namespace(&member, NS).await;
    let running = started_in_process(&fleet, M).await;
    create_pairs(&member, NS, vec!["held".into()]).await;
    let first = wait_ise(&hub, &hub_ns, "work-held", |_| true).await;
    let api = ises(&hub, &hub_ns);
    api.patch(
        "work-held",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": [HOLD_FINALIZER]}})),
    )
    .await
    .expect("hold finalizer");

    // Control: a verdict on a live ISE is copied.
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict("True", "ConflictFound", "work/held is in conflict (test)"),
    )
    .await;
    wait_condition(
        &member,
        NS,
        "held",
        CONDITION_CONFLICT,
        "True",
        "ConflictFound",
    )
    .await;

    // The ISE is deleted (held by the finalizer), then a new verdict lands on it.
    api.delete("work-held", &DeleteParams::default())
        .await
        .expect("delete ISE");
    let terminating = api.get("work-held").await.expect("still there");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict(
            "False",
            "NoConflictFound",
            "work/held has no conflict (test)",
        ),
    )
    .await;
    let written = Instant::now();
    let se_api = exports(&member, NS);
    let mut seen = BTreeSet::new();
    loop {
        let se = se_api.get("held").await.expect("ServiceExport");
        let c = conflict_of(&se);
        seen.insert(c.clone());
        assert_ne!(
            c.0, "False",
            "the terminating ISE's verdict was copied to the ServiceExport (seen {seen:?})"
        );
        if c == ("Unknown".into(), "ServicePendingConflictResolution".into()) {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(30),
            "Conflict not Unknown within 30 s while the ISE terminates: seen {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "[restart] Conflict Unknown {:?} after the terminating ISE's verdict; seen {seen:?}",
        written.elapsed()
    );
    // And it stays so while the ISE is held.
    stays_pending(&se_api, Duration::from_secs(3), "while the ISE terminates").await;
    let still = api.get("work-held").await.expect("held");
    assert!(still.metadata.deletion_timestamp.is_some());
    assert_eq!(still.metadata.uid, first.metadata.uid, "still the held ISE");

    // Released: the ISE goes, the product creates a new one; Conflict stays Unknown until the
    // hub speaks about the new one.
    api.patch(
        "work-held",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release finalizer");
    let released = Instant::now();
    let second = within(Duration::from_secs(60), "a new ISE", || {
        let api = api.clone();
        let old = first.metadata.uid.clone();
        async move {
            api.get_opt("work-held")
                .await
                .ok()
                .flatten()
                .filter(|i| i.metadata.uid != old && i.metadata.deletion_timestamp.is_none())
        }
    })
    .await;
    println!(
        "[restart] new ISE {:?} after the release",
        released.elapsed()
    );
    stays_pending(
        &se_api,
        Duration::from_secs(2),
        "no verdict on the new ISE yet",
    )
    .await;
    assert!(second.conditions().is_empty());
    write_verdict(
        &hub,
        &hub_ns,
        "work-held",
        &verdict(
            "False",
            "NoConflictFound",
            "work/held has no conflict (test)",
        ),
    )
    .await;
    wait_condition(
        &member,
        NS,
        "held",
        CONDITION_CONFLICT,
        "False",
        "NoConflictFound",
    )
    .await;
    running.shutdown().await;
}

/// Issue #40 item 8: cleanup is triggered only by a record the controller wrote itself, and a
/// removed member's credentials go once its cleanup is done. A Secret planted in the records'
/// namespace with the records' label and shape (member `beta`, which this process does not
/// run, and whose hub namespace holds an export) is ignored rescan after rescan: beta's export
/// stays. Then member alpha's kubeconfig is removed: its signed record is written, the cleanup
/// runs, and the record (alpha's kubeconfig) is deleted; the record key Secret stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_cleanup_record_is_not_acted_on_and_a_real_one_is_deleted_when_done() {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ListParams;
    let fleet = Fleet::builder()
        .members(["alpha", "beta"])
        .start()
        .await
        .expect("fleet");
    let hub = fleet.hub().client().await.expect("hub client");
    let alpha = fleet.member("alpha").client().await.expect("alpha client");
    let dir = member_dir(&fleet, &["alpha"]);
    let mut config = app_config(&fleet, &dir);
    config.runtime.cleanup_on_remove = true;
    config.runtime.rescan_interval = Duration::from_secs(1);
    let records: Api<Secret> = Api::namespaced(hub.clone(), &config.runtime.records_namespace);
    let prefix = config.runtime.records_prefix.clone();

    // Beta's export, written by whatever serves beta (not this process).
    let beta_ns = fleet.hub_namespace("beta");
    ises(&hub, &beta_ns)
        .create(
            &PostParams::default(),
            &hand_made_ise(&beta_ns, "beta", NS, "web"),
        )
        .await
        .expect("beta's ISE");
    // The planted record: the records' label, name and shape, a MAC made up.
    let planted = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}-cleanup-beta-planted")),
            labels: Some([("fleetnet.azure.com/cleanup-of".to_string(), prefix.clone())].into()),
            annotations: Some(
                [("fleetnet.azure.com/member".to_string(), "beta".to_string())].into(),
            ),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "mac".to_string(),
            ByteString(vec![0; 32]),
        )])),
        ..Default::default()
    };
    records
        .create(&PostParams::default(), &planted)
        .await
        .expect("plant");

    let running = app::start(config, Extensions::default())
        .await
        .expect("starts");
    wait_app_ready(&running, &["alpha"]).await;
    namespace(&alpha, NS).await;
    create_service(&alpha, &service(NS, "web", 80)).await;
    create_export(&alpha, NS, "web", &[]).await;
    let alpha_ns = fleet.hub_namespace("alpha");
    wait_ise(&hub, &alpha_ns, &format!("{NS}-web"), |_| true).await;
    // Several rescans (1 s apart) have listed the planted record by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let beta_exported = || async {
        ises(&hub, &beta_ns)
            .get_opt(&format!("{NS}-web"))
            .await
            .expect("get beta's ISE")
            .is_some()
    };
    assert!(
        beta_exported().await,
        "beta's export must not be withdrawn on a planted record"
    );
    assert!(
        running.state.cleanups().is_empty(),
        "a planted record is no pending cleanup: {:?}",
        running.state.cleanups()
    );
    let planted_name = planted.metadata.name.clone().unwrap_or_default();
    assert!(
        records.get_opt(&planted_name).await.expect("get").is_some(),
        "nothing acted on it, not even its deletion"
    );

    // Alpha removed: its record is written (signed), acted on, and deleted when done.
    std::fs::remove_file(dir.join("alpha.yaml")).expect("remove alpha");
    wait_ise_gone(&hub, &alpha_ns, &format!("{NS}-web")).await;
    let selector = ListParams::default().labels(&format!("fleetnet.azure.com/cleanup-of={prefix}"));
    within(
        Duration::from_secs(60),
        "alpha's finalizers removed and its record (its kubeconfig) deleted",
        || async {
            let left: Vec<String> = records
                .list(&selector)
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            let finalized = exports(&alpha, NS)
                .list(&Default::default())
                .await
                .ok()?
                .items
                .iter()
                .all(|se| !se.has_cleanup_finalizer());
            (left == [planted_name.clone()] && finalized && running.state.cleanups().is_empty())
                .then_some(())
        },
    )
    .await;
    let key = records
        .get_opt(&format!("{prefix}-record-key"))
        .await
        .expect("get key")
        .expect("the record key Secret was created on first need");
    assert_eq!(key.immutable, Some(true));
    assert!(beta_exported().await, "beta's export still there");
    running.shutdown().await;
}
