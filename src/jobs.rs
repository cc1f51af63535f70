//! The registry: every job the hub runs for each member, in one list ([`JOBS`]) that
//! `--controllers` reads, and what the jobs share beyond the kit ([`Shared`]). Above the kit
//! and the jobs: the one place that names them all.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::api::{
    EndpointSliceExport, EndpointSliceImport, InternalMemberCluster, InternalServiceExport,
    InternalServiceImport, MultiClusterService, ServiceImport,
};
use crate::controller::hub_tap::HubTap;
use crate::controller::tap::Tap;
use crate::controller::{Job, MemberInputs};
use crate::export::{self, IseView, PublicIpLookup, ServiceExportJob};
use crate::hub_watches::HubWatches;
use crate::member_watches::MemberWatches;
use crate::membership::{self, MembershipJob};
use crate::multicluster::{self, MultiClusterServiceJob};
use crate::service_exports::ServiceExportFeed;
use crate::service_imports::{self, InternalServiceImportJob, InternalView, ServiceImportJob};
use crate::slice_imports::{self, EndpointSliceImportJob};
use crate::slices::{self, EndpointSliceExportJob, EndpointSliceJob, ExportView};

/// Every job, in the order a member starts them. A new job is its folder and one line here.
pub static JOBS: &[&dyn Job<Shared>] = &[
    &ServiceExportJob,
    &EndpointSliceJob,
    &EndpointSliceExportJob,
    &ServiceImportJob,
    &InternalServiceImportJob,
    &EndpointSliceImportJob,
    &MultiClusterServiceJob,
    &MembershipJob,
];

/// What a member gives its jobs beyond the kit's inputs: the watch they share and the
/// settings of each.
pub struct Shared {
    /// The member's one ServiceExport watch.
    pub service_exports: ServiceExportFeed,
    /// The member's one watch of each other kind several jobs read.
    pub member_watches: MemberWatches,
    /// The replica's one watch of each hub kind, every member's namespace in it.
    pub hub_watches: HubWatches,
    /// The ServiceExport job's settings for the member.
    pub export_settings: export::Settings,
    /// Traffic Manager lookups for the member; `None` when the feature is off.
    pub public_ips: Option<Arc<dyn PublicIpLookup>>,
    /// The most bytes one EndpointSliceExport may have (`--max-export-bytes`).
    pub max_export_bytes: u32,
    /// The member namespace of derived Services and imported EndpointSlices
    /// (`--fleet-system-namespace`).
    pub fleet_system_namespace: String,
    /// Which networking agents the membership job reports for (`--agent-types`).
    pub agent_types: crate::api::AgentTypes,
    /// The jobs that run (`--controllers`): jobs that share an exporter look at each other.
    pub controllers: Controllers,
}

/// What a member gives each job.
pub type Inputs = MemberInputs<Shared>;

impl export::Needs for Shared {
    fn service_exports(&mut self) -> &mut ServiceExportFeed {
        &mut self.service_exports
    }

    fn export_settings(&self) -> (export::Settings, Option<Arc<dyn PublicIpLookup>>) {
        (self.export_settings.clone(), self.public_ips.clone())
    }

    fn services(&mut self) -> &mut Tap<Service> {
        &mut self.member_watches.services
    }

    fn hub_ises(&self) -> &HubTap<InternalServiceExport, IseView> {
        &self.hub_watches.ises
    }
}

impl slices::Needs for Shared {
    fn service_exports(&mut self) -> &mut ServiceExportFeed {
        &mut self.service_exports
    }

    fn endpoint_slices(&mut self) -> &mut Tap<EndpointSlice> {
        &mut self.member_watches.endpoint_slices
    }

    fn max_export_bytes(&self) -> u32 {
        self.max_export_bytes
    }

    fn runs(&self, job: &str) -> bool {
        self.controllers.runs(job)
    }

    fn hub_exports(&self) -> &HubTap<EndpointSliceExport, ExportView> {
        &self.hub_watches.slice_exports
    }
}

impl service_imports::Needs for Shared {
    fn service_import_job_runs(&self) -> bool {
        self.controllers.runs(service_imports::NAME)
    }

    fn service_imports(&mut self) -> &mut Tap<ServiceImport> {
        &mut self.member_watches.service_imports
    }

    fn hub_internals(&self) -> &HubTap<InternalServiceImport, InternalView> {
        &self.hub_watches.internal_imports
    }
}

impl multicluster::Needs for Shared {
    fn fleet_system_namespace(&self) -> String {
        self.fleet_system_namespace.clone()
    }

    fn watches(
        &mut self,
    ) -> (
        &mut Tap<MultiClusterService>,
        &mut Tap<ServiceImport>,
        &mut Tap<Service>,
    ) {
        let w = &mut self.member_watches;
        (
            &mut w.multi_cluster_services,
            &mut w.service_imports,
            &mut w.services,
        )
    }
}

impl membership::Needs for Shared {
    fn agent_types(&self) -> crate::api::AgentTypes {
        self.agent_types
    }

