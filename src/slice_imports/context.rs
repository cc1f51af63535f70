//! What every reconcile of one member's EndpointSliceImports shares.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{EndpointSliceImport, MultiClusterService};
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ReconcileObserver, Synced};

/// Shared by every reconcile of one member's imports.
pub(crate) struct Context {
    pub(super) member: String,
    pub(super) hub_namespace: String,
    /// The member's fleet system namespace: derived Services and imported slices.
    pub(super) fleet_namespace: String,
    /// The hub writer, scoped to the member's namespace.
    pub(super) hub: Api<EndpointSliceImport>,
    /// The member writer, scoped to the fleet system namespace.
    pub(super) member_slices: Api<EndpointSlice>,
    pub(super) imports: Store<EndpointSliceImport>,
    pub(super) multi_cluster_services: Store<MultiClusterService>,
    /// The fleet system namespace's Services (metadata only).
    pub(super) services: Store<Service>,
    /// The slices this job imported (by their managed-by label).
    pub(super) slices: Store<EndpointSlice>,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub(super) claim: crate::ownership::Claim,
    pub(super) observer: Arc<dyn ReconcileObserver>,
    pub(super) views: Synced,
    /// Consecutive failures per import; cleared on success.
    pub(super) failures: Streaks<ObjectRef<EndpointSliceImport>>,
    pub(super) own_imports: OwnWrites<String, EndpointSliceImport>,
    pub(super) own_slices: OwnWrites<String, Option<EndpointSlice>>,
}
