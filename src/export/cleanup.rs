//! `--cleanup-on-remove`: a member that left the fleet has its exports withdrawn from the hub,
//! and its ServiceExports lose our finalizer where the member is still reachable. Best effort,
//! each side bounded in time.

use std::time::Duration;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

use crate::api::{EndpointSliceExport, InternalServiceExport, ServiceExport, ServiceExportVersion};
use crate::controller::delete_unless_gone;

const EACH_SIDE: Duration = Duration::from_secs(30);

/// Deletes every ISE and EndpointSliceExport in the member's hub namespace `hub_ns` (through
/// `hub`), then, with `member` (its client, when it could be built), drops our finalizer from
/// its ServiceExports. `Ok` once both sides are done; else what is left, naming the member.
pub async fn withdraw_member(
    name: &str,
    hub: kube::Client,
    hub_ns: &str,
    member: Result<kube::Client, String>,
) -> Result<(), String> {
    let ises: Api<InternalServiceExport> = Api::namespaced(hub.clone(), hub_ns);
    let slices: Api<EndpointSliceExport> = Api::namespaced(hub, hub_ns);
    let both = async {
        delete_all(&ises).await?;
        delete_all(&slices).await
    };
    let hub_side = match tokio::time::timeout(EACH_SIDE, both).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("hub namespace not cleaned: {e}")),
        Err(_) => Err(format!("hub namespace not cleaned within {EACH_SIDE:?}")),
    };
    match &hub_side {
        Ok(()) => tracing::info!(member = %name, "removed the member's exports from the hub"),
        Err(e) => tracing::warn!(member = %name, error = %e, "cleanup of the hub namespace failed"),
    }
    let member_side = async { release_finalizers(member?).await };
    let member_side = match tokio::time::timeout(EACH_SIDE, member_side).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("finalizers left in place: {e}")),
        Err(_) => Err(format!(
            "finalizers left in place: no answer within {EACH_SIDE:?}"
        )),
    };
    match &member_side {
        Ok(()) => {
            tracing::info!(member = %name, "removed finalizers from the member's ServiceExports")
        }
        Err(e) => tracing::warn!(member = %name, error = %e, "member cleanup failed"),
    }
    hub_side.and(member_side)
}

async fn delete_all<K>(hub: &Api<K>) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for object in hub.list(&ListParams::default()).await?.items {
        let name = object.meta().name.clone().unwrap_or_default();
        delete_unless_gone(hub, &name, &DeleteParams::default()).await?;
    }
    Ok(())
}

async fn release_finalizers(client: kube::Client) -> Result<(), String> {
    let version = ServiceExportVersion::discover(&client).await?;
    let all: Api<ServiceExport> = Api::all_with(client.clone(), &version);
    let list = all
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    for se in list
        .items
        .into_iter()
        .filter(ServiceExport::has_cleanup_finalizer)
    {
        let ns = se.metadata.namespace.clone().unwrap_or_default();
        let patch = se.finalizer_removal_patch(se.metadata.resource_version.as_deref());
        Api::<ServiceExport>::namespaced_with(client.clone(), &ns, &version)
            .patch(
                se.metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
