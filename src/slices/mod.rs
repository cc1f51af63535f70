//! The EndpointSlice jobs (EndpointSlice → EndpointSliceExport), on the controller kit:
//! fleet-networking's member EndpointSlice controller (`endpointslice`) and EndpointSliceExport
//! controller (`endpointsliceexport`), run from the hub, each selectable alone as the reference
//! runs them, and one exporter per member when both run. Observe → decide (pure) → act.
//!
//! One exporter per member: a runner over the member's EndpointSlices that
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

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

pub use decide::{CLEANUP_NAME, Halves, NAME, Outcome};
pub use error::{Error, Step};
pub use model::ExportView;

use crate::api::EndpointSliceExport;
use crate::controller::hub_tap::HubTap;
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::queue::Lossy;
use crate::controller::runner::{Runner, beside};
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::{Job, MemberInputs, Running};
use crate::service_exports::ServiceExportFeed;
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
    /// The replica's watch of the hub's EndpointSliceExports.
    fn hub_exports(&self) -> &HubTap<EndpointSliceExport, ExportView>;
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
            return Running::idle(shutdown);
        }
        let halves = Halves {
            export: false,
            cleanup: true,
        };
        start(inputs, halves, shutdown)
    }
}

/// The replica's watch of the hub's EndpointSliceExports, each kept as the jobs read it;
/// `read`: one of the jobs runs.
pub fn hub_tap(hub: &kube::Client, read: bool) -> HubTap<EndpointSliceExport, ExportView> {
    HubTap::new(hub, ExportView::from, read)
}

/// Starts the member's exporter of `halves`: a runner over the member's EndpointSlices, its
/// sweeper, and the triggers of its views, until `shutdown` (in-flight reconciles finish first).
fn start<S: Needs>(
    inputs: &mut MemberInputs<S>,
    halves: Halves,
    shutdown: CancellationToken,
) -> Running {
    // Mapped to slices, which the job paces.
    let exports = inputs.shared.service_exports().subscribe(0);
    let hub: Api<EndpointSliceExport> = inputs.hub_api();
    let hub_view = inputs.shared.hub_exports().subscribe(&inputs.hub_namespace);
    let observer = inputs.observer.clone();
    let health = inputs.health(NAME);
    let (absent_tx, absent_rx) = Lossy::channel(
        views::ABSENT_QUEUE,
        &inputs.member,
        "absent_slices",
        observer.clone(),
    );
    let pace = Arc::new(Pace::new(inputs.concurrency));
    let (views, triggers) = views::Views::watch(
        inputs.shared.endpoint_slices(),
        hub_view,
        &exports,
        &health,
        (absent_tx, &pace),
        halves,
    );
    let synced = health
        .synced(None, &views::WATCHED)
        .and(exports.synced.clone());
    let store = views.slices.clone();
    let ctx = Arc::new(Context {
        halves,
        member: inputs.member.clone(),
        member_client: inputs.member_client.clone(),
        se_version: exports.dyntype,
        hub,
        slices: views.slices,
        exports: exports.store.clone(),
        hub_view: views.hub,
        hub_namespace: inputs.hub_namespace.clone(),
        claim: inputs.claim.clone(),
        observer,
        views: synced.clone(),
        failures: Streaks::default(),
        own_slices: OwnWrites::default(),
        own_exports: OwnWrites::default(),
        max_export_bytes: inputs.shared.max_export_bytes(),
        engaged: jiff::Timestamp::now(),
    });
    let sweeper = reconcile::sweep(ctx.clone(), absent_rx);
    let reconciles = Runner::over(&pace, store, ctx).paced(
        inputs.claim.clone(),
        shutdown.cancelled_owned(),
        reconcile::reconcile,
        reconcile::error_policy,
    );
    Running::new(beside(beside(reconciles, sweeper), triggers), synced)
}
