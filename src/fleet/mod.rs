//! The multi-member runtime: the kubeconfig directory and its vetting (`registry`, `vet`), one
//! engagement per member with its API-server probe (`member`) for the members this replica
//! owns ([`crate::ownership`]), the durable record of `--cleanup-on-remove` (`cleanup`), and
//! the state the health endpoints show (`state`).
//!
//! `fleet` starts and stops members; it knows nothing of ServiceExport conditions.

mod cleanup;
mod controllers;
mod member;
pub mod registry;
pub mod state;
pub mod vet;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use controllers::Controllers;
pub use member::{MemberClient, member_client};
pub use state::{Event, FleetState, MemberStatus, Phase};
pub use vet::TrustPolicy;

use crate::client::{ClientStats, Limits};
use crate::export::{PublicIpAccess, ReconcileObserver, Reconciled};

/// Settings of the runtime (validated by whoever builds it, e.g. the CLI).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub kubeconfig_dir: PathBuf,
    /// Hub namespace of member `m` is `<prefix><m>`.
    pub namespace_prefix: String,
    /// Each member's own limiter (one per engagement, never shared).
    pub member_limits: Limits,
    /// How long a member's first sync may take before it is marked failing.
    pub member_sync_timeout: Duration,
    /// On removal: delete the member's ISEs and its ServiceExports' finalizers.
    pub cleanup_on_remove: bool,
    /// Where pending cleanups are recorded in the hub (Secrets): the release namespace, and
    /// the prefix of their names (`--leader-election-id`).
    pub records_namespace: String,
    pub records_prefix: String,
    pub traffic_manager: bool,
    /// Safety net besides the directory watch.
    pub rescan_interval: Duration,
    /// This replica's name (Events' reporting instance).
    pub instance: String,
    /// What member kubeconfigs may use beyond inline credentials.
    pub trust: TrustPolicy,
    /// Which exporters run for every member.
    pub controllers: Controllers,
    /// What each member may write to the hub (`--max-exports-per-member`, `--max-export-bytes`).
    pub quotas: crate::export::Quotas,
}

/// Notified when a member engagement starts and when a member leaves (metrics series).
pub trait MemberHooks: Send + Sync + 'static {
    /// A new engagement of `member` with its client's counters.
    fn member_engaged(&self, member: &str, stats: Arc<ClientStats>);
    /// `member` left the fleet: drop everything kept about it.
    fn member_left(&self, member: &str);
}

/// Hooks that do nothing.
#[derive(Debug, Default)]
pub struct NoHooks;

impl MemberHooks for NoHooks {
    fn member_engaged(&self, _: &str, _: Arc<ClientStats>) {}
    fn member_left(&self, _: &str) {}
}

/// Per-member Azure access: the lookup for the member's subscription, its default resource
/// group and the other groups it may read.
pub trait MemberAzure: Send + Sync + 'static {
    /// Reads the members' settings again; called once per rescan, before any of the below.
    fn reload(&self);
    fn for_member(&self, member: &str) -> PublicIpAccess;
    /// Changes when the member's Azure settings change: the member is then re-engaged.
    fn settings_key(&self, member: &str) -> String;
}

/// What the runtime shares with every member.
pub struct Shared {
    pub config: RuntimeConfig,
    /// One hub client (one hub limiter) for the whole fleet; members only get scoped APIs.
    pub hub_client: kube::Client,
    /// The members' views of `hub_client`, one client for all ([`crate::client::HubViews`]).
    pub hub_views: crate::client::HubViews,
    pub state: Arc<FleetState>,
    pub observer: Arc<dyn ReconcileObserver>,
    pub hooks: Arc<dyn MemberHooks>,
    pub azure: Option<Arc<dyn MemberAzure>>,
    /// Who writes: the fence of every member client's writes, and (sharded) the members this
    /// replica owns, each with its own fence.
    pub ownership: crate::ownership::Ownership,
    /// Removed members whose cleanup is recorded or running: they keep their shards (and
    /// their cleanup is fenced by them) until it is done.
    pub cleanups: parking_lot::Mutex<Cleanups>,
    /// Members connecting and listing at once ([`ENGAGING_AT_ONCE`]).
    pub engaging: Arc<tokio::sync::Semaphore>,
}

