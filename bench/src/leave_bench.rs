//! `--leave` (issue #44): members leaving the fleet, every job of the shipped binary on. Each of
//! `--members` members (an apiserver each) exports [`EXPORTS`] Services (ServiceExport and
//! EndpointSlice) and imports [`MCS`] of them through MultiClusterServices; the hub's side (the
//! verdicts, see [`HubVerdicts`]) is written by this harness as fleet-networking's hub
//! controllers write it. Once all has converged, every member's InternalMemberCluster is set to
//! `Leave` at once, as fleet's hub does; measured: the set → both networking agents'
//! `Joined=False`/`AgentLeft` (the reference's leave), per member; then what is left behind in
//! the members and the hub, at `AgentLeft` and [`SETTLE`] later (must be nothing).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fleetnet_bench::{
    NAMESPACE, WriteCount, create_pairs, member_names, scrape_every_resource, service_name,
    substrate,
};
use fleetnet_hub::api::{
    AGENT_JOINED, EndpointSliceExport, InternalMemberCluster, InternalServiceExport,
    InternalServiceImport, MultiClusterService, ServiceExport, ServiceExportVersion, ServiceImport,
};
use fleetnet_hub::fleet::Controllers;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde::Serialize;

use crate::heartbeats::{AGENTS, create_imcs};
use crate::slices_bench::{SlicesConfig, slice_of, start_binary};

/// Exported Services per member (issue #44: "a member with 100 ServiceExports").
pub const EXPORTS: usize = 100;
/// MultiClusterServices per member (issue #44: "and 20 MultiClusterServices").
pub const MCS: usize = 20;
/// The member namespace of derived Services (the binary's default).
const FLEET_SYSTEM: &str = "fleet-system";
/// How long after `AgentLeft` the leftovers are counted again.
const SETTLE: Duration = Duration::from_secs(5);
/// The bound on the leave.
pub const TARGET: Duration = Duration::from_secs(15);
/// The prefix of every finalizer and annotation of ours (and fleet-networking's).
const OURS: &str = "networking.fleet.azure.com/";

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub members: usize,
    pub heartbeat_period_s: i32,
    pub budget_args: Vec<String>,
    pub binary: std::path::PathBuf,
    /// Bound on the convergence and on the leave.
    pub timeout: Duration,
}

/// What is left of the members' networking objects, summed over the members.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Leftovers {
    pub service_exports: usize,
    pub multicluster_services: usize,
    pub service_imports: usize,
    /// Services in the fleet system namespace.
    pub derived_services: usize,
    pub ises: usize,
    pub eses: usize,
    pub isis: usize,
    /// Objects (of the above, and the members' Services and EndpointSlices) with a finalizer
    /// of ours.
    pub finalized: usize,
    /// The members' EndpointSlices still carrying an annotation of ours.
    pub annotated_slices: usize,
}

impl Leftovers {
    pub fn total(&self) -> usize {
        self.service_exports
            + self.multicluster_services
            + self.service_imports
            + self.derived_services
            + self.ises
            + self.eses
            + self.isis
            + self.finalized
            + self.annotated_slices
    }

    fn add(&mut self, o: &Self) {
        self.service_exports += o.service_exports;
        self.multicluster_services += o.multicluster_services;
        self.service_imports += o.service_imports;
        self.derived_services += o.derived_services;
        self.ises += o.ises;
        self.eses += o.eses;
        self.isis += o.isis;
        self.finalized += o.finalized;
        self.annotated_slices += o.annotated_slices;
    }
}

/// Figures of a `--leave` run.
#[derive(Debug, Clone, Serialize)]
pub struct LeaveReport {
    pub members: usize,
    pub exports: usize,
    pub mcs: usize,
    /// Binary ready → everything converged.
    pub converge_s: f64,
    /// `Leave` set → `AgentLeft` for both agents, per member that left, sorted.
    pub left_s: Vec<f64>,
    /// What was there before the leave (every member).
    pub before: Leftovers,
    pub at_left: Leftovers,
    pub settled: Leftovers,
    /// The members' requests from `Leave` to the last `AgentLeft`, by resource and verb (every
    /// response code; the binary's, as the bench makes none to a member meanwhile).
    pub member_requests: Vec<WriteCount>,
    /// The hub's requests over the same span (the bench's own polls of the
    /// InternalMemberClusters among them: `internalmemberclusters` GET).
    pub hub_requests: Vec<WriteCount>,
}

