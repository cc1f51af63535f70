//! Shared by the integration tests: a substrate fleet with one exporter per member, counted
//! clients, object builders and polling helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetnet_hub::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use fleetnet_hub::client::{self, ClientStats, Limits};
use fleetnet_hub::export::feed::ServiceExportFeed;
use fleetnet_hub::export::{MemberExporter, NoObserver, PublicIpLookup, Settings, Synced};
use fleetnet_testenv::Fleet;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::api::{Api, ObjectMeta, PostParams};

/// How long a test waits for convergence before failing.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// One member's running exporter and the counters of its clients.
pub struct RunningExporter {
    pub member_stats: Arc<ClientStats>,
    pub hub_stats: Arc<ClientStats>,
    pub synced: Synced,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl RunningExporter {
    /// Member + hub writes, Events not counted.
    pub fn writes(&self) -> u64 {
        self.member_stats.writes_excluding_events() + self.hub_stats.writes_excluding_events()
    }

    /// Stops the controller and waits for it to finish.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
}

impl Drop for RunningExporter {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Options of an exporter started by a test.
#[derive(Clone, Default)]
pub struct ExporterOptions {
    pub traffic_manager: bool,
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// A kubeconfig to use for the member instead of the admin one.
    pub member_kubeconfig: Option<std::path::PathBuf>,
    pub hub_kubeconfig: Option<std::path::PathBuf>,
    pub version: Option<ServiceExportVersion>,
    /// Limits of the member client (default: generous, so tests are not throttled).
    pub member_limits: Option<Limits>,
    /// Events through a client of their own with these limits (default: the member client).
    pub events_limits: Option<Limits>,
    /// The member's quotas (default: the flags' defaults).
    pub quotas: fleetnet_hub::export::Quotas,
    /// Resource groups a Service may name besides `rg-default` (the member's allowlist).
    pub allowed_resource_groups: Vec<String>,
}

/// Starts an exporter for `member` of `fleet`, with counting clients, and waits for its sync.
pub async fn start_exporter(fleet: &Fleet, member: &str, opts: ExporterOptions) -> RunningExporter {
    init_test_logs();
    let member_kubeconfig = opts
        .member_kubeconfig
        .clone()
        .unwrap_or_else(|| fleet.member(member).kubeconfig_path().to_path_buf());
    let hub_kubeconfig = opts
        .hub_kubeconfig
        .clone()
        .unwrap_or_else(|| fleet.hub().kubeconfig_path().to_path_buf());
    let member_stats = Arc::new(ClientStats::default());
    let hub_stats = Arc::new(ClientStats::default());
    let limits = opts.member_limits.clone().unwrap_or(Limits {
        qps: 200.0,
        burst: 400,
        ..Limits::default()
    });
    let member_client =
        limited_client(member, &member_kubeconfig, &limits, member_stats.clone()).await;
    let hub_client = counted_client("hub", &hub_kubeconfig, hub_stats.clone()).await;
    let events_client = match &opts.events_limits {
        Some(limits) => limited_client(member, &member_kubeconfig, limits, Arc::default()).await,
        None => member_client.clone(),
    };
    let mut feed = ServiceExportFeed::watch(
        &member_client,
        opts.version.unwrap_or_default(),
        member,
        Arc::new(NoObserver),
    );
    let exporter = MemberExporter {
        member: member.to_string(),
        events_client,
        member_client,
        hub_client,
        hub_namespace: fleet.hub_namespace(member),
        exports: feed.subscribe(0),
        settings: Settings {
            member: member.to_string(),
            traffic_manager: opts.traffic_manager,
            default_resource_group: "rg-default".into(),
            quotas: opts.quotas,
            allowed_resource_groups: opts.allowed_resource_groups.clone(),
        },
        public_ips: opts.public_ips.clone(),
        claim: fleetnet_hub::ownership::Claim::of(fleetnet_hub::ownership::Fence::open()),
        observer: Arc::new(NoObserver),
        instance: "test".into(),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (run, synced) = exporter.start(async move {
        let _ = stop_rx.await;
    });
    let feed = feed.run(std::future::pending());
    let task = tokio::spawn(async move {
        // The feed runs as long as the exporter.
        tokio::select! {
            () = run => {}
            () = feed => {}
        }
    });
    tokio::time::timeout(CONVERGE, synced.wait())
        .await
        .expect("exporter watches synced");
    RunningExporter {
        member_stats,
        hub_stats,
        synced,
        stop: Some(stop_tx),
        task: Some(task),
    }
}

/// Logs of the code under test, shown for failed tests (level from RUST_LOG, default warn).
pub fn init_test_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A client for `kubeconfig` with fleetnet-hub's counting stack.
pub async fn counted_client(
    name: &str,
    kubeconfig: &std::path::Path,
    stats: Arc<ClientStats>,
) -> kube::Client {
    limited_client(
        name,
        kubeconfig,
        &Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        stats,
    )
    .await
}

/// A client for `kubeconfig` through a limiter of `limits`.
pub async fn limited_client(
    name: &str,
    kubeconfig: &std::path::Path,
    limits: &Limits,
    stats: Arc<ClientStats>,
) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig valid");
    client::build(name, config, limits, stats).expect("client")
}

/// A ClusterIP Service with one port.
pub fn service(ns: &str, name: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates a namespace in a cluster (idempotent).
pub async fn namespace(client: &kube::Client, ns: &str) {
    fleetnet_testenv::ensure_namespace(client, "test", ns)
        .await
        .expect("namespace");
}

pub async fn create_service(client: &kube::Client, svc: &Service) -> Service {
    let ns = svc.metadata.namespace.as_deref().expect("namespace");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await
        .expect("create service")
}

pub async fn create_export(
    client: &kube::Client,
    ns: &str,
    name: &str,
    annotations: &[(&str, &str)],
) -> ServiceExport {
    let mut se = ServiceExport::new(ns, name, ServiceExportVersion::V1Beta1);
    if !annotations.is_empty() {
        se.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
    }
    exports(client, ns)
        .create(&PostParams::default(), &se)
        .await
        .expect("create ServiceExport")
}

pub fn exports(client: &kube::Client, ns: &str) -> Api<ServiceExport> {
    Api::namespaced_with(client.clone(), ns, &ServiceExportVersion::V1Beta1)
}

pub fn ises(hub: &kube::Client, ns: &str) -> Api<InternalServiceExport> {
    Api::namespaced(hub.clone(), ns)
}

/// Polls `probe` until it returns `Some`, or panics after `CONVERGE` with `what`.
pub async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(CONVERGE, what, probe).await
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `limit` with `what`.
pub async fn within<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the cloud provider does when the load balancer of Service `ns/name` is ready.
pub async fn assign_ingress(member: &kube::Client, ns: &str, name: &str, ip: &str) -> Service {
    Api::<Service>::namespaced(member.clone(), ns)
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                &serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}),
            ),
        )
        .await
        .expect("LB status")
}