/// How many members connect, discover and list at once. A thousand starting together would
/// otherwise share the CPU a thousand ways (TLS handshakes, first lists), each finishing late;
/// in turns, the first are reconciling within a second. A slot is held until the member's own
/// watches have listed (not the hub's, which waits in the hub budget's line), at most
/// [`ENGAGING_SLOT`].
pub const ENGAGING_AT_ONCE: usize = 32;

/// The longest a member holds an engaging slot: a member whose server hangs does not hold
/// up the others.
const ENGAGING_SLOT: Duration = Duration::from_secs(5);

/// What this replica knows of pending cleanups ([`cleanup`]).
#[derive(Debug, Default)]
pub struct Cleanups {
    /// As last listed in the hub (or written here since).
    pending: BTreeMap<String, cleanup::Pending>,
    /// Running here now.
    running: std::collections::BTreeSet<String>,
}

impl Shared {
    /// Whether this replica runs `member` (always, unless sharded).
    fn owns(&self, member: &str) -> bool {
        self.ownership.owns(member)
    }

    /// Whether this replica writes for `member` now: its fence holds.
    fn writes_for(&self, member: &str) -> bool {
        self.ownership.may_write(member)
    }

    /// The cleanup records, written through `member`'s fence.
    fn records(&self, member: &str) -> Api<k8s_openapi::api::core::v1::Secret> {
        let client = crate::client::member_view(&self.hub_client, self.fence_of(member));
        Api::namespaced(client, &self.config.records_namespace)
    }

    /// The fence of `member`'s writes.
    pub(crate) fn fence_of(&self, member: &str) -> crate::client::Fence {
        self.ownership.fence_of(member)
    }

    fn observer_for(self: &Arc<Self>) -> Arc<dyn ReconcileObserver> {
        Arc::new(StateObserver {
            inner: self.observer.clone(),
            state: self.state.clone(),
        })
    }
}

/// Keeps a member's phase honest from what its controller reports.
struct StateObserver {
    inner: Arc<dyn ReconcileObserver>,
    state: Arc<FleetState>,
}

impl ReconcileObserver for StateObserver {
    fn reconcile_started(&self, member: &str) {
        self.inner.reconcile_started(member);
    }
    fn reconciled(&self, member: &str, outcome: Reconciled, took: Duration) {
        // A member recovering from a watch failure proves it with a successful reconcile.
        if !matches!(outcome, Reconciled::Failed(_)) {
            self.state.record(member, Event::Recovered(None));
        }
        self.inner.reconciled(member, outcome, took);
    }
    fn hub_write(&self, member: &str, op: &'static str) {
        self.inner.hub_write(member, op);
    }
    fn slice_write(&self, member: &str, op: &'static str) {
        self.inner.slice_write(member, op);
    }
    fn export_latency(&self, member: &str, latency: Duration) {
        self.inner.export_latency(member, latency);
    }
    fn conflict_reflected(&self, member: &str, latency: Duration) {
        self.inner.conflict_reflected(member, latency);
    }
    fn controller_error(&self, member: &str, error: &str) {
        self.state.record(member, Event::Failed(error.to_string()));
        self.inner.controller_error(member, error);
    }
    fn watches_recovered(&self, member: &str) {
        self.state.record(member, Event::Recovered(None));
        self.inner.watches_recovered(member);
    }
}

/// How long a stopping member's in-flight reconciles may take to finish.
const DRAIN: Duration = Duration::from_secs(15);

struct Engagement {
    hash: String,
    /// The member's Azure settings when it was engaged ([`MemberAzure::settings_key`]).
    settings: String,
    /// Shared with the member's task (one copy, not two, of each member's kubeconfig).
    kubeconfig: Option<Arc<str>>,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Engagement {
    async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(mut task) = self.task.take() {
            // In-flight reconciles finish; a stuck member (its requests waiting for tokens or
            // for a server that does not answer) is aborted after the drain period, so it can
            // neither hold the others' shutdown nor live on detached.
            if tokio::time::timeout(DRAIN, &mut task).await.is_err() {
                tracing::warn!(drain = ?DRAIN, "member did not stop within its drain period: aborted");
                task.abort();
                let _ = task.await;
            }
        }
    }
}

