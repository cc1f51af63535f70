//! One reconcile of one SliceView: observe (views, live reads before withdrawing
//! anything) → [`decide`] → [`act::perform`]; the sweep of slices the view does not have; how
//! failures are requeued.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use super::act;
use super::context::Context;
use super::decide::NAME;
use super::decide::{Observation, Outcome, Plan, decide, decide_gone, is_dns1123_subdomain};
use super::error::{Error, Step};
use super::model::{ExportVerdict, ExportView, SliceView};
use super::views::{Absent, referred};
use crate::controller::ApiFailure;
use crate::controller::runner::Action;

/// Reconciles one slice of the view: one trace per call, a root span `reconcile_endpointslice`.
pub(super) async fn reconcile(slice: Arc<SliceView>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = slice.namespace().unwrap_or_default();
    let name = slice.name_any();
    traced(&ctx, &ns, &name, Some(slice)).await
}

async fn traced(
    ctx: &Context,
    ns: &str,
    name: &str,
    viewed: Option<Arc<SliceView>>,
) -> Result<Action, Error> {
    let span = crate::controller::reconcile_span!(
        "reconcile_endpointslice", %ctx.member, %ns, fleet.endpointslice.name = %name
    );
    let key = ObjectRef::new(name).within(ns);
    let work = observe_decide_act(ctx, ns, name, viewed);
    let observer = ctx.observer.as_ref();
    crate::controller::reported(span, observer, &ctx.member, &ctx.failures, &key, work).await
}

/// What was read live in this reconcile (`None` for a field: not read, use the view).
#[derive(Default)]
struct Live {
    slice: Option<Option<SliceView>>,
    export: Option<Option<ExportVerdict>>,
    /// The export under the slice's unique name, read with the slice.
    named: Option<(String, Option<ExportView>)>,
}

async fn observe_decide_act(
    ctx: &Context,
    ns: &str,
    name: &str,
    viewed: Option<Arc<SliceView>>,
) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let key = ObjectRef::<SliceView>::new(name).within(ns);
    let mut live = Live::default();
    if viewed.is_none() {
        read_live(ctx, ns, name, &mut live).await?;
    }
    let mut stale = 0;
    loop {
        let (slice, plan) = observe_decide(ctx, ns, name, &key, viewed.as_deref(), &live);
        tracing::debug!(
            writes = plan.writes(),
            outcome = plan.outcome.label(),
            "decided"
        );
        if plan.withdraws() && live.slice.is_none() && !export_deleting(ctx, ns, slice.as_ref()) {
            // Views may be behind: withdraw only on what the API says now.
            read_live(ctx, ns, name, &mut live).await?;
            continue;
        }
        if let Some(other) = &plan.held {
            let export = plan_export(ctx, slice.as_ref());
            crate::controller::tell_other_writer(
                ctx.observer.as_ref(),
                NAME,
                &ctx.member,
                &export,
                other,
            );
            // Looked at again when the agent's write stops holding the export (or on a change).
            return Ok((plan.outcome, Action::requeue(other.wait(Timestamp::now()))));
        }
        warn_of(ctx, ns, name, &plan);
        match act::perform(ctx, ns, name, slice.as_ref(), &plan).await {
            Ok(()) => {
                if slice.is_none() {
                    ctx.own_slices.forget(&key);
                }
                return Ok((plan.outcome, requeue(&plan)));
            }
            Err(e) => match e.stale_view() {
                Some(_) if stale < crate::controller::REREADS => {
                    stale += 1;
                    tracing::debug!(error = %e, "the view was behind; reading live");
                    read_live(ctx, ns, name, &mut live).await?;
                }
                _ => return Err(e),
            },
        }
    }
}