/// The condition `type_` of a ServiceExport as (status, reason, message).
pub fn condition(se: &ServiceExport, type_: &str) -> Option<(String, String, String)> {
    se.conditions()
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the export's condition `type_` has `status` and `reason`; returns the export.
pub async fn wait_condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> ServiceExport {
    let api = exports(client, ns);
    eventually(&format!("{ns}/{name} {type_}={status} ({reason})"), || {
        let api = api.clone();
        async move {
            let se = api.get_opt(name).await.ok().flatten()?;
            let (s, r, _) = condition(&se, type_)?;
            (s == status && r == reason).then_some(se)
        }
    })
    .await
}

/// Waits for the ISE `name` in `ns` to satisfy `pred`.
pub async fn wait_ise(
    hub: &kube::Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&InternalServiceExport) -> bool,
) -> InternalServiceExport {
    let api = ises(hub, ns);
    let pred = &pred;
    eventually(&format!("ISE {ns}/{name}"), || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok().flatten().filter(|i| pred(i)) }
    })
    .await
}

/// Waits until the ISE `name` is gone from `ns`.
pub async fn wait_ise_gone(hub: &kube::Client, ns: &str, name: &str) {
    wait_gone(&ises(hub, ns), name).await;
}

/// Waits until `api` answers that `name` does not exist.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(
        &format!("{}/{name} deleted", api.resource_url()),
        || async {
            api.get_opt(name)
                .await
                .ok()
                .and_then(|o| o.is_none().then_some(()))
        },
    )
    .await
}

