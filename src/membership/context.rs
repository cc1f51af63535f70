//! What every reconcile of one member's InternalMemberCluster shares.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::Timestamp;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use super::decide::Cleanup;
use crate::api::{AgentTypes, InternalMemberCluster, ServiceExportVersion};
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ReconcileObserver, Synced};

/// Shared by every reconcile of one member's InternalMemberCluster.
pub(crate) struct Context {
    pub(super) member: String,
    pub(super) member_client: kube::Client,
    /// The hub writer, scoped to the member's namespace.
    pub(super) hub: Api<InternalMemberCluster>,
    pub(super) hub_namespace: String,
    pub(super) agents: AgentTypes,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub(super) claim: crate::ownership::Claim,
    pub(super) observer: Arc<dyn ReconcileObserver>,
    pub(super) views: Synced,
    /// Consecutive failures per object; cleared on success.
    pub(super) failures: Streaks<ObjectRef<InternalMemberCluster>>,
    /// How many times in a row a leave found what it deleted not gone yet, and no fewer of
    /// them than the pass before.
    pub(super) waiting: Streaks<String>,
    /// What the last pass of a leave found not gone yet, per object: its step and how many.
    pub(super) left: Mutex<HashMap<String, (Cleanup, usize)>>,
    /// Our status writes, read while the view is behind them.
    pub(super) own: OwnWrites<String, Arc<InternalMemberCluster>>,
    /// The heartbeat we last wrote per object and agent type: one newer than it is someone
    /// else's.
    pub(super) heartbeats: Mutex<HashMap<String, Vec<(&'static str, Timestamp)>>>,
    /// The ServiceExport version the member serves, discovered at the first leave.
    pub(super) se_version: OnceCell<ServiceExportVersion>,
}
