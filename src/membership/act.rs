//! The membership job's API calls: the member probe, the status write (hub), and the leave's
//! cleanup (member).

use std::fmt::Debug;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde::de::DeserializeOwned;

use super::context::Context;
use super::decide::Cleanup;
use super::error::{Error, Step};
use crate::api::{
    InternalMemberCluster, InternalMemberClusterStatus, MultiClusterService, ServiceExport,
    ServiceExportVersion,
};
use crate::controller::{ApiFailure, only_uid};

/// How many objects one pass of a leave's cleanup lists and deletes: a member with more is
/// cleaned over several passes, each bounded.
const PAGE: u32 = 500;

/// Whether the member's API server answers (`/version`): a member that does not gets no
/// heartbeat, so fleet sees it gone, as it would see its agent gone.
pub(super) async fn probe(ctx: &Context, imc: &InternalMemberCluster) -> Result<(), Error> {
    match ctx.member_client.apiserver_version().await {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::Unreachable {
            member: ctx.member.clone(),
            namespace: ctx.hub_namespace.clone(),
            name: imc.name_any(),
            source: Box::new(e),
        }),
    }
}

/// Writes `status` over `imc` (as of its resourceVersion: a concurrent writer's change is never
/// lost, it is refused with a 409) and remembers what was written.
pub(super) async fn write_status(
    ctx: &Context,
    imc: &InternalMemberCluster,
    status: InternalMemberClusterStatus,
) -> Result<Arc<InternalMemberCluster>, Error> {
    let name = imc.name_any();
    let mut next = imc.clone();
    next.status = Some(status);
    let written = ctx
        .hub
        .replace_status(&name, &PostParams::default(), &next)
        .await
        .map_err(ApiFailure::of(
            &ctx.member,
            &ctx.hub_namespace,
            &name,
            Step::UpdateStatus,
        ))?;
    let written = Arc::new(written);
    let superseded = imc.metadata.resource_version.clone();
    ctx.own.wrote(name.clone(), [superseded], written.clone());
    let ours = ctx
        .agents
        .names()
        .filter_map(|agent| {
            let beat = written
                .agent_status(agent)?
                .last_received_heartbeat
                .as_ref()?;
            Some((agent, beat.0))
        })
        .collect();
    ctx.heartbeats.lock().insert(name, ours);
    Ok(written)
}

/// The object as the API has it now (`None`: gone).
pub(super) async fn read_live(
    ctx: &Context,
    name: &str,
) -> Result<Option<InternalMemberCluster>, Error> {
    ctx.hub.get_opt(name).await.map_err(|e| {
        Error::from(ApiFailure::of(
            &ctx.member,
            &ctx.hub_namespace,
            name,
            Step::GetInternalMemberCluster,
        )(e))
    })
}

/// One pass of the `cleanup` step: deletes what is there and not deleting yet; how many objects
/// this pass found, 0 when nothing is left (the reference waits until every object it deleted
/// is gone).
pub(super) async fn clean(ctx: &Context, cleanup: Cleanup) -> Result<usize, Error> {
    match cleanup {
        Cleanup::MultiClusterServices => {
            let client = ctx.member_client.clone();
            let steps = (
                Step::ListMultiClusterServices,
                Step::DeleteMultiClusterService,
            );
            drain(
                ctx,
                Api::<MultiClusterService>::all(client.clone()),
                |ns| Api::namespaced(client.clone(), ns),
                steps,
            )
            .await
        }
        Cleanup::ServiceExports => {
            let version = se_version(ctx).await?;
            let client = ctx.member_client.clone();
            let steps = (Step::ListServiceExports, Step::DeleteServiceExport);
            drain(
                ctx,
                Api::<ServiceExport>::all_with(client.clone(), &version),
                |ns| Api::namespaced_with(client.clone(), ns, &version),
                steps,
            )
            .await
        }
    }
}

/// The ServiceExport version the member serves (discovered once).
async fn se_version(ctx: &Context) -> Result<ServiceExportVersion, Error> {
    ctx.se_version
        .get_or_try_init(|| async {
            ServiceExportVersion::discover(&ctx.member_client)
                .await
                .map_err(|reason| Error::NoServiceExports {
                    member: ctx.member.clone(),
                    reason,
                })
        })
        .await
        .copied()
}

/// Deletes each object `all` lists that is not deleting yet (only that object: one created
/// since under its name is the next pass's); how many it listed, 0 when none is left. A kind
/// the member does not serve has nothing to clean up.
async fn drain<K>(
    ctx: &Context,
    all: Api<K>,
    namespaced: impl Fn(&str) -> Api<K>,
    (list_step, delete_step): (Step, Step),
) -> Result<usize, Error>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let failed = |step, ns: &str, name: &str| ApiFailure::of(&ctx.member, ns, name, step);
    let listed = match all.list(&ListParams::default().limit(PAGE)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::debug!("not served by the member: nothing to clean up");
            return Ok(0);
        }
        listed => listed.map_err(failed(list_step, "", ""))?,
    };
    let mut deleted = 0;
    for object in listed
        .items
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
    {
        let (ns, name) = (object.namespace().unwrap_or_default(), object.name_any());
        match namespaced(&ns)
            .delete(&name, &only_uid(object.meta().uid.clone()))
            .await
        {
            Ok(_) => deleted += 1,
            // Gone already, or its name taken by a new object (deleted next pass).
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(failed(delete_step, &ns, &name)(e).into()),
        }
    }
    if listed.items.is_empty() {
        return Ok(0);
    }
    let found = listed.items.len()
        + usize::try_from(listed.metadata.remaining_item_count.unwrap_or(0)).unwrap_or(0);
    tracing::info!(
        step = crate::controller::Step::as_str(list_step),
        listed = listed.items.len(),
        deleted,
        "leaving: deleted the member's objects; waiting until they are gone"
    );
    if deleted == 0 {
        // Every object listed was deleting already: still there, no need to look again.
        return Ok(found);
    }
    // Objects without finalizers are gone at once: no second pass for them.
    let left = all
        .list(&ListParams::default().limit(1))
        .await
        .map_err(failed(list_step, "", ""))?;
    Ok(if left.items.is_empty() { 0 } else { found })
}
