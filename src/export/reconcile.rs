//! One reconcile: observe (views, live reads before withdrawing anything, the public IP) →
//! [`decide`] → [`act::perform`]; and how failures and rechecks are requeued.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tracing::{Instrument, field};

use super::act;
use super::context::Context;
use super::decide::quota::{self, Age};
use super::decide::{
    self, Observation, Outcome, PublicIpObservation, PublicIpQuery, Standing, decide, ise_name,
    public_ip_query,
};
use super::error::Conflict;
use super::error::{Error, Step};
use super::public_ip::LookupError;
use crate::api::{InternalServiceExport, ServiceExport};
use crate::client::FIELD_MANAGER;
use crate::controller::ApiFailure;
use crate::controller::runner::Action;
use crate::controller::writers;
use crate::controller::{backoff, reported};
use crate::service_exports::ServiceExportView;

/// Reconciles one ServiceExport: one trace per call, a root span `reconcile`.
pub(super) async fn reconcile(se: Arc<ServiceExport>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = se.namespace().unwrap_or_default();
    let name = se.name_any();
    let span = crate::controller::reconcile_span!(
        "reconcile", %ctx.member, %ns, fleet.serviceexport.name = %name, requeue
    );
    let key = ObjectRef::from_obj_with(se.as_ref(), ctx.se_version);
    let work = reconcile_inner(&se, &ctx);
    let observer = ctx.observer.as_ref();
    reported(span, observer, &ctx.member, &ctx.failures, &key, work).await
}

/// Observe → decide → act. Nothing is decided before every view has listed; a plan that
/// withdraws an export is decided again on live reads of the Service and the ISE before it
/// is carried out; a 409 (stale view, concurrent writer) re-observes from the API.
async fn reconcile_inner(se: &ServiceExport, ctx: &Context) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !ctx.claim.may_write() {
        // Standby: caches stay warm; becoming leader reconciles everything.
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let key = ObjectRef::from_obj_with(se, ctx.se_version);
    let own = ctx
        .own_exports
        .over(&key, se.metadata.resource_version.as_deref());
    let mut pass = Pass::new(own.unwrap_or_else(|| se.clone()));
    let mut conflicts = 0;
    loop {
        let now = Timestamp::now();
        let seen = pass.seen(ctx);
        let service = seen.service.as_deref();
        let (public_ip, throttled_for) = observe_public_ip(ctx, service).await;
        let observation = Observation {
            export: &pass.export,
            service,
            ise: seen.ise.as_deref(),
            public_ip: &public_ip,
            now,
            standing: standing(ctx, &pass, seen.ise.as_deref()),
        };
        let other = seen.ise.as_deref().and_then(|ise| {
            let since = writers::since(ctx.engaged, now);
            writers::other_writer(&ise.metadata, FIELD_MANAGER, since)
        });
        let plan = decide(&ctx.settings, &observation).left_to(other);
        tracing::debug!(writes = plan.writes(), outcome = %plan.outcome.label(), "decided");
        if let Some(other) = &plan.held {
            let ise = format!("InternalServiceExport {}", ise_name(&pass.ns, &pass.name));
            let observer = ctx.observer.as_ref();
            crate::controller::tell_other_writer(observer, super::NAME, &ctx.member, &ise, other);
            // Looked at again when the agent's write stops holding the ISE (or on a change).
            return Ok((plan.outcome, Action::requeue(other.wait(now))));
        }
        let deleting = pass.export.metadata.deletion_timestamp.is_some();
        if plan.unexports() && !deleting && pass.live_service.is_none() {
            // Views may be behind: withdraw an export only on what the API says now.
            pass.read_live(ctx).await?;
            continue;
        }
        match act::perform(ctx, &pass.export, &plan, now).await {
            Ok(done) => {
                return performed(ctx, &pass, plan, &done, seen.view_rv, throttled_for, now);
            }
            Err(e) => match e.conflict() {
                Some(conflict) if conflicts < crate::controller::REREADS => {
                    conflicts += 1;
                    tracing::debug!(error = %e, "conflict; reading the objects again");
                    // The hub is implicated by its own 409, or by this plan's ISE delete that
                    // may have gone through before the member refused.
                    let hub_changed = conflict == Conflict::Hub
                        || matches!(plan.hub, Some(decide::HubWrite::Delete { .. }));
                    if !pass.reread(ctx, hub_changed).await? {
                        return Ok((Outcome::Skipped, Action::await_change()));
                    }
                }
                _ => return Err(e),
            },
        }
    }
}

