//! The ServiceImport jobs, on the controller kit: fleet-networking's member ServiceImport
//! controller (`serviceimport`: a member's ServiceImport → an InternalServiceImport
//! `<namespace>-<name>` in the member's hub namespace, guarded by a finalizer) and its
//! InternalServiceImport controller (`internalserviceimport`: the hub's verdict, the copy's
//! status, back into the ServiceImport's status; a copy whose ServiceImport is gone deleted),
//! run from the hub. Observe → decide (pure) → act.
//!
//! One [`MemberImports`] per member: two runners over one context, the forward one keyed by
//! ServiceImport, the back one by InternalServiceImport, fed by one watch of each
//! ([`views`]). `serviceimport` runs both halves, as the table has it;
//! `internalserviceimport` runs the back half alone, and nothing when `serviceimport` runs
//! too (the half runs once).

mod act;
mod context;
pub mod decide;
mod error;
mod model;
mod reconcile;
mod views;

use std::sync::Arc;

use futures::{Future, FutureExt};
use kube::api::Api;
use tokio_util::sync::CancellationToken;

pub use decide::{BACK_NAME, NAME, Outcome};
pub use error::{Error, Step};
pub use model::{InternalView, SERVICE_IMPORT_FINALIZER};

use crate::api::{InternalServiceImport, ServiceImport};
use crate::controller::hub_tap::HubTap;
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::runner::{Runner, beside};
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::views::WatchHealth;
use crate::controller::{Job, MemberInputs, ReconcileObserver, Running, Synced};
use context::Context;

/// What the ServiceImport jobs need of a member beyond the kit's inputs.
pub trait Needs {
    /// Whether the `serviceimport` job runs for the member (then it runs the back half too).
    fn service_import_job_runs(&self) -> bool;
    /// The member's shared ServiceImport watch.
    fn service_imports(&mut self) -> &mut Tap<ServiceImport>;
    /// The replica's watch of the hub's InternalServiceImports ([`hub_tap`]).
    fn hub_internals(&self) -> &HubTap<InternalServiceImport, InternalView>;
}

/// The replica's watch of the hub's InternalServiceImports, each kept as the jobs read it;
/// `read`: one of the jobs runs.
pub fn hub_tap(hub: &kube::Client, read: bool) -> HubTap<InternalServiceImport, InternalView> {
    HubTap::new(hub, InternalView::from, read)
}

/// The `serviceimport` job (both halves), as the registry lists it.
pub struct ServiceImportJob;

/// The `internalserviceimport` job (the status-back half alone), as the registry lists it.
pub struct InternalServiceImportJob;

impl<S: Needs> Job<S> for ServiceImportJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let imports = MemberImports::of(inputs, true);
        imports.start(inputs.shared.service_imports(), shutdown)
    }
}

impl<S: Needs> Job<S> for InternalServiceImportJob {
    fn name(&self) -> &'static str {
        BACK_NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        if inputs.shared.service_import_job_runs() {
            // The `serviceimport` job runs this half already.
            return Running::idle(shutdown);
        }
        let imports = MemberImports::of(inputs, false);
        imports.start(inputs.shared.service_imports(), shutdown)
    }
}

/// Everything one member's ServiceImport jobs need.
pub struct MemberImports {
    /// Member name, also its cluster ID in `serviceImportReference.clusterId`.
    pub member: String,
    pub member_client: kube::Client,
    /// The member's view of the hub client; only ever used inside `hub_namespace`.
    pub hub_client: kube::Client,
    pub hub_namespace: String,
    /// The replica's watch of the hub's InternalServiceImports.
    pub internals: HubTap<InternalServiceImport, InternalView>,
    /// Whether the forward half runs (`serviceimport`); the back half always does.
    pub forward: bool,
    /// Reconciles running at once, per half; 0: unbounded.
    pub concurrency: u16,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
}

impl MemberImports {
    fn of<S: Needs>(inputs: &MemberInputs<S>, forward: bool) -> Self {
        Self {
            internals: inputs.shared.hub_internals().clone(),
            member: inputs.member.clone(),
            member_client: inputs.member_client.clone(),
            hub_client: inputs.hub_client.clone(),
            hub_namespace: inputs.hub_namespace.clone(),
            forward,
            concurrency: inputs.concurrency,
            claim: inputs.claim.clone(),
            observer: inputs.observer.clone(),
        }
    }

    fn start(self, imports: &mut Tap<ServiceImport>, shutdown: CancellationToken) -> Running {
        let (run, synced) = self.run(imports, shutdown.cancelled_owned());
        Running::new(run, synced)
    }

    /// Builds the halves. Returns the future that runs them until `shutdown` resolves
    /// (in-flight reconciles finish first) and the handle that tells when the watches synced.
    pub fn run(
        self,
        imports: &mut Tap<ServiceImport>,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) -> (futures::future::BoxFuture<'static, ()>, Synced) {
        let hub: Api<InternalServiceImport> =
            Api::namespaced(self.hub_client.clone(), &self.hub_namespace);
        let job = if self.forward { NAME } else { BACK_NAME };
        let health = Arc::new(WatchHealth::new(&self.member, job, self.observer.clone()));
        let forward_pace = self.forward.then(|| Arc::new(Pace::new(self.concurrency)));
        let back_pace = Arc::new(Pace::new(self.concurrency));
        let paces = views::Paces {
            forward: forward_pace.clone(),
            back: back_pace.clone(),
        };
        let internals = self.internals.subscribe(&self.hub_namespace);
        let (views, triggers) = views::Views::watch(imports, internals, &health, paces);
        let synced = health.synced(None, &views::WATCHED);
        let ctx = Arc::new(Context {
            member: self.member,
            member_client: self.member_client,
            hub,
            hub_namespace: self.hub_namespace,
            imports: views.imports.clone(),
            internals: views.internals.clone(),
            claim: self.claim.clone(),
            observer: self.observer,
            views: synced.clone(),
            forward_failures: Streaks::default(),
            back_failures: Streaks::default(),
            own_imports: OwnWrites::default(),
            own_internals: OwnWrites::default(),
            engaged: jiff::Timestamp::now(),
        });
        let stop = shutdown.boxed().shared();
        let back = Runner::over(&back_pace, views.internals, ctx.clone()).paced(
            self.claim.clone(),
            stop.clone(),
            reconcile::back,
            reconcile::back_policy,
        );
        let forward = forward_pace.map(|pace| {
            Runner::over(&pace, views.imports, ctx).paced(
                self.claim.clone(),
                stop.clone(),
                reconcile::forward,
                reconcile::forward_policy,
            )
        });
        let halves = async move {
            let forward = async move {
                if let Some(forward) = forward {
                    forward.await;
                }
            };
            futures::future::join(back, forward).await;
        };
        (beside(halves, triggers).boxed(), synced)
    }
}