/// Runs the fleet until `shutdown`: watches the kubeconfig directory and engages, re-engages
/// and disengages members to match it. Returns once every member has stopped.
pub async fn run(shared: Arc<Shared>, shutdown: CancellationToken) {
    let state = shared.state.clone();
    let _alive = state.runtime_started();
    let dir = shared.config.kubeconfig_dir.clone();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let _watcher = watch_dir(&dir, tx.clone());
    let mut engaged: BTreeMap<String, Engagement> = BTreeMap::new();
    // Stops and cleanups run here, so one slow member never holds the loop (the others'
    // engagements, rotations, shutdown).
    let background = TaskTracker::new();
    let mut ticker = tokio::time::interval(shared.config.rescan_interval);
    let mut ownership = shared.ownership.shards().map(|s| s.subscribe());
    loop {
        sync_members(&shared, &mut engaged, &background).await;
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = ticker.tick() => {}
            true = ownership_changed(ownership.as_mut()) => {}
            Some(()) = rx.recv() => {
                // A burst of events (a Secret's symlink swap) becomes one rescan.
                tokio::time::sleep(Duration::from_millis(100)).await;
                while rx.try_recv().is_ok() {}
            }
        }
    }
    tracing::info!(members = engaged.len(), "shutting down: stopping members");
    for engagement in std::mem::take(&mut engaged).into_values() {
        background.spawn(engagement.stop());
    }
    background.close();
    // Every stop is bounded (15 s) and cleanups too (30 s each side): this bounds shutdown
    // within the pod's grace period.
    if tokio::time::timeout(Duration::from_secs(20), background.wait())
        .await
        .is_err()
    {
        tracing::warn!("members still stopping after 20 s; leaving them");
    }
}

/// Resolves `true` when this replica's share of members changed; never without sharding.
async fn ownership_changed(rx: Option<&mut tokio::sync::watch::Receiver<u64>>) -> bool {
    match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

fn watch_dir(dir: &std::path::Path, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher;
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // Opening a file is an event too (inotify IN_OPEN): without this, every rescan's
        // own reads would start the next rescan, for ever.
        if res.as_ref().is_ok_and(|e| e.kind.is_access()) {
            return;
        }
        let _ = tx.try_send(());
    })
    .map_err(|e| tracing::warn!(error = %e, "cannot watch the kubeconfig directory; rescanning periodically"))
    .ok()?;
    if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the kubeconfig directory; rescanning periodically");
        return None;
    }
    Some(watcher)
}

async fn sync_members(
    shared: &Arc<Shared>,
    engaged: &mut BTreeMap<String, Engagement>,
    background: &TaskTracker,
) {
    let dir = &shared.config.kubeconfig_dir;
    let desired = match registry::scan(dir) {
        Ok(d) => {
            shared.state.scanned();
            d
        }
        Err(e) => {
            // Keep what runs: a transiently unreadable directory must not stop the fleet.
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read the kubeconfig directory");
            return;
        }
    };
    stop_departed(shared, engaged, &desired, background);
    if shared.config.cleanup_on_remove {
        resume_cleanups(shared, &desired, background).await;
    }
    if let Some(shards) = shared.ownership.shards() {
        let cleanups = shared.cleanups.lock();
        let cleaning = cleanups.pending.keys().chain(&cleanups.running).cloned();
        shards.set_wanted(desired.keys().cloned().chain(cleaning));
        drop(cleanups);
        shared.state.set_owners(shards.owners());
    }
    let azure = shared
        .azure
        .as_ref()
        .filter(|_| shared.config.traffic_manager);
    if let Some(azure) = azure {
        azure.reload();
    }
    for (name, source) in desired {
        if !shared.owns(&name) {
            continue;
        }
        if source.unreadable && engaged.get(&name).is_some_and(|e| e.task.is_some()) {
            tracing::warn!(member = %name, file = %source.path.display(), "kubeconfig unreadable this time; the member keeps running on the one it has");
            continue;
        }
        let settings = azure.map(|a| a.settings_key(&name)).unwrap_or_default();
        if engaged
            .get(&name)
            .is_some_and(|e| e.hash == source.hash && e.settings == settings)
        {
            continue;
        }
        if let Some(old) = engaged.remove(&name) {
            if old.hash == source.hash {
                tracing::info!(member = %name, azure = %settings, "member settings changed: re-engaging");
            } else {
                tracing::info!(member = %name, "member kubeconfig changed: re-engaging");
            }
            background.spawn(old.stop());
        }
        let engagement = engage(shared, &name, source, settings);
        engaged.insert(name, engagement);
    }
}