/// One member's objects: (member client, hub namespace, member name).
struct Member {
    client: kube::Client,
    hub_ns: String,
    name: String,
}

/// Runs the leave bench once.
pub async fn run(config: &Config) -> anyhow::Result<LeaveReport> {
    anyhow::ensure!(config.members > 0, "--leave needs --members above 0");
    let names = member_names(config.members);
    let (fleet, hub, clients) = substrate(&names).await?;
    let members: Vec<Member> = names
        .iter()
        .zip(clients)
        .map(|(name, client)| Member {
            client,
            hub_ns: fleet.hub_namespace(name),
            name: name.clone(),
        })
        .collect();
    for m in &members {
        populate(m).await?;
    }
    let imcs = members.iter().map(|m| (m.hub_ns.clone(), m.name.clone()));
    create_imcs(&hub, imcs, config.heartbeat_period_s).await?;
    let verdicts = HubVerdicts::start(&hub, &members);
    say(format!(
        "{} members, each {EXPORTS} exports (Service, ServiceExport, EndpointSlice) and {MCS} MultiClusterServices",
        members.len()
    ));
    let mut process =
        start_binary(&slices_config(config), &fleet, &every_job(), "leave-bench").await?;
    let ready = Instant::now();
    let before = converge(config, &hub, &members).await?;
    let converge_s = ready.elapsed().as_secs_f64();
    say(format!("converged in {converge_s:.1} s: {before:?}"));

    let clients: Vec<kube::Client> = members.iter().map(|m| m.client.clone()).collect();
    let hubs = [hub.clone()];
    let (member_was, hub_was) = (
        scrape_every_resource(&clients).await?,
        scrape_every_resource(&hubs).await?,
    );
    let left_s = leave(config, &hub, &members).await?;
    let member_requests = scrape_every_resource(&clients)
        .await?
        .requests_since(&member_was);
    let hub_requests = scrape_every_resource(&hubs).await?.requests_since(&hub_was);
    let at_left = leftovers(&hub, &members).await?;
    tokio::time::sleep(SETTLE).await;
    let settled = leftovers(&hub, &members).await?;
    process.check_alive()?;
    drop(verdicts);
    process.kill().await?;
    Ok(LeaveReport {
        members: members.len(),
        exports: EXPORTS,
        mcs: MCS,
        converge_s,
        left_s,
        before,
        at_left,
        settled,
        member_requests,
        hub_requests,
    })
}

fn say(line: impl AsRef<str>) {
    eprintln!("[leave] {}", line.as_ref());
}

/// Every job of the binary, as `--controllers` spells them.
fn every_job() -> String {
    Controllers::default().to_string()
}

/// How [`start_binary`] runs the binary for this bench.
fn slices_config(config: &Config) -> SlicesConfig {
    SlicesConfig {
        members: config.members,
        services: EXPORTS,
        endpoints: 1,
        rate: 1.0,
        duration: Duration::ZERO,
        budget_args: config.budget_args.clone(),
        binary: config.binary.clone(),
        timeout: config.timeout,
    }
}

/// The member's exports, their EndpointSlices, and its MultiClusterServices.
async fn populate(m: &Member) -> anyhow::Result<()> {
    create_pairs(m.client.clone(), (0..EXPORTS).map(service_name)).await?;
    fleetnet_testenv::ensure_namespace(&m.client, "member", FLEET_SYSTEM).await?;
    let slices = Api::<EndpointSlice>::namespaced(m.client.clone(), NAMESPACE);
    let mcses = Api::<MultiClusterService>::namespaced(m.client.clone(), NAMESPACE);
    futures::stream::iter(0..EXPORTS)
        .map(|i| {
            let (slices, mcses) = (slices.clone(), mcses.clone());
            async move {
                let service = service_name(i);
                let address = format!("10.1.{}.{}", i / 250, i % 250 + 1);
                slices
                    .create(&PostParams::default(), &slice_of(&service, &[address])?)
                    .await
                    .with_context(|| format!("create EndpointSlice of {service}"))?;
                if i < MCS {
                    mcses
                        .create(&PostParams::default(), &mcs_of(&service)?)
                        .await
                        .with_context(|| format!("create MultiClusterService {service}"))?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// A MultiClusterService importing the ServiceImport of exported Service `service`.
fn mcs_of(service: &str) -> anyhow::Result<MultiClusterService> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "networking.fleet.azure.com/v1alpha1",
        "kind": "MultiClusterService",
        "metadata": {"name": service, "namespace": NAMESPACE},
        "spec": {"serviceImport": {"name": service}},
    }))?)
}

