//! The replica's watches of the hub: one per hub kind a running job reads, for every member
//! ([`HubTap`]), each object kept as the job that reads it keeps it. Beside the registry,
//! above the jobs (it names what each keeps); a member's jobs subscribe to its namespace.

use crate::api::{
    EndpointSliceExport, EndpointSliceImport, InternalMemberCluster, InternalServiceExport,
    InternalServiceImport,
};
use crate::controller::hub_tap::HubTap;
use crate::export::IseView;
use crate::service_imports::InternalView;
use crate::slices::ExportView;
use crate::{export, membership, service_imports, slice_imports, slices};

/// The replica's hub watches, before and while they run; cloned freely (one watch each).
#[derive(Clone)]
pub struct HubWatches {
    /// The InternalServiceExports (the ServiceExport job's).
    pub ises: HubTap<InternalServiceExport, IseView>,
    /// The EndpointSliceExports (the EndpointSlice jobs').
    pub slice_exports: HubTap<EndpointSliceExport, ExportView>,
    /// The InternalServiceImports (the ServiceImport jobs').
    pub internal_imports: HubTap<InternalServiceImport, InternalView>,
    /// The EndpointSliceImports (the EndpointSliceImport job's).
    pub slice_imports: HubTap<EndpointSliceImport, EndpointSliceImport>,
    /// The InternalMemberClusters (the membership job's).
    pub member_clusters: HubTap<InternalMemberCluster, InternalMemberCluster>,
}

impl HubWatches {
    /// The watches of `hub`; each watches only if a job that `runs` (by name) reads its kind.
    pub fn of(hub: &kube::Client, runs: impl Fn(&str) -> bool) -> Self {
        let runs = |names: &[&str]| names.iter().any(|n| runs(n));
        Self {
            ises: export::hub_tap(hub, runs(&[export::NAME])),
            slice_exports: slices::hub_tap(hub, runs(&[slices::NAME, slices::CLEANUP_NAME])),
            internal_imports: service_imports::hub_tap(
                hub,
                runs(&[service_imports::NAME, service_imports::BACK_NAME]),
            ),
            slice_imports: slice_imports::hub_tap(hub, runs(&[slice_imports::NAME])),
            member_clusters: membership::hub_tap(hub, runs(&[membership::NAME])),
        }
    }

    /// The registry's members' hub namespaces ([`HubTap::members`]); `complete`: every source
    /// of members was read.
    pub fn members(&self, namespaces: &[String], complete: bool) {
        self.ises.members(namespaces, complete);
        self.slice_exports.members(namespaces, complete);
        self.internal_imports.members(namespaces, complete);
        self.slice_imports.members(namespaces, complete);
        self.member_clusters.members(namespaces, complete);
    }

    /// Runs the watches a job reads until `shutdown` is cancelled.
    pub async fn run(self, shutdown: tokio_util::sync::CancellationToken) {
        let stop = || shutdown.clone().cancelled_owned();
        futures::join!(
            self.ises.run(stop()),
            self.slice_exports.run(stop()),
            self.internal_imports.run(stop()),
            self.slice_imports.run(stop()),
            self.member_clusters.run(stop()),
        );
    }
}
