//! One reconcile of each half: observe (views, our own writes, live reads where a view may be
//! behind) → decide (pure, [`super::decide`]) → act, one step at a time until converged; and
//! how failures are requeued.

use std::sync::Arc;

use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use super::decide::{self, Back, Forward, Labelled, Outcome, internal_name};
use super::error::Error;
use super::model::{ImportView, InternalView};
use super::views::{import_key, internal_key};
use crate::controller::runner::Action;
use crate::controller::writers;
use jiff::Timestamp;

/// The most steps one forward reconcile takes (finalizer, copy; or delete, release), and
/// rereads after a conflict, before it is requeued.
const MAX_STEPS: u32 = 2 + 2 * crate::controller::REREADS;

/// Reconciles one ServiceImport: one trace per call, a root span `reconcile_serviceimport`.
pub(super) async fn forward(si: Arc<ImportView>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = crate::controller::reconcile_span!(
        "reconcile_serviceimport", %ctx.member, %si.id.namespace, fleet.serviceimport.name = %si.id.name
    );
    let key = import_key(&si.id.namespace, &si.id.name);
    let work = forward_steps(&ctx, &key, si.as_ref().clone());
    let observer = ctx.observer.as_ref();
    crate::controller::reported(
        span,
        observer,
        &ctx.member,
        &ctx.forward_failures,
        &key,
        work,
    )
    .await
}

async fn forward_steps(
    ctx: &Context,
    key: &ObjectRef<ImportView>,
    viewed: ImportView,
) -> Result<(Labelled, Action), Error> {
    let done = |outcome| {
        Ok((
            Labelled {
                job: decide::NAME,
                outcome,
            },
            Action::await_change(),
        ))
    };
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        return done(Outcome::Skipped);
    }
    let mut si = match ctx
        .own_imports
        .over(key, viewed.id.resource_version.as_deref())
    {
        Some(None) => return done(Outcome::Gone),
        Some(Some(own)) => own,
        None => viewed,
    };
    let name = internal_name(&si.id.namespace, &si.id.name);
    let mut isi = internal_seen(ctx, &name);
    let mut outcome = Outcome::Unchanged;
    for _ in 0..MAX_STEPS {
        let step = decide::forward(&ctx.member, &si, isi.as_ref());
        if let Some(held) = left_to_agent(ctx, &step, isi.as_ref(), &name) {
            return Ok(held);
        }
        let seen = isi.as_ref().map(|i| i.id.resource_version.clone());
        tracing::debug!(?step, si = ?si.id.resource_version, ?seen, "decided");
        if step == Forward::Nothing {
            return done(outcome);
        }
        let result = forward_step(ctx, &step, &mut si, &mut isi).await;
        match result {
            Ok(()) => {
                outcome = outcome.of_forward(&step);
                if step == Forward::RemoveFinalizer {
                    return done(outcome);
                }
            }
            Err(e) if e.stale_view() => {
                tracing::debug!(error = %e, "a view was behind; reading live");
                let Some(live) = ctx.read_import(&si.id.namespace, &si.id.name).await? else {
                    return done(Outcome::Gone);
                };
                isi = ctx
                    .read_internal(&live.id.namespace, &live.id.name, &name)
                    .await?;
                si = live;
            }
            Err(e) => return Err(e),
        }
    }
    // Still moving under us: the next trigger (our own writes' events) goes on.
    done(outcome)
}

/// Takes `step` (not [`Forward::Nothing`]) on `si` and its copy `isi`, each updated to what the
/// write returned.
async fn forward_step(
    ctx: &Context,
    step: &Forward,
    si: &mut ImportView,
    isi: &mut Option<InternalView>,
) -> Result<(), Error> {
    match step {
        Forward::Nothing => Ok(()),
        Forward::AddFinalizer => ctx.set_finalizer(si, true).await.map(|s| *si = s),
        Forward::RemoveFinalizer => ctx.set_finalizer(si, false).await.map(|_| ()),
        Forward::Create(reference) => {
            let view_rv = None;
            ctx.create_internal(si, reference, view_rv)
                .await
                .map(|i| *isi = Some(i))
        }
        Forward::Update(reference) => match isi {
            Some(seen) => ctx
                .update_internal(si, seen, reference)
                .await
                .map(|i| *isi = Some(i)),
            None => Ok(()),
        },
        Forward::DeleteInternal => match isi {
            Some(seen) => {
                let who = (si.id.namespace.as_str(), si.id.name.as_str());
                ctx.delete_internal(seen, who).await.map(|_| *isi = None)
            }
            None => Ok(()),
        },
    }
}