/// Waits until `writes()` stops changing for `quiet`, and returns it.
pub async fn settled_writes(exporter: &RunningExporter, quiet: Duration) -> u64 {
    let every = Duration::from_millis(100);
    until_unchanged(every, quiet, CONVERGE, || async { exporter.writes() }).await
}

/// Polls `probe` every `every` until its answer has not changed for `quiet`, and returns it;
/// fails the test if that takes longer than `within`.
pub async fn until_unchanged<T, F, Fut>(
    every: Duration,
    quiet: Duration,
    within: Duration,
    probe: F,
) -> T
where
    T: PartialEq,
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let deadline = Instant::now() + within;
    let mut last = probe().await;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(every).await;
        let now = probe().await;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(Instant::now() < deadline, "never settled within {within:?}");
    }
}

/// Waits until every member in `members` has an `exported` reconcile and none in flight, and
/// that has held for 1 s (read from the metrics a test's exporters report to).
pub async fn reconciles_settled(metrics: &fleetnet_hub::metrics::Metrics, members: &[&str]) {
    let mut quiet_since: Option<Instant> = None;
    eventually("reconciles settled", || {
        let text = metrics.encode();
        let done = members.iter().all(|m| {
            let exported =
                format!("fleetnet_reconcile_total{{member=\"{m}\",outcome=\"exported\"}}");
            let idle = format!("fleetnet_reconciles_in_flight{{member=\"{m}\"}} 0");
            text.lines().any(|l| l.starts_with(&exported)) && text.lines().any(|l| l == idle)
        });
        let ready = match (done, quiet_since) {
            (false, _) => {
                quiet_since = None;
                false
            }
            (true, None) => {
                quiet_since = Some(Instant::now());
                false
            }
            (true, Some(t)) => t.elapsed() >= Duration::from_secs(1),
        };
        async move { ready.then_some(()) }
    })
    .await;
}

/// The value of the sample `series` (name and labels exactly as encoded).
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Like [`sample`], panicking with the whole text when the series is missing.
pub fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

/// Sum of the samples of `name` whose labels contain every one of `labels`.
pub fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// A fleet of `members` that prints no readiness figures, and a hub client.
pub async fn quiet_fleet<S: Into<String>>(
    members: impl IntoIterator<Item = S>,
) -> (Fleet, kube::Client) {
    let fleet = Fleet::builder()
        .members(members)
        .quiet()
        .start()
        .await
        .expect("fleet starts");
    let hub = fleet.hub().client().await.expect("hub client");
    (fleet, hub)
}

/// Waits until the running product shows `member` in `phase`.
pub async fn wait_phase(
    running: &fleetnet_hub::app::Running,
    member: &str,
    phase: fleetnet_hub::fleet::Phase,
) {
    eventually(&format!("member {member} {phase:?}"), || async {
        running
            .state
            .member(member)
            .filter(|m| m.phase == phase)
            .map(|_| ())
    })
    .await;
}

/// The whole process's configuration for `fleet`, members from `dir`, generous hub budget,
/// no leader election; tests change what they need.
pub fn app_config(fleet: &Fleet, dir: &std::path::Path) -> fleetnet_hub::app::AppConfig {
    fleetnet_hub::app::AppConfig {
        hub_kubeconfig: Some(fleet.hub().kubeconfig_path().to_path_buf()),
        hub_limits: Limits {
            qps: 200.0,
            burst: 400,
            ..Limits::default()
        },
        runtime: fleetnet_hub::fleet::RuntimeConfig {
            kubeconfig_dir: dir.to_path_buf(),
            namespace_prefix: fleetnet_hub::fleet::registry::DEFAULT_NAMESPACE_PREFIX.into(),
            member_limits: Limits::default(),
            member_sync_timeout: Duration::from_secs(10),
            cleanup_on_remove: false,
            records_namespace: "default".into(),
            records_prefix: "fleetnet-hub".into(),
            traffic_manager: false,
            rescan_interval: Duration::from_secs(30),
            instance: "test".into(),
            trust: Default::default(),
            controllers: Default::default(),
            quotas: Default::default(),
        },
        leader_election: None,
        metrics_bind_address: "127.0.0.1:0".into(),
        health_probe_bind_address: "127.0.0.1:0".into(),
    }
}

