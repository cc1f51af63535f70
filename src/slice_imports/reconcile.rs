//! One reconcile of one EndpointSliceImport: observe (views, our own writes, live reads
//! before withdrawing anything or after a refusal) → [`decide`] → [`act::perform`]; how
//! failures are requeued.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::act;
use super::context::Context;
use super::decide::{
    DerivedService, Observation, Outcome, Plan, RETRY, decide, derived_service_name,
};
use super::error::{Error, Step};
use crate::api::{EndpointSliceImport, MultiClusterService};
use crate::controller::ApiFailure;
use crate::controller::runner::Action;

/// Reconciles one import of the view: one trace per call, a root span
/// `reconcile_endpointsliceimport`.
pub(super) async fn reconcile(
    import: Arc<EndpointSliceImport>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = import.name_any();
    let span = crate::controller::reconcile_span!(
        "reconcile_endpointsliceimport", %ctx.member, %ctx.hub_namespace,
        fleet.endpointsliceimport.name = %name
    );
    let key = ObjectRef::new(&name).within(&ctx.hub_namespace);
    let work = observe_decide_act(&ctx, &name, &import);
    let observer = ctx.observer.as_ref();
    crate::controller::reported(span, observer, &ctx.member, &ctx.failures, &key, work).await
}

/// What was read live in this reconcile (`None`: not read, use the views).
#[derive(Default)]
struct Live {
    import: Option<Option<EndpointSliceImport>>,
    slice: Option<Option<EndpointSlice>>,
}

async fn observe_decide_act(
    ctx: &Context,
    name: &str,
    viewed: &EndpointSliceImport,
) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let mut live = Live::default();
    let mut stale = 0;
    loop {
        let Some((import, slice, plan)) = observe_decide(ctx, name, viewed, &live) else {
            // Gone from the hub: nothing of it is ours to do (the reference's NotFound).
            ctx.own_imports.forget(&name.to_string());
            return Ok((Outcome::Skipped, Action::await_change()));
        };
        tracing::debug!(
            writes = plan.writes(),
            outcome = plan.outcome.label(),
            "decided"
        );
        if plan.withdraws() && live.import.is_none() {
            // Delete only on what the APIs say now.
            read_live(ctx, name, &mut live).await?;
            continue;
        }
        match act::perform(ctx, name, &import, slice.as_ref(), &plan).await {
            Ok(()) => return Ok((plan.outcome, requeue(&plan))),
            Err(e) if e.stale_view() && stale < crate::controller::REREADS => {
                stale += 1;
                tracing::debug!(error = %e, "the view was behind; reading live");
                read_live(ctx, name, &mut live).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

fn requeue(plan: &Plan) -> Action {
    if plan.retry {
        Action::requeue(RETRY)
    } else {
        Action::await_change()
    }
}

/// The import and its slice as this pass sees them (read live, our own write, or the view)
/// and the plan; `None` when the import is gone.
fn observe_decide(
    ctx: &Context,
    name: &str,
    viewed: &EndpointSliceImport,
    live: &Live,
) -> Option<(EndpointSliceImport, Option<EndpointSlice>, Plan)> {
    let key = name.to_string();
    let import = match &live.import {
        Some(import) => import.clone()?,
        None => {
            let in_view = ctx
                .imports
                .get(&ObjectRef::new(name).within(&ctx.hub_namespace));
            let in_view = in_view.as_deref().unwrap_or(viewed);
            ctx.own_imports
                .over(&key, in_view.metadata.resource_version.as_deref())
                .unwrap_or_else(|| in_view.clone())
        }
    };
    let slice = match &live.slice {
        Some(slice) => slice.clone(),
        None => {
            let in_view = ctx
                .slices
                .get(&ObjectRef::new(name).within(&ctx.fleet_namespace));
            let rv = in_view
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone());
            ctx.own_slices
                .over(&key, rv.as_deref())
                .unwrap_or_else(|| in_view.map(|s| s.as_ref().clone()))
        }
    };
    let mcses = importers(ctx, &import);
    let derived = derived_state(ctx, &derived_service_name(&mcses));
    let plan = decide(&Observation {
        import: &import,
        member: &ctx.member,
        namespace: &ctx.fleet_namespace,
        multi_cluster_services: &mcses,
        derived,
        slice: slice.as_ref(),
        now: Timestamp::now(),
    });
    Some((import, slice, plan))
}

/// The member's MultiClusterServices that import the import's owner Service.
fn importers(ctx: &Context, import: &EndpointSliceImport) -> Vec<Arc<MultiClusterService>> {
    let owner = &import.spec.owner_service_reference;
    ctx.multi_cluster_services
        .state()
        .into_iter()
        .filter(|m| {
            m.metadata.namespace.as_deref() == Some(owner.namespace.as_str())
                && m.spec.service_import.name == owner.name
        })
        .collect()
}

fn derived_state(ctx: &Context, name: &str) -> DerivedService {
    let key = ObjectRef::new(name).within(&ctx.fleet_namespace);
    match ctx.services.get(&key) {
        None => DerivedService::Missing,
        Some(s) if s.metadata.deletion_timestamp.is_some() => DerivedService::Deleting,
        Some(_) => DerivedService::Live,
    }
}

async fn read_live(ctx: &Context, name: &str, live: &mut Live) -> Result<(), Error> {
    let err = |step| ApiFailure::of(&ctx.member, &ctx.hub_namespace, name, step);
    let import = ctx
        .hub
        .get_opt(name)
        .await
        .map_err(err(Step::GetEndpointSliceImport))?;
    let slice = ctx
        .member_slices
        .get_opt(name)
        .await
        .map_err(err(Step::GetEndpointSlice))?;
    live.import = Some(import.map(|mut i| {
        i.metadata.managed_fields = None;
        i
    }));
    live.slice = Some(slice);
    Ok(())
}

/// Exponential (1 s doubling to 5 min), jittered, per import, never sooner than a server
/// asked; reset by a success ([`crate::controller::failed`]).
pub(super) fn error_policy(
    import: Arc<EndpointSliceImport>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = ObjectRef::from_obj(import.as_ref());
    crate::controller::failed(error, &ctx.failures, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_for_the_derived_service_requeues_after_two_seconds() {
        let mut plan = decide(&Observation {
            import: &EndpointSliceImport::default(),
            member: "m1",
            namespace: "fleet-system",
            multi_cluster_services: &[],
            derived: DerivedService::Missing,
            slice: None,
            now: Timestamp::UNIX_EPOCH,
        });
        assert_eq!(requeue(&plan), Action::await_change());
        plan.retry = true;
        assert_eq!(requeue(&plan), Action::requeue(RETRY));
    }
}
