//! The MultiClusterService job, on the controller kit: fleet-networking's
//! `pkg/controllers/multiclusterservice` (`mcs-controller-manager`), run from the hub for each
//! member. Member-only: for each MultiClusterService a ServiceImport (same namespace, the name
//! its spec gives, the MCS its controller) and, once the hub's verdict on the import lists
//! clusters, a derived LoadBalancer Service `<namespace>-<name>` in the fleet system namespace;
//! its status tells which (`Valid`) and carries the Service's load balancer.
//!
//! One runner per member over its MultiClusterServices, triggered by them, by the
//! ServiceImports they control and by the derived Services (both MCS labels). Observe →
//! decide (pure, [`decide`]) → act.

mod act;
mod context;
pub mod decide;
mod error;
mod reconcile;
mod views;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use tokio_util::sync::CancellationToken;

pub use decide::{NAME, Outcome};
pub use error::{Error, Step};

use crate::api::{MultiClusterService, ServiceImport};
use crate::controller::events::Events;
use crate::controller::own_writes::OwnWrites;
use crate::controller::pace::Pace;
use crate::controller::runner::Runner;
use crate::controller::streaks::Streaks;
use crate::controller::tap::Tap;
use crate::controller::{Job, MemberInputs, Running};
use context::Context;

/// The MultiClusterService job, as the registry lists it.
pub struct MultiClusterServiceJob;

/// What the MultiClusterService job needs of a member beyond the kit's inputs.
pub trait Needs {
    /// The member namespace of derived Services (`--fleet-system-namespace`).
    fn fleet_system_namespace(&self) -> String;
    /// The member's shared watches of MultiClusterServices, ServiceImports and Services.
    fn watches(
        &mut self,
    ) -> (
        &mut Tap<MultiClusterService>,
        &mut Tap<ServiceImport>,
        &mut Tap<Service>,
    );
}

impl<S: Needs> Job<S> for MultiClusterServiceJob {
    fn name(&self) -> &'static str {
        NAME
    }

    fn start(&self, inputs: &mut MemberInputs<S>, shutdown: CancellationToken) -> Running {
        let fleet_system_namespace = inputs.shared.fleet_system_namespace();
        let member = inputs.member.clone();
        let health = inputs.health(NAME);
        let pace = Arc::new(Pace::new(inputs.concurrency));
        let (mcs, imports, services) = inputs.shared.watches();
        let taps = views::Taps {
            mcs,
            imports,
            services,
        };
        let views = views::Views::watch(taps, &fleet_system_namespace, &health, &pace);
        let synced = health.synced(None, &views::WATCHED);
        let (events, creator) = Events::new(
            inputs.events_client.clone(),
            inputs.instance.clone(),
            member.clone(),
            inputs.observer.clone(),
        );
        let ctx = Arc::new(Context {
            member: member.clone(),
            member_client: inputs.member_client.clone(),
            fleet_system_namespace,
            imports: views.imports,
            services: views.services,
            events,
            claim: inputs.claim.clone(),
            observer: inputs.observer.clone(),
            views: synced.clone(),
            failures: Streaks::default(),
            own_mcs: OwnWrites::default(),
            own_imports: OwnWrites::default(),
            own_services: OwnWrites::default(),
        });
        let reconciles = Runner::over(&pace, views.mcs, ctx).paced(
            inputs.claim.clone(),
            shutdown.cancelled_owned(),
            reconcile::reconcile,
            reconcile::error_policy,
        );
        let run = async move {
            reconciles.await;
            // Every reconcile is over and the context dropped: the queue closes once drained.
            creator.drain(&member).await;
        };
        Running::new(run, synced)
    }
}
