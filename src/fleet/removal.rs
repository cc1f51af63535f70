//! Removal of a member that left the fleet (`--cleanup-on-remove`): its cleanup recorded in
//! the hub first (`records`), then run by whoever owns the member, resumed after a restart or
//! a failover, its record deleted once both sides are done. What is withdrawn on each side is
//! the jobs' business ([`crate::export::cleanup`]).

pub(crate) mod records;

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::Api;
use tokio_util::task::TaskTracker;

use super::{Error, Shared, member, registry};

/// What this replica knows of pending cleanups (`records`).
#[derive(Debug, Default)]
pub struct Cleanups {
    /// As last listed in the hub (or written here since).
    pending: BTreeMap<String, records::Pending>,
    /// Running here now.
    running: std::collections::BTreeSet<String>,
}

impl Cleanups {
    /// `member`'s cleanup runs here from now on.
    pub(super) fn start(&mut self, member: &str) {
        self.running.insert(member.to_string());
    }

    /// The members whose cleanup is pending or running: they keep their shards until done.
    pub(super) fn members(&self) -> Vec<String> {
        self.pending.keys().chain(&self.running).cloned().collect()
    }
}

/// Records the cleanup of `name`, which left the fleet, in the hub, then runs it.
pub(super) async fn record_and_clean_up(
    shared: &Arc<Shared>,
    name: String,
    kubeconfig: Option<String>,
) {
    let pending = records::Pending {
        member: name.clone(),
        kubeconfig,
    };
    // Recorded first, so that a restart or a failover finishes what this starts.
    match records::write(
        &shared.records(&name),
        &shared.config.records_prefix,
        &pending,
    )
    .await
    {
        Ok(()) => {
            shared.cleanups.lock().pending.insert(name, pending.clone());
        }
        Err(e) => {
            tracing::warn!(member = %name, error = %e, "could not record the cleanup in the hub; cleaning up without a record (not resumed after a restart)")
        }
    }
    clean_up(shared, pending).await;
}

/// Lists the pending cleanups recorded in the hub: each one this replica owns and is not
/// running yet is started; the record of a member that came back is dropped.
pub(super) async fn resume_cleanups(
    shared: &Arc<Shared>,
    desired: &BTreeMap<String, registry::MemberSource>,
    background: &TaskTracker,
) {
    let all: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(shared.hub_client.clone(), &shared.config.records_namespace);
    let listed = match records::list(&all, &shared.config.records_prefix).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the pending cleanups; keeping the last view");
            return;
        }
    };
    let mut cleanups = shared.cleanups.lock();
    let running = cleanups.running.clone();
    cleanups.pending = listed.into_iter().map(|p| (p.member.clone(), p)).collect();
    let pending: Vec<records::Pending> = cleanups.pending.values().cloned().collect();
    drop(cleanups);
    let mut shown = shared.state.cleanups();
    shown.retain(|m, _| pending.iter().any(|p| &p.member == m) || running.contains(m));
    for p in &pending {
        shown.entry(p.member.clone()).or_insert(None);
    }
    shared.state.set_cleanups(shown);
    for p in pending {
        if running.contains(&p.member) || !shared.ownership.may_write(&p.member) {
            continue;
        }
        let shared = shared.clone();
        if desired.contains_key(&p.member) {
            tracing::info!(member = %p.member, "removed member is back: its pending cleanup is dropped");
            background.spawn(async move {
                let api = shared.records(&p.member);
                if records::forget(&api, &shared.config.records_prefix, &p.member)
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
async fn clean_up(shared: &Arc<Shared>, pending: records::Pending) {
    let name = pending.member.clone();
    let mut result = withdraw(shared, &name, pending.kubeconfig.as_deref()).await;
    if result.is_ok() {
        let api = shared.records(&name);
        result = records::forget(&api, &shared.config.records_prefix, &name)
            .await
            .map_err(|e| Error::RecordNotDeleted(e.to_string()));
    }
    let result = result.map_err(|e| e.to_string());
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

/// The hub namespace of a member that left: its `hubNamespace` setting while the member config
/// still names it, else `<prefix><member>`. Not validated: a member refused for its namespace
/// may still have left a record.
fn hub_namespace_of_removed(shared: &Shared, name: &str) -> String {
    shared
        .config
        .member_config
        .member(name)
        .hub_namespace
        .unwrap_or_else(|| registry::namespace_of(&shared.config.namespace_prefix, name))
}

/// A member that left the fleet without `--cleanup-on-remove`: its exports stay on the hub,
/// its `MemberStatus` goes (nobody publishes it any more; `status` would show it as it last
/// was). Through the member's fenced view of the hub: sent only while this replica owns it.
pub(super) async fn forget_status(shared: &Arc<Shared>, name: &str) {
    let ns = hub_namespace_of_removed(shared, name);
    let hub = crate::client::member_view(&shared.hub_client, shared.ownership.fence_of(name));
    if let Err(e) = crate::status::remove(hub, &ns).await {
        tracing::warn!(member = %name, namespace = %ns, error = %e, "the MemberStatus of a removed member could not be deleted");
    }
}

/// `--cleanup-on-remove`: withdraws a member that left the fleet (see `export::cleanup`).
async fn withdraw(shared: &Arc<Shared>, name: &str, kubeconfig: Option<&str>) -> Result<(), Error> {
    let ns = hub_namespace_of_removed(shared, name);
    // Fenced by the member's lease (sharded), which is kept until the cleanup is done.
    let fence = shared.ownership.fence_of(name);
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
        None => Err(Error::NoKubeconfig),
    };
    let member = member.map_err(|e| e.to_string());
    crate::export::cleanup::withdraw_member(name, hub.clone(), &ns, member)
        .await
        .map_err(Error::Withdraw)?;
    // Its status view goes last: until then it shows the member as it was.
    crate::status::remove(hub, &ns)
        .await
        .map_err(|e| Error::Withdraw(format!("MemberStatus in {ns}: {e}")))
}
