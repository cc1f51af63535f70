//! The member's watches of the kinds several jobs read (Services, EndpointSlices,
//! MultiClusterServices, ServiceImports): one each per member, whichever jobs read it, each
//! job keeping its own view of it ([`Tap`]). Below the jobs; the ServiceExports are
//! [`crate::service_exports`]'s.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;

use crate::api::{MultiClusterService, ServiceImport};
use crate::controller::tap::Tap;

/// The member's shared watches, before they run. One that no running job reads does not watch.
pub struct MemberWatches {
    /// Every Service of the member.
    pub services: Tap<Service>,
    /// Every EndpointSlice of the member.
    pub endpoint_slices: Tap<EndpointSlice>,
    /// Every MultiClusterService of the member.
    pub multi_cluster_services: Tap<MultiClusterService>,
    /// Every ServiceImport of the member.
    pub service_imports: Tap<ServiceImport>,
}

impl MemberWatches {
    /// The watches of the member through `client` (each reading job's health hears of them).
    pub fn of(client: &kube::Client) -> Self {
        Self {
            services: Tap::over(Api::all(client.clone())),
            endpoint_slices: Tap::over(Api::all(client.clone())),
            multi_cluster_services: Tap::over(Api::all(client.clone())),
            service_imports: Tap::over(Api::all(client.clone())),
        }
    }

    /// Runs the watches some job reads until `shutdown` resolves.
    pub fn run(
        self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send {
        let Self {
            services,
            endpoint_slices,
            multi_cluster_services,
            service_imports,
        } = self;
        async move {
            futures::join!(
                services.run(shutdown.clone().cancelled_owned()),
                endpoint_slices.run(shutdown.clone().cancelled_owned()),
                multi_cluster_services.run(shutdown.clone().cancelled_owned()),
                service_imports.run(shutdown.cancelled_owned()),
            );
        }
    }
}