/// When `step` would update copy `name`, which the agent wrote last since the job started for
/// the member: told, and looked at again when the agent's write stops holding it (or on a
/// change).
fn left_to_agent(
    ctx: &Context,
    step: &Forward,
    isi: Option<&InternalView>,
    name: &str,
) -> Option<(Labelled, Action)> {
    let now = Timestamp::now();
    let other = isi?.writers.other_writer(writers::since(ctx.engaged, now));
    let other = decide::left_to(step, other)?;
    let object = format!("InternalServiceImport {}/{name}", ctx.hub_namespace);
    crate::controller::tell_other_writer(
        ctx.observer.as_ref(),
        decide::NAME,
        &ctx.member,
        &object,
        &other,
    );
    let labelled = Labelled {
        job: decide::NAME,
        outcome: Outcome::OtherWriter,
    };
    Some((labelled, Action::requeue(other.wait(now))))
}

/// The InternalServiceImport `name` as this pass sees it: our own last write while the view
/// has not shown it, or the view.
fn internal_seen(ctx: &Context, name: &str) -> Option<InternalView> {
    let viewed = ctx.internals.get(&internal_key(&ctx.hub_namespace, name));
    let view_rv = viewed.as_ref().and_then(|i| i.id.resource_version.clone());
    match ctx
        .own_internals
        .over(&name.to_string(), view_rv.as_deref())
    {
        Some(own) => own,
        None => viewed.map(|i| i.as_ref().clone()),
    }
}

/// Reconciles one InternalServiceImport: a root span `reconcile_internalserviceimport`.
pub(super) async fn back(isi: Arc<InternalView>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = crate::controller::reconcile_span!(
        "reconcile_internalserviceimport", %ctx.member, %isi.id.namespace,
        fleet.internalserviceimport.name = %isi.id.name
    );
    let key = internal_key(&isi.id.namespace, &isi.id.name);
    let work = back_steps(&ctx, &isi.id.name);
    let observer = ctx.observer.as_ref();
    crate::controller::reported(span, observer, &ctx.member, &ctx.back_failures, &key, work).await
}

async fn back_steps(ctx: &Context, name: &str) -> Result<(Labelled, Action), Error> {
    let done = |outcome| {
        let job = decide::BACK_NAME;
        Ok((Labelled { job, outcome }, Action::await_change()))
    };
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        return done(Outcome::Skipped);
    }
    let Some(isi) = internal_seen(ctx, name) else {
        return done(Outcome::Gone);
    };
    let (ns, si_name) = isi.referred();
    let mut si = import_seen(ctx, ns, si_name);
    let mut live = false;
    for _ in 0..=crate::controller::REREADS {
        let result = match decide::back(&isi, si.as_ref()) {
            Back::Nothing => return done(Outcome::Unchanged),
            Back::Invalid => {
                tracing::warn!(member = %ctx.member, copy = %isi.id.name, "InternalServiceImport names no ServiceImport; left alone");
                return done(Outcome::InvalidReference);
            }
            Back::DeleteInternal if !live => Err(None),
            Back::DeleteInternal => {
                // Read live: the member has no such ServiceImport now.
                let deleted = ctx.delete_internal(&isi, (ns, si_name)).await?;
                let outcome = if deleted {
                    Outcome::DanglingDeleted
                } else {
                    Outcome::Gone
                };
                return done(outcome);
            }
            Back::WriteStatus => match &si {
                Some(seen) => ctx.write_status(seen, &isi.status).await.map_err(Some),
                None => Err(None),
            },
        };
        match result {
            Ok(_) => return done(Outcome::Reflected),
            // Never delete because a view misses something, and a stale view's write failed:
            // read the member live and decide again.
            Err(None) => {}
            Err(Some(e)) if e.stale_view() => {
                tracing::debug!(error = %e, "the view was behind; reading live");
            }
            Err(Some(e)) => return Err(e),
        }
        si = ctx.read_import(ns, si_name).await?;
        live = true;
    }
    done(Outcome::Unchanged)
}

/// The ServiceImport `ns/name` as this pass sees it: our own last write while the view has
/// not shown it, or the view.
fn import_seen(ctx: &Context, ns: &str, name: &str) -> Option<ImportView> {
    let key = import_key(ns, name);
    let viewed = ctx.imports.get(&key);
    let view_rv = viewed.as_ref().and_then(|s| s.id.resource_version.clone());
    match ctx.own_imports.over(&key, view_rv.as_deref()) {
        Some(own) => own,
        None => viewed.map(|s| s.as_ref().clone()),
    }
}

/// Exponential (1 s doubling to 5 min), jittered, per ServiceImport, never sooner than a
/// server asked; reset by a success ([`crate::controller::failed`]).
pub(super) fn forward_policy(si: Arc<ImportView>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = import_key(&si.id.namespace, &si.id.name);
    crate::controller::failed(error, &ctx.forward_failures, key)
}

/// As [`forward_policy`], per InternalServiceImport.
pub(super) fn back_policy(isi: Arc<InternalView>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = internal_key(&isi.id.namespace, &isi.id.name);
    crate::controller::failed(error, &ctx.back_failures, key)
}