/// The slice as this pass sees it (read live, our own write, or the view; `None`: gone) and
/// what it needs.
fn observe_decide(
    ctx: &Context,
    ns: &str,
    name: &str,
    key: &ObjectRef<SliceView>,
    viewed: Option<&SliceView>,
    live: &Live,
) -> (Option<SliceView>, Plan) {
    let slice = match &live.slice {
        Some(slice) => slice.clone(),
        None => viewed.map(|v| {
            ctx.own_slices
                .over(key, v.metadata.resource_version.as_deref())
                .unwrap_or_else(|| v.clone())
        }),
    };
    let referring = referring(ctx, ns, name);
    let referring: Vec<&ExportView> = referring.iter().map(Arc::as_ref).collect();
    let Some(seen) = &slice else {
        return (slice, decide_gone(ctx.halves, &referring));
    };
    let export = match &live.export {
        Some(export) => export.clone().map(Arc::new),
        None => service_of(seen).and_then(|service| {
            ctx.exports
                .get(&ObjectRef::new_with(&service, ctx.se_version).within(ns))
                .map(|se| Arc::new(ExportVerdict::from(se.to_export())))
        }),
    };
    let named = named(ctx, seen, live);
    let suffix = format!("{:05x}", rand::random_range(0..0x100000u32));
    let now = Timestamp::now();
    let other = named.as_deref().and_then(|e| {
        let since = crate::controller::writers::since(ctx.engaged, now);
        e.writers.other_writer(since)
    });
    let plan = decide(&Observation {
        member: &ctx.member,
        halves: ctx.halves,
        slice: seen,
        export: export.as_deref(),
        named: named.as_deref(),
        referring: &referring,
        now,
        suffix: &suffix,
        max_bytes: ctx.max_export_bytes,
    })
    .left_to(other);
    (slice, plan)
}

/// Logs what the plan leaves out of the export: the whole of it (too large), or addresses.
fn warn_of(ctx: &Context, ns: &str, name: &str, plan: &Plan) {
    if let Some(bytes) = plan.too_large {
        tracing::warn!(member = %ctx.member, slice = %format!("{ns}/{name}"), bytes, limit = ctx.max_export_bytes, "EndpointSlice not exported: its export would be larger than --max-export-bytes");
    }
    if !plan.malformed.is_empty() {
        tracing::warn!(member = %ctx.member, slice = %format!("{ns}/{name}"), addresses = ?plan.malformed, "addresses that are not IPv4 left out of the export");
    }
}

fn requeue(plan: &Plan) -> Action {
    if plan.recheck {
        Action::requeue(RECHECK)
    } else {
        Action::await_change()
    }
}

/// How soon a slice whose export is terminating is looked at again.
const RECHECK: Duration = Duration::from_secs(5);

/// Whether the view shows the ServiceExport of `slice` being deleted. A withdrawal for that
/// rests on no absence in a view, and a deletion once begun is not undone, so it is made
/// without live reads (a member leaving withdraws every slice at once: two reads each were
/// two fifths of its requests). The export's delete is still only of the UID the view showed,
/// and a slice gone meanwhile answers the annotation write with a 404 (read live then).
fn export_deleting(ctx: &Context, ns: &str, slice: Option<&SliceView>) -> bool {
    slice
        .and_then(service_of)
        .and_then(|service| {
            ctx.exports
                .get(&ObjectRef::new_with(&service, ctx.se_version).within(ns))
        })
        .is_some_and(|se| {
            kube::Resource::meta(se.as_ref())
                .deletion_timestamp
                .is_some()
        })
}

fn service_of(slice: &SliceView) -> Option<String> {
    slice.service.clone()
}

fn unique_name(slice: &SliceView) -> Option<&String> {
    slice.unique_name.as_ref()
}

/// The export under the slice's unique name: read live, our own write, or the view.
fn named(ctx: &Context, slice: &SliceView, live: &Live) -> Option<Arc<ExportView>> {
    let name = unique_name(slice)?;
    if let Some((read, export)) = &live.named
        && read == name
    {
        return export.clone().map(Arc::new);
    }
    let viewed = ctx
        .hub_view
        .get(&ObjectRef::new(name).within(&ctx.hub_namespace));
    let view_rv = viewed.as_ref().and_then(|e| e.id.resource_version.clone());
    match ctx.own_exports.over(name, view_rv.as_deref()) {
        Some(own) => own.map(Arc::new),
        None => viewed,
    }
}

/// The export a held plan leaves alone, as a Warning names it.
fn plan_export(ctx: &Context, slice: Option<&SliceView>) -> String {
    let name = slice.and_then(unique_name).map_or("", String::as_str);
    format!("EndpointSliceExport {}/{name}", ctx.hub_namespace)
}

/// The exports in the view that refer to `ns/name`.
fn referring(ctx: &Context, ns: &str, name: &str) -> Vec<Arc<ExportView>> {
    ctx.hub_view
        .state()
        .into_iter()
        .filter(|e| e.slice_namespace == ns && e.slice_name == name)
        .collect()
}

