//! The member-scoped ServiceExport reconciler: observe → decide (pure) → act.
//!
//! One [`MemberExporter`] per member: a kube-runtime `Controller` over the member's
//! ServiceExports, also triggered by the member's Services (same namespace/name) and by the
//! InternalServiceExports in the member's hub namespace (conflict feedback). Reads come from
//! reflector stores; writes go to the member and to a hub API scoped to the member's namespace.

mod act;
mod dangling;
pub mod decide;
mod error;
pub mod public_ip;
mod views;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Future, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tracing::{Instrument, field};

pub use decide::{Outcome, Settings};
pub use error::{Error, Step};
pub use public_ip::{LookupError, PublicIp, PublicIpLookup};

use crate::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use decide::{Observation, PublicIpObservation, decide, ise_name, public_ip_query};
pub use views::Synced;
use views::{WatchHealth, exports_sharing_hub_name, watch_backoff};

/// Receives what reconciles did, for metrics. Implemented by `crate::telemetry`.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile of `member` started (in-flight reconciles are the member's queue depth).
    fn reconcile_started(&self, member: &str);
    /// One reconcile ended; `outcome` is an [`Outcome::label`] or `error:<category>`.
    fn reconciled(&self, member: &str, outcome: &str, took: Duration);
    /// An ISE was created, updated or deleted (`op`).
    fn hub_write(&self, member: &str, op: &'static str);
    /// An ISE was written `latency` after the Service change it carries was first seen.
    fn export_latency(&self, member: &str, latency: Duration);
    /// The hub's conflict verdict reached the ServiceExport `latency` after its export time.
    fn conflict_reflected(&self, member: &str, latency: Duration);
    /// The controller reported an error outside a reconcile (a watch failing, for example).
    fn controller_error(&self, member: &str, error: &str);
    /// Every watch that had failed has listed again: the member's views are current.
    fn watches_recovered(&self, _member: &str) {}
}

/// An observer that records nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl ReconcileObserver for NoObserver {
    fn reconcile_started(&self, _: &str) {}
    fn controller_error(&self, _: &str, _: &str) {}
    fn reconciled(&self, _: &str, _: &str, _: Duration) {}
    fn hub_write(&self, _: &str, _: &'static str) {}
    fn export_latency(&self, _: &str, _: Duration) {}
    fn conflict_reflected(&self, _: &str, _: Duration) {}
}

/// Everything one member's exporter needs; the runtime builds one per member.
pub struct MemberExporter {
    /// Member name, also its cluster ID in `serviceReference.clusterId`.
    pub member: String,
    pub member_client: kube::Client,
    /// Events go through this one (its own budget), so they never delay exports.
    pub events_client: kube::Client,
    /// Reconciles running at once; 0: unbounded.
    pub concurrency: u16,
    /// A hub client; the exporter only ever uses it inside `hub_namespace`.
    pub hub_client: kube::Client,
    pub hub_namespace: String,
    pub se_version: ServiceExportVersion,
    pub settings: Settings,
    /// Traffic Manager lookups; `None` when the feature is off.
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// `true` while this replica may write (holds the leader lease, or leader election is off).
    pub leader: watch::Receiver<bool>,
    pub observer: Arc<dyn ReconcileObserver>,
    /// Reporting instance for Events (pod name).
    pub instance: String,
}

/// Shared by every reconcile of one member.
pub struct Context {
    pub member: String,
    pub settings: Settings,
    pub member_client: kube::Client,
    pub se_version: ServiceExportVersion,
    /// The hub writer, scoped to the member's namespace: it cannot address any other.
    pub hub: Api<InternalServiceExport>,
    pub hub_namespace: String,
    pub services: Store<Service>,
    pub ises: Store<InternalServiceExport>,
    pub recorder: Recorder,
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    pub leader: watch::Receiver<bool>,
    pub observer: Arc<dyn ReconcileObserver>,
    /// No reconcile decides before every view has listed once.
    views: Synced,
    failures: Mutex<HashMap<ObjectRef<ServiceExport>, u32>>,
    /// Consecutive rechecks (a public IP not listed yet, a UID-mismatch unexport) per export.
    rechecks: Mutex<HashMap<ObjectRef<ServiceExport>, u32>>,
    /// ISEs this exporter wrote that the view may not show yet, by name.
    written: Mutex<HashMap<String, Written>>,
}

