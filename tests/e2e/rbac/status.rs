//! The status view's workload (memberstatuses), on member-1: its MemberStatus created once the
//! member has settled, then changed (applied) when a job fails — its hub CRD deleted, last of
//! the walks. Its deletion is `exports::remove_member`'s (the cleanup of member-2).

use fleetnet_hub::status;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;

use super::*;

pub(super) async fn walk(w: &Walk) {
    let api: Api<DynamicObject> = Api::namespaced_with(w.hub.clone(), &w.ns1, &status::resource());
    let failing = |failing: &'static str| {
        let api = api.clone();
        async move {
            let object = api.get_opt(status::NAME).await.ok().flatten()?;
            (object.data["status"]["failingJobs"]
                .as_str()
                .unwrap_or_default()
                == failing)
                .then_some(())
        }
    };
    eventually("member-1's MemberStatus", || failing("")).await;
    let crds: Api<CustomResourceDefinition> = Api::all(w.hub.clone());
    crds.delete(
        "endpointsliceexports.networking.fleet.azure.com",
        &DeleteParams::default(),
    )
    .await
    .expect("delete the EndpointSliceExport CRD");
    eventually("member-1's MemberStatus shows the failing job", || {
        failing("endpointslice")
    })
    .await;
}