/// Stops the members that left the directory or are owned by another replica now; a member
/// that left is cleaned up afterwards (`--cleanup-on-remove`), in the background.
fn stop_departed(
    shared: &Arc<Shared>,
    engaged: &mut BTreeMap<String, Engagement>,
    desired: &BTreeMap<String, registry::MemberSource>,
    background: &TaskTracker,
) {
    let gone: Vec<String> = engaged
        .keys()
        .filter(|n| !desired.contains_key(*n) || !shared.owns(n))
        .cloned()
        .collect();
    for name in gone {
        let Some(e) = engaged.remove(&name) else {
            continue;
        };
        let removed = !desired.contains_key(&name);
        if removed {
            tracing::info!(member = %name, "member removed");
        } else {
            tracing::info!(member = %name, "member now owned by another replica: stopping it here");
        }
        let kubeconfig = e.kubeconfig.as_deref().map(str::to_string);
        shared.state.remove(&name);
        // Only the lease holder cleans up (its clients' writes are fenced anyway), and only
        // a member that left the fleet, not one that moved to another replica.
        let clean = removed && shared.config.cleanup_on_remove && shared.writes_for(&name);
        if clean {
            shared.cleanups.lock().running.insert(name.clone());
        }
        let shared = shared.clone();
        background.spawn(async move {
            e.stop().await;
            // After the stop: a reconcile still running would record its series again.
            shared
                .state
                .unless_engaged(&name, || shared.hooks.member_left(&name));
            if clean {
                let pending = cleanup::Pending {
                    member: name.clone(),
                    kubeconfig,
                };
                // Recorded first, so that a restart or a failover finishes what this starts.
                match cleanup::write(&shared.records(&name), &shared.config.records_prefix, &pending).await {
                    Ok(()) => {
                        shared.cleanups.lock().pending.insert(name.clone(), pending.clone());
                    }
                    Err(e) => tracing::warn!(member = %name, error = %e, "could not record the cleanup in the hub; cleaning up without a record (not resumed after a restart)"),
                }
                clean_up(&shared, pending).await;
            }
        });
    }
}

/// Starts a member from its kubeconfig, or records why it cannot start.
fn engage(
    shared: &Arc<Shared>,
    name: &str,
    source: registry::MemberSource,
    settings: String,
) -> Engagement {
    shared.state.engage(name, &source.hash[..12]);
    let cancel = CancellationToken::new();
    let namespace = registry::hub_namespace(&shared.config.namespace_prefix, name);
    let (task, kubeconfig) = match source.kubeconfig.and_then(|k| namespace.map(|_| k)) {
        Ok(kubeconfig) => {
            let kubeconfig: Arc<str> = kubeconfig.into();
            let task = tokio::spawn(member::run(
                name.to_string(),
                source.path.display().to_string(),
                kubeconfig.clone(),
                shared.clone(),
                cancel.clone(),
            ));
            (Some(task), Some(kubeconfig))
        }
        Err(e) => {
            tracing::error!(member = %name, file = %source.path.display(), error = %e, "member not started");
            shared.state.record(name, Event::Refused(e));
            // Its series show the refusal on /metrics too.
            shared.hooks.member_engaged(name, Arc::default());
            (None, None)
        }
    };
    Engagement {
        hash: source.hash,
        settings,
        kubeconfig,
        cancel,
        task,
    }
}