/// An ISE write, until the view shows it: what the view held when it was decided (its
/// resourceVersion) and what the hub answered (`None`: deleted).
struct Written {
    view_before: Option<String>,
    after: Option<InternalServiceExport>,
}

impl Context {
    /// Our own last write of ISE `name` while the view still shows what it showed before it
    /// (read-your-writes: no create answered 409, no patch repeated, no delete sent twice);
    /// `None` once the view has caught up, or nothing was written.
    fn own_write(
        &self,
        name: &str,
        view: Option<&InternalServiceExport>,
    ) -> Option<Option<InternalServiceExport>> {
        let mut written = lock(&self.written);
        let entry = written.get(name)?;
        let view_rv = view.and_then(|i| i.metadata.resource_version.clone());
        if view_rv == entry.view_before {
            Some(entry.after.clone())
        } else {
            written.remove(name);
            None
        }
    }
}

impl Context {
    fn ensure_leader(&self, ns: &str, name: &str) -> Result<(), Error> {
        if *self.leader.borrow() {
            Ok(())
        } else {
            Err(Error::NotLeader {
                member: self.member.clone(),
                namespace: ns.into(),
                name: name.into(),
            })
        }
    }
}

impl MemberExporter {
    /// Builds the controller. Returns the future that runs it until `shutdown` resolves
    /// (in-flight reconciles finish first) and the handle that tells when its watches synced.
    pub fn start(
        self,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (impl Future<Output = ()> + Send, Synced) {
        let version = self.se_version;
        let exports_api: Api<ServiceExport> = Api::all_with(self.member_client.clone(), &version);
        let services_api: Api<Service> = Api::all(self.member_client.clone());
        let hub_api: Api<InternalServiceExport> =
            Api::namespaced(self.hub_client.clone(), &self.hub_namespace);

        let (services, services_writer) = reflector::store::<Service>();
        let (ises, ises_writer) = reflector::store::<InternalServiceExport>();
        let exports_writer = reflector::store::Writer::<ServiceExport>::new(version);
        let exports = exports_writer.as_reader();
        let health = Arc::new(WatchHealth::new(&self.member, self.observer.clone()));
        let (dangling_tx, dangling_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let service_events = watcher(services_api, watcher::Config::default())
            .backoff(watch_backoff())
            .modify(|s: &mut Service| s.managed_fields_mut().clear())
            .reflect(services_writer)
            .inspect(health.inspector(views::View::Services))
            .touched_objects()
            .filter_map(views::objects_only);
        let ise_events = watcher(hub_api.clone(), watcher::Config::default())
            .backoff(watch_backoff())
            .modify(|i: &mut InternalServiceExport| i.managed_fields_mut().clear())
            .reflect(ises_writer)
            .inspect(health.inspector(views::View::InternalServiceExports))
            .inspect(move |event| {
                // Every ISE seen (listed or changed) is checked for a missing ServiceExport.
                if let Ok(watcher::Event::Apply(ise) | watcher::Event::InitApply(ise)) = event {
                    let _ = dangling_tx.send(ise.name_any());
                }
            })
            .touched_objects()
            .filter_map(views::objects_only);
        // What `Controller::new_with` builds, plus the initial-list signal.
        let export_events = watcher(exports_api, watcher::Config::default())
            .backoff(watch_backoff())
            .reflect(exports_writer)
            .inspect(health.inspector(views::View::ServiceExports))
            .applied_objects()
            .filter_map(views::objects_only);

        let controller = Controller::for_stream_with(export_events, exports.clone(), version);
        let loser_index = exports.clone();
        let controller = controller
            .watches_stream_with(
                service_events,
                move |svc: Service| {
                    let ns = svc.namespace().unwrap_or_default();
                    Some(ObjectRef::new_with(&svc.name_any(), version).within(&ns))
                },
                (),
            )
            .watches_stream_with(
                ise_events,
                move |ise: InternalServiceExport| {
                    // The export it carries, and any other export of the same hub name (the
                    // loser of a name collision takes over when the winner's ISE goes).
                    let owner = ise
                        .spec
                        .service_reference
                        .namespaced_name
                        .split_once('/')
                        .map(|(ns, name)| ObjectRef::new_with(name, version).within(ns));
                    let mut refs = exports_sharing_hub_name(&loser_index, version, &ise.name_any());
                    refs.extend(owner);
                    refs.dedup();
                    refs
                },
                (),
            )
            // Becoming leader: everything is reconciled once, from the warm caches.
            .with_config(kube::runtime::controller::Config::default().concurrency(self.concurrency))
            .reconcile_all_on(leadership_gained(self.leader.clone()))
            .graceful_shutdown_on(shutdown);
        let synced = health.synced(exports.clone());

        let reporter = Reporter {
            controller: "fleetnet-hub".into(),
            instance: Some(self.instance.clone()),
        };
        let ctx = Arc::new(Context {
            member: self.member.clone(),
            settings: self.settings,
            member_client: self.member_client.clone(),
            se_version: version,
            hub: hub_api,
            hub_namespace: self.hub_namespace,
            services: services.clone(),
            ises: ises.clone(),
            recorder: Recorder::new(self.events_client, reporter),
            public_ips: self.public_ips,
            leader: self.leader,
            observer: self.observer,
            views: synced.clone(),
            failures: Mutex::default(),
            rechecks: Mutex::default(),
            written: Mutex::default(),
        });
        let sweeper = dangling::sweep(ctx.clone(), exports, dangling_rx);
        let run = async move {
            // Reconcile errors are handled (and logged) in `reconcile`, watch errors where the
            // watches are inspected: nothing is left to do with the controller's own items.
            let controller = controller
                .run(reconcile, error_policy, ctx)
                .for_each(|_| futures::future::ready(()));
            // The sweeper has no end of its own: it stops with the controller.
            tokio::select! {
                () = controller => {}
                () = sweeper => {}
            }
        };
        (run, synced)
    }
}

/// Yields `()` each time `leader` turns true.
fn leadership_gained(
    leader: watch::Receiver<bool>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(leader, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                tracing::info!("leadership acquired: reconciling every ServiceExport");
                return Some(((), rx));
            }
        }
    })
}

