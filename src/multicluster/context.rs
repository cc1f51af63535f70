//! What every reconcile of one member's MultiClusterServices shares.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{MultiClusterService, ServiceImport};
use crate::controller::events::Events;
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ReconcileObserver, Synced};

/// Shared by every reconcile of one member's MultiClusterServices.
pub(crate) struct Context {
    pub(super) member: String,
    pub(super) member_client: kube::Client,
    /// Where derived Services live (`--fleet-system-namespace`).
    pub(super) fleet_system_namespace: String,
    pub(super) imports: Store<ServiceImport>,
    /// The derived Services: the fleet system namespace's Services with both MCS labels.
    pub(super) services: Store<Service>,
    pub(super) events: Events,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub(super) claim: crate::ownership::Claim,
    pub(super) observer: Arc<dyn ReconcileObserver>,
    /// No reconcile decides before every view has listed once.
    pub(super) views: Synced,
    pub(super) failures: Streaks<ObjectRef<MultiClusterService>>,
    /// What this job wrote that the views may not show yet: MultiClusterServices, imports by
    /// `(namespace, name)`, derived Services by name (`None`: deleted).
    pub(super) own_mcs: OwnWrites<ObjectRef<MultiClusterService>, MultiClusterService>,
    pub(super) own_imports: OwnWrites<(String, String), Option<ServiceImport>>,
    pub(super) own_services: OwnWrites<String, Option<Service>>,
}
