//! What every reconcile of one member's ServiceExports shares.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};

use super::decide::{self, Settings};
use super::error::{Error, Step};
use super::projections;
use super::public_ip::PublicIpLookup;
use crate::api::{InternalServiceExport, ServiceExport, ServiceExportVersion};
use crate::controller::events::Events;
use crate::controller::own_writes::OwnWrites;
use crate::controller::streaks::Streaks;
use crate::controller::{ApiFailure, ReconcileObserver, Synced};
use crate::service_exports::ServiceExportView;

/// Shared by every reconcile of one member.
pub struct Context {
    pub member: String,
    pub settings: Settings,
    pub member_client: kube::Client,
    pub se_version: ServiceExportVersion,
    /// The hub writer, scoped to the member's namespace: it cannot address any other.
    pub hub: Api<InternalServiceExport>,
    pub hub_namespace: String,
    pub(super) services: Store<projections::ServiceView>,
    pub(super) ises: Store<projections::IseView>,
    pub(super) events: Events,
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// Whether this replica may write for the member (the hold its clients' fence reads).
    pub claim: crate::ownership::Claim,
    pub observer: Arc<dyn ReconcileObserver>,
    /// No reconcile decides before every view has listed once.
    pub(super) views: Synced,
    pub(super) failures: Streaks<ObjectRef<ServiceExport>>,
    /// Consecutive rechecks (a public IP not listed yet, a UID-mismatch unexport) per export.
    pub(super) rechecks: Streaks<ObjectRef<ServiceExport>>,
    /// ISEs (by name) and ServiceExports this exporter wrote that the views may not show yet.
    pub(super) own_ises: OwnWrites<String, Option<InternalServiceExport>>,
    pub(super) own_exports: OwnWrites<ObjectRef<ServiceExport>, ServiceExport>,
    /// The member's ServiceExports (the feed's store): the line for the export quota.
    pub(super) exports: Store<ServiceExportView>,
    /// When the job started for the member: what the agent wrote before is adopted, what it
    /// writes after is another writer's ([`crate::controller::writers`]).
    pub(super) engaged: jiff::Timestamp,
}

impl Context {
    /// This export's ISE, read live from the hub.
    pub(super) async fn read_ise(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<InternalServiceExport>, Error> {
        let read = self.hub.get_opt(&decide::ise_name(ns, name)).await;
        Ok(read.map_err(ApiFailure::of(
            &self.member,
            ns,
            name,
            Step::GetInternalServiceExport,
        ))?)
    }
}