/// Lists the pending cleanups recorded in the hub: each one this replica owns and is not
/// running yet is started; the record of a member that came back is dropped.
async fn resume_cleanups(
    shared: &Arc<Shared>,
    desired: &BTreeMap<String, registry::MemberSource>,
    background: &TaskTracker,
) {
    let all: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.hub_client.clone(), &shared.config.records_namespace);
    let listed = match cleanup::list(&all, &shared.config.records_prefix).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the pending cleanups; keeping the last view");
            return;
        }
    };
    let mut cleanups = shared.cleanups.lock();
    let running = cleanups.running.clone();
    cleanups.pending = listed.into_iter().map(|p| (p.member.clone(), p)).collect();
    let pending: Vec<cleanup::Pending> = cleanups.pending.values().cloned().collect();
    drop(cleanups);
    let mut shown = shared.state.cleanups();
    shown.retain(|m, _| pending.iter().any(|p| &p.member == m) || running.contains(m));
    for p in &pending {
        shown.entry(p.member.clone()).or_insert(None);
    }
    shared.state.set_cleanups(shown);
    for p in pending {
        if running.contains(&p.member) || !shared.writes_for(&p.member) {
            continue;
        }
        let shared = shared.clone();
        if desired.contains_key(&p.member) {
            tracing::info!(member = %p.member, "removed member is back: its pending cleanup is dropped");
            background.spawn(async move {
                let api = shared.records(&p.member);
                if cleanup::forget(&api, &shared.config.records_prefix, &p.member)
                    .await
                    .is_ok()
                {
                    shared.state.cleanup_tried(&p.member, Ok(()));
                }
            });
            continue;
        }
        tracing::info!(member = %p.member, "resuming the recorded cleanup of a removed member");
        shared.cleanups.lock().running.insert(p.member.clone());
        background.spawn(async move { clean_up(&shared, p).await });
    }
}

/// Runs one pending cleanup; its record goes once both sides are done.
async fn clean_up(shared: &Arc<Shared>, pending: cleanup::Pending) {
    let name = pending.member.clone();
    let mut result = withdraw(shared, &name, pending.kubeconfig.as_deref()).await;
    if result.is_ok() {
        let api = shared.records(&name);
        result = cleanup::forget(&api, &shared.config.records_prefix, &name)
            .await
            .map_err(|e| format!("cleanup done, its record not deleted: {e}"));
    }
    if let Err(e) = &result {
        tracing::warn!(member = %name, error = %e, "cleanup of a removed member not done; retried at the next rescan");
    }
    shared.state.cleanup_tried(&name, result.clone());
    let mut cleanups = shared.cleanups.lock();
    cleanups.running.remove(&name);
    if result.is_ok() {
        cleanups.pending.remove(&name);
    }
}

/// `--cleanup-on-remove`: withdraws a member that left the fleet (see `export::cleanup`).
async fn withdraw(
    shared: &Arc<Shared>,
    name: &str,
    kubeconfig: Option<&str>,
) -> Result<(), String> {
    let ns = format!("{}{name}", shared.config.namespace_prefix);
    // Fenced by the member's lease (sharded), which is kept until the cleanup is done.
    let fence = shared.fence_of(name);
    let hub = crate::client::member_view(&shared.hub_client, fence.clone());
    let member = match kubeconfig {
        Some(kubeconfig) => member::member_client(
            name,
            &format!("the recorded cleanup of member {name}"),
            kubeconfig,
            shared.config.trust,
            &shared.config.member_limits,
            Arc::default(),
            fence,
        )
        .await
        .map(|m| m.clients.client),
        None => Err("no usable kubeconfig".to_string()),
    };
    crate::export::cleanup::withdraw_member(name, hub, &ns, member).await
}

/// Whether `client`'s API server answers (`/version`) within `within`; else why not.
async fn answers(client: &kube::Client, within: Duration) -> Result<(), String> {
    match tokio::time::timeout(within, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// Hub reachability for `/readyz`, every 5 s, through `control` (the control client: our own
/// queue of writes never makes the hub look unreachable).
pub async fn probe_hub(control: kube::Client, state: Arc<FleetState>, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let ok = answers(&control, Duration::from_secs(5)).await.is_ok();
        if ok != state.hub_reachable() {
            tracing::info!(reachable = ok, "hub reachability changed");
        }
        state.set_hub_reachable(ok);
    }
}