/// `GET path` on a local HTTP endpoint: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// How the apiserver serves a rendered object's kind, from `discovery`; panics on a kind the
/// apiserver does not serve (a chart that renders it is broken).
pub fn served_as(
    discovery: &kube::discovery::Discovery,
    obj: &kube::api::DynamicObject,
) -> (
    kube::discovery::ApiResource,
    kube::discovery::ApiCapabilities,
) {
    let types = obj.types.clone().expect("apiVersion/kind");
    let gvk = kube::api::GroupVersionKind::try_from(&types).expect("gvk");
    discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("hub does not serve {gvk:?}"))
}

// ---------------------------------------------------------------------------------------------
// EndpointSlices and their exports.
// ---------------------------------------------------------------------------------------------

/// An IPv4 EndpointSlice `ns/name` of Service `service`: one ready endpoint per address, port 80.
pub fn endpoint_slice(
    ns: &str,
    name: &str,
    service: &str,
    addresses: &[&str],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "namespace": ns, "name": name,
            "labels": {"kubernetes.io/service-name": service}
        },
        "addressType": "IPv4",
        "endpoints": addresses.iter().map(|a| serde_json::json!({
            "addresses": [a], "conditions": {"ready": true}
        })).collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]
    }))
    .expect("an EndpointSlice")
}

pub fn slices(
    client: &kube::Client,
    ns: &str,
) -> Api<k8s_openapi::api::discovery::v1::EndpointSlice> {
    Api::namespaced(client.clone(), ns)
}

pub fn slice_exports(hub: &kube::Client, ns: &str) -> Api<fleetnet_hub::api::EndpointSliceExport> {
    Api::namespaced(hub.clone(), ns)
}

/// The exports in the hub namespace `hub_ns` that refer to the member slice `ns/name`.
pub async fn exports_of_slice(
    hub: &kube::Client,
    hub_ns: &str,
    ns: &str,
    name: &str,
) -> Vec<fleetnet_hub::api::EndpointSliceExport> {
    slice_exports(hub, hub_ns)
        .list(&Default::default())
        .await
        .expect("list EndpointSliceExports")
        .items
        .into_iter()
        .filter(|e| {
            let r = &e.spec.endpoint_slice_reference;
            r.namespace == ns && r.name == name
        })
        .collect()
}

/// Waits until exactly one export refers to the slice `ns/name` and it satisfies `pred`.
pub async fn wait_slice_export(
    hub: &kube::Client,
    hub_ns: &str,
    ns: &str,
    name: &str,
    pred: impl Fn(&fleetnet_hub::api::EndpointSliceExport) -> bool,
) -> fleetnet_hub::api::EndpointSliceExport {
    let pred = &pred;
    eventually(
        &format!("EndpointSliceExport of {ns}/{name}"),
        || async move {
            let mut found = exports_of_slice(hub, hub_ns, ns, name).await;
            (found.len() == 1 && pred(&found[0])).then(|| found.remove(0))
        },
    )
    .await
}

/// Waits until no export refers to the slice `ns/name`.
pub async fn wait_slice_unexported(hub: &kube::Client, hub_ns: &str, ns: &str, name: &str) {
    eventually(
        &format!("no EndpointSliceExport of {ns}/{name}"),
        || async move {
            exports_of_slice(hub, hub_ns, ns, name)
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await
}

/// The addresses an export carries, sorted.
pub fn exported_addresses(e: &fleetnet_hub::api::EndpointSliceExport) -> Vec<String> {
    let mut a: Vec<String> = e
        .spec
        .endpoints
        .iter()
        .flat_map(|e| e.addresses.iter().cloned())
        .collect();
    a.sort();
    a
}

/// The slice's fleet-unique-name annotation.
pub fn unique_name_of(s: &k8s_openapi::api::discovery::v1::EndpointSlice) -> Option<String> {
    s.metadata
        .annotations
        .as_ref()?
        .get(fleetnet_hub::api::UNIQUE_NAME_ANNOTATION)
        .cloned()
}
