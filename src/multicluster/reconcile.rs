//! One reconcile of one MultiClusterService: observe (views and our own writes; live reads
//! before a derived Service is deleted and after a write found a view behind) → [`decide`] →
//! [`act::perform`]; and how failures are requeued.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::act;
use super::context::Context;
use super::decide::{Observation, Outcome, decide, derived_service_name};
use super::error::{Error, Step};
use crate::api::{MultiClusterService, ServiceImport};
use crate::controller::runner::Action;
use crate::controller::{ApiFailure, REREADS, reported};

/// Reconciles one MultiClusterService: one trace per call, a root span
/// `reconcile_multiclusterservice`.
pub(super) async fn reconcile(
    mcs: Arc<MultiClusterService>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let ns = mcs.namespace().unwrap_or_default();
    let name = mcs.name_any();
    let span = crate::controller::reconcile_span!(
        "reconcile_multiclusterservice", %ctx.member, %ns,
        fleet.multiclusterservice.name = %name, requeue
    );
    let key = ObjectRef::new(&name).within(&ns);
    let work = observe_decide_act(&ctx, &mcs, &key);
    reported(
        span,
        ctx.observer.as_ref(),
        &ctx.member,
        &ctx.failures,
        &key,
        work,
    )
    .await
}

async fn observe_decide_act(
    ctx: &Context,
    viewed: &MultiClusterService,
    key: &ObjectRef<MultiClusterService>,
) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        // Standby: the views stay warm; becoming leader reconciles everything.
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let own = ctx
        .own_mcs
        .over(key, viewed.metadata.resource_version.as_deref());
    let mut pass = Pass {
        mcs: own.unwrap_or_else(|| viewed.clone()),
        live: None,
    };
    let mut rereads = 0;
    loop {
        let (import, service) = pass.seen(ctx);
        let plan = decide(&Observation {
            mcs: &pass.mcs,
            import: import.as_ref(),
            service: service.as_ref(),
        });
        tracing::debug!(
            writes = plan.writes.len(),
            outcome = plan.outcome.label(),
            "decided"
        );
        if plan.withdraws() && pass.live.is_none() {
            // Views may be behind: a derived Service is deleted only on what the API says now.
            if !pass.read_live(ctx, key).await? {
                return Ok((Outcome::Skipped, Action::await_change()));
            }
            continue;
        }
        match act::perform(ctx, &pass.mcs, &plan).await {
            Ok(()) => return finished(ctx, &pass.mcs, plan),
            Err(e) if e.stale_view() && rereads < REREADS => {
                rereads += 1;
                tracing::debug!(error = %e, "a view was behind; reading live");
                if !pass.read_live(ctx, key).await? {
                    return Ok((Outcome::Skipped, Action::await_change()));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// The outcome and the requeue of a carried-out plan; a refused import fails the reconcile
/// (retried with backoff, as the reference's error is).
fn finished(
    ctx: &Context,
    mcs: &MultiClusterService,
    plan: super::decide::Plan,
) -> Result<(Outcome, Action), Error> {
    if let Some(owner) = plan.refused {
        return Err(Error::ControlledElsewhere {
            member: ctx.member.clone(),
            namespace: mcs.namespace().unwrap_or_default(),
            name: mcs.name_any(),
            import: mcs.spec.service_import.name.clone(),
            owner,
        });
    }
    let action = plan.requeue.map_or(Action::await_change(), Action::requeue);
    Ok((plan.outcome, action))
}

/// One reconcile's observations: the MultiClusterService as last read, and the import and
/// derived Service read live (`Some`), else from the views.
struct Pass {
    mcs: MultiClusterService,
    live: Option<(Option<ServiceImport>, Option<Service>)>,
}

impl Pass {
    /// The import and derived Service: live, our own writes the views do not show yet, or
    /// the views.
    fn seen(&self, ctx: &Context) -> (Option<ServiceImport>, Option<Service>) {
        if let Some((import, service)) = &self.live {
            return (import.clone(), service.clone());
        }
        let ns = self.mcs.namespace().unwrap_or_default();
        let import_name = &self.mcs.spec.service_import.name;
        let viewed = ctx.imports.get(&ObjectRef::new(import_name).within(&ns));
        let rv = viewed
            .as_ref()
            .and_then(|si| si.metadata.resource_version.clone());
        let import = match ctx
            .own_imports
            .over(&(ns, import_name.clone()), rv.as_deref())
        {
            Some(own) => own,
            None => viewed.map(|si| si.as_ref().clone()),
        };
        let service_name = derived_service_name(&self.mcs);
        let key = ObjectRef::new(&service_name).within(&ctx.fleet_system_namespace);
        let viewed = ctx.services.get(&key);
        let rv = viewed
            .as_ref()
            .and_then(|s| s.metadata.resource_version.clone());
        let service = match ctx.own_services.over(&service_name, rv.as_deref()) {
            Some(own) => own,
            None => viewed.map(|s| s.as_ref().clone()),
        };
        (import, service)
    }

    /// Reads the MultiClusterService, its import and its derived Service from the API.
    /// `false`: the MultiClusterService is gone.
    async fn read_live(
        &mut self,
        ctx: &Context,
        key: &ObjectRef<MultiClusterService>,
    ) -> Result<bool, Error> {
        let ns = key.namespace.as_deref().unwrap_or_default();
        let failed = |step| ApiFailure::of(&ctx.member, ns, &key.name, step);
        let api: Api<MultiClusterService> = Api::namespaced(ctx.member_client.clone(), ns);
        let Some(mcs) = api
            .get_opt(&key.name)
            .await
            .map_err(failed(Step::GetMultiClusterService))?
        else {
            return Ok(false);
        };
        let imports: Api<ServiceImport> = Api::namespaced(ctx.member_client.clone(), ns);
        let import = imports
            .get_opt(&mcs.spec.service_import.name)
            .await
            .map_err(failed(Step::GetServiceImport))?;
        let services: Api<Service> =
            Api::namespaced(ctx.member_client.clone(), &ctx.fleet_system_namespace);
        let service = services
            .get_opt(&derived_service_name(&mcs))
            .await
            .map_err(failed(Step::GetService))?;
        self.mcs = mcs;
        self.live = Some((import, service));
        Ok(true)
    }
}

/// Exponential (1 s doubling to 5 min), jittered, per MultiClusterService, never sooner than
/// a server asked; reset by a success ([`crate::controller::failed`]).
pub(super) fn error_policy(
    mcs: Arc<MultiClusterService>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = ObjectRef::new(&mcs.name_any()).within(&mcs.namespace().unwrap_or_default());
    crate::controller::failed(error, &ctx.failures, key)
}