/// Reconciles one ServiceExport: one trace per call, a root span `reconcile`.
async fn reconcile(se: Arc<ServiceExport>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = se.namespace().unwrap_or_default();
    let name = se.name_any();
    let span = tracing::info_span!(
        parent: None,
        "reconcile",
        fleet.member = %ctx.member,
        k8s.namespace.name = %ns,
        fleet.serviceexport.name = %name,
        outcome = field::Empty,
        requeue = field::Empty,
        otel.status_code = field::Empty,
    );
    let started = Instant::now();
    ctx.observer.reconcile_started(&ctx.member);
    let result = reconcile_inner(&se, &ctx).instrument(span.clone()).await;
    let key = ObjectRef::from_obj_with(se.as_ref(), ctx.se_version);
    let label = match &result {
        Ok((outcome, _)) => outcome.label(),
        Err(e) => format!("error:{}", e.category()),
    };
    span.record("outcome", label.as_str());
    match &result {
        Ok((_, action)) => {
            span.record("requeue", format!("{action:?}").as_str());
            lock(&ctx.failures).remove(&key);
        }
        Err(e) => {
            span.record("otel.status_code", "ERROR");
            span.in_scope(|| tracing::warn!(error = %e, "reconcile failed"));
        }
    }
    // Inside the span, so the duration sample can carry the trace id as an exemplar.
    span.in_scope(|| {
        ctx.observer
            .reconciled(&ctx.member, &label, started.elapsed())
    });
    result.map(|(_, action)| action)
}