    fn hub_member_clusters(&self) -> &HubTap<InternalMemberCluster, InternalMemberCluster> {
        &self.hub_watches.member_clusters
    }
}

impl slice_imports::Needs for Shared {
    fn fleet_system_namespace(&self) -> &str {
        &self.fleet_system_namespace
    }

    fn watches(
        &mut self,
    ) -> (
        &mut Tap<MultiClusterService>,
        &mut Tap<Service>,
        &mut Tap<EndpointSlice>,
    ) {
        let w = &mut self.member_watches;
        (
            &mut w.multi_cluster_services,
            &mut w.services,
            &mut w.endpoint_slices,
        )
    }

    fn hub_imports(&self) -> &HubTap<EndpointSliceImport, EndpointSliceImport> {
        &self.hub_watches.slice_imports
    }
}

/// The jobs that run for every member (`--controllers`): a fleet can move from the member
/// agents one job at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Controllers {
    /// Bit `i`: `JOBS[i]` runs.
    selected: u64,
}

impl Default for Controllers {
    /// Every job.
    fn default() -> Self {
        Self {
            selected: (1 << JOBS.len()) - 1,
        }
    }
}

impl std::fmt::Display for Controllers {
    /// The names of the jobs that run, comma-separated, as `--controllers` takes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.selected().map(|job| job.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl Controllers {
    /// The names `--controllers` takes, in the registry's order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        JOBS.iter().map(|job| job.name())
    }

    /// Parses a comma-separated list of [`Controllers::names`] (at least one).
    pub fn parse(list: &str) -> Result<Self, String> {
        let known = || Self::names().collect::<Vec<_>>().join(", ");
        let mut selected = 0;
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match Self::names().position(|known| known == name) {
                Some(i) => selected |= 1 << i,
                None => return Err(format!("unknown controller {name:?}; known: {}", known())),
            }
        }
        if selected == 0 {
            return Err(format!("no controller named; known: {}", known()));
        }
        Ok(Self { selected })
    }

    /// Whether the job named `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        self.selected().any(|job| job.name() == name)
    }

    /// The jobs that run, in the registry's order.
    pub fn selected(&self) -> impl Iterator<Item = &'static dyn Job<Shared>> + use<> {
        let selected = self.selected;
        JOBS.iter()
            .enumerate()
            .filter(move |(i, _)| selected & (1 << i) != 0)
            .map(|(_, job)| *job)
    }
}

#[cfg(test)]
mod tests {
    use super::Controllers;

    /// Every job, in the registry's order, as `--controllers` spells it.
    const KNOWN: [&str; 8] = [
        "serviceexport",
        "endpointslice",
        "endpointsliceexport",
        "serviceimport",
        "internalserviceimport",
        "endpointsliceimport",
        "multiclusterservice",
        "internalmembercluster",
    ];

    #[test]
    fn controllers_are_named_one_by_one_and_unknown_names_are_refused() {
        assert_eq!(
            Controllers::parse(&KNOWN.join(",")),
            Ok(Controllers::default())
        );
        let imports = Controllers::parse("internalserviceimport").expect("parses");
        assert!(imports.runs("internalserviceimport") && !imports.runs("serviceimport"));
        let slices_only = Controllers::parse(" endpointslice ").expect("parses");
        assert!(slices_only.runs("endpointslice") && !slices_only.runs("serviceexport"));
        let e = Controllers::parse("serviceexport,endpointslices").expect_err("typo");
        assert_eq!(
            e,
            format!(
                "unknown controller \"endpointslices\"; known: {}",
                KNOWN.join(", ")
            )
        );
        assert_eq!(
            Controllers::parse("").expect_err("none"),
            format!("no controller named; known: {}", KNOWN.join(", "))
        );
    }

    /// The contract of every job's error of a failed API call, stated once for all of them.
    #[test]
    fn every_jobs_error_names_member_object_and_step_and_honours_retry_after() {
        use crate::controller::reconcile_tests::api_error_of;
        use crate::{export, membership, multicluster, service_imports, slice_imports, slices};
        api_error_of::<_, export::Error>(export::Step::PatchStatus, "");
        let slice = slices::Step::CreateEndpointSliceExport;
        api_error_of::<_, slices::Error>(slice, "EndpointSlice ");
        let import = service_imports::Step::AddFinalizer;
        api_error_of::<_, service_imports::Error>(import, "ServiceImport ");
        let copy = service_imports::Step::CreateInternalServiceImport;
        api_error_of::<_, service_imports::Error>(copy, "InternalServiceImport ");
        let slice_import = slice_imports::Step::CreateEndpointSlice;
        api_error_of::<_, slice_imports::Error>(slice_import, "EndpointSliceImport ");
        let mcs = multicluster::Step::CreateService;
        api_error_of::<_, multicluster::Error>(mcs, "MultiClusterService ");
        api_error_of::<_, membership::Error>(membership::Step::UpdateStatus, "");
    }
}
