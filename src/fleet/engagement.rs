//! Engagement: the fleet's loop that reads the sources of members (the kubeconfig directory,
//! member Secrets) and engages, re-engages and stops members to match them, one
//! [`Engagement`] per member (its task, its cancellation, what it was started from).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::sources::{Desired, Sources, inventory};
use super::{Error, Event, Shared, member, registry, removal};
use crate::client::credentials::Credentials;

mod rotation;

/// How long a stopping member's in-flight reconciles may take to finish.
const DRAIN: Duration = Duration::from_secs(15);

struct Engagement {
    hash: String,
    /// The member's Azure settings ([`super::MemberAzure::settings_key`]) and hub namespace
    /// when it was engaged.
    settings: String,
    /// Shared with the member's task (one copy, not two, of each member's kubeconfig).
    kubeconfig: Option<Arc<str>>,
    /// The running member's inline credentials, updated in place by a rotation ([`rotation`]);
    /// `None`: an exec plugin or basic auth, re-engaged on any change as before.
    credentials: Option<Arc<Credentials>>,
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

/// Runs the fleet until `shutdown`: watches the sources of members and engages, re-engages
/// and disengages members to match them. Returns once every member has stopped.
pub async fn run(shared: Arc<Shared>, shutdown: CancellationToken) {
    let state = shared.state.clone();
    let _alive = state.runtime_started();
    let dir = shared.config.kubeconfig_dir.clone();
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let _watcher = watch_dir(&dir, tx.clone());
    let sources = Sources::start(
        dir,
        shared.config.member_secrets_namespace.as_deref(),
        inventory_settings(&shared.config),
        &shared.hub_client,
        tx.clone(),
        shutdown.clone(),
    );
    let mut engaged: BTreeMap<String, Engagement> = BTreeMap::new();
    // Stops and cleanups run here, so one slow member never holds the loop (the others'
    // engagements, rotations, shutdown).
    let background = TaskTracker::new();
    let mut ticker = tokio::time::interval(shared.config.rescan_interval);
    let mut ownership = shared.ownership.shards().map(|s| s.subscribe());
    loop {
        sync_members(&shared, &sources, &mut engaged, &background).await;
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

/// Where fleet's inventory is read, when `--member-inventory` is on: its token Secrets in
/// the member Secrets' namespace (the release namespace when those are off).
fn inventory_settings(config: &super::RuntimeConfig) -> Option<inventory::Settings> {
    let profile_namespace = config.member_inventory.clone()?;
    let secret_namespace = (config.member_secrets_namespace.clone())
        .unwrap_or_else(|| config.records_namespace.clone());
    Some(inventory::Settings {
        profile_namespace,
        secret_namespace,
        namespace_prefix: config.namespace_prefix.clone(),
        agents: config.agent_types,
    })
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
    sources: &Sources,
    engaged: &mut BTreeMap<String, Engagement>,
    background: &TaskTracker,
) {
    let Desired {
        members: desired,
        complete,
    } = match sources.desired() {
        Ok(d) => {
            shared.state.scanned();
            d
        }
        Err(e) => {
            // Keep what runs: a transiently unreadable directory must not stop the fleet.
            tracing::warn!(dir = %sources.dir().display(), error = %e, "cannot read the kubeconfig directory");
            return;
        }
    };
    // A source not listed yet (the member Secrets at start-up) proves no member gone: nothing
    // is stopped, cleaned up or given up until every source has answered.
    if complete {
        stop_departed(shared, engaged, &desired, background);
        if shared.config.cleanup_on_remove {
            removal::resume_cleanups(shared, &desired, background).await;
        }
    }
    if let Some(shards) = shared.ownership.shards() {
        let cleaning = shared.cleanups.lock().members();
        let running = (!complete).then(|| engaged.keys().cloned().collect::<Vec<_>>());
        let wanted = desired.keys().cloned().chain(cleaning);
        shards.set_wanted(wanted.chain(running.into_iter().flatten()));
        shared.state.set_owners(shards.owners());
    }
    shared.config.member_config.reload();
    let azure = shared
        .azure
        .as_ref()
        .filter(|_| shared.config.traffic_manager);
    let mut namespaces = hub_namespaces(shared, &desired);
    // Every member's namespace, owned here or not: a takeover finds it held already.
    let kept: Vec<String> = namespaces
        .values()
        .filter_map(|ns| ns.clone().ok())
        .collect();
    shared.hub_watches.members(&kept, complete);
    for (name, source) in desired {
        if !shared.ownership.owns(&name) {
            continue;
        }
        let hub_namespace = namespaces
            .remove(&name)
            .unwrap_or_else(|| Err(format!("member {name:?}: no hub namespace")));
        let at = (azure, hub_namespace);
        sync_member(shared, engaged, background, name, source, at);
    }
}

/// Engages the owned member `name` from `source`, unless it runs on it already (a changed
/// credential alone is taken in place); re-engages it when its settings or place changed.
fn sync_member(
    shared: &Arc<Shared>,
    engaged: &mut BTreeMap<String, Engagement>,
    background: &TaskTracker,
    name: String,
    source: registry::MemberSource,
    (azure, hub_namespace): (Option<&Arc<dyn super::MemberAzure>>, Result<String, String>),
) {
    if source.unreadable && engaged.get(&name).is_some_and(|e| e.task.is_some()) {
        tracing::warn!(member = %name, file = %source.place, "kubeconfig unreadable this time; the member keeps running on the one it has");
        return;
    }
    // A changed namespace re-engages the member, like changed Azure settings; so does a
    // new place (a member moved from its file to a Secret): its errors name the place.
    let settings = format!(
        "{}|{}|{}",
        azure.map(|a| a.settings_key(&name)).unwrap_or_default(),
        hub_namespace.as_deref().unwrap_or_default(),
        source.place
    );
    if engaged
        .get(&name)
        .is_some_and(|e| e.hash == source.hash && e.settings == settings)
    {
        return;
    }
    if engaged.get_mut(&name).is_some_and(|e| {
        e.settings == settings && rotation::taken_in_place(shared, &name, e, &source)
    }) {
        return;
    }
    if let Some(old) = engaged.remove(&name) {
        if old.hash == source.hash {
            tracing::info!(member = %name, azure = %settings, "member settings changed: re-engaging");
        } else {
            tracing::info!(member = %name, "member kubeconfig changed: re-engaging");
        }
        background.spawn(old.stop());
    }
    let engagement = engage(shared, &name, source, settings, hub_namespace);
    engaged.insert(name, engagement);
}

/// The hub namespace of every member of the directory: its `hubNamespace` in the member config,
/// else `<prefix><member>`; one two members would share is refused for both.
fn hub_namespaces(
    shared: &Shared,
    desired: &BTreeMap<String, registry::MemberSource>,
) -> BTreeMap<String, Result<String, String>> {
    let settings: Vec<(&str, Option<String>)> = desired
        .keys()
        .map(|name| {
            let ns = shared.config.member_config.member(name).hub_namespace;
            (name.as_str(), ns)
        })
        .collect();
    registry::hub_namespaces(
        &shared.config.namespace_prefix,
        settings.iter().map(|(name, ns)| (*name, ns.as_deref())),
    )
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
        .filter(|n| !desired.contains_key(*n) || !shared.ownership.owns(n))
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
        let owner = removed && shared.ownership.may_write(&name);
        let clean = owner && shared.config.cleanup_on_remove;
        if clean {
            shared.cleanups.lock().start(&name);
        }
        let shared = shared.clone();
        background.spawn(async move {
            e.stop().await;
            // After the stop: a reconcile still running would record its series again.
            shared
                .state
                .unless_engaged(&name, || shared.hooks.member_left(&name));
            if clean {
                removal::record_and_clean_up(&shared, name, kubeconfig).await;
            } else if owner {
                removal::forget_status(&shared, &name).await;
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
    hub_namespace: Result<String, String>,
) -> Engagement {
    let place = source.place.to_string();
    let inventory = matches!(source.place, registry::Place::MemberCluster(_));
    shared
        .state
        .engage_from(name, &source.hash[..12], place.clone());
    let cancel = CancellationToken::new();
    let admissible = source
        .kubeconfig
        .map_err(Error::Source)
        .and_then(|kubeconfig| {
            Ok((
                kubeconfig,
                hub_namespace.clone().map_err(Error::HubNamespace)?,
            ))
        });
    let (task, kubeconfig, credentials) = match admissible {
        Ok((kubeconfig, hub_namespace)) => {
            let kubeconfig: Arc<str> = kubeconfig.into();
            let credentials = rotation::cell(shared, &kubeconfig, &place);
            let task = tokio::spawn(member::run(
                name.to_string(),
                hub_namespace,
                place.clone(),
                kubeconfig.clone(),
                credentials.clone(),
                shared.clone(),
                cancel.clone(),
            ));
            (Some(task), Some(kubeconfig), credentials)
        }
        Err(e) => {
            tracing::error!(member = %name, source = %place, error = %e, "member not started");
            shared.state.record(name, Event::Refused(e.to_string()));
            // Its series show the refusal on /metrics too.
            shared.hooks.member_engaged(name, Arc::default());
            // A member of fleet's inventory awaiting credentials: its MemberStatus tells it
            // (`status`, kubectl), in the namespace fleet made for it.
            let publish = match (inventory, &hub_namespace) {
                (true, Ok(ns)) => Some(tokio::spawn(member::publish_status(
                    shared.clone(),
                    name.to_string(),
                    ns.clone(),
                    cancel.clone(),
                ))),
                _ => None,
            };
            (publish, None, None)
        }
    };
    Engagement {
        hash: source.hash,
        settings,
        kubeconfig,
        credentials,
        cancel,
        task,
    }
}