async fn read_live(ctx: &Context, ns: &str, name: &str, live: &mut Live) -> Result<(), Error> {
    let slices: Api<SliceView> = Api::namespaced(ctx.member_client.clone(), ns);
    let slice = slices.get_opt(name).await.map_err(ApiFailure::of(
        &ctx.member,
        ns,
        name,
        Step::GetEndpointSlice,
    ))?;
    let export = match slice.as_ref().and_then(service_of) {
        Some(service) => {
            let exports: Api<ExportVerdict> =
                Api::namespaced_with(ctx.member_client.clone(), ns, &ctx.se_version);
            exports.get_opt(&service).await.map_err(ApiFailure::of(
                &ctx.member,
                ns,
                name,
                Step::GetServiceExport,
            ))?
        }
        None => None,
    };
    live.slice = Some(slice);
    live.export = Some(export);
    // The export a withdrawal would delete, as the hub has it now.
    read_named(ctx, ns, name, live).await
}

async fn read_named(ctx: &Context, ns: &str, name: &str, live: &mut Live) -> Result<(), Error> {
    let Some(unique) = live
        .slice
        .as_ref()
        .and_then(|s| s.as_ref())
        .and_then(unique_name)
        .filter(|n| is_dns1123_subdomain(n))
    else {
        return Ok(());
    };
    let export = ctx
        .hub
        .get_opt(unique)
        .await
        .map(|e| e.map(ExportView::from))
        .map_err(ApiFailure::of(
            &ctx.member,
            ns,
            name,
            Step::GetEndpointSliceExport,
        ))?;
    live.named = Some((unique.clone(), export));
    Ok(())
}

/// Looks at every export whose slice the view does not have once the views have listed, each
/// time this replica becomes leader and every [`SWEEP_EVERY`]; and at each slice named on
/// `absent` meanwhile. Ends when the exporter drops it.
pub(super) async fn sweep(ctx: Arc<Context>, mut absent: mpsc::Receiver<Absent>) {
    ctx.views.wait().await;
    sweep_all(&ctx).await;
    let mut gained = Box::pin(futures::StreamExt::fuse(ctx.claim.gained()));
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.tick().await;
    loop {
        tokio::select! {
            next = absent.recv() => match next {
                Some((ns, name)) => look_at(&ctx, &ns, &name).await,
                None => std::future::pending().await,
            },
            // Ends when the claim can no longer change (no election, or it is over).
            Some(()) = futures::StreamExt::next(&mut gained) => sweep_all(&ctx).await,
            _ = every.tick() => sweep_all(&ctx).await,
        }
    }
}

/// The reference controllers re-scan their exports every five minutes for slices deleted
/// while nobody watched; here the view tells which ones to read live.
const SWEEP_EVERY: Duration = Duration::from_secs(300);

async fn sweep_all(ctx: &Context) {
    if !ctx.halves.cleanup {
        // The EndpointSlice controller alone ignores an export whose slice it does not see;
        // the slices of no Service that it withdraws come from their own watch.
        return;
    }
    let mut keys: Vec<(String, String)> =
        ctx.hub_view.state().iter().map(|e| referred(e)).collect();
    keys.sort();
    keys.dedup();
    for (ns, name) in keys {
        look_at(ctx, &ns, &name).await;
    }
}

/// A slice the view does not have: reconciled on live reads (the controller has the others).
async fn look_at(ctx: &Context, ns: &str, name: &str) {
    if !ctx.claim.may_write() || ctx.slices.get(&ObjectRef::new(name).within(ns)).is_some() {
        return;
    }
    // Errors are logged and counted by `traced`; the next event or sweep tries again. Boxed:
    // the sweep waits most of its life, and would otherwise hold room for a whole reconcile.
    let _ = Box::pin(traced(ctx, ns, name, None)).await;
}

/// Exponential (1 s doubling to 5 min), jittered, per slice, never sooner than a server
/// asked; reset by a success ([`crate::controller::failed`]).
pub(super) fn error_policy(slice: Arc<SliceView>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj(slice.as_ref());
    crate::controller::failed(error, &ctx.failures, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recheck_requeues_and_anything_else_waits_for_a_change() {
        let both = super::super::decide::Halves::BOTH;
        assert_eq!(requeue(&decide_gone(both, &[])), Action::await_change());
        let mut plan = decide_gone(both, &[]);
        plan.recheck = true;
        assert_eq!(requeue(&plan), Action::requeue(RECHECK));
    }
}
