//! The EndpointSliceImport job (EndpointSliceImport → EndpointSlice), on the controller kit:
//! fleet-networking's member EndpointSliceImport controller, run from the hub. Observe →
//! decide (pure) → act.
//!
//! One runner per member over the EndpointSliceImports of its hub namespace, each imported
//! as an EndpointSlice of the same name in the member's fleet system namespace, attached to
//! the derived Service of the MultiClusterService that imports the import's Service. Also
//! triggered by the member's MultiClusterServices, the derived Services appearing or going,
//! and the imported slices themselves (edited or deleted by someone: put back).

mod act;
mod context;
pub mod decide;
mod error;
mod reconcile;
mod views;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

pub use decide::{NAME, Outcome};
pub use error::{Error, Step};

use crate::api::{EndpointSliceImport, MultiClusterService};
use crate::controller::hub_tap::HubTap;
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::runner::{Runner, beside};
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::{Job, MemberInputs, Running};
use context::Context;

/// The EndpointSliceImport job, as the registry lists it.
pub struct EndpointSliceImportJob;

/// What the EndpointSliceImport job needs of a member beyond the kit's inputs.
pub trait Needs {
    /// The member namespace of derived Services and imported slices
    /// (`--fleet-system-namespace`).
    fn fleet_system_namespace(&self) -> &str;
    /// The member's shared watches of MultiClusterServices, Services and EndpointSlices.
    fn watches(
        &mut self,
    ) -> (
        &mut Tap<MultiClusterService>,
        &mut Tap<Service>,
        &mut Tap<EndpointSlice>,
    );
    /// The replica's watch of the hub's EndpointSliceImports ([`hub_tap`]).
    fn hub_imports(&self) -> &HubTap<EndpointSliceImport, EndpointSliceImport>;
}

/// The replica's watch of the hub's EndpointSliceImports, kept whole but for their managed
/// fields; `read`: the job runs.
pub fn hub_tap(hub: &kube::Client, read: bool) -> HubTap<EndpointSliceImport, EndpointSliceImport> {
    HubTap::new(hub, crate::controller::tap::whole, read)
}

impl<S: Needs> Job<S> for EndpointSliceImportJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let fleet_namespace = inputs.shared.fleet_system_namespace().to_string();
        let hub: Api<EndpointSliceImport> = inputs.hub_api();
        let health = inputs.health(NAME);
        let pace = Arc::new(Pace::new(inputs.concurrency));
        let imported = inputs.shared.hub_imports().subscribe(&inputs.hub_namespace);
        let scope = views::Scope {
            hub_namespace: &inputs.hub_namespace,
            fleet_namespace: &fleet_namespace,
        };
        let (mcs, services, slices) = inputs.shared.watches();
        let taps = views::Taps {
            mcs,
            services,
            slices,
        };
        let (views, triggers) = views::Views::watch((&scope, imported), taps, &health, &pace);
        let synced = health.synced(None, &views::WATCHED);
        let ctx = Arc::new(Context {
            member: inputs.member.clone(),
            hub_namespace: inputs.hub_namespace.clone(),
            member_slices: Api::<EndpointSlice>::namespaced(
                inputs.member_client.clone(),
                &fleet_namespace,
            ),
            fleet_namespace,
            hub,
            imports: views.imports.clone(),
            multi_cluster_services: views.multi_cluster_services,
            services: views.services,
            slices: views.slices,
            claim: inputs.claim.clone(),
            observer: inputs.observer.clone(),
            views: synced.clone(),
            failures: Streaks::default(),
            own_imports: OwnWrites::default(),
            own_slices: OwnWrites::default(),
        });
        let reconciles = Runner::over(&pace, views.imports, ctx).paced(
            inputs.claim.clone(),
            shutdown.cancelled_owned(),
            reconcile::reconcile,
            reconcile::error_policy,
        );
        Running::new(beside(reconciles, triggers), synced)
    }
}
