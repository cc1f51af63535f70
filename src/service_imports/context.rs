//! What every reconcile of one member's ServiceImports and InternalServiceImports shares.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use super::model::{ImportView, InternalView};
use crate::api::InternalServiceImport;
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ReconcileObserver, Synced};

/// Shared by every reconcile of one member's imports, of both halves.
pub(crate) struct Context {
    pub(super) member: String,
    pub(super) member_client: kube::Client,
    /// The hub writer, scoped to the member's namespace.
    pub(super) hub: Api<InternalServiceImport>,
    pub(super) hub_namespace: String,
    /// The member's ServiceImports, all namespaces.
    pub(super) imports: Store<ImportView>,
    pub(super) internals: Store<InternalView>,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub(super) claim: crate::ownership::Claim,
    pub(super) observer: Arc<dyn ReconcileObserver>,
    pub(super) views: Synced,
    pub(super) forward_failures: Streaks<ObjectRef<ImportView>>,
    pub(super) back_failures: Streaks<ObjectRef<InternalView>>,
    pub(super) own_imports: OwnWrites<ObjectRef<ImportView>, Option<ImportView>>,
    pub(super) own_internals: OwnWrites<String, Option<InternalView>>,
    /// When the job started for the member: what the agent wrote before is adopted, what it
    /// writes after is another writer's ([`crate::controller::writers`]).
    pub(super) engaged: jiff::Timestamp,
}
