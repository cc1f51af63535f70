//! Dangling ISEs: an ISE in the member's hub namespace, exported for this member, whose
//! ServiceExport no longer exists in the member (deleted while fleetnet-hub was down, or a
//! crash between the hub write and the finalizer) is removed, as fleet-networking's member
//! agent does. Judged only once every view has listed, and confirmed with a live read of the
//! ServiceExport before anything is deleted; ISEs exported for another member are never touched.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use super::context::Context;
use super::decide::ise_name;
use crate::api::{InternalServiceExport, ServiceExport};
use crate::controller::only_uid;
use crate::service_exports::ServiceExportView;

/// ISE names waiting to be checked; beyond this many a name is dropped and found by the next
/// sweep of all.
pub(super) const QUEUE: usize = 4096;

/// How often every ISE is checked, also when no event named it (a name dropped from a full
/// queue).
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Checks every ISE once the views have listed, each time this replica becomes leader and every
/// [`SWEEP_EVERY`], then each ISE named on `seen` (every ISE the watch delivers). Never returns:
/// it ends when the exporter drops it.
pub(super) async fn sweep(
    ctx: Arc<Context>,
    exports: Store<ServiceExportView>,
    mut seen: mpsc::Receiver<String>,
) {
    ctx.views.wait().await;
    check_all(&ctx, &exports).await;
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.tick().await;
    let mut gained = Box::pin(futures::StreamExt::fuse(ctx.claim.gained()));
    loop {
        tokio::select! {
            name = seen.recv() => match name {
                Some(name) => check(&ctx, &exports, &name).await,
                None => std::future::pending().await,
            },
            // Ends when the claim can no longer change (no election, or it is over).
            Some(()) = futures::StreamExt::next(&mut gained) => check_all(&ctx, &exports).await,
            _ = every.tick() => check_all(&ctx, &exports).await,
        }
    }
}

async fn check_all(ctx: &Context, exports: &Store<ServiceExportView>) {
    for ise in ctx.ises.state() {
        check(ctx, exports, &ise.id.name).await;
    }
}

/// Removes the ISE `name` if it is this member's and its ServiceExport is gone (live). Boxed:
/// the sweep waits most of its life, and would otherwise hold room for two requests.
async fn check(ctx: &Context, exports: &Store<ServiceExportView>, name: &str) {
    Box::pin(check_one(ctx, exports, name)).await
}

async fn check_one(ctx: &Context, exports: &Store<ServiceExportView>, name: &str) {
    if !ctx.claim.may_write() {
        return;
    }
    let Some(ise) = ctx
        .ises
        .get(&ObjectRef::new(name).within(&ctx.hub_namespace))
        .map(|view| view.to_ise())
    else {
        return;
    };
    let Some((ns, se_name)) = candidate(&ctx.member, &ise) else {
        return;
    };
    if exports
        .get(&ObjectRef::new_with(se_name, ctx.se_version).within(ns))
        .is_some()
    {
        return;
    }
    let live: Api<ServiceExport> =
        Api::namespaced_with(ctx.member_client.clone(), ns, &ctx.se_version);
    match live.get_opt(se_name).await {
        Ok(None) => {}
        Ok(Some(_)) => return,
        Err(e) => {
            // The member is not answering: nothing is judged dangling while it fails.
            tracing::debug!(member = %ctx.member, ise = %name, error = %e, "cannot confirm a dangling ISE");
            return;
        }
    }
    if !ctx.claim.may_write() {
        return;
    }
    match ctx
        .hub
        .delete(name, &only_uid(ise.metadata.uid.clone()))
        .await
    {
        Ok(_) => {
            tracing::info!(member = %ctx.member, ise = %name, export = %format!("{ns}/{se_name}"), "removed a dangling ISE: its ServiceExport is gone");
            ctx.observer.hub_write(&ctx.member, "delete");
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => {
            tracing::warn!(member = %ctx.member, ise = %name, error = %e, "could not remove a dangling ISE");
        }
    }
}

/// `(namespace, name)` of the export an ISE carries, when it is a live ISE this member wrote
/// under the name it gives such exports.
fn candidate<'a>(member: &str, ise: &'a InternalServiceExport) -> Option<(&'a str, &'a str)> {
    let reference = &ise.spec.service_reference;
    if ise.metadata.deletion_timestamp.is_some() || reference.cluster_id != member {
        return None;
    }
    let (ns, name) = reference.namespaced_name.split_once('/')?;
    (ise.metadata.name.as_deref() == Some(ise_name(ns, name).as_str())).then_some((ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ise(name: &str, cluster: &str, namespaced_name: &str) -> InternalServiceExport {
        let mut ise = InternalServiceExport::default();
        ise.metadata.name = Some(name.into());
        ise.spec.service_reference.cluster_id = cluster.into();
        ise.spec.service_reference.namespaced_name = namespaced_name.into();
        ise
    }

    #[test]
    fn only_this_members_live_ises_under_their_own_name_are_candidates() {
        assert_eq!(
            candidate("m1", &ise("work-ghost", "m1", "work/ghost")),
            Some(("work", "ghost"))
        );
        assert_eq!(
            candidate("m1", &ise("work-ghost", "m2", "work/ghost")),
            None,
            "another member's"
        );
        assert_eq!(
            candidate("m1", &ise("other-name", "m1", "work/ghost")),
            None,
            "not a name this member gives"
        );
        assert_eq!(candidate("m1", &ise("x", "m1", "no-slash")), None);
        let mut leaving = ise("work-ghost", "m1", "work/ghost");
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(candidate("m1", &leaving), None, "already going");
    }
}
