//! The ServiceExport job (ServiceExport → InternalServiceExport), on the controller kit:
//! observe → decide (pure) → act.
//!
//! One [`MemberExporter`] per member: a runner over the member's ServiceExports (the watch the
//! jobs share, [`crate::service_exports`]), also triggered by the member's Services (same
//! namespace/name) and by the InternalServiceExports in the member's hub namespace (conflict
//! feedback). Reads come from reflector stores; writes go to the member and to a hub API scoped
//! to the member's namespace.

mod act;
pub mod cleanup;
mod context;
mod dangling;
pub mod decide;
mod error;
mod projections;
pub mod public_ip;
mod reconcile;
mod watches;

use std::sync::Arc;

use futures::{Future, FutureExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

pub use decide::{Outcome, Quotas, Settings};
pub use error::{Error, Step};
pub use projections::IseView;
pub use public_ip::{
    LookupError, PublicIp, PublicIpAccess, PublicIpLookup, resource_group_allowed,
};

use crate::api::InternalServiceExport;
use crate::controller::events::{Creator, Events};
use crate::controller::hub_tap::HubTap;
use crate::controller::own_writes::OwnWrites;
use crate::controller::queue::Lossy;
use crate::controller::runner::{Runner, beside};
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::views::WatchHealth;
use crate::controller::{Job, MemberInputs, ReconcileObserver, Running, Synced, leadership_gained};
use crate::service_exports::{ServiceExportFeed, Subscription};
use context::Context;
use watches::Views;

/// The job's name, as `--controllers` spells it.
pub const NAME: &str = "serviceexport";

/// The ServiceExport job, as the registry lists it.
pub struct ServiceExportJob;

/// What the ServiceExport job needs of a member beyond the kit's inputs.
pub trait Needs {
    /// The member's ServiceExport watch, shared by the jobs.
    fn service_exports(&mut self) -> &mut ServiceExportFeed;
    /// The member's settings for this job, and its public IP lookups (`None`: the feature is
    /// off).
    fn export_settings(&self) -> (Settings, Option<Arc<dyn PublicIpLookup>>);
    /// The member's shared Service watch.
    fn services(&mut self) -> &mut Tap<Service>;
    /// The replica's watch of the hub's InternalServiceExports ([`hub_tap`]).
    fn hub_ises(&self) -> &HubTap<InternalServiceExport, IseView>;
}

/// The replica's watch of the hub's InternalServiceExports, each kept as the job reads it;
/// `read`: the job runs.
pub fn hub_tap(hub: &kube::Client, read: bool) -> HubTap<InternalServiceExport, IseView> {
    HubTap::new(hub, IseView::from, read)
}

impl<S: Needs> Job<S> for ServiceExportJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let (settings, public_ips) = inputs.shared.export_settings();
        let exporter = MemberExporter {
            member: inputs.member.clone(),
            member_client: inputs.member_client.clone(),
            events_client: inputs.events_client.clone(),
            hub_client: inputs.hub_client.clone(),
            hub_namespace: inputs.hub_namespace.clone(),
            // The pace's limit is how many of the member's reconciles run at once.
            exports: inputs
                .shared
                .service_exports()
                .subscribe(inputs.concurrency),
            settings,
            public_ips,
            claim: inputs.claim.clone(),
            observer: inputs.observer.clone(),
            instance: inputs.instance.clone(),
        };
        let hub_ises = inputs.shared.hub_ises().clone();
        let taps = (inputs.shared.services(), &hub_ises);
        let (run, synced) = exporter.start(taps, shutdown.cancelled_owned());
        Running::new(run, synced)
    }
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
    pub exports: Subscription,
    pub settings: Settings,
    /// Traffic Manager lookups; `None` when the feature is off.
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
    /// Reporting instance for Events (pod name).
    pub instance: String,
}

impl MemberExporter {
    /// Builds the controller over the member's Service watch and the replica's ISE watch.
    /// Returns the future that runs it until `shutdown` resolves (in-flight reconciles finish
    /// first) and the handle that tells when its watches synced.
    pub fn start(
        self,
        (member_services, hub_ises): (&mut Tap<Service>, &HubTap<InternalServiceExport, IseView>),
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (futures::future::BoxFuture<'static, ()>, Synced) {
        let hub_api: Api<InternalServiceExport> =
            Api::namespaced(self.hub_client.clone(), &self.hub_namespace);
        let health = Arc::new(WatchHealth::new(&self.member, NAME, self.observer.clone()));
        let (dangling_tx, dangling_rx) = Lossy::channel(
            dangling::QUEUE,
            &self.member,
            "dangling_ises",
            self.observer.clone(),
        );
        let (views, handed, triggers) = Views::watch(
            member_services,
            hub_ises.subscribe(&self.hub_namespace),
            &self.exports,
            &health,
            dangling_tx,
        );
        let synced = health
            .synced(
                None,
                &[watches::SERVICES, watches::INTERNAL_SERVICE_EXPORTS],
            )
            .and(self.exports.synced.clone());
        let leadership = leadership_gained(&self.claim);
        let member = self.member.clone();
        let pace = self.exports.pace.clone();
        let (ctx, creator) = self.context(hub_api, views.services, views.ises, synced.clone());
        let sweeper = dangling::sweep(ctx.clone(), views.exports, dangling_rx);
        let runner = Runner {
            pace,
            store: ctx.exports.clone(),
            dyntype: ctx.se_version,
            ctx,
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
            beside(beside(reconciles, sweeper), triggers).await;
            // Every reconcile is over and the context dropped: the queue closes once drained.
            creator.drain(&member).await;
        };
        (run.boxed(), synced)
    }

    /// The context every reconcile of the member shares, over the views, and the task that
    /// creates its Events.
    fn context(
        self,
        hub: Api<InternalServiceExport>,
        services: Store<projections::ServiceView>,
        ises: Store<projections::IseView>,
        views: Synced,
    ) -> (Arc<Context>, Creator) {
        let (events, creator) = Events::new(
            self.events_client,
            self.instance,
            self.member.clone(),
            self.observer.clone(),
        );
        let ctx = Context {
            member: self.member,
            settings: self.settings,
            member_client: self.member_client,
            se_version: self.exports.dyntype,
            hub,
            hub_namespace: self.hub_namespace,
            services,
            ises,
            events,
            public_ips: self.public_ips,
            claim: self.claim,
            observer: self.observer,
            views,
            failures: Streaks::default(),
            rechecks: Streaks::default(),
            own_ises: OwnWrites::default(),
            own_exports: OwnWrites::default(),
            exports: self.exports.store,
            engaged: jiff::Timestamp::now(),
        };
        (Arc::new(ctx), creator)
    }
}