/// The hub's side, as fleet-networking's hub controllers write it: each InternalServiceImport
/// without a verdict given one (exported by its member, the exported Service's port), each
/// InternalServiceExport without a `Conflict` condition found without conflict (what the
/// EndpointSlice job waits for); watches of every one on the hub, stopped when dropped.
struct HubVerdicts(Vec<tokio::task::JoinHandle<()>>);

impl Drop for HubVerdicts {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl HubVerdicts {
    fn start(hub: &kube::Client, members: &[Member]) -> Self {
        let member_of: HashMap<String, String> = members
            .iter()
            .map(|m| (m.hub_ns.clone(), m.name.clone()))
            .collect();
        let (h, imports) = (hub.clone(), Api::<InternalServiceImport>::all(hub.clone()));
        let imports = tokio::spawn(each_applied(imports, move |isi| {
            let (hub, member_of) = (h.clone(), member_of.clone());
            async move { verdict(&hub, &member_of, isi).await }
        }));
        let (h, exports) = (hub.clone(), Api::<InternalServiceExport>::all(hub.clone()));
        let exports = tokio::spawn(each_applied(exports, move |ise| {
            let hub = h.clone();
            async move { no_conflict(&hub, ise).await }
        }));
        Self(vec![imports, exports])
    }
}

/// Runs `act` on each object a watch of `api` applies, one at a time.
async fn each_applied<K, F>(api: Api<K>, act: impl Fn(K) -> F)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let Ok(object) = event else { continue };
        if let Err(e) = act(object).await {
            eprintln!("[leave] the hub's verdict: {e:#}");
        }
    }
}

/// Writes `Conflict=False` on `ise` unless it has a `Conflict` condition or is being deleted.
async fn no_conflict(hub: &kube::Client, ise: InternalServiceExport) -> anyhow::Result<()> {
    let judged = ise.conditions().iter().any(|c| c.type_ == "Conflict");
    if judged || ise.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let ns = ise.metadata.namespace.clone().unwrap_or_default();
    let name = ise.metadata.name.clone().unwrap_or_default();
    let status = serde_json::json!({"status": {"conditions": [{
        "type": "Conflict", "status": "False", "reason": "NoConflictFound",
        "message": format!("service {ns}/{name} is exported without conflict"),
        "observedGeneration": ise.metadata.generation.unwrap_or_default(),
        "lastTransitionTime": jiff::Timestamp::now().round(jiff::Unit::Second)?.to_string(),
    }]}});
    let api: Api<InternalServiceExport> = Api::namespaced(hub.clone(), &ns);
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r.map(|_| ()).with_context(|| format!("{ns}/{name}")),
    }
}

/// Writes the verdict on `isi` unless it has one or is being deleted.
async fn verdict(
    hub: &kube::Client,
    member_of: &HashMap<String, String>,
    mut isi: InternalServiceImport,
) -> anyhow::Result<()> {
    let has_one = isi.status.as_ref().is_some_and(|s| !s.clusters.is_empty());
    if has_one || isi.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let ns = isi.metadata.namespace.clone().unwrap_or_default();
    let name = isi.metadata.name.clone().unwrap_or_default();
    let cluster = member_of.get(&ns).cloned().unwrap_or_default();
    isi.status = Some(serde_json::from_value(serde_json::json!({
        "type": "ClusterSetIP",
        "clusters": [{"cluster": cluster}],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }))?);
    let api: Api<InternalServiceImport> = Api::namespaced(hub.clone(), &ns);
    match api
        .replace_status(&name, &PostParams::default(), &isi)
        .await
    {
        // Changed since (the watch brings it again) or gone.
        Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
        r => r.map(|_| ()).with_context(|| format!("{ns}/{name}")),
    }
}