/// Observe → decide → act. Nothing is decided before every view has listed; a plan that
/// withdraws an export is decided again on live reads of the Service and the ISE before it
/// is carried out; a 409 (stale view, concurrent writer) re-observes from the API.
async fn reconcile_inner(se: &ServiceExport, ctx: &Context) -> Result<(Outcome, Action), Error> {
    ctx.views.wait().await;
    if !*ctx.leader.borrow() {
        // Standby: caches stay warm; becoming leader reconciles everything.
        return Ok((Outcome::Skipped, Action::await_change()));
    }
    let ns = se.namespace().unwrap_or_default();
    let name = se.name_any();
    let key = ObjectRef::from_obj_with(se, ctx.se_version);
    let mut export = se.clone();
    // `Some(x)`: read live this reconcile, and what was read (`None`: not there).
    let mut live_service: Option<Option<Service>> = None;
    let mut live_ise: Option<Option<InternalServiceExport>> = None;
    let kube_err = |step: Step| Error::kube(&ctx.member, &ns, &name, step);
    let mut conflicts = 0;
    loop {
        let now = Timestamp::now();
        let cached_service = ctx.services.get(&ObjectRef::new(&name).within(&ns));
        let service = live_service
            .as_ref()
            .map_or(cached_service.as_deref(), Option::as_ref);
        let hub_name = ise_name(&ns, &name);
        let cached_ise = ctx
            .ises
            .get(&ObjectRef::new(&hub_name).within(&ctx.hub_namespace));
        let own_write = ctx.own_write(&hub_name, cached_ise.as_deref());
        let viewed = own_write
            .as_ref()
            .map_or(cached_ise.as_deref(), Option::as_ref);
        let ise = live_ise.as_ref().map_or(viewed, Option::as_ref);
        let (public_ip, throttled_for) = observe_public_ip(ctx, service).await;
        let plan = decide(
            &ctx.settings,
            &Observation {
                export: &export,
                service,
                ise,
                public_ip: &public_ip,
                now,
            },
        );
        tracing::debug!(writes = plan.writes(), outcome = %plan.outcome.label(), "decided");
        let deleting = export.metadata.deletion_timestamp.is_some();
        if plan.unexports() && !deleting && live_service.is_none() {
            // Views may be behind: withdraw an export only on what the API says now.
            let services: Api<Service> = Api::namespaced(ctx.member_client.clone(), &ns);
            live_service = Some(
                services
                    .get_opt(&name)
                    .await
                    .map_err(kube_err(Step::GetService))?,
            );
            live_ise = Some(read_ise(ctx, &ns, &name).await?);
            continue;
        }
        match act::perform(ctx, &export, &plan, now).await {
            Ok(done) => {
                record_hub_writes(ctx, &plan, &done);
                if let Some(after) = done.hub_object.clone() {
                    let view_before = cached_ise
                        .as_deref()
                        .and_then(|i| i.metadata.resource_version.clone());
                    lock(&ctx.written).insert(hub_name.clone(), Written { view_before, after });
                }
                if let Some(since) = plan.exported_since.filter(|_| done.hub_writes > 0) {
                    // Until the ISE is written, not until the decision.
                    let written = Timestamp::now();
                    ctx.observer
                        .export_latency(&ctx.member, elapsed_since(since, written));
                }
                if let Some(since) = conflict_resolved_since(&export, &plan, now) {
                    ctx.observer
                        .conflict_reflected(&ctx.member, elapsed_since(since, now));
                }
                if let Some(message) = plan.pending {
                    return Err(Error::Pending {
                        member: ctx.member.clone(),
                        namespace: ns,
                        name,
                        message,
                        retry_after: throttled_for,
                    });
                }
                let action = if plan.recheck {
                    let n = bump(&ctx.rechecks, key);
                    Action::requeue(backoff(n, rand::random::<f64>()).min(MAX_RECHECK))
                } else {
                    lock(&ctx.rechecks).remove(&key);
                    Action::await_change()
                };
                return Ok((plan.outcome, action));
            }
            Err(e) if e.is_conflict() && conflicts < 2 => {
                conflicts += 1;
                tracing::debug!(error = %e, "conflict; reading the objects again");
                let exports: Api<ServiceExport> =
                    Api::namespaced_with(ctx.member_client.clone(), &ns, &ctx.se_version);
                match exports
                    .get_opt(&name)
                    .await
                    .map_err(kube_err(Step::GetServiceExport))?
                {
                    Some(latest) => export = latest,
                    None => return Ok((Outcome::Skipped, Action::await_change())),
                }
                live_ise = Some(read_ise(ctx, &ns, &name).await?);
            }
            Err(e) => return Err(e),
        }
    }
}

