//! The owner's side: publishes a member's [`Status`] to its `MemberStatus`, on change only.

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::object::{
    GROUP, KIND, MANAGED_BY, MANAGED_BY_LABEL, MEMBER_LABEL, NAME, Status, VERSION, decide,
    resource,
};

/// At most one write per member per this period; also how often the state is looked at (in
/// memory: a quiet member costs no request).
pub const DEBOUNCE: Duration = Duration::from_secs(5);

/// The field manager of the status writes.
const MANAGER: &str = "fleetnet-hub-status";

/// Publishes `read()` (the member's status as this replica runs it; `None` once it is gone)
/// to the `MemberStatus` in `namespace` through `hub` (the member's fenced view of the hub:
/// a write is sent only while this replica owns the member), until `cancel`.
///
/// Nothing is written before the member has settled (ready or failing), so a cold start's
/// exports go first; the hub's object is read once, then only what changed is written.
pub async fn publish(
    hub: kube::Client,
    namespace: String,
    read: impl Fn() -> Option<Status>,
    cancel: CancellationToken,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(hub, &namespace, &resource());
    // What the hub holds, as last read or written; `None`: to be read.
    let mut on_hub: Option<Option<Status>> = None;
    let start = tokio::time::Instant::now() + DEBOUNCE;
    let mut ticker = tokio::time::interval_at(start, DEBOUNCE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Periods to sit out after failed requests (the namespace missing, the CRD not installed):
    // a hub that refuses costs a request per member every few minutes, not every period.
    let (mut failures, mut skip) = (0u32, 0u32);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        let Some(now) = read() else { return };
        if now.phase == "connecting" || now.phase == "syncing" {
            continue;
        }
        let hub_status = match &on_hub {
            Some(known) => known.clone(),
            None => match api.get_opt(NAME).await {
                // An object without a readable status is there all the same: applied over.
                Ok(found) => found.map(|o| status_of(&o).unwrap_or_default()),
                Err(e) => {
                    tracing::debug!(namespace = %namespace, error = %e, "MemberStatus read failed");
                    (failures, skip) = backoff(failures);
                    continue;
                }
            },
        };
        let observed_at = jiff::Timestamp::now().to_string();
        let Some(next) = decide(now, hub_status.as_ref(), &observed_at) else {
            on_hub = Some(hub_status);
            continue;
        };
        match write(&api, &next, hub_status.is_some()).await {
            Ok(()) => (on_hub, failures) = (Some(Some(next)), 0),
            Err(e) => {
                // Fenced off (another replica owns it now), or the CRD is missing: read again.
                tracing::debug!(namespace = %namespace, error = %e, "MemberStatus write failed");
                on_hub = None;
                (failures, skip) = backoff(failures);
            }
        }
    }
}

/// After `failures` failed requests in a row: one more, and the periods to sit out
/// (1, 2, 4 … at most 60: five minutes).
fn backoff(failures: u32) -> (u32, u32) {
    let failures = failures.saturating_add(1);
    (failures, 2u32.saturating_pow(failures - 1).min(60))
}

/// The `.status` of a `MemberStatus`, if it parses.
pub(super) fn status_of(object: &DynamicObject) -> Option<Status> {
    let status = object.data.get("status")?;
    serde_json::from_value(status.clone()).ok()
}

/// One write of the whole object (no status subresource: one write per change): created when
/// the hub has none (an apply would need the create verb as well as patch), else applied.
async fn write(api: &Api<DynamicObject>, status: &Status, exists: bool) -> Result<(), kube::Error> {
    let object = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {
            "name": NAME,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                MEMBER_LABEL: status.member,
            },
        },
        "status": status,
    });
    if !exists {
        let object: DynamicObject =
            serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        return api.create(&params, &object).await.map(drop);
    }
    let params = PatchParams::apply(MANAGER).force();
    api.patch(NAME, &params, &Patch::Apply(&object))
        .await
        .map(drop)
}

/// Deletes the `MemberStatus` in `namespace` (the member left the fleet and its cleanup runs),
/// through `hub`, the member's fenced view; already gone is done.
pub async fn remove(hub: kube::Client, namespace: &str) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(hub, namespace, &resource());
    match api.delete(NAME, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
