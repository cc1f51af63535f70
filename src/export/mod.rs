//! The member-scoped ServiceExport reconciler: observe → decide (pure) → act.
//!
//! One [`MemberExporter`] per member: a [`runner`] over the member's ServiceExports, also
//! triggered by the member's Services (same namespace/name) and by the
//! InternalServiceExports in the member's hub namespace (conflict feedback). Reads come from
//! reflector stores; writes go to the member and to a hub API scoped to the member's namespace.

mod act;
pub(crate) use act::only_uid;
pub mod cleanup;
mod dangling;
pub mod decide;
mod error;
mod events;
pub mod feed;
pub(crate) mod own_writes;
pub(crate) mod pace;
pub(crate) mod projections;
pub mod public_ip;
pub(crate) mod queue;
mod reconcile;
pub(crate) mod runner;
pub(crate) mod streaks;
mod views;

use std::sync::Arc;
use std::time::Duration;

use futures::Future;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

pub use decide::{Outcome, Quotas, Settings};
pub use error::{Error, Step};
pub use public_ip::{
    LookupError, PublicIp, PublicIpAccess, PublicIpLookup, resource_group_allowed,
};

use crate::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use own_writes::OwnWrites;
pub(crate) use projections::{keyed_by_name, project};
pub use reconcile::backoff;
pub(crate) use reconcile::report;
use streaks::Streaks;
pub use views::Synced;
use views::Views;
pub(crate) use views::{View, WatchHealth, view_watch};

/// How a reconcile ended: its [`Outcome`], or the category of the error it failed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    Done(Outcome),
    /// A reconcile of an EndpointSlice.
    Slice(crate::slices::Outcome),
    Failed(&'static str),
}

impl Reconciled {
    /// Stable label: an [`Outcome::label`], `endpointslice:<outcome>` or `error:<category>`.
    pub fn label(&self) -> String {
        match self {
            Self::Done(outcome) => outcome.label(),
            Self::Slice(outcome) => format!("endpointslice:{}", outcome.label()),
            Self::Failed(category) => format!("error:{category}"),
        }
    }
}

/// Receives what reconciles did, for metrics and the member's state.
pub trait ReconcileObserver: Send + Sync + 'static {
    /// A reconcile of `member` started (in-flight reconciles are the member's queue depth).
    fn reconcile_started(&self, member: &str);
    /// One reconcile ended.
    fn reconciled(&self, member: &str, outcome: Reconciled, took: Duration);
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
    /// An EndpointSliceExport was created, updated or deleted (`op`).
    fn slice_write(&self, _member: &str, _op: &'static str) {}
    /// An item was dropped from a bounded queue (`queue`) of `member` because it was full.
    fn dropped(&self, _member: &str, _queue: &'static str) {}
}

/// An observer that records nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl ReconcileObserver for NoObserver {
    fn reconcile_started(&self, _: &str) {}
    fn controller_error(&self, _: &str, _: &str) {}
    fn reconciled(&self, _: &str, _: Reconciled, _: Duration) {}
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
    /// A hub client; the exporter only ever uses it inside `hub_namespace`.
    pub hub_client: kube::Client,
    pub hub_namespace: String,
    /// The member's ServiceExports, from the watch it shares with the EndpointSlice exporter;
    /// its pace's limit is how many reconciles run at once.
    pub exports: feed::Subscription,
    pub settings: Settings,
    /// Traffic Manager lookups; `None` when the feature is off.
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
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
    pub(crate) services: Store<projections::ServiceView>,
    pub(crate) ises: Store<projections::IseView>,
    events: events::Events,
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
    /// No reconcile decides before every view has listed once.
    views: Synced,
    failures: Streaks<ObjectRef<ServiceExport>>,
    /// Consecutive rechecks (a public IP not listed yet, a UID-mismatch unexport) per export.
    rechecks: Streaks<ObjectRef<ServiceExport>>,
    /// ISEs (by name) and ServiceExports this exporter wrote that the views may not show yet.
    own_ises: OwnWrites<String, Option<InternalServiceExport>>,
    own_exports: OwnWrites<ObjectRef<ServiceExport>, ServiceExport>,
    /// The member's ServiceExports (the feed's store): the line for the export quota.
    exports: Store<projections::ServiceExportView>,
}

impl MemberExporter {
    /// Builds the controller. Returns the future that runs it until `shutdown` resolves
    /// (in-flight reconciles finish first) and the handle that tells when its watches synced.
    pub fn start(
        self,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (impl Future<Output = ()> + Send, Synced) {
        let version = self.exports.version;
        let hub_api: Api<InternalServiceExport> =
            Api::namespaced(self.hub_client.clone(), &self.hub_namespace);
        let health = Arc::new(WatchHealth::new(&self.member, self.observer.clone()));
        let (dangling_tx, dangling_rx) = queue::Lossy::channel(
            dangling::QUEUE,
            &self.member,
            "dangling_ises",
            self.observer.clone(),
        );
        let (views, handed, triggers) = Views::watch(
            &self.member_client,
            &hub_api,
            &self.exports,
            &health,
            dangling_tx,
        );
        let synced = health
            .synced(None, &[View::Services, View::InternalServiceExports])
            .and(self.exports.synced.clone());
        let leadership = leadership_gained(&self.claim);
        let member = self.member.clone();
        let (events, creator) = events::Events::new(
            self.events_client,
            self.instance,
            member.clone(),
            self.observer.clone(),
        );
        let ctx = Arc::new(Context {
            member: self.member,
            settings: self.settings,
            member_client: self.member_client,
            se_version: version,
            hub: hub_api,
            hub_namespace: self.hub_namespace,
            services: views.services,
            ises: views.ises,
            events,
            public_ips: self.public_ips,
            claim: self.claim,
            observer: self.observer,
            views: synced.clone(),
            failures: Streaks::default(),
            rechecks: Streaks::default(),
            own_ises: OwnWrites::default(),
            own_exports: OwnWrites::default(),
            exports: self.exports.store.clone(),
        });
        let sweeper = dangling::sweep(ctx.clone(), views.exports, dangling_rx);
        let runner = runner::Runner {
            pace: self.exports.pace,
            store: self.exports.store.clone(),
            dyntype: version,
            ctx: ctx.clone(),
        };
        let run = async move {
            // Reconcile errors are handled (and logged) in `reconcile`, watch errors where the
            // watches are inspected.
            let reconciles = runner.run(
                handed,
                // Becoming leader: everything is reconciled once, from the warm caches.
                leadership,
                shutdown,
                |se, ctx| {
                    crate::memory::scratch_future(reconcile::reconcile(
                        Arc::new(se.to_export()),
                        ctx,
                    ))
                },
                |se, error, ctx| reconcile::error_policy(&se.to_export(), error, ctx),
            );
            // The sweeper and the triggers have no end of their own: they stop with the
            // reconciles.
            tokio::select! {
                () = reconciles => {}
                () = sweeper => {}
                () = triggers => {}
            }
            // Every reconcile is over and the context dropped: the queue closes once drained.
            creator.drain(&member).await;
        };
        (run, synced)
    }
}

/// Yields `()` each time `claim` is gained.
pub(crate) fn leadership_gained(
    claim: &crate::ownership::Claim,
) -> impl futures::Stream<Item = ()> + Send + 'static + use<> {
    futures::StreamExt::inspect(claim.gained(), |()| {
        tracing::info!("leadership acquired: reconciling every object");
    })
}