/// Where the export stands against the member's export quota: the member's ISEs in the view
/// (this export's own name aside) and its exports ahead of this one in line that wait for a
/// place (not being deleted, not found unexportable, their Service in the view, no ISE yet).
/// Counted only for an export without an ISE of its own (the others keep theirs), and the
/// line is walked only when the ISEs alone leave a place.
fn standing(ctx: &Context, pass: &Pass, ise: Option<&InternalServiceExport>) -> Standing {
    let namespaced_name = format!("{}/{}", pass.ns, pass.name);
    if ise.is_some_and(|ise| ise.spec.service_reference.namespaced_name == namespaced_name) {
        return Standing::default();
    }
    let ise_of = |ns: &str, name: &str| {
        ctx.ises
            .get(&ObjectRef::new(&ise_name(ns, name)).within(&ctx.hub_namespace))
            .is_some()
    };
    let all_ises = ctx.ises.len();
    let exported = all_ises.saturating_sub(usize::from(ise_of(&pass.ns, &pass.name)));
    let standing = Standing { exported, ahead: 0 };
    if !standing.admitted(ctx.settings.quotas.max_exports) {
        return standing;
    }
    let created = |meta: &kube::api::ObjectMeta| meta.creation_timestamp.as_ref().map(|t| t.0);
    let me = Age::new(created(&pass.export.metadata), &pass.ns, &pass.name);
    let exports = ctx.exports.state();
    let waiting = exports.iter().filter_map(|se| {
        let meta = kube::Resource::meta(se.as_ref());
        let (ns, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
        let age = Age::new(created(meta), ns, name);
        // Cheapest test first: most exports of a long line are not ahead.
        let wants = age < me
            && meta.deletion_timestamp.is_none()
            && !refused(se)
            && !ise_of(ns, name)
            && ctx.services.get(&ObjectRef::new(name).within(ns)).is_some();
        wants.then_some(age)
    });
    Standing {
        ahead: quota::ahead(me, waiting),
        ..standing
    }
}

/// Its last decision found the export not exportable (`Valid=False` for a reason other than
/// the export quota: no Service, ineligible, too large...): it waits for no place in the hub.
fn refused(se: &ServiceExportView) -> bool {
    crate::api::find_condition(se.conditions(), crate::api::CONDITION_VALID)
        .is_some_and(|c| c.status == "False" && c.reason != decide::reason::QUOTA_EXCEEDED)
}

/// One reconcile's observations beyond the views: live reads (`Some(x)`: read this reconcile,
/// `x` what was there) and the export as last read.
struct Pass {
    export: ServiceExport,
    ns: String,
    name: String,
    live_service: Option<Option<Arc<Service>>>,
    live_ise: Option<Option<Arc<InternalServiceExport>>>,
}

/// What one decision reads, and the view's version of the ISE it read.
struct Seen {
    service: Option<Arc<Service>>,
    ise: Option<Arc<InternalServiceExport>>,
    view_rv: Option<String>,
}

impl Pass {
    fn new(export: ServiceExport) -> Self {
        Self {
            ns: export.namespace().unwrap_or_default(),
            name: export.name_any(),
            export,
            live_service: None,
            live_ise: None,
        }
    }

    /// The views, overridden by our own writes they do not show yet, and by live reads.
    fn seen(&self, ctx: &Context) -> Seen {
        let service = match &self.live_service {
            Some(live) => live.clone(),
            None => ctx
                .services
                .get(&ObjectRef::new(&self.name).within(&self.ns))
                .map(|view| Arc::new(view.to_service())),
        };
        let hub_name = ise_name(&self.ns, &self.name);
        let cached = ctx
            .ises
            .get(&ObjectRef::new(&hub_name).within(&ctx.hub_namespace));
        let view_rv = cached.as_ref().and_then(|i| i.id.resource_version.clone());
        let viewed = match ctx.own_ises.over(&hub_name, view_rv.as_deref()) {
            Some(own) => own.map(Arc::new),
            None => cached.map(|view| Arc::new(view.to_ise())),
        };
        let ise = match &self.live_ise {
            Some(live) => live.clone(),
            None => viewed,
        };
        Seen {
            service,
            ise,
            view_rv,
        }
    }

    async fn read_live(&mut self, ctx: &Context) -> Result<(), Error> {
        let services: Api<Service> = Api::namespaced(ctx.member_client.clone(), &self.ns);
        let service = services.get_opt(&self.name).await.map_err(ApiFailure::of(
            &ctx.member,
            &self.ns,
            &self.name,
            Step::GetService,
        ))?;
        self.live_service = Some(service.map(Arc::new));
        self.live_ise = Some(ctx.read_ise(&self.ns, &self.name).await?.map(Arc::new));
        Ok(())
    }

    /// After a 409: the export as the API has it, and its ISE too when `hub_changed` (else the
    /// view, as any reconcile reads it, stands). `false`: the export is gone.
    async fn reread(&mut self, ctx: &Context, hub_changed: bool) -> Result<bool, Error> {
        let exports: Api<ServiceExport> =
            Api::namespaced_with(ctx.member_client.clone(), &self.ns, &ctx.se_version);
        let step = Step::GetServiceExport;
        match exports.get_opt(&self.name).await.map_err(ApiFailure::of(
            &ctx.member,
            &self.ns,
            &self.name,
            step,
        ))? {
            Some(latest) => self.export = latest,
            None => return Ok(false),
        }
        if hub_changed {
            self.live_ise = Some(ctx.read_ise(&self.ns, &self.name).await?.map(Arc::new));
        }
        Ok(true)
    }
}

/// After the plan was carried out: our ISE write remembered until the view shows it, the
/// latencies observed, and how the export is requeued.
fn performed(
    ctx: &Context,
    pass: &Pass,
    plan: decide::Plan,
    done: &act::Performed,
    view_before: Option<String>,
    throttled_for: Option<Duration>,
    now: Timestamp,
) -> Result<(Outcome, Action), Error> {
    record_hub_writes(ctx, &plan, done);
    let key = ObjectRef::from_obj_with(&pass.export, ctx.se_version);
    match &done.export_object {
        Some(after) => {
            let superseded = done.superseded.iter().cloned().map(Some);
            ctx.own_exports
                .wrote(key.clone(), superseded, after.clone());
        }
        None if done.member_writes > 0 => ctx.own_exports.forget(&key),
        None => {}
    }
    if let Some(after) = done.hub_object.clone() {
        let hub_name = ise_name(&pass.ns, &pass.name);
        ctx.own_ises.wrote(hub_name, [view_before], after);
    }
    if let Some(since) = plan.exported_since.filter(|_| done.hub_writes > 0) {
        // Until the ISE is written, not until the decision.
        ctx.observer
            .export_latency(&ctx.member, elapsed_since(since, Timestamp::now()));
    }
    if let Some(since) = conflict_resolved_since(&pass.export, &plan, now) {
        ctx.observer
            .conflict_reflected(&ctx.member, elapsed_since(since, now));
    }
    if let Some(message) = plan.pending {
        return Err(Error::Pending {
            member: ctx.member.clone(),
            namespace: pass.ns.clone(),
            name: pass.name.clone(),
            message,
            retry_after: throttled_for,
        });
    }
    let action = if plan.recheck {
        let n = ctx.rechecks.bump(key);
        let cap = match plan.outcome {
            Outcome::Invalid(decide::reason::QUOTA_EXCEEDED) => MAX_QUOTA_RECHECK,
            _ => MAX_RECHECK,
        };
        Action::requeue(backoff(n, rand::random::<f64>()).min(cap))
    } else {
        ctx.rechecks.clear(&key);
        Action::await_change()
    };
    Ok((plan.outcome, action))
}

fn record_hub_writes(ctx: &Context, plan: &decide::Plan, done: &act::Performed) {
    if done.hub_writes == 0 {
        return;
    }
    let op = match plan.hub {
        Some(decide::HubWrite::Create(_)) => "create",
        Some(decide::HubWrite::UpdateSpec(_)) => "update",
        Some(decide::HubWrite::Delete { .. }) => "delete",
        None => return,
    };
    ctx.observer.hub_write(&ctx.member, op);
}

/// When the plan reflects the hub's verdict (a resolved `Conflict`), the export time it
/// resolves: the last-seen timestamp on the ServiceExport.
fn conflict_resolved_since(
    se: &ServiceExport,
    plan: &decide::Plan,
    now: Timestamp,
) -> Option<Timestamp> {
    let resolved = plan
        .conditions
        .iter()
        .any(|c| c.type_ == crate::api::CONDITION_CONFLICT && c.status != "Unknown");
    if !resolved {
        return None;
    }
    let stamp = se
        .metadata
        .annotations
        .as_ref()?
        .get(crate::api::LAST_SEEN_TIMESTAMP_ANNOTATION)?;
    stamp.parse::<Timestamp>().ok().filter(|t| *t <= now)
}

fn elapsed_since(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or_default()
}

/// The public IP lookup is an observation: done before deciding, only when a field needs it.
/// Also returns how long ARM asked us to wait when it throttled the lookup.
async fn observe_public_ip(
    ctx: &Context,
    service: Option<&Service>,
) -> (PublicIpObservation, Option<Duration>) {
    let (Some(lookup), Some(service)) = (&ctx.public_ips, service) else {
        return (PublicIpObservation::NotNeeded, None);
    };
    let (rg, ip) = match public_ip_query(&ctx.settings, service) {
        Some(PublicIpQuery::Lookup { resource_group, ip }) => (resource_group, ip),
        Some(PublicIpQuery::NotAllowed { resource_group }) => {
            // Decided, not observed: the plan says so on the export; ARM is not asked.
            tracing::debug!(azure.resource_group = ?resource_group, "resource group not allowed for this member: no public IP lookup");
            return (PublicIpObservation::NotNeeded, None);
        }
        None => return (PublicIpObservation::NotNeeded, None),
    };
    let span = tracing::info_span!("azure.public_ip.lookup", azure.resource_group = %rg, ip = %ip, found = field::Empty, azure.cache = field::Empty);
    let result = lookup
        .find_by_address(&rg, &ip)
        .instrument(span.clone())
        .await;
    match result {
        Ok(Some(pip)) => {
            span.record("found", true);
            (PublicIpObservation::Found(pip), None)
        }
        Ok(None) => {
            span.record("found", false);
            (PublicIpObservation::NotFound, None)
        }
        Err(e) => {
            let retry_after = match &e {
                LookupError::Throttled { retry_after, .. } => *retry_after,
                LookupError::Failed { .. } | LookupError::NotAllowed { .. } => None,
            };
            (PublicIpObservation::Failed(e.to_string()), retry_after)
        }
    }
}

/// Exponential (1 s doubling to 5 min), jittered, per object, never sooner than a server
/// asked; reset by a success ([`crate::controller::failed`]).
pub(super) fn error_policy(se: &ServiceExport, error: &Error, ctx: Arc<Context>) -> Action {
    let key = ObjectRef::from_obj_with(se, ctx.se_version);
    crate::controller::failed(error, &ctx.failures, key)
}

/// Rechecks back off like failures, but an export waiting for a public IP is looked at
/// at least once a minute.
const MAX_RECHECK: Duration = Duration::from_secs(60);

/// An export waiting for a place in its member's quota is looked at again within 5 minutes:
/// a member with 100,000 waiting exports then costs ~330 write-free reconciles a second, not
/// the 1,600 a one-minute recheck would (each finds the quota full without walking the list).
const MAX_QUOTA_RECHECK: Duration = crate::controller::MAX_BACKOFF;
