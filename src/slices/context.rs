//! What every reconcile of one member's EndpointSlices shares.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use super::model::{ExportView, SliceView};
use crate::api::{EndpointSliceExport, ServiceExportVersion};
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ReconcileObserver, Synced};
use crate::service_exports::ServiceExportView;

/// Shared by every reconcile of one member's slices.
pub(crate) struct Context {
    /// Which of the reference's two controllers this exporter runs.
    pub(super) halves: super::decide::Halves,
    pub(super) member: String,
    pub(super) member_client: kube::Client,
    pub(super) se_version: ServiceExportVersion,
    /// The hub writer, scoped to the member's namespace.
    pub(super) hub: Api<EndpointSliceExport>,
    pub(super) slices: Store<SliceView>,
    /// The feed's; a slice's export verdict is read from it.
    pub(super) exports: Store<ServiceExportView>,
    pub(super) hub_view: Store<ExportView>,
    pub(super) hub_namespace: String,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub(super) claim: crate::ownership::Claim,
    pub(super) observer: Arc<dyn ReconcileObserver>,
    pub(super) views: Synced,
    /// Consecutive failures per slice; cleared on success, forgotten an hour after the last.
    pub(super) failures: Streaks<ObjectRef<SliceView>>,
    pub(super) own_slices: OwnWrites<ObjectRef<SliceView>, SliceView>,
    pub(super) own_exports: OwnWrites<String, Option<ExportView>>,
    pub(super) max_export_bytes: u32,
    /// When the job started for the member: what the agent wrote before is adopted, what it
    /// writes after is another writer's ([`crate::controller::writers`]).
    pub(super) engaged: jiff::Timestamp,
}
