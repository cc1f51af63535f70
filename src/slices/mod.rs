//! The EndpointSlice jobs (EndpointSlice → EndpointSliceExport), on the controller kit:
//! fleet-networking's member EndpointSlice controller (`endpointslice`) and EndpointSliceExport
//! controller (`endpointsliceexport`), run from the hub, each selectable alone as the reference
//! runs them, and one exporter per member when both run. Observe → decide (pure) → act.
//!
//! One [`MemberSliceExporter`] per member: a runner over the member's EndpointSlices that
//! belong to a Service, also triggered by the member's ServiceExports (the slices of that
//! Service; from the watch the jobs share, [`crate::service_exports`]) and by the
//! EndpointSliceExports of the member's hub namespace (the slice each refers to); a sweeper
//! looks at the slices the view no longer has (deleted, or no longer a Service's) and at
//! exports whose slice it does not know.

mod act;
mod context;
pub mod decide;
mod error;
mod last_seen;
mod model;
mod reconcile;
mod views;

use std::sync::Arc;

use futures::{Future, FutureExt};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

pub use decide::{CLEANUP_NAME, Halves, NAME, Outcome};
pub use error::{Error, Step};

use crate::api::EndpointSliceExport;
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::queue::Lossy;
use crate::controller::runner::Runner;
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::views::WatchHealth;
use crate::controller::{Job, MemberInputs, ReconcileObserver, Running, Synced, leadership_gained};
use crate::service_exports::{ServiceExportFeed, Subscription};
use context::Context;

/// The EndpointSlice job (the reference's EndpointSlice controller; with the cleanup job
/// selected too, both in one exporter), as the registry lists it.
pub struct EndpointSliceJob;

/// The EndpointSliceExport job (the reference's EndpointSliceExport controller), as the registry
/// lists it: on its own only when the EndpointSlice job does not run, which otherwise runs it.
pub struct EndpointSliceExportJob;

/// What the EndpointSlice jobs need of a member beyond the kit's inputs.
pub trait Needs {
    /// The member's ServiceExport watch, shared by the jobs.
    fn service_exports(&mut self) -> &mut ServiceExportFeed;
    /// The member's shared EndpointSlice watch.
    fn endpoint_slices(&mut self) -> &mut Tap<EndpointSlice>;
    /// The most bytes one EndpointSliceExport may have (`--max-export-bytes`).
    fn max_export_bytes(&self) -> u32;
    /// Whether the job named `job` runs (`--controllers`).
    fn runs(&self, job: &str) -> bool;
}

impl<S: Needs> Job<S> for EndpointSliceJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let halves = Halves {
            export: true,
            cleanup: inputs.shared.runs(CLEANUP_NAME),
        };
        start(inputs, halves, shutdown)
    }
}

impl<S: Needs> Job<S> for EndpointSliceExportJob {
    fn name(&self) -> &'static str {
        CLEANUP_NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        if inputs.shared.runs(NAME) {
            // The EndpointSlice job's exporter runs both halves: one set of watches. This one
            // only lasts as long as a job does.
            return Running {
                run: async move { shutdown.cancelled().await }.boxed(),
                synced: Synced::default(),
            };
        }
        let halves = Halves {
            export: false,
            cleanup: true,
        };
        start(inputs, halves, shutdown)
    }
}

/// Starts the member's exporter of `halves`.
fn start<S: Needs>(
    inputs: &mut MemberInputs<S>,
    halves: Halves,
    shutdown: CancellationToken,
) -> Running {
    let slices = MemberSliceExporter {
        halves,
        member: inputs.member.clone(),
        member_client: inputs.member_client.clone(),
        hub_client: inputs.hub_client.clone(),
        hub_namespace: inputs.hub_namespace.clone(),
        // Mapped to slices, which the job paces.
        exports: inputs.shared.service_exports().subscribe(0),
        concurrency: inputs.concurrency,
        claim: inputs.claim.clone(),
        observer: inputs.observer.clone(),
        max_export_bytes: inputs.shared.max_export_bytes(),
    };
    let (run, synced) = slices.start(inputs.shared.endpoint_slices(), async move {
        shutdown.cancelled().await
    });
    Running {
        run: run.boxed(),
        synced,
    }
}

/// Everything one member's EndpointSlice exporter needs.
pub struct MemberSliceExporter {
    /// Which of the reference's two controllers it runs.
    pub halves: Halves,
    /// Member name, also its cluster ID in `endpointSliceReference.clusterId`.
    pub member: String,
    pub member_client: kube::Client,
    /// The member's view of the hub client; only ever used inside `hub_namespace`.
    pub hub_client: kube::Client,
    pub hub_namespace: String,
    /// The member's ServiceExports, from the watch it shares with the ServiceExport exporter.
    pub exports: Subscription,
    /// Reconciles running at once; 0: unbounded.
    pub concurrency: u16,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
    /// The most bytes one EndpointSliceExport may have (`--max-export-bytes`).
    pub max_export_bytes: u32,
}

impl MemberSliceExporter {
    /// Builds the controller. Returns the future that runs it until `shutdown` resolves
    /// (in-flight reconciles finish first) and the handle that tells when its watches synced.
    pub fn start(
        self,
        member_slices: &mut Tap<EndpointSlice>,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (futures::future::BoxFuture<'static, ()>, Synced) {
        let hub_api: Api<EndpointSliceExport> =
            Api::namespaced(self.hub_client.clone(), &self.hub_namespace);
        let health = Arc::new(WatchHealth::new(&self.member, NAME, self.observer.clone()));
        let (absent_tx, absent_rx) = Lossy::channel(
            views::ABSENT_QUEUE,
            &self.member,
            "absent_slices",
            self.observer.clone(),
        );
        let se_version = self.exports.dyntype;
        let pace = Arc::new(Pace::new(self.concurrency));
        let (views, triggers) = views::Views::watch(
            member_slices,
            &hub_api,
            &self.exports,
            &health,
            (absent_tx, &pace),
            self.halves,
        );
        let synced = health
            .synced(None, &views::WATCHED)
            .and(self.exports.synced.clone());
        let leadership = leadership_gained(&self.claim);
        let store = views.slices.clone();
        let ctx = Arc::new(Context {
            halves: self.halves,
            member: self.member,
            member_client: self.member_client,
            se_version,
            hub: hub_api,
            slices: views.slices,
            exports: self.exports.store.clone(),
            hub_view: views.hub,
            hub_namespace: self.hub_namespace,
            claim: self.claim,
            observer: self.observer,
            views: synced.clone(),
            failures: Streaks::default(),
            own_slices: OwnWrites::default(),
            own_exports: OwnWrites::default(),
            max_export_bytes: self.max_export_bytes,
        });
        let sweeper = reconcile::sweep(ctx.clone(), absent_rx);
        let runner = Runner {
            pace: pace.clone(),
            store,
            dyntype: (),
            ctx,
        };
        let run = async move {
            let reconciles = runner.run(
                pace.stream(),
                leadership,
                shutdown,
                |s, ctx| crate::memory::scratch_future(reconcile::reconcile(s, ctx)),
                reconcile::error_policy,
            );
            tokio::select! {
                () = reconciles => {}
                () = sweeper => {}
                () = triggers => {}
            }
        };
        (run.boxed(), synced)
    }
}