pub(super) async fn read_ise(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Option<InternalServiceExport>, Error> {
    ctx.hub
        .get_opt(&ise_name(ns, name))
        .await
        .map_err(Error::kube(
            &ctx.member,
            ns,
            name,
            Step::GetInternalServiceExport,
        ))
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
    let Some((rg, ip)) = public_ip_query(&ctx.settings, service) else {
        return (PublicIpObservation::NotNeeded, None);
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
                LookupError::Failed { .. } => None,
            };
            (PublicIpObservation::Failed(e.to_string()), retry_after)
        }
    }
}

/// Exponential (1 s doubling to 5 min), jittered, per object; reset by a success.
fn error_policy(se: Arc<ServiceExport>, error: &Error, ctx: Arc<Context>) -> Action {
    if matches!(error, Error::NotLeader { .. }) {
        return Action::await_change();
    }
    let key = ObjectRef::from_obj_with(se.as_ref(), ctx.se_version);
    let failures = bump(&ctx.failures, key);
    Action::requeue(requeue_delay(
        failures,
        rand::random::<f64>(),
        error.retry_after(),
    ))
}

/// The backoff, but never sooner than a server asked (`Retry-After`), capped at 5 minutes.
fn requeue_delay(failures: u32, jitter: f64, retry_after: Option<Duration>) -> Duration {
    let asked = retry_after.unwrap_or_default().min(MAX_BACKOFF);
    backoff(failures, jitter).max(asked)
}

const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Rechecks back off like failures, but an export waiting for a public IP is looked at
/// at least once a minute.
const MAX_RECHECK: Duration = Duration::from_secs(60);

/// Increments and returns the counter of `key`.
fn bump(
    counters: &Mutex<HashMap<ObjectRef<ServiceExport>, u32>>,
    key: ObjectRef<ServiceExport>,
) -> u32 {
    let mut map = lock(counters);
    let n = map.entry(key).or_insert(0);
    *n = n.saturating_add(1);
    *n
}

/// Delay after `failures` consecutive failures; `jitter` in [0, 1) spreads it by ±20%.
pub fn backoff(failures: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1).saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let capped = base.min(MAX_BACKOFF);
    capped.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::{backoff, requeue_delay};
    use std::time::Duration;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        assert_eq!(backoff(1, 0.5), Duration::from_secs(1));
        assert_eq!(backoff(2, 0.5), Duration::from_secs(2));
        assert_eq!(backoff(4, 0.5), Duration::from_secs(8));
        assert_eq!(backoff(30, 0.5), Duration::from_secs(300));
        assert_eq!(backoff(1, 0.0), Duration::from_millis(800));
        assert!(backoff(1, 0.999) < Duration::from_millis(1200));
    }

    #[test]
    fn requeue_waits_at_least_what_the_server_asked() {
        assert_eq!(requeue_delay(1, 0.5, None), Duration::from_secs(1));
        assert_eq!(
            requeue_delay(1, 0.5, Some(Duration::from_secs(20))),
            Duration::from_secs(20)
        );
        // The backoff wins when it is longer already.
        assert_eq!(
            requeue_delay(6, 0.5, Some(Duration::from_secs(2))),
            Duration::from_secs(32)
        );
        // A bogus Retry-After cannot park an object for longer than the backoff's cap.
        assert_eq!(
            requeue_delay(1, 0.5, Some(Duration::from_secs(86_400))),
            Duration::from_secs(300)
        );
    }
}