/// Waits until every member has converged: what [`leftovers`] counts is all there (ISEs,
/// EndpointSliceExports, ServiceImports with their InternalServiceImports, derived Services),
/// and both agents are `Joined=True`; returns the counts then.
async fn converge(
    config: &Config,
    hub: &kube::Client,
    members: &[Member],
) -> anyhow::Result<Leftovers> {
    let n = members.len();
    let want = Leftovers {
        service_exports: EXPORTS * n,
        multicluster_services: MCS * n,
        service_imports: MCS * n,
        derived_services: MCS * n,
        ises: EXPORTS * n,
        eses: EXPORTS * n,
        isis: MCS * n,
        finalized: 0,
        annotated_slices: EXPORTS * n,
    };
    let started = Instant::now();
    let mut last_say = Instant::now();
    loop {
        let now = leftovers(hub, members).await?;
        let joined = joined_count(hub, members, "True", "AgentJoined").await?;
        if (Leftovers {
            finalized: 0,
            ..now.clone()
        }) == want
            && joined == n
        {
            return Ok(now);
        }
        if last_say.elapsed() > Duration::from_secs(10) {
            say(format!("converging: {now:?}, {joined}/{n} joined"));
            last_say = Instant::now();
        }
        anyhow::ensure!(
            started.elapsed() < config.timeout,
            "not converged after {:?}: {now:?}, {joined}/{n} joined",
            config.timeout
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Whether both networking agents' entries of `imc` say `Joined` `status` with `reason`.
fn both(imc: &InternalMemberCluster, status: &str, reason: &str) -> bool {
    AGENTS.iter().all(|agent| {
        imc.agent_status(agent).is_some_and(|entry| {
            entry
                .conditions
                .iter()
                .any(|c| c.type_ == AGENT_JOINED && c.status == status && c.reason == reason)
        })
    })
}

async fn joined_count(
    hub: &kube::Client,
    members: &[Member],
    status: &str,
    reason: &str,
) -> anyhow::Result<usize> {
    let mut n = 0;
    for m in members {
        let imc = Api::<InternalMemberCluster>::namespaced(hub.clone(), &m.hub_ns)
            .get(&m.name)
            .await?;
        n += usize::from(both(&imc, status, reason));
    }
    Ok(n)
}

/// Sets every member's `spec.state` to `Leave` at once; returns set → `AgentLeft`, per member
/// (sorted), polled every 50 ms.
async fn leave(
    config: &Config,
    hub: &kube::Client,
    members: &[Member],
) -> anyhow::Result<Vec<f64>> {
    let api = |m: &Member| Api::<InternalMemberCluster>::namespaced(hub.clone(), &m.hub_ns);
    let patch = serde_json::json!({"spec": {"state": "Leave"}});
    let set = Instant::now();
    futures::future::try_join_all(members.iter().map(|m| {
        let api = api(m);
        let patch = &patch;
        async move {
            api.patch(&m.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
        }
    }))
    .await?;
    say(format!("{} members set to Leave", members.len()));
    let mut left: HashMap<&str, f64> = HashMap::new();
    while left.len() < members.len() && set.elapsed() < config.timeout {
        for m in members {
            if left.contains_key(m.name.as_str()) {
                continue;
            }
            let imc = api(m).get(&m.name).await?;
            if both(&imc, "False", "AgentLeft") {
                left.insert(&m.name, set.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut left_s: Vec<f64> = left.into_values().collect();
    left_s.sort_by(f64::total_cmp);
    say(format!(
        "{}/{} members AgentLeft, the last after {:.2} s",
        left_s.len(),
        members.len(),
        left_s.last().copied().unwrap_or(f64::NAN)
    ));
    Ok(left_s)
}

/// What is there now, over every member (see [`Leftovers`]).
async fn leftovers(hub: &kube::Client, members: &[Member]) -> anyhow::Result<Leftovers> {
    let mut all = Leftovers::default();
    for m in members {
        all.add(&leftovers_of(hub, m).await?);
    }
    Ok(all)
}

/// Every object `api` lists (one page: the bench's counts are far below the server's).
async fn list<K>(api: Api<K>) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.list(&ListParams::default()).await?.items)
}

fn finalized<K: kube::Resource>(objects: &[K]) -> usize {
    objects
        .iter()
        .filter(|o| {
            o.meta()
                .finalizers
                .iter()
                .flatten()
                .any(|f| f.starts_with(OURS))
        })
        .count()
}

async fn leftovers_of(hub: &kube::Client, m: &Member) -> anyhow::Result<Leftovers> {
    let c = &m.client;
    let v1beta1 = ServiceExportVersion::V1Beta1;
    let ses = list(Api::<ServiceExport>::all_with(c.clone(), &v1beta1)).await?;
    let mcses = list(Api::<MultiClusterService>::all(c.clone())).await?;
    let sis = list(Api::<ServiceImport>::all(c.clone())).await?;
    let derived = list(Api::<Service>::namespaced(c.clone(), FLEET_SYSTEM)).await?;
    let services = list(Api::<Service>::namespaced(c.clone(), NAMESPACE)).await?;
    let slices = list(Api::<EndpointSlice>::namespaced(c.clone(), NAMESPACE)).await?;
    let ises = list(Api::<InternalServiceExport>::namespaced(
        hub.clone(),
        &m.hub_ns,
    ))
    .await?;
    let eses = list(Api::<EndpointSliceExport>::namespaced(
        hub.clone(),
        &m.hub_ns,
    ))
    .await?;
    let isis = list(Api::<InternalServiceImport>::namespaced(
        hub.clone(),
        &m.hub_ns,
    ))
    .await?;
    let annotated = slices
        .iter()
        .filter(|s| {
            s.metadata
                .annotations
                .iter()
                .flatten()
                .any(|(k, _)| k.starts_with(OURS))
        })
        .count();
    Ok(Leftovers {
        service_exports: ses.len(),
        multicluster_services: mcses.len(),
        service_imports: sis.len(),
        derived_services: derived.len(),
        ises: ises.len(),
        eses: eses.len(),
        isis: isis.len(),
        finalized: finalized(&ses)
            + finalized(&mcses)
            + finalized(&sis)
            + finalized(&derived)
            + finalized(&services)
            + finalized(&slices)
            + finalized(&ises)
            + finalized(&eses)
            + finalized(&isis),
        annotated_slices: annotated,
    })
}

/// The report as a markdown table.
pub fn leave_markdown(r: &LeaveReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Leave: {} member(s), an apiserver each, each {} ServiceExports (with EndpointSlices) and {} MultiClusterServices, every job on\n",
        r.members, r.exports, r.mcs
    );
    let _ = writeln!(out, "| figure | value |\n|---|---|");
    let _ = writeln!(
        out,
        "| binary ready → converged (ISEs, EndpointSliceExports, ServiceImports and InternalServiceImports with the hub's verdict, derived Services, both agents `AgentJoined`) | {:.1} s |",
        r.converge_s
    );
    let last = r.left_s.last().copied();
    let ok = last.is_some_and(|s| s <= TARGET.as_secs_f64()) && r.left_s.len() == r.members;
    let _ = writeln!(
        out,
        "| `spec.state: Leave` → both agents `Joined=False` `AgentLeft`: p50 / max ({}/{} left; target ≤ {} s) | {} / {} {} |",
        r.left_s.len(),
        r.members,
        TARGET.as_secs(),
        fleetnet_bench::quantile(&r.left_s, 0.5).map_or("-".into(), |s| format!("{s:.2} s")),
        last.map_or("-".into(), |s| format!("{s:.2} s")),
        if ok { "✓" } else { "✗" }
    );
    for (when, l) in [
        ("before the leave", &r.before),
        ("at `AgentLeft`", &r.at_left),
        ("5 s after `AgentLeft`", &r.settled),
    ] {
        let _ = writeln!(out, "| {when}: {} | {} |", describe(l), l.total());
    }
    for (side, requests) in [("member", &r.member_requests), ("hub", &r.hub_requests)] {
        let counted: Vec<&WriteCount> = requests.iter().filter(|w| counted(w)).collect();
        let total: u64 = counted.iter().map(|w| w.count).sum();
        let each: Vec<String> = counted
            .iter()
            .map(|w| format!("{} {} {}", w.resource, w.verb, w.count))
            .collect();
        let _ = writeln!(
            out,
            "| {side} requests from `Leave` to `AgentLeft` (all members, watches left out): {} | {total} |",
            each.join(", ")
        );
    }
    out
}

/// Whether the table counts `w`: not a watch, nor a non-resource path (they run all along,
/// not because of the leave).
fn counted(w: &WriteCount) -> bool {
    w.verb != "WATCH" && !w.resource.starts_with('/')
}

fn describe(l: &Leftovers) -> String {
    format!(
        "ServiceExports {}, MultiClusterServices {}, ServiceImports {}, derived Services {}, ISEs {}, EndpointSliceExports {}, InternalServiceImports {}, objects with a finalizer of ours {}, EndpointSlices with an annotation of ours {}",
        l.service_exports,
        l.multicluster_services,
        l.service_imports,
        l.derived_services,
        l.ises,
        l.eses,
        l.isis,
        l.finalized,
        l.annotated_slices
    )
}

#[cfg(test)]
#[path = "leave_bench_tests.rs"]
mod tests;
